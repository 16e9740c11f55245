"""Dispatch: work items go from the pending deque into the task channel.

While fewer than ``window`` tasks are in flight, pending items are marked running
and put on the task channel that every worker pulls from (so load balances
itself).  As with ProcessPoolExecutor, only work not yet handed to the workers
can be cancelled.  Dispatch runs under the pool's lock and never runs user
code: a future that fails here is returned to the caller, which resolves it
after releasing the lock.

Short tasks (recent ones took under ``BATCH_TASK_NS`` each in the workers) go
several to a queue item, a BATCH, in a window ``BATCH_WINDOW`` times wider; once
every worker has plenty queued, calls gather in the pending deque until a batch
is worth sending (results coming back dispatch them too).  Calls a retired
worker's batch held are dispatched again first (``requeued``).
"""

from __future__ import annotations

import os
from concurrent.futures import _base
from functools import partial
from itertools import islice

from ._compat import QUEUE_PUT, QUEUE_PUT_TAIL, queue_put, queue_put_after
from ._future import PoolFuture, start_running
from ._protocol import BATCH, STOP
from ._sigint import defer_sigint
from ._state import PoolState, WorkItem
from ._transport import NSLOTS, SKIP_WAKEUPS

#: Tasks travel several to a queue item only while recent ones took under
#: BATCH_TASK_NS each in the workers; a batch holds about BATCH_NS of work, at
#: most BATCH_MAX tasks, and the window widens BATCH_WINDOW times meanwhile.
#: (A worker shares a batch it holds as soon as another one idles.)
BATCH_TASK_NS = 50_000
BATCH_NS = 500_000
BATCH_MAX = 64
BATCH_WINDOW = 8
#: Past the base window, short tasks go only in batches of at least this many.
BATCH_MIN = 8
#: Results between two estimates of the tasks' duration.
ESTIMATE_EVERY = 32

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any


class Dispatcher(PoolState):
    def start_locked(self) -> None:
        raise NotImplementedError  # provided by Workers

    def enqueue_locked(
        self, fut: PoolFuture[Any], msg: tuple[Any, ...], args: Any
    ) -> list[tuple[WorkItem, BaseException]]:
        """Queue a call whose ``msg`` already carries its task id; returns the
        items that failed to dispatch (resolve them after releasing the lock)."""
        if self.active < self.max_workers or not self.started:
            self.start_locked()
        pending = self.pending
        pending.append(WorkItem(fut, msg, args))
        if self.batch_max > 1 and len(pending) < BATCH_MIN and len(self.inflight) >= self.base_window:
            return []  # (gathering a batch: see dispatch_locked)
        return self.dispatch_locked()

    def dispatch_locked(self) -> list[tuple[WorkItem, BaseException]]:
        """Move pending work into the task channel while the window allows."""
        failed: list[tuple[WorkItem, BaseException]] = []
        if self.closed:
            return failed
        pending, inflight, requeued = self.pending, self.inflight, self.requeued
        item: WorkItem | None = None
        try:
            if requeued and self.stops_sent:
                self._requeue_before_stops()
            while requeued:  # (running already, taken back from a retired worker)
                item = requeued[0]
                inflight[item.tid] = item
                # (Out of requeued and onto the queue in one C call: an item cut
                # off here is in both requeued and inflight, and is put again.)
                queue_put_after(requeued.popleft, self.tasks.qid, item.msg)
                item = None
                self._wake_a_worker(force=True)
            if self.completed >= self.estimated_at + ESTIMATE_EVERY:
                self._estimate_task_time()
            while pending and len(inflight) < self.window:
                if self.batch_max > 1:
                    if len(inflight) >= self.base_window and len(pending) < BATCH_MIN:
                        # Short tasks, and the workers have plenty queued: let
                        # more gather (results coming back dispatch them).
                        break
                    if len(pending) > 1:
                        share = -(-(self.window - len(inflight)) // max(self.active, 1))
                        self._dispatch_batch(min(share, self.batch_max), failed)
                        continue
                item = pending.popleft()
                # (A cancelled future's callbacks already ran in cancel(): none run here.)
                self.dispatching = item  # (see release_future_locks)
                running = start_running(item.future)
                self.dispatching = None
                if not running:
                    item = None
                    continue
                inflight[item.tid] = item
                try:
                    # (A C call: no Python frame between the store and the put.)
                    QUEUE_PUT(self.tasks.qid, item.msg, *QUEUE_PUT_TAIL)
                except Exception as exc:  # e.g. an object the queue refused: fails that future only
                    del inflight[item.tid]
                    failed.append((item, exc))
                    item = None
                    continue
                item = None
                self._wake_a_worker()
        except BaseException:
            # A Ctrl-C landed in the caller's thread (the main one) mid-dispatch:
            # leave the item where it belongs, so that its future still resolves.
            if item is not None:
                self._repair(item)
            while self.batching:
                self._repair(self.batching.pop())
            raise
        if self.shutdown_flag and not pending and self.stops_sent < self.active:
            for _ in range(self.active - self.stops_sent):
                queue_put(self.tasks.qid, (0, STOP))
                self.stops_sent += 1
                self._wake_a_worker(force=True)
        return failed

    def _requeue_before_stops(self) -> None:
        """Put the tasks taken back from a retired worker (see retire()) on the
        task channel ahead of the STOPs already sent, so that the workers run
        them before they leave: take everything queued back, put it again with
        the STOPs last.  (Rare; Ctrl-C is held back over it.)"""
        with defer_sigint():
            drained = self.tasks.drain()
            requeued = self.requeued
            self.inflight.update([(it.tid, it) for it in requeued])
            again = [it.msg for it in requeued] + [m for m in drained if m[1] != STOP]
            requeued.clear()
            for msg in again + [m for m in drained if m[1] == STOP]:
                queue_put(self.tasks.qid, msg)
            for _ in range(self.active):
                self._wake_a_worker(force=True)

    def _estimate_task_time(self) -> None:
        """How long recent tasks took in the workers (the workers count it in the
        control block): short tasks travel several to a queue item, in a wider
        window; long ones one by one (a batch goes to one worker)."""
        layout, ctl = self.layout, self.ctl
        busy = sum(ctl[layout.busy_ns : layout.busy_ns + layout.slots])
        done = sum(ctl[layout.tasks_done : layout.tasks_done + layout.slots])
        self.estimated_at = self.completed
        if done > self.estimate_done:
            mean = (busy - self.estimate_busy) / (done - self.estimate_done)
            self.estimate_busy, self.estimate_done = busy, done
            short = mean < BATCH_TASK_NS and not self.max_tasks_per_child
            self.batch_max = min(BATCH_MAX, int(BATCH_NS // max(mean, 1))) if short else 1
            self.window = min(self.base_window * (BATCH_WINDOW if short else 1), NSLOTS)

    def _dispatch_batch(self, size: int, failed: list[tuple[WorkItem, BaseException]]) -> None:
        """Send up to ``size`` pending calls as one BATCH (alone if only one is
        left once cancelled ones are dropped)."""
        pending, batching = self.pending, self.batching
        # Each item is always in pending, in batching or in inflight (moved by
        # single C-level calls), so a Ctrl-C loses none: see _repair.
        batching.extend(islice(iter(pending.popleft, None), min(size, len(pending))))
        running = [it for it in batching if start_running(it.future)]  # (cancelled ones drop out)
        if running:
            msg = running[0].msg if len(running) == 1 else (0, BATCH, tuple([it.msg for it in running]))
            record = partial(self.inflight.update, [(it.tid, it) for it in running])
            try:
                queue_put_after(record, self.tasks.qid, msg)
            except Exception:  # e.g. an object the queue refused: one by one, failing only those
                for it in running:
                    try:
                        queue_put(self.tasks.qid, it.msg)
                    except Exception as exc:
                        del self.inflight[it.tid]
                        failed.append((it, exc))
        batching.clear()
        if running:
            self.batches += len(running) > 1
            self._wake_a_worker()

    def _repair(self, item: WorkItem) -> None:
        """Put an item a KeyboardInterrupt caught between two steps of dispatch
        back in a consistent place.  (Signals are handled between bytecodes after
        calls, so an item in ``inflight`` was put on the queue.)"""
        if item.tid in self.inflight:
            self._wake_a_worker(force=True)
        elif item.future._state == _base.PENDING:
            self.pending.appendleft(item)
        elif item.future._state == _base.RUNNING:
            self.inflight[item.tid] = item
            queue_put(self.tasks.qid, item.msg)
            self._wake_a_worker(force=True)

    def window_full(self) -> bool:
        return len(self.inflight) >= self.window

    def _wake_a_worker(self, force: bool = False) -> None:
        """Write a task wake-up byte unless every sleeping worker already has one
        coming (sleepers <= wake-up bytes written and not yet read)."""
        if SKIP_WAKEUPS and not force:
            sleepers = self.control.count(1, self.asleep_lo, self.asleep_hi)
            if not sleepers or sleepers <= self.task_written - sum(self.ctl[self.task_read_lo : self.task_read_hi]):
                return
        self.task_written += 1
        try:
            os.write(self.tasks.wfd, b"\0")
        except BlockingIOError:
            self.task_written -= 1  # full: the workers are being woken anyway
