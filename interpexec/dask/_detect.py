"""Which ``distributed`` is installed, and how its workers hand a task to an executor.

``Worker.execute`` sends a task to an executor whose type name contains
"ThreadPoolExecutor" through ``run_in_executor_with_context(e, _run_task, ...)``
(a lambda that also touches thread-local worker state), and to any other executor
through ``loop.run_in_executor(e, _run_task_simple, task, data, delay)``
(``apply_function_simple(function, args, kwargs, delay)`` before distributed
2024.11).  :func:`detect_shape` reads which of the two the installed version does
(from the names and string constants of distributed's code, since these runners
are private) and refuses any other shape.  Main interpreter only.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import distributed  # type: ignore[import-not-found,import-untyped,unused-ignore]
import distributed.worker  # type: ignore[import-not-found,import-untyped,unused-ignore]

from ._common import UnsupportedDistributedError

TASK_SPEC_PARAMS = ("task", "data", "time_delay")
LEGACY_PARAMS = ("function", "args", "kwargs", "time_delay")

#: What the worker's runner puts in its result dict (besides the error fields of
#: ``distributed.core.error_message``, which interpexec.dask calls itself).
_RESULT_KEYS = frozenset(("op", "status", "result", "nbytes", "type", "start", "stop", "thread"))
_EXCEPTION_KEYS = ("actual_exception", "actual-exception")  # distributed >= 2024.11, older


@dataclass(frozen=True)
class Runner:
    """How the installed distributed's workers call an executor that is not a thread pool."""

    version: str  #: ``distributed.__version__``
    shape: str  #: ``"task-spec"`` (distributed >= 2024.11) or ``"legacy"``
    function: Any  #: the worker's own task runner, which it submits to the executor
    params: tuple[str, ...]  #: that runner's parameters
    exception_key: str  #: the result-dict key of a failed task's exception


@functools.cache
def load() -> Runner:
    """The installed distributed's :class:`Runner` (worked out by the first call that succeeds).

    Raises :class:`UnsupportedDistributedError` when ``Worker.execute`` does not
    hand tasks to a non-thread-pool executor the way interpexec.dask understands.
    """
    version = getattr(distributed, "__version__", "?")
    shape, function, exception_key = detect_shape(distributed.worker, version)
    params = TASK_SPEC_PARAMS if shape == "task-spec" else LEGACY_PARAMS
    return Runner(version, shape, function, params, exception_key)


def _code_strings(fn: Any) -> set[str]:
    """The string constants of a function's code (tuples and nested code included)."""
    out: set[str] = set()
    stack: list[Any] = [getattr(fn, "__code__", None)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, tuple):
            stack.extend(item)
        elif hasattr(item, "co_consts"):
            stack.extend(item.co_consts)
    return out


def _params(fn: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # no signature to read: not the runner we know
        return ()


def detect_shape(worker_module: Any, version: str) -> tuple[str, Any, str]:
    """How ``worker_module.Worker.execute`` hands a task to an executor that is not
    a thread pool: ``("task-spec", _run_task_simple, key)`` (distributed >= 2024.11)
    or ``("legacy", apply_function_simple, key)`` (older), where ``key`` is the
    result-dict key of a failed task's exception; anything else is refused."""
    execute = inspect.unwrap(worker_module.Worker.execute)
    names = set(getattr(getattr(execute, "__code__", None), "co_names", ()))

    found: tuple[str, Any] | None = None
    runner = getattr(worker_module, "_run_task_simple", None)
    legacy = getattr(worker_module, "apply_function_simple", None)
    if runner is not None and "_run_task_simple" in names and _params(runner) == TASK_SPEC_PARAMS:
        found = ("task-spec", runner)
    elif legacy is not None and "apply_function_simple" in names and _params(legacy) == LEGACY_PARAMS:
        found = ("legacy", legacy)
    problem = ""
    if found is None:
        problem = (
            "its Worker.execute does not hand tasks to a custom executor as _run_task_simple(task, data, "
            "time_delay) (distributed >= 2024.11) nor as apply_function_simple(function, args, kwargs, "
            "time_delay) (older)"
        )
    else:
        written = _code_strings(found[1])
        read = _code_strings(execute)
        exc_keys = [k for k in _EXCEPTION_KEYS if k in written and k in read]
        missing = sorted(_RESULT_KEYS - written)
        if missing or len(exc_keys) != 1:
            problem = (
                f"its task runner {found[1].__name__}() returns a result dict interpexec.dask does not know "
                f"(missing keys {missing}, exception keys {exc_keys})"
            )
        else:
            return found[0], found[1], exc_keys[0]
    raise UnsupportedDistributedError(
        f"interpexec.dask does not support distributed {version}: {problem}. Tasks would not run in "
        "subinterpreters correctly, so interpexec.dask refuses to install; please report this "
        "distributed version to interpexec."
    )
