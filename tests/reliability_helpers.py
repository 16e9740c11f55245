"""Task functions for the reliability and stress tests (workers import them).

Keep this module light, and do NOT import ``logging`` at module level:
``first_task_logs`` checks that a worker forwards the records of a task that
imports ``logging`` itself, which an import here would hide.
"""

from __future__ import annotations

import os
import threading
import time


def ident(x):
    return x


def sleep_then(seconds, value):
    """Block in a C call (time.sleep releases the GIL) and return ``value``."""
    time.sleep(seconds)
    return value


def busy(seconds, value):
    """Pure-Python busy loop for ``seconds``, then ``value``."""
    _busy(seconds)
    return value


def _busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _spin():
    while True:
        pass


def spin_forever():
    """Pure Python, never returns unless stopped (the loop is in a called
    function: see fault_helpers about CPython gh-130279)."""
    _spin()


def signal_then_sleep(fd, seconds, value):
    """Write b"r" to ``fd`` once running, then block ``seconds`` in C."""
    os.write(fd, b"r")
    time.sleep(seconds)
    return value


def signal_then_busy(fd, seconds, value):
    """Write b"r" to ``fd`` once running, then busy-loop ``seconds`` in Python."""
    os.write(fd, b"r")
    _busy(seconds)
    return value


def signal_then_spin(fd):
    """Write b"r" to ``fd`` once running, then spin until stopped."""
    os.write(fd, b"r")
    _spin()


def mark_then_return(fd, value):
    """Write one byte to ``fd``, then return ``value``."""
    os.write(fd, b"m")
    return value


def raise_value_error(x):
    raise ValueError(x)


def stop_iteration_on_2(x):
    if x == 2:
        raise StopIteration("two")
    return x


def to_bytes(buf):
    return bytes(buf)


def gated_bytes(arrived_wfd, go_rfd, buf):
    """Gated (see helpers.gated), then the argument's bytes as the task sees them."""
    os.write(arrived_wfd, b"a")
    os.read(go_rfd, 1)
    return bytes(buf)


# --------------------------------------------------------------------- logging


def log_and_return(logger_name, value):
    """Log one WARNING (importing logging here, inside the task), return ``value``."""
    import logging

    logging.getLogger(logger_name).warning("reliability record %s", value)
    return value


def first_task_logs(logger_name, message):
    """The first thing a fresh worker runs: imports logging and logs ``message``."""
    import logging

    logging.getLogger(logger_name).warning(message)
    return message


# ----------------------------------------------------------------- initializers


def init_signal_then_sleep(fd, seconds):
    os.write(fd, b"i")
    time.sleep(seconds)


def init_signal_then_spin(fd):
    os.write(fd, b"i")
    _spin()


def init_spin_forever():
    _spin()


# ------------------------------------------------------------------- exceptions


class StrRaises(Exception):
    """An exception whose ``__str__`` raises ``what`` (SystemExit or KeyboardInterrupt)."""

    def __init__(self, what):
        super().__init__(what)
        self.what = what

    def __str__(self):
        if self.what == "SystemExit":
            raise SystemExit(3)
        raise KeyboardInterrupt("from __str__")

    __repr__ = __str__


def raise_str_raises(what):
    raise StrRaises(what)


class ReduceRaisesMemoryError(Exception):
    """An exception that cannot be pickled: ``__reduce__`` runs out of memory."""

    def __reduce__(self):
        raise MemoryError("pretend pickling ran out of memory")


def raise_reduce_memory_error():
    raise ReduceRaisesMemoryError("boom")


# ------------------------------------------------------------ leftover threads


def leave_thread(kind, seconds):
    """Start a thread that outlives the task (it sleeps ``seconds``) and return."""
    if kind == "threading":
        threading.Thread(target=time.sleep, args=(seconds,), name="leftover-sleeper").start()
    else:
        import _thread

        _thread.start_new_thread(time.sleep, (seconds,))
    return kind


def leave_thread_reading(rfd):
    """Start a thread that outlives the task: it reads a byte from ``rfd`` (it
    ends when the test writes one, or closes the write end)."""
    threading.Thread(target=os.read, args=(rfd, 1), name="leftover-reader").start()
    return rfd


def break_threading_exit_reporting(how):
    """Register a threading atexit callback that raises, with reporting broken
    too: ``sys.excepthook`` raises, or ``sys.stderr`` is closed."""
    import io
    import sys

    def fail():
        raise ValueError("atexit callback")

    threading._register_atexit(fail)
    if how == "hook":

        def hook(*args):
            raise RuntimeError("excepthook")

        sys.excepthook = hook
    else:
        closed = io.StringIO()
        closed.close()
        sys.stderr = closed
    return how


def register_a_threading_atexit_reading(rfd):
    """Register a threading atexit callback that blocks until it reads a byte
    from ``rfd`` (a library's last flush that waits)."""
    threading._register_atexit(os.read, rfd, 1)
    return rfd


def threading_still_importing():
    """Make the worker's ``threading`` look as it does while a thread a task left
    is still importing it (its spec marked initializing, nothing defined yet)."""
    import importlib.machinery
    import sys
    import types

    module = types.ModuleType("threading")
    module.__spec__ = importlib.machinery.ModuleSpec("threading", None)
    module.__spec__._initializing = True
    sys.modules["threading"] = module
    return True


_module_pool = None


def use_a_module_thread_pool(n):
    """As libraries do: a module-level ThreadPoolExecutor made on first use and
    never shut down, whose idle threads end only when the interpreter exits."""
    global _module_pool
    if _module_pool is None:
        import concurrent.futures  # (not at module level: it imports logging)

        _module_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="module-pool")
    return sum(_module_pool.map(abs, range(-n, n)))


def flush_when_the_main_thread_ends():
    """Start a thread that waits for ``threading.main_thread()`` to end (a
    library's last flush), and return."""
    main = threading.main_thread()
    threading.Thread(target=main.join, name="main-watcher").start()
    return True


def swallow_interrupts_then_spin(times):
    """Catches the first ``times`` exceptions raised into it (as code whose
    ``except BaseException`` or weakref callback eats the pool's interrupt does),
    spinning all along."""
    for _ in range(times):
        try:
            _spin()
        except BaseException:
            pass
    _spin()


class _SlowDel:
    def __del__(self):
        _busy(0.02)


def spin_mostly_in_del():
    """Spends ~95% of its time in ``__del__``, where Python drops an exception
    raised asynchronously ("Exception ignored in ...")."""
    while True:
        _SlowDel()
        _busy(0.001)
