"""CPython's own executor tests (``test.test_concurrent_futures``), run against
``interpexec.InterpreterPoolExecutor``: the contract as the standard library
checks it for its own pools, from the test package of the Python running this.

Every mixin that is not about one pool's internals is used: ExecutorTest,
WaitTests, AsCompletedTests, ExecutorShutdownTest, InitializerMixin and
FailingInitializerMixin; the tests of each version's suite (3.14 adds map's
``buffersize``, for one).  Where a test needs an event a worker can wait on,
it gets a ``multiprocessing`` Manager's ``Event`` (a proxy that workers get by
pickling), as the process pools' mixins do; the standard library's own
interpreter pool skips those tests.

Three of ExecutorShutdownTest's tests run a program that imports the executor
by name from ``concurrent.futures`` (so they would test the standard library's
pool, or fail to import, not this one); the same programs, importing it from
interpexec, are :func:`test_the_standard_exit_programs`.

The test package is the distribution's (pyenv's builds have it; the Debian
chroot installs ``libpython3.X-testsuite``, scripts/sid-chroot.sh): without it
this module fails to import, with the remedy, and the run fails.
"""

from __future__ import annotations

import inspect
import multiprocessing
import subprocess
import sys

import pytest

import interpexec

try:
    from test.test_concurrent_futures import (
        executor,
        test_as_completed,
        test_init,
        test_shutdown,
        test_wait,
        util,
    )
except ImportError as exc:  # pragma: no cover - the run fails: provision the test package
    raise ImportError(
        f"CPython's test package (test.test_concurrent_futures) is missing from {sys.executable}: install the "
        f"distribution's test suite (Debian: libpython{sys.version_info[0]}.{sys.version_info[1]}-testsuite; "
        "scripts/sid-chroot.sh ensure does it)"
    ) from exc

pytestmark = pytest.mark.timeout(120)


class InterpexecMixin(util.ExecutorMixin):
    executor_type = interpexec.InterpreterPoolExecutor

    def create_event(self):  # (3.14+'s WaitTests)
        if getattr(self, "manager", None) is None:  # (one per test)
            self.manager = multiprocessing.get_context("forkserver").Manager()
        return self.manager.Event()

    def tearDown(self):
        manager = getattr(self, "manager", None)
        try:
            super().tearDown()  # (on 3.14+ this shuts a manager down too: shutdown runs once)
        finally:
            if manager is not None:
                manager.shutdown()


#: The tests that run a program importing the executor from concurrent.futures by name.
_BY_NAME = ("test_interpreter_shutdown", "test_submit_after_interpreter_shutdown", "test_hang_gh83386")


class TestExecutor(executor.ExecutorTest, InterpexecMixin, util.BaseTestCase):
    pass


class TestWait(test_wait.WaitTests, InterpexecMixin, util.BaseTestCase):
    pass


class TestAsCompleted(test_as_completed.AsCompletedTests, InterpexecMixin, util.BaseTestCase):
    pass


class TestShutdown(test_shutdown.ExecutorShutdownTest, InterpexecMixin, util.BaseTestCase):
    # test_hang_gh94440 arms and clears signal.alarm(), which clears pytest-timeout's
    # own timer (the same ITIMER_REAL) for the rest of the test: a thread's timer instead.
    pytestmark = pytest.mark.timeout(120, method="thread")
    locals().update(dict.fromkeys(_BY_NAME))  # (run below, importing interpexec's pool)


class TestInitializer(test_init.InitializerMixin, InterpexecMixin, util.BaseTestCase):
    pass


class TestFailingInitializer(test_init.FailingInitializerMixin, InterpexecMixin, util.BaseTestCase):
    pass


def test_the_suite_is_the_running_pythons():
    """The classes above hold the tests of this Python's suite (none lost to a
    name clash or a renamed mixin), and none of those runs a program that
    imports the executor by name from concurrent.futures: on 3.14+ that name is
    the standard library's own pool, which such a test would check instead of
    this one (a new one must join _BY_NAME and _PROGRAMS)."""
    for cls, mixin in (
        (TestExecutor, executor.ExecutorTest),
        (TestWait, test_wait.WaitTests),
        (TestAsCompleted, test_as_completed.AsCompletedTests),
        (TestShutdown, test_shutdown.ExecutorShutdownTest),
        (TestInitializer, test_init.InitializerMixin),
        (TestFailingInitializer, test_init.FailingInitializerMixin),
    ):
        upstream = {name for name in vars(mixin) if name.startswith("test")}
        assert upstream, mixin
        ours = {name for name in upstream if callable(getattr(cls, name))}
        assert ours == upstream - set(_BY_NAME), (cls, upstream - ours)
        for name in ours:
            source = inspect.getsource(getattr(cls, name))
            assert "executor_type.__name__" not in source, (cls, name)
    assert set(_BY_NAME) <= {name for name in vars(test_shutdown.ExecutorShutdownTest)}


#: test_submit_after_interpreter_shutdown's program; ``first`` is what the
#: pool runs before the program ends.
_ATEXIT_SUBMIT = """if 1:
            import atexit
            @atexit.register
            def run_last():
                try:
                    t.submit(id, None)
                except RuntimeError:
                    print("runtime-error")
                    raise
            from interpexec import InterpreterPoolExecutor
            if __name__ == "__main__":
                t = InterpreterPoolExecutor(5)
                {first}
            """

# The programs of ExecutorShutdownTest's three tests, as they are upstream but for
# the import (and the context, which they pass only to process pools).
_PROGRAMS = {
    "test_interpreter_shutdown": (
        """if 1:
            from interpexec import InterpreterPoolExecutor
            from test.test_concurrent_futures.test_shutdown import sleep_and_print
            if __name__ == "__main__":
                t = InterpreterPoolExecutor(5)
                t.submit(sleep_and_print, 1.0, "apple")
            """,
        "apple",
        None,
    ),
    # (Upstream, a pool that ran nothing; the process pools' variant ran a call first.)
    "test_submit_after_interpreter_shutdown": (
        _ATEXIT_SUBMIT.format(first="pass"),
        "runtime-error",
        "RuntimeError: cannot schedule new futures",
    ),
    "test_submit_after_interpreter_shutdown[used]": (
        _ATEXIT_SUBMIT.format(first="t.submit(id, 42).result()"),
        "runtime-error",
        "RuntimeError: cannot schedule new futures",
    ),
    "test_hang_gh83386": (
        """if True:
            from interpexec import InterpreterPoolExecutor
            from test.test_concurrent_futures.test_shutdown import sleep_and_print
            if __name__ == "__main__":
                t = InterpreterPoolExecutor(max_workers=3)
                t.submit(sleep_and_print, 1.0, "apple")
                t.shutdown(wait=False)
            """,
        "apple",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_the_standard_exit_programs(name):
    source, out, err_has = _PROGRAMS[name]
    # -I as upstream's assert_python_ok runs them (interpexec is installed in this environment).
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-I", "-c", source],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == out
    if err_has is None:
        assert not proc.stderr  # (upstream: errors in atexit hooks show only there)
    else:
        assert err_has in proc.stderr
