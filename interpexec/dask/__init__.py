"""Dask workers that run tasks in subinterpreters.

A Dask worker runs tasks on a ``concurrent.futures`` executor (a thread pool by
default: CPU-bound pure-Python tasks then take turns on the worker's GIL).  This
package installs an :class:`~interpexec.InterpreterPoolExecutor` on a worker,
sized to the worker's thread count, either as its default executor or as a named
one that tasks select with ``dask.annotate(executor="interpreters")``::

    from interpexec.dask import InterpreterWorkerPlugin
    client.register_plugin(InterpreterWorkerPlugin())                           # every task
    client.register_plugin(InterpreterWorkerPlugin(executor="interpreters"))    # annotated tasks

or from the command line, on each machine::

    dask worker tcp://scheduler:8786 --preload interpexec.dask

(``dask_setup``/``dask_teardown`` below; the dask config key ``interpexec.executor``,
e.g. ``DASK_INTERPEXEC__EXECUTOR=interpreters``, picks the named mode).

The worker hands each task to the installed :class:`InterpreterTaskExecutor` as a
call of its own task runner; the executor turns it into ``function(*args,
**kwargs)`` with its dependencies filled in (in the worker's main interpreter),
submits only that to the pool, and returns the very result dict the worker's own
runner would have.  So a subinterpreter imports the task's function and data,
never ``distributed`` (which needs C extensions, such as psutil, that refuse
subinterpreters).

Layout.  Worker interpreters import :mod:`._plan` (pickled plans refer to it),
which runs this ``__init__`` first: so it loads only :mod:`._common`, and the two
classes that need ``distributed`` or ``concurrent.futures`` are imported on first
use (module ``__getattr__``), in the worker's main interpreter.

- ``_common``: the constants and :class:`UnsupportedDistributedError`;
- ``_plan``: plan nodes and their evaluator, the only module workers run (stdlib only);
- ``_detect``: which task runner the installed distributed submits, or refusal;
- ``_translate``: a task (task spec or legacy tuples) turned into a call or a plan;
- ``_report``: the worker's result dicts, with the task's own traceback;
- ``_task_executor``: :class:`InterpreterTaskExecutor`;
- ``_profiler``: keeping distributed's profiler away from ``sys._current_frames()``;
- ``_plugin``: :class:`InterpreterWorkerPlugin`.
"""

from __future__ import annotations

from ._common import CONFIG_EXECUTOR, CONFIG_MAX_WORKERS, EXECUTOR_NAME, UnsupportedDistributedError

TYPE_CHECKING = False  # typing is not imported: worker interpreters run this module
if TYPE_CHECKING:
    from typing import Any

    from distributed import Worker  # type: ignore[import-not-found,import-untyped,unused-ignore]

    from ._plugin import InterpreterWorkerPlugin
    from ._task_executor import InterpreterTaskExecutor

__all__ = [
    "EXECUTOR_NAME",
    "InterpreterTaskExecutor",
    "InterpreterWorkerPlugin",
    "UnsupportedDistributedError",
    "dask_setup",
    "dask_teardown",
]


def __getattr__(name: str) -> object:
    value: object
    if name == "InterpreterTaskExecutor":
        from ._task_executor import InterpreterTaskExecutor as value
    elif name == "InterpreterWorkerPlugin":
        from ._plugin import InterpreterWorkerPlugin as value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


async def dask_setup(worker: Worker) -> None:
    """``dask worker SCHEDULER --preload interpexec.dask``: install the plugin.

    Dask config (or environment): ``interpexec.executor`` (``default``, or a name
    such as ``interpreters`` for the named mode; ``DASK_INTERPEXEC__EXECUTOR``),
    ``interpexec.max-workers`` (default: the worker's thread count;
    ``DASK_INTERPEXEC__MAX_WORKERS``).
    """
    # Imported here, not at the top: importing this package must not load dask.
    import inspect

    import dask  # type: ignore[import-not-found,import-untyped,unused-ignore]

    from ._plugin import InterpreterWorkerPlugin

    executor = dask.config.get(CONFIG_EXECUTOR, default="default") or "default"
    max_workers = dask.config.get(CONFIG_MAX_WORKERS, default=None)
    if max_workers is not None:
        max_workers = int(max_workers)
    plugin = InterpreterWorkerPlugin(executor=str(executor), max_workers=max_workers)
    if not hasattr(worker, "plugin_add"):
        raise TypeError(
            f"interpexec.dask is a worker preload; got a {type(worker).__name__} (use --preload, not --preload-nanny)"
        )
    kwargs: dict[str, Any] = {"plugin": plugin, "name": plugin.name}
    if "catch_errors" in inspect.signature(worker.plugin_add).parameters:
        kwargs["catch_errors"] = False
    await worker.plugin_add(**kwargs)


async def dask_teardown(worker: Worker) -> None:
    """Counterpart of :func:`dask_setup`: remove the worker's interpexec plugins
    (the worker also removes plugins itself when it closes)."""
    from ._plugin import InterpreterWorkerPlugin  # loaded already: dask_setup used it

    plugins = getattr(worker, "plugins", {})
    for name, plugin in list(plugins.items()):
        if isinstance(plugin, InterpreterWorkerPlugin):
            await worker.plugin_remove(name=name)
