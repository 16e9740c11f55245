"""Waiting: a thread blocked in ``Future.result()`` collects its own result, and
``interrupt()``.

A waiting thread registers a pipe for its task in the control block
(``attach_waiter``); the worker that finishes the task writes to it instead of
waking the resolver, and the waiting thread delivers every queued result itself
(two thread wake-ups per round trip instead of three).  This is a shortcut on
top of the resolver (see :mod:`interpexec._resolver`): a waiter that stops
waiting deregisters and wakes the resolver unless its result is in; a future not
dispatched yet, or whose slot is taken, waits on its condition for the resolver;
``result()`` called on the resolver thread itself (by a done-callback) resolves
nested.  ``interrupt()`` stops a task and wakes its waiter at once.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from ._compat import is_main_thread, queue_count_if_open
from ._future import LIVE_WAITS, WAITABLE, PipeWaiter, PoolFuture, share_live_waits
from ._protocol import INIT_TID
from ._resolver import Resolver
from ._sigint import NOT_DEFERRED, defer_sigint
from ._state import WorkItem
from ._wakeup import borrow, drain, give_back, lent, notify, try_borrow, wait

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any


class Watch:
    """A pipe registered for one task in a worker's hands: the worker that
    finishes it writes a byte, so the pipe becomes readable when the future may
    be done.  For threads blocked in ``result()`` and for event loops
    (:meth:`InterpreterPoolExecutor.watch`).  Use as a context manager, or call
    :meth:`close`."""

    __slots__ = {
        "_item": "",
        "_pipe": "",
        "_pool": "",
        "fd": "The read end of the pipe: readable when the future may be done.",
        "future": "The future watched.",
    }

    def __init__(self, pool: Waiting, future: PoolFuture[Any]) -> None:
        # Holds nothing yet (Waiting.watch borrows the pipe and registers): an
        # exception between any two steps there leaves a state close() undoes.
        self._pool, self.future = pool, future
        self._item: WorkItem | None = None
        self._pipe: tuple[int, int] | None = None
        self.fd = -1

    def check(self) -> bool:
        """Read the wake-up and deliver every queued result (in this thread); True
        once the future is done.  Call it once before the first wait too."""
        drain(self.fd)
        self._pool.collect()
        return self.future._state not in WAITABLE

    def close(self) -> None:
        """Deregister (the resolver delivers the result if nobody else did).  A
        Ctrl-C is held back over it: cut short, it would leave the waiter slot
        registered and the pipe lent for ever.  (Another signal's handler may
        run here: the registration stays live until ``detach_waiter`` ends it,
        so that a pool call failing in that handler does not take it.)"""
        with defer_sigint() if is_main_thread() else NOT_DEFERRED:
            pipe, self._pipe = self._pipe, None
            if pipe is not None:
                if self._item is not None:
                    self._pool.detach_waiter(self._item, pipe[1])
                give_back(pipe)

    def share(self, wake: bool) -> None:
        """A wait nested inside this one (see ``_future.Waiters``), or code this
        thread runs while it delivers, relies on the resolver: have the worker
        wake it too (as for an event loop's watch); with ``wake``, wake it now
        if a result is queued (the worker may have read the registration before
        this change: its result is then in).  Called by the waiting thread."""
        if self._item is not None:  # (registered, even if close() has begun)
            self._pool.share_registration(self._item, wake)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Waiting(Resolver):
    # ------------------------------------------------------------- waiting
    def watch(self, fut: Future[Any], thread: int = 0) -> Watch | None:
        """A :class:`Watch` for ``fut``, or None when ``fut`` is not in a worker's
        hands yet (queued, or done), another thread watches it already, or too
        many watches are out: then the resolver delivers it, and a done-callback
        or the future's own wait is the way to learn of it.

        With ``thread`` (a thread about to block in ``result()``), the watch is
        *live* from the moment it is registered until it is deregistered (see
        ``_future.LIVE_WAITS``)."""
        if not isinstance(fut, PoolFuture) or fut._ie_pool is not self:
            return None
        watch = Watch(self, fut)
        try:
            pipe = watch._pipe = try_borrow()
            if pipe is None:
                return None
            watch.fd = pipe[0]
            if not self.attach_waiter(fut, watch, thread):
                watch.close()
                return None
        except BaseException:  # (a Ctrl-C): undo whatever was done
            watch.close()
            raise
        return watch

    def wait_for(self, fut: PoolFuture[Any], timeout: float | None) -> float | None:
        """Block until ``fut`` is done (or ``timeout``), collecting results in this
        thread: the worker that finishes ``fut`` writes straight to our pipe.

        Returns the part of ``timeout`` left for the standard Condition wait that
        follows (it returns at once when ``fut`` is done)."""
        me = threading.get_ident()
        if me == self.resolver_ident:
            return self._resolve_until(fut, timeout)
        if self.dispatch_due():  # (rare: a dispatch a Ctrl-C cut short)
            self.dispatch_now()
        if self.cancelling or self.taken_back or self.drained:  # (rare: see Resolver.finish_cancelling)
            self.finish_cancelling(blocking=False)  # (never waiting: result() has a timeout)
        watch = self.watch(fut, me)
        if watch is None:
            if me in LIVE_WAITS:  # nested in this thread's own wait (it may be for fut)
                share_live_waits(wake=False)  # (the collect below finds what raced it)
            # Its result may be taken already (the resolver busy in a callback, or
            # a Ctrl-C that cut a take short): deliver what is there, here.
            if self.collect() and fut._state not in WAITABLE:
                return timeout
            if is_main_thread():
                return self._wait_done(fut, timeout)
            return timeout  # the resolver delivers it, and the standard Condition wait serves it
        # (Nothing between the assignment above and this try can raise: no call,
        # no backward jump, so no signal handler runs.)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            wfd = watch._pipe[1] if watch._pipe else -1  # (only this thread reads the pipe)
            at: tuple[int, float, float] | None = None
            with watch:
                while not watch.check():
                    if self.wanted < self.max_workers and (self.inflight or self.pending):
                        # (It grows the pool too, from its first deadline on:
                        # the resolver may be busy in a callback that waits for
                        # it.  Nothing is measured before: a round trip is short.)
                        step = time.monotonic() + self.grow_wait_ms / 1000
                        if deadline is None or step < deadline:
                            if not wait(watch.fd, step, own_wfd=wfd):
                                if at is not None:
                                    self.grow_deadline(at)
                                at = self.grow_watch()
                            continue
                    if not wait(watch.fd, deadline, own_wfd=wfd):
                        return 0.0
        except BaseException:
            # (A Ctrl-C that cut close() short at its start, before it holds
            # Ctrl-C back, left the registration and the pipe: close again; it
            # does nothing if the first one ran.)
            watch.close()
            raise
        return timeout

    def share_registration(self, item: WorkItem, wake: bool) -> None:
        """Make the registration of ``item``'s waiter one whose worker wakes the
        resolver too (see :meth:`Watch.share`).  Called by the waiting thread
        itself (nested in its own wait), which alone writes the slot while it
        holds it: no lock, and none may be taken here, inside
        ``concurrent.futures.wait()`` holding futures' conditions (the
        dispatcher takes a pending future's condition under the pool's lock)."""
        fds = self.layout.waiter_fds + item.tid % self.layout.nslots
        registered = item.waiter_fd
        if not registered or self.ctl[fds] != registered:
            return
        self.ctl[fds] = -registered
        if wake and queue_count_if_open(self.results.qid):
            if self.lock.acquire(blocking=False):
                try:
                    if not self.closed:
                        self.results.notify()
                finally:
                    self.lock.release()
            else:  # (held elsewhere, perhaps waiting for a condition this thread holds)
                threading.Thread(target=self.wake_resolver, name="interpexec-wake", daemon=True).start()

    def _wait_done(self, fut: PoolFuture[Any], timeout: float | None) -> float | None:
        """The main thread's wait for a future the resolver delivers: on a pipe
        the future's waiters list writes to, with ``poll``, so that a Ctrl-C is
        never lost (the standard Condition wait can sleep through one that lands
        just before it blocks; see :func:`interpexec._wakeup.wait`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            pipe = borrow()
        except OSError:  # out of descriptors: the standard Condition wait
            return timeout
        waiter = PipeWaiter(pipe[1])
        try:
            with fut._condition:
                if fut._state not in WAITABLE:
                    return timeout
                fut._waiters.append(waiter)
            try:
                # (A thread that took or holds the result wakes the waits it
                # sees: the result may have come before the append.  See
                # Resolver._wake_waits.)
                self.collect()
                while fut._state in WAITABLE:
                    if not wait(pipe[0], deadline, own_wfd=pipe[1]):
                        return 0.0
                    drain(pipe[0])
                    self.collect()
            finally:
                with fut._condition:
                    fut._waiters.remove(waiter)
        finally:
            give_back(pipe)
        return timeout

    def _resolve_until(self, fut: PoolFuture[Any], timeout: float | None) -> float | None:
        """``result()`` called in the resolver thread itself (by a done-callback):
        nobody else would deliver, so this thread goes on resolving, nested, until
        ``fut`` is done.  Another thread may deliver ``fut`` meanwhile (one
        waiting for it in ``result()``, which its worker alone wakes): a waiter
        in ``fut``'s list has whoever settles it wake this thread too."""
        waiter = PipeWaiter(self.results.wfd)  # (open until this thread, the resolver, ends)
        with fut._condition:
            if fut._state not in WAITABLE:
                return timeout
            fut._waiters.append(waiter)
        try:
            return self.resolve_nested(lambda: fut._state not in WAITABLE, timeout)
        finally:
            with fut._condition:
                fut._waiters.remove(waiter)

    def attach_waiter(self, fut: PoolFuture[Any], watch: Watch, thread: int = 0) -> bool:
        """Have the worker that finishes ``fut`` write a byte to ``watch``'s pipe
        (one ``thread`` blocks on, or with ``thread=0`` one an event loop
        watches); whoever else handles the result writes it instead, unless that
        is ``thread`` itself.  The waiter then calls :meth:`collect`.  False when
        ``fut`` is not in a worker's hands yet, or its slot is taken.  After
        attaching, call :meth:`collect` once before waiting (the result may
        already be queued), and close the watch when done."""
        assert watch._pipe is not None
        wfd = watch._pipe[1]
        tid = fut._ie_tid
        slot = tid % self.layout.nslots
        fds, tids = self.layout.waiter_fds + slot, self.layout.waiter_tids + slot
        with self.lock:
            item = self.inflight.get(tid)
            if item is None or item.waiter_fd or self.ctl[fds]:
                return False
            watch._item = item  # (first: whatever follows, close() undoes)
            if thread:  # live until detach_waiter: see _future.LIVE_WAITS
                # (Before the item names the pipe: a pool call failing in a
                # signal handler run in between would take the wait for one an
                # exception left behind (abandon_waits) and give its pipe back.)
                LIVE_WAITS.setdefault(thread, {})[wfd] = watch
            item.waiter_thread = thread
            item.waiter_fd = wfd + 1
            self.ctl[tids] = tid  # (the id first: a worker checks it after the fd)
            # Negative for a watch (thread 0), which may never look: its worker
            # then wakes the resolver too, so that the result is delivered anyway.
            self.ctl[fds] = wfd + 1 if thread else -(wfd + 1)
        return True

    def detach_waiter(self, item: WorkItem, wfd: int) -> None:
        """Deregister the pipe ``wfd`` (in the thread that registered it)."""
        fds = self.layout.waiter_fds + item.tid % self.layout.nslots
        # (No lock: only this thread can have put wfd there, and no other thread
        # can take the slot while it holds it.)
        if abs(self.ctl[fds]) == wfd + 1:
            self.ctl[fds] = 0
        if item.waiter_fd == wfd + 1:
            item.waiter_fd = 0
        me = threading.get_ident()
        live = LIVE_WAITS.get(me)
        if live is not None and live.pop(wfd, None) is not None and not live:
            # (Not del: a signal handler's wait, run right after the pop, may
            # have registered in this same registry and removed it already.)
            LIVE_WAITS.pop(me, None)
        # A worker may have woken only us: unless our result is in, the resolver
        # takes over (it collects whatever is queued).
        if item.future._state in WAITABLE:
            self.wake_resolver()

    def release_leaked_locks(self, levels: tuple[int, int] = (0, 0)) -> None:
        super().release_leaked_locks(levels)
        self.abandon_waits()

    def abandon_waits(self) -> None:
        """After an exception (a Ctrl-C) left ``result()`` in this thread between
        registering its pipe and the ``with`` that deregisters it: deregister what
        this thread left registered, so that its worker wakes the resolver again
        (the result must be delivered whether or not anyone waits), and give the
        pipe back.  A wait still in progress further up this thread's stack (this
        runs inside it: a done-callback or a signal handler called the pool,
        which refused) is not left behind: taking its pipe made it sleep on a pipe
        nobody writes to, and gave the pipe back twice."""
        me = threading.get_ident()
        live = LIVE_WAITS.get(me, {})
        # (A snapshot, one C call, and no lock: this runs when a pool call fails,
        # perhaps in a signal handler inside concurrent.futures.wait() holding
        # futures' conditions, where waiting for the pool's lock could deadlock
        # against a dispatch holding it and waiting for one of those.)
        items = [
            item
            for item in list(self.inflight.values())
            if item.waiter_fd and item.waiter_thread == me and item.waiter_fd - 1 not in live
        ]
        for item in items:
            wfd = item.waiter_fd - 1
            self.detach_waiter(item, wfd)
            for pipe in [p for p in lent() if p[1] == wfd]:
                give_back(pipe)

    # ------------------------------------------------------------ interrupts
    def interrupt(self, fut: PoolFuture[Any]) -> bool:
        """Stop the task behind ``fut`` whether pending or running; False if it
        had already finished."""
        if fut._state not in WAITABLE:
            return False
        if fut.cancel_if_pending():
            return True
        self.collect()  # a result already queued wins: the task had finished
        tid = fut._ie_tid
        with self.lock:
            item = self.inflight.get(tid)
            if item is None or fut._state not in WAITABLE:
                return False
            self.ctl[self.layout.stop_tids + tid % self.layout.nslots] = tid  # seen by the worker at once
            for w in self.workers.values():
                if not w.retired:
                    w.interrupt(tid)
        cancelled = fut.force_cancel()
        if item.waiter_fd and item.waiter_thread != threading.get_ident():
            notify(item.waiter_fd - 1)  # the waiter wakes now, not when the call returns
        return cancelled

    def interrupt_running(self) -> None:
        """Interrupt every task in the workers' hands, and initializers running."""
        with self.lock:
            futures = [item.future for item in self.inflight.values()]
            for w in self.workers.values():
                if not w.retired and w.slot not in self.ready_slots:
                    w.interrupt(INIT_TID)
        for fut in futures:
            self.interrupt(fut)
