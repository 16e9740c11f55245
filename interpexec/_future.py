"""The Future type the pool returns, and the pipes its waiters block on."""

from __future__ import annotations

import _thread
import collections
import sys
import threading
from concurrent.futures import Future, _base
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._pool import Pool

T = TypeVar("T")

WAITABLE = (_base.PENDING, _base.RUNNING)


class PoolFuture(Future[T]):
    """A standard :class:`concurrent.futures.Future`.

    Its ``result()`` and ``exception()`` let the waiting thread receive its result
    straight from the worker (two thread wake-ups per round trip instead of three
    through the collector thread); everything else is inherited unchanged.
    """

    _ie_pool: Pool | None = None
    _ie_tid = 0

    def __init__(self) -> None:
        # Future.__init__'s fields, with a cheaper condition: a future is made per
        # submit, and threading.Condition() alone cost about a third of a submit
        # (five bound methods and a deque: allocations that also drive the GC).
        self._condition = _FutureCondition()
        self._state = _base.PENDING
        self._result = None
        self._exception = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    def bind(self, pool: Pool, tid: int) -> None:
        """Attach to the pool that runs it (before anyone else sees the future)."""
        self._ie_pool = pool
        self._ie_tid = tid
        waiters = self._waiters = _WaiterList()  # (no Python-level __init__: a submit each)
        waiters._pool = pool
        waiters._tid = tid

    def done(self) -> bool:
        if self._ie_pool is not None and self._state in WAITABLE:
            self._ie_pool.collect()
        return super().done()

    def cancel(self) -> bool:
        """Standard: cancels only work no worker has taken yet.

        One exception: when asyncio cancels the task awaiting this future (through
        ``loop.run_in_executor`` or ``asyncio.wrap_future``), a task already handed
        to a worker is interrupted too, as :func:`interpexec.aio.run_sync` does,
        instead of running on, unwanted, to its end."""
        if super().cancel():
            return True
        if self._ie_pool is not None and self._state == _base.RUNNING and _asyncio_cancels():
            return self._ie_pool.interrupt(self)
        return False

    def add_done_callback(self, fn: Any) -> None:
        if self._ie_pool is not None and self._state in WAITABLE:
            self._ie_pool.watch_tid(self._ie_tid)
        super().add_done_callback(fn)

    def result(self, timeout: float | None = None) -> T:
        if self._ie_pool is not None and self._state in WAITABLE:
            timeout = self._ie_pool.wait_for(self, timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._ie_pool is not None and self._state in WAITABLE:
            timeout = self._ie_pool.wait_for(self, timeout)
        return super().exception(timeout)

    def force_cancel(self) -> bool:
        """Cancel even a running future (its task is being stopped).  False if it
        had already finished."""
        with self._condition:
            if self._state == _base.FINISHED:
                return False
            if self._state in (_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED):
                return True
            self._state = _base.CANCELLED_AND_NOTIFIED
            for waiter in self._waiters:
                waiter.add_cancelled(self)
            self._condition.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]
        return True


class _FutureCondition(threading.Condition):
    """A threading.Condition over a new RLock, whose lock methods are class-level
    delegates instead of bound methods stored per instance (which is all that
    Condition.__init__ does besides creating the lock and the waiter deque)."""

    def __init__(self) -> None:
        self._lock = _thread.RLock()
        self._waiters: collections.deque[Any] = collections.deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:  # (RLock.locked() exists from 3.14 on, as does Condition.locked)
        return bool(self._lock.locked())  # type: ignore[attr-defined,unused-ignore]

    def _release_save(self) -> Any:
        return self._lock._release_save()  # type: ignore[attr-defined]

    def _acquire_restore(self, state: Any) -> None:
        self._lock._acquire_restore(state)  # type: ignore[attr-defined]

    def _is_owned(self) -> bool:
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]


def _asyncio_cancels() -> bool:
    """Is PoolFuture.cancel() being called by asyncio because the asyncio future
    chained to it (``asyncio.futures._chain_future``) was cancelled?"""
    caller = sys._getframe(2)  # 0: here, 1: cancel(), 2: its caller
    return caller.f_code.co_name == "_call_check_cancel" and caller.f_globals.get("__name__") == "asyncio.futures"


class _WaiterList(list[Any]):
    """``Future._waiters``: ``concurrent.futures.wait()`` and ``as_completed()``
    append to it; the pool then delivers this future's result promptly.  (It
    holds the task id, not the future, to stay out of a reference cycle.)"""

    __slots__ = ("_pool", "_tid")
    _pool: Pool
    _tid: int

    def append(self, waiter: Any) -> None:
        self._pool.watch_tid(self._tid)
        super().append(waiter)
