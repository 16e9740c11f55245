"""The functions the comparison benchmark's workers run (see interpexec._bench).

They live in an importable module (not in ``__main__``) so that every executor can
pickle them by reference.  The module imports only built-in modules, so importing
it adds almost nothing to a worker's memory: the per-worker figures measure the
executors, not this file.
"""

from __future__ import annotations

import _thread
import os
import time


def noop() -> None:
    """A task that does nothing (round trip and throughput)."""


def inc(x: int) -> int:
    """The trivial per-item function of the ``map`` benchmark."""
    return x + 1


def identity[T](x: T) -> T:
    """Echo a payload back (the 16 MiB echo)."""
    return x


def cpu_work(n: int) -> int:
    """A pure-Python CPU-bound loop; runs under the GIL of whoever calls it."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def whoami() -> tuple[int, int]:
    """Identify the worker: (process id, OS thread id)."""
    return os.getpid(), _thread.get_ident()


def busy_whoami(seconds: float) -> tuple[int, int]:
    """Keep a worker busy for ``seconds`` (so the pool has to start every worker),
    then identify it."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return whoami()
