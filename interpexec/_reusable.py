"""A process-wide warm pool, as loky's ``get_reusable_executor`` offers."""

from __future__ import annotations

from typing import Any

from ._compat import RLock, lock_level, outer_level, release_if_owned
from ._executor import InterpreterPoolExecutor

__all__ = ["get_reusable_executor"]

#: Default seconds an idle worker keeps its interpreter in the reusable pool.
DEFAULT_IDLE_TIMEOUT = 300.0

_lock = RLock()  # (the C RLock: release_if_owned can tell it is ours)
_executor: InterpreterPoolExecutor | None = None
_config: dict[str, Any] = {}


def get_reusable_executor(
    max_workers: int | None = None,
    *,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    **kwargs: Any,
) -> InterpreterPoolExecutor:
    """Return the process-wide reusable :class:`InterpreterPoolExecutor`.

    The same executor comes back on every call while it is usable.  A new one
    replaces it when it was shut down or broken, when ``max_workers`` asks for a
    different size, or when other keyword arguments (``initializer``,
    ``max_tasks_per_child``, ...) differ from the current one's.  The one it
    replaces is not shut down while anybody still holds it (another thread may
    just have received it and be about to submit): it stays usable, and shuts
    down by itself once nothing refers to it any more.  Workers idle for longer than
    ``idle_timeout`` seconds release their interpreters and come back on demand.

    Do not call ``shutdown()`` on it unless you mean it for the whole process:
    the next call then creates a fresh one.
    """
    level = lock_level(_lock)  # (not 0 in a signal handler run inside _get)
    try:
        return _get(max_workers, idle_timeout, kwargs)
    except BaseException:
        release_if_owned(_lock, outer_level(level))  # (a Ctrl-C right after `with _lock:` acquired)
        raise


def _get(max_workers: int | None, idle_timeout: float | None, kwargs: dict[str, Any]) -> InterpreterPoolExecutor:
    global _executor, _config
    with _lock:
        config = {"idle_timeout": idle_timeout, **kwargs}
        current = _executor
        if current is not None:
            same = config == _config and (max_workers is None or max_workers == current.max_workers)
            if current.usable and same:
                return current
            if max_workers is None:
                max_workers = current.max_workers
        _executor = InterpreterPoolExecutor(max_workers, **config)
        _config = config
        return _executor
