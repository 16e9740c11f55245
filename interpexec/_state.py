"""The state one pool shares between its threads, and what a work item is.

:class:`PoolState` holds the fields; each concern adds its methods in its own
module, stacked in this order (each imports only the one below it)::

    PoolState    [_state]      fields, locks, usability checks
    Dispatcher   [_dispatch]   pending deque -> task channel, the window
    Workers      [_lifecycle]  worker threads: start, retire, exit, broken pool
    Resolver     [_resolver]   result channel -> futures: the one resolver
    Waiting      [_waiting]    result()'s shortcut, interrupt()
    Stopper      [_stopping]   shutdown, terminate, exit, os.fork()
    Pool         [_pool]       stats(); what the executor holds

Locks: ``lock`` guards the pool's structures; ``collect_lock`` only the taking
of results off the result queue.  No code of the pool takes one while it holds
the other: only a signal handler nests them (in the main thread, whose locks
are re-entrant), so no thread waits for one whose holder waits for the other.
No lock of the pool is held while user code runs (done-callbacks,
``__reduce__``, log handlers, ``__del__``): futures are resolved after the
locks are released.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time
import weakref

from ._compat import (
    RLock,
    futures_held_up_the_stack,
    held,
    is_main_thread,
    lock_level,
    outer_level,
    reacquire,
    release_all,
    release_if_owned,
)
from ._future import WAITABLE
from ._pickling import dumps, encode_callable
from ._transport import NSLOTS, SKIP_WAKEUPS, WORKERS, Channel, ControlLayout
from ._wakeup import borrow, give_back, notify, wait

TYPE_CHECKING = False  # typing is not imported: nothing here needs it at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ._broken import BrokenInterpreterPool
    from ._future import PoolFuture
    from ._worker import Worker


class Events:
    """The pool's condition for worker events (started, exited, retired), over
    the pool's lock: ``threading.Condition``'s ``wait`` and ``notify_all``,
    except that the main thread waits with ``poll`` on a pipe, so that a Ctrl-C
    during ``shutdown()`` or the exit of a ``with`` block is never lost (see
    :func:`interpexec._wakeup.wait`).  Waiters re-check their condition after
    every wake-up, as with any Condition."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self._condition = threading.Condition(lock)
        self._pipes: list[int] = []  # write ends of the main thread's waits

    def notify_all(self) -> None:
        """Wake every waiter; the caller holds the lock."""
        self._condition.notify_all()
        for wfd in self._pipes:
            notify(wfd)

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock, wait for :meth:`notify_all` or
        ``timeout``, take the lock again; False on timeout."""
        if not is_main_thread():
            return self._condition.wait(timeout)
        saved = held(self._lock)  # (however deeply held: a signal handler may have re-entered)
        if not saved[0]:
            raise RuntimeError("cannot wait on un-acquired lock")
        try:
            pipe = borrow()
        except OSError:  # out of descriptors
            return self._condition.wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._pipes.append(pipe[1])  # (before releasing: a notify cannot fall in between)
        try:
            release_all(self._lock)  # (in the try: a Ctrl-C right after it is restored from)
            return wait(pipe[0], deadline, own_wfd=pipe[1])
        finally:
            reacquire(self._lock, saved)
            self._pipes.remove(pipe[1])
            give_back(pipe)


class WorkItem:
    __slots__ = ("args", "future", "msg", "tid", "waiter_fd", "waiter_thread")

    def __init__(self, future: PoolFuture[Any], msg: tuple[Any, ...], args: Any) -> None:
        self.future = future
        self.tid: int = msg[0]
        self.msg = msg
        # The call's own arguments stay alive until it completes (a Queue or a
        # shared buffer passed to the task must outlive it, as with processes).
        self.args = args
        self.waiter_fd = 0  # write end (+1) of the pipe of a thread blocked in result()
        self.waiter_thread = 0


_pool_counter = itertools.count()


#: The ``__main__`` this package made ``sys.modules["__mp_main__"]`` (see _main_info).
_aliased_main: Any = None


def _main_info() -> tuple[str | None, str | None]:
    global _aliased_main
    main = sys.modules.get("__main__")
    if main is not None:
        # A worker runs this script as "__mp_main__" (see _worker_env.MainFixup),
        # so what it defines (a class of a result, an exception) pickles under
        # that name: here, that is this __main__, as multiprocessing arranges
        # when it is imported (which this package no longer does).  Replaced
        # when __main__ changed since (a launcher running scripts in turn), but
        # not if something else (multiprocessing) set it.
        current = sys.modules.get("__mp_main__")
        if current is None or (current is not main and _aliased_main is not None and current is _aliased_main()):
            sys.modules["__mp_main__"] = main
            _aliased_main = weakref.ref(main)
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) if spec is not None else None
    path = getattr(main, "__file__", None)
    if path is not None:
        path = os.path.abspath(path)
    return path, name


class PoolState:
    """Everything the worker threads and the resolver share.  The public executor
    holds the pool; nothing here holds the executor (so it can be collected)."""

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
        task_timeout: float | None = None,
        interrupt_on_cancel: bool = False,
    ) -> None:
        self.max_workers = max_workers
        self.max_tasks_per_child = max_tasks_per_child
        self.thread_name_prefix = thread_name_prefix or f"InterpreterPoolExecutor-{next(_pool_counter)}"
        self.idle_timeout = idle_timeout
        self.interrupt_grace = interrupt_grace
        self.log_level = log_level
        self.task_timeout = task_timeout
        self.interrupt_on_cancel = interrupt_on_cancel
        self.init_blob: bytes | None = (
            None if initializer is None else dumps((encode_callable(initializer), tuple(initargs)))
        )
        self.sys_path = tuple(sys.path)
        self.main_path, self.main_name = _main_info()
        # Idle workers poll it and their own pipe (see _worker_main), or, where
        # every wake-up goes through it, block in its read with no idle timeout.
        self.tasks = Channel(blocking_read=idle_timeout is None and not SKIP_WAKEUPS)
        self.results = Channel()
        self.window = min(max(2 * max_workers, 8), NSLOTS)
        self.layout = ControlLayout(2 * max_workers + 4)
        self.control = bytearray(8 * self.layout.size)
        self.control_view = memoryview(self.control)
        self.ctl = self.control_view.cast("q")
        # Wake-ups the dispatcher wrote to each slot's worker's own pipe,
        # counted as the worker counts those it read there (the control block's
        # wake_read: see Dispatcher._wake_a_worker); set to that count when a
        # worker takes the slot.
        self.wake_written = [0] * self.layout.slots
        self.ctl[WORKERS] = max_workers
        self.asleep_lo, self.asleep_hi = 8 * self.layout.asleep, 8 * self.layout.task_read
        self.task_read_lo, self.task_read_hi = self.layout.task_read, self.layout.result_written
        self.spin_lo, self.spin_hi = 8 * self.layout.spinning, 8 * (self.layout.spinning + self.layout.slots)
        self.taken_lo, self.taken_hi = self.layout.task_taken, self.layout.task_taken + self.layout.slots
        self.task_written = 0
        # Call cells (see _transport): the task id that owns each, 0 when free.
        self.cell_owner = [0] * self.layout.ncells
        self.cell_mask = self.layout.ncells - 1
        self.cells_at = 8 * self.layout.cells  # (in bytes)

        # Re-entrant so that a lock a Ctrl-C leaked can be recognized and
        # released (release_leaked_locks); the pool's own code never takes them
        # twice, but a signal handler (or a finalizer) calling the pool inside
        # that code does (see architecture.md, "Who resolves futures").
        self.lock = RLock()  # (the C RLock, whatever threading.RLock is: see _compat.lock_level)
        self.ready = Events(self.lock)  # worker events; waited on by join/prestart/park
        self.pending: collections.deque[WorkItem] = collections.deque()
        self.inflight: dict[int, WorkItem] = {}
        self.unsettled: dict[int, WorkItem] = {}  # out of inflight, future not settled yet
        self.tid = itertools.count(1)
        self.workers: dict[int, Worker] = {}  # by slot; includes retired ones still running
        self.free_slots = list(range(self.layout.slots - 1, -1, -1))
        self.active = 0  # workers that take tasks
        # Workers start on demand, as many as there are CPUs at first (or
        # max_workers if fewer); the pool grows past that only once queued work
        # has waited without any worker taking a task (see Resolver.grow_if_stalled).
        self.cpus = os.process_cpu_count() or 1
        self.base_workers = min(max_workers, self.cpus)
        self.wanted = self.base_workers  # the workers the pool keeps started
        self.growing = False  # the resolver waits with a deadline, to grow the pool
        self.stall = (-1, 0.0)  # (tasks taken, since when): see Resolver.grow_watch
        self.grow_wait_ms = 10  # the resolver's next deadline (see Resolver.grow_deadline)
        self.ready_slots: set[int] = set()
        self.warned_interps: set[int] = set()  # (threads left: said once each, see Workers.retire)
        self.started = False
        self.shutdown_flag = False
        self.stops_sent = 0
        self.broken: str | None = None
        self.broken_cause: BaseException | None = None
        self.completed = 0
        self.start_error: Exception | None = None  # why the last worker start failed
        self.collect_lock = RLock()
        self.dispatching: WorkItem | None = None  # the item dispatch is moving from pending to inflight
        # Items (None: a wake-up) a dispatch cut short by an exception left to
        # repair, and those whose repair failed (see Dispatcher.repair_limbo_locked):
        self.limbo: list[WorkItem | None] = []
        self.repair_failed: list[tuple[WorkItem, BaseException]] = []
        # Calls shutdown(cancel_futures=True) or terminate took out of
        # ``pending`` to cancel, until each future is cancelled (see
        # Resolver.finish_cancelling), by task id:
        self.cancelling: dict[int, WorkItem] = {}
        # Calls terminate_workers() took back from the task queue, by task id:
        # still in ``inflight`` until their futures are cancelled.
        self.taken_back: set[int] = set()
        # Their messages, off the task queue and not yet recorded in
        # ``taken_back`` (see Dispatcher.take_back_queued_locked):
        self.drained: collections.deque[Any] = collections.deque()
        self.inbox: collections.deque[tuple[Any, ...]] = collections.deque()  # taken off the queue, not handled yet
        # Taken off the queue, on their way to inbox (see Resolver._take_queued):
        self.arrived: collections.deque[tuple[Any, ...]] = collections.deque()
        # The message the main thread is handling (see Resolver._deliver_in_main):
        self.held: collections.deque[Any] = collections.deque()  # (a message: a tuple, or a bare task id)
        # Messages other threads hold while they wait for the pool's lock to
        # handle them, by thread (see Resolver._leave_window):
        self.stalled: dict[int, tuple[Any, ...]] = {}
        # Outcomes decoded whose futures' locks another thread held, by task id
        # (see Resolver._park):
        self.parked: dict[int, tuple[WorkItem, tuple[bool, Any]]] = {}
        # The resolver's intervals between tries, doubling while none succeeds:
        # of parked outcomes (see Resolver.retry_parked), and of the calls a
        # stop left to cancel (see Resolver.finish_cancelling).
        self.parked_retry = 0.02
        self.parked_retry_at = 0.0  # (time.monotonic()) when it tries the parked ones next
        self.cancel_retry = 0.02
        self.resolver_thread: threading.Thread | None = None
        self.resolver_ident = 0
        self.resolver_finished = False
        # Futures settled by other threads whose done-callbacks the resolver
        # runs (see PoolFuture._finish); closed once it stops taking them.
        self.callbacks_due: collections.deque[PoolFuture[Any]] = collections.deque()
        self.callbacks_closed = False
        self.callbacks_woken = False  # a wake-up for them is on its way
        self.nested_waits = 0  # the resolver's waits in done-callbacks (see Resolver.resolve_nested)
        self.closed = False  # channels closed: nothing more can arrive
        self.forked = False
        self.parking = False

    def check_usable_locked(self) -> None:
        if self.broken is not None:
            raise self.broken_error()
        if self.shutdown_flag:
            raise RuntimeError("cannot schedule new futures after shutdown")

    def lock_levels(self) -> tuple[int, int]:
        """How deeply this thread holds the pool's two locks: what a public entry
        point records before it starts, for :meth:`release_leaked_locks`."""
        return lock_level(self.lock), lock_level(self.collect_lock)

    def work_left_locked(self) -> bool:
        """Whether queued work is still to run: a future not done, pending or in
        the window.  (A task a retired worker is stuck in has a done future: it
        was interrupted, cancelled, or failed at its deadline; so has one
        ``interrupt()`` stopped before any worker took it.)"""
        return (
            any(i.future._state in WAITABLE for i in self.inflight.values())
            or any(i.future._state in WAITABLE for i in self.pending)
            or bool(self.limbo or self.repair_failed)
        )

    def release_leaked_locks(self, levels: tuple[int, int] = (0, 0)) -> None:
        """Called when an exception (a Ctrl-C) leaves a public entry point: the
        pool's locks must not stay held by this thread (see
        ``_compat.release_if_owned``), except the ``levels`` it held on entry
        if an outer frame of the pool's holds them (``_compat.outer_level``):
        user code never runs under them but a signal handler (or a finalizer)
        can, and that frame's levels are its own, released by its own
        ``with``."""
        release_if_owned(self.lock, outer_level(levels[0]))
        release_if_owned(self.collect_lock, outer_level(levels[1]))

    def release_future_locks(self) -> None:
        """Release the conditions of this pool's futures that this thread holds.
        For the exit and ``shutdown()``: ``concurrent.futures.wait()`` and ``as_completed()`` take
        every future's lock in a Python loop, so a Ctrl-C landing there leaves
        some held (the standard library's own futures have the same flaw), and
        the resolver would block on them for ever.  No pool lock is taken (the
        resolver may hold it while it waits for such a future); copying the
        collections is atomic under the GIL.  The future dispatch is starting
        (taken from ``pending``, not yet in flight) is one of them: dispatch waits
        for its lock while holding the pool's.  Read in the order an item goes
        through them, each move adding it to the next before taking it from the
        last, so an item moving meanwhile is found in one of them.

        The conditions that a frame further up holds legitimately (this runs in
        a signal handler's ``shutdown()`` inside ``concurrent.futures.wait()``,
        say) are left alone (``_compat.futures_held_up_the_stack``)."""
        keep = futures_held_up_the_stack()
        items = list(self.pending)
        dispatching = self.dispatching
        if dispatching is not None:
            items.append(dispatching)
        items += [item for item in list(self.limbo) if item is not None]
        items += list(self.inflight.values())
        items += list(self.unsettled.values())
        # (and failures a breaking pool parked, whose items are in none of those,
        # and calls taken out of pending to be cancelled)
        items += [item for item, _ in list(self.parked.values())]
        items += list(self.cancelling.values())
        for item in items:
            if id(item.future) not in keep:
                release_if_owned(item.future._condition)

    def broken_error(self) -> BrokenInterpreterPool:
        from ._broken import BrokenInterpreterPool  # (not at import: see _broken)

        exc = BrokenInterpreterPool(self.broken)
        exc.__cause__ = self.broken_cause
        return exc


#: Every pool not yet closed, for exit and os.fork() handling.
LIVE_POOLS: weakref.WeakSet[PoolState] = weakref.WeakSet()
