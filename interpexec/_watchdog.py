# Deadlines and interrupts inside a worker interpreter.
#
# Beside each worker's task loop runs a watchdog thread in the same interpreter.
# It blocks on the worker's command channel (and, while a task with a deadline
# runs, until that deadline).  To stop a running task it raises
# :class:`Interrupted` in the loop's thread with ``PyThreadState_SetAsyncExc``,
# which acts on the threads of the calling interpreter only: so the watchdog must
# live in the worker's own interpreter.
#
# At a deadline the watchdog fails the task's future at once (a TIMEOUT message)
# and retires its worker: the pool starts a replacement right away, and the old
# worker ends whenever the call returns, so a task stuck in C costs no capacity.
# An interrupted task that has not returned to Python ``grace`` seconds later is
# reported stuck (EV_STUCK) and its worker retired the same way.
#
# One asynchronous exception is not always enough to stop a task.  Python
# swallows an exception raised inside a weakref callback or a ``__del__``, and
# that is where one can land (say, while an import cleans up its module lock):
# the worker's unraisable hook sees it and the watchdog raises it again at once.
# User code may also catch it (or run a long ``finally``): the task gets
# ``grace`` seconds to unwind, as documented; a task still running then is
# reported stuck (its worker replaced) and the exception is raised again at
# growing intervals (:data:`REFIRE_FIRST` doubling up to :data:`REFIRE_MAX`)
# until it ends, so that its thread, and the process, can end.
#
# Imported inside every worker: standard library only, and little of it.

import os
import select
import sys
import time

from . import _compat
from ._compat import RLock, get_ident
from ._protocol import (
    CMD_STOP,
    EV_INIT_FAILED,
    EV_STUCK,
    EVENT,
    INIT_TID,
    INTERRUPT,
    STOPPED,
    TIMEOUT,
    Interrupted,
    bare_report,
)
from ._transport import Channel
from ._wakeup import MAX_POLL_MS, notify

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from typing import Any


_modules = sys.modules
_SHARED = __package__ + "._shared"

#: Unexpected failures in a row after which a watchdog gives up (each is reported).
_MAX_FAILURES = 100

#: Seconds after which an Interrupted that did not stop its task is raised again,
#: doubling each time up to REFIRE_MAX.
REFIRE_FIRST = 0.05
REFIRE_MAX = 1.0
#: Interrupt requests a worker remembers for tasks not running in it.
SKIPPED_MAX = 1024


class TaskState:
    # What the loop and the watchdog share, guarded by ``lock``.

    __slots__ = (
        "commands",
        "control",
        "deadline",
        "fired",
        "fired_at",
        "last_fire",
        "lock",
        "nslots",
        "refire_at",
        "refire_gap",
        "retired",
        "skipped",
        "stop_tids",
        "stuck_reported",
        "swallowed",
        "thread_id",
        "tid",
        "timed_out",
        "timeout",
    )

    def __init__(self, control=None, stop_tids=0, nslots=1):  # type: (Any, int, int) -> None
        self.control = control  # the control block (int64 view), where its
        self.stop_tids = stop_tids  # "interrupted" task ids start, and how many
        self.nslots = nslots
        self.commands: Channel | None = None  # the watchdog's command channel (see begin)
        # Tasks interrupt() was asked for while not running here (queued, or run
        # by another worker): begin() skips them.  The pool's mark in the control
        # block (above) is seen at once, but there is one per slot (tid % nslots):
        # an interrupt of another queued task on the same slot replaces it.
        # Insertion-ordered, the oldest dropped past SKIPPED_MAX.
        self.skipped: dict[int, None] = {}
        # Re-entrant, and released by owner checks: an Interrupted can surface
        # right as the loop's acquire() returns (see finish_task).
        self.lock = RLock()
        self.tid = 0  # task running now (INIT_TID: the initializer), 0 for none
        self.deadline = 0.0  # monotonic deadline of that task, 0.0 for none
        self.timeout: float | None = None
        self.fired = False  # an Interrupted was raised (or is pending) in the loop
        self.fired_at = 0.0  # when the first Interrupted was raised
        self.last_fire = 0.0  # when the latest one was
        self.refire_at = 0.0  # when to raise it again if the task still runs
        self.refire_gap = REFIRE_FIRST
        self.swallowed = False  # Python dropped the latest one (the unraisable hook saw it)
        self.stuck_reported = False
        self.retired = False  # the pool replaced this worker: leave after this task
        self.timed_out = 0  # the task whose deadline passed (its future fails with TimeoutError)
        self.thread_id = get_ident()

    def begin(self, tid, timeout):  # type: (int, float | None) -> bool
        # Mark task ``tid`` running; False if it was interrupted while queued
        # (the initializer, INIT_TID: before it began, as terminate_workers()
        # does to a worker still starting).
        with self.lock:
            if tid > 0 or tid == INIT_TID:
                if tid > 0 and self.control is not None and self.control[self.stop_tids + tid % self.nslots] == tid:
                    return False  # interrupted while queued (the pool marks it before telling the watchdog)
                if self.commands is not None and _compat.queue_count(self.commands.qid):
                    self._take_interrupts()  # (the watchdog may not have read them yet)
                if self.skipped.pop(tid, 0) is None:
                    return False
            self.tid = tid
            self.fired = False
            self.stuck_reported = False
            self.timeout = timeout
            self.deadline = 0.0 if timeout is None else time.monotonic() + timeout
        return True

    def note_interrupt(self, target):  # type: (int) -> bool
        # Record an interrupt request for a task that is not the one running
        # (call with ``lock`` held); False if it is the running one.
        if self.tid == target:
            return False
        skipped = self.skipped
        skipped[target] = None
        if len(skipped) > SKIPPED_MAX:
            del skipped[next(iter(skipped))]
        return True

    def _take_interrupts(self):  # type: () -> None
        # In the loop's thread, about to start a task: take the queued commands,
        # record the interrupt requests, and put the others back for the watchdog
        # (with ``lock`` held; the watchdog records what it takes under it too, so
        # only a request it has taken and not yet recorded can miss this start:
        # it then stops the task as it would a running one).
        assert self.commands is not None
        others = []
        for cmd in self.commands.drain():
            if cmd[0] == INTERRUPT and len(cmd) == 2 and cmd[1]:
                self.note_interrupt(cmd[1])
            else:
                others.append(cmd)
        for cmd in others:
            self.commands.put(cmd)


def interrupted_report(state, tid):  # type: (TaskState, int) -> tuple[Any, ...]
    # What the loop reports for task ``tid`` stopped by an Interrupted: TIMEOUT
    # again if its deadline passed (the watchdog's own TIMEOUT may be delivered
    # after this report by another thread, and the future must fail with
    # TimeoutError, not end cancelled), else STOPPED.
    if state.timed_out == tid:
        return (tid, TIMEOUT, state.timeout)
    return (tid, STOPPED, None)


def _unraisable(exc, message):  # type: (BaseException, str) -> None
    # Report ``exc`` through ``sys.unraisablehook``; never raises (the
    # watchdog must live on).  CPython's own hook accepts only its own argument
    # type, which Python code cannot make: what a hook refuses goes to stderr.
    try:
        sys.unraisablehook(_UnraisableArgs(exc, message))  # type: ignore[arg-type]
        return
    except BaseException:  # (CPython's hook: TypeError; a user's hook that raises)
        pass
    try:
        sys.stderr.write(f"{message}: {type(exc).__qualname__}: {exc}\n")
    except BaseException:  # (no stderr, a __str__ that raises): nothing more to do
        pass


class _UnraisableArgs:
    # What ``sys.unraisablehook`` expects (as ``sys.UnraisableHookArgs``).

    __slots__ = ("err_msg", "exc_traceback", "exc_type", "exc_value", "object")

    def __init__(self, exc, message):  # type: (BaseException, str) -> None
        self.exc_type, self.exc_value, self.exc_traceback = type(exc), exc, exc.__traceback__
        self.err_msg, self.object = message, None


def finish_task(state):  # type: (TaskState) -> None
    # Mark the task over, so the watchdog raises nothing more, and cancel an
    # Interrupted it set but that has not surfaced yet.
    #
    # The watchdog raises at most one Interrupted per task, only while holding
    # ``state.lock`` and only while ``state.tid`` is set.  That exception can
    # surface at any bytecode boundary, including the moment ``acquire()`` below
    # returns: then it propagates with the lock held, and the caller catches it and
    # calls this again, which first releases what this thread still holds.
    lock = state.lock
    while lock._is_owned():  # type: ignore[attr-defined]
        lock.release()
    lock.acquire()
    try:
        state.tid = 0
        state.deadline = 0.0
        fired = state.fired
    finally:
        lock.release()
    if fired:
        _compat.set_async_exc(state.thread_id, None)  # cancel one still pending
    shared = _modules.get(_SHARED)  # (loaded only once a task was lent a buffer)
    if shared is not None and shared._lent:
        shared._lent.clear()


class Watchdog:
    # Enforces deadlines and interrupt requests for one worker's running task.

    __slots__ = (
        "commands",
        "grace",
        "handle",
        "import_retry_at",
        "index",
        "interp_id",
        "interrupt_wfd",
        "results",
        "state",
    )

    def __init__(self, state, commands, results, index, grace, interrupt_wfd):  # type: (TaskState, Channel, Channel, int, float, int) -> None
        self.interrupt_wfd = interrupt_wfd
        self.state = state
        self.commands = commands
        self.results = results
        self.index = index
        self.grace = grace
        self.handle: Any = None
        self.import_retry_at = 0.0  # (after an import of ctypes failed: see _step)
        # (Sent with EV_STUCK: the pool retires the worker only if it still runs
        # this interpreter; see Workers.retire.)
        self.interp_id = _compat.current_interpreter_id()

    def start(self):  # type: () -> None
        # A plain joinable thread (isolated interpreters allow no daemon threads);
        # the threading module is not needed for it.
        self.handle = _compat.start_thread(self._run)

    def poke(self):  # type: () -> None
        # Make the watchdog re-read the task state (a task with a deadline started).
        self.commands.put((0, 0))

    def stop(self):  # type: () -> None
        self.commands.put((CMD_STOP,))
        self.handle.join()

    def _fire(self, now):  # type: (float) -> None
        # Raise Interrupted in the task's thread (call with ``state.lock`` held,
        # while ``state.tid`` is the task to stop).
        st = self.state
        if not st.fired:
            st.fired = True
            st.fired_at = now
            st.refire_gap = REFIRE_FIRST
            st.refire_at = now + max(self.grace, REFIRE_FIRST)  # time to unwind first
        else:
            st.refire_at = now + st.refire_gap
            st.refire_gap = min(st.refire_gap * 2, REFIRE_MAX)
        st.last_fire = now
        st.swallowed = False
        if not _compat.ctypes_ready():
            # Never imported under this lock, which the task thread waits for
            # as a task ends (see _compat.import_ctypes): the next step imports
            # it outside, and fires again (at once; or once an import that
            # failed may be tried again).
            st.refire_at = max(now, self.import_retry_at)
            return
        try:
            _compat.set_async_exc(st.thread_id, Interrupted)
        except Exception as exc:  # the watchdog must live on: it tries again at refire_at
            _unraisable(exc, "interpexec: a worker's watchdog could not interrupt its task")
        if self.interrupt_wfd >= 0:
            notify(self.interrupt_wfd)  # wakes a task blocked in an interpexec.Queue

    def _timed_out(self, st):  # type: (TaskState) -> None
        # The running task passed its deadline: fail its future now, even if it
        # is stuck in a C call, and have the pool replace this worker at once.
        if st.tid == INIT_TID:
            exc = TimeoutError(f"the initializer ran longer than the pool's task_timeout of {st.timeout} s")
            try:
                from ._errors import pack_exception  # (a worker loads it when first needed)

                packed = pack_exception(exc)
            except Exception:  # it cannot load (no descriptor left, imports broken): as text
                packed = bare_report(exc)
            self.results.put((-1, EVENT, self.index, EV_INIT_FAILED, packed))
            return
        st.retired = True
        st.timed_out = st.tid
        self.results.put((st.tid, TIMEOUT, st.timeout))
        self.results.put((-1, EVENT, self.index, EV_STUCK, (st.tid, self.interp_id)))

    def _run(self):  # type: () -> None
        poller = select.poll()
        poller.register(self.commands.rfd, select.POLLIN)
        failures = 0
        while True:
            try:
                if self._step(poller):
                    return
                failures = 0
            except BaseException as exc:  # the watchdog must live on: say so, go on
                failures += 1
                _unraisable(exc, "interpexec: a worker's watchdog failed (it goes on)")
                if failures >= _MAX_FAILURES:  # (the same failure each time: give up)
                    _unraisable(exc, "interpexec: a worker's watchdog stopped after repeated failures")
                    return

    def _step(self, poller):  # type: (Any) -> bool
        # Wait for the next command or deadline and act on it; True to stop.
        st, commands = self.state, self.commands
        with st.lock:
            now = time.monotonic()
            if st.tid and not st.fired and st.deadline:
                wait: float | None = max(0.0, st.deadline - now)
            elif st.tid and st.fired:
                until = st.refire_at
                if st.swallowed:
                    until = min(until, st.last_fire + REFIRE_FIRST)
                if not st.stuck_reported and not st.retired:
                    until = min(until, st.fired_at + self.grace)
                wait = max(0.0, until - now)
            else:
                wait = None
        if poller.poll(None if wait is None else min(MAX_POLL_MS, max(1, int(wait * 1000 + 0.999)))):
            os.read(commands.rfd, 4096)
        running = 0  # (a running task an interrupt request asks to stop)
        for cmd in commands.drain():
            if cmd[0] == CMD_STOP:
                return True
            target = cmd[1]
            if target:
                with st.lock:
                    # (A task not running here yet is skipped by the loop itself:
                    # TaskState.begin reads the pool's marks and these notes,
                    # recorded here at once.)
                    if not st.note_interrupt(target) and not st.fired:
                        running = target
        # About to interrupt for the first time in this interpreter (a request
        # for the running task, or a fire _fire put off): ctypes first, outside
        # st.lock, which the task thread waits for as a task ends (see
        # _compat.import_ctypes).  A deadline passing fails its future first
        # (TIMEOUT, below), then fires on the next step.  (Read without the
        # lock: a miss only puts the fire off to the next step.)
        if (
            (running or (st.tid and st.fired))
            and not _compat.ctypes_ready()
            and time.monotonic() >= self.import_retry_at
        ):
            try:
                _compat.import_ctypes()
            except Exception as exc:  # (no ctypes: tried again after REFIRE_MAX; the task is reported stuck)
                self.import_retry_at = time.monotonic() + REFIRE_MAX
                _unraisable(exc, "interpexec: a worker's watchdog could not load ctypes to interrupt its task")
        if running:
            with st.lock:
                if st.tid == running and not st.fired:  # (still running: it may have ended meanwhile)
                    self._fire(time.monotonic())
        with st.lock:
            now = time.monotonic()
            if st.tid and not st.fired and st.deadline and now >= st.deadline:
                # The TIMEOUT first: the Interrupted may surface (and its
                # STOPPED be reported) as soon as it is raised.
                try:
                    self._timed_out(st)
                finally:
                    self._fire(now)
            elif st.tid and st.fired and not st.stuck_reported and not st.retired and now >= st.fired_at + self.grace:
                st.stuck_reported = True
                st.retired = True
                self.results.put((-1, EVENT, self.index, EV_STUCK, (st.tid, self.interp_id)))
            if st.tid and st.fired and (now >= st.refire_at or (st.swallowed and now >= st.last_fire + REFIRE_FIRST)):
                self._fire(now)  # the task still runs: the last one was dropped, caught, or is pending in C
        return False
