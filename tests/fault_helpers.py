"""Task functions for the fault and interruption tests (workers import them)."""

from __future__ import annotations

import os
import sys
import time


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


def spin_with_cleanup(fd):
    try:
        while True:
            pass
    finally:
        os.write(fd, b"cleaned")


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
