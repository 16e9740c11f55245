# The code that runs inside each worker interpreter.
#
# A worker thread enters its interpreter once and calls :func:`main`, which reads
# the worker's settings from its hand-off queue and runs :func:`serve`: a loop
# that stays in the interpreter for its whole life, blocks on the task channel's
# pipe when idle, runs each task, and puts the outcome on the result channel.  No
# interpreter entry, and no sleeping, per task.  Every message is one of
# :mod:`interpexec._protocol`'s.
#
# Beside the loop runs a watchdog thread (:mod:`interpexec._watchdog`) for
# deadlines and interrupts.  Before returning, the worker waits for threads its
# tasks left running (:class:`interpexec._worker_env.ThreadTracker`): CPython
# cannot end an interpreter while one runs.

import marshal
import os
import select
import sys
import time

from . import _compat, _wakeup
from ._protocol import (
    CALL,
    ERR,
    EV_INIT_FAILED,
    EV_STARTED,
    EV_THREADS_LEFT,
    EVENT,
    EXIT,
    EXIT_IDLE,
    EXIT_INIT_FAILED,
    EXIT_PARK,
    EXIT_RECYCLE,
    EXIT_RETIRED,
    EXIT_STOP,
    INIT_TID,
    LENT,
    NAMED,
    NATIVE,
    OK,
    SAME_ARG,
    STOP,
    STOPPED,
    VALUE,
    Interrupted,
    WorkerSettings,
    bare_report,
)
from ._transport import (
    CELL_BYTES,
    COLLECTOR_ASLEEP,
    COLLECTOR_READ,
    PARK,
    RESULTS_TAKEN,
    SAME_ARG_MIN,
    SKIP_WAKEUPS,
    TASKS_PUT,
    USED_SEQ,
    WORKERS,
    Channel,
    ControlLayout,
    decode,
    encode,
    encode_flat,
    load_callable,
)
from ._wakeup import INTERRUPT_FDS, MAX_POLL_MS
from ._watchdog import TaskState, Watchdog, finish_task, interrupted_report
from ._worker_env import LogForwarder, MainFixup, ThreadTracker

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    A = TypeVar("A")

_SHARED = __package__ + "._shared"
_FN_CACHE_MAX = 1024
#: Idle checks (each yielding the CPU) a worker makes before it sleeps.  Only
#: while the pool has no more workers than CPUs: beyond that, spinning workers
#: take CPU time from the threads that would give them work.
SPIN = 64


#: True once :func:`main` runs: this interpreter is an interpexec worker (a
#: program that merely imports this module is not; see ``_shared.in_worker``).
serving = False


def main(handoff):  # type: (int) -> None
    # Entry point: settings in from the hand-off queue, the exit reason out.
    global serving
    serving = True
    control = _compat.queue_get(handoff)
    settings = WorkerSettings.from_wire(_compat.queue_get(handoff))
    reason = serve(control, settings)
    queue = sys.modules.get(__package__ + "._queue")  # (loaded once a task got a Queue)
    _compat.queue_put(handoff, (EXIT, reason, () if queue is None else queue.queues_holding_items()))


def _encode_result(value, payload, args):  # type: (Any, tuple[Any, ...], tuple[Any, ...]) -> tuple[Any, ...]
    # Encode a task's result; a view the caller lent, or a large immutable
    # argument returned unchanged, comes back as a reference to what the caller has.
    tp = type(value)
    # (Only if the arguments crossed natively: then each is exactly what the
    # caller passed, not something a reducer rebuilt.)
    if (tp is bytes or tp is str) and len(value) >= SAME_ARG_MIN and payload[0] == NATIVE:
        for index, arg in enumerate(args):
            if arg is value:
                return (SAME_ARG, index)
    shared = sys.modules.get(_SHARED) if tp is memoryview else None  # (loaded once a buffer is lent)
    if shared is not None and shared._lent and len(payload) == 3:
        buffer = shared.lent_buffer(value)
        if buffer is not None:
            for index, crossed in enumerate(payload[2]):
                if crossed is buffer:
                    return (LENT, index, value.format, tuple(value.shape or ()))
    return encode(value, share_buffers=False, snapshot=True)


#: What a NAMED call's arguments count as for ``_encode_result``: crossed natively.
_NAMED_PAYLOAD = (NATIVE, None)


def _value_report(tid, value, payload, args):  # type: (int, Any, tuple[Any, ...], tuple[Any, ...]) -> tuple[Any, ...] | int
    # The message for a task's return value: the bare task id for None, flat
    # (VALUE) when it crosses natively.
    if value is None:
        return tid
    enc = _encode_result(value, payload, args)
    return (tid, VALUE, enc[1]) if enc[0] == NATIVE else (tid, OK, enc)


def _cell_lost():  # type: () -> None
    # What a task whose call cell did not hold its message runs instead.
    raise RuntimeError("interpexec: this task's call was not where it was sent (a bug in interpexec; please report it)")


def _report_error(tid, exc):  # type: (int, BaseException) -> tuple[Any, ...]
    # An ERR message for ``exc``, whatever its ``__str__``/``__reduce__`` do
    # (raise SystemExit, run out of memory): reporting never ends the worker.
    # (``_errors`` loads with the first failure: most workers never need it.)
    try:
        from ._errors import pack_exception

        return (tid, ERR, pack_exception(exc))
    except Interrupted:  # the watchdog stopping the task: the caller reports it stopped
        raise
    except BaseException as failure:  # any failure here is reported instead
        try:
            from ._errors import pack_unreportable

            return (tid, ERR, pack_unreportable(exc, failure))
        except Interrupted:
            raise
        except BaseException:  # _errors cannot load (the task broke imports; no memory)
            return (tid, ERR, bare_report(exc))


def _watch_swallowed_interrupts(state, watchdog):  # type: (TaskState, Watchdog) -> None
    # An Interrupted that lands in a weakref callback or ``__del__`` is dropped
    # by Python: tell the watchdog, which raises it again, and do not print it as
    # "Exception ignored"; anything else goes to the hook as before.
    previous = sys.unraisablehook

    def hook(unraisable):  # type: (Any) -> None
        if isinstance(unraisable.exc_value, Interrupted):
            state.swallowed = True
            watchdog.poke()
        else:
            previous(unraisable)

    sys.unraisablehook = hook


def serve(control, settings):  # type: (memoryview, WorkerSettings) -> int
    # Run tasks until STOP or until the worker must go; returns an EXIT_* reason.
    # The watchdog needs this interpreter's GIL to stop a task that holds it; by
    # default it would wait 5 ms per hand-over.  Nothing else competes for it.
    sys.setswitchinterval(0.0005)
    results = Channel.from_spec(settings.results)
    ctl = control.cast("q")
    layout = ControlLayout(settings.slots)
    state = TaskState(ctl, layout.stop_tids, layout.nslots)
    state.commands = commands = Channel.from_spec(settings.commands)
    _compat.hold_ctypes_token(settings.ctypes_token)  # (before the watchdog starts: it interrupts through ctypes)
    watchdog = Watchdog(state, commands, results, settings.index, settings.grace, settings.interrupt_pipe[1])
    INTERRUPT_FDS[state.thread_id] = settings.interrupt_pipe[0]
    _watch_swallowed_interrupts(state, watchdog)
    watchdog.start()
    threads = ThreadTracker()
    threads.install()  # after the watchdog: only threads of tasks are tracked
    try:
        reason = _serve(ctl, layout, settings, Channel.from_spec(settings.tasks), results, state, watchdog)
    finally:
        # A worker leaving (retired, recycled, parked) lingers no more: the
        # dispatcher, and workers that leave tasks to lingering ones, counted
        # on it to look at the queue once more.  A task queued then wakes
        # another worker instead.  (Cleared before the look: one queued after
        # the look was put after the dispatcher saw the flag cleared.)
        spinning = layout.spinning + settings.index
        if ctl[spinning]:
            ctl[spinning] = 0
            tasks = Channel.from_spec(settings.tasks)
            if _compat.queue_count_if_open(tasks.qid):
                try:
                    os.write(tasks.wfd, b"\0")
                except OSError:  # (full: sleepers are being woken anyway; or the pool is closing)
                    pass
                else:
                    ctl[layout.task_read + settings.index] -= 1  # (its reader counts it read, see pass_on)
        watchdog.stop()
    threads.end_threading()
    if not threads.wait(settings.thread_grace):
        # Say what was left, then wait on: the pool retires this worker (a fresh
        # one takes its place) and destroys the interpreter once they end.
        names = tuple(threads.names())
        results.put((-1, EVENT, settings.index, EV_THREADS_LEFT, (names, _compat.current_interpreter_id())))
        threads.wait(None)
    # Pipes of the Queues tasks made here and dropped: descriptors are
    # process-wide, and the interpreter goes away with its free list.
    queues = sys.modules.get(__package__ + "._queue")
    if queues is not None:
        queues.reclaim_parked()
    _wakeup.close_free()
    return reason


def _serve(ctl, layout, settings, tasks, results, state, watchdog):  # type: (memoryview, ControlLayout, WorkerSettings, Channel, Channel, TaskState, Watchdog) -> int
    index = settings.index
    fixup = MainFixup(settings.main_path, settings.main_name)
    fn_cache: dict[bytes | tuple[str, str], Callable[..., Any]] = {}

    def fixed(unpickle, data):  # type: (Callable[[A], Any], A) -> Any
        # ``unpickle(data)``, once more after the ``__main__`` fixup if that is
        # what it lacked.
        try:
            return unpickle(data)
        except BaseException as exc:  # anything unpickling raises: re-raised unless the fixup applies
            if not fixup.applies_to(exc):
                raise
        fixup.apply()
        return unpickle(data)

    def load_fn(ref):  # type: (bytes | tuple[str, str]) -> Callable[..., Any]
        fn = fn_cache.get(ref)
        if fn is None:
            fn = fixed(load_callable, ref)
            if len(fn_cache) >= _FN_CACHE_MAX:
                fn_cache.clear()
            fn_cache[ref] = fn
        return fn

    def load_payload(enc):  # type: (tuple[Any, ...]) -> Any
        return fixed(decode, enc)

    if settings.log_level is not None:
        LogForwarder(results, index, settings.log_level).arm()

    if settings.init_blob is not None:
        failure: BaseException | None = None
        try:
            if not state.begin(INIT_TID, settings.init_timeout):
                raise Interrupted  # stopped before it began: as if stopped running
            if settings.init_timeout is not None:
                watchdog.poke()
            fn_ref, initargs = fixed(_compat.loads, settings.init_blob)
            load_fn(fn_ref)(*initargs)
        except Interrupted:
            failure = TimeoutError("the initializer was stopped (its deadline passed, or the pool was stopped)")
        except BaseException as exc:  # anything the initializer raised: reported, the pool breaks
            failure = exc
        finally:
            try:
                finish_task(state)
            except Interrupted:  # landed in finish_task itself: once more
                finish_task(state)
        if failure is not None:
            msg = _report_error(-1, failure)
            results.put((-1, EVENT, index, EV_INIT_FAILED, msg[2]))
            return EXIT_INIT_FAILED
    # Ready to take tasks (prestart(wait=True) waits for this): after the initializer.
    results.put((-1, EVENT, index, EV_STARTED, _compat.current_interpreter_id()))

    def run(msg):  # type: (tuple[Any, ...]) -> tuple[Any, ...] | int
        # Run one task.  An Interrupted may surface anywhere from the moment
        # ``state.tid`` is set until it is cleared; the caller catches that.
        tid, kind, timeout = msg[0], msg[1], msg[4]
        if not state.begin(tid, timeout):
            return (tid, STOPPED, None)
        if timeout is not None:
            watchdog.poke()
        try:
            if kind == NAMED:  # (module, qualname) and the arguments, flat
                args = msg[5:]
                value = load_fn(msg[2:4])(*args)
                out: tuple[Any, ...] | int = _value_report(tid, value, _NAMED_PAYLOAD, args)
            elif kind == CALL:
                fn = load_fn(msg[2])
                args, kwargs = load_payload(msg[3])
                value = fn(*args, **dict(kwargs)) if kwargs else fn(*args)
                out = _value_report(tid, value, msg[3], args)
            else:  # CHUNK: argument columns in, one column of results out
                fn = load_fn(msg[2])
                columns = load_payload(msg[3])
                values = tuple(map(fn, *columns))
                if columns and len(values) != len(columns[0]):
                    # fn raised StopIteration, which ended map() early (PEP 479)
                    raise RuntimeError("a task of map() raised StopIteration")
                out = (tid, OK, encode_flat(values, share_buffers=False, snapshot=True))
        except Interrupted:
            out = interrupted_report(state, tid)
        except BaseException as exc:  # anything the task raised (SystemExit too): its future fails with it
            out = _report_error(tid, exc)
        finally:
            finish_task(state)
        return out

    asleep = layout.asleep + index
    task_read = layout.task_read + index
    written = layout.result_written + index
    written_lo, written_hi = layout.result_written, layout.result_written + layout.slots
    waiter_fds, waiter_tids, nslots = layout.waiter_fds, layout.waiter_tids, layout.nslots
    empty: Any = object()
    get = _compat.queue_get_counted
    put, put_a, put_b = _compat.QUEUE_PUT, _compat.QUEUE_PUT_A, _compat.QUEUE_PUT_B  # (the C call itself)
    task_rfd = tasks.rfd
    result_qid = results.qid
    result_wfd = results.wfd
    write = os.write
    count = _compat.queue_count
    task_qid = tasks.qid
    yield_cpu = os.sched_yield
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    # More workers than CPUs: only as many linger at once as there are CPUs
    # (every one sleeping after each task would cost a wake-up per task; every
    # one lingering would take the CPUs from the workers running tasks).
    spin_cap = cpus if ctl[WORKERS] > cpus else 0
    spin = 0 if spin_cap else SPIN  # (lingering for a waiter, below: not when over-subscribed)
    spinning = layout.spinning + index
    taken = layout.task_taken + index
    taken_lo, taken_hi = layout.task_taken, layout.task_taken + layout.slots
    spin_lo, spin_hi = layout.spinning, layout.spinning + layout.slots
    idle_timeout = settings.idle_timeout
    idle_until = 0.0  # when an idle worker leaves (0.0: not idle yet)
    # No lingering at the start (a worker started for queued work takes it at
    # its first look; lingering would only race the worker used last for the
    # next call), nor after a wake-up (see below).
    skip_linger = True
    # An idle worker sleeps on its own wake-up pipe (the dispatcher wakes the
    # worker used last there: see Dispatcher._wake_a_worker) and on the shared
    # one.  Neither read end blocks: several workers may wake for one shared
    # byte, and only one gets it.
    wake_rfd = settings.wake_fd
    task_wfd = tasks.wfd
    used_stamp = layout.used_stamp + index
    wake_read = layout.wake_read + index
    read = os.read
    idle_poll = select.poll()
    idle_poll.register(task_rfd, select.POLLIN)
    if SKIP_WAKEUPS:  # (elsewhere the dispatcher wakes through the shared pipe only: see there)
        idle_poll.register(wake_rfd, select.POLLIN)
    max_tasks = settings.max_tasks
    done = 0
    tasks_done = layout.tasks_done + index
    busy_ns = layout.busy_ns + index
    clock = time.perf_counter_ns

    cells_at, cell_mask, cell_bytes, loads = 8 * layout.cells, layout.ncells - 1, ctl.cast("B"), marshal.loads

    def task_may_wait():  # type: () -> bool
        # Whether a task may be queued: from the control block's counters
        # where they are trusted (see SKIP_WAKEUPS), tasks put (each counted
        # before its put) less tasks taken, never fewer than are queued; else
        # from the queue, whose every call takes the mutex of the queues'
        # registry, which all interpreters' queue calls share.
        if SKIP_WAKEUPS:
            return bool(ctl[TASKS_PUT] > sum(ctl[taken_lo:taken_hi]))
        return bool(count(task_qid))

    def take_own():  # type: () -> bool
        # Read a wake-up from this worker's own pipe, if one is there
        # (counted after the read: until then the dispatcher counts it as on
        # its way, and wakes nobody else for it).
        try:
            if not read(wake_rfd, 1):
                return False
        except BlockingIOError:
            return False
        ctl[wake_read] += 1
        return True

    def pass_on():  # type: () -> None
        # Once no longer asleep: a wake-up of its own that this worker will not
        # act on (it took a task by itself, woke for a shared one, or leaves)
        # goes to the shared pipe, for another sleeper.  The dispatcher writes
        # one only while it sees this worker asleep, and writes a shared one as
        # well if it no longer does after its write: one written before this
        # worker cleared its flag is read here.
        while SKIP_WAKEUPS and take_own():
            try:
                write(task_wfd, b"\0")
            except BlockingIOError:  # (full: sleepers are being woken anyway)
                continue
            ctl[task_read] -= 1  # (its reader counts it read: the dispatcher never wrote it)

    def wake_waiter(slot, tid):  # type: (int, int) -> bool | None
        # Wake the thread registered as waiting for task ``tid``: None when none
        # is, else whether that wake-up alone suffices.  A thread blocked in
        # ``result()`` collects every queued result itself; a watch (negative entry:
        # an event loop, or user code holding an ``InterpreterPoolExecutor.watch``)
        # may never look, so the resolver is woken as well.
        waiter = ctl[waiter_fds + slot]
        if not waiter or ctl[waiter_tids + slot] != tid:
            return None
        try:
            write(abs(waiter) - 1, b"\0")
        except OSError:
            return False
        return waiter > 0

    while True:
        # (Count first: a get from an empty queue makes CPython import its queue
        # wrapper module, which costs a 3.13 worker 35 ms and can fail.)
        # A worker flagged as lingering (since its last result, see below) takes
        # a task it finds.  One that is not (just started, or woken) leaves the
        # tasks to those that are, while they are enough for every task
        # queued: each looks at the queue once more and takes one, and the
        # dispatcher woke nobody for them, counting on that (calls made one
        # after the other run in the interpreter used last).
        n = count(task_qid)
        if n and (ctl[spinning] or n > sum(ctl[spin_lo:spin_hi])):
            ctl[spinning] = 0  # (cleared before a get, see below)
            msg = get(task_qid, empty)
        else:
            msg = empty
        if skip_linger:
            skip_linger = False
        elif msg is empty and (not spin_cap or sum(ctl[spin_lo:spin_hi]) - ctl[spinning] < spin_cap):  # (not itself)
            # Linger briefly before sleeping: waking a sleeping thread costs the
            # waker more than a whole no-op task, so in a burst of submits a worker
            # that sleeps after every task halves the pool's throughput.  Bounded,
            # yields the CPU at every step, then blocks on the pipe as usual.
            # It calls into the queue (whose registry's mutex every
            # interpreter's queue calls share) only when the control block's
            # counters (tasks put, less tasks taken) say a task may wait.
            ctl[spinning] = 1
            seen = -1  # (the count of tasks put when every task put was taken)
            for _ in range(SPIN):
                put_count = ctl[TASKS_PUT]
                if put_count != seen:
                    if count(task_qid):
                        # (Cleared before the get: a dispatcher that saw this worker
                        # lingering counts on its taking one more task.)
                        ctl[spinning] = 0
                        msg = get(task_qid, empty)
                        break
                    if put_count <= sum(ctl[taken_lo:taken_hi]):
                        # (A put is counted before it is made: until it was
                        # taken, the queue is looked at again.)
                        seen = put_count
                yield_cpu()
            ctl[spinning] = 0
        if msg is empty:
            # Publish "asleep" (and no longer lingering), look once more, then
            # block on the pipes.
            ctl[asleep] = 1
            ctl[spinning] = 0
            n = count(task_qid)
            msg = get(task_qid, empty) if n and n > sum(ctl[spin_lo:spin_hi]) else empty  # (see above)
            if msg is empty:
                if ctl[PARK]:
                    ctl[asleep] = 0
                    pass_on()
                    return EXIT_PARK
                timeout_ms = -1
                if idle_timeout is not None:
                    now = time.monotonic()
                    if not idle_until:
                        idle_until = now + idle_timeout
                    timeout_ms = min(MAX_POLL_MS, max(1, int((idle_until - now) * 1000)))
                woken = False
                # (Where every wake-up goes through the shared pipe, a pool with
                # no idle timeout blocks in its read, which wakes one sleeper
                # per byte: a poll would wake them all.)
                if (not SKIP_WAKEUPS and idle_timeout is None) or idle_poll.poll(timeout_ms):
                    woken = SKIP_WAKEUPS and take_own()
                    if not woken:
                        try:
                            woken = bool(read(task_rfd, 1))
                        except BlockingIOError:  # (every sleeper wakes for a shared byte: another took it)
                            pass
                        if woken:
                            ctl[task_read] += 1
                ctl[asleep] = 0
                pass_on()
                if not woken and idle_timeout is not None and time.monotonic() >= idle_until:
                    return EXIT_IDLE
                # Woken (or an idle timeout longer than one poll can wait): a task
                # waiting is taken at the next look; if none is, back to sleep
                # without lingering (another worker took it, and a worker that
                # lingers then would race the one used last for the next call).
                skip_linger = True
                continue
            ctl[asleep] = 0
            pass_on()  # (it took a task by itself)
        ctl[taken] += 1
        if type(msg) is int:  # a task sent as its id: its message is in its call cell
            tid = msg
            at = cells_at + (tid & cell_mask) * CELL_BYTES
            try:
                msg = loads(cell_bytes[at : at + CELL_BYTES])  # (the cell is the task's until it reports)
                if msg[0] != tid:
                    raise ValueError(msg[0])
            except Exception:  # (never expected: reported as the task's failure)
                msg = (tid, NAMED, __name__, "_cell_lost", None)
        if msg[1] == STOP:
            return EXIT_STOP
        idle_until = 0.0
        tid = msg[0]
        started = clock()
        try:
            out = run(msg)
        except Interrupted:  # landed outside the task's own try (see finish_task)
            finish_task(state)
            out = interrupted_report(state, tid)
        # Drop the task (and any buffers it was lent, whose release is scheduled
        # in the caller's interpreter) before the caller can see the result.
        del msg
        # Stamped as the worker used last, before the caller can see the result
        # and call again: the dispatcher wakes the sleeper used last first.
        # (Not atomic across workers: a tie only orders two workers arbitrarily.)
        ctl[USED_SEQ] += 1
        ctl[used_stamp] = ctl[USED_SEQ]
        # And counted as lingering from then on: it looks at the queue again
        # before it sleeps (it clears the flag first, then looks), so a call
        # the caller makes next is left to it rather than wake another worker
        # (calls made one after the other run in one interpreter).
        ctl[spinning] = 1
        try:
            put(result_qid, out, put_a, put_b)
        except BaseException as exc:  # e.g. MemoryError: the future must still fail
            put(result_qid, _report_error(tid, exc), put_a, put_b)
        del out
        # Wake the thread waiting for this very result if there is one (it collects
        # everything queued), else the resolver if it sleeps.
        slot = tid % nslots
        attached = wake_waiter(slot, tid)
        woke = attached is True
        if attached is None and spin and not task_may_wait():
            # Nobody waits for it yet, and no task waits for this worker: the
            # caller is usually a few microseconds from result().  Linger (bounded,
            # yielding) until it attaches or takes the result itself, rather than
            # wake the resolver to race it for the main GIL.  A new task, or the
            # end of the linger, ends it; then the resolver is woken as usual.
            # (Whether it was taken: asked of the queue first, then again only
            # once the main interpreter has taken results since.)
            results_taken = -1
            for _ in range(spin):
                if ctl[RESULTS_TAKEN] != results_taken:
                    results_taken = ctl[RESULTS_TAKEN]
                    if not count(result_qid):
                        woke = True  # taken off the queue: whoever took it delivers it
                        break
                attached = wake_waiter(slot, tid)
                if attached is not None:
                    woke = attached
                    break
                if task_may_wait():
                    break
                yield_cpu()
        if not woke and (
            not SKIP_WAKEUPS or (ctl[COLLECTOR_ASLEEP] and sum(ctl[written_lo:written_hi]) <= ctl[COLLECTOR_READ])
        ):
            ctl[written] += 1
            try:
                write(result_wfd, b"\0")
            except BlockingIOError:
                ctl[written] -= 1  # the pipe is full: the resolver is being woken
        if state.retired:
            return EXIT_RETIRED
        if ctl[PARK]:
            return EXIT_PARK
        ctl[busy_ns] += clock() - started
        ctl[tasks_done] += 1
        done += 1
        if max_tasks and done >= max_tasks:
            return EXIT_RECYCLE
