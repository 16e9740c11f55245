"""The code that runs inside each worker interpreter.

A worker thread enters its interpreter once and calls :func:`serve`, which loops
there for the interpreter's whole life: it blocks on the task channel's pipe when
idle, runs each task, and puts the outcome on the result channel.  No interpreter
entry, and no sleeping, per task.

Beside the loop runs a watchdog thread in the same interpreter.  It blocks on the
worker's command channel (and, while a task with a deadline runs, until that
deadline).  To stop a running task it raises an exception in the loop's thread
with ``PyThreadState_SetAsyncExc``, which acts on the threads of the calling
interpreter only; so the watchdog must live in the worker's own interpreter.

Message shapes (all natively shareable tuples; see :mod:`interpexec._transport`):

  task     (tid, CALL,  fn_blob, encoded (args, kwargs_items), timeout or None)
           (tid, CHUNK, fn_blob, encoded argument columns,       timeout or None)
           (0,   STOP)
  result   (tid, OK, encoded value)          a CHUNK's value is a tuple of results
           (tid, ERR, packed exception)
           (tid, TIMEOUT, seconds)           from the watchdog, at the deadline
           (tid, STOPPED, None)              the task was interrupted or skipped
           (-1,  EVENT, worker index, event, data)
  command  (INTERRUPT, tid) | (CMD_STOP,)    main -> watchdog
"""

from __future__ import annotations

import _thread
import os
import select
import sys
import time
from _collections import deque  # type: ignore[import-not-found,unused-ignore]
from _pickle import loads

from . import _compat, _shared
from ._errors import pack_exception
from ._transport import (
    COLLECTOR_ASLEEP,
    COLLECTOR_NEEDED,
    COLLECTOR_READ,
    INTERRUPT_FDS,
    LENT,
    NATIVE,
    NSLOTS,
    PARK,
    SAME_ARG,
    SAME_ARG_MIN,
    SKIP_WAKEUPS,
    WORKERS,
    Channel,
    ControlLayout,
    decode,
    encode,
    encode_flat,
    wake_fd,
)

# task kinds
CALL = 0
CHUNK = 1
STOP = 2
# result kinds
OK = 0
ERR = 1
EVENT = 2
TIMEOUT = 3
STOPPED = 4
# events
EV_STARTED = 0  # data: interpreter id
EV_INIT_FAILED = 1  # data: packed exception
EV_STUCK = 2  # data: tid that did not return to Python within the grace period
EV_LOG = 3  # data: a logging record's fields (see _LogForwarder)
# commands
INTERRUPT = 0
CMD_STOP = 1
# why serve() returned (besides STOP): the worker thread acts on it
EXIT_RECYCLE = "recycle"  # max_tasks_per_child reached: start a fresh interpreter
EXIT_IDLE = "idle"  # idle longer than idle_timeout: release the interpreter
EXIT_RETIRED = "retired"  # was stuck; a replacement already runs
EXIT_PARK = "park"  # os.fork() is coming: no interpreter may exist; a fresh one follows

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_FN_CACHE_MAX = 1024
#: Idle checks (each yielding the CPU) a worker makes before it sleeps.  Only
#: while the pool has no more workers than CPUs: beyond that, spinning workers
#: take CPU time from the threads that would give them work.
SPIN = int(os.environ.get("INTERPEXEC_SPIN", "64"))
_CANCELLED_MAX = 4096


class Interrupted(BaseException):
    """Raised inside a running task to stop it (deadline passed or interrupt()).

    A BaseException, so ``except Exception`` in user code does not swallow it;
    ``finally`` blocks and context managers run as usual."""


class _MainFixup:
    """Lets functions and classes defined in the parent's ``__main__`` resolve.

    Mirrors multiprocessing's spawn: the parent's main script (or ``-m`` module) is
    run once, lazily, under the name ``__mp_main__`` (so its
    ``if __name__ == "__main__":`` block does not run) and installed as
    ``sys.modules["__main__"]``.
    """

    def __init__(self, main_path: str | None, main_name: str | None) -> None:
        self.main_path = main_path
        self.main_name = main_name
        self.done = False

    def applies_to(self, exc: BaseException) -> bool:
        return not self.done and isinstance(exc, (AttributeError, ImportError)) and "__main__" in str(exc)

    def apply(self) -> None:
        import runpy
        import types

        name, path = self.main_name, self.main_path
        if name and name != "__main__" and not name.endswith(".__main__"):
            namespace = runpy.run_module(name, run_name="__mp_main__", alter_sys=True)
        elif path and os.path.exists(path):
            namespace = runpy.run_path(path, run_name="__mp_main__")
        else:
            self.done = True
            return
        module = types.ModuleType("__mp_main__")
        module.__dict__.update(namespace)
        sys.modules["__main__"] = sys.modules["__mp_main__"] = module
        # Only now: a task stopped while the script was running gets it re-run.
        self.done = True


class _TaskState:
    """What the loop and the watchdog share, guarded by ``lock``."""

    def __init__(self) -> None:
        # Re-entrant, and released by owner checks: an Interrupted can surface
        # right as the loop's acquire() returns (see _finish_task).
        self.lock = _thread.RLock()
        self.tid = 0  # task running now, 0 for none
        self.deadline = 0.0  # monotonic deadline of that task, 0.0 for none
        self.timeout: float | None = None
        self.fired = False  # an Interrupted was raised (or is pending) in the loop
        self.fired_at = 0.0
        self.stuck_reported = False
        self.retired = False
        self.cancelled: deque[int] = deque(maxlen=_CANCELLED_MAX)
        self.thread_id = _thread.get_ident()


class _LogForwarder:
    """Sends ``logging`` records emitted inside this worker to the caller, whose
    own handlers then handle them.  Installed once the task code has imported
    ``logging`` (a worker that never logs never imports it)."""

    def __init__(self, results: Channel, index: int) -> None:
        self.results = results
        self.index = index
        self.installed = False

    def install(self, level: int) -> None:
        import logging

        self.installed = True
        results, index = self.results, self.index
        interp = _compat.current_interpreter_id()

        class ForwardHandler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    exc_text = record.exc_text
                    if record.exc_info and not exc_text:
                        exc_text = logging.Formatter().formatException(record.exc_info)
                    fields = (
                        record.name,
                        record.levelno,
                        record.pathname,
                        record.lineno,
                        record.getMessage(),
                        exc_text,
                        record.funcName,
                        record.created,
                        record.threadName,
                        interp,
                    )
                    results.put((-1, EVENT, index, EV_LOG, fields))
                except Exception:
                    self.handleError(record)

        root = logging.getLogger()
        root.addHandler(ForwardHandler())
        root.setLevel(level)


def _finish_task(state: _TaskState) -> None:
    """Mark the task over, so the watchdog raises nothing more, and cancel an
    Interrupted it set but that has not surfaced yet.

    The watchdog raises at most one Interrupted per task, only while holding
    ``state.lock`` and only while ``state.tid`` is set.  That exception can
    surface at any bytecode boundary, including the moment ``acquire()`` below
    returns: then it propagates with the lock held, and the caller catches it and
    calls this again, which first releases what this thread still holds.
    """
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
        _set_async_exc(state.thread_id, None)  # cancel one still pending
    if _shared._lent:
        _shared._lent.clear()


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


class _Watchdog:
    """Enforces deadlines and interrupt requests for one worker's running task."""

    def __init__(
        self, state: _TaskState, commands: Channel, results: Channel, index: int, grace: float, interrupt_wfd: int
    ) -> None:
        self.interrupt_wfd = interrupt_wfd
        self.state = state
        self.commands = commands
        self.results = results
        self.index = index
        self.grace = grace
        self.handle: Any = None

    def start(self) -> None:
        # A plain joinable thread (isolated interpreters allow no daemon threads);
        # the threading module is not needed for it.
        self.handle = _thread.start_joinable_thread(self._run, daemon=False)

    def poke(self) -> None:
        """Make the watchdog re-read the task state (a task with a deadline started)."""
        self.commands.put((INTERRUPT, 0))

    def stop(self) -> None:
        self.commands.put((CMD_STOP,))
        self.handle.join()

    def _fire(self, now: float) -> None:
        st = self.state
        st.fired = True
        st.fired_at = now
        _set_async_exc(st.thread_id, Interrupted)
        if self.interrupt_wfd >= 0:
            wake_fd(self.interrupt_wfd)  # wakes a task blocked in an interpexec.Queue

    def _run(self) -> None:
        st, commands, rfd = self.state, self.commands, self.commands.rfd
        while True:
            with st.lock:
                now = time.monotonic()
                if st.tid and not st.fired and st.deadline:
                    wait: float | None = max(0.0, st.deadline - now)
                elif st.tid and st.fired and not st.stuck_reported:
                    wait = max(0.0, st.fired_at + self.grace - now)
                else:
                    wait = None
            if select.select([rfd], [], [], wait)[0]:
                os.read(rfd, 4096)
            for cmd in commands.drain():
                if cmd[0] == CMD_STOP:
                    return
                target = cmd[1]
                if target:
                    with st.lock:
                        if st.tid == target:
                            if not st.fired:
                                self._fire(time.monotonic())
                        else:
                            st.cancelled.append(target)
            with st.lock:
                now = time.monotonic()
                if st.tid and not st.fired and st.deadline and now >= st.deadline:
                    self._fire(now)
                    # Fail the future now, even if the task is stuck in a C call (one
                    # that releases the GIL; one holding it delays even the watchdog).
                    self.results.put((st.tid, TIMEOUT, st.timeout))
                elif st.tid and st.fired and not st.stuck_reported and now >= st.fired_at + self.grace:
                    st.stuck_reported = True
                    st.retired = True
                    self.results.put((-1, EVENT, self.index, EV_STUCK, st.tid))


def _encode_result(value: Any, payload: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Encode a task's result; a view the caller lent, or a large immutable
    argument returned unchanged, comes back as a reference to what the caller has."""
    tp = type(value)
    # (Only if the arguments crossed natively: then each is exactly what the
    # caller passed, not something a reducer rebuilt.)
    if (tp is bytes or tp is str) and len(value) >= SAME_ARG_MIN and payload[0] == NATIVE:
        for index, arg in enumerate(args):
            if arg is value:
                return (SAME_ARG, index)
    if tp is memoryview and _shared._lent and len(payload) == 3:
        buffer = _shared.lent_buffer(value)
        if buffer is not None:
            for index, crossed in enumerate(payload[2]):
                if crossed is buffer:
                    return (LENT, index, value.format, tuple(value.shape or ()))
    return encode(value, share_buffers=False, snapshot=True)


def serve(
    control: memoryview,
    slots: int,
    tasks_spec: tuple[int, int, int],
    results_spec: tuple[int, int, int],
    commands_spec: tuple[int, int, int],
    interrupt_pipe: tuple[int, int],
    index: int,
    max_tasks: int,
    idle_timeout: float | None,
    grace: float,
    init_blob: bytes | None,
    main_path: str | None,
    main_name: str | None,
    log_level: int | None = None,
) -> str | None:
    """Run tasks until STOP (returns None) or until the worker must go (returns
    one of the EXIT_* reasons).  ``log_level``: forward ``logging`` records at or
    above it to the caller's handlers (None: do not forward)."""
    # The watchdog needs this interpreter's GIL to stop a task that holds it; by
    # default it would wait 5 ms per hand-over.  Nothing else competes for it.
    sys.setswitchinterval(0.0005)
    _shared._in_worker = True
    tasks = Channel.from_spec(tasks_spec)
    results = Channel.from_spec(results_spec)
    state = _TaskState()
    watchdog = _Watchdog(state, Channel.from_spec(commands_spec), results, index, grace, interrupt_pipe[1])
    INTERRUPT_FDS[state.thread_id] = interrupt_pipe[0]
    watchdog.start()
    try:
        return _serve(
            control,
            slots,
            tasks,
            results,
            state,
            watchdog,
            index,
            max_tasks,
            idle_timeout,
            init_blob,
            _MainFixup(main_path, main_name),
            log_level,
        )
    finally:
        watchdog.stop()


def _serve(
    control: memoryview,
    slots: int,
    tasks: Channel,
    results: Channel,
    state: _TaskState,
    watchdog: _Watchdog,
    index: int,
    max_tasks: int,
    idle_timeout: float | None,
    init_blob: bytes | None,
    fixup: _MainFixup,
    log_level: int | None,
) -> str | None:
    fn_cache: dict[bytes, Callable[..., Any]] = {}

    def load(blob: bytes) -> Any:
        try:
            return loads(blob)
        except BaseException as exc:
            if not fixup.applies_to(exc):
                raise
        fixup.apply()
        return loads(blob)

    def load_fn(blob: bytes) -> Callable[..., Any]:
        fn = fn_cache.get(blob)
        if fn is None:
            fn = load(blob)
            if len(fn_cache) >= _FN_CACHE_MAX:
                fn_cache.clear()
            fn_cache[blob] = fn
        return fn

    def load_payload(enc: tuple[Any, ...]) -> Any:
        try:
            return decode(enc)
        except BaseException as exc:
            if not fixup.applies_to(exc):
                raise
        fixup.apply()
        return decode(enc)

    if init_blob is not None:
        try:
            fn_blob, initargs = load(init_blob)
            load(fn_blob)(*initargs)
        except BaseException as exc:
            results.put((-1, EVENT, index, EV_INIT_FAILED, pack_exception(exc)))
            return None
    # Ready to take tasks (prestart(wait=True) waits for this): after the initializer.
    results.put((-1, EVENT, index, EV_STARTED, _compat.current_interpreter_id()))

    def run(msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """Run one task.  An Interrupted may surface anywhere from the moment
        ``state.tid`` is set until it is cleared; the caller catches that."""
        tid, kind, timeout = msg[0], msg[1], msg[4]
        lock = state.lock
        with lock:
            if tid in state.cancelled:
                return (tid, STOPPED, None)
            state.tid = tid
            state.fired = False
            state.stuck_reported = False
            if timeout is not None:
                state.deadline = time.monotonic() + timeout
                state.timeout = timeout
        if timeout is not None:
            watchdog.poke()
        try:
            fn = load_fn(msg[2])
            if log_level is not None and "logging" in sys.modules and not logs.installed:
                logs.install(log_level)
            if kind == CALL:
                args, kwargs = load_payload(msg[3])
                value = fn(*args, **dict(kwargs)) if kwargs else fn(*args)
                out: tuple[Any, ...] = (tid, OK, _encode_result(value, msg[3], args))
            else:  # CHUNK: argument columns in, one column of results out
                values = tuple(map(fn, *load_payload(msg[3])))
                out = (tid, OK, encode_flat(values, share_buffers=False, snapshot=True))
        except Interrupted:
            out = (tid, STOPPED, None)
        except BaseException as exc:
            out = (tid, ERR, pack_exception(exc))
        finally:
            _finish_task(state)
        return out

    layout = ControlLayout(slots)
    ctl = control.cast("q")
    asleep = layout.asleep + index
    task_read = layout.task_read + index
    written = layout.result_written + index
    written_lo, written_hi = layout.result_written, layout.result_written + layout.slots
    waiters = layout.waiters
    empty = object()
    get = tasks.get_nowait
    put = _compat.queue_put
    task_rfd = tasks.rfd
    result_qid = results.qid
    result_wfd = results.wfd
    write = os.write
    count = _compat.queue_count
    task_qid = tasks.qid
    yield_cpu = os.sched_yield
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    spin = SPIN if ctl[WORKERS] <= cpus else 0
    done = 0
    logs = _LogForwarder(results, index)
    tasks_done = layout.tasks_done + index
    busy_ns = layout.busy_ns + index
    clock = time.perf_counter_ns
    while True:
        msg = get(empty)
        if msg is empty and spin:
            # Linger briefly before sleeping: waking a sleeping thread costs the
            # waker more than a whole no-op task, so in a burst of submits a worker
            # that sleeps after every task halves the pool's throughput.  Bounded,
            # yields the CPU at every step, then blocks on the pipe as usual.
            for _ in range(spin):
                if count(task_qid):
                    msg = get(empty)
                    break
                yield_cpu()
        if msg is empty:
            # Publish "asleep", look once more, then block on the pipe.
            ctl[asleep] = 1
            msg = get(empty)
            if msg is empty:
                if ctl[PARK]:
                    ctl[asleep] = 0
                    return EXIT_PARK
                if idle_timeout is not None and not select.select([task_rfd], [], [], idle_timeout)[0]:
                    ctl[asleep] = 0
                    return EXIT_IDLE
                os.read(task_rfd, 1)
                ctl[task_read] += 1
                ctl[asleep] = 0
                continue
            ctl[asleep] = 0
        if msg[1] == STOP:
            return None
        tid = msg[0]
        started = clock()
        try:
            out = run(msg)
        except Interrupted:  # landed outside the task's own try (see _finish_task)
            _finish_task(state)
            out = (tid, STOPPED, None)
        # Drop the task (and any buffers it was lent, whose release is scheduled
        # in the caller's interpreter) before the caller can see the result.
        del msg
        put(result_qid, out)
        del out
        # Wake the thread waiting for this very result if there is one (it collects
        # everything queued), else the collector if it sleeps.
        waiter = ctl[waiters + tid % NSLOTS]
        if waiter:
            try:
                write(waiter - 1, b"\0")
                waiter = 0
            except OSError:
                pass
        if not waiter and (
            not SKIP_WAKEUPS
            or (
                ctl[COLLECTOR_NEEDED]
                and ctl[COLLECTOR_ASLEEP]
                and sum(ctl[written_lo:written_hi]) <= ctl[COLLECTOR_READ]
            )
        ):
            ctl[written] += 1
            try:
                write(result_wfd, b"\0")
            except BlockingIOError:
                ctl[written] -= 1  # the pipe is full: the collector is being woken
        if state.retired:
            return EXIT_RETIRED
        if ctl[PARK]:
            return EXIT_PARK
        ctl[busy_ns] += clock() - started
        ctl[tasks_done] += 1
        done += 1
        if max_tasks and done >= max_tasks:
            return EXIT_RECYCLE
