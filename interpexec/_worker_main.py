"""The code that runs inside each worker interpreter.

A worker thread enters its interpreter once and calls :func:`serve`, which loops
there for the interpreter's whole life: it blocks on the task channel's pipe when
idle, runs each task, and puts the outcome on the result channel.  No
interpreter entry, and no sleeping, per task.

Message shapes (all natively shareable tuples; see :mod:`interpexec._transport`):

  task    (tid, CALL,  fn_blob, encoded (args, kwargs_items))
          (tid, CHUNK, fn_blob, encoded tuple of args tuples)
          (0,   STOP)
  result  (tid, OK,  encoded value)         value of a CHUNK is a tuple of results
          (tid, ERR, packed exception)
          (-1,  EVENT, worker index, event, data)
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any, Callable

from . import _compat
from ._errors import pack_exception
from ._transport import COLLECTOR_ASLEEP, COLLECTOR_READ, NSLOTS, SKIP_WAKEUPS, Channel, ControlLayout, decode, encode

# task kinds
CALL = 0
CHUNK = 1
STOP = 2
# result kinds
OK = 0
ERR = 1
EVENT = 2
# events
EV_STARTED = 0  # data: interpreter id
EV_INIT_FAILED = 1  # data: packed exception
EV_RETIRING = 2  # data: tasks run

_FN_CACHE_MAX = 1024


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
        self.done = True
        import runpy
        import types

        name, path = self.main_name, self.main_path
        if name and name != "__main__" and not name.endswith(".__main__"):
            namespace = runpy.run_module(name, run_name="__mp_main__", alter_sys=True)
        elif path and os.path.exists(path):
            namespace = runpy.run_path(path, run_name="__mp_main__")
        else:
            return
        module = types.ModuleType("__mp_main__")
        module.__dict__.update(namespace)
        sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def serve(
    control: memoryview,
    workers: int,
    tasks_spec: tuple[int, int, int],
    results_spec: tuple[int, int, int],
    index: int,
    max_tasks: int,
    init_blob: bytes | None,
    main_path: str | None,
    main_name: str | None,
) -> bool:
    """Run tasks until STOP (returns False) or until ``max_tasks`` have run
    (returns True: the caller replaces this interpreter with a fresh one)."""
    tasks = Channel.from_spec(tasks_spec)
    results = Channel.from_spec(results_spec)
    fixup = _MainFixup(main_path, main_name)
    fn_cache: dict[bytes, Callable[..., Any]] = {}

    def load(blob: bytes) -> Any:
        try:
            return pickle.loads(blob)
        except BaseException as exc:
            if not fixup.applies_to(exc):
                raise
        fixup.apply()
        return pickle.loads(blob)

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

    results.put((-1, EVENT, index, EV_STARTED, _compat.current_interpreter_id()))
    if init_blob is not None:
        try:
            initializer, initargs = load(init_blob)
            initializer(*initargs)
        except BaseException as exc:
            results.put((-1, EVENT, index, EV_INIT_FAILED, pack_exception(exc)))
            return False

    layout = ControlLayout(workers)
    ctl = control.cast("q")
    asleep = layout.asleep + index
    task_read = layout.task_read + index
    written = layout.result_written + index
    written_lo, written_hi = layout.result_written, layout.result_written + workers
    waiters = layout.waiters
    empty = object()
    get = tasks.get_nowait
    put = _compat.queue_put
    task_rfd = tasks.rfd
    result_qid = results.qid
    result_wfd = results.wfd
    write = os.write
    done = 0
    while True:
        msg = get(empty)
        if msg is empty:
            # Publish "asleep", look once more, then block on the pipe.
            ctl[asleep] = 1
            msg = get(empty)
            if msg is empty:
                os.read(task_rfd, 1)
                ctl[task_read] += 1
                ctl[asleep] = 0
                continue
            ctl[asleep] = 0
        kind = msg[1]
        if kind == STOP:
            return False
        tid = msg[0]
        try:
            fn = load_fn(msg[2])
            if kind == CALL:
                args, kwargs = load_payload(msg[3])
                value = fn(*args, **dict(kwargs)) if kwargs else fn(*args)
            else:
                value = tuple([fn(*args) for args in load_payload(msg[3])])
            out = (tid, OK, encode(value, share_buffers=False))
        except BaseException as exc:
            out = (tid, ERR, pack_exception(exc))
        # Drop our references before the next blocking wait.
        value = fn = None
        put(result_qid, out)
        out = None
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
            or (ctl[COLLECTOR_ASLEEP] and sum(ctl[written_lo:written_hi]) <= ctl[COLLECTOR_READ])
        ):
            ctl[written] += 1
            try:
                write(result_wfd, b"\0")
            except BlockingIOError:
                ctl[written] -= 1  # the pipe is full: the collector is being woken
        done += 1
        if max_tasks and done >= max_tasks:
            results.put((-1, EVENT, index, EV_RETIRING, done))
            return True
