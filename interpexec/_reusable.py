"""A process-wide warm pool, as loky's ``get_reusable_executor`` offers."""

from __future__ import annotations

from typing import Any

from ._compat import INTERPRETER_MEMORY_FREED, RLock, lock_level, outer_level, release_if_owned
from ._executor import InterpreterPoolExecutor, default_max_workers

__all__ = ["get_reusable_executor"]

#: Default seconds an idle worker keeps its interpreter in the reusable pool.
#: None on 3.13, where giving an interpreter back leaks its memory instead
#: (see _compat.INTERPRETER_MEMORY_FREED): a service idle now and then grew
#: by megabytes at every idle period.
DEFAULT_IDLE_TIMEOUT: float | None = 300.0 if INTERPRETER_MEMORY_FREED else None

_lock = RLock()  # (the C RLock: release_if_owned can tell it is ours)
_executor: InterpreterPoolExecutor | None = None
_config: dict[str, Any] = {}


def get_reusable_executor(
    max_workers: int | None = None,
    *,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    reuse: bool | str = "auto",
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
    ``idle_timeout`` seconds release their interpreters and come back on demand
    (300 by default; on 3.13, where a released interpreter's memory is not
    given back, they keep them unless asked).

    ``max_workers=None`` keeps the current executor's size (one worker per
    CPU for the first): loky resizes its executor in place to one per CPU,
    which this one cannot do, and replacing it whenever callers alternate
    sizes (joblib always gives one) would make a new pool at every call.  As
    with loky, ``reuse=True`` keeps the current executor and its settings when
    other keyword arguments differ (a new ``max_workers`` then gets a new pool
    made with the current one's settings, as loky resizes keeping them), and
    ``reuse=False`` always makes a new one (``"auto"``, the default: reuse when
    they are the same).  Unlike loky 3.7+, which
    keeps one per thread, the executor is one for the whole process (it is
    thread-safe, and a pool per thread would multiply the interpreters).

    Do not call ``shutdown()`` on it unless you mean it for the whole process:
    the next call then creates a fresh one.
    """
    if reuse not in (True, False, "auto"):
        raise ValueError(f"reuse must be True, False or 'auto', not {reuse!r}")
    if reuse != "auto":
        reuse = bool(reuse)  # (1 and 0 as True and False, as loky takes them)
    level = lock_level(_lock)  # (not 0 in a signal handler run inside _get)
    try:
        return _get(max_workers, idle_timeout, reuse, kwargs)
    except BaseException:
        release_if_owned(_lock, outer_level(level))  # (a Ctrl-C right after `with _lock:` acquired)
        raise


def _get(
    max_workers: int | None, idle_timeout: float | None, reuse: bool | str, kwargs: dict[str, Any]
) -> InterpreterPoolExecutor:
    global _executor, _config
    with _lock:
        config = {"idle_timeout": idle_timeout, **kwargs}
        current = _executor
        if max_workers is None:
            max_workers = current.max_workers if current is not None and current.usable else default_max_workers()
        if current is not None and current.usable:
            if reuse is True:
                # Its settings, not this call's: loky resizes its executor in
                # place, keeping them; a new size here gets a new pool made
                # with them (its initializer still runs in every worker).
                config = _config
            if max_workers == current.max_workers and reuse is not False and config == _config:
                return current
        _executor = InterpreterPoolExecutor(max_workers, **config)
        _config = config
        return _executor
