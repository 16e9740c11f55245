"""The Dask worker plugin that installs an :class:`InterpreterTaskExecutor` on a worker.

Main interpreter only: its base class is distributed's ``WorkerPlugin`` (distributed
accepts only plugins that inherit from it), so importing this module imports
distributed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from distributed import Worker  # type: ignore[import-not-found,import-untyped,unused-ignore]
from distributed.diagnostics.plugin import WorkerPlugin  # type: ignore[import-not-found,import-untyped,unused-ignore]

from ._detect import load
from ._profiler import profiler_pause, quiet_worker_profiler
from ._task_executor import InterpreterTaskExecutor


class InterpreterWorkerPlugin(WorkerPlugin):  # type: ignore[misc,unused-ignore]
    """A Dask ``WorkerPlugin`` that runs tasks in subinterpreters: see
    ``InterpreterWorkerPlugin.__init__`` and :mod:`interpexec.dask`."""

    def __init__(
        self,
        executor: str = "default",
        *,
        max_workers: int | None = None,
        prestart: bool = True,
        **pool_kwargs: Any,
    ) -> None:
        """Install an interpreter pool on every worker.

        ``executor``: ``"default"`` runs every task of the worker in
        subinterpreters; any other name (conventionally ``"interpreters"``)
        adds a named executor that only tasks annotated with
        ``dask.annotate(executor=name)`` use, the rest staying on the worker's
        thread pool.  ``max_workers``: subinterpreters per worker (default: the
        worker's thread count).  ``prestart``: start them at setup rather than
        on the first task.  Other keywords (``task_timeout``, ``idle_timeout``,
        ``max_tasks_per_child``, ``initializer``, ``initargs``,
        ``interrupt_grace``) go to :class:`~interpexec.InterpreterPoolExecutor`.
        """
        if not isinstance(executor, str) or not executor:
            raise TypeError("executor must be a non-empty string")
        if executor in ("offload", "actor"):
            raise ValueError(f"the worker's {executor!r} executor runs distributed's own work; choose another name")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError("max_workers must be None or an integer >= 1")
        self.executor = executor
        self.max_workers = max_workers
        self.prestart = prestart
        self.pool_kwargs = pool_kwargs
        self.name = "interpexec" if executor == "default" else f"interpexec-{executor}"
        self._installed: InterpreterTaskExecutor | None = None
        self._previous: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_installed"] = state["_previous"] = None  # worker-local
        return state

    async def setup(self, worker: Worker) -> None:
        load()
        if not hasattr(worker, "executors"):
            raise TypeError(
                f"interpexec.dask installs on a Dask Worker, not on a {type(worker).__name__} "
                "(use --preload, not --preload-nanny)"
            )
        state = getattr(worker, "state", worker)
        nthreads = self.max_workers or int(getattr(state, "nthreads", 0) or getattr(worker, "nthreads", 1))
        fallback = worker.executors.get("default")
        profiler_pause.acquire()
        try:
            quiet_worker_profiler(worker)
            name = getattr(worker, "name", None)
            prefix = "Dask-Interpreter" if name is None else f"{name}-Dask-Interpreter"
            ex = InterpreterTaskExecutor(nthreads, fallback=fallback, thread_name_prefix=prefix, **self.pool_kwargs)
            try:
                if self.prestart:
                    await asyncio.get_running_loop().run_in_executor(None, ex.prestart)
            except BaseException:  # not swallowed: stop the half-started pool, then re-raise
                ex.shutdown(wait=False, cancel_futures=True)
                raise
        except BaseException:  # not swallowed: no pool, so let the profiler go on, then re-raise
            profiler_pause.release()
            raise
        self._previous = worker.executors.get(self.executor)
        worker.executors[self.executor] = ex
        self._installed = ex

    async def teardown(self, worker: Worker) -> None:
        ex, self._installed = self._installed, None
        if ex is None:
            return
        if worker.executors.get(self.executor) is ex:
            if self._previous is not None:
                worker.executors[self.executor] = self._previous
            else:
                del worker.executors[self.executor]
        self._previous = None
        # Unregistered from a running worker: let running tasks finish.  Worker
        # closing (restart, scale down): stop them; they are rescheduled.
        running = str(getattr(getattr(worker, "status", None), "name", "running")) == "running"
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: ex.shutdown(wait=True, cancel_futures=not running, interrupt_running=not running)
            )
        finally:
            profiler_pause.release()

    def __repr__(self) -> str:
        return f"InterpreterWorkerPlugin(executor={self.executor!r}, max_workers={self.max_workers!r})"
