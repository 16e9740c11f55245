"""Task functions for tests/test_dask.py.

Dask workers receive these by reference and hand them on to their interpreter
pools, so they live at module level in an importable module.  This module is
imported inside worker subinterpreters: it must not import dask or distributed.
"""

from __future__ import annotations

import _interpreters
import sys
import time


def interp_id(_: object = None) -> int:
    """The id of the interpreter running the task (0 is the main interpreter)."""
    return _interpreters.get_current()[0]


def identity(x: object) -> object:
    return x


def inc(x: int) -> int:
    return x + 1


def add(x: int, y: int = 0) -> int:
    return x + y


def total(values: list[int]) -> int:
    return sum(values)


def is_odd(n: int) -> bool:
    return n % 2 == 1


def make_bytes(n: int) -> bytes:
    return b"x" * n


def collatz_steps(n: int) -> int:
    """A small CPU-bound pure-Python task."""
    steps = 0
    while n != 1:
        n = 3 * n + 1 if n % 2 else n // 2
        steps += 1
    return steps


def busy(n: int) -> int:
    """Pure-Python CPU work proportional to ``n``."""
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def dask_modules(_: object = None) -> list[str]:
    """dask/distributed modules loaded in the interpreter running the task."""
    return sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed"))


class TaskFailed(ValueError):
    pass


def fail(x: int) -> int:
    return _fail_inner(x)


def _fail_inner(x: int) -> int:
    raise TaskFailed(f"bad input {x}")


def import_single_phase(_: object = None) -> str:
    """Needs an extension module that refuses isolated subinterpreters."""
    import _testsinglephase  # noqa: F401

    return "imported"


def announce_then_spin(fifo_path: str, seconds: float) -> str:
    """Tell the test (through a FIFO it is reading) that the task is running, then
    spin in pure Python for ``seconds``."""
    with open(fifo_path, "wb") as fifo:
        fifo.write(b"x")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass
    return "finished"
