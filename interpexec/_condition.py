"""The compact Condition each :class:`~interpexec._future.PoolFuture` carries."""

from __future__ import annotations

import threading
from collections import deque

from ._compat import (
    WITH_ENTRY_INTERRUPTIBLE,
    RLock,
    allocate_lock,
    held,
    lock_is_owned,
    lock_level,
    reacquire,
    release_all,
)

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any


_acquire = RLock.acquire
_release = RLock.release


class FutureCondition(RLock):  # type: ignore[misc]
    """A ``threading.Condition`` for one Future, about 80 bytes instead of 1.3 KB:
    the C RLock itself, plus the waiters' deque made only when a thread first
    waits (most futures are never waited on through their condition).

    ``with``, ``acquire`` and ``release`` are the C lock's own: no Python frame
    between acquiring the lock and the protection of a ``with`` block, where a
    Ctrl-C would leave the lock held for ever (threading.Condition's
    ``__enter__`` is Python code).  Except on 3.14, where ``with`` itself
    leaves that gap after a C ``__enter__`` (``_compat.WITH_ENTRY_INTERRUPTIBLE``):
    there ``__enter__`` is Python code that acquires inside a ``try``, so every
    ``with`` on a future's condition, the standard ``Future`` methods' too, is
    Ctrl-C safe (about 40 ns more per ``with``).  A condition left held by the
    main thread would block the resolver, and the pool, for ever.  ``wait``, ``notify`` and ``notify_all`` are
    threading.Condition's (3.13-3.15), over the lock's save/restore
    (``_compat.release_all``/``reacquire``), which is all ``concurrent.futures``
    uses."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: deque[Any] | None = None

    if WITH_ENTRY_INTERRUPTIBLE:

        def __enter__(self, blocking: bool = True, timeout: float = -1) -> bool:
            # (Returning from a Python function runs no signal handler in the
            # caller: the gap is inside this try, and closed by it.)
            level = lock_level(self)
            try:
                return _acquire(self, blocking, timeout)
            except BaseException:
                while lock_level(self) > level:
                    _release(self)
                raise

    def wait(self, timeout: float | None = None) -> bool:
        lock: Any = self
        saved_state = held(lock)  # (what to restore, taken before anything is released)
        if not saved_state[0]:
            raise RuntimeError("cannot wait on un-acquired lock")
        waiter = allocate_lock()
        waiter.acquire()
        if self._waiters is None:
            self._waiters = deque()
        self._waiters.append(waiter)
        gotit = False
        try:  # restore state no matter what (e.g., KeyboardInterrupt)
            release_all(lock)  # (in the try: a Ctrl-C right after it is restored from)
            if timeout is None:
                waiter.acquire()
                gotit = True
            elif timeout <= 0:
                gotit = waiter.acquire(False)
            else:
                gotit = waiter.acquire(True, timeout)
            return gotit
        finally:
            reacquire(lock, saved_state)
            if not gotit:
                try:
                    self._waiters.remove(waiter)
                except ValueError:  # (already removed by a notify)
                    pass

    def notify(self, n: int = 1) -> None:
        if not lock_is_owned(self):
            raise RuntimeError("cannot notify on un-acquired lock")
        waiters = self._waiters
        while waiters and n > 0:
            waiter = waiters[0]
            try:
                waiter.release()
            except RuntimeError:  # (gh-92530: released by an interrupted notify)
                pass
            else:
                n -= 1
            try:
                waiters.remove(waiter)
            except ValueError:  # (removed by the waiter itself, on timeout)
                pass

    def notify_all(self) -> None:
        if self._waiters:
            self.notify(len(self._waiters))
        elif not lock_is_owned(self):
            raise RuntimeError("cannot notify on un-acquired lock")

    # threading.Condition's own: they only call wait() and notify_all().
    wait_for = threading.Condition.wait_for
    notifyAll = threading.Condition.notifyAll

    def __repr__(self) -> str:
        return f"<FutureCondition({super().__repr__()}, {len(self._waiters or ())})>"
