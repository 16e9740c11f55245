"""Resolution: results come off the result channel and settle their futures.

**The invariant.**  Every result a worker puts on the result channel is
delivered, whether or not anybody waits: the worker wakes the resolver thread
(if it sleeps and no wake-up is on its way), and the resolver takes everything
queued and resolves the futures.  A future nobody waits for still completes, its
callbacks run, ``running()`` polls end.  Done-callbacks run on the resolver
thread only (other threads that settle a future hand them over:
``run_callbacks_later``), as ProcessPoolExecutor's run on its manager thread.

**The shortcut.**  A thread blocked in ``Future.result()`` registers its own pipe
for its task (``attach_waiter``, in :mod:`interpexec._waiting`); the worker that finishes that task writes to
that pipe instead of the resolver's, and the waiting thread collects every
queued result itself: two thread wake-ups per round trip instead of three.  A
waiter that stops waiting (timeout, Ctrl-C) first deregisters, then wakes the
resolver if its result is not in yet, so the shortcut is never the only route.

**Robustness.**  Results are taken off the queue into ``inbox`` (through
``arrived``, by C-level calls that a Ctrl-C cannot cut in two) and handled
from there; handling a result is idempotent, and user code (done-callbacks,
``__setstate__``, log handlers) runs after the pool's bookkeeping and without
its locks.  An exception from user code fails at most its own future (and is
reported); a Ctrl-C that lands while a thread delivers results is re-raised
only after everything it took off the queue has been delivered.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from concurrent.futures import _base
from itertools import islice, repeat
from operator import call

from ._compat import (
    QueueEmpty,
    QueueNotFoundError,
    is_main_thread,
    lock_level,
    os_thread_started,
    queue_count_if_open,
    queue_take,
    start_thread_object,
)
from ._errors import RemoteTraceback, explain_missing_main_global, unpack_exception
from ._future import RESOLVERS, WAITABLE, PipeWaiter, PoolFuture, set_exception_if_running
from ._lifecycle import Workers, warn_threads_left
from ._pickled import materialize
from ._protocol import (
    ERR,
    EV_INIT_FAILED,
    EV_LOG,
    EV_STARTED,
    EV_STUCK,
    EV_THREADS_LEFT,
    EVENT,
    LENT,
    NATIVE,
    OK,
    SAME_ARG,
    TIMEOUT,
    VALUE,
)
from ._shared import relend
from ._sigint import NOT_DEFERRED, defer_sigint
from ._state import LIVE_POOLS, WorkItem
from ._transport import (
    COLLECTOR_ASLEEP,
    COLLECTOR_READ,
    RESULTS_TAKEN,
    decode,
)
from ._wakeup import close_free, notify, wait

#: How long queued work waits, no worker taking a task, before the pool starts
#: more workers (while fewer than max_workers are started; see _wait_or_grow).
GROW_AFTER_MS = 10
#: The longest deadline while calls run and none is queued (see grow_deadline).
GROW_WAIT_MAX_MS = 160
#: How long a worker still starting counts as about to take a queued call.
START_PATIENCE = 0.5
#: While the process uses at least BUSY_SHARE of its CPUs, queued work waits
#: this long with no task taken before the pool grows (more workers would only
#: share those CPUs; see _wait_or_grow).
GROW_AFTER_BUSY = 0.5
BUSY_SHARE = 0.8
#: How long a thread other than the main one waits for a future's lock to
#: settle it before it parks the outcome (see Resolver._park), and how often
#: the resolver tries parked ones again.
SETTLE_WAIT = 0.002
PARK_RETRY = 0.02
PARK_RETRY_MAX = 1.0
#: Looks (each yielding the CPU) the resolver makes for results before it
#: sleeps while calls wait for the window (see Resolver._linger), as long as
#: its last sleep was shorter than LINGER_IF_SLEPT seconds.
LINGER = 64
LINGER_IF_SLEPT = 0.0005

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable
    from typing import Any


class Resolver(Workers):
    def start_locked(self) -> None:
        """Start the resolver and the missing workers.  In the main thread, call
        it inside ``_sigint.defer_sigint()`` entered before the lock: a Ctrl-C
        inside Thread.start() could leave a thread running that the pool does
        not know of (a second resolver), or one counted that never ran; held
        back, it is raised once the lock is released."""
        if self.resolver_thread is None:
            name = f"{self.thread_name_prefix}_resolver"
            thread = threading.Thread(target=self._resolver_loop, name=name, daemon=True)
            # Recorded first: an exception from a signal handler other than
            # SIGINT's (not held back) can land anywhere from here on, and a
            # resolver that runs unrecorded would have its channels closed
            # under it by a shutdown().  Cut short before the OS thread
            # started, start() is undone (the next start makes another); a
            # second one started anyway leaves at once (see _resolver_loop).
            self.resolver_thread = thread
            try:
                start_thread_object(thread)
            except BaseException:
                if not os_thread_started(thread):
                    self.resolver_thread = None
                raise
        super().start_locked()

    # ----------------------------------------------------------- collecting
    def take_results(self, final: bool = False) -> bool:
        """Move every result now queued into ``inbox`` (no user code runs).

        Out-of-band buffers of results are views over a worker's memory: they are
        copied out here, before that worker can destroy its interpreter.  A
        worker calls this with ``final`` before it does: it then waits for any
        take in progress, which may still hold views of its memory (in a frame
        a signal handler interrupted, say) even once ``arrived`` is empty."""
        if self.closed or not (final or queue_count_if_open(self.results.qid) or self.arrived):
            return False  # (the common case, without the lock; the pool may close meanwhile)
        # The collect lock is released before the pool's lock is taken, never
        # held while waiting for it: a signal handler that collects (stats(),
        # result()) can run in a thread that holds the pool's lock (inside
        # submit()), and would wait for the collect lock for ever.
        with self.collect_lock:
            if self.closed:
                return False
            taken = self._take_queued()
        if not taken:
            return False
        # The batch leaves the window at once, in queue order (one lock entry
        # and one dispatch per batch).  A thread that delivers one of these
        # before this is done moves its task out of the window itself (_handle).
        self._leave_window(taken)
        if final:
            # A worker's last take delivers nothing: the resolver must.  (The
            # worker that put a result and saw it taken wrote no wake-up, and
            # the resolver may have looked just before this take.)
            self.wake_resolver()
        return True

    def _take_queued(self) -> list[int]:
        """Move every queued message into ``inbox``; return their task ids.

        A Ctrl-C can land between any two steps here (in the main thread): each
        message is always in the queue, in ``arrived`` or in ``inbox``, moved
        between them by single C-level calls, so none is lost; what a Ctrl-C
        leaves in ``arrived`` is moved on by the next call."""
        qid, arrived, inbox, ctl = self.results.qid, self.arrived, self.inbox, self.ctl
        taken: list[int] = []  # (not read back from the inbox: other threads deliver from it)
        # Only this thread uses ``arrived`` (collect_lock), but a signal handler
        # (or a finalizer) that calls the pool can run a take nested in this one,
        # at any call or loop jump below, and move ``arrived`` on: each step
        # tolerates finding it shorter or refilled.  Taking a message twice is
        # harmless (handling is idempotent); losing one is not.
        while arrived or (n := queue_count_if_open(qid)):
            if not arrived:
                try:
                    queue_take(qid, n, arrived)
                except QueueEmpty:  # a nested take emptied the queue: what was taken is in arrived
                    pass
                except QueueNotFoundError:  # a shutdown in a signal handler closed the pool meanwhile
                    return taken
                finally:
                    # (Lingering workers ask whether their result was taken only
                    # when this changed: see _worker_main.  Changed after the
                    # take, whatever cut it short.)
                    ctl[RESULTS_TAKEN] += 1
            try:
                taken += _copy_out(arrived)
            except IndexError:  # a nested take moved them on
                continue
            try:
                inbox.extend(map(call, repeat(arrived.popleft, len(arrived))))
            except IndexError:  # a nested take moved the rest on
                pass
        return taken

    def after_worker_exit(self) -> None:
        self.wake_resolver()  # it delivers what the worker left, and may end
        self.maybe_close()

    def wake_resolver(self) -> None:
        """Write a wake-up byte for the resolver (under the lock the channels are
        closed under: never to a closed descriptor)."""
        with self.lock:
            if not self.closed:
                self.results.notify()

    def collect(self) -> bool:
        """Deliver every result now queued, in this thread.  Never blocks on I/O.

        A Ctrl-C in the main thread can land between any two steps here: no
        message is ever only in a local variable (see ``_take_queued`` and
        ``_deliver``), and a future's state change and the wake-ups of its
        waiters are not cut in two (``PoolFuture._finish``).  Done-callbacks run
        here only in the resolver thread; other threads hand them to it."""
        if self.parked and is_main_thread():
            self.retry_parked()  # (it may hold their locks itself)
        if (
            not self.inbox
            and not self.arrived
            and not self.held
            and not self.stalled
            and (self.closed or not queue_count_if_open(self.results.qid))
        ):
            # (the common case: nothing to deliver.  ``held`` too: a signal
            # handler's collect, nested in the main thread's delivery of a
            # message, must handle it, as nobody else will while it waits.)
            return False
        try:
            self.take_results()
        except BaseException:  # a Ctrl-C: what was taken must still be delivered
            if self.inbox or self.arrived:
                self.wake_resolver()
            raise
        delivered = self._deliver()
        if self.stalled and is_main_thread() and lock_level(self.lock):
            delivered = self._handle_stalled() or delivered
        return delivered

    def _deliver(self) -> bool:
        inbox = self.inbox
        if not inbox and not self.held:
            return False
        if is_main_thread():
            return self._deliver_in_main()
        deferred: BaseException | None = None
        retried: set[int] | None = None
        handled = False
        inflight, unsettled = self.inflight, self.unsettled
        msg: Any
        while True:
            try:
                msg = inbox.popleft()
            except IndexError:
                break
            handled = True
            try:
                # _handle's common case inline (most results of a burst, each
                # costing the main interpreter a frame and a main-thread test
                # less): a native value (a bare id: None) for a task already out
                # of the window, with nothing parked (whose order it keeps).
                tid, value = _plain(msg)
                item = unsettled.get(tid) if tid else None
                if item is None or tid in inflight or self.parked:
                    self._handle(msg)
                    continue
                fut = item.future
                try:
                    if fut._state == _RUNNING and not fut.try_settle((True, value), SETTLE_WAIT):
                        self._park(tid, item, (True, value))
                finally:
                    if fut._state not in WAITABLE:
                        self._settled(tid, item)
            except BaseException as exc:  # user code: deliver the rest first
                if retried is None:
                    retried = set()
                if self._unfinished(msg) and id(msg) not in retried:
                    retried.add(id(msg))
                    inbox.appendleft(msg)
                if threading.get_ident() == self.resolver_ident:
                    _report("an exception escaped while delivering a result", exc)
                elif deferred is None:
                    deferred = exc
        if deferred is not None:
            if inbox:
                self.wake_resolver()
            raise deferred
        return handled

    def _deliver_in_main(self) -> bool:
        """``_deliver`` for the main thread, where a Ctrl-C can land between any
        two bytecodes.  A message goes from the inbox into ``held`` (the main
        thread's own) by one C-level call, and leaves it only once handled; a
        Ctrl-C in between leaves it there, to be handled again (handling is
        idempotent) by the next delivery here or, woken, by the resolver."""
        held, handled = self.held, False
        popper = iter(self.inbox.popleft, _NOTHING)  # (C: the pop and the store in one call)
        inflight, unsettled = self.inflight, self.unsettled
        try:
            while True:
                if not held:
                    try:
                        held.extend(islice(popper, 1))
                    except IndexError:  # the inbox is empty
                        break
                handled = True
                try:
                    msg = held[0]
                except IndexError:  # a nested delivery (a signal handler in this thread) handled it
                    continue
                # The common case first, with no _handle (most results of a
                # burst): a native value (a bare id: None) for a task already
                # out of the window, whose future nobody waits for and has no
                # callback; anything else goes the general way.
                tid, value = _plain(msg)
                item = unsettled.get(tid) if tid else None
                if item is not None and tid not in inflight and item.future.settle_unwatched(value):
                    self._settled(tid, item)
                    held.clear()
                    continue
                try:
                    self._handle(msg)
                except BaseException:  # user code or a Ctrl-C: the rest first
                    if not self._unfinished(msg):
                        held.clear()
                    raise
                held.clear()
        except BaseException:
            # Whatever is left goes back for the resolver (or the next call).
            self.inbox.extendleft(held)
            held.clear()
            if self.inbox:
                self.wake_resolver()
            raise
        return handled

    def _unfinished(self, msg: Any) -> bool:
        """Would handling ``msg`` again do something left undone?"""
        if type(msg) is int:  # (see _handle)
            return msg in self.inflight or msg in self.unsettled
        if msg[1] == EVENT:
            return bool(msg[3] != EV_LOG)
        return msg[0] in self.inflight or msg[0] in self.unsettled

    def _handle(self, msg: Any) -> None:
        """Handle one message; safe to repeat (see ``_unfinished``).

        The task leaves ``inflight`` (freeing its place in the window) before its
        future is settled, since settling runs callbacks that may submit and wait;
        meanwhile it is in ``unsettled``, so an exception before it is settled
        leaves it to be handled again."""
        if type(msg) is int:  # a task that returned None, as its bare id (see _protocol)
            tid, kind = msg, VALUE
        else:
            tid, kind = msg[0], msg[1]
            if kind == EVENT:
                self._event(msg[2], msg[3], msg[4])
                return
        inflight = self.inflight
        # In flight first: another thread moving the task out of the window
        # (_leave_window: into unsettled, then out of inflight) between the two
        # lookups made the other order find it in neither, and the result was
        # dropped as a late report (its future running for ever).
        item = inflight.get(tid) or self.unsettled.get(tid)
        if item is None:
            return  # cancelled, timed out or interrupted earlier: a late report
        fut = item.future
        if fut._state != _RUNNING:
            outcome = None
        elif kind == VALUE:
            outcome = (True, None if type(msg) is int else msg[2])  # (the common case, inline)
        elif kind == OK and msg[2][0] == NATIVE:
            outcome = (True, msg[2][1])  # (the common case, inline)
        else:
            outcome = self._outcome(item, kind, msg)
        if inflight.get(tid) is item:
            # (take_results moves a batch out of the window; a Ctrl-C between
            # its steps, or a thread delivering before the taker got the
            # pool's lock, leaves this to be done here)
            self._leave_window([tid], msg)
        try:
            if outcome is not None and fut._state == _RUNNING:
                if not is_main_thread():
                    # (Never waiting long for the future's lock: see _park.
                    # Not at all while some are parked: locks left held are
                    # then likely, thousands at once after one interrupted
                    # wait; a retry comes within PARK_RETRY.)
                    if not fut.try_settle(outcome, 0 if self.parked else SETTLE_WAIT):
                        self._park(tid, item, outcome)
                elif outcome[0]:
                    try:
                        fut.settle_result(outcome[1])
                    except _InvalidStateError:
                        pass  # interrupted or cancelled meanwhile
                else:
                    self._settle(fut, kind, outcome)
        finally:
            if fut._state not in WAITABLE:
                self._settled(tid, item)

    def _settled(self, tid: int, item: WorkItem) -> None:
        """Task ``tid``'s future is done: wake the thread registered in its
        ``result()`` (if another), then let the task leave ``unsettled``.  In
        that order: cut in between, a redelivery finds the task there and
        wakes the waiter again; the other order lost the wake-up, the thread
        in result() asleep for good."""
        if item.waiter_fd and item.waiter_thread != threading.get_ident():
            notify(item.waiter_fd - 1)
        self.unsettled.pop(tid, None)

    def fail_items(self, failed: list[tuple[WorkItem, BaseException]]) -> None:
        """Fail futures that could not be dispatched or run (no pool lock held:
        callbacks may run).  As for a result (see ``_handle``), a thread other
        than the main one only tries a future's lock, and parks the failure
        when another thread holds it (a pool breaking while the main thread
        held one for good stopped the resolver, and every future after it)."""
        main = is_main_thread()
        for item, exc in failed:
            fut = item.future
            if main:
                set_exception_if_running(fut, exc)
            elif fut._state == _RUNNING and not fut.try_settle((False, exc), 0 if self.parked else SETTLE_WAIT):
                self._park(item.tid, item, (False, exc))
            if item.waiter_fd:
                notify(item.waiter_fd - 1)

    def take_pending_to_cancel_locked(self) -> None:
        """Move every queued call into ``cancelling`` (shutdown(cancel_futures=True)
        and terminate): from here on no dispatch starts it, and it stays
        recorded until its future is cancelled (:meth:`finish_cancelling`).
        Each item is recorded before ``pending`` lets go of it: an exception
        of a signal handler landing in between leaves some in both, where the
        dispatcher may still start one (its cancel then does nothing), never
        in neither."""
        cancelling = self.cancelling
        for item in self.pending:
            cancelling[item.tid] = item
        self.pending.clear()

    def finish_cancelling(self, blocking: bool = True) -> bool:
        """Cancel the futures of the calls in ``cancelling``, and of those
        ``terminate_workers()`` took back from the task queue (``taken_back``:
        still in the window, never to run), outside the pool's lock (their
        done-callbacks run here); True once none is left.  Not ``blocking``:
        never wait for a future's lock (a thread in ``result()`` with a timeout).

        Each step is idempotent and an item leaves ``cancelling`` only after
        its future has left PENDING, so a signal handler's exception that cuts
        this short loses nothing: whoever comes next finishes (the next
        ``shutdown()``, the exit's, a thread waiting in ``result()``, or the
        resolver, which tries them every ``cancel_retry`` and does not end while
        any is left).  A thread that may not wait for a future's lock only
        tries it, and leaves the call for later: the resolver (a thread in
        ``concurrent.futures.wait()`` may hold it while it waits for one the
        main thread left held), or a thread holding the pool's lock (a signal
        handler's ``shutdown()`` inside a pool call: a thread inside
        ``cancel()`` holds the future's lock while it waits for the pool's)."""
        cancelling, taken_back = self.cancelling, self.taken_back
        resolver = threading.get_ident() == self.resolver_ident
        if self.drained:  # (a take-back cut short)
            with self.lock:
                self.record_drained_locked()
        blocking = blocking and not resolver and not lock_level(self.lock)
        done = 0
        for tid, item in list(cancelling.items()):
            if item.future._state == _PENDING and item.future.cancel_if_pending(blocking) is None:
                continue  # (its lock is taken: later)
            if cancelling.pop(tid, None) is not None:
                done += 1
        for tid in list(taken_back):
            back = self.inflight.get(tid)
            if back is not None and back.future._state in WAITABLE:
                cond = back.future._condition
                if not blocking:
                    if not cond.acquire(False):
                        continue  # (later)
                    cond.release()  # (not held while its callbacks run)
                back.future.force_cancel()
            if back is not None and back.waiter_fd:
                notify(back.waiter_fd - 1)  # (again if a cut-short pass cancelled it: a spare wake-up is harmless)
            with self.lock:
                if back is not None and self.inflight.get(tid) is back:
                    del self.inflight[tid]
                taken_back.discard(tid)
                done += 1
        if cancelling or taken_back or self.drained:
            if resolver:  # (as for parked outcomes: the interval doubles while none moves)
                self.cancel_retry = PARK_RETRY if done else min(2 * self.cancel_retry, PARK_RETRY_MAX)
            elif not blocking:
                self.wake_resolver()  # (it keeps the time)
        return not (cancelling or taken_back or self.drained)

    def _park(self, tid: int, item: WorkItem, outcome: tuple[bool, Any]) -> None:
        """Keep a decoded outcome whose future's lock another thread holds (a
        thread other than the main one settles with a timeout: see
        ``PoolFuture.try_settle``).  A Ctrl-C landing in the standard library's
        loops of ``concurrent.futures.wait()`` over the futures' locks leaves
        some held by the main thread for good; waiting for one there stopped
        the whole pool.  The resolver tries again (``retry_parked``) every
        PARK_RETRY, and does not end while any is parked; the main thread,
        which can take a lock it holds itself, settles them at its next
        collect.  The task stays in ``unsettled`` meanwhile."""
        self.parked[tid] = (item, outcome)
        self.parked_retry = PARK_RETRY
        self.parked_retry_at = min(self.parked_retry_at, time.monotonic() + PARK_RETRY)
        if threading.get_ident() == self.resolver_ident:
            return
        # The resolver ends with a last look at ``parked`` after it closed the
        # hand-over (``callbacks_closed``): parked before that, it is seen; if
        # the hand-over is closed now, take it back (one C call, so exactly one
        # of the two has it) and wait for the lock here, as nobody would retry.
        if self.callbacks_closed:
            if self.parked.pop(tid, None) is not None:
                item.future.try_settle(outcome, -1)
            return
        self.wake_resolver()  # (it keeps the time)

    def retry_parked(self) -> bool:
        """Settle the parked outcomes whose futures' locks are free now (never
        waiting for one: the main thread too only takes a lock it holds itself,
        or a free one; another thread inside ``concurrent.futures.wait()`` may
        hold some while it waits for one the main thread holds).  True if any
        was settled.  In the main thread each one is a step a Ctrl-C cannot cut
        (cut after the pop, the wake-up of a thread waiting in ``result()``
        was lost).  The resolver's interval between tries doubles while none
        settles, up to PARK_RETRY_MAX (locks the main thread left held are
        only ever released by the main thread)."""
        main, me = is_main_thread(), threading.get_ident()
        settled = False
        for tid, (item, outcome) in list(self.parked.items()):
            fut = item.future
            with defer_sigint() if main else NOT_DEFERRED:
                if fut._state == _RUNNING and not fut.try_settle(outcome, 0):
                    continue
                settled = True
                self.parked.pop(tid, None)
                if fut._state not in WAITABLE:
                    self.unsettled.pop(tid, None)
                    if item.waiter_fd and item.waiter_thread != me:
                        notify(item.waiter_fd - 1)
        if me == self.resolver_ident:
            self.parked_retry = PARK_RETRY if settled else min(2 * self.parked_retry, PARK_RETRY_MAX)
            self.parked_retry_at = time.monotonic() + self.parked_retry
        return settled

    def parked_due(self) -> bool:
        """Whether the resolver should try the parked outcomes again now: once
        every ``parked_retry``, not on every pass of its loop (with results
        flowing, a pass per result or two, each trying every parked outcome:
        thousands after one interrupted ``concurrent.futures.wait()``)."""
        return bool(self.parked) and time.monotonic() >= self.parked_retry_at

    def _leave_window(self, tids: list[int], msg: tuple[Any, ...] | None = None) -> None:
        """Move the tasks ``tids`` out of the window (in flight -> unsettled,
        counted as completed) and dispatch what that frees, under the pool's
        lock.  A thread that finds the lock taken first wakes the waits for
        those tasks, and shows ``msg`` (a message it holds, no longer in the
        inbox) in ``stalled`` while it waits: the holder may be the main thread
        inside ``submit()``, whose signal handler waits for one of these results
        and collects it there (handling is idempotent)."""
        lock, inflight, unsettled = self.lock, self.inflight, self.unsettled
        if not lock.acquire(blocking=False):
            me = threading.get_ident()
            if msg is not None:
                self.stalled[me] = msg
            try:
                for tid in tids:
                    if (item := inflight.get(tid)) is not None:
                        self._wake_waits(item)
                lock.acquire()
            finally:
                if msg is not None:
                    self.stalled.pop(me, None)
        # (Not a with: the wake-ups come between trying the lock and waiting
        # for it.  A Ctrl-C right after the acquire leaves the lock to the
        # entry point's clean-up, as one cutting a with short does.)
        try:
            self.free_cells(tids)  # (reports: their workers are done with the cells)
            for tid in tids:
                if tid > 0 and (item := inflight.get(tid)) is not None:
                    # (Into unsettled first: a Ctrl-C cannot leave the item in
                    # neither dict, where nothing would settle it.  A pool
                    # call in a signal handler may have moved it already.)
                    unsettled[tid] = item
                    if inflight.pop(tid, None) is item:
                        self.completed += 1
            redo = self.limbo or self.repair_failed  # (see Dispatcher.repair_limbo_locked)
            failed = self.dispatch_locked() if self.pending or self.shutdown_flag or redo else None
        finally:
            lock.release()
        if failed:
            self.fail_items(failed)

    def _wake_waits(self, item: WorkItem) -> None:
        """Wake the waits for ``item``'s future that sleep (they collect on
        waking): its registered pipe, and the pipes of the main thread's waits
        in the future's waiters list."""
        if item.waiter_fd:
            notify(item.waiter_fd - 1)
        for waiter in list(item.future._waiters):
            if type(waiter) is PipeWaiter:
                waiter.add_result(item.future)

    def _handle_stalled(self) -> bool:
        """In the main thread (a signal handler's collect, while the main thread
        holds the pool's lock): handle what other threads hold while they wait
        for that lock."""
        handled = False
        for msg in list(self.stalled.values()):
            if self._unfinished(msg):
                handled = True
                self._handle(msg)
        return handled

    def _outcome(self, item: WorkItem, kind: int, msg: tuple[Any, ...]) -> tuple[bool, Any]:
        """(True, value) or (False, exception) for a result message; decoding runs
        no callback (but may run a class's ``__setstate__``)."""
        if kind == VALUE:
            return True, msg[2]
        if kind == OK:
            try:
                enc = msg[2]
                if enc[0] == LENT:  # the task returned a view its caller lent it
                    return True, relend(item.msg[3][2][enc[1]], enc[2], enc[3])
                if enc[0] == SAME_ARG:  # ... or one of its (immutable) arguments
                    return True, item.args[0][enc[1]]
                return True, decode(enc)
            except KeyboardInterrupt:
                raise  # a Ctrl-C in the main thread, not the task's outcome
            except BaseException as exc:  # unpickling failed: that future fails with it
                return False, exc
        if kind == ERR:
            error = unpack_exception(msg[2], _cause_class)
            explain_missing_main_global(error)
            return False, error
        if kind == TIMEOUT:
            return False, TimeoutError(f"the task ran longer than its timeout of {msg[2]} s and was stopped")
        return False, None  # STOPPED: interrupted (or skipped) at our request

    def _settle(self, fut: PoolFuture[Any], kind: int, outcome: tuple[bool, Any]) -> None:
        """Settle a future with its outcome (values are set inline by _handle)."""
        exc = outcome[1]
        try:
            if exc is not None:
                fut.settle_exception(exc)
            else:
                fut.force_cancel(by_pool=True)  # STOPPED
        except _base.InvalidStateError:
            pass  # interrupted or cancelled meanwhile

    def _event(self, slot: int, event: int, data: Any) -> None:
        if event == EV_STARTED:
            with self.lock:
                self.ready_slots.add(slot)
                self.ready.notify_all()
        elif event == EV_INIT_FAILED:
            error = unpack_exception(data, _cause_class)
            # Logged as ThreadPoolExecutor's workers do, before the pool breaks:
            # a handler has the record by the time a future fails with
            # BrokenInterpreterPool (what the standard tests check, with
            # assertLogs around result()).  A handler that raises, even a
            # BaseException, does not keep the pool from breaking.
            try:
                try:
                    _base.LOGGER.critical("Exception in initializer:", exc_info=error)
                except Exception as exc:
                    _report("a logging handler raised while logging a failed initializer", exc)
            finally:
                self.set_broken("A worker initializer failed, the pool is not usable anymore", error)
        elif event == EV_STUCK:
            self.retire(slot, interp=data[1])
        elif event == EV_THREADS_LEFT:
            self.retire(slot, warn_threads_left(slot, data[0]), interp=data[1])
        elif event == EV_LOG:
            try:
                _forward_log(data)
            except Exception as exc:  # a handler of the user's raised: say so, go on
                _report("a logging handler raised while handling a record forwarded from a worker", exc)

    # ------------------------------------------------------ the resolver thread
    def _resolver_loop(self) -> None:
        with self.lock:
            # One resolver per pool: the first that runs.  (Another is started
            # only if a signal handler's exception cut the first start short
            # where it could not be told that the thread had started.)
            if self.resolver_ident:
                return
            self.resolver_ident = me = threading.get_ident()
            self.resolver_thread = threading.current_thread()
        RESOLVERS[me] = self  # (a done-callback's concurrent.futures.wait() delivers: see there)
        try:
            self._resolve_forever()
        finally:
            RESOLVERS.pop(me, None)

    def _resolve_forever(self) -> None:
        rfd, ctl = self.results.rfd, self.ctl
        due = self.callbacks_due
        linger = True
        while True:
            # (Parked outcomes settled here may be all it waited for to end:
            # it then looks at the end below before it sleeps with no deadline.)
            settled = self.parked_due() and self.retry_parked()
            if self.dispatch_due():  # (a dispatch a Ctrl-C cut short: it woke this thread)
                self.dispatch_now()
            if (
                self.cancelling or self.taken_back or self.drained
            ):  # (left by a stop cut short, or one that could not wait)
                try:
                    self.finish_cancelling()
                except BaseException as exc:  # a done-callback's (even SystemExit): say so, go on
                    _report("a done-callback raised while the pool cancelled a call", exc)
            if not self.collect() and not due and not settled and not (linger and self.pending and self._linger()):
                # Publish "asleep", look once more, then block on the pipe.
                ctl[COLLECTOR_ASLEEP] = 1
                if not self.collect() and not due:
                    slept_from = time.monotonic()
                    # (With outcomes parked, it wakes to try them again.)
                    retry_at = (
                        slept_from + self.cancel_retry if self.cancelling or self.taken_back or self.drained else None
                    )
                    if self.parked:
                        retry_at = self.parked_retry_at if retry_at is None else min(retry_at, self.parked_retry_at)
                    if self.wanted < self.max_workers and (self.inflight or self.pending):
                        if self._wait_or_grow(None, retry_at):
                            ctl[COLLECTOR_READ] += len(os.read(rfd, 4096))
                    else:
                        self.grow_wait_ms = GROW_AFTER_MS
                        if retry_at is None or wait(rfd, retry_at):
                            ctl[COLLECTOR_READ] += len(os.read(rfd, 4096))
                    # (Lingering next time only if results come this fast: a
                    # backlog of longer calls would pay a linger per result.)
                    linger = time.monotonic() - slept_from < LINGER_IF_SLEPT
                ctl[COLLECTOR_ASLEEP] = 0
            if due:
                self.run_callbacks_due()
            with self.lock:
                # Retired workers (stuck in C, or waiting for threads) are not
                # waited for: they finish in the background; late results are not
                # wanted.  Unless work is still queued and a retired worker is
                # left (shut down while every slot was held by one): the work
                # runs once one of them ends and its slot goes to a replacement
                # (worker_exited).
                if (
                    (self.shutdown_flag or self.broken)
                    and all(w.retired for w in self.workers.values())
                    and (self.broken or not self.workers or not self.work_left_locked())
                    and not due
                    and not self.parked
                    and not self.cancelling
                    and not self.taken_back
                    and not self.drained
                    # (A result another thread took and is settling: its
                    # callbacks come here, once the future is done.)
                    # (A copy first: other threads change it without the lock.)
                    and not any(i.future._state in WAITABLE for i in list(self.unsettled.values()))
                ):
                    # (From here on, a thread that settles a future runs its
                    # callbacks itself.)
                    self.callbacks_closed = True
                    break
        self.collect()
        while self.parked:  # (the last take can park some: they must not be lost)
            self.retry_parked()
            if self.parked and wait(rfd, time.monotonic() + self.parked_retry):
                ctl[COLLECTOR_READ] += len(os.read(rfd, 4096))
        self.run_callbacks_due()  # (handed over before the hand-over closed)
        with self.lock:
            self.resolver_finished = True
        self.maybe_close()

    def resolve_nested(self, done: Callable[[], bool], timeout: float | None) -> float | None:
        """In the resolver thread (a done-callback that waits: ``result()``,
        ``concurrent.futures.wait()``, ``as_completed()``), go on resolving until
        ``done()``, the timeout, or the pool closes; return what is left of the
        timeout (0.0: it ran out).  Whoever makes ``done()`` true from another
        thread must wake the resolver's pipe (``_future.PipeWaiter``,
        ``ResolvingEvent``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        rfd, ctl = self.results.rfd, self.ctl
        # Done-callbacks of what it delivers meanwhile wait until the callback
        # that waits here returns (see run_callbacks_later): run nested, they
        # ran inside its critical sections, out of order, and without bound.
        self.nested_waits += 1
        try:
            while not self.closed:
                if self.parked_due():
                    self.retry_parked()
                if self.dispatch_due():  # (as the resolver's own loop does)
                    self.dispatch_now()
                self.collect()
                if done():
                    break
                ctl[COLLECTOR_ASLEEP] = 1
                try:
                    if self.collect() or done():
                        continue
                    # (It stands in for the resolver: it grows the pool too,
                    # and tries parked outcomes again.)
                    retry_at = self.parked_retry_at if self.parked else None
                    if (
                        self.wanted < self.max_workers
                        and (self.inflight or self.pending)
                        and self._wait_or_grow(deadline, retry_at) is False
                    ):
                        continue
                    until = deadline if retry_at is None or (deadline is not None and deadline < retry_at) else retry_at
                    if not wait(rfd, until):  # (at once if readable)
                        if until is retry_at:
                            continue
                        return 0.0
                    ctl[COLLECTOR_READ] += len(os.read(rfd, 4096))
                finally:
                    ctl[COLLECTOR_ASLEEP] = 0
        finally:
            self.nested_waits -= 1
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _linger(self) -> bool:
        """Look for results a little longer before sleeping, while calls wait for
        the window (``pending``): the window is then full of calls in flight,
        and with short calls (the resolver's last sleep was short) results are
        due within microseconds.  A wake-up costs a worker a pipe write and
        this thread a sleep, more than a no-op call: on a loaded machine, a
        backlog that the resolver drains with a wake-up per result or two runs
        at half the speed of one drained in bursts.  Bounded, yielding the CPU
        (and the GIL) at every step, and looking at the queue only when the
        workers' counts of finished tasks moved.  Only a shortcut: the sleep
        that follows is the usual one.  True once a look delivered something,
        or callbacks are due."""
        ctl, layout = self.ctl, self.layout
        lo = layout.tasks_done
        hi = lo + layout.slots
        due = self.callbacks_due
        seen = -1
        yield_cpu = os.sched_yield
        for _ in range(LINGER):
            done = sum(ctl[lo:hi])
            if done != seen:
                seen = done
                if self.collect():
                    return True
            if due or not self.pending:
                return bool(due)
            yield_cpu()
        return False

    def run_callbacks_later(self, fut: PoolFuture[Any]) -> bool:
        """Hand ``fut``'s done-callbacks to the resolver thread (``fut`` is done).
        False if that is this thread (and no done-callback of its waits in
        ``result()``), or none will run them (not started, or finished): the
        caller runs them.  See ``PoolFuture._finish``.

        No lock per future (a burst delivered by one thread hands over
        thousands): the resolver is woken only when no wake-up is on its way
        (``callbacks_woken``, which it clears before it takes them), under the
        pool's lock then (never a write to a closed pipe).  A resolver that
        ends meanwhile has closed the hand-over before its last look: a future
        appended after that look is taken back here (one C call each, so
        exactly one of the two has it)."""
        if threading.get_ident() == self.resolver_ident and not self.nested_waits:
            return False
        if self.resolver_thread is None or self.callbacks_closed or self.forked:
            return False
        due = self.callbacks_due
        due.append(fut)
        if self.callbacks_closed:
            try:
                due.remove(fut)
            except ValueError:  # the resolver's last look took it
                return True
            return False
        if not self.callbacks_woken:
            self.callbacks_woken = True
            with self.lock:
                if not self.closed:
                    self.results.notify()
        return True

    def run_callbacks_due(self) -> None:
        """In the resolver thread: run the done-callbacks handed to it, in order.
        (An exception from one is logged by ``Future._invoke_callbacks``, as
        the standard executors do; the others still run.)"""
        self.callbacks_woken = False  # (first: a future handed over from here on wakes it again)
        due = self.callbacks_due
        while True:
            try:
                fut = due.popleft()
            except IndexError:
                return
            try:
                fut._invoke_callbacks()
            except BaseException as exc:  # (SystemExit, say: the resolver goes on)
                _report("an exception escaped a done-callback", exc)

    # ------------------------------------------------------ growing the pool
    # Past its CPUs, a pool's workers start only when the work needs them: when
    # queued work has waited GROW_AFTER without any worker taking a task (the
    # started ones are all blocked, or busy with long calls).  Never sooner, so
    # that short calls, which the workers already started keep up with, do not
    # pay for interpreters that would only share the same CPUs (each one's
    # start costs milliseconds of CPU, and more workers than CPUs cost every
    # call more wake-ups).  While the process keeps its CPUs busy, the wait is
    # GROW_AFTER_BUSY instead: more workers would only share them, but a call
    # that another spins waiting for still gets one.  The resolver watches
    # while work is in the window (the dispatcher wakes it if it slept without
    # a deadline), so a call that needs another worker (one the running ones
    # wait for) gets it.
    def _wait_or_grow(self, deadline: float | None, retry_at: float | None = None) -> bool | None:
        """The resolver's wait on its pipe while the pool may grow: until it is
        readable (True), or the growth deadline passes (False: growth checked).
        None, without waiting, when ``deadline`` comes first: the caller waits.
        With ``retry_at`` (outcomes parked), no later than that (False: growth
        checked then too, so that parking does not keep the pool from growing)."""
        at = self.grow_watch()
        step = at[1] + self.grow_wait_ms / 1000
        if deadline is not None and step >= deadline:
            return None
        if retry_at is not None and retry_at < step:
            step = retry_at
        self.growing = True
        try:
            readable = wait(self.results.rfd, step)
        finally:
            self.growing = False
        if not readable:
            self.grow_deadline(at)
        return readable

    def grow_watch(self) -> tuple[int, float, float]:
        """Before a wait with a deadline of ``grow_wait_ms``: what grow_deadline needs."""
        taken = sum(self.ctl[self.taken_lo : self.taken_hi])
        now = time.monotonic()
        if taken != self.stall[0]:
            self.stall = (taken, now)  # (since when no task was taken)
        return taken, now, time.process_time()

    def grow_deadline(self, at: tuple[int, float, float]) -> None:
        """A deadline passed with no result: grow the pool if its work stalls.
        With no call queued, the next deadline is twice as far (up to
        GROW_WAIT_MAX_MS): running calls with nothing behind them cost few
        wake-ups, and a call queued meanwhile waits at most that long."""
        taken, since, cpu = at
        if self.calls_queued_locked() <= 0:  # (a hint: read without the lock)
            self.grow_wait_ms = min(2 * self.grow_wait_ms, GROW_WAIT_MAX_MS)
            return
        self.grow_wait_ms = GROW_AFTER_MS
        now = time.monotonic()
        busy = time.process_time() - cpu >= BUSY_SHARE * self.cpus * (now - since)
        if now - self.stall[1] >= (GROW_AFTER_BUSY if busy else 0.0):
            self.grow_if_stalled(taken)

    def grow_if_stalled(self, taken: int) -> None:
        """Start more workers if work is queued, no worker has taken a task since
        the count of tasks taken was ``taken``, and no worker is starting (see
        _starting_locked): as many again as are kept, at most one per call queued.
        (The main thread calls it too, waiting in ``result()``: see start_locked.)"""
        ctl = self.ctl
        with defer_sigint(), self.lock:
            if (
                self.broken is not None
                or self.closed
                or self.parking
                or self.forked
                or self.active < self.wanted  # (a start on its way, or one that failed: enqueue retries)
                or self.wanted >= self.max_workers
                or sum(ctl[self.taken_lo : self.taken_hi]) != taken
                or self._starting_locked()
            ):
                return
            queued = self.calls_queued_locked()
            if queued <= 0:
                return
            self.wanted += min(queued, self.max_workers - self.wanted, self.wanted)
            self.start_locked()
            failed = self.dispatch_locked()  # (after a shutdown(): the new workers' STOPs)
        self.fail_items(failed)
        self.after_start()

    def _starting_locked(self) -> bool:
        """Whether a worker is still starting (it takes a call once ready), for
        at most START_PATIENCE: one whose start takes longer (an initializer
        that hangs) is not waited for."""
        now = time.monotonic()
        ready = self.ready_slots
        return any(
            slot not in ready and now - w.born < START_PATIENCE for slot, w in self.workers.items() if not w.retired
        )

    def maybe_close(self) -> None:
        """Close the channels once nothing can write to them any more: the
        resolver has finished (or never started) and no worker thread (retired
        ones included) is left.  Called by the resolver, by every worker exit, and
        by shutdown."""
        # The two locks are never held together (see take_results): a thread
        # holding the pool's lock and seeing the pool open, or one holding the
        # collect lock inside a take that saw it open, keeps the channels open
        # until it lets go, since they close only after ``closed`` is set
        # (under the pool's lock) and under the collect lock.
        # (A Ctrl-C between the two steps would leave the channels open for good.)
        with defer_sigint():
            with self.lock:
                # (A resolver that started counts even if the workers' start
                # never came: a first submit cut short in between.)
                started = self.started or self.resolver_thread is not None
                if self.closed or self.workers or (started and not self.resolver_finished):
                    return
                self.closed = True
            with self.collect_lock:
                self.inbox.clear()  # late reports of retired workers: not wanted
                self.held.clear()
                self.arrived.clear()
                self.tasks.close()
                self.results.close()
        close_spares_if_last()


_NOTHING = object()  # (a sentinel no message equals)
_JUST_INT = {int}
_RUNNING = _base.RUNNING
_PENDING = _base.PENDING
_InvalidStateError = _base.InvalidStateError


def _cause_class() -> type[RemoteTraceback]:
    """The class of a task exception's cause: ``_broken.RemoteTracebackCause``,
    made on first use (it imports multiprocessing)."""
    from ._broken import RemoteTracebackCause

    return RemoteTracebackCause


def _plain(msg: Any) -> tuple[int, Any]:
    """A plain result's task id and value: a natively shareable value, or a
    bare id for a task that returned None; ``(0, None)`` for any other
    message (the delivery loops' common case, see ``Resolver._deliver``)."""
    if type(msg) is int:
        return msg, None
    if msg[1] == VALUE:
        return msg[0], msg[2]
    return 0, None


def _copy_out(arrived: deque[Any]) -> list[int]:
    """Replace, in place, each message of ``arrived`` whose result holds views
    of a worker's memory (out-of-band buffers) by one holding copies; return
    the messages' task ids.  In a function of its own so that no reference to
    an original message outlives the call: once ``arrived`` no longer holds it,
    its worker may destroy its interpreter (``take_results`` sees nothing to
    take), and a view released after that crashes 3.13.  (A bare task id, a
    task that returned None, stays as it is: see ``_handle``.)"""
    tids: list[int] = list(arrived)
    if set(map(type, tids)) == _JUST_INT:  # (a burst of calls that returned None: the copy, C-level)
        return tids
    tids = []
    for i in range(len(arrived)):
        msg: Any = arrived[i]
        if type(msg) is int:
            tids.append(msg)
            continue
        tids.append(msg[0])
        if msg[1] == OK and len(msg[2]) == 3:
            copied = (msg[0], OK, materialize(msg[2]))
            if arrived[i] is msg:  # (no call between the test and the store)
                arrived[i] = copied
    return tids


def close_spares_if_last() -> None:
    """Close the spare wake-up pipes once every pool is closed (no worker of any
    pool is left, so no thread can write to a waiter's pipe).  Also called after
    a join: the joining thread gives its pipe back after the last pool closed."""
    if not any(p.started and not p.closed for p in list(LIVE_POOLS)):
        close_free()


def _report(what: str, exc: BaseException) -> None:
    """Say on stderr that user code raised where nobody can catch it."""
    try:
        print(f"interpexec: {what}:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
    except Exception:  # stderr is gone: nothing else to do
        pass


def _forward_log(fields: tuple[Any, ...]) -> None:
    """Hand a worker's logging record to the same-named logger here."""
    import logging

    name, levelno, pathname, lineno, msg, exc_text, func, created, thread_name, interp = fields
    logger = logging.getLogger(name if name != "root" else None)
    if not logger.isEnabledFor(levelno):
        return
    record = logging.makeLogRecord(
        {
            "name": name,
            "levelno": levelno,
            "levelname": logging.getLevelName(levelno),
            "pathname": pathname,
            "filename": os.path.basename(pathname),
            "module": os.path.splitext(os.path.basename(pathname))[0],
            "lineno": lineno,
            "msg": msg,
            "args": None,
            "exc_text": exc_text,
            "funcName": func,
            "created": created,
            "msecs": (created - int(created)) * 1000,
            "threadName": thread_name,
            "interpreter": interp,
            "processName": f"interpreter-{interp}",
        }
    )
    logger.handle(record)
