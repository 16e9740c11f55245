"""Functions and classes that the tests run inside worker interpreters.

Workers import task functions by reference, so everything a test submits lives at
module level here (``tests.helpers`` is importable from every worker because the
pool hands its ``sys.path`` to the workers).  Keep this module light: each worker
interpreter imports it.
"""

from __future__ import annotations

import _interpreters
import dataclasses
import enum
import os
import threading
import time

# ----------------------------------------------------------------- plain values


def identity(x):
    return x


def square(x):
    return x * x


def add(a, b):
    return a + b


def mul3(a, b, c):
    return a * b * c


def echo(*args, **kwargs):
    """Return exactly what arrived (kwargs in arrival order)."""
    return args, kwargs


def append_and_return(buf, extra):
    """Mutate the argument inside the worker and return it."""
    buf.extend(extra)
    return buf


def typed(obj):
    """A structure that compares equal only when ``obj`` has the same types and
    values all the way down (``1 == True == 1.0`` would hide a type change)."""
    tp = type(obj)
    if tp in (list, tuple):
        return (tp, [typed(x) for x in obj])
    if tp is dict:
        return (tp, [(typed(k), typed(v)) for k, v in obj.items()])
    if tp in (set, frozenset):
        return (tp, sorted(repr(typed(x)) for x in obj))
    if tp in (float, complex):
        return (tp, repr(obj))  # tells -0.0 from 0.0, keeps nan comparable
    return (tp, obj)


def typed_remote(obj):
    """``typed`` computed inside the worker, on the argument as it arrived."""
    return typed(obj)


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


class Bag:
    """A plain class with instance state and no pickling hooks."""

    def __init__(self, **items):
        self.__dict__.update(items)

    def __eq__(self, other):
        return type(other) is Bag and vars(self) == vars(other)

    def __repr__(self):
        return f"Bag({vars(self)!r})"


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


def make_point(x, y):
    return Point(x, y)


def make_lock():
    return threading.Lock()


# ------------------------------------------------------------------- exceptions


class CustomError(Exception):
    def __init__(self, message, code=0):
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self):
        return f"{self.message} (code {self.code})"


class TwoArgError(Exception):
    """Pickles, but cannot be unpickled: ``args`` holds only ``a``, so unpickling
    calls ``TwoArgError(a)`` and fails for the missing ``b``."""

    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


def raise_exc(exc_type, *args):
    raise exc_type(*args)


def _inner_fails(message):
    raise ValueError(message)


def outer_fails(message):
    return _inner_fails(message)


def raise_while_handling(message):
    """Raise ValueError(message) while handling a KeyError (an implicit context)."""
    try:
        {}["missing key"]
    except KeyError:
        raise ValueError(message)  # (the context is the point)


def raise_two_arg_error(a, b):
    raise TwoArgError(a, b)


def raise_unpicklable_error(message):
    # The exception itself holds a lock, so it cannot even be pickled.
    raise ValueError(message, threading.Lock())


def fail_if_negative(x):
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x * 10


# ------------------------------------------------------- interpreters, threads


def loaded_modules(names):
    """Which of ``names`` this worker has imported."""
    import sys

    return {name: name in sys.modules for name in names}


def loaded_flags(names):
    """Which of ``names`` this worker has imported, as a tuple of bools (a value
    that crosses natively: returning it pickles nothing)."""
    import sys

    return tuple(name in sys.modules for name in names)


def current_interp_id():
    return int(_interpreters.get_current()[0])


def buffer_and_interp_id(n):
    """A result with an out-of-band buffer (a view of this worker's memory on
    the way), and the id of the interpreter that made it."""
    return bytearray(n), current_interp_id()


def interp_id_after_work(n):
    """Some CPU work, then the id of the interpreter that did it."""
    spin(n)
    return current_interp_id()


def spin(n):
    """Pure-Python CPU work, deterministic result."""
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def timed_spin(n):
    """Run ``spin(n)``; return (start, end, interpreter id, checksum) with
    process-wide monotonic ``perf_counter`` stamps."""
    start = time.perf_counter()
    acc = spin(n)
    end = time.perf_counter()
    return start, end, current_interp_id(), acc


# -------------------------------------------------------------- pipe gates
#
# A gate is a pair of pipes created in the main interpreter; file descriptors are
# process-wide, so tasks in any interpreter can use them.  A gated task writes one
# byte to ``arrived`` when it starts and then blocks until the test writes a byte
# to ``go``.


def gated(arrived_wfd, go_rfd, value=None):
    os.write(arrived_wfd, b"a")
    os.read(go_rfd, 1)
    return value


def gated_report(arrived_wfd, go_rfd):
    """Gated; returns (interpreter id, INIT_VALUE) of the worker that ran it."""
    os.write(arrived_wfd, b"a")
    os.read(go_rfd, 1)
    return current_interp_id(), INIT_VALUE


def record(fd, i):
    """Write byte ``i`` to ``fd`` (so the test can tell which tasks ran)."""
    os.write(fd, bytes([i]))
    return i


# ----------------------------------------------------------------- initializer

INIT_VALUE = None


def init_worker(value, fd):
    global INIT_VALUE
    INIT_VALUE = value
    os.write(fd, b"i")


def get_init_value(_ignored=None):
    return INIT_VALUE


def init_fail(message):
    raise ValueError(message)


# ------------------------------------------------- main-side test utilities


class Gate:
    """Two pipes that let a test hold gated tasks (``gated``/``gated_report``)
    inside the workers and release them, with no sleeping.

    Use as a context manager: on exit the ``go`` pipe is closed (any task still
    blocked reads EOF and returns), the tracked futures are awaited, then the
    remaining descriptors are closed.
    """

    def __init__(self):
        self.arrived_r, self.arrived_w = os.pipe()
        self.go_r, self.go_w = os.pipe()
        self.futures = []

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    @property
    def args(self):
        return (self.arrived_w, self.go_r)

    def submit(self, executor, value=None):
        fut = executor.submit(gated, self.arrived_w, self.go_r, value)
        self.futures.append(fut)
        return fut

    def submit_report(self, executor):
        fut = executor.submit(gated_report, self.arrived_w, self.go_r)
        self.futures.append(fut)
        return fut

    def wait_arrived(self, n, timeout=30.0):
        """Block until ``n`` gated tasks have started (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        got = 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not readable(self.arrived_r, left):
                raise AssertionError(f"only {got} of {n} gated tasks started within {timeout} s")
            got += len(os.read(self.arrived_r, n - got))

    def release(self, n=1):
        os.write(self.go_w, b"g" * n)

    def close(self):
        if self.go_w < 0:
            return
        os.close(self.go_w)
        self.go_w = -1
        from concurrent.futures import wait

        wait(self.futures, timeout=30)
        for fd in (self.arrived_r, self.arrived_w, self.go_r):
            os.close(fd)


def readable(fd, timeout):
    """Whether ``fd`` becomes readable within ``timeout`` seconds (``poll``, not
    ``select``: the suite also runs with descriptors numbered past 1024)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, -int(-timeout * 1000 // 1))))


def wait_bytes(fd, n, timeout=30.0):
    """Read exactly ``n`` bytes from the pipe ``fd`` (written by tasks), failing after
    ``timeout`` seconds: ``poll`` on the pipe, never sleeping."""
    deadline = time.monotonic() + timeout
    got = b""
    while len(got) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not readable(fd, left):
            raise AssertionError(f"only {len(got)} of {n} bytes arrived within {timeout} s: {got!r}")
        chunk = os.read(fd, n - len(got))
        if not chunk:
            raise AssertionError(f"pipe closed after {len(got)} of {n} bytes: {got!r}")
        got += chunk
    return got


def read_all(fd):
    """Read what a pipe holds now, without blocking."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)
