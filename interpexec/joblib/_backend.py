"""The joblib backend class (main interpreter only: it imports joblib)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any

try:
    import joblib  # type: ignore[import-not-found,import-untyped,unused-ignore]
except ImportError as exc:
    raise ImportError(
        "interpexec.joblib needs joblib: pip install 'interpexec[joblib]'", name=exc.name, path=exc.path
    ) from exc
from joblib._parallel_backends import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
    AutoBatchingMixin,
    FallbackToBackend,
    ParallelBackendBase,
    SequentialBackend,
)

from .._errors import RemoteTraceback
from .._executor import InterpreterPoolExecutor
from .._reusable import get_reusable_executor
from ._batch import ByValueError, dumps_batch, loads_results, run_batch

__all__ = ["BACKEND_NAME", "InterpreterBackend", "register"]

#: The name the backend is registered under.
BACKEND_NAME = "interpexec"

_JOBLIB_IN_WORKER = (
    "interpexec.joblib: a task ran joblib's code, which does not work in a subinterpreter (since joblib 1.5 it "
    "cannot even be imported there: loky imports faulthandler; and loky cannot start processes from one). So a "
    "task cannot call joblib.Parallel itself (nested Parallel calls are not supported), and its function must live "
    "in a module that does not import joblib at the top (functions defined in your script are sent by value with "
    "cloudpickle, so your script may import joblib)."
)

_NO_CLOUDPICKLE = (
    "interpexec.joblib: functions and classes defined in your script are sent by value, which needs cloudpickle "
    "(pip install cloudpickle; joblib 1.6 and later require it)"
)


class InterpreterBackend(AutoBatchingMixin, ParallelBackendBase):  # type: ignore[misc,unused-ignore]
    """A joblib backend that runs each batch of calls in a subinterpreter of
    interpexec's process-wide pool (:func:`interpexec.get_reusable_executor`).

    Registered as ``"interpexec"`` when :mod:`interpexec.joblib` is imported.
    ``idle_worker_timeout`` (seconds, as loky's) is how long an idle worker
    keeps its interpreter; ``None`` keeps the reusable pool's default.
    """

    supports_retrieve_callback = True  # results are fetched in the pool's callback
    supports_inner_max_num_threads = False
    supports_sharedmem = False  # every worker has its own objects
    uses_threads = False
    default_n_jobs = 1

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        *,
        idle_worker_timeout: float | None = None,
        **options: Any,
    ) -> None:
        if options:
            raise TypeError(
                f"unknown option(s) for the interpexec joblib backend: {', '.join(sorted(options))} "
                "(it accepts idle_worker_timeout)"
            )
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        self.idle_worker_timeout = idle_worker_timeout
        self._executor: InterpreterPoolExecutor | None = None
        self._lock = threading.Lock()
        self._futures: dict[Future[bytes], None] = {}  # this backend's unfinished batches, in submission order

    # ------------------------------------------------------------- set-up
    def effective_n_jobs(self, n_jobs: int | None) -> int:
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        if n_jobs < 0:
            n_jobs = max(joblib.cpu_count() + 1 + n_jobs, 1)
        return int(n_jobs)

    def configure(
        self,
        n_jobs: int = 1,
        parallel: Any = None,
        prefer: str | None = None,
        require: str | None = None,
        idle_worker_timeout: float | None = None,
        **backend_kwargs: Any,  # joblib's memmapping options: no use here
    ) -> int:
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        if idle_worker_timeout is None:
            idle_worker_timeout = self.idle_worker_timeout
        if idle_worker_timeout is None:
            self._executor = get_reusable_executor(n_jobs)
        else:
            self._executor = get_reusable_executor(n_jobs, idle_timeout=idle_worker_timeout)
        self.parallel = parallel
        return n_jobs

    def terminate(self) -> None:
        # The pool stays warm for the next call (as loky's reusable executor does).
        self._executor = None
        self.reset_batch_stats()

    # ------------------------------------------------------------ batches
    def submit(self, func: Any, callback: Any = None) -> Future[bytes]:
        """Send one batch (a joblib ``BatchedCalls``) to the pool: only its
        ``(func, args, kwargs)`` triples travel, never joblib's own objects."""
        items = getattr(func, "items", None)
        if items is None:  # a bare callable, not joblib's batch
            items = [(func, (), {})]
        future: Future[bytes]
        try:
            executor = self._executor
            if executor is None:
                raise RuntimeError("the interpexec joblib backend is not configured (no Parallel call is running)")
            blob, buffers = dumps_batch(list(items))
            future = executor.submit(run_batch, blob, *buffers)
        except Exception as exc:  # fail this batch, as a task's error would
            future = Future()
            future.set_running_or_notify_cancel()
            future.set_exception(exc)
        else:
            with self._lock:
                self._futures[future] = None
            future.add_done_callback(self._forget)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def apply_async(self, func: Any, callback: Any = None) -> Future[bytes]:
        """What joblib < 1.5 calls instead of :meth:`submit`."""
        return self.submit(func, callback)

    def _forget(self, future: Future[bytes]) -> None:
        with self._lock:
            self._futures.pop(future, None)

    def retrieve_result_callback(self, future: Future[bytes]) -> list[Any]:
        try:
            blob = future.result()
        except ByValueError as carrier:
            # A task's exception whose class came by value: rebuilt here as the
            # caller's own class, with the worker traceback as its cause.
            try:
                exc: BaseException = loads_results(carrier.blob)  # type: ignore[assignment]
            except Exception:
                raise carrier from None  # (its text is the worker traceback)
            from .._broken import RemoteTracebackCause  # (as the pool's own causes: see there)

            raise exc from RemoteTracebackCause('\n"""\n%s"""' % carrier.traceback_text)
        except Exception as exc:
            if _ran_joblib(exc):
                exc.add_note(_JOBLIB_IN_WORKER)
            elif isinstance(exc, AttributeError) and "__main__" in str(exc) and not _have_cloudpickle():
                exc.add_note(_NO_CLOUDPICKLE)
            raise
        return loads_results(blob)

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """A batch failed (or the caller stopped early): cancel the batches still
        queued and interrupt the running ones.  The pool itself stays usable.

        Latest first, so that a worker freed by an interrupted batch finds the
        batches behind it already cancelled.  Interrupting is asynchronous: a
        running batch stops at its next bytecode, which may come just after
        ``Parallel`` has raised."""
        with self._lock:
            pending = list(self._futures)
            self._futures.clear()
        executor = self._executor
        if executor is None:
            return
        for future in reversed(pending):
            executor.interrupt(future)


#: Where joblib's code lives: a worker traceback naming files there ran joblib.
_JOBLIB_DIR = os.path.dirname(os.path.abspath(joblib.__file__)) + os.sep


def _ran_joblib(exc: BaseException) -> bool:
    """Whether the worker traceback behind ``exc`` passes through joblib's code."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, RemoteTraceback) and _JOBLIB_DIR in cur.tb:
            return True
        cur = cur.__cause__
    return False


def _have_cloudpickle() -> bool:
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def register(make_default: bool = False) -> None:
    """Register the backend as ``"interpexec"`` (done on import); with
    ``make_default``, ``Parallel`` uses it unless told otherwise."""
    joblib.register_parallel_backend(BACKEND_NAME, InterpreterBackend, make_default=make_default)
