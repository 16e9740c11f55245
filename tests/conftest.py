from __future__ import annotations

import faulthandler
import sys

import pytest

import interpexec


def _safe_dump_stacks(terminal: object) -> None:
    """pytest-timeout's stack dump uses sys._current_frames(), which creates frame
    objects for threads running inside subinterpreters with the wrong
    interpreter's allocator; CPython then crashes when those threads pop the
    frames.  faulthandler's C-level dump reads the same stacks safely."""
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


try:
    import pytest_timeout

    pytest_timeout.dump_stacks = _safe_dump_stacks
except ImportError:  # pragma: no cover
    pass


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
