"""The public executor and the pool state behind it.

Data flow (one pool, N workers)::

  caller threads                     main interpreter              worker interpreters
  --------------                     ----------------              -------------------
  submit(fn, *args) --encode--> pending deque --dispatch--> task Channel ----> serve() loop
      |                         (cancellable)   (window of     (_interpqueues     in worker 1..N
      v                                          2N in flight)  + wake-up pipe)     |
  Future <--set_result-- collector thread <------ result Channel <---------------- +
                         (or the caller itself,   (_interpqueues + pipe)
                          see _Pool.collect)

* ``submit`` encodes the call in the caller's thread (so an unpicklable argument
  fails only that future), appends it to ``pending`` and dispatches while fewer
  than ``window`` tasks are in flight.  Dispatched futures are marked running:
  as with ProcessPoolExecutor, only work not yet handed to the workers can be
  cancelled.
* Every worker pulls from the same task channel, so load balances itself.
* Results come back on one channel; ``collect`` turns them into Future results and
  refills the window.  It runs in the collector thread, in a caller blocked in
  ``Future.result()``, and in a worker thread before it destroys its interpreter.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import select
import sys
import threading
import types
import weakref
from concurrent.futures import Executor, Future
from concurrent.futures import _base
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterable, Iterator, TypeVar

from . import _worker_main as wm
from ._compat import queue_put as _compat_put
from ._errors import unpack_exception
from ._transport import (
    COLLECTOR_ASLEEP,
    COLLECTOR_READ,
    NSLOTS,
    SKIP_WAKEUPS,
    Channel,
    ControlLayout,
    decode,
    encode,
    wake_fd,
)
from ._worker import Worker

__all__ = ["BrokenInterpreterPool", "InterpreterPoolExecutor"]

T = TypeVar("T")

try:  # 3.14+
    from concurrent.futures.interpreter import BrokenInterpreterPool as _StdBroken

    _broken_bases: tuple[type, ...] = (BrokenProcessPool, _StdBroken)
except ImportError:  # 3.13
    _broken_bases = (BrokenProcessPool,)


class BrokenInterpreterPool(*_broken_bases):  # type: ignore[misc]
    """The pool can no longer run work: a worker's initializer failed or a worker
    loop died.  Subclasses ``concurrent.futures.process.BrokenProcessPool`` and, on
    3.14+, ``concurrent.futures.interpreter.BrokenInterpreterPool``."""


class _WorkItem:
    __slots__ = ("future", "msg", "waiter_fd", "waiter_thread")

    def __init__(self, future: _PoolFuture[Any], msg: tuple[Any, ...]) -> None:
        self.future = future
        self.msg = msg
        self.waiter_fd = 0  # write end (+1) of the pipe of a thread blocked in result()
        self.waiter_thread = 0


# Wake-up pipes for threads blocked in Future.result(): borrowed for one wait and
# returned, never closed (a worker may still write a late byte to one; a stray
# byte only causes one extra check).
_WAKE_PIPES: list[tuple[int, int]] = []
_WAKE_PIPES_LOCK = threading.Lock()


def _borrow_pipe() -> tuple[int, int]:
    with _WAKE_PIPES_LOCK:
        if _WAKE_PIPES:
            return _WAKE_PIPES.pop()
    r, w = os.pipe()
    os.set_blocking(w, False)
    return r, w


def _return_pipe(pipe: tuple[int, int]) -> None:
    with _WAKE_PIPES_LOCK:
        _WAKE_PIPES.append(pipe)


class _PoolFuture(Future[T]):
    """A standard Future whose ``result()``/``exception()`` let the waiting thread
    receive its own result straight from the worker (two thread wake-ups per
    round trip instead of three through the collector thread)."""

    __slots__ = ("_ie_pool", "_ie_tid")

    def __init__(self, pool: _Pool | None = None, tid: int = 0) -> None:
        super().__init__()
        self._ie_pool = pool
        self._ie_tid = tid

    def result(self, timeout: float | None = None) -> T:
        if self._ie_pool is not None and self._state in _WAITABLE:
            self._ie_pool.wait_for(self, timeout)
        return super().result(timeout if self._state not in _FINAL else 0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._ie_pool is not None and self._state in _WAITABLE:
            self._ie_pool.wait_for(self, timeout)
        return super().exception(timeout if self._state not in _FINAL else 0)


_WAITABLE = (_base.PENDING, _base.RUNNING)
_FINAL = (_base.FINISHED, _base.CANCELLED_AND_NOTIFIED, _base.CANCELLED)


_FN_BLOBS: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def _dumps_callable(fn: Callable[..., Any]) -> bytes:
    """Pickle a callable by reference, caching plain functions' pickles."""
    if type(fn) is types.FunctionType:
        blob = _FN_BLOBS.get(fn)
        if blob is None:
            blob = _FN_BLOBS[fn] = _pickle_callable(fn)
        return blob
    return _pickle_callable(fn)


def _pickle_callable(fn: Callable[..., Any]) -> bytes:
    main = sys.modules.get("__main__")
    if getattr(fn, "__module__", None) == "__main__" and getattr(main, "__file__", None) is None:
        if (main_spec := getattr(main, "__spec__", None)) is None or not main_spec.name:
            return _pickle_by_value(fn, "it is defined in an interactive session (REPL, notebook, or python -c)")
    try:
        return pickle.dumps(fn, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        return _pickle_by_value(fn, f"it cannot be pickled by reference ({exc})")


def _pickle_by_value(fn: Callable[..., Any], why: str) -> bytes:
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        raise pickle.PicklingError(
            f"cannot send {name!r} to an interpreter worker: {why}. Define it at the top "
            "level of an importable module (or of a script run as a file), or install "
            "cloudpickle so interpexec can send it by value."
        ) from None
    return bytes(cloudpickle.dumps(fn, protocol=5))


def _main_info() -> tuple[str | None, str | None]:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) if spec is not None else None
    path = getattr(main, "__file__", None)
    if path is not None:
        path = os.path.abspath(path)
    return path, name


class _Pool:
    """Everything the worker threads and the collector share.  The public executor
    object holds it; nothing here holds the executor (so it can be collected)."""

    def __init__(
        self,
        max_workers: int,
        initializer: Callable[..., object] | None,
        initargs: tuple[Any, ...],
        max_tasks_per_child: int | None,
        thread_name_prefix: str,
    ) -> None:
        self.max_workers = max_workers
        self.max_tasks_per_child = max_tasks_per_child
        self.thread_name_prefix = thread_name_prefix
        self.init_blob: bytes | None = (
            None if initializer is None else pickle.dumps((initializer, tuple(initargs)), protocol=5)
        )
        self.sys_path = list(sys.path)
        self.main_path, self.main_name = _main_info()
        self.tasks = Channel()
        self.results = Channel()
        self.window = min(2 * max_workers, NSLOTS)
        self.layout = ControlLayout(max_workers)
        self.waiters = self.layout.waiters
        self.control = bytearray(8 * self.layout.size)
        self.control_view = memoryview(self.control)
        self.ctl = self.control_view.cast("q")
        self.asleep_lo, self.asleep_hi = self.layout.asleep_bytes()
        self.task_read_lo = self.layout.task_read
        self.task_read_hi = self.layout.task_read + max_workers
        self.task_written = 0

        self.lock = threading.Lock()
        self.pending: collections.deque[tuple[int, _WorkItem]] = collections.deque()
        self.inflight: dict[int, _WorkItem] = {}
        self.tid = itertools.count(1)
        self.workers: list[Worker] = []
        self.live_workers = 0
        self.started = False
        self.shutdown_flag = False
        self.stops_sent = 0
        self.broken: str | None = None
        self.broken_cause: BaseException | None = None
        self.collect_lock = threading.Lock()
        self.collector: threading.Thread | None = None
        self.closed = False

    # ----------------------------------------------------------------- start
    def start_locked(self) -> None:
        if self.started:
            return
        self.started = True
        prefix = self.thread_name_prefix or f"InterpreterPoolExecutor-{id(self):x}"
        self.collector = threading.Thread(target=self._collector_loop, name=f"{prefix}_collector", daemon=True)
        self.collector.start()
        for i in range(self.max_workers):
            w = Worker(self, i, f"{prefix}_{i}")
            self.workers.append(w)
            self.live_workers += 1
            w.start()

    # -------------------------------------------------------------- dispatch
    def dispatch_locked(self) -> None:
        """Move pending work into the task channel while the window allows."""
        pending, inflight = self.pending, self.inflight
        while pending and len(inflight) < self.window:
            tid, item = pending.popleft()
            if not item.future.set_running_or_notify_cancel():
                continue
            inflight[tid] = item
            try:
                _compat_put(self.tasks.qid, item.msg)
            except BaseException as exc:  # e.g. an object the queue refused
                del inflight[tid]
                item.future.set_exception(exc)
                continue
            self._wake_a_worker()
        if self.shutdown_flag and not pending and self.stops_sent < self.live_workers:
            for _ in range(self.live_workers - self.stops_sent):
                self.tasks.put((0, wm.STOP))
            self.stops_sent = self.live_workers

    def _wake_a_worker(self) -> None:
        """Write a task wake-up byte if a worker sleeps and none is pending."""
        if SKIP_WAKEUPS and (
            self.control.find(1, self.asleep_lo, self.asleep_hi) < 0
            or self.task_written > sum(self.ctl[self.task_read_lo : self.task_read_hi])
        ):
            return
        self.task_written += 1
        try:
            os.write(self.tasks.wfd, b"\0")
        except BlockingIOError:
            self.task_written -= 1  # full: the workers are being woken anyway

    # --------------------------------------------------------------- collect
    def collect(self) -> bool:
        """Turn every result now queued into Future results.  Never blocks on I/O.

        Messages are taken off the queue under ``collect_lock`` (so a worker thread
        can be sure its interpreter's results are out before destroying it) and
        handled after releasing it, so callbacks run without our locks held.
        """
        with self.collect_lock:
            msgs = self.results.drain()
        for msg in msgs:
            self._handle(msg)
        return bool(msgs)

    def wait_for(self, fut: _PoolFuture[Any], timeout: float | None) -> None:
        """Block until ``fut`` is done (or ``timeout``), collecting results in this
        thread: the worker that finishes ``fut`` writes straight to our pipe."""
        tid = fut._ie_tid
        with self.lock:
            item = self.inflight.get(tid)
            if item is None or item.waiter_fd:
                item = None  # not dispatched yet, or another thread waits already
        if item is None:
            return  # the standard Condition wait serves it
        pipe = _borrow_pipe()
        rfd, wfd = pipe
        slot = self.waiters + tid % NSLOTS
        deadline = None if timeout is None else _monotonic() + timeout
        try:
            item.waiter_thread = threading.get_ident()
            item.waiter_fd = wfd + 1
            self.ctl[slot] = wfd + 1
            while True:
                self.collect()
                if fut._state not in _WAITABLE:
                    return
                if deadline is None:
                    os.read(rfd, 64)
                else:
                    left = deadline - _monotonic()
                    if left <= 0:
                        return
                    if select.select([rfd], [], [], left)[0]:
                        os.read(rfd, 64)
        finally:
            if self.ctl[slot] == wfd + 1:
                self.ctl[slot] = 0
            item.waiter_fd = 0
            # A worker that saw our slot woke only us: take what it left.
            self.collect()
            _return_pipe(pipe)

    def _handle(self, msg: tuple[Any, ...]) -> None:
        tid, kind = msg[0], msg[1]
        if kind == wm.EVENT:
            self._event(msg[2], msg[3], msg[4])
            return
        with self.lock:
            item = self.inflight.pop(tid, None)
            if self.pending or self.shutdown_flag:
                self.dispatch_locked()
        if item is None:
            return
        fut = item.future
        if kind == wm.OK:
            try:
                value = decode(msg[2])
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(value)
        else:
            fut.set_exception(unpack_exception(msg[2]))
        if item.waiter_fd and item.waiter_thread != threading.get_ident():
            wake_fd(item.waiter_fd - 1)

    def _event(self, index: int, event: int, data: Any) -> None:
        if event == wm.EV_STARTED:
            pass
        elif event == wm.EV_INIT_FAILED:
            cause = unpack_exception(data)
            self.set_broken("A worker initializer failed, the pool is not usable anymore", cause)

    def _collector_loop(self) -> None:
        rfd, ctl = self.results.rfd, self.ctl
        while True:
            if not self.collect():
                # Publish "asleep", look once more, then block on the pipe.
                ctl[COLLECTOR_ASLEEP] = 1
                if not self.collect():
                    ctl[COLLECTOR_READ] += len(os.read(rfd, 4096))
                ctl[COLLECTOR_ASLEEP] = 0
            with self.lock:
                if self.live_workers == 0 and (self.shutdown_flag or self.broken):
                    break
        self.collect()
        self._close_channels()

    def _close_channels(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.tasks.close()
        self.results.close()

    # --------------------------------------------------------- worker events
    def worker_should_restart(self, worker: Worker) -> bool:
        with self.lock:
            return self.broken is None

    def worker_exited(self, worker: Worker, error: str | None) -> None:
        if error is not None:
            self.set_broken(
                f"A worker interpreter stopped unexpectedly, the pool is not usable anymore:\n{error}", None
            )
        with self.lock:
            self.live_workers -= 1
            if self.stops_sent:
                self.stops_sent -= 1
        self.results.notify()  # let the collector notice

    def set_broken(self, message: str, cause: BaseException | None) -> None:
        with self.lock:
            if self.broken is not None:
                return
            self.broken = message
            self.broken_cause = cause
            doomed = [item for _, item in self.pending] + list(self.inflight.values())
            self.pending.clear()
            self.inflight.clear()
            self.shutdown_flag = True
            self.dispatch_locked()  # sends STOP to the workers still alive
        for item in doomed:
            exc = BrokenInterpreterPool(message)
            exc.__cause__ = cause
            if not item.future.done():
                try:
                    item.future.set_exception(exc)
                except _base.InvalidStateError:
                    pass
            if item.waiter_fd:
                wake_fd(item.waiter_fd - 1)

    # -------------------------------------------------------------- shutdown
    def shutdown(self, wait: bool, cancel_futures: bool) -> None:
        cancelled: list[Future[Any]] = []
        with self.lock:
            self.shutdown_flag = True
            if cancel_futures:
                cancelled = [item.future for _, item in self.pending]
                self.pending.clear()
            if self.started:
                self.dispatch_locked()
            started = self.started
        for fut in cancelled:
            fut.cancel()
        if not started:
            self._close_channels()
            return
        self.results.notify()
        if wait:
            for w in self.workers:
                if w.thread is not threading.current_thread():
                    w.thread.join()
            if self.collector is not None and self.collector is not threading.current_thread():
                self.collector.join()


_LIVE_POOLS: weakref.WeakSet[_Pool] = weakref.WeakSet()
_EXITING = False


def _python_exit() -> None:
    global _EXITING
    _EXITING = True
    for pool in list(_LIVE_POOLS):
        pool.shutdown(wait=True, cancel_futures=False)


threading._register_atexit(_python_exit)  # type: ignore[attr-defined]


class InterpreterPoolExecutor(Executor):
    """An executor that runs calls in a warm pool of subinterpreters.

    Each worker is an OS thread that runs one isolated subinterpreter with its own
    GIL, so pure-Python CPU-bound calls run in parallel.  A drop-in replacement for
    :class:`concurrent.futures.ProcessPoolExecutor`: functions and arguments must be
    picklable (shareable values such as ``bytes``, ``str``, numbers and tuples of
    them cross without pickling).
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
    ) -> None:
        if max_workers is None:
            max_workers = _default_workers()
        elif max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if max_tasks_per_child is not None:
            if not isinstance(max_tasks_per_child, int):
                raise TypeError("max_tasks_per_child must be an integer")
            if max_tasks_per_child <= 0:
                raise ValueError("max_tasks_per_child must be >= 1")
        self._max_workers = max_workers
        self._mp_context = mp_context  # accepted for compatibility; has no effect
        self._pool = _Pool(max_workers, initializer, tuple(initargs), max_tasks_per_child, thread_name_prefix)
        _LIVE_POOLS.add(self._pool)
        self._finalizer = weakref.finalize(self, _Pool.shutdown, self._pool, False, False)

    # ------------------------------------------------------------------ API
    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        pool = self._pool
        fut: _PoolFuture[T] = _PoolFuture()
        try:
            msg = self._encode_call(fn, args, kwargs)
        except BaseException as exc:
            fut.set_running_or_notify_cancel()
            fut.set_exception(exc)
            msg = None
        with pool.lock:
            if pool.broken is not None:
                exc = BrokenInterpreterPool(pool.broken)
                exc.__cause__ = pool.broken_cause
                raise exc
            if pool.shutdown_flag:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _EXITING:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if msg is None:
                return fut
            pool.start_locked()
            tid = next(pool.tid)
            fut._ie_pool = pool
            fut._ie_tid = tid
            pool.pending.append((tid, _WorkItem(fut, (tid,) + msg)))
            pool.dispatch_locked()
        return fut

    submit.__doc__ = Executor.submit.__doc__

    def _encode_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if type(fn) is _ChunkCall:
            return (wm.CHUNK, _dumps_callable(fn.fn), encode(args[0], share_buffers=True))
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        blob = _dumps_callable(fn)
        payload = (args, tuple(kwargs.items()))
        return (wm.CALL, blob, encode(payload, share_buffers=True))

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[T]:
        """Like :meth:`concurrent.futures.Executor.map`; ``chunksize`` items are sent
        to a worker in one round trip."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if chunksize == 1:
            return super().map(fn, *iterables, timeout=timeout)
        chunks = _chunks(zip(*iterables), chunksize)
        results = super().map(_ChunkCall(fn), chunks, timeout=timeout)
        return _flatten(results)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait, cancel_futures)

    shutdown.__doc__ = Executor.shutdown.__doc__


class _ChunkCall:
    """Marks a map chunk: the worker runs ``fn`` over every args tuple of the chunk
    in one task (one round trip per chunk)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, chunk: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
        return tuple([self.fn(*args) for args in chunk])


def _chunks(it: Iterator[tuple[Any, ...]], size: int) -> Iterator[tuple[tuple[Any, ...], ...]]:
    while chunk := tuple(itertools.islice(it, size)):
        yield chunk


def _flatten(results: Iterator[Any]) -> Iterator[Any]:
    for chunk in results:
        yield from chunk


_monotonic = __import__("time").monotonic


def _default_workers() -> int:
    count = getattr(os, "process_cpu_count", os.cpu_count)()
    return count or 1

