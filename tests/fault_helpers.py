"""Task functions for the fault and interruption tests (workers import them)."""

from __future__ import annotations

import os
import sys
import time


def echo(*args):
    return args


def ok(x):
    return x


def raise_system_exit(code):
    raise SystemExit(code)


def raise_keyboard_interrupt():
    raise KeyboardInterrupt("from a task")


def recurse(n=0):
    return recurse(n + 1)


def raise_memory_error():
    raise MemoryError("pretend we ran out")


class OddInit(Exception):
    """__init__ takes keyword-only arguments: pickling by args cannot rebuild it."""

    def __init__(self, *, code, detail):
        super().__init__(f"code {code}: {detail}")
        self.code = code


def raise_odd_init():
    raise OddInit(code=7, detail="odd")


def raise_chained():
    try:
        {}["missing"]
    except KeyError as exc:
        raise ValueError("lookup failed") from exc


def raise_group():
    raise ExceptionGroup("several", [ValueError("a"), TypeError("b")])


def import_incompatible():
    import _testsinglephase  # noqa: F401  (a CPython test module that refuses subinterpreters)


def unpicklable_result():
    return lambda: None


def spin_forever():
    while True:
        pass


def spin_where_error_reporting_cannot_load():
    """Spin for ever with interpexec's error packing unloadable in this worker
    (as when the process is out of descriptors, or a task broke imports)."""
    sys.modules["interpexec._errors"] = None
    while True:
        pass


def spin_where_ctypes_cannot_load(fd):
    """Say so on ``fd``, then spin for a second with ctypes unloadable (the
    watchdog interrupts tasks through it, so it cannot stop this one); ctypes
    is importable again afterwards."""
    sys.modules["ctypes"] = None
    try:
        os.write(fd, b"r")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            pass
    finally:
        del sys.modules["ctypes"]
    return "ran to its end"


def spin_with_cleanup(fd):
    try:
        while True:
            pass
    finally:
        os.write(fd, b"cleaned")


def _spin():
    while True:
        pass


def _busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# The two tasks below signal inside their try, and run their loop in a function
# they call: a stop request lands at any bytecode boundary, and it must reach the
# try.  (Written inline, a loop's back edge can lie outside the try's exception
# table range, where an exception skips the handler: CPython issue gh-130279,
# seen on 3.13 for `while <condition>:` and on 3.14 for `while True: if ...: break`.
# An exception from a called function enters the caller at the call, inside it.)


def spin_until_stopped(started_fd, stopped_fd):
    """Write b"r" to ``started_fd`` once running (so the test knows the task really
    runs, not just sits in a queue), spin until stopped, and write b"s" to
    ``stopped_fd`` on the way out (proof that it was stopped while running)."""
    try:
        os.write(started_fd, b"r")
        _spin()
    finally:
        os.write(stopped_fd, b"s")


def busy_signalled(started_fd, stopped_fd, seconds, value):
    """Write b"r" to ``started_fd``, busy-loop ``seconds``, return ``value``; if it is
    stopped on the way, write b"s" to ``stopped_fd``."""
    try:
        os.write(started_fd, b"r")
        _busy(seconds)
    except BaseException:
        os.write(stopped_fd, b"s")
        raise
    return value


def block_in_c(seconds):
    time.sleep(seconds)
    return "woke"


def interp_id(_ignored=None):
    import _interpreters

    return _interpreters.get_current()[0]


def busy_then_value(seconds, value):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return value


def sys_path_and_cwd():
    return list(sys.path), os.getcwd()


def block_on_queue(q):
    return q.get()  # no timeout: only an interrupt can end it


def say_then_block_on_queue(said, q):
    said.put("started")
    return q.get()


def import_module(name):
    import importlib

    importlib.import_module(name)
    return name


def sleep_in_c(seconds):
    """Blocks in C (time.sleep): a deadline retires its worker at once."""
    time.sleep(seconds)
    return seconds


def block_reading(started_fd, rfd):
    """Writes its thread's native id to ``started_fd``, then blocks in C reading
    ``rfd`` (see ``test_faults._blocked_reading``)."""
    import _thread

    os.write(started_fd, b"%d\n" % _thread.get_native_id())
    return os.read(rfd, 1)


def init_fails_once_marked(path):
    """An initializer that fails once the file ``path`` exists."""
    if os.path.exists(path):
        raise RuntimeError("the initializer fails now")


_tag = "uninitialized"


def set_tag(tag):
    """An initializer: marks the worker's interpreter."""
    global _tag
    _tag = tag


def get_tag(_ignored=None):
    return _tag
