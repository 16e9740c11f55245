"""The Future type the pool returns."""

from __future__ import annotations

import threading
from concurrent.futures import Future, _base

from ._compat import RLock, get_ident, is_main_thread, lock_level, outer_level, release_if_owned
from ._condition import FutureCondition
from ._sigint import NOT_DEFERRED, defer_sigint
from ._wakeup import notify

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol, TypeVar

    T = TypeVar("T")

    class FutureOwner(Protocol):
        """What a PoolFuture asks of its pool (the pool's resolver implements it)."""

        def wait_for(self, fut: PoolFuture[Any], timeout: float | None) -> float | None: ...

        def interrupt(self, fut: PoolFuture[Any]) -> bool: ...

        def lock_levels(self) -> tuple[int, int]: ...

        lock: Any

        def release_leaked_locks(self, levels: tuple[int, int] = ...) -> None: ...

        def run_callbacks_later(self, fut: PoolFuture[Any]) -> bool: ...

    class Resolving(Protocol):
        """What a ResolvingEvent asks of the pool whose resolver thread waits on it."""

        def resolve_nested(self, done: Callable[[], bool], timeout: float | None) -> float | None: ...

        results: Any  # (its ``wfd``: the resolver's wake-up pipe)

else:
    # ``Future["T"]`` is a types.GenericAlias whose base is Future itself: the
    # class below is generic for type checkers without importing typing (a
    # TypeVar, or PEP 695's ``class PoolFuture[T]``, would import it).
    T = "T"


_acquire = FutureCondition.acquire

WAITABLE = (_base.PENDING, _base.RUNNING)
_FINISHED = _base.FINISHED
_DONE = (_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED, _base.FINISHED)

_PENDING, _RUNNING, _CANCELLED, _NOTIFIED = (
    _base.PENDING,
    _base.RUNNING,
    _base.CANCELLED,
    _base.CANCELLED_AND_NOTIFIED,
)


#: The ``result()`` waits in progress, by thread, then by the write end of their
#: pipe: ``_waiting.Watch`` objects, *live* from registration to deregistration
#: (``Waiting.attach_waiter``/``detach_waiter``).  A wait is never taken for
#: left behind while live (``Waiting.abandon_waits``), and code that runs
#: inside it in the same thread can have it shared (:class:`Waiters`).
LIVE_WAITS: dict[int, dict[int, Any]] = {}


#: Done-callbacks that only hand the news to an event loop (they take no lock
#: and never block): asyncio's ``wrap_future`` (``loop.run_in_executor``) and
#: interpexec.aio's own.  The thread that settles a future runs these itself
#: (an event loop collecting results in a burst would otherwise wait for the
#: resolver's turn for each), and hands any other to the resolver.
INLINE_CALLBACKS = frozenset(
    {
        ("asyncio.futures", "_chain_future.<locals>._call_set_state"),
        ("interpexec.aio", "_call_asyncio.<locals>.on_done"),
        ("interpexec.aio", "_call_trio.<locals>.on_done"),
    }
)


def _inline_safe(callbacks: list[Any]) -> bool:
    for cb in callbacks:
        if (getattr(cb, "__module__", None), getattr(cb, "__qualname__", None)) not in INLINE_CALLBACKS:
            return False
    return True


class Waiters(list):  # type: ignore[type-arg]
    """A future's waiters list.  ``concurrent.futures.wait()`` and
    ``as_completed()`` (and the main thread's own wait for the resolver) add
    theirs with ``append`` and then rely on the resolver.  Added by a thread
    that is itself inside a ``result()`` wait (a signal handler, or a
    done-callback that thread runs while it delivers), the outer wait, which
    polls nothing until this returns, shares its registration first: the
    worker then wakes the resolver too (``Watch.share``)."""

    __slots__ = ()

    def append(self, waiter: Any) -> None:
        if LIVE_WAITS:
            share_live_waits(wake=True)
        if RESOLVERS and get_ident() in RESOLVERS:
            resolving_wait(waiter)
        list.append(self, waiter)


#: The pools whose resolver thread is running, by that thread's ident.  A
#: ``concurrent.futures.wait()`` or ``as_completed()`` called in one (by a
#: done-callback, or a log handler) has its waiter's event deliver that pool's
#: results while it waits (:class:`ResolvingEvent`): nobody else would.
RESOLVERS: dict[int, Resolving] = {}


def resolving_wait(waiter: Any) -> None:
    """Give a ``concurrent.futures`` waiter that a resolver thread installs a
    :class:`ResolvingEvent`, once (it is installed on every future waited for)."""
    event = getattr(waiter, "event", None)
    if type(event) is threading.Event:
        pool = RESOLVERS.get(get_ident())  # (cleared in a forked child)
        if pool is not None:
            resolving = ResolvingEvent(pool)
            if event.is_set():  # (not expected: the futures' locks are held while it is installed)
                resolving.set()
            waiter.event = resolving


class ResolvingEvent(threading.Event):
    """The event of a ``concurrent.futures.wait()`` or ``as_completed()`` called
    in a pool's resolver thread (by a done-callback): waiting on it there, that
    thread goes on delivering the pool's results, nested, as ``result()`` does
    (``Resolver.resolve_nested``); without it, the wait would last until its
    timeout, or for ever.  Set by another thread meanwhile, it wakes the
    waiting one through the resolver's pipe, which that thread polls.

    The waiter can outlive the callback (an ``as_completed()`` generator kept
    and resumed later, by any thread): only the resolver thread, while it
    serves, waits by delivering (two threads in that loop would share its
    pipe and lose wake-ups), other threads and later waits are the standard
    ones, and the pipe is written only while the resolver waits here (it is
    open then; after the pool closes, its number may be another file's)."""

    def __init__(self, pool: Resolving) -> None:
        super().__init__()
        self._ie_pool = pool
        self._ie_wfd: int = pool.results.wfd
        # The flag's, and the write's: once the waiting thread has cleared the
        # flag under it, nothing writes to the pipe.  Re-entrant: a signal
        # handler run inside set() in the main thread may set it again.
        self._ie_lock = RLock()
        self._ie_resolving = False

    def set(self) -> None:
        super().set()
        # (The event set first, then the flag read; the waiting thread sets the
        # flag first, then reads the event: one of the two sees the other.)
        if not self._ie_resolving:
            return
        lock = self._ie_lock
        level = lock_level(lock)
        # (Not a with, nor a finally, where a signal handler's exception can
        # land after the acquire and leave the lock held: the release comes
        # first, or the except does it, as in start_running_locked.)
        try:
            lock.acquire()
            if self._ie_resolving:
                notify(self._ie_wfd)
            lock.release()
        except BaseException:
            while lock_level(lock) > level:
                lock.release()
            raise

    def wait(self, timeout: float | None = None) -> bool:
        pool = self._ie_pool
        me = get_ident()
        if not self.is_set() and RESOLVERS.get(me) is pool:
            # (The resolver thread: no signal handler runs in it.)
            with self._ie_lock:
                self._ie_resolving = True
            try:
                timeout = pool.resolve_nested(self.is_set, timeout)
            finally:
                with self._ie_lock:
                    self._ie_resolving = False
        # (Set: at once.  Else another thread, the pool closed meanwhile, or
        # time ran out: the standard wait, for what is left of the timeout.)
        return super().wait(timeout)


def share_live_waits(wake: bool) -> None:
    """Have the workers of this thread's ``result()`` waits in progress wake the
    resolver as well (code running inside them may rely on it)."""
    live = LIVE_WAITS.get(get_ident())
    if live:
        for watch in list(live.values()):
            watch.share(wake)


class PoolFuture(Future[T]):
    """A standard :class:`concurrent.futures.Future`.

    The pool resolves it whether or not anyone waits.  Its ``result()`` and
    ``exception()`` add a shortcut: the waiting thread is woken straight from
    the worker and collects the result itself (two thread wake-ups per round trip
    instead of three through the resolver thread).  Everything else is inherited
    unchanged.
    """

    def __init__(self, pool: FutureOwner, tid: int, interrupt_on_cancel: bool = False) -> None:
        # Future.__init__ with a compact Condition (see _condition.FutureCondition):
        # a queued or finished future costs about 750 bytes instead of 2 KB.
        self._condition = FutureCondition()  # type: ignore[assignment]
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters: list[Any] = Waiters()
        self._done_callbacks: list[Any] = []
        self._ie_pool = pool
        self._ie_tid = tid
        self._ie_interrupt_on_cancel = interrupt_on_cancel

    def _invoke_callbacks(self) -> None:
        # A thread inside its own result() wait that runs done-callbacks (it
        # delivers results while it waits): a callback may hand a wait for that
        # very future to another thread and wait for it; the worker must then
        # wake the resolver, not only this thread.
        if LIVE_WAITS and self._done_callbacks:
            share_live_waits(wake=True)
        super()._invoke_callbacks()  # type: ignore[misc]

    def cancel(self) -> bool:
        """Standard: cancels only work no worker has taken yet.  On a pool created
        with ``interrupt_on_cancel=True``, a running task is interrupted too (what
        asyncio's cancellation of ``loop.run_in_executor`` expects).

        Unlike the standard executors' futures, a cancelled future counts as done
        for ``concurrent.futures.wait()`` and ``as_completed()`` at once (they see
        the standard ones only when the executor dequeues them, which after
        ``shutdown(cancel_futures=True)`` is never)."""
        if self.cancel_if_pending():
            return True
        if self._state in (_CANCELLED, _NOTIFIED):
            return True
        if self._ie_interrupt_on_cancel and self._state == _RUNNING:
            pool = self._ie_pool
            levels = pool.lock_levels()
            try:
                return pool.interrupt(self)
            except BaseException:  # (a Ctrl-C must not leave the pool's lock held)
                pool.release_leaked_locks(levels)
                raise
        return False

    def cancel_if_pending(self, blocking: bool = True) -> bool | None:
        """Cancel a future no worker has taken yet, and tell every waiter now
        (the pool never starts it: the dispatcher skips it).  False otherwise;
        None if not ``blocking`` and another thread holds the future's lock.

        The state changes under the pool's lock too: the dispatcher, which
        holds that lock, starts a pending future without its condition when
        another thread holds that (see :func:`start_running_locked`), this one
        for instance, but never while this holds the pool's lock.  (Taken
        second: the dispatcher never waits for a condition, and a thread that
        holds this condition in an outer frame may wait for the pool's lock.)
        As in :meth:`_finish`, a Ctrl-C is held back over the state change
        and the waiters' wake-ups, and the done-callbacks run even when it is
        raised afterwards.  Another handler's exception landing right after
        the acquire does not leave the condition held."""
        pool = self._ie_pool
        levels = pool.lock_levels()
        cond = self._condition
        base = lock_level(cond)
        changed = False
        try:
            with defer_sigint():
                if not cond.acquire(blocking):
                    return None
                try:
                    if self._state != _PENDING:
                        return False
                    with pool.lock:
                        if self._state != _PENDING:  # (started meanwhile)
                            return False
                        self._state = _NOTIFIED
                        changed = True  # (no call in between: nothing can land there)
                    for waiter in self._waiters:
                        waiter.add_cancelled(self)
                    cond.notify_all()
                finally:
                    cond.release()
        except BaseException:  # (a Ctrl-C right after an acquire: see _compat.release_if_owned)
            pool.release_leaked_locks(levels)
            release_if_owned(cond, base)
            raise
        finally:
            if changed:
                self._invoke_callbacks()
        return True

    def set_result(self, result: Any) -> None:
        """The standard one; in the main thread made Ctrl-C safe (see :meth:`_finish`)."""
        self._settle(result, None, False, False)

    def set_exception(self, exception: BaseException | None) -> None:
        """The standard one; in the main thread made Ctrl-C safe (see :meth:`_finish`)."""
        self._settle(None, exception, True, False)

    def settle_result(self, result: Any) -> None:
        """``set_result`` as the pool calls it: the done-callbacks run on the pool's
        resolver thread (see :meth:`_finish`)."""
        self._settle(result, None, False, True)

    def settle_exception(self, exception: BaseException | None) -> None:
        """``set_exception`` as the pool calls it (see :meth:`settle_result`)."""
        self._settle(None, exception, True, True)

    def _settle(self, result: Any, exception: BaseException | None, failed: bool, by_pool: bool) -> None:
        if not failed:
            with self._condition:
                if self._unwatched_running():
                    # Nobody to wake and no callback to run (most futures of a
                    # burst): the state change is all there is.  A Ctrl-C between
                    # these two stores leaves the message to be handled again
                    # (see Resolver._deliver_in_main).
                    self._result = result
                    self._state = _FINISHED
                    return
        self._finish(result, exception, failed, by_pool)

    def _unwatched_running(self) -> bool:
        """Running, and nobody to wake nor callback to run when it finishes
        (under its lock)."""
        return (
            self._state == _RUNNING and not self._waiters and not self._done_callbacks and not self._condition._waiters  # type: ignore[attr-defined]
        )

    def settle_unwatched(self, result: Any) -> bool:
        """:meth:`settle_result` for the main thread's common case, without
        waiting: True if the future was running with nobody to wake and no
        callback, and is now finished with ``result``; False (nothing done) if
        its lock is taken or there is more to do.  The lock is only tried, and
        released in the except should a Ctrl-C land right after it is taken."""
        cond = self._condition
        level = lock_level(cond)
        try:
            if not cond.acquire(False):
                return False
            if self._unwatched_running():
                self._result = result
                self._state = _FINISHED
            cond.release()
        except BaseException:
            while lock_level(cond) > level:
                cond.release()
            raise
        return self._state == _FINISHED

    def _finish(self, result: Any, exception: BaseException | None, failed: bool, by_pool: bool) -> None:
        """Future.set_result/set_exception.  In the main thread (which delivers
        results while it waits), the state change and the waiters' wake-ups are
        one step a Ctrl-C cannot cut in two (cut there, other threads would wait
        for ever), and the done-callbacks run even when the Ctrl-C held back
        meanwhile is raised.

        With ``by_pool`` (a result the pool delivers), the done-callbacks run on
        the pool's resolver thread, as ProcessPoolExecutor's run on its manager
        thread: never in a thread that delivers results while it waits in
        ``result()``, submits, or polls (which may hold a lock of the user's
        that a callback takes; run there, the callback would wait for it for
        ever).  That thread learns its own result without waiting for them."""
        changed = handed = False
        try:
            with defer_sigint() if is_main_thread() else NOT_DEFERRED:
                with self._condition:
                    if self._state in _DONE:
                        raise _base.InvalidStateError(f"{self._state}: {self!r}")
                    if failed:
                        self._exception = exception
                    else:
                        self._result = result
                    self._state = _FINISHED
                    for waiter in self._waiters:
                        if failed:
                            waiter.add_exception(self)
                        else:
                            waiter.add_result(self)
                    self._condition.notify_all()
                    changed = True
                if self._done_callbacks:
                    # (Handed over, or what _invoke_callbacks does first, with
                    # the Ctrl-C held back: cut there, the callbacks would never
                    # run.)
                    handed = by_pool and self._hand_over_callbacks()
                    if not handed and LIVE_WAITS:
                        share_live_waits(wake=True)
        finally:
            if changed and not handed:
                _base.Future._invoke_callbacks(self)  # type: ignore[attr-defined]

    def result(self, timeout: float | None = None) -> T:
        if self._state == _FINISHED:
            # Finished is final, and the outcome was stored before the state: no
            # lock needed (nor any clean-up on the way out).
            if self._exception is None:
                return self._result  # type: ignore[return-value]
            try:
                raise self._exception
            finally:
                self = None  # type: ignore[assignment]  # (no cycle with the exception, as the standard one)
        # The levels of the locks this thread holds on entry: not 0 in a signal
        # handler (or a finalizer) run inside the pool's code or inside
        # concurrent.futures.wait() (which holds the futures' conditions).
        level, levels = lock_level(self._condition), self._ie_pool.lock_levels()
        try:
            if self._state in WAITABLE:
                timeout = self._ie_pool.wait_for(self, timeout)
            return super().result(timeout)
        except BaseException:
            self._release_leaked_locks(level, levels)
            raise

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _FINISHED:  # (final: no lock needed)
            return self._exception
        level, levels = lock_level(self._condition), self._ie_pool.lock_levels()
        try:
            if self._state in WAITABLE:
                timeout = self._ie_pool.wait_for(self, timeout)
            return super().exception(timeout)
        except BaseException:
            self._release_leaked_locks(level, levels)
            raise

    def _release_leaked_locks(self, level: int, levels: tuple[int, int]) -> None:
        """A Ctrl-C can leave a lock held by this thread (``with`` is not signal
        safe); the resolver would then block on it for ever.  The levels held
        on entry stay held if an outer frame of the pool's (or
        ``concurrent.futures.wait()``) holds them (``_compat.outer_level``)."""
        release_if_owned(self._condition, outer_level(level))
        self._ie_pool.release_leaked_locks(levels)

    def try_settle(self, outcome: tuple[bool, Any], wait: float) -> bool:
        """Settle the future as the pool does, from a thread other than the main
        one: with ``outcome`` (True, value), (False, exception), or (False,
        None) for a task stopped at our request (cancelled).  False, with
        nothing changed, if the future's lock stays held for ``wait`` seconds
        (0: not at all; negative: no limit): a Ctrl-C inside
        ``concurrent.futures.wait()`` can leave
        it held by the main thread for good, and the caller parks the outcome
        instead of waiting with the whole pool behind it (see
        ``Resolver.retry_parked``).  True once done, by this call or before.
        The lock is tried once and held until the state has changed: no gap
        where the main thread could take it between the two."""
        cond: FutureCondition = self._condition  # type: ignore[assignment]
        # (Tried first without a deadline: the common case, free, costs no clock.)
        if not (_acquire(cond, False) or (wait and _acquire(cond, True, wait))):  # (wait < 0: no limit)
            return False
        try:
            if self._state in _DONE:
                return True  # (interrupted, cancelled, or settled by another thread meanwhile)
            ok, value = outcome
            if ok:
                self._result = value
                self._state = _FINISHED
                for waiter in self._waiters:
                    waiter.add_result(self)
            elif value is not None:
                self._exception = value
                self._state = _FINISHED
                for waiter in self._waiters:
                    waiter.add_exception(self)
            else:
                self._state = _NOTIFIED
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
            if cond._waiters:  # (made only when a thread first waits on it)
                cond.notify_all()
        finally:
            cond.release()
        if self._done_callbacks and not self._hand_over_callbacks():
            self._invoke_callbacks()
        return True

    def _hand_over_callbacks(self) -> bool:
        """For a future the pool just settled, with done-callbacks: hand them to
        the resolver thread (True), unless they only wake an event loop
        (``INLINE_CALLBACKS``) or no resolver takes them: the caller runs them."""
        return not _inline_safe(self._done_callbacks) and self._ie_pool.run_callbacks_later(self)

    def force_cancel(self, by_pool: bool = False) -> bool:
        """Cancel even a running future (its task is being stopped).  False if it
        had already finished.  With ``by_pool``, the done-callbacks run on the
        resolver thread (see :meth:`_finish`)."""
        changed = False
        try:
            with self._condition:
                if self._state == _base.FINISHED:
                    return False
                if self._state in (_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED):
                    return True
                self._state = _base.CANCELLED_AND_NOTIFIED
                changed = True  # (no call in between: nothing can land there)
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
                self._condition.notify_all()
        finally:
            # (Even when a signal handler's exception cut the above short: the
            # state changed, and nothing would run them later.)
            if changed and not (by_pool and self._done_callbacks and self._hand_over_callbacks()):
                self._invoke_callbacks()
        return True


def start_running_locked(fut: Future[Any]) -> bool:
    """:func:`start_running` for the dispatcher, under the pool's lock: it must
    not wait for a future's lock there.  The main thread can hold one in an
    outer frame (registering its wait for a pending future) while a signal
    handler run inside waits for the pool's lock (a ``submit()``, a
    ``result()``): the dispatcher waiting for that future would wait for ever,
    and the pool with it.  So, that lock held by another thread, a pending
    future is started without it: its holder does not change a pending state,
    as ``cancel()`` (the only one that does) runs under the pool's lock too."""
    cond = fut._condition
    level = lock_level(cond)
    # (Not a with, the acquire may fail; nor a finally, where a signal handler
    # can run before the release: the release comes first, or the except
    # does it, for a Ctrl-C right after the acquire returned.)
    try:
        if cond.acquire(False):
            if fut._state == _PENDING:
                fut._state = _RUNNING
                cond.release()
                return True
            cond.release()
        elif fut._state == _PENDING:
            fut._state = _RUNNING
            return True
    except BaseException:
        while lock_level(cond) > level:
            cond.release()
        raise
    if fut._state != _CANCELLED:
        return False
    # Cancelled by the standard Future.cancel() (not PoolFuture's): never seen
    # in practice; start_running tells its waiters.
    return start_running(fut)


def start_running(fut: Future[Any]) -> bool:
    """``set_running_or_notify_cancel()`` for a future that may have been
    cancelled already: True if it was pending (it is running now); False if it
    was cancelled (its waiters are told, if ``cancel()`` did not already)."""
    with fut._condition:
        state = fut._state
        if state == _PENDING:
            fut._state = _RUNNING
            return True
        if state == _CANCELLED:  # (the standard cancel(): its waiters learn it now)
            fut._state = _NOTIFIED
            for waiter in fut._waiters:
                waiter.add_cancelled(fut)
        return False


class PipeWaiter(_base._Waiter):
    """A waiter in a future's ``_waiters`` list (the hook ``concurrent.futures.wait``
    uses) that writes a wake-up byte to a pipe when the future is done, so that
    the main thread can wait with ``poll`` (see :func:`interpexec._wakeup.wait`).
    (It needs none of the base class's state.)"""

    def __init__(self, wfd: int) -> None:
        self.wfd = wfd

    def add_result(self, future: Future[Any]) -> None:
        notify(self.wfd)

    add_exception = add_cancelled = add_result


def set_exception_if_running(fut: PoolFuture[Any], exc: BaseException) -> None:
    """Fail a future the pool could not run (its callbacks run on the resolver thread)."""
    if fut._state == _base.RUNNING:
        try:
            fut.settle_exception(exc)
        except _base.InvalidStateError:
            pass
