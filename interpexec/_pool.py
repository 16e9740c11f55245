"""The pool state behind an executor: dispatch, result collection, workers.

Data flow (one pool, N workers)::

  caller threads                      main interpreter                worker interpreters
  --------------                      ----------------                -------------------
  submit(fn, *args) --encode--> pending deque --dispatch--> task Channel -------> serve() loop,
      |                          (cancellable)  (window of   (_interpqueues         one per worker,
      v                                          2N tasks)    + wake-up pipe)       each on its own
  PoolFuture <--set_result-- collect() <------------------- result Channel <---- thread and GIL
                             runs in the collector thread,  (_interpqueues + pipe)     ^
                             or in the caller blocked in                               | interrupt /
                             Future.result(), or in a        command Channel --> watchdog thread
                             worker thread before it          (one per worker)    (same interpreter)
                             destroys its interpreter

* ``submit`` encodes the call in the caller's thread (an unpicklable argument fails
  only that future), appends it to ``pending`` and dispatches while fewer than
  ``window`` tasks are in flight.  Dispatched futures are marked running: as with
  ProcessPoolExecutor, only work not yet handed to the workers can be cancelled.
* Every worker pulls from the same task channel, so load balances itself.
* Results come back on one channel; ``collect`` turns them into Future results and
  refills the window.
* A control block (see :mod:`interpexec._transport`) in shared memory tells each
  side whether the other sleeps, so wake-up bytes are written only when needed,
  and lets a worker wake the very thread blocked on its result.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import select
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, _base
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from . import _worker_main as wm
from ._compat import queue_count, queue_put
from ._errors import unpack_exception
from ._future import WAITABLE, PoolFuture
from ._pickling import dumps_callable
from ._shared import relend
from ._transport import (
    COLLECTOR_ASLEEP,
    COLLECTOR_NEEDED,
    COLLECTOR_READ,
    LENT,
    NSLOTS,
    PARK,
    SAME_ARG,
    SKIP_WAKEUPS,
    WORKERS,
    Channel,
    ControlLayout,
    borrow_pipe,
    decode,
    materialize,
    return_pipe,
    wake_fd,
)
from ._worker import Worker

try:  # 3.14+
    from concurrent.futures.interpreter import (  # type: ignore[import-not-found,unused-ignore]
        BrokenInterpreterPool as _StdBroken,
    )

    _broken_bases: tuple[type, ...] = (BrokenProcessPool, _StdBroken)
except ImportError:  # 3.13
    _broken_bases = (BrokenProcessPool,)


class BrokenInterpreterPool(*_broken_bases):  # type: ignore[misc]
    """The pool can no longer run work: a worker's initializer failed, a worker
    loop died, or the workers were terminated.  Subclasses
    ``concurrent.futures.process.BrokenProcessPool`` and, on 3.14+,
    ``concurrent.futures.interpreter.BrokenInterpreterPool``."""


class WorkItem:
    __slots__ = ("args", "future", "msg", "waiter_fd", "waiter_thread", "watched")

    def __init__(self, future: PoolFuture[Any], msg: tuple[Any, ...], args: Any) -> None:
        self.future = future
        self.msg = msg
        # The call's own arguments stay alive until it completes (a Queue or a
        # shared buffer passed to the task must outlive it, as with processes).
        self.args = args
        self.waiter_fd = 0  # write end (+1) of the pipe of a thread blocked in result()
        self.waiter_thread = 0
        self.watched = False  # has callbacks or wait() waiters: deliver promptly


_pool_counter = itertools.count()


def _main_info() -> tuple[str | None, str | None]:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) if spec is not None else None
    path = getattr(main, "__file__", None)
    if path is not None:
        path = os.path.abspath(path)
    return path, name


class Pool:
    """Everything the worker threads and the collector share.  The public executor
    holds it; nothing here holds the executor (so it can be garbage collected)."""

    def __init__(
        self,
        max_workers: int,
        initializer: Callable[..., object] | None,
        initargs: tuple[Any, ...],
        max_tasks_per_child: int | None,
        thread_name_prefix: str,
        idle_timeout: float | None,
        interrupt_grace: float,
        log_level: int | None = None,
    ) -> None:
        self.max_workers = max_workers
        self.max_tasks_per_child = max_tasks_per_child
        self.thread_name_prefix = thread_name_prefix or f"InterpreterPoolExecutor-{next(_pool_counter)}"
        self.idle_timeout = idle_timeout
        self.interrupt_grace = interrupt_grace
        self.log_level = log_level
        self.init_blob: bytes | None = (
            None if initializer is None else pickle.dumps((dumps_callable(initializer), tuple(initargs)), protocol=5)
        )
        self.sys_path = list(sys.path)
        self.main_path, self.main_name = _main_info()
        try:
            os.chdir(os.getcwd())  # fail early, here, if the cwd is gone
        except OSError:
            pass
        self.tasks = Channel()
        self.results = Channel()
        self.window = min(max(2 * max_workers, 8), NSLOTS)
        self.layout = ControlLayout(2 * max_workers + 4)
        self.waiters = self.layout.waiters
        self.control = bytearray(8 * self.layout.size)
        self.control_view = memoryview(self.control)
        self.ctl = self.control_view.cast("q")
        self.ctl[WORKERS] = max_workers
        self.asleep_lo, self.asleep_hi = 8 * self.layout.asleep, 8 * self.layout.task_read
        self.task_read_lo, self.task_read_hi = self.layout.task_read, self.layout.result_written
        self.task_written = 0

        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.pending: collections.deque[tuple[int, WorkItem]] = collections.deque()
        self.inflight: dict[int, WorkItem] = {}
        self.watched = 0  # in-flight items with watched set (under watch_lock)
        self.watched_tids: set[int] = set()  # watched while still pending
        self.watch_lock = threading.Lock()
        self.tid = itertools.count(1)
        self.workers: dict[int, Worker] = {}  # by slot; includes retired ones still running
        self.free_slots = list(range(self.layout.slots - 1, -1, -1))
        self.active = 0  # workers that take tasks
        self.ready_slots: set[int] = set()
        self.started = False
        self.shutdown_flag = False
        self.stops_sent = 0
        self.broken: str | None = None
        self.broken_cause: BaseException | None = None
        self.completed = 0
        self.collect_lock = threading.Lock()
        self.collector: threading.Thread | None = None
        self.closed = False
        self.forked = False
        self.parking = False

    # ----------------------------------------------------------------- start
    def start_locked(self) -> None:
        if not self.started:
            self.started = True
            self.collector = threading.Thread(
                target=self._collector_loop, name=f"{self.thread_name_prefix}_collector", daemon=True
            )
            self.collector.start()
        while self.active < self.max_workers and self.free_slots and self.broken is None:
            slot = self.free_slots.pop()
            w = Worker(self, slot, f"{self.thread_name_prefix}_{slot}")
            self.workers[slot] = w
            self.active += 1
            w.start()

    def prestart(self, wait: bool) -> None:
        with self.lock:
            self.check_usable_locked()
            self.start_locked()
            if wait:
                while self.broken is None and not self._all_ready_locked():
                    self.ready.wait()
                if self.broken is not None:
                    raise self.broken_error()

    def _all_ready_locked(self) -> bool:
        return all(slot in self.ready_slots for slot, w in self.workers.items() if not w.retired)

    def check_usable_locked(self) -> None:
        if self.broken is not None:
            raise self.broken_error()
        if self.shutdown_flag:
            raise RuntimeError("cannot schedule new futures after shutdown")

    def broken_error(self) -> BrokenInterpreterPool:
        exc = BrokenInterpreterPool(self.broken)
        exc.__cause__ = self.broken_cause
        return exc

    # -------------------------------------------------------------- dispatch
    def enqueue_locked(self, fut: PoolFuture[Any], msg: tuple[Any, ...], args: Any) -> None:
        if self.active < self.max_workers or not self.started:
            self.start_locked()
        tid = next(self.tid)
        fut.bind(self, tid)
        self.pending.append((tid, WorkItem(fut, (tid, *msg), args)))
        self.dispatch_locked()

    def dispatch_locked(self) -> None:
        """Move pending work into the task channel while the window allows."""
        if self.closed:
            return
        pending, inflight = self.pending, self.inflight
        while pending and len(inflight) < self.window:
            tid, item = pending.popleft()
            if not item.future.set_running_or_notify_cancel():
                continue
            inflight[tid] = item
            if self.watched_tids:
                with self.watch_lock:
                    if tid in self.watched_tids:
                        self.watched_tids.discard(tid)
                        item.watched = True
                        self.watched += 1
            try:
                queue_put(self.tasks.qid, item.msg)
            except BaseException as exc:  # e.g. an object the queue refused
                del inflight[tid]
                item.future.set_exception(exc)
                continue
            self._wake_a_worker()
        if self.shutdown_flag and not pending and self.stops_sent < self.active:
            for _ in range(self.active - self.stops_sent):
                queue_put(self.tasks.qid, (0, wm.STOP))
                self.stops_sent += 1
                self._wake_a_worker(force=True)
        self.update_needed_locked()

    def update_needed_locked(self) -> None:
        """Keep the control block's COLLECTOR_NEEDED flag true to the pool state.
        Call it after changing ``pending``, ``shutdown_flag`` or ``watched``."""
        if (self.pending or self.shutdown_flag) and self.ctl[COLLECTOR_NEEDED]:
            return  # needed, and already published (the common case in a burst)
        with self.watch_lock:
            self._write_needed_wl()

    def _write_needed_wl(self) -> None:
        needed = 1 if (self.watched or self.pending or self.shutdown_flag) else 0
        if self.ctl[COLLECTOR_NEEDED] != needed:
            self.ctl[COLLECTOR_NEEDED] = needed
            # Publish, then look: a worker that put a result before seeing the flag
            # did not wake the collector.
            if needed and not self.closed and queue_count(self.results.qid):
                self.results.notify()

    # Lock order: a future's condition -> watch_lock, and lock -> watch_lock, and
    # lock -> a future's condition.  watch_tid runs under the future's condition
    # (concurrent.futures.wait() installs waiters holding it), so it must not
    # take ``lock``.
    def watch_tid(self, tid: int) -> None:
        """Task ``tid`` got a done-callback or a wait() waiter: deliver it promptly."""
        with self.watch_lock:
            item = self.inflight.get(tid)
            if item is not None:
                if not item.watched:
                    item.watched = True
                    self.watched += 1
                    self._write_needed_wl()
                return
            # Still pending (or completing right now): dispatch picks this up.
            self.watched_tids.add(tid)
            if len(self.watched_tids) > 4 * NSLOTS:
                live = {t for t, _ in list(self.pending)}
                self.watched_tids &= live

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

    # --------------------------------------------------------------- collect
    def collect(self) -> bool:
        """Turn every result now queued into Future results.  Never blocks on I/O.

        Messages are taken off the queue under ``collect_lock`` (so a worker thread
        can be sure its interpreter's results are out before destroying it) and
        handled after releasing it, so callbacks run without our locks held.
        """
        with self.collect_lock:
            if self.closed:
                return False
            msgs = self.results.drain()
            # Out-of-band buffers of results are views over a worker's memory:
            # copy them out now, before that worker can destroy its interpreter.
            for i, msg in enumerate(msgs):
                if msg[1] == wm.OK and len(msg[2]) == 3:
                    msgs[i] = (msg[0], wm.OK, materialize(msg[2]))
        for msg in msgs:
            self._handle(msg)
        return bool(msgs)

    def wait_for(self, fut: PoolFuture[Any], timeout: float | None) -> float | None:
        """Block until ``fut`` is done (or ``timeout``), collecting results in this
        thread: the worker that finishes ``fut`` writes straight to our pipe.

        Returns the part of ``timeout`` left for the standard Condition wait that
        follows (it returns at once when ``fut`` is done)."""
        pipe = borrow_pipe()
        rfd, wfd = pipe
        item = self.attach_waiter(fut, wfd, threading.get_ident())
        if item is None:
            return_pipe(pipe)
            return timeout  # not dispatched yet, or another thread waits already:
            # the standard Condition wait serves it
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                self.collect()
                if fut._state not in WAITABLE:
                    return timeout
                if deadline is None:
                    os.read(rfd, 64)
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return 0.0
                    if select.select([rfd], [], [], left)[0]:
                        os.read(rfd, 64)
        finally:
            self.detach_waiter(item, wfd)
            return_pipe(pipe)

    def attach_waiter(self, fut: Future[Any], wfd: int, thread: int = 0) -> WorkItem | None:
        """Have the worker that finishes ``fut`` write a byte to ``wfd`` (a pipe that
        ``thread`` blocks on, or with ``thread=0`` one an event loop watches);
        whoever else handles the result writes it instead, unless that is
        ``thread`` itself.  The waiter then calls :meth:`collect`.  None when
        ``fut`` is not in a worker's hands yet, or already has a waiter.  After
        attaching, call :meth:`collect` once before waiting (the result may already
        be queued), and :meth:`detach_waiter` with the returned item when done."""
        if not isinstance(fut, PoolFuture) or fut._ie_pool is not self:
            return None
        tid = fut._ie_tid
        with self.lock:
            item = self.inflight.get(tid)
            if item is None or item.waiter_fd:
                return None
            item.waiter_thread = thread
            item.waiter_fd = wfd + 1
        self.ctl[self.waiters + tid % NSLOTS] = wfd + 1
        return item

    def detach_waiter(self, item: WorkItem, wfd: int) -> None:
        slot = self.waiters + item.msg[0] % NSLOTS
        if self.ctl[slot] == wfd + 1:
            self.ctl[slot] = 0
        if item.waiter_fd == wfd + 1:
            item.waiter_fd = 0
        # A worker that saw our slot woke only us: take what it left.
        self.collect()

    def _handle(self, msg: tuple[Any, ...]) -> None:
        tid, kind = msg[0], msg[1]
        if kind == wm.EVENT:
            self._event(msg[2], msg[3], msg[4])
            return
        with self.lock:
            item = self.inflight.pop(tid, None)
            if item is not None:
                self.completed += 1
                if item.watched:
                    with self.watch_lock:
                        self.watched -= 1
                        self._write_needed_wl()
            if self.pending or self.shutdown_flag:
                self.dispatch_locked()
        if item is None:
            return  # cancelled, timed out or interrupted earlier: a late report
        fut = item.future
        if kind == wm.OK:
            try:
                enc = msg[2]
                if enc[0] == LENT:  # the task returned a view its caller lent it
                    value = relend(item.msg[3][2][enc[1]], enc[2], enc[3])
                elif enc[0] == SAME_ARG:  # ... or one of its (immutable) arguments
                    value = item.args[0][enc[1]]
                else:
                    value = decode(enc)
            except BaseException as exc:
                _set_exception(fut, exc)
            else:
                if fut._state == _base.RUNNING:
                    try:
                        fut.set_result(value)
                    except _base.InvalidStateError:
                        pass
        elif kind == wm.ERR:
            _set_exception(fut, unpack_exception(msg[2]))
        elif kind == wm.TIMEOUT:
            _set_exception(fut, TimeoutError(f"the task ran longer than its timeout of {msg[2]} s and was stopped"))
        else:  # STOPPED: interrupted (or skipped) at our request
            fut.force_cancel()
        if item.waiter_fd and item.waiter_thread != threading.get_ident():
            wake_fd(item.waiter_fd - 1)

    def _event(self, slot: int, event: int, data: Any) -> None:
        if event == wm.EV_STARTED:
            with self.lock:
                self.ready_slots.add(slot)
                self.ready.notify_all()
        elif event == wm.EV_INIT_FAILED:
            self.set_broken("A worker initializer failed, the pool is not usable anymore", unpack_exception(data))
        elif event == wm.EV_STUCK:
            self._retire(slot, data)
        elif event == wm.EV_LOG:
            _forward_log(data)

    def _retire(self, slot: int, tid: int) -> None:
        """A task did not return to Python in time after being stopped: give up on
        that worker (its thread ends when the call returns) and start another."""
        with self.lock:
            worker = self.workers.get(slot)
            if worker is None or worker.retired:
                return
            worker.retired = True
            self.active -= 1
            self.ready_slots.discard(slot)
            if self.broken is None:
                self.start_locked()
                self.dispatch_locked()

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
                # Retired workers (stuck in C) are not waited for: they finish in
                # the background, and their late results are not wanted.
                if (self.shutdown_flag or self.broken) and all(w.retired for w in self.workers.values()):
                    break
        self.collect()
        self._close_channels()

    def _close_channels(self) -> None:
        with self.collect_lock, self.lock:
            if self.closed:
                return
            self.closed = True
        self.tasks.close()
        self.results.close()

    # ------------------------------------------------------------ interrupts
    def interrupt(self, fut: PoolFuture[Any]) -> bool:
        """Stop the task behind ``fut`` whether pending or running."""
        if fut._state not in WAITABLE:
            return False
        if Future.cancel(fut):  # (the standard cancel, not PoolFuture's)
            return True
        tid = fut._ie_tid
        with self.lock:
            item = self.inflight.get(tid)
            workers = [w for w in self.workers.values() if not w.retired]
        if item is None:
            return False
        for w in workers:
            w.commands.put((wm.INTERRUPT, tid))
        return fut.force_cancel()

    def interrupted_in_flight(self) -> list[int]:
        """Tasks handed to the workers and interrupted, not yet reported back."""
        with self.lock:
            return [tid for tid, item in self.inflight.items() if item.future.cancelled()]

    def interrupt_running(self) -> None:
        with self.lock:
            futures = [item.future for item in self.inflight.values()]
        for fut in futures:
            self.interrupt(fut)

    # --------------------------------------------------------- worker events
    def worker_should_restart(self, worker: Worker) -> bool:
        with self.lock:
            return self.broken is None and not worker.retired

    def worker_exited(self, worker: Worker, how: str, error: str | None) -> None:
        if error is not None and not worker.retired:
            self.set_broken(
                f"A worker interpreter stopped unexpectedly, the pool is not usable anymore:\n{error}", None
            )
        with self.lock:
            del self.workers[worker.slot]
            self.free_slots.append(worker.slot)
            self.ready_slots.discard(worker.slot)
            if not worker.retired:
                self.active -= 1
            if how == "stop":
                # (a worker retired just after its last check may still take a STOP
                # meant for another: dispatch below sends a new one if so)
                self.stops_sent -= 1
            if how == "idle" and (self.inflight or self.pending) and self.broken is None:
                self.start_locked()  # work arrived as it left
            if self.shutdown_flag and self.started:
                self.dispatch_locked()
            self.ready.notify_all()
        self.results.notify()  # let the collector notice

    def set_broken(self, message: str, cause: BaseException | None) -> None:
        with self.lock:
            if self.broken is not None:
                return
            self.broken = message
            self.broken_cause = cause
            waiting = [item for _, item in self.pending]
            doomed = list(self.inflight.values())
            self.pending.clear()
            self.inflight.clear()
            with self.watch_lock:
                self.watched = 0
            self.shutdown_flag = True
            self.dispatch_locked()  # sends STOP to the workers still alive
            self.ready.notify_all()
        for item in waiting:  # never dispatched: still PENDING (unless cancelled)
            if item.future.set_running_or_notify_cancel():
                doomed.append(item)
        for item in doomed:
            _set_exception(item.future, self.broken_error())
            if item.waiter_fd:
                wake_fd(item.waiter_fd - 1)

    # -------------------------------------------------------------- shutdown
    def shutdown(self, wait: bool, cancel_futures: bool, interrupt_running: bool = False) -> None:
        cancelled: list[PoolFuture[Any]] = []
        with self.lock:
            self.shutdown_flag = True
            if cancel_futures:
                cancelled = [item.future for _, item in self.pending]
                self.pending.clear()
            if self.started and not self.forked:
                self.dispatch_locked()
            started = self.started and not self.forked
        for fut in cancelled:
            fut.cancel()
        if interrupt_running:
            self.interrupt_running()
        if not started:
            if not self.forked:
                self._close_channels()
            return
        self.results.notify()
        if wait:
            self.join()

    def join(self, include_retired: bool = False) -> None:
        """Wait until every worker has ended; workers retired while stuck in C are
        not waited for unless ``include_retired`` (they end when the call returns).
        Waits on the pool's condition, which retirement and exits notify."""
        me = threading.current_thread()
        ended: set[threading.Thread] = set()
        with self.lock:
            while True:
                waiting = [
                    w.thread for w in self.workers.values() if (include_retired or not w.retired) and w.thread is not me
                ]
                ended.update(w.thread for w in self.workers.values() if w.thread is not me)
                if not waiting:
                    break
                self.ready.wait()
        for t in ended:
            if t.is_alive() and not any(w.thread is t and w.retired for w in list(self.workers.values())):
                t.join()  # it has left its interpreter: only returning remains
        if (
            self.collector is not None
            and self.collector is not me
            and not any(w.thread is me for w in list(self.workers.values()))
        ):
            self.collector.join()

    def terminate(self) -> None:
        """Cancel pending work, fail queued work, stop running tasks, stop workers."""
        with self.lock:
            self.shutdown_flag = True
            pending = [item.future for _, item in self.pending]
            self.pending.clear()
        for fut in pending:
            fut.cancel()
        # Take back what no worker has started yet.
        queued: list[tuple[Any, ...]] = []
        with self.lock:
            if self.started and not self.closed:
                queued = self.tasks.drain()
            items = [self.inflight.pop(msg[0], None) for msg in queued if msg[1] != wm.STOP]
            with self.watch_lock:
                self.watched -= sum(1 for item in items if item is not None and item.watched)
            self.stops_sent -= sum(1 for msg in queued if msg[1] == wm.STOP)
        for item in items:
            if item is not None:
                item.future.force_cancel()
                if item.waiter_fd:
                    wake_fd(item.waiter_fd - 1)
        self.interrupt_running()
        with self.lock:
            if self.started and not self.forked:
                self.dispatch_locked()
        if self.started and not self.forked:
            self.results.notify()
            self.join()

    # ------------------------------------------------------------ os.fork()
    # CPython's child aborts in PyOS_AfterFork_Child when any subinterpreter
    # exists at fork time (3.13-3.15, even an idle one).  Around a fork, every
    # worker finishes its current task, destroys its interpreter, and builds a
    # fresh one once the fork is done (so initializers run again).
    def entering(self, worker: Worker) -> None:
        with self.lock:
            while self.parking:
                self.ready.wait()
            worker.in_interp = True

    def left(self, worker: Worker) -> None:
        with self.lock:
            worker.in_interp = False
            self.ready.notify_all()

    def park(self, timeout: float) -> bool:
        """Ask every worker to destroy its interpreter; True once none is left."""
        with self.lock:
            if self.forked or not self.started or self.closed:
                return True
            self.parking = True
            self.ctl[PARK] = 1
            inside = [w for w in self.workers.values() if w.in_interp]
        for _ in inside:
            try:
                os.write(self.tasks.wfd, b"\0")  # wake the sleepers; they see PARK
            except OSError:
                break
        deadline = time.monotonic() + timeout
        with self.lock:
            while any(w.in_interp for w in self.workers.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.ready.wait(left)
        return True

    def unpark(self) -> None:
        with self.lock:
            if not self.parking:
                return
            self.parking = False
            self.ctl[PARK] = 0
            self.ready.notify_all()

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict[str, Any]:
        self.collect()  # results are delivered lazily: count the finished ones as such
        ctl, layout = self.ctl, self.layout
        now = time.monotonic()
        with self.lock:
            workers = []
            for w in sorted(self.workers.values(), key=lambda w: w.slot):
                busy = (ctl[layout.busy_ns + w.slot] - w.base_busy_ns) / 1e9
                workers.append(
                    {
                        "slot": w.slot,
                        "thread": w.name,
                        "interpreter_id": w.interp_id,
                        "tasks_completed": ctl[layout.tasks_done + w.slot] - w.base_done,
                        "busy_seconds": busy,
                        "idle_seconds": max(0.0, now - w.born - busy),
                        "restarts": w.restarts,
                        "retired": w.retired,
                    }
                )
            pending = sum(1 for _, item in self.pending if not item.future.cancelled())
            return {
                "max_workers": self.max_workers,
                "workers": workers,
                "pending": pending,
                "in_flight": len(self.inflight),
                # dispatched minus still queued: what the workers have taken
                "running": max(0, len(self.inflight) - (0 if self.closed else queue_count(self.tasks.qid))),
                "completed": self.completed,
            }


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


def _set_exception(fut: PoolFuture[Any], exc: BaseException) -> None:
    if fut._state == _base.RUNNING:
        try:
            fut.set_exception(exc)
        except _base.InvalidStateError:
            pass


# ---------------------------------------------------------------- process-wide
LIVE_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()
_exiting = False


def exiting() -> bool:
    return _exiting


def _python_exit() -> None:
    """At interpreter exit, before threads are joined: stop every pool.  As with
    ThreadPoolExecutor and ProcessPoolExecutor, queued work still runs and exit
    waits for it; except when the program ends on an unhandled Ctrl-C
    (KeyboardInterrupt), where work not started yet is cancelled so that the
    process ends promptly.  Running tasks always finish."""
    global _exiting
    _exiting = True
    interrupted = isinstance(getattr(sys, "last_exc", None), KeyboardInterrupt)
    pools = list(LIVE_POOLS)
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=interrupted)
    # A worker retired while stuck in C still runs inside its interpreter, and
    # CPython cannot finalize while one does: exit waits for those calls to end.
    for pool in pools:
        if not pool.forked:
            pool.join(include_retired=True)


threading._register_atexit(_python_exit)  # type: ignore[attr-defined]


#: How long os.fork() waits for running tasks to finish before forking anyway.
FORK_PARK_TIMEOUT = 30.0


def _before_fork() -> None:
    for pool in list(LIVE_POOLS):
        if not pool.park(FORK_PARK_TIMEOUT):
            print(
                "interpexec: os.fork() while tasks still run in subinterpreters after "
                f"{FORK_PARK_TIMEOUT:.0f} s; the child may crash (a CPython limitation)",
                file=sys.stderr,
            )


def _after_fork_in_parent() -> None:
    for pool in list(LIVE_POOLS):
        pool.unpark()


def _after_fork_in_child() -> None:
    """The child of a fork has none of the worker threads and none of the
    subinterpreters (CPython deletes them): make every inherited pool refuse work
    without touching what it shared with the parent."""
    for pool in list(LIVE_POOLS):
        pool.forked = True
        pool.lock = threading.Lock()
        pool.watch_lock = threading.Lock()
        pool.ready = threading.Condition(pool.lock)
        pool.collect_lock = threading.Lock()
        pool.workers.clear()
        pool.pending.clear()
        pool.inflight.clear()
        pool.closed = True
        pool.parking = False
        pool.shutdown_flag = True
        if pool.broken is None:
            pool.broken = "this pool was created before os.fork() and cannot be used in the child; create a new one"
    LIVE_POOLS.clear()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
