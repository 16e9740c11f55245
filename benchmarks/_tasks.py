"""Task functions of the benchmark scripts in this directory.

Workers import this module by name (the parent's sys.path includes this
directory), so it imports only ``time``: some stdlib modules (faulthandler on
3.13, for one) refuse to load in isolated subinterpreters.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def spin(times: Any, index: int) -> int:
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


def invert_range(view: Any, start: int, stop: int, chunk: int = 1 << 20) -> int:
    """Invert the bytes ``view[start:stop]`` in place, one chunk at a time (so the
    scratch memory is two chunks, whatever the size).  Returns the bytes done."""
    for lo in range(start, stop, chunk):
        hi = min(lo + chunk, stop)
        view[lo:hi] = view[lo:hi].tobytes().translate(_INVERT)
    return stop - start


def invert_bytes(data: bytes) -> bytes:
    """The copying way: bytes in, inverted bytes out."""
    return data.translate(_INVERT)
