"""The public executor: ``concurrent.futures`` semantics on top of :class:`Pool`.

See :mod:`interpexec._pool` for the data flow.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import time
import weakref
from concurrent.futures import Executor

from . import _compat, _shared, _stopping
from ._compat import lock_level as _lock_level
from ._future import PoolFuture
from ._map import ChunkCall, MapIterator, chunks
from ._pickling import encode_callable
from ._pool import Pool
from ._protocol import CALL, CHUNK, NAMED, NATIVE
from ._sigint import defer_sigint
from ._state import LIVE_POOLS
from ._transport import encode, encode_columns, few_native_args

# typing is not imported at run time: it costs a few milliseconds of every
# program's start-up, for nothing a submit needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from concurrent.futures import Future
    from typing import Any, Literal, TypeVar

    from ._waiting import Watch

    T = TypeVar("T")

__all__ = ["InterpreterPoolExecutor"]

#: Seconds a stopped task gets to return to Python before its worker is retired.
DEFAULT_INTERRUPT_GRACE = 1.0


def _releasing_locks[F: Callable[..., Any]](method: F) -> F:
    """An entry point that releases the pool's locks if an exception (a Ctrl-C)
    leaves it while this thread still holds one (``with`` is not signal safe)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        levels = self._pool.lock_levels()  # (not 0 in a signal handler run inside the pool's code)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self._pool.release_leaked_locks(levels)
            raise

    return wrapper  # type: ignore[return-value]


class InterpreterPoolExecutor(Executor):
    """An executor that runs calls in a warm pool of subinterpreters.

    Each worker is an OS thread running one isolated subinterpreter with its own
    GIL, so pure-Python CPU-bound calls run in parallel.  A drop-in replacement for
    :class:`concurrent.futures.ProcessPoolExecutor`: functions and arguments must be
    picklable (shareable values such as ``bytes``, ``str``, numbers and tuples of
    them cross without pickling).

    Parameters beyond ProcessPoolExecutor's:

    ``task_timeout``
        Default deadline in seconds for every task (see :meth:`schedule`).
    ``idle_timeout``
        Seconds after which an idle worker releases its interpreter; workers come
        back on demand.  ``None`` (default) keeps them warm until shutdown.
    ``interrupt_grace``
        Seconds a task that was stopped gets to return to Python (a long C call
        cannot be interrupted) before its worker is retired and replaced.
    ``forward_logs``
        Records that tasks emit with :mod:`logging` reach the same-named loggers
        here, so the handlers you configured see them (on by default; workers
        log at the level the root logger had when the pool was created).
    ``interrupt_on_cancel``
        ``Future.cancel()`` on a task already running interrupts it instead of
        returning False: what asyncio's cancellation of ``loop.run_in_executor``
        (and ``asyncio.wrap_future``) expects.  Off by default, as the
        ``concurrent.futures`` contract says.

    ``task_timeout`` applies to the initializer too: one that runs longer breaks
    the pool (``BrokenInterpreterPool``) instead of hanging it.

    ``mp_context`` is accepted for signature compatibility and has no effect.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        mp_context: Any = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        max_tasks_per_child: int | None = None,
        thread_name_prefix: str = "",
        task_timeout: float | None = None,
        idle_timeout: float | None = None,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        forward_logs: bool = True,
        interrupt_on_cancel: bool = False,
    ) -> None:
        if _shared.in_worker():
            raise RuntimeError(
                "an InterpreterPoolExecutor cannot be created inside an interpexec worker: create pools in the "
                'main program only (guard module-level pools with `if __name__ == "__main__":`)'
            )
        if not _compat.daemon_threads_allowed():
            raise RuntimeError(
                "an InterpreterPoolExecutor cannot be created in this interpreter: it allows no daemon threads (an "
                "isolated subinterpreter), and the pool needs one; create pools in the main interpreter"
            )
        if max_workers is None:
            max_workers = default_max_workers()
        elif not isinstance(max_workers, int) or isinstance(max_workers, bool):
            raise TypeError("max_workers must be an integer or None")
        elif max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if max_tasks_per_child is not None:
            if not isinstance(max_tasks_per_child, int) or isinstance(max_tasks_per_child, bool):
                raise TypeError("max_tasks_per_child must be an integer")
            if max_tasks_per_child <= 0:
                raise ValueError("max_tasks_per_child must be >= 1")
        _check_timeout("task_timeout", task_timeout)
        _check_timeout("idle_timeout", idle_timeout)
        if interrupt_grace < 0:
            raise ValueError("interrupt_grace must be >= 0")
        self._max_workers = max_workers
        del mp_context  # accepted for compatibility; has no effect
        self._task_timeout = task_timeout
        self._pool = Pool(
            max_workers,
            initializer,
            tuple(initargs),
            max_tasks_per_child,
            thread_name_prefix,
            idle_timeout,
            float(interrupt_grace),
            _parent_log_level() if forward_logs else None,
            task_timeout,
            bool(interrupt_on_cancel),
        )
        LIVE_POOLS.add(self._pool)
        weakref.finalize(self, Pool.shutdown, self._pool, False, False)

    @property
    def max_workers(self) -> int:
        """The number of workers the pool runs at most (``_max_workers`` too, as in
        the standard executors)."""
        return self._max_workers

    @property
    def _broken(self) -> str | bool:
        """False while the pool works, and why it broke (a non-empty ``str``) once
        it has: the attribute ThreadPoolExecutor and ProcessPoolExecutor both
        keep, which test suites and libraries read (CPython's own
        test_concurrent_futures waits on it)."""
        return self._pool.broken or False

    @property
    def _thread_name_prefix(self) -> str:
        """The prefix of the worker threads' names (``<prefix>_<slot>``; the
        resolver's is ``<prefix>_resolver``): the given ``thread_name_prefix``,
        or ``InterpreterPoolExecutor-<n>``; read as ThreadPoolExecutor's and the
        standard InterpreterPoolExecutor's attribute of that name are."""
        return self._pool.thread_name_prefix

    @_thread_name_prefix.setter
    def _thread_name_prefix(self, prefix: str) -> None:
        self._pool.thread_name_prefix = prefix  # (as on ThreadPoolExecutor: names threads started after)

    @property
    def usable(self) -> bool:
        """True while :meth:`submit` accepts work: not shut down and not broken."""
        pool = self._pool
        return pool.broken is None and not pool.shutdown_flag

    # ---------------------------------------------------------------- submit
    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._submit(fn, args, kwargs, self._task_timeout)

    submit.__doc__ = """Schedule ``fn(*args, **kwargs)`` on a worker and return a Future.

        ``fn`` is sent by reference (module and name); arguments cross natively when
        shareable, pickled otherwise.  An argument that cannot be pickled fails only
        this future.  The pool's ``task_timeout``, if any, applies.
        """

    def schedule(
        self,
        fn: Callable[..., T],
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Future[T]:
        """Like :meth:`submit`, with a deadline.

        Once the task has run for ``timeout`` seconds in a worker, it is stopped
        there (an exception is raised inside it, so its ``finally`` blocks run) and
        the future fails with :class:`TimeoutError`.  ``None`` uses the pool's
        ``task_timeout``.
        """
        _check_timeout("timeout", timeout)
        return self._submit(fn, tuple(args), kwargs or {}, self._task_timeout if timeout is None else timeout)

    def _submit(
        self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
    ) -> Future[T]:
        pool = self._pool
        # (pool.lock_levels() and pool.window_full(), inline: per call.  The
        # levels are not 0 in a signal handler run inside the pool's code.)
        levels = _lock_level(pool.lock), _lock_level(pool.collect_lock)
        try:
            if len(pool.inflight) >= pool.window:
                pool.collect()  # make room here rather than wait for the resolver
            tid = next(pool.tid)
            fut: PoolFuture[T] = PoolFuture(pool, tid, pool.interrupt_on_cancel)
            msg: tuple[Any, ...] | None
            try:
                msg = _encode_call(tid, fn, args, kwargs, timeout)
            except Exception as exc:  # (a KeyboardInterrupt propagates, as it should)
                msg = None
                error = exc
            if not pool.started or pool.active < pool.wanted:
                # Starting threads (the first submits, a pool below the
                # workers it wants): a Ctrl-C is held back until the lock is
                # released (see Resolver.start_locked), and until the futures
                # dispatch failed are resolved.
                with defer_sigint():
                    _enqueue(pool, fut, msg, args, kwargs)
                pool.after_start()  # (none could start: the pool breaks, this future fails)
            else:
                _enqueue(pool, fut, msg, args, kwargs)
            if msg is not None:
                return fut
            # Could not be encoded: fail this future only.
            fut.set_running_or_notify_cancel()
            fut.set_exception(error)
            return fut
        except BaseException:
            pool.release_leaked_locks(levels)  # a Ctrl-C must not leave the pool locked
            raise

    # ------------------------------------------------------------------- map
    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
        interrupt_on_timeout: bool = False,
    ) -> Iterator[T]:
        """Like :meth:`concurrent.futures.Executor.map`.

        ``chunksize`` items are sent to a worker as one task (one round trip).
        ``buffersize`` bounds how many tasks are submitted ahead of the consumer
        (3.14's semantics, on every supported Python).  With
        ``interrupt_on_timeout``, a ``timeout`` also stops the tasks still
        running instead of letting them finish.
        """
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None:
            if not isinstance(buffersize, int):  # (a bool is one, as in the standard check)
                raise TypeError("buffersize must be an integer or None")
            if buffersize < 1:
                raise ValueError("buffersize must be None or > 0")
        end_time = None if timeout is None else timeout + time.monotonic()
        args_iter: Iterator[Any] = zip(*iterables, strict=False)  # map stops at the shortest
        call: Callable[..., Any] = fn
        if chunksize > 1:
            args_iter = ((chunk,) for chunk in chunks(args_iter, chunksize))
            call = ChunkCall(fn)
        if buffersize:
            fs = collections.deque(self.submit(call, *args) for args in itertools.islice(args_iter, buffersize))
        else:
            fs = collections.deque(self.submit(call, *args) for args in args_iter)
        return MapIterator(self, fs, args_iter, call, buffersize, end_time, interrupt_on_timeout, chunksize > 1)

    # ----------------------------------------------------- stopping and life
    @_releasing_locks
    def interrupt(self, future: Future[Any]) -> bool:
        """Stop the task behind ``future``, even if it is already running.

        Pending work is cancelled as by ``future.cancel()``; a running task gets an
        exception raised inside it in its worker, and the future ends cancelled.
        Returns False if the future had already finished (or is not this pool's).
        """
        if not isinstance(future, PoolFuture) or future._ie_pool is not self._pool:
            return False
        return self._pool.interrupt(future)

    @_releasing_locks
    def watch(self, future: Future[Any]) -> Watch | None:
        """A readable descriptor for a running task, for event loops and selectors.

        Returns a :class:`Watch` whose ``fd`` becomes readable when ``future``
        may be done (the worker finishing the task writes to it); then call its
        ``check()``, which delivers results in the calling thread and returns
        True once ``future`` is done.  Close it (or use it as a context manager)
        when done waiting.  Returns None when the task is not in a worker's
        hands (still queued, or already done), another thread watches it, or 64
        watches are out: use ``future.add_done_callback`` then.
        """
        return self._pool.watch(future)

    @_releasing_locks
    def prestart(self, wait: bool = True) -> None:
        """Start every worker now (concurrently) instead of on demand;
        with ``wait``, return once all are ready to take tasks."""
        self._pool.prestart(wait)

    @_releasing_locks
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False, interrupt_running: bool = False) -> None:
        """Like :meth:`concurrent.futures.Executor.shutdown`.  With
        ``interrupt_running``, tasks already running are stopped too."""
        self._pool.shutdown(wait, cancel_futures, interrupt_running)

    @_releasing_locks
    def terminate_workers(self) -> None:
        """Stop now: cancel pending work, stop running tasks, end every worker.

        An interpreter cannot be killed the way a process can: running tasks are
        stopped by raising an exception inside them; one stuck in a long C call is
        abandoned after ``interrupt_grace`` (its thread ends when the call returns).
        """
        self._pool.terminate()

    @_releasing_locks
    def kill_workers(self) -> None:
        """Same as :meth:`terminate_workers` (interpreters cannot be sent SIGKILL)."""
        self._pool.terminate()

    @_releasing_locks
    def stats(self) -> dict[str, Any]:
        """A snapshot of the pool: per worker and totals."""
        return self._pool.stats()

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> Literal[False]:
        # On Ctrl-C inside the block, drop the work not started yet and stop the
        # running tasks: the program ends promptly, as a process pool's would.
        ctrl_c = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self.shutdown(wait=True, cancel_futures=ctrl_c, interrupt_running=ctrl_c)
        return False

    def __reduce__(self) -> Any:
        raise TypeError(
            "an InterpreterPoolExecutor cannot be sent to its workers: submitting from inside a task is not "
            "supported; return the follow-up work to the caller instead"
        )


def _check_timeout(name: str, value: float | None) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be None or a number, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be None or a number >= 0")


def _enqueue(
    pool: Pool, fut: PoolFuture[Any], msg: tuple[Any, ...] | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """The locked part of a submit: refused on a pool that cannot take work (even
    for a call that could not be encoded), else queued and dispatched; futures
    dispatch failed are resolved after the lock is released (callbacks may run)."""
    with pool.lock:
        if pool.broken is not None or pool.shutdown_flag:  # (check_usable_locked's tests, inline: per call)
            pool.check_usable_locked()
        if _stopping._exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        if msg is None:
            return
        failed = pool.enqueue_locked(fut, msg, (args, kwargs) if args or kwargs else None)
    if failed:
        pool.fail_items(failed)


def _encode_call(
    tid: int, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
) -> tuple[Any, ...]:
    if timeout is not None:
        timeout = float(timeout)
    if type(fn) is ChunkCall:
        # A chunk travels as argument columns: fn(*row) for row in zip(*columns).
        columns = tuple(zip(*args[0], strict=True))
        return (tid, CHUNK, encode_callable(fn.fn), encode_columns(columns, share_buffers=True), timeout)
    if not callable(fn):
        raise TypeError(f"'{type(fn).__name__}' object is not callable")  # (the standard message)
    ref = encode_callable(fn)
    if not kwargs and (not args or few_native_args(args)):
        if type(ref) is tuple:  # (the common case, as one flat tuple: the cheapest message to cross)
            return (tid, NAMED, ref[0], ref[1], timeout, *args)
        return (tid, CALL, ref, (NATIVE, (args, ())), timeout)
    return (tid, CALL, ref, encode((args, tuple(kwargs.items())), share_buffers=True), timeout)


def _parent_log_level() -> int:
    """The level workers log at: this process's root logger's, at pool creation."""
    import sys

    logging = sys.modules.get("logging")
    if logging is None:
        return 30  # logging.WARNING, the default, without importing logging here
    return int(logging.getLogger().getEffectiveLevel())


def default_max_workers() -> int:
    return os.process_cpu_count() or 1
