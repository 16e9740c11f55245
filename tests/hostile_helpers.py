"""Functions the hostile tests run inside worker interpreters (by reference)."""

from __future__ import annotations

import os
import sys
import threading
import time


def identity(x):
    return x


def add(a, b):
    return a + b


def kw_echo(*args, **kwargs):
    return args, sorted(kwargs.items())


def sleep_then(seconds, value=None):
    time.sleep(seconds)
    return value


def spin_forever():
    while True:
        pass


def spin_for(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def block_on_fd(rfd):
    """Block (in C, releasing the GIL) until a byte arrives on rfd."""
    return os.read(rfd, 1)


def arrive_and_block(wfd, rfd):
    os.write(wfd, b"x")
    return os.read(rfd, 1)


def interp_id(_=None):
    import _interpreters

    return _interpreters.get_current()[0]


class Unpicklable(Exception):
    def __init__(self, msg):
        super().__init__(msg)
        self.lock = threading.Lock()


def raise_unpicklable(msg):
    raise Unpicklable(msg)


class BadInitError(Exception):
    """Pickles fine; unpickling fails (two required args, one given via args)."""

    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


def raise_bad_init():
    raise BadInitError("a", "b")


class ExplodingReduce(Exception):
    def __reduce__(self):
        raise RuntimeError("reduce exploded")


def raise_exploding_reduce():
    raise ExplodingReduce("x")


def return_lock():
    return threading.Lock()


def return_generator():
    return (i for i in range(3))


def raise_system_exit(code):
    sys.exit(code)


def raise_keyboard_interrupt():
    raise KeyboardInterrupt


def raise_stop_iteration():
    raise StopIteration


def return_exception_instance():
    return ValueError("returned, not raised")


def big_bytes(n):
    return b"\x01" * n


def big_str(n):
    return "é" * n


def mutate_list(xs):
    xs.append(99)
    return xs


def return_args(*args, **kwargs):
    return args, kwargs


def leave_thread(rfd):
    """Start a non-daemon thread that blocks until a byte arrives on rfd."""
    t = threading.Thread(target=os.read, args=(rfd, 1), name="left-behind")
    t.start()
    return "started"


def fail_init():
    raise ValueError("init failed on purpose")


_INIT = None


def set_init(v):
    global _INIT
    _INIT = v


def get_init(_=None):
    return _INIT


def recursion_bomb(n=0):
    return recursion_bomb(n + 1)


class DeepState:
    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, DeepState) and other.n == self.n


def make_deep(n):
    return DeepState(n)


class SetstateFails:
    def __init__(self):
        self.x = 1

    def __setstate__(self, state):
        raise RuntimeError("setstate failed in the parent")


def make_setstate_fails():
    return SetstateFails()


def nested_exception():
    try:
        raise KeyError("inner")
    except KeyError as e:
        raise ValueError("outer") from e


def exception_group():
    raise ExceptionGroup("grp", [ValueError(1), TypeError(2)])


def getpid(_=None):
    return os.getpid()


def write_byte(wfd, b=b"r"):
    os.write(wfd, b)
    return b


def fork_in_task():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def record(path, value):
    """Append ``value`` to the file ``path`` (one line per run) and return it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"%d\n" % value)
    finally:
        os.close(fd)
    return value


def offset_after_call(func, name):
    """The offset of the instruction right after ``func``'s first call of
    ``name`` (a signal point: where a handler runs once that call returns)."""
    import dis

    ins = list(dis.get_instructions(func))
    seen = False
    for i, x in enumerate(ins):
        if x.opname in ("LOAD_GLOBAL", "LOAD_ATTR") and x.argval == name:
            seen = True
        elif seen and x.opname.startswith("CALL") and not x.opname.startswith("CALL_INTRINSIC"):
            return ins[i + 1].offset
    raise LookupError(f"{func.__qualname__} does not call {name}")


def signal_points(code):
    """The offsets in ``code`` where CPython runs signal handlers: after a call
    returns, at a function's start and at a loop's backward jump (the eval
    breaker's checks)."""
    import dis

    points, after_call = set(), False
    for ins in dis.get_instructions(code):
        if after_call or ins.opname in ("RESUME", "JUMP_BACKWARD"):
            points.add(ins.offset)
        after_call = ins.opname.startswith("CALL") and not ins.opname.startswith("CALL_INTRINSIC")
    return points


def park_resolver_and_fill_window(ex):
    """Park ``ex``'s resolver in a done-callback (so that the calling thread
    takes every result, and its collect dispatches what is queued once the
    window has room) and fill the window with short calls; returns the Event
    that lets the resolver go, and those calls' futures."""
    parked, release = threading.Event(), threading.Event()
    ex.submit(identity, None).add_done_callback(lambda f: (parked.set(), release.wait()))
    assert parked.wait(20)
    pool = ex._pool
    return release, [ex.submit(sleep_then, 0.05, i) for i in range(pool.window - len(pool.inflight))]


def on_each_instruction(code, callback):
    """Call ``callback(code, offset)`` at each instruction of ``code`` (the
    profiler's sys.monitoring tool id)."""
    tool = sys.monitoring.PROFILER_ID
    sys.monitoring.use_tool_id(tool, "test")
    sys.monitoring.register_callback(tool, sys.monitoring.events.INSTRUCTION, callback)
    sys.monitoring.set_local_events(tool, code, sys.monitoring.events.INSTRUCTION)


def raise_after_fd(rfd, message="after the byte"):
    """Block (in C) until a byte arrives on rfd, then raise ValueError(message)."""
    os.read(rfd, 1)
    raise ValueError(message)
