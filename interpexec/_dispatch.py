"""Dispatch: work items go from the pending deque into the task channel.

While fewer than ``window`` tasks are in flight, pending items are marked running
and put on the task channel that every worker pulls from (so load balances
itself).  As with ProcessPoolExecutor, only work not yet handed to the workers
can be cancelled.  Dispatch runs under the pool's lock and never runs user
code: a future that fails here is returned to the caller, which resolves it
after releasing the lock.
"""

from __future__ import annotations

import marshal
import os
from concurrent.futures import _base

from ._compat import QUEUE_PUT, QUEUE_PUT_A, QUEUE_PUT_B, queue_count_if_open, queue_put, queue_take
from ._future import PoolFuture, start_running_locked
from ._protocol import NAMED, STOP
from ._state import PoolState, WorkItem
from ._transport import CELL_BYTES, COLLECTOR_ASLEEP, SKIP_WAKEUPS, TASKS_PUT

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


def _raised_after_the_put(exc: BaseException) -> bool:
    """Whether an exception caught around a task's put (one C call) was raised by
    Python code that ran after it, a signal handler's: its traceback goes
    deeper than the catching frame.  The task was sent then."""
    tb = exc.__traceback__
    return tb is not None and tb.tb_next is not None


class Dispatcher(PoolState):
    def start_locked(self) -> None:
        raise NotImplementedError  # provided by Workers

    def enqueue_locked(
        self, fut: PoolFuture[Any], msg: tuple[Any, ...], args: Any
    ) -> list[tuple[WorkItem, BaseException]]:
        """Queue a call whose ``msg`` already carries its task id; returns the
        items that failed to dispatch (resolve them after releasing the lock).

        ``fut`` is new: nobody else has seen it yet (submit() returns it after
        this).  When nothing waits ahead of it and the window has room, it is
        sent at once (the common case), skipping ``pending``: its state goes
        to RUNNING without its lock, which nobody can hold."""
        if self.active < self.wanted or not self.started:
            self.start_locked()
        item = WorkItem(fut, msg, args)
        room = len(self.inflight) < self.window
        # From the test below until the item is in ``pending`` or
        # ``dispatching``, no call: no signal handler runs in between.  One
        # that ran before (at this method's start, or after a call above) and
        # shut the pool down found nothing of this call anywhere, so sent the
        # STOPs: queued behind them it would never run, its future running for
        # ever.  It is refused instead, as a submit after shutdown() is.
        if self.shutdown_flag or self.broken is not None:
            self.check_usable_locked()
        if self.pending or not room or self.closed or self.drained or self.limbo or self.repair_failed:
            self.pending.append(item)  # (the item is in it when a handler can next run)
            return self.dispatch_locked()
        failed: list[tuple[WorkItem, BaseException]] = []
        outer = self.dispatching  # (a dispatch this one interrupted, from a signal handler)
        sending: WorkItem | None = item
        try:
            self.dispatching = item
            fut._state = _base.RUNNING
            self._send_locked(item, outer, failed)
            sending = None
        except BaseException:  # (as in dispatch_locked)
            self.dispatching = outer
            self.limbo.append(sending)
            self.repair_limbo_locked()
            raise
        return failed

    def dispatch_locked(self) -> list[tuple[WorkItem, BaseException]]:
        """Move pending work into the task channel while the window allows."""
        failed: list[tuple[WorkItem, BaseException]] = []
        if self.closed:
            return failed
        if self.drained:
            # (A take-back cut short: recorded first, so that the STOPs it
            # took are counted as no longer sent, and sent again below.)
            self.record_drained_locked()
        if self.limbo:
            self.repair_limbo_locked()
        if self.repair_failed:
            failed, self.repair_failed = self.repair_failed, failed
        pending, inflight = self.pending, self.inflight
        item: WorkItem | None = None
        # The item on its way from ``pending`` to ``inflight`` is ``dispatching``
        # from before it leaves the one until after it is in the other, so that
        # release_future_locks(), which reads them without the lock, in that
        # order, finds it.  (The outer dispatch's, when a signal handler nests one.)
        outer = self.dispatching
        try:
            while pending and len(inflight) < self.window:
                try:
                    item = pending[0]
                except IndexError:  # a nested dispatch (a signal handler calling the pool) took the rest
                    break
                # Named first, then popped: a signal handler runs right after a
                # call returns, so one raising KeyboardInterrupt after ``item =
                # pending.popleft()``'s call, before the store, lost the item
                # (its future pending for ever).  Now it is ``item`` when popped
                # (see the except below).  (No handler runs between the read and
                # the pop; one that raises IndexError after the pop is not taken
                # for an empty deque.)
                self.dispatching = item
                pending.popleft()
                # (A cancelled future's callbacks already ran in cancel(): none run here.)
                if not start_running_locked(item.future):
                    self.dispatching = outer
                    item = None
                    continue
                self._send_locked(item, outer, failed)
                item = None
        except BaseException:
            # A Ctrl-C landed in the caller's thread (the main one) mid-dispatch:
            # leave the item where it belongs, so that its future still resolves.
            # It is recorded first, in one C call (no bytecode between the
            # exception and that call runs a signal handler): a second exception
            # from a handler, landing anywhere in the repair, leaves it recorded
            # for the next dispatch to repair.  (None: between two items, the
            # last one's wake-up may not be written; an item already sent is
            # repaired by a wake-up.)  ``dispatching`` is put back first, with no
            # call in between either: left naming the item, it would hold back
            # the STOPs of every later dispatch.  (Inline, not a method: a
            # handler can run as a function starts.)
            self.dispatching = outer
            self.limbo.append(item)
            # The calls still pending may be left with a free window and
            # nothing in flight whose result would dispatch them: the
            # resolver looks (see dispatch_due()), woken before the repair,
            # which a second exception can cut short (it then finds the item
            # in limbo, and waits for this lock to repair it).  (Under the
            # pool's lock, as the channels are closed: never to a closed
            # descriptor.)
            if not self.closed:
                self.results.notify()
            self.repair_limbo_locked()
            raise
        # (Not while a dispatch this one interrupted, from a signal handler that
        # shut the pool down, is moving an item, nor while one waits for its
        # repair: sent ahead of it, the STOPs ended the workers it needed.
        # That dispatch, or the next, sends them.)
        if self.shutdown_flag and not pending and outer is None and not self.limbo and self.stops_sent < self.active:
            for _ in range(self.active - self.stops_sent):
                self._put_task((0, STOP))
                self.stops_sent += 1
                self._wake_a_worker(force=True)
        return failed

    def dispatch_due(self) -> bool:
        """Whether a dispatch has work that no result in flight may bring it
        to (read without the lock; one test per ``result()``): a dispatch cut
        short left an item to repair (``limbo``) or a failure to report
        (``repair_failed``), or calls wait in ``pending`` while the window has
        room.  Under the lock, a dispatch leaves pending calls only behind a
        full window; a Ctrl-C that ends one early (in ``submit()``, after it
        made room) leaves them with room, and maybe nothing in flight whose
        result would dispatch them: whoever sees this dispatches (the
        resolver, a thread entering ``result()``)."""
        return bool(
            self.limbo or self.repair_failed or (self.pending and len(self.inflight) < self.window and not self.closed)
        )

    def dispatch_now(self) -> None:
        """Dispatch under the pool's lock, then fail what could not be sent."""
        with self.lock:
            failed = self.dispatch_locked()
        if failed:
            self.fail_items(failed)

    def fail_items(self, failed: list[tuple[WorkItem, BaseException]]) -> None:
        raise NotImplementedError  # provided by Resolver (a failure may wait aside, as a result does)

    def _send_locked(
        self, item: WorkItem, outer: WorkItem | None, failed: list[tuple[WorkItem, BaseException]]
    ) -> None:
        """Send ``item``, whose future is RUNNING and which is ``dispatching``:
        into ``inflight``, onto the task channel, and wake a worker if one must.
        A call the queue refuses goes into ``failed``.  (A Ctrl-C landing
        anywhere here, or as this starts or returns, leaves the item to the
        caller's except, which records it in ``limbo``.)"""
        inflight, ctl = self.inflight, self.ctl
        # (Only behind other tasks: reading a cell costs the worker a
        # little more than a tuple, which a lone call's round trip
        # feels; in a burst the main interpreter is what is short.)
        msg = self._in_cell(item.msg) if inflight and item.msg[1] == NAMED else item.msg
        inflight[item.tid] = item
        self.dispatching = outer
        ctl[TASKS_PUT] += 1  # (counted first: see _wake_a_worker)
        try:
            # (A C call: no Python frame between the store and the put,
            # where a Ctrl-C would leave the task in flight, never sent.)
            QUEUE_PUT(self.tasks.qid, msg, QUEUE_PUT_A, QUEUE_PUT_B)
        except Exception as exc:  # e.g. an object the queue refused: fails that future only
            if _raised_after_the_put(exc):
                # Raised by Python code that ran after the put (a signal
                # handler): the task was sent, and the exception is the
                # caller's (handled as a Ctrl-C would be).
                raise
            del inflight[item.tid]
            ctl[TASKS_PUT] -= 1  # (never put)
            failed.append((item, exc))
            return
        # (_wake_a_worker's first test, inline: in a burst no worker sleeps.)
        if not SKIP_WAKEUPS or self.control.count(1, self.asleep_lo, self.asleep_hi):
            self._wake_a_worker()
        # (Below max_workers, the resolver watches dispatched work: see Resolver._wait_or_grow.)
        if self.wanted < self.max_workers and not self.growing and ctl[COLLECTOR_ASLEEP]:
            self.results.notify()  # the resolver watches this work, to grow the pool if it stalls

    def _in_cell(self, msg: tuple[Any, ...]) -> tuple[Any, ...] | int:
        """Write a NAMED message into its task's call cell and return the bare
        task id to send instead; or the message itself when the cell is taken
        (by a task still in flight) or the message does not fit.

        A tuple put on a queue costs the main interpreter a pending call when
        the worker that took it lets it go (about 1.5 us per task on a busy
        machine); an int costs nothing there.  The cell stays the task's until
        the worker's report comes back (``free_cells``): the worker reads it
        right after taking the id, before it runs the task or reports anything."""
        tid: int = msg[0]
        cell = tid & self.cell_mask
        owners = self.cell_owner
        if owners[cell]:
            return msg
        # Claimed first: a dispatch nested in this one (a signal handler that
        # submits) finds the cell taken rather than writing it under our feet.
        owners[cell] = tid
        try:
            # (Format version 2: no table of back-references, which versions
            # 3+ build per call; 30% cheaper to write here and 40% to read in
            # the worker, for a few bytes more.)
            blob = marshal.dumps(msg, 2)
        except Exception:  # (not expected for natively shareable values)
            blob = b""
        size = len(blob)
        if not 0 < size <= CELL_BYTES:
            owners[cell] = 0
            return msg
        at = self.cells_at + cell * CELL_BYTES
        self.control_view[at : at + size] = blob
        return tid

    def free_cells(self, tids: Iterable[int]) -> None:
        """The workers' reports for ``tids`` came back: their cells are free."""
        owners, mask = self.cell_owner, self.cell_mask
        for tid in tids:
            if owners[tid & mask] == tid:
                owners[tid & mask] = 0

    def repair_limbo_locked(self) -> None:
        """Put the items a dispatch left in ``limbo`` (see the end of
        dispatch_locked) back where they belong.  A signal handler can run
        between any two steps here, and nest a dispatch that repairs the same
        items: each repair is idempotent, and an item leaves ``limbo`` only
        after its repair."""
        limbo = self.limbo
        for item in list(limbo):
            if item is None:
                self._wake_a_worker(force=True)
            else:
                self._repair(item)
            try:
                limbo.remove(item)
            except ValueError:  # (a nested repair took it out)
                pass

    def _repair(self, item: WorkItem) -> None:
        """Put an item an exception caught between two steps of dispatch back in
        a consistent place; a no-op for one already there.  (Signal handlers run
        when a Python function starts, after a call returns and at a backward
        jump, so an item in ``inflight`` was put on the queue, and each branch
        below changes the item's place with no such point in between.)"""
        tid = item.tid
        if tid in self.inflight:
            self._wake_a_worker(force=True)
        elif tid in self.unsettled or tid in self.parked:
            pass  # sent, and its result already taken (by a collect nested in a signal handler)
        elif item.future._state == _base.PENDING:
            if item not in self.pending:
                self.pending.appendleft(item)
        elif item.future._state == _base.RUNNING:
            self.ctl[TASKS_PUT] += 1
            self.inflight[tid] = item
            try:
                QUEUE_PUT(self.tasks.qid, item.msg, QUEUE_PUT_A, QUEUE_PUT_B)
            except Exception as exc:  # (its first put failed the same way)
                if _raised_after_the_put(exc):
                    raise  # a signal handler's, run right after the put: the task was sent
                del self.inflight[tid]
                self.ctl[TASKS_PUT] -= 1
                self.repair_failed.append((item, exc))
                return
            self._wake_a_worker(force=True)

    def _put_task(self, msg: Any) -> None:
        """Put ``msg`` on the task channel, counted first (see _wake_a_worker).
        (dispatch_locked's loop counts and puts inline: one C call, no frame.)"""
        self.ctl[TASKS_PUT] += 1
        queue_put(self.tasks.qid, msg)

    def take_back_queued_locked(self) -> None:
        """Take every message no worker has taken off the task channel, and
        record their task ids in ``taken_back`` (their items stay in
        ``inflight`` until their futures are cancelled; STOPs are sent again by
        the next dispatch).

        A signal handler's exception can land between any two steps: each
        message leaves the queue into ``drained`` in one C-level call, and
        leaves ``drained`` only once recorded, so whoever comes next (see
        Resolver.finish_cancelling) records what a cut-short take left."""
        if self.started and not self.closed:
            qid, drained = self.tasks.qid, self.drained
            while n := queue_count_if_open(qid):
                try:
                    queue_take(qid, n, drained)
                except Exception:
                    # Workers took some meanwhile: what was taken is in drained.
                    # (The C module's error for an empty queue is its stdlib
                    # wrapper's, or another where that cannot load: told apart
                    # by the count, as in _compat.queue_get_counted.  No put
                    # comes meanwhile: this holds the pool's lock.)
                    if queue_count_if_open(qid):
                        raise
        self.record_drained_locked()

    def record_drained_locked(self) -> None:
        """Move the messages in ``drained`` into ``taken_back`` (see
        take_back_queued_locked); each step is safe to repeat or to miss."""
        drained, taken_back, ctl = self.drained, self.taken_back, self.ctl
        while drained:
            try:
                msg = drained[0]
            except IndexError:  # a nested record (a signal handler's) took the rest
                break
            # (A task sent as its bare id: no worker will read its call cell now.
            # Task ids start at 1; a STOP is (0, STOP).)
            tid = msg if type(msg) is int else msg[0]
            if tid:
                taken_back.add(tid)
                self.free_cells((tid,))
            else:
                # (Before the pop: repeated after a cut, it only sends one
                # STOP more, where one too few would leave a worker running.)
                self.stops_sent -= 1
            try:
                drained.popleft()
            except IndexError:
                break
            # No worker took it (see _wake_a_worker).  (After the pop: missed
            # after a cut, the queue only looks fuller, which wakes a worker
            # more, where looking emptier could wake one too few.)
            ctl[TASKS_PUT] -= 1

    def calls_queued_locked(self) -> int:
        """Calls not taken by any worker yet: those on the task queue (tasks put
        less tasks taken less the STOPs on it) and those waiting for the window."""
        ctl = self.ctl
        return ctl[TASKS_PUT] - sum(ctl[self.taken_lo : self.taken_hi]) - self.stops_sent + len(self.pending)

    def window_full(self) -> bool:
        return len(self.inflight) >= self.window

    def _wake_a_worker(self, force: bool = False) -> None:
        """Wake a sleeping worker unless none needs it: none sleeps, the
        lingering ones will take every task queued, or every sleeping worker
        already has a wake-up coming.

        The one woken is the one used last (that reported a result last), on
        its own pipe, as anyio takes its interpreter workers most recently used
        first: calls made one after the other run in one interpreter, whose
        imports and caches are warm.  (One shared pipe wakes its longest
        sleeper: one call after another went round every worker.)  The shared
        pipe, which every sleeping worker also watches, carries the wake-ups
        that must reach some worker whatever the counts say (``force``: STOPs,
        repairs), those where the counts are not trusted (see SKIP_WAKEUPS),
        and the ones a worker passes on (see _worker_main): a worker woken on
        its own pipe may have taken a task by itself meanwhile.  Under the
        pool's lock (the workers' pipes are closed under it)."""
        if SKIP_WAKEUPS and not force:
            control, ctl = self.control, self.ctl
            sleepers = control.count(1, self.asleep_lo, self.asleep_hi)
            if not sleepers:
                return
            # Each lingering worker looks at the queue once more before it sleeps
            # (and clears its flag before it takes a task): while they are at
            # least as many as the tasks queued, a sleeper woken would only take
            # a CPU from them (in a pool with more workers than CPUs).  The
            # count comes first: a worker still flagged after it is read looks
            # again after that, whereas one counted on a flag read first may
            # have spent its look on a task taken before the count.  (The
            # queue is counted from the control block: tasks put, each counted
            # before its put, less tasks taken, each counted after its take,
            # so never fewer than are queued; and only when a worker lingers.)
            if control.count(1, self.spin_lo, self.spin_hi):
                queued = ctl[TASKS_PUT] - sum(ctl[self.taken_lo : self.taken_hi])
                if control.count(1, self.spin_lo, self.spin_hi) >= queued:
                    return
            shared = self.task_written - sum(ctl[self.task_read_lo : self.task_read_hi])
            if sleepers <= shared:
                return  # (each sleeper can be woken by a shared wake-up on its way)
            # The sleepers with a wake-up of their own on its way (written, not
            # yet read) need no other; the others can each be woken by a
            # shared one.  (A worker with one left unread that is not asleep
            # is not counted: it took a task by itself, and reads it later.)
            layout, n = self.layout, self.layout.slots
            flags = ctl[layout.asleep : layout.asleep + n].tolist()
            reads = ctl[layout.wake_read : layout.wake_read + n].tolist()
            stamps = ctl[layout.used_stamp : layout.used_stamp + n].tolist()
            written = self.wake_written
            best = -1
            stamp = coming = 0
            for slot, flag in enumerate(flags):
                if flag == 1:
                    if written[slot] > reads[slot]:
                        coming += 1
                    elif best < 0 or stamps[slot] > stamp:
                        best, stamp = slot, stamps[slot]
            if sleepers - coming <= shared:
                return
            latest = self.workers.get(best)
            if latest is not None and not latest.retired and latest.wake_pipe[1] >= 0:
                read, asleep = layout.wake_read + best, layout.asleep + best
                try:
                    os.write(latest.wake_pipe[1], b"\0")
                except OSError:  # (not expected: a byte pending is the most there ever is)
                    pass
                else:
                    # (Counted after the write: a Ctrl-C in between leaves the
                    # worker looking free of one, which only wakes more; counted
                    # first, it would have looked woken for good.)
                    written[best] += 1
                    # Still asleep, or awake and has read it (a worker counts
                    # what it read before it clears its flag): done.  Else it
                    # took a task by itself, and may have looked for a wake-up
                    # of its own (to pass it on) before this one came: a shared
                    # one as well.
                    if ctl[asleep] == 1 or ctl[read] >= written[best]:
                        return
        try:
            os.write(self.tasks.wfd, b"\0")
        except BlockingIOError:
            return  # full: the workers are being woken anyway
        self.task_written += 1  # (after the write, as above: a miss only wakes more)
