"""One worker: an OS thread in the main interpreter that owns one subinterpreter.

The thread creates its interpreter, enters it once and stays inside
:func:`interpexec._worker_main.serve` until told to stop.  When ``serve`` returns
because the worker has run ``max_tasks_per_child`` tasks, the thread destroys the
interpreter and starts over with a fresh one; queued work simply waits in the
shared task channel meanwhile.  Before an interpreter is destroyed, every result
it produced is collected (items it put on a queue die with it).
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from . import _compat

if TYPE_CHECKING:
    from ._executor import _Pool

_RETIRE_MARK = "interpexec-worker-retire"

_BOOTSTRAP = """\
import sys
sys.path[:] = {path!r}
from interpexec._worker_main import serve
from interpexec._compat import queue_get
if serve(queue_get({handoff!r}), {workers!r}, {tasks!r}, {results!r}, {index!r}, {max_tasks!r}, {init!r}, {main_path!r}, {main_name!r}):
    raise SystemExit({mark!r})
"""


class Worker:
    """A worker thread and the interpreter it currently runs."""

    def __init__(self, pool: _Pool, index: int, name: str) -> None:
        self.pool = pool
        self.index = index
        self.interp_id: int | None = None
        self.restarts = 0
        self.handoff = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _source(self) -> str:
        pool = self.pool
        return _BOOTSTRAP.format(
            path=list(pool.sys_path),
            workers=pool.layout.spec(),
            handoff=self.handoff,
            tasks=pool.tasks.spec(),
            results=pool.results.spec(),
            index=self.index,
            max_tasks=pool.max_tasks_per_child or 0,
            init=pool.init_blob,
            main_path=pool.main_path,
            main_name=pool.main_name,
            mark=_RETIRE_MARK,
        )

    def _run(self) -> None:
        pool = self.pool
        # The control block crosses as a memoryview, which only a queue carries.
        self.handoff = _compat.queue_create()
        try:
            self._serve_until_stopped()
        finally:
            _compat.queue_destroy(self.handoff)

    def _serve_until_stopped(self) -> None:
        pool = self.pool
        source = self._source()
        while True:
            _compat.queue_put(self.handoff, pool.control_view)
            try:
                interp_id = _compat.create_interpreter()
            except BaseException as exc:
                pool.worker_exited(self, f"could not create an interpreter: {exc!r}")
                return
            self.interp_id = interp_id
            failure: _compat.ExecFailure | None
            try:
                failure = _compat.run_string(interp_id, source)
            except BaseException as exc:  # the interpreter could not be entered
                failure = _compat.ExecFailure(type(exc).__name__, str(exc), repr(exc))
            finally:
                # Results still queued belong to this interpreter: take them first.
                pool.collect()
                self.interp_id = None
                try:
                    _compat.destroy_interpreter(interp_id)
                except Exception as exc:  # pragma: no cover - should not happen
                    print(f"interpexec: could not destroy interpreter {interp_id}: {exc!r}", file=sys.stderr)
            if failure is not None and failure.type_name == "SystemExit" and _RETIRE_MARK in failure.message:
                self.restarts += 1
                if pool.worker_should_restart(self):
                    continue
                pool.worker_exited(self, None)
                return
            pool.worker_exited(self, None if failure is None else failure.traceback)
            return
