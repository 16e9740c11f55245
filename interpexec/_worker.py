"""One worker: an OS thread in the main interpreter that owns one subinterpreter.

The thread creates its interpreter, sends it its settings over a hand-off queue
(data, see :class:`interpexec._protocol.WorkerSettings`), enters it once with a
constant bootstrap and stays inside :func:`interpexec._worker_main.main` until
told to stop; the reason it returned comes back on the same queue.  When the
worker has run ``max_tasks_per_child`` tasks, the thread destroys the
interpreter and starts over with a fresh one; queued work waits in the shared
task channel meanwhile.  Before an interpreter is destroyed, every result it
produced is taken off the result queue (queued items die with it).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from . import _compat
from ._protocol import (
    EXIT,
    EXIT_IDLE,
    EXIT_INIT_FAILED,
    EXIT_PARK,
    EXIT_RECYCLE,
    EXIT_RETIRED,
    EXIT_STOP,
    INTERRUPT,
    WorkerSettings,
)
from ._transport import Channel, ControlLayout

#: The source every worker interpreter runs: constant; everything else arrives
#: as data on the hand-off queue (its id and the parent's sys.path are bound as
#: globals by ``_compat.run_string``).  It runs in the fresh interpreter's
#: ``__main__`` and leaves no name there: a task's ``__main__`` function (even
#: one called ``main``) must not be found in it, only in the caller's script,
#: which the worker re-runs for it (``_worker_env.MainFixup``).
BOOTSTRAP = """\
__import__("sys").path[:] = globals().pop("_ie_path")
__import__("interpexec._worker_main", fromlist=["main"]).main(globals().pop("_ie_handoff"))
"""


TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Protocol

    class WorkerHost(Protocol):
        """What a worker asks of its pool."""

        def settings_for(self, worker: Worker) -> WorkerSettings: ...
        def entering(self, worker: Worker) -> None: ...
        def left(self, worker: Worker) -> None: ...
        def worker_should_restart(self, worker: Worker) -> bool: ...
        def worker_exited(self, worker: Worker, how: str, error: str | None) -> None: ...
        def take_results(self, final: bool = False) -> bool: ...


class Worker:
    """A worker thread and the interpreter it currently runs."""

    def __init__(
        self,
        host: WorkerHost,
        slot: int,
        name: str,
        sys_path: tuple[str, ...],
        control_view: memoryview,
        layout: ControlLayout,
    ) -> None:
        self.host = host
        self.slot = slot
        self.name = name
        self.interp_id: int | None = None
        self.restarts = 0
        self.retired = False  # stuck in a task, or waiting for threads it left; replaced
        self.in_interp = False  # owns an interpreter now (parking waits for False)
        self.commands = Channel()
        # Written by the watchdog inside this worker's interpreter only: closed
        # when the thread ends, after the interpreter is gone.
        try:
            self.interrupt_pipe = os.pipe()
        except BaseException:  # (out of descriptors): nothing made is kept
            self.commands.close()
            raise
        os.set_blocking(self.interrupt_pipe[1], False)
        # This worker's own wake-up pipe (see Dispatcher._wake_a_worker): written
        # by the dispatcher under the pool's lock, and closed under it once the
        # worker has left the pool's table (never written closed).  Neither end
        # blocks: a byte pending is a wake-up coming.
        try:
            self.wake_pipe = os.pipe()
        except BaseException:
            self.commands.close()
            for fd in self.interrupt_pipe:
                os.close(fd)
            raise
        for fd in self.wake_pipe:
            os.set_blocking(fd, False)
        self.handoff = 0
        self.sys_path = sys_path
        self.control_view = control_view
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.born = time.monotonic()
        ctl = control_view.cast("q")
        # The slot's counters keep counting across workers: remember where we start.
        self.base_done = ctl[layout.tasks_done + slot]
        self.base_busy_ns = ctl[layout.busy_ns + slot]

    def start(self) -> None:
        _compat.start_thread_object(self.thread)

    def discard(self) -> None:
        """Release what __init__ made, for a worker whose thread never started."""
        self.commands.close()
        for fd in (*self.interrupt_pipe, *self.wake_pipe):
            os.close(fd)

    def close_wake_pipe(self) -> None:
        """Close the wake-up pipe (under the pool's lock, the worker gone)."""
        pipe, self.wake_pipe = self.wake_pipe, (-1, -1)
        for fd in pipe:
            if fd >= 0:
                os.close(fd)

    def interrupt(self, tid: int) -> None:
        """Ask this worker's watchdog to stop task ``tid`` (call under the pool's
        lock: the worker closes its command channel under it too)."""
        if self.commands.qid and self.commands.wfd >= 0:
            try:
                self.commands.put((INTERRUPT, tid))
            except _compat.QueueNotFoundError:  # the channel is gone: the worker has ended
                pass

    def _run(self) -> None:
        self.handoff = _compat.queue_create()
        how, error = "error", None
        try:
            how, error = self._serve_until_stopped()
        except BaseException as exc:  # reported to the pool, which breaks
            error = repr(exc)
        finally:
            _compat.queue_destroy(self.handoff)
            os.close(self.interrupt_pipe[0])
            os.close(self.interrupt_pipe[1])
            self.host.worker_exited(self, how, error)

    def _serve_until_stopped(self) -> tuple[str, str | None]:
        """Returns how the worker ended ("stop", "idle", "retired", "ended" or
        "error") and, for "error", what broke."""
        host = self.host
        while True:
            # Around os.fork() no interpreter may exist at all (CPython's child
            # crashes otherwise), so a parked worker destroys its interpreter and
            # builds a fresh one afterwards.
            host.entering(self)
            try:
                reason, failure = self._one_interpreter()
            finally:
                host.left(self)
            if failure is not None:
                return "error", failure
            if reason == EXIT_STOP:
                return "stop", None
            if reason in (EXIT_RECYCLE, EXIT_PARK):
                if host.worker_should_restart(self):
                    if reason == EXIT_RECYCLE:
                        self.restarts += 1
                    continue
                return "idle", None
            if reason == EXIT_IDLE:
                return "idle", None
            if reason == EXIT_RETIRED:
                return "retired", None
            return "ended", None  # EXIT_INIT_FAILED: the pool is broken already

    def _one_interpreter(self) -> tuple[int, str | None]:
        """Create an interpreter, serve in it, collect its results, destroy it.
        Returns the EXIT_* reason, or a description of what failed."""
        host = self.host
        while _compat.queue_count(self.handoff):  # left over from a failed start
            _compat.queue_get(self.handoff)
        try:
            interp_id = _compat.create_interpreter()
        except Exception as exc:  # reported as the worker's failure
            return EXIT_INIT_FAILED, "could not create an interpreter: " + _chain(exc)
        self.interp_id = interp_id
        holding: tuple[tuple[int, int], ...] = ()  # (queue id, items) for queues holding items it put
        reason = EXIT_INIT_FAILED
        try:
            _compat.queue_put(self.handoff, self.control_view)
            _compat.queue_put(self.handoff, host.settings_for(self).to_wire())
            failure = _compat.run_string(interp_id, BOOTSTRAP, {"_ie_path": self.sys_path, "_ie_handoff": self.handoff})
            if failure is not None:
                return EXIT_INIT_FAILED, failure.traceback
            answer = _compat.queue_get(self.handoff)
            if type(answer) is not tuple or len(answer) != 3 or answer[0] != EXIT:
                return EXIT_INIT_FAILED, f"the worker ended without saying why ({answer!r})"
            reason, holding = int(answer[1]), answer[2]
            return reason, None
        except BaseException as exc:  # the interpreter could not be entered
            return EXIT_INIT_FAILED, repr(exc)
        finally:
            # Results still queued belong to this interpreter: take them first
            # (and let any take in progress end: it may hold views of them).
            host.take_results(final=True)
            self.interp_id = None
            if holding:
                # Items it put into interpexec Queues go with it: kept until
                # taken (not around a fork, where no interpreter may exist).
                from ._queue import keep_interpreter  # (loaded: a Queue was made)

                keep_interpreter(interp_id, holding, parking=reason == EXIT_PARK)
            else:
                try:
                    _compat.destroy_interpreter(interp_id)
                except Exception as exc:  # should not happen; say so and go on
                    print(f"interpexec: could not destroy interpreter {interp_id}: {exc!r}", file=sys.stderr)


def _chain(exc: BaseException) -> str:
    """``exc`` and what it came from, innermost last: CPython's "interpreter
    creation failed" says why only down its chain ("sub-interpreter creation
    failed", then "error evaluating path", say; the OSError under that is
    printed to stderr as it happens)."""
    from ._errors import next_in_chain  # (a rare path: loaded then)

    parts: list[str] = []
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(parts) < 8:
        seen.add(id(link))
        parts.append(repr(link))
        link = next_in_chain(link)
    return ", from ".join(parts)
