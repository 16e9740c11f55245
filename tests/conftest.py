from __future__ import annotations

import faulthandler
import tempfile

import pytest

import interpexec

try:
    import pytest_timeout
except ImportError:  # pragma: no cover - pytest-timeout is a test requirement
    pytest_timeout = None


def _dump_stacks_safely(terminal) -> None:
    """Stand-in for ``pytest_timeout.dump_stacks``.

    pytest-timeout dumps every thread's stack through ``sys._current_frames()``.
    On some CPython builds (3.13.0, the host's pyenv Python) that also returns the
    frames of threads running inside the pool's subinterpreters, and merely
    materializing them from the main interpreter corrupts the heap ("free():
    invalid pointer", then SIGABRT/SIGSEGV): one timed-out test would kill the
    whole session.  faulthandler walks only this interpreter's threads and
    creates no objects.
    """
    with tempfile.TemporaryFile("w+") as out:
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.seek(0)
        terminal.write(out.read())


if pytest_timeout is not None:
    pytest_timeout.dump_stacks = _dump_stacks_safely


@pytest.fixture(scope="module")
def pool():
    """A warm two-worker pool shared by the tests of a module."""
    executor = interpexec.InterpreterPoolExecutor(max_workers=2)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def make_pool():
    """Build fresh pools; each is shut down (waiting) at the end of the test."""
    pools = []

    def factory(*args, **kwargs):
        executor = interpexec.InterpreterPoolExecutor(*args, **kwargs)
        pools.append(executor)
        return executor

    yield factory
    for executor in pools:
        executor.shutdown(wait=True, cancel_futures=True)
