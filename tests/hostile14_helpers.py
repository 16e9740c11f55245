"""Functions tests/test_hostile14.py runs inside worker interpreters (by reference).

Standard library only: every worker imports this module.
"""

from __future__ import annotations

import sys
import time


def identity(x):
    return x


def sleep_then(seconds, value=None):
    time.sleep(seconds)
    return value


def spin_for(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def short_spin(value, microseconds):
    """Return ``value`` after spinning (in Python) for ``microseconds``."""
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass
    return value


def announce_then_spin(q, seconds):
    """Say it runs (on ``q``), then spin in Python."""
    q.put("running")
    return spin_for(seconds)


def announce_then_sleep(q, seconds):
    """Say it runs (on ``q``), then block in C."""
    q.put("running")
    time.sleep(seconds)
    return "slept"


def announce_sleep_spin(q, sleep, spin):
    """Block in C for ``sleep`` seconds, say so, then spin in Python."""
    time.sleep(sleep)
    q.put("slept")
    return spin_for(spin)


def wait_on(q):
    """Block in Queue.get until the test releases it; returns the item."""
    return q.get(timeout=60)


def _busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def loop_then_clean_up(q, cleanup_seconds):
    """Spin until stopped; the ``finally`` does ``cleanup_seconds`` of Python work
    (say, flushing a file), then reports that the cleanup completed."""
    try:
        q.put("running")
        while True:
            _busy(0.01)
    finally:
        _busy(cleanup_seconds)
        q.put("cleaned up")


def swallow_interrupts(q, times):
    """Catch the stop ``times`` times (as a retry loop catching BaseException
    would), then return how many it caught."""
    caught = 0
    q.put("running")
    while caught < times:
        try:
            while True:
                _busy(0.01)
        except BaseException:
            caught += 1
    return caught


def produce(q, start, n):
    for i in range(start, start + n):
        q.put(i)
    return n


def consume(q, n):
    return [q.get(timeout=30) for _ in range(n)]


def block_in_get(q, ready):
    try:
        # (Inside the try: the stop may land while this put returns.)
        ready.put("in")
        return q.get()
    finally:
        ready.put("left")


def temp_queue(value):
    """A task that uses a Queue of its own (say, for its threads) and drops it."""
    import interpexec

    q = interpexec.Queue(1)
    q.put(value)
    return q.get()


def warm_worker(_=None):
    """Load what a worker loads lazily: on 3.13 the first get on an empty queue
    makes CPython import its queue wrapper module."""
    from interpexec import _compat

    qid = _compat.queue_create()
    try:
        _compat.queue_get(qid)
    finally:
        _compat.queue_destroy(qid)
    return True


# The module CPython's _interpqueues imports for its QueueEmpty on the first get
# from an empty queue (3.13: the test package's copy; 3.14+: concurrent.interpreters).
QUEUE_WRAPPERS = (
    "test.support.interpreters.queues",
    "test.support.interpreters",
    "concurrent.interpreters._queues",
    "concurrent.interpreters",
)


def hide_queue_wrapper(delay, attempts):
    """Initializer: make the queue wrapper module unimportable, as on a 3.13
    without its test package (or while out of descriptors).  Each import attempt
    is announced on the Queue ``attempts``, then takes ``delay`` seconds, as on a
    slow file system."""

    class Missing:
        def find_spec(self, name, path=None, target=None):
            if name in QUEUE_WRAPPERS:
                attempts.put(name)
                time.sleep(delay)
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    for name in QUEUE_WRAPPERS:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, Missing())


def heavy_modules(*_):
    """Which heavy modules the calling interpreter has imported."""
    return sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed", "anyio", "asyncio"))
