"""One worker: an OS thread in the main interpreter that owns one subinterpreter.

The thread creates its interpreter, enters it once and stays inside
:func:`interpexec._worker_main.serve` until told to stop.  When ``serve`` returns
because the worker has run ``max_tasks_per_child`` tasks, the thread destroys the
interpreter and starts over with a fresh one; queued work waits in the shared task
channel meanwhile, and the other workers keep taking it.  Before an interpreter is
destroyed, every result it produced is collected (queued items die with it).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from . import _compat
from . import _worker_main as wm
from ._transport import Channel, borrow_pipe, return_pipe

if TYPE_CHECKING:
    from ._pool import Pool

_EXIT_MARK = "interpexec-worker-exit:"

_BOOTSTRAP = """\
import sys
sys.path[:] = {path!r}
from interpexec._worker_main import serve
from interpexec._compat import queue_get
_reason = serve(queue_get({handoff!r}), {slots!r}, {tasks!r}, {results!r}, {commands!r}, {interrupt!r}, {index!r},
                {max_tasks!r}, {idle_timeout!r}, {grace!r}, {init!r}, {main_path!r}, {main_name!r}, {log_level!r})
if _reason:
    raise SystemExit({mark!r} + _reason)
"""


class Worker:
    """A worker thread and the interpreter it currently runs."""

    def __init__(self, pool: Pool, slot: int, name: str) -> None:
        self.pool = pool
        self.slot = slot
        self.name = name
        self.interp_id: int | None = None
        self.restarts = 0
        self.retired = False  # stuck in a task; replaced; exits when it returns
        self.in_interp = False  # owns an interpreter now (parking waits for False)
        self.commands = Channel()
        self.interrupt_pipe = borrow_pipe()
        self.handoff = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.born = time.monotonic()
        ctl, layout = pool.ctl, pool.layout
        # The slot's counters keep counting across workers: remember where we start.
        self.base_done = ctl[layout.tasks_done + slot]
        self.base_busy_ns = ctl[layout.busy_ns + slot]

    def start(self) -> None:
        self.thread.start()

    def _source(self) -> str:
        pool = self.pool
        return _BOOTSTRAP.format(
            path=list(pool.sys_path),
            handoff=self.handoff,
            slots=pool.layout.slots,
            tasks=pool.tasks.spec(),
            results=pool.results.spec(),
            commands=self.commands.spec(),
            interrupt=self.interrupt_pipe,
            index=self.slot,
            max_tasks=pool.max_tasks_per_child or 0,
            idle_timeout=pool.idle_timeout,
            grace=pool.interrupt_grace,
            init=pool.init_blob,
            main_path=pool.main_path,
            main_name=pool.main_name,
            log_level=pool.log_level,
            mark=_EXIT_MARK,
        )

    def _run(self) -> None:
        # The control block crosses as a memoryview, which only a queue carries.
        self.handoff = _compat.queue_create()
        how, error = "error", None
        try:
            how, error = self._serve_until_stopped()
        except BaseException as exc:  # pragma: no cover - defensive
            error = repr(exc)
        finally:
            _compat.queue_destroy(self.handoff)
            self.commands.close()
            return_pipe(self.interrupt_pipe)
            self.pool.worker_exited(self, how, error)

    def _serve_until_stopped(self) -> tuple[str, str | None]:
        """Returns how the worker ended ("stop", "idle", "retired" or "error") and,
        for "error", what broke."""
        pool = self.pool
        source = self._source()
        while True:
            # Around os.fork() no interpreter may exist at all (CPython's child
            # crashes otherwise), so a parked worker destroys its interpreter and
            # builds a fresh one afterwards.
            pool.entering(self)
            try:
                failure = self._one_interpreter(source)
            finally:
                pool.left(self)
            if failure is None:
                return "stop", None
            reason = None
            if failure.type_name == "SystemExit" and failure.message.startswith(_EXIT_MARK):
                reason = failure.message[len(_EXIT_MARK) :]
            if reason is None:
                return "error", failure.traceback
            if reason in (wm.EXIT_RECYCLE, wm.EXIT_PARK):
                if pool.worker_should_restart(self):
                    if reason == wm.EXIT_RECYCLE:
                        self.restarts += 1
                    continue
                return "idle", None
            return ("idle" if reason == wm.EXIT_IDLE else "retired"), None

    def _one_interpreter(self, source: str) -> _compat.ExecFailure | None:
        """Create an interpreter, serve in it, collect its results, destroy it."""
        pool = self.pool
        try:
            interp_id = _compat.create_interpreter()
        except BaseException as exc:
            return _compat.ExecFailure("InterpreterError", "", f"could not create an interpreter: {exc!r}")
        self.interp_id = interp_id
        try:
            # Tasks interrupted while still queued are skipped by the interpreter
            # that was told so; that one may have been recycled since: tell this one.
            for tid in pool.interrupted_in_flight():
                self.commands.put((wm.INTERRUPT, tid))
            _compat.queue_put(self.handoff, pool.control_view)
            return _compat.run_string(interp_id, source)
        except BaseException as exc:  # the interpreter could not be entered
            return _compat.ExecFailure(type(exc).__name__, str(exc), repr(exc))
        finally:
            # Results still queued belong to this interpreter: take them first.
            pool.collect()
            self.interp_id = None
            try:
                _compat.destroy_interpreter(interp_id)
            except Exception as exc:  # pragma: no cover - should not happen
                print(f"interpexec: could not destroy interpreter {interp_id}: {exc!r}", file=sys.stderr)
