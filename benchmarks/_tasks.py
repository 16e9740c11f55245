"""Task functions of the benchmark scripts in this directory.

Worker interpreters and processes import this module by name, by reference (never
from ``__main__``): the scripts run from this directory, which is first on
``sys.path`` in every interpreter of the process (and ``bench.py`` puts it on its
children's ``PYTHONPATH``).  It imports only built-in modules: some stdlib modules
(faulthandler on 3.13, for one) refuse to load in isolated subinterpreters, and
importing it must add almost nothing to a worker's memory, so that per-worker
figures measure the executors, not this file.  So its signatures are type
comments, as in the package's worker modules (see docs/architecture.md, "What a
worker loads"): annotations would import ``__future__`` on 3.13 and give every
function an ``__annotate__`` function on 3.14+.
"""

import _thread
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar  # noqa: F401 (names used only in type comments)

    T = TypeVar("T")


def noop():  # type: () -> None
    """A task that does nothing (round trip and throughput)."""


def inc(x):  # type: (int) -> int
    """The trivial per-item function of the ``map`` benchmark."""
    return x + 1


def identity(x):  # type: (T) -> T
    """Echo a payload back (the 16 MiB echo)."""
    return x


def cpu_work(n):  # type: (int) -> int
    """A pure-Python CPU-bound loop; runs under the GIL of whoever calls it."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def calibrate_cpu(seconds):  # type: (float) -> int
    """Loop length for which ``cpu_work`` takes about ``seconds`` here (called in
    the parent, before any measurement)."""
    n = 20_000
    while True:
        t0 = time.perf_counter()
        cpu_work(n)
        dt = time.perf_counter() - t0
        if dt >= 0.03:
            break
        n *= 2
    best = dt
    for _ in range(2):
        t0 = time.perf_counter()
        cpu_work(n)
        best = min(best, time.perf_counter() - t0)
    return max(1, round(n * seconds / best))


def whoami():  # type: () -> tuple[int, int]
    """Identify the worker: (process id, OS thread id)."""
    return os.getpid(), _thread.get_ident()


def busy_whoami(seconds):  # type: (float) -> tuple[int, int]
    """Keep a worker busy for ``seconds`` (so the pool has to start every worker),
    then identify it."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return whoami()


def spin(times, index):  # type: (Any, int) -> int
    """Loop in pure Python until stopped; write ``time.perf_counter()`` into
    ``times[2 * index]`` on entry and into ``times[2 * index + 1]`` on the way out."""
    n = 0
    try:
        times[2 * index] = time.perf_counter()
        while True:
            n += 1
    finally:
        times[2 * index + 1] = time.perf_counter()


_INVERT = bytes(range(255, -1, -1))


def invert_range(view, start, stop, chunk=1 << 20):  # type: (Any, int, int, int) -> int
    """Invert the bytes ``view[start:stop]`` in place, one chunk at a time (so the
    scratch memory is two chunks, whatever the size).  Returns the bytes done."""
    for lo in range(start, stop, chunk):
        hi = min(lo + chunk, stop)
        view[lo:hi] = view[lo:hi].tobytes().translate(_INVERT)
    return stop - start


def invert_bytes(data):  # type: (bytes) -> bytes
    """The copying way: bytes in, inverted bytes out."""
    return data.translate(_INVERT)
