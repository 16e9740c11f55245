"""The executor a Dask worker sees: its tasks go to an interpreter pool.

The worker calls ``executor.submit(<its task runner>, *runner_args)`` (see
:mod:`._detect`).  :class:`InterpreterTaskExecutor` recognizes that call, turns the
task into ``function(*args, **kwargs)`` (or a plan) with :mod:`._translate`,
submits only that to its :class:`~interpexec.InterpreterPoolExecutor`, and
resolves the worker's future with the very result dict the worker's own runner
would have returned (:mod:`._report`).  Any other call runs on a fallback
executor in the worker's main interpreter.  Main interpreter only.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

from .. import BrokenInterpreterPool, InterpreterPoolExecutor
from ._common import EXECUTOR_NAME, UnsupportedDistributedError
from ._detect import load
from ._plan import NODES, Apply, is_plain, run_plan
from ._report import failure_msg, reschedule, success_msg
from ._translate import Unsupported, plan_of


class InterpreterTaskExecutor(Executor):
    """The executor a Dask worker sees: runs the worker's tasks in an
    :class:`~interpexec.InterpreterPoolExecutor` (its ``pool``) and returns what
    the worker's own task runner would."""

    def __init__(
        self,
        max_workers: int,
        *,
        fallback: Executor | None = None,
        thread_name_prefix: str = "Dask-Interpreter",
        **pool_kwargs: Any,
    ) -> None:
        """``max_workers`` subinterpreters run the worker's tasks.  Calls that are
        not tasks (the worker's disk and memory benchmarks, or code that submits
        its own functions to ``worker.executor``) run on ``fallback``, an executor
        in the worker's main interpreter (a private one-thread pool if None).
        ``pool_kwargs`` go to :class:`~interpexec.InterpreterPoolExecutor`."""
        self._runner = load()
        self._pool_args = dict(max_workers=max_workers, thread_name_prefix=thread_name_prefix, **pool_kwargs)
        self.pool = InterpreterPoolExecutor(**self._pool_args)
        self._fallback = fallback
        self._own_fallback: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def max_workers(self) -> int:
        return int(self._pool_args["max_workers"])

    def prestart(self) -> None:
        """Start every subinterpreter now (blocking until they are ready)."""
        self.pool.prestart(wait=True)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if fn is self._runner.function and not kwargs:
            return self._submit_task(fn, args)
        return self._submit_other(fn, args, kwargs)

    def _submit_other(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]:
        module = getattr(fn, "__module__", "") or ""
        name = getattr(fn, "__name__", "") or ""
        if module == "distributed.worker" and ("run_task" in name or "apply_function" in name):
            raise UnsupportedDistributedError(
                f"distributed {self._runner.version} submitted its task runner {name}() to a custom executor; "
                f"interpexec.dask expected {getattr(self._runner.function, '__name__', '?')}(). This distributed "
                "version is not supported."
            )
        fallback = self._fallback
        if fallback is None:
            with self._lock:
                if self._own_fallback is None:
                    self._own_fallback = ThreadPoolExecutor(1, thread_name_prefix="Dask-Interpreter-Fallback")
                fallback = self._own_fallback
        return fallback.submit(fn, *args, **kwargs)

    def _submit_task(self, fn: Any, args: tuple[Any, ...]) -> Future[Any]:
        key = self._runner.exception_key
        delay = args[-1] if args and isinstance(args[-1], (int, float)) else 0.0
        outer: Future[Any] = Future()
        outer.set_running_or_notify_cancel()
        start = time.time()
        try:
            plan = plan_of(self._runner, fn, args)
        except Unsupported as exc:
            err = UnsupportedDistributedError(
                f"interpexec.dask cannot run this task in a subinterpreter: it contains {exc} "
                f"(distributed {self._runner.version}). Run it on the worker's thread pool: install the plugin "
                f"with executor={EXECUTOR_NAME!r} and leave such tasks unannotated."
            )
            outer.set_result(failure_msg(err, start, time.time(), delay, key))
            return outer
        except Exception as exc:
            # Translating runs the task's own objects (a dependency missing from
            # data, a value node that raises): that error is this task's failure,
            # reported to the worker like any other.
            outer.set_result(failure_msg(exc, start, time.time(), delay, key))
            return outer
        if type(plan) not in NODES:
            # Nothing to call (an alias, literal data): no trip to a worker.
            outer.set_result(success_msg(plan, start, time.time(), delay))
            return outer
        if type(plan) is Apply and all(map(is_plain, plan.args)) and all(map(is_plain, plan.kwargs.values())):
            fn_, fargs, fkwargs = plan.func, plan.args, plan.kwargs  # the common case: f(*args, **kwargs)
        else:
            fn_, fargs, fkwargs = run_plan, (plan,), {}
        try:
            inner = self._pool_submit(fn_, fargs, fkwargs)
        except RuntimeError as exc:  # the pool is shut down: the plugin is being removed
            outer.set_result(failure_msg(reschedule(exc), start, time.time(), delay, key))
            return outer
        except Exception as exc:
            # Submitting pickles the function and arguments: an unpicklable one
            # fails this task (as it would in a process pool), not the worker.
            outer.set_result(failure_msg(exc, start, time.time(), delay, key))
            return outer
        inner.add_done_callback(lambda f: _finish(f, outer, start, delay, key))
        return outer

    def _pool_submit(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[Any]:
        try:
            return self.pool.submit(fn, *args, **kwargs)
        except BrokenInterpreterPool:
            # A worker loop died: replace the pool once, so one bad task does not
            # fail every later task on this Dask worker.
            with self._lock:
                if self._closed:
                    raise
                broken = self.pool
                self.pool = InterpreterPoolExecutor(**self._pool_args)
            broken.shutdown(wait=False, cancel_futures=True)
            return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False, interrupt_running: bool = False) -> None:
        with self._lock:
            self._closed = True
            own = self._own_fallback
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures, interrupt_running=interrupt_running)
        if own is not None:
            own.shutdown(wait=wait)

    def __repr__(self) -> str:
        return f"<InterpreterTaskExecutor max_workers={self.max_workers}>"


def _finish(inner: Future[Any], outer: Future[Any], start: float, delay: float, exception_key: str) -> None:
    """Turn the pool's future into the worker's result dict.  A done callback of
    ``inner``: it runs on the pool's result thread (or in the thread that
    cancels ``inner``), and it must end
    ``outer`` whatever happens, or the worker waits for the task forever."""
    stop = time.time()
    try:
        if inner.cancelled():
            # Stopped by shutdown(interrupt_running=True): the worker is closing;
            # let the scheduler run the task elsewhere.
            cause = RuntimeError("task stopped: the worker is closing")
            msg = failure_msg(reschedule(cause), start, stop, delay, exception_key)
        else:
            exc = inner.exception()
            if exc is None:
                msg = success_msg(inner.result(), start, stop, delay)
            elif isinstance(exc, (SystemExit, KeyboardInterrupt)):
                outer.set_exception(exc)  # as the worker's own runner: these pass through
                return
            else:
                msg = failure_msg(exc, start, stop, delay, exception_key)
    except Exception as exc:  # sizeof() of the result or error_message() of the error raised: report that
        try:
            msg = failure_msg(exc, start, stop, delay, exception_key)
        except Exception:  # that cannot be reported either: end the worker's future with the exception itself
            outer.set_exception(exc)
            return
    except BaseException as exc:  # a KeyboardInterrupt or SystemExit landed here: end the task, pass it on
        outer.set_exception(exc)
        raise
    outer.set_result(msg)
