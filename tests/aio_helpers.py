"""Task functions for tests/test_aio.py (run inside worker interpreters).

Workers import task functions by reference, so they live at module level in an
importable module.  Keep this module light: stdlib only, each worker imports it.
"""

from __future__ import annotations

import _interpreters
import os
import time


def add(a, b):
    return a + b


def noop():
    return None


def describe(a, b=0, *, scale=1, label="x"):
    """Needs keyword arguments: run it through functools.partial."""
    return f"{label}:{(a + b) * scale}"


def interp_id():
    return int(_interpreters.get_current()[0])


class AioTaskError(Exception):
    def __init__(self, message, code):
        super().__init__(message, code)
        self.message = message
        self.code = code


def fail(message, code):
    raise AioTaskError(message, code)


def spin(n):
    """Pure-Python CPU work, deterministic result."""
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def record(fd, i):
    """Write byte ``i`` to ``fd``: lets a test tell which tasks ran."""
    os.write(fd, bytes([i]))
    return i


def spin_until_stopped(arrived_wfd, stopped_wfd, limit=60.0):
    """Announce the start on ``arrived_wfd``, then run pure-Python code until the
    task is stopped from outside (or ``limit`` seconds pass, a safety net that a
    test treats as a failure).  The ``finally`` block writes ``s`` to
    ``stopped_wfd`` when an exception (the pool's interrupt) ended the loop, ``r``
    when the loop ran out normally.  The announcement is made inside the ``try``:
    an interrupt sent as soon as it is seen may land on the very next line."""
    outcome = b"s"
    try:
        os.write(arrived_wfd, b"a")
        _spin_for(limit)
        outcome = b"r"
        return "ran to the limit"
    finally:
        os.write(stopped_wfd, outcome)


def _spin_for(limit):
    """The loop of spin_until_stopped, in a function of its own: on 3.13 and 3.14 an
    interrupt landing on a loop's back edge inside a ``try`` can skip that ``try``'s
    ``finally`` (CPython gh-130279, see docs/timeouts.md); from a called function
    the exception unwinds through the caller's handler as it should."""
    deadline = time.monotonic() + limit
    acc = 0
    while time.monotonic() < deadline:
        for i in range(10_000):
            acc = (acc * 31 + i) % 1_000_003


def gated(arrived_wfd, go_rfd, value=None):
    """Announce the start, then block until a byte arrives on ``go_rfd``."""
    os.write(arrived_wfd, b"a")
    os.read(go_rfd, 1)
    return value


def timed_spin(n):
    """Run ``spin(n)``; return (start, end) ``perf_counter`` stamps (process-wide)."""
    start = time.perf_counter()
    spin(n)
    return start, time.perf_counter()
