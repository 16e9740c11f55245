"""Faults tried against the pool, one test each: every future resolves, errors are
clear, and the pool stays usable unless it says it is broken.

| fault                                        | expected                                         |
|----------------------------------------------|--------------------------------------------------|
| SystemExit / KeyboardInterrupt in a task     | same exception from result(); worker survives    |
| RecursionError, MemoryError                  | same exception; worker survives                  |
| exception whose __init__ cannot be replayed  | interpexec.RemoteError with name/message/tb      |
| chained exception (raise ... from ...)       | cause reachable below the RemoteTraceback        |
| ExceptionGroup                               | arrives with its sub-exceptions                  |
| incompatible extension module                | IncompatibleModuleError naming the module        |
| unpicklable argument / result                | only that future fails, with the pickling error  |
| lambda / local function without cloudpickle  | clear error naming the function and the remedy   |
| executor passed to a task                    | clear TypeError (submitting from tasks: no)      |
| pool created inside a worker                 | clear RuntimeError                               |
| failing initializer                          | BrokenInterpreterPool on pending and new work    |
| submit after shutdown / shutdown twice       | RuntimeError / no-op                             |
| 16 threads submitting during shutdown        | every future resolved or cancelled               |
| terminate_workers() with work queued         | queued work cancelled, running task stopped      |
| exit without shutdown, shutdown(wait=False)  | process exits cleanly                            |
| Ctrl-C during map() / result()               | process ends promptly, no hang, no crash         |
| os.fork() with a live pool                   | child runs Python and a new pool; parent goes on |
| __main__ functions, guarded block            | work; guarded block not re-run in workers        |
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import dis
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import interpexec
from interpexec import BrokenInterpreterPool, IncompatibleModuleError, InterpreterPoolExecutor, RemoteError

from . import fault_helpers as fh
from . import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(source: str, *args: str, timeout: float = 60, **kwargs):
    """Run a Python script (as a file, like a user would) with the checkout importable."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", source, *args] if kwargs.pop("as_c", False) else [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,
    )


@pytest.fixture(scope="module")
def pool():
    with InterpreterPoolExecutor(2) as ex:
        yield ex


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "fn, exc_type",
    [
        (fh.raise_system_exit, SystemExit),
        (fh.raise_keyboard_interrupt, KeyboardInterrupt),
        (fh.recurse, RecursionError),
        (fh.raise_memory_error, MemoryError),
    ],
)
def test_base_exceptions_come_back_and_worker_survives(pool, fn, exc_type):
    args = (3,) if fn is fh.raise_system_exit else ()
    with pytest.raises(exc_type) as info:
        pool.submit(fn, *args).result(timeout=20)
    assert isinstance(info.value.__cause__, interpexec.RemoteTraceback)
    assert fn.__name__ in str(info.value.__cause__)
    assert [pool.submit(fh.ok, i).result(timeout=10) for i in range(4)] == [0, 1, 2, 3]


@pytest.mark.timeout(30)
def test_exception_that_cannot_be_rebuilt_arrives_as_remote_error(pool):
    with pytest.raises(RemoteError) as info:
        pool.submit(fh.raise_odd_init).result(timeout=10)
    err = info.value
    assert err.type_name.endswith("OddInit")
    assert "code 7: odd" in err.message
    assert "raise_odd_init" in err.traceback_text


@pytest.mark.timeout(30)
def test_chained_exception_keeps_its_cause(pool):
    with pytest.raises(ValueError, match="lookup failed") as info:
        pool.submit(fh.raise_chained).result(timeout=10)
    remote = info.value.__cause__
    assert isinstance(remote, interpexec.RemoteTraceback)
    assert isinstance(remote.__cause__, KeyError)
    assert "The above exception was the direct cause" in str(remote)


@pytest.mark.timeout(30)
def test_exception_group_arrives_whole(pool):
    with pytest.raises(ExceptionGroup) as info:
        pool.submit(fh.raise_group).result(timeout=10)
    assert sorted(type(e).__name__ for e in info.value.exceptions) == ["TypeError", "ValueError"]


@pytest.mark.timeout(30)
def test_incompatible_extension_module_is_named(pool):
    with pytest.raises(IncompatibleModuleError) as info:
        pool.submit(fh.import_incompatible).result(timeout=20)
    err = info.value
    assert isinstance(err, ImportError)
    assert err.module == "_testsinglephase"
    text = str(err)
    assert "_testsinglephase" in text and "%d.%d" % sys.version_info[:2] in text
    assert "ProcessPoolExecutor" in text
    assert pool.submit(fh.ok, 1).result(timeout=10) == 1


@pytest.mark.timeout(30)
def test_unpicklable_argument_fails_only_its_future(pool):
    bad = pool.submit(fh.ok, threading.Lock())
    good = pool.submit(fh.ok, 5)
    with pytest.raises((TypeError, pickle.PicklingError)):
        bad.result(timeout=10)
    assert good.result(timeout=10) == 5


@pytest.mark.timeout(30)
def test_unpicklable_result_fails_only_its_future(pool):
    bad = pool.submit(fh.unpicklable_result)
    good = pool.submit(fh.ok, 6)
    with pytest.raises((TypeError, AttributeError, pickle.PicklingError)):
        bad.result(timeout=10)
    assert good.result(timeout=10) == 6


@pytest.mark.timeout(30)
def test_lambda_without_cloudpickle_fails_clearly(pool, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # make the import fail
    fut = pool.submit(lambda: 1)
    with pytest.raises(pickle.PicklingError) as info:
        fut.result(timeout=10)
    assert "<lambda>" in str(info.value) and "cloudpickle" in str(info.value)


@pytest.mark.timeout(30)
def test_closure_with_cloudpickle_runs(pool):
    pytest.importorskip("cloudpickle")
    base = 40

    def add(x):
        return x + base

    assert pool.submit(add, 2).result(timeout=10) == 42


@pytest.mark.timeout(30)
def test_executor_cannot_be_sent_to_a_task(pool):
    fut = pool.submit(fh.ok, pool)
    with pytest.raises(TypeError, match="submitting from inside a task"):
        fut.result(timeout=10)


@pytest.mark.timeout(30)
def test_failing_initializer_breaks_pool_clearly():
    ex = InterpreterPoolExecutor(2, initializer=fh.raise_memory_error)
    fut = ex.submit(fh.ok, 1)
    with pytest.raises(BrokenInterpreterPool) as info:
        fut.result(timeout=20)
    assert isinstance(info.value, cf.process.BrokenProcessPool)
    with pytest.raises(BrokenInterpreterPool):
        ex.submit(fh.ok, 2)
    ex.shutdown()


@pytest.mark.timeout(30)
def test_submit_after_shutdown_and_shutdown_twice():
    ex = InterpreterPoolExecutor(1)
    assert ex.submit(fh.ok, 1).result(timeout=10) == 1
    ex.shutdown()
    ex.shutdown()
    ex.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(fh.ok, 2)


@pytest.mark.timeout(60)
def test_sixteen_submitters_racing_a_shutdown():
    ex = InterpreterPoolExecutor(2)
    barrier = threading.Barrier(17)
    futures: list[cf.Future] = []
    lock = threading.Lock()

    def submitter():
        barrier.wait()
        for i in range(200):
            try:
                f = ex.submit(fh.ok, i)
            except RuntimeError:
                return
            with lock:
                futures.append(f)

    threads = [threading.Thread(target=submitter) for _ in range(16)]
    for t in threads:
        t.start()
    barrier.wait()
    ex.shutdown(wait=True, cancel_futures=True)
    for t in threads:
        t.join()
    _, not_done = cf.wait(futures, timeout=30)
    assert not not_done
    for f in futures:
        assert f.cancelled() or f.result() is not None


@pytest.mark.timeout(60)
def test_terminate_workers_cancels_queued_and_stops_running():
    started_r, started_w = os.pipe()
    stopped_r, stopped_w = os.pipe()
    # (a generous grace: a pure-Python loop returns at once when stopped; the
    # worker must not be retired and left running on a loaded machine)
    ex = InterpreterPoolExecutor(1, thread_name_prefix="ietest-terminate", interrupt_grace=30)
    try:
        running = ex.submit(fh.spin_until_stopped, started_w, stopped_w)
        queued = [ex.submit(fh.ok, i) for i in range(20)]
        # The task really runs in the worker (it is not merely queued), and the
        # pool is alive: nothing has finished.
        assert helpers.wait_bytes(started_r, 1) == b"r"
        assert not running.done()
        assert not any(f.done() for f in queued)
        ex.terminate_workers()
        assert running.cancelled()
        assert all(f.cancelled() for f in queued)
        # The running task was stopped inside the worker (its finally ran) and the
        # single worker, which could take nothing else, has ended.
        assert helpers.wait_bytes(stopped_r, 1) == b"s"
        assert not [t for t in threading.enumerate() if t.name.startswith("ietest-terminate") and t.is_alive()]
        with pytest.raises(RuntimeError):
            ex.submit(fh.ok, 1)
        ex.terminate_workers()  # a second call is harmless
    finally:
        ex.terminate_workers()  # (if an assertion failed: do not leave the task spinning)
        for fd in (started_r, started_w, stopped_r, stopped_w):
            os.close(fd)


@pytest.mark.timeout(30)
def test_pool_cannot_be_created_inside_a_worker(pool):
    fut = pool.submit(InterpreterPoolExecutor, 1)
    with pytest.raises(RuntimeError, match="inside an interpexec worker"):
        fut.result(timeout=10)


@pytest.mark.timeout(30)
def test_workers_see_parent_sys_path_and_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with InterpreterPoolExecutor(1) as ex:
        path, cwd = ex.submit(fh.sys_path_and_cwd).result(timeout=20)
    assert str(tmp_path) in path
    assert os.path.samefile(cwd, tmp_path)


MAIN_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from interpexec import InterpreterPoolExecutor
    print("module level ran", flush=True)

    def triple(x):
        return 3 * x

    class Box:
        def __init__(self, v):
            self.v = v

    def unbox(b):
        return b.v

    if __name__ == "__main__":
        print("guarded block ran", flush=True)
        with InterpreterPoolExecutor(2) as pool:
            print(list(pool.map(triple, range(5))), pool.submit(unbox, Box(9)).result(), flush=True)
    """
)


@pytest.mark.timeout(60)
def test_functions_in_main_script_work_and_guard_is_respected(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(MAIN_SCRIPT)
    proc = run_script("", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("guarded block ran") == 1
    assert "[0, 3, 6, 9, 12] 9" in proc.stdout


MAIN_CLASSES_COME_BACK = textwrap.dedent(
    """
    import sys
    from interpexec import InterpreterPoolExecutor

    class Point:
        def __init__(self, x):
            self.x = x

    class MyError(Exception):
        pass

    def make(x):
        return Point(x)

    def fail(x):
        raise MyError(f"bad {x}")

    if __name__ == "__main__":
        with InterpreterPoolExecutor(1) as pool:
            made, echoed = pool.submit(make, 1).result(timeout=20), pool.submit(make, 2).result(timeout=20)
            print(type(made) is Point, made.x, type(echoed) is Point, echoed.x, flush=True)
            print("multiprocessing imported:", "multiprocessing" in sys.modules, flush=True)
            # (A task's exception imports it, after its unpickling: its cause is
            # also ProcessPoolExecutor's remote traceback class.)
            try:
                pool.submit(fail, 3).result(timeout=20)
            except MyError as exc:
                print("caught", type(exc) is MyError, exc, flush=True)
    """
)


@pytest.mark.timeout(60)
def test_instances_of_a_scripts_classes_come_back_as_those_classes(tmp_path):
    """What a task defined in the caller's script returns, or raises, is an
    instance of the script's own class, as with ProcessPoolExecutor (the docs
    promise it): the worker's copy of the script runs as ``__mp_main__``, the
    name its classes pickle under, which the caller must resolve to its
    ``__main__`` even when nothing imported multiprocessing (which sets that
    alias)."""
    script = tmp_path / "prog.py"
    script.write_text(MAIN_CLASSES_COME_BACK)
    proc = run_script("", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "True 1 True 2" in proc.stdout
    assert "caught True bad 3" in proc.stdout
    assert "multiprocessing imported: False" in proc.stdout  # (else the alias came from it)


LAUNCHED_SCRIPT = textwrap.dedent(
    """
    from interpexec import InterpreterPoolExecutor

    class Point:
        origin = {name!r}

    def make():
        return Point()

    if __name__ == "__main__":
        with InterpreterPoolExecutor(1) as pool:
            got = pool.submit(make).result(timeout=20)
            print({name!r}, type(got) is Point, got.origin, flush=True)
    """
)


@pytest.mark.timeout(60)
def test_scripts_run_in_turn_as_main_each_get_their_own_classes_back(tmp_path):
    """A launcher (runpy, a test harness, an example runner) that runs scripts
    one after the other as ``__main__``: each one's results are instances of
    its own classes (the ``__mp_main__`` alias follows ``__main__``; review 2
    found the second script silently given the first one's class)."""
    for name in ("a", "b"):
        (tmp_path / f"script_{name}.py").write_text(LAUNCHED_SCRIPT.format(name=name))
    launcher = tmp_path / "launcher.py"
    launcher.write_text("import runpy, sys\nfor path in sys.argv[1:]:\n    runpy.run_path(path, run_name='__main__')\n")
    proc = run_script("", str(launcher), str(tmp_path / "script_a.py"), str(tmp_path / "script_b.py"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["a True a", "b True b"], proc.stdout


@pytest.mark.timeout(60)
def test_the_threads_left_warning_is_given_once_per_interpreter_even_if_it_raised():
    """With warnings as errors, the resolver handles the threads-left news
    again after the warning raised: the warning must not come twice (review 2);
    it is given even when the worker is gone already."""
    import warnings

    with InterpreterPoolExecutor(1) as ex:
        pool = ex._pool
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                pool.retire(pool.layout.slots + 5, "threads left in a gone worker", interp=987654)
        assert [str(w.message) for w in caught] == ["threads left in a gone worker"]
        assert ex.submit(fh.ok, 1).result(timeout=20) == 1


MAIN_NAMED_LIKE_THE_BOOTSTRAP = textwrap.dedent(
    """
    from interpexec import InterpreterPoolExecutor

    def main(x):
        return ("user main", x)

    def sys(x):
        return ("user sys", x)

    if __name__ == "__main__":
        with InterpreterPoolExecutor(1) as pool:
            # First thing the worker runs: nothing of __main__ is loaded yet.
            print(pool.submit(main, 1).result(timeout=20), pool.submit(sys, 2).result(timeout=20), flush=True)
    """
)


@pytest.mark.timeout(60)
def test_a_main_function_named_like_the_workers_own_code_is_the_users(tmp_path):
    """A worker's ``__main__`` keeps no name of its start-up code: ``main`` of the
    caller's script is the caller's ``main`` (it used to find the worker's own
    entry point and call it with the argument as a queue id)."""
    script = tmp_path / "prog.py"
    script.write_text(MAIN_NAMED_LIKE_THE_BOOTSTRAP)
    proc = run_script("", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "('user main', 1) ('user sys', 2)" in proc.stdout


@pytest.mark.timeout(60)
def test_function_typed_at_python_c_fails_clearly_without_cloudpickle():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["cloudpickle"] = None
        from interpexec import InterpreterPoolExecutor
        def f(x):
            return x
        with InterpreterPoolExecutor(1) as pool:
            try:
                pool.submit(f, 1).result(timeout=20)
            except Exception as exc:
                print(type(exc).__name__, exc)
        """
    )
    proc = run_script(code, as_c=True)
    assert proc.returncode == 0, proc.stderr
    assert "PicklingError" in proc.stdout and "'f'" in proc.stdout and "interactive" in proc.stdout


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys
    from interpexec import InterpreterPoolExecutor
    sys.path.insert(0, {root!r})
    from tests import fault_helpers as fh
    pool = InterpreterPoolExecutor(2)
    futs = [pool.submit(fh.busy_then_value, 0.05, i) for i in range(4)]
    print(futs[0].result(timeout=20), flush=True)
    if sys.argv[1] == "nowait":
        pool.shutdown(wait=False)
    # "never": no shutdown at all: the pool is joined at exit
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["never", "nowait"])
def test_process_exits_cleanly_without_waiting_shutdown(tmp_path, how):
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT.format(root=ROOT))
    proc = run_script("", str(script), how)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"
    assert "Fatal" not in proc.stderr and "Traceback" not in proc.stderr


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import sys
    from interpexec import InterpreterPoolExecutor
    sys.path.insert(0, {root!r})
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        with InterpreterPoolExecutor(2) as pool:
            if sys.argv[1] == "map":
                it = pool.map(fh.busy_then_value, [0.2] * 400, range(400))
                print("started", flush=True)
                for _ in it:
                    pass
            else:
                futs = [pool.submit(fh.busy_then_value, 0.2, i) for i in range(400)]
                print("started", flush=True)
                futs[-1].result()
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["map", "result"])
def test_ctrl_c_during_map_or_result_ends_the_process(tmp_path, where):
    script = tmp_path / "ctrlc.py"
    script.write_text(CTRL_C_SCRIPT.format(root=ROOT))
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, str(script), where], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)  # 400 x 0.2 s of work would take 40 s
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert "Fatal Python error" not in err


# A Ctrl-C that the main thread does not receive itself (here: delivered to
# another thread, as happens when it lands just before the main thread blocks)
# only sets a flag for the main thread.  Every wait of the main thread must still
# end at once, not when the work it waits for ends (60 s tasks here).
LOST_CTRL_C_SCRIPT = textwrap.dedent(
    """
    import signal, sys, threading
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    go = threading.Event()
    def kick():
        go.wait()
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    threading.Thread(target=kick, daemon=True).start()
    if __name__ == "__main__":
        where = sys.argv[1]
        with InterpreterPoolExecutor(1) as pool:
            futs = [pool.submit(fh.busy_then_value, 60, i) for i in range(20)]
            go.set()
            if where == "pending":
                futs[-1].result()
            elif where == "running":
                futs[0].result()
            elif where == "exception":
                futs[-1].exception()
            elif where == "map":
                for _ in pool.map(fh.busy_then_value, [60] * 3, range(3)):
                    pass
            # "exit": the with block's exit waits for the queued work
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["pending", "running", "exception", "map", "exit"])
def test_ctrl_c_the_main_thread_did_not_receive_still_ends_its_wait(tmp_path, where):
    script = tmp_path / "lost_ctrlc.py"
    script.write_text(LOST_CTRL_C_SCRIPT.format(root=ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(script), where],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    _, err = proc.communicate(timeout=40)  # the work waited for would take 60 s or more
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert "Fatal Python error" not in err


FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor, BrokenInterpreterPool
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        pool = InterpreterPoolExecutor(2)
        print("parent", pool.submit(fh.ok, 1).result(timeout=20), flush=True)
        pid = os.fork()
        if pid == 0:
            try:
                pool.submit(fh.ok, 2)
            except BrokenInterpreterPool:
                print("child: old pool refused", flush=True)
            with InterpreterPoolExecutor(1) as fresh:
                print("child", fresh.submit(fh.ok, 3).result(timeout=20), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        print("parent", pool.submit(fh.ok, 4).result(timeout=20), flush=True)
        pool.shutdown()
    """
)


@pytest.mark.timeout(60)
def test_fork_with_a_live_pool(tmp_path):
    script = tmp_path / "forking.py"
    script.write_text(FORK_SCRIPT.format(root=ROOT))
    proc = run_script("", "-W", "ignore::DeprecationWarning", str(script))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "child: old pool refused" in lines
    assert "child 3" in lines
    assert "child status 0" in lines
    assert lines[0] == "parent 1" and lines[-1] == "parent 4"


FORK_GROW_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    sys.path.insert(0, {root!r})
    os.process_cpu_count = lambda: 2  # (the pool starts 2 workers of 4 at first)
    import interpexec
    from tests import wake_helpers as wh
    if __name__ == "__main__":
        # Each round forks at another moment of the pool's growth: before its
        # deadline, while the workers it grew start ("grown": right after the
        # resolver started them), once they run.
        for delay in ("grown", 0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05):
            started, release = interpexec.Queue(), interpexec.Queue()
            pool = interpexec.InterpreterPoolExecutor(4)
            pool.submit(wh.noop).result(timeout=20)
            grown = threading.Event()
            def start_locked(own=pool._pool.start_locked):
                own()
                if threading.current_thread() is not threading.main_thread():
                    grown.set()
            pool._pool.start_locked = start_locked
            # Four calls that each finish only once all four have started:
            # two wait in the queue for the pool to grow.
            gated = [pool.submit(wh.rendezvous, started, release, i) for i in range(4)]
            releaser = wh.release_once_all_started(started, release, 4, value=4)
            if delay == "grown":
                assert grown.wait(20)
            else:
                threading.Event().wait(delay)
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            print("child status", status, [f.result(timeout=20) for f in gated], flush=True)
            releaser.join(20)
            pool.shutdown()
    """
)


@pytest.mark.timeout(120)
def test_fork_while_queued_calls_wait_for_the_pool_to_grow(tmp_path):
    """BUG (found by this stop's hostile review): the workers finish their calls
    before a fork (no interpreter may exist at one), and none starts meanwhile;
    calls that waited for each other, some still queued for a pool not yet grown
    to ``max_workers``, never finished: the fork went ahead after 30 s with
    interpreters alive, and the child aborted.  The queued calls now get their
    workers before the others park, and workers the pool was starting when
    the fork came take theirs first (the second review: they were held back
    from entering an interpreter)."""
    script = tmp_path / "fork_grow.py"
    script.write_text(FORK_GROW_SCRIPT.format(root=ROOT))
    proc = run_script("", "-W", "ignore::DeprecationWarning", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "still run in subinterpreters" not in proc.stderr
    assert proc.stdout.splitlines() == ["child status 0 [4, 4, 4, 4]"] * 8


FORK_KEPT_SCRIPT = textwrap.dedent(
    """
    import os, sys, warnings
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor, Queue
    from tests import queue_helpers as qh
    if __name__ == "__main__":
        q, q2 = Queue(), Queue()
        with InterpreterPoolExecutor(1) as pool:
            pool.submit(qh.produce, q, 0, 2).result(timeout=20)
        print("kept", q.qsize(), flush=True)
        live = InterpreterPoolExecutor(1)  # (its worker parks: destroys its interpreter)
        live.submit(qh.produce, q2, 0, 1).result(timeout=20)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pid = os.fork()
        if pid == 0:
            with InterpreterPoolExecutor(1) as fresh:
                print("child", fresh.submit(abs, -3).result(timeout=20), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
        said = sum("os.fork()" in str(w.message) for w in caught)
        print("parent", q.qsize(), q2.qsize(), said, live.submit(abs, -4).result(timeout=20), flush=True)
        live.shutdown()
    """
)


@pytest.mark.timeout(60)
def test_fork_while_an_ended_workers_interpreter_is_kept_for_its_items(tmp_path):
    """No subinterpreter may exist at a fork (see _lifecycle): one kept for
    the items its worker put into a Queue is destroyed first, as is a live
    worker's (which builds a fresh one after), each with a warning that those
    items are gone."""
    script = tmp_path / "forking_kept.py"
    script.write_text(FORK_KEPT_SCRIPT.format(root=ROOT))
    proc = run_script("", "-W", "ignore::DeprecationWarning", str(script))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["kept 2", "child 3", "child status 0", "parent 0 0 2 4"], proc.stderr


@pytest.mark.timeout(60)
def test_incompatible_submodule_has_one_name_whether_or_not_the_parent_imported_it(tmp_path, make_pool):
    """A package importing its single-phase extension relatively: the error names
    it fully ('pkg._testsinglephase'), before and after the parent imported it."""
    import importlib.machinery
    import importlib.util

    origin = importlib.util.find_spec("_testsinglephase").origin
    pkg = tmp_path / "ie_singlephase_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import _testsinglephase\n")
    os.symlink(origin, pkg / ("_testsinglephase" + importlib.machinery.EXTENSION_SUFFIXES[0]))
    sys.path.insert(0, str(tmp_path))
    try:
        names = []
        for parent_first in (False, True):
            if parent_first:
                importlib.import_module("ie_singlephase_pkg")
            ex = make_pool(1)
            with pytest.raises(IncompatibleModuleError) as info:
                ex.submit(fh.import_module, "ie_singlephase_pkg").result(timeout=30)
            names.append(info.value.module)
            assert "\n" not in str(info.value)
        assert names == ["ie_singlephase_pkg._testsinglephase"] * 2
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ie_singlephase_pkg", None)
        sys.modules.pop("ie_singlephase_pkg._testsinglephase", None)


MAIN_GLOBAL_SCRIPT = """
from interpexec import InterpreterPoolExecutor

def lookup(key):
    return TABLE[key]

if __name__ == "__main__":
    TABLE = {"a": 1}
    with InterpreterPoolExecutor(1) as pool:
        try:
            pool.submit(lookup, "a").result(timeout=30)
        except NameError as exc:
            print("NOTE", " ".join(getattr(exc, "__notes__", [])))
"""


@pytest.mark.timeout(60)
def test_global_set_under_the_main_guard_is_named_as_the_likely_cause(tmp_path):
    """What a fork user loses: a global set under the __main__ guard is not in
    workers; the NameError says so and names the remedy."""
    script = tmp_path / "main_global.py"
    script.write_text(MAIN_GLOBAL_SCRIPT)
    proc = run_script("", str(script))
    assert proc.returncode == 0, proc.stderr
    note = proc.stdout.partition("NOTE ")[2]
    assert "'TABLE' is a global of your __main__ module" in note, proc.stdout
    assert "initializer" in note


# Ctrl-C can land between any two calls, including right after the main
# thread's wait installed its signal wake-up descriptor: the wait must still
# take it out again (else every later wait silently loses its protection, and
# the program's own set_wakeup_fd sees a stranger's descriptor).  Here a SIGINT
# storm interrupts thousands of short waits; a wake-up descriptor the program
# itself installed must come back intact, and nothing may stay installed.
WAKEUP_FD_STORM_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        mine_r, mine_w = os.pipe()
        os.set_blocking(mine_w, False)
        with InterpreterPoolExecutor(1) as pool:
            fut = pool.submit(fh.busy_then_value, 60, 0)
            go, stop = threading.Event(), threading.Event()
            def storm():
                go.wait()
                while not stop.is_set():
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.0002)
            # The storm is to interrupt interpexec's waits, not the script's own
            # steps (a KeyboardInterrupt there would end the script): the handler
            # raises only while a wait is armed, and disarming is the first step
            # after the wait, inside the try that counts the interrupts.
            armed = False
            def on_sigint(signum, frame):
                if armed:
                    raise KeyboardInterrupt
            signal.signal(signal.SIGINT, on_sigint)
            t = threading.Thread(target=storm)
            t.start()
            go.set()
            interrupted = 0
            for phase in ("ours", "theirs"):
                if phase == "theirs":
                    signal.set_wakeup_fd(mine_w)
                end = time.monotonic() + 1.5
                while time.monotonic() < end:
                    try:
                        armed = True
                        try:
                            fut.result(timeout=0.002)
                        except TimeoutError:
                            pass
                        finally:
                            armed = False
                    except KeyboardInterrupt:
                        interrupted += 1
                left = signal.set_wakeup_fd(-1)
                signal.set_wakeup_fd(left)
                print(phase, left, flush=True)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            stop.set()
            t.join()
            pool.interrupt(fut)
        print("installed at the end", signal.set_wakeup_fd(-1), "expected", mine_w, "interrupted", interrupted)
    """
)


@pytest.mark.timeout(60)
def test_ctrl_c_storm_never_leaves_the_signal_wakeup_fd_installed(tmp_path):
    script = tmp_path / "wakeup_storm.py"
    script.write_text(WAKEUP_FD_STORM_SCRIPT.format(root=ROOT))
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=50,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    mine = int(lines[-1].split()[-3])
    assert lines[0] == "ours -1"  # nothing of interpexec's stayed installed
    assert lines[1] == f"theirs {mine}"  # the program's own descriptor is back
    assert lines[-1].startswith(f"installed at the end {mine} ")
    assert int(lines[-1].split()[-1]) > 100  # the storm did interrupt the waits
    assert "Fatal Python error" not in out.stderr


@pytest.mark.timeout(60)
def test_an_entry_point_failing_inside_a_result_wait_leaves_that_wait_alone():
    """A done-callback (or a signal handler) that runs inside this thread's own
    ``result()`` wait and calls the pool, which refuses (it is shut down): the
    refusal used to take the outer wait's registration and pipe as "left behind"
    — the outer wait then slept on a pipe nobody would write (a hang without a
    timeout), and the pipe went back to the free list twice (later closed under
    another borrower: EBADF).  The callback is simulated at the point where
    ``result()`` delivers queued results, deterministically."""
    from interpexec import _wakeup

    arrived_r, arrived_w = os.pipe()
    go_r, go_w = os.pipe()
    ex = InterpreterPoolExecutor(1)
    try:
        running = ex.submit(helpers.gated, arrived_w, go_r, "done")
        assert helpers.wait_bytes(arrived_r, 1) == b"a"
        ex.shutdown(wait=False)  # the running call goes on; new ones are refused
        pool = ex._pool
        deliver = pool.collect
        refused = []

        def collect_with_a_callback_that_submits() -> bool:
            item = pool.inflight.get(running._ie_tid)
            if not refused and item is not None and item.waiter_fd:  # (inside result()'s own wait)
                try:
                    ex.submit(fh.ok, 1)
                except RuntimeError as exc:
                    refused.append(exc)
                os.write(go_w, b"g")  # now let the running call finish
            return deliver()

        pool.collect = collect_with_a_callback_that_submits
        assert running.result() == "done"  # (no timeout: the outer wait must be woken)
        assert refused and "shutdown" in str(refused[0])
        ex.shutdown(wait=True)
        assert len(set(_wakeup._free)) == len(_wakeup._free)  # no pipe on the free list twice
    finally:
        for fd in (arrived_r, arrived_w, go_r, go_w):
            os.close(fd)


@pytest.mark.timeout(60)
def test_a_ctrl_c_as_a_result_wait_begins_leaves_the_result_to_others(monkeypatch):
    """A Ctrl-C landing as ``result()`` enters its wait (injected right after the
    watch's ``__enter__``): the registration it leaves is taken over, so another
    thread's ``result()``, a done-callback and ``concurrent.futures.wait`` all
    see the result, and no pipe is left lent.  (A first version of the fix for
    the test above marked the wait live there and never cleared it.)"""
    from interpexec import _future, _waiting, _wakeup

    arrived_r, arrived_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        with InterpreterPoolExecutor(1) as ex:
            fut = ex.submit(helpers.gated, arrived_w, go_r, "value")
            assert helpers.wait_bytes(arrived_r, 1) == b"a"
            enter = _waiting.Watch.__enter__

            def enter_then_ctrl_c(self):
                enter(self)
                monkeypatch.setattr(_waiting.Watch, "__enter__", enter)  # (once)
                raise KeyboardInterrupt

            monkeypatch.setattr(_waiting.Watch, "__enter__", enter_then_ctrl_c)
            with pytest.raises(KeyboardInterrupt):
                fut.result()
            called = threading.Event()
            fut.add_done_callback(lambda _: called.set())
            os.write(go_w, b"g")
            got = []
            other = threading.Thread(target=lambda: got.append(fut.result(timeout=30)))
            other.start()
            other.join()
            assert got == ["value"]
            assert called.wait(30)
            assert cf.wait([fut], timeout=30).done == {fut}
        assert not _wakeup.lent() and not _future.LIVE_WAITS
    finally:
        for fd in (arrived_r, arrived_w, go_r, go_w):
            os.close(fd)


@pytest.mark.timeout(60)
def test_a_ctrl_c_as_a_finished_result_wait_closes_leaves_nothing_lent(monkeypatch):
    """A Ctrl-C landing as ``result()``'s wait closes, its future done (injected
    at the start of ``Watch.close``, before it holds Ctrl-C back): the wait's
    registration and pipe are released all the same.  Before, the pipe stayed
    lent for ever (two descriptors), and the task-id slot registered: the task
    had left the pool's in-flight table, where the entry point's clean-up
    looks."""
    from interpexec import _future, _waiting, _wakeup

    with InterpreterPoolExecutor(1) as ex:
        ex.submit(fh.ok, 0).result(timeout=30)  # (the pool's own pipes are out)
        lent_before = len(_wakeup.lent())
        close = _waiting.Watch.close

        def ctrl_c_then_close(self):
            monkeypatch.setattr(_waiting.Watch, "close", close)  # (once)
            raise KeyboardInterrupt

        fut = ex.submit(fh.ok, "value")
        monkeypatch.setattr(_waiting.Watch, "close", ctrl_c_then_close)
        try:
            value = fut.result(timeout=30)
        except KeyboardInterrupt:
            value = "interrupted"
        if _waiting.Watch.close is close:  # the wait was registered, and cut
            assert value == "interrupted"
        assert fut.result(timeout=0) == "value"
        assert len(_wakeup.lent()) == lent_before and not _future.LIVE_WAITS
        layout, ctl = ex._pool.layout, ex._pool.ctl
        assert not any(ctl[layout.waiter_fds : layout.waiter_fds + layout.nslots])
        assert [ex.submit(fh.ok, i).result(timeout=30) for i in range(3)] == [0, 1, 2]
    assert not _wakeup.lent()


def _resolver_asleep(pool):
    from interpexec._transport import COLLECTOR_ASLEEP

    return pool._pool.ctl[COLLECTOR_ASLEEP] == 1


def _blocked_reading(native_id, fd, timeout=10.0):
    """Wait until the thread ``native_id`` of this process blocks in a system
    call whose first argument is ``fd`` (a read of that pipe), as Linux shows
    in /proc: a state of the thread, not a duration."""
    path = f"/proc/self/task/{native_id}/syscall"
    _until(lambda: _syscall_arg0(path) == fd, f"thread {native_id} blocked reading fd {fd}", timeout)


def _syscall_arg0(path):
    with open(path) as f:
        fields = f.read().split()
    return int(fields[1], 16) if len(fields) > 1 else None  # ("running": no arguments)


def _until(predicate, what, timeout=10.0):
    """Wait for a state of the pool (not for a duration): poll ``predicate``."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.0005)


def _nested_wait(fut, how):
    """Wait for ``fut`` (10 s at most) the way ``how`` says; its value."""
    if how == "result":
        return fut.result(timeout=10)
    if how == "exception":
        return fut.exception(timeout=10)
    if how == "wait":
        done, _ = cf.wait([fut], timeout=10)
        return fut.result(timeout=0) if done else "not done"
    assert how == "as_completed"
    return next(cf.as_completed([fut], timeout=10)).result(timeout=0)


NESTED_WAITS = ["result", "exception", "wait", "as_completed"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nested", NESTED_WAITS)
def test_a_signal_handler_waiting_for_the_future_the_main_thread_waits_for(nested):
    """A signal handler runs inside the main thread's own ``result()`` wait and
    waits for the same future.  The outer wait had the worker wake only its
    pipe, which nobody polls while the handler runs, and the handler's wait
    relies on the resolver, which nobody woke: it waited for ever (or its whole
    timeout), and the main thread with it."""
    q = interpexec.Queue()
    with InterpreterPoolExecutor(2) as pool:
        pool.prestart()  # (no worker's "started" report wakes the resolver below)
        fut = pool.submit(fh.block_on_queue, q)
        got = []

        def handler(signum, frame):
            got.append(_nested_wait(fut, nested))

        def poke():
            item = pool._pool.inflight[fut._ie_tid]
            _until(lambda: item.waiter_fd, "the main thread's wait registered")
            os.kill(os.getpid(), signal.SIGUSR1)
            _until(lambda: fut._waiters, "the handler's wait began")
            _until(lambda: _resolver_asleep(pool), "the resolver asleep")
            q.put("done")  # the task finishes now; the handler's wait must see it

        old = signal.signal(signal.SIGUSR1, handler)
        t = threading.Thread(target=poke)
        try:
            t.start()
            outer = fut.result(timeout=30)
        finally:
            t.join(timeout=10)
            signal.signal(signal.SIGUSR1, old)
    assert outer == "done"
    assert got == [None if nested == "exception" else "done"]


def _b_delivered_by_a_thread_waiting_for_a(in_b_callback):
    """A 2-worker pool whose resolver is held busy (in c's done-callback) while
    b's result is queued and a blocks on a queue; a thread T waits for a, and so
    delivers b.  T does not run b's done-callback (it may hold a lock of the
    user's that the callback takes): it hands it to the resolver, which runs it
    once freed, while T still waits for a; there it calls
    ``in_b_callback(a, release_a)``.  Returns (the threads b's callback ran
    in, what it returned, what T's wait returned, the resolver thread)."""
    from interpexec import _compat

    q = interpexec.Queue()
    resolver_busy, free_resolver = threading.Event(), threading.Event()
    with InterpreterPoolExecutor(2) as pool:
        pool.prestart()  # (the workers' "started" reports are in: only b's result is queued below)
        c = pool.submit(fh.ok, "c")
        c.add_done_callback(lambda f: (resolver_busy.set(), free_resolver.wait(20)))
        assert resolver_busy.wait(10)  # the resolver runs c's callback until freed
        a = pool.submit(fh.block_on_queue, q)
        b = pool.submit(fh.ok, "b")
        qid = pool._pool.results.qid
        _until(lambda: _compat.queue_count(qid) > 0, "b's result queued")
        got, ran_in, returned = [], [], threading.Event()

        def on_b(f):
            ran_in.append(threading.current_thread())
            try:
                got.append(in_b_callback(a, lambda: q.put("a")))
            finally:
                returned.set()

        b.add_done_callback(on_b)
        outer = []
        t = threading.Thread(target=lambda: outer.append(a.result(timeout=30)))
        try:
            t.start()
            _until(b.done, "b delivered by the thread waiting for a")
            assert not ran_in  # (handed to the resolver, still busy)
            item = pool._pool.inflight[a._ie_tid]
            _until(lambda: item.waiter_fd, "the wait for a registered")
        finally:
            free_resolver.set()
        t.join(timeout=40)
        # (Before the pool's shutdown, which wakes the resolver anyway.)
        assert returned.wait(30), "b's callback did not return"
        resolver = pool._pool.resolver_thread
    return ran_in, got, outer, resolver


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nested", NESTED_WAITS)
def test_a_done_callback_waiting_for_the_future_another_thread_waits_for(nested):
    """A thread waiting for A delivers B's result (queued while the resolver was
    busy); B's callback runs on the resolver and waits for A too.  A's worker
    wakes only the waiting thread: the resolver's wait must still see A done."""

    def wait_for_a(a, release_a):
        release_a()  # a finishes now; this wait must see it
        return _nested_wait(a, nested)

    ran_in, waited, outer, resolver = _b_delivered_by_a_thread_waiting_for_a(wait_for_a)
    assert ran_in == [resolver]  # b's callback ran on the resolver, not in the waiting thread
    assert waited == [None if nested == "exception" else "a"]
    assert outer == ["a"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nested", NESTED_WAITS)
def test_a_done_callback_waiting_asleep_for_the_future_another_thread_waits_for(nested):
    """As above, A finishing only once the resolver's own wait for it sleeps on
    its pipe: A's worker wakes the other thread alone, which delivers A.  The
    resolver's wait, which nobody woke, slept out its whole timeout (and
    ``concurrent.futures.wait()``'s, which relied on the resolver, for ever)."""

    def wait_for_a(a, release_a):
        def release_once_asleep():
            _until(lambda: a._ie_pool.ctl[0] == 1, "the resolver asleep in its wait for a")
            release_a()

        threading.Thread(target=release_once_asleep, daemon=True).start()
        if nested in ("wait", "as_completed"):
            # (A wait that nobody wakes ends with its timeout: "not done", or
            # as_completed's TimeoutError.)
            return _nested_wait(a, nested)
        # (No timeout: one would end a wait nobody woke, late but with the value.)
        return a.result() if nested == "result" else a.exception()

    ran_in, waited, outer, resolver = _b_delivered_by_a_thread_waiting_for_a(wait_for_a)
    assert ran_in == [resolver]
    assert waited == [None if nested == "exception" else "a"]
    assert outer == ["a"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["as the wait registers", "as the wait closes"])
def test_a_signal_handler_inside_a_result_wait_that_is_not_waiting_yet_or_any_more(where, monkeypatch):
    """A signal handler that runs inside the main thread's ``result()`` wait
    while its pipe is registered but the wait is not polling it (right after
    registering, or in ``close()`` before deregistering) and waits for the same
    future.  Before: that registration was not yet (no longer) "live", so the
    nested wait was not shared (it ran out its timeout), and its TimeoutError
    made the pool take the outer registration for left behind and give its pipe
    back, which close() then gave back again: one pipe twice on the free list
    (EBADF later, or two waits sharing a pipe)."""
    from interpexec import _future, _waiting, _wakeup

    q = interpexec.Queue()
    with InterpreterPoolExecutor(2) as pool:
        pool.prestart()
        fut = pool.submit(fh.block_on_queue, q)
        got = []

        def handler(signum, frame):
            if where == "as the wait registers":
                q.put("done")  # the task may finish now: this wait must see it
            got.append(fut.result(timeout=10))

        if where == "as the wait registers":
            enter = _waiting.Watch.__enter__

            def enter_with_signal(self):
                monkeypatch.setattr(_waiting.Watch, "__enter__", enter)  # (once)
                os.kill(os.getpid(), signal.SIGUSR1)  # runs at the next check
                return enter(self)

            monkeypatch.setattr(_waiting.Watch, "__enter__", enter_with_signal)
        else:
            detach = type(pool._pool).detach_waiter

            def detach_with_signal(item, wfd):
                del pool._pool.detach_waiter  # (once)
                q.put("done")
                os.kill(os.getpid(), signal.SIGUSR1)
                return detach(pool._pool, item, wfd)

            pool._pool.detach_waiter = detach_with_signal
        old = signal.signal(signal.SIGUSR1, handler)
        try:
            # (As the wait closes: it timed out, the task held until the q.put
            # in the patched deregistration; the handler's wait, run there, ends
            # with the task, before the outer one looks a last time.)
            outer = fut.result(timeout=30 if where == "as the wait registers" else 0.05)
        finally:
            signal.signal(signal.SIGUSR1, old)
        assert got == ["done"] and outer == "done"
        assert not _wakeup.lent() and not _future.LIVE_WAITS
        free = list(_wakeup._free)
        assert len(free) == len(set(free))  # no pipe twice on the free list
        assert [pool.submit(fh.ok, i).result(timeout=30) for i in range(3)] == [0, 1, 2]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nested", ["result", "wait"])
def test_a_done_callback_handing_the_wait_for_a_future_another_thread_waits_for_to_a_third(nested):
    """A thread waiting for A delivers B's result; B's done-callback, on the
    resolver, has a third thread wait for A and waits for that thread."""
    helper = cf.ThreadPoolExecutor(1)

    def hand_over(a, release_a):
        h = helper.submit(_nested_wait, a, nested)
        _until(lambda: a._waiters or a._condition._waiters, "the other thread waiting")
        release_a()
        return h.result(timeout=20)

    try:
        ran_in, got, outer, resolver = _b_delivered_by_a_thread_waiting_for_a(hand_over)
    finally:
        helper.shutdown()
    assert ran_in == [resolver]
    assert got == ["a"] and outer == ["a"]


@pytest.mark.timeout(60)
def test_a_done_callback_taking_a_lock_the_thread_that_delivers_it_holds():
    """A thread holds a lock while it waits in ``result()``; another future's
    done-callback takes that lock.  The waiting thread delivers every queued
    result, the other one's too: when it ran that callback itself, it waited
    for its own lock for ever.  Callbacks run on the resolver, as
    ProcessPoolExecutor's run on its manager thread."""
    lock, seen = threading.Lock(), []

    def callback(f):
        with lock:
            seen.append((f.result(), threading.current_thread().name))

    with InterpreterPoolExecutor(2, thread_name_prefix="lockcb") as pool:
        pool.prestart(wait=True)
        for i in range(100):
            other = pool.submit(fh.ok, i)
            other.add_done_callback(callback)
            mine = pool.submit(fh.ok, -i)
            with lock:
                assert mine.result(timeout=20) == -i
    assert sorted(seen) == [(i, "lockcb_resolver") for i in range(100)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("can_start", [0, 1])
def test_worker_threads_that_cannot_start(can_start, monkeypatch):
    """Thread.start() raising (the thread limit, or the interpreter exiting: what
    CPython's test_python_finalization_error injects).  Before, the worker stayed
    counted: submit() raised a bare RuntimeError and shutdown(wait=True) then
    waited for ever for a thread that never ran.  Now a pool with no worker
    running breaks (BrokenInterpreterPool, a BrokenProcessPool, as
    ProcessPoolExecutor's does); one with some goes on with fewer."""
    from interpexec import _wakeup, _worker

    fds_before = len(os.listdir("/proc/self/fd"))
    start, started = _worker.Worker.start, []

    def start_some(self):
        if len(started) >= can_start:
            raise RuntimeError("can't create new thread at interpreter shutdown")
        started.append(self)
        start(self)

    monkeypatch.setattr(_worker.Worker, "start", start_some)
    ex = InterpreterPoolExecutor(2)
    try:
        if can_start:
            assert list(ex.map(fh.ok, range(10))) == list(range(10))
            assert ex.submit(fh.ok, "more").result(timeout=30) == "more"
        else:
            with pytest.raises(BrokenInterpreterPool, match="could not be started"):
                list(ex.map(fh.ok, range(10)))
            with pytest.raises(BrokenInterpreterPool):
                ex.submit(fh.ok, 1)
    finally:
        done = threading.Event()
        t = threading.Thread(target=lambda: (ex.shutdown(wait=True), done.set()), daemon=True)
        t.start()
        assert done.wait(20), "shutdown(wait=True) did not return"
    assert not _wakeup.lent()
    if not can_start:
        assert len(os.listdir("/proc/self/fd")) <= fds_before  # the unstarted workers' pipes closed


@pytest.mark.timeout(60)
def test_a_worker_that_once_could_not_start_does_not_break_the_pool_later(monkeypatch):
    """A failed start is forgotten once a later start succeeds: it used to stay
    recorded, and the pool broke when its workers later left it idle (or after
    a clean shutdown) as if none could start."""
    from interpexec import _worker

    start, calls = _worker.Worker.start, []

    def start_second_fails_once(self):
        calls.append(self)
        if len(calls) == 2:
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(_worker.Worker, "start", start_second_fails_once)
    with InterpreterPoolExecutor(2, idle_timeout=0.05) as ex:
        assert ex.submit(fh.ok, 1).result(timeout=30) == 1
        assert ex.submit(fh.ok, 2).result(timeout=30) == 2
        _until(lambda: ex._pool.active == 0, "the workers gone idle")
        assert ex.submit(fh.ok, 3).result(timeout=30) == 3  # not broken


@pytest.mark.timeout(60)
def test_a_worker_that_cannot_get_its_pipes_leaks_nothing(monkeypatch):
    """Out of descriptors while a worker is made (its command channel made, its
    interrupt pipe not): the pool goes on with the workers it has, and each
    later attempt must not leak the half-made worker's channel and pipes."""
    import errno

    from interpexec import _compat, _worker

    with InterpreterPoolExecutor(4) as ex:
        made = []
        real_pipe, init = os.pipe, _worker.Worker.__init__

        def init_then_fail(self, *args, **kwargs):
            made.append(self)
            if len(made) <= 2:
                return init(self, *args, **kwargs)
            calls = []

            def pipe():  # the channel's pipe, then none
                calls.append(1)
                if len(calls) > 1:
                    raise OSError(errno.EMFILE, "Too many open files")
                return real_pipe()

            monkeypatch.setattr(_worker.os, "pipe", pipe)
            try:
                return init(self, *args, **kwargs)
            finally:
                monkeypatch.setattr(_worker.os, "pipe", real_pipe)

        monkeypatch.setattr(_worker.Worker, "__init__", init_then_fail)
        ex.prestart()  # (the two that can start are ready: no import of theirs is in progress)
        assert [ex.submit(fh.ok, i).result(timeout=30) for i in range(5)] == list(range(5))
        fds, queues = len(os.listdir("/proc/self/fd")), len(_compat._interpqueues.list_all())
        assert [ex.submit(fh.ok, i).result(timeout=30) for i in range(50)] == list(range(50))
        assert ex._pool.active == 2 and len(made) > 50  # (each submit tried again)
        # A leak was a channel (two descriptors and a queue) per attempt: over a
        # hundred descriptors here.  (A little slack: earlier tests' pools may
        # still be closing theirs, a worker may have a file open for a moment.)
        assert len(os.listdir("/proc/self/fd")) <= fds + 4
        assert len(_compat._interpqueues.list_all()) <= queues


@pytest.mark.timeout(60)
@pytest.mark.parametrize("held", ["wait() holding the futures' conditions", "submit() holding the pool's lock"])
def test_an_entry_point_failing_where_its_thread_holds_a_lock_leaves_that_lock_held(held, monkeypatch):
    """A pool call that fails (its wait times out) releases the locks a Ctrl-C
    may have left held, but not the levels an outer frame of its thread holds
    (``concurrent.futures.wait()`` holds every future's condition while it
    installs its waiter; a signal handler can run inside ``submit()`` while it
    holds the pool's lock).  Releasing them all left that frame running
    unlocked, failing with "cannot release un-acquired lock".  The handler is
    simulated at a point where the outer frame holds the lock."""
    from interpexec import _future

    q = interpexec.Queue()
    with InterpreterPoolExecutor(1) as ex:
        blocked = ex.submit(fh.block_on_queue, q)
        outer = ex.submit(fh.ok, 1)
        entered: list[bool] = []
        nested: list[bool] = []
        try:
            if held.startswith("wait()"):
                append = _future.Waiters.append

                def append_with_a_handler_inside(waiters, waiter):
                    if not entered:  # (the "signal handler": pool calls that fail)
                        entered.append(True)
                        assert blocked._condition._is_owned()  # (wait() holds it)
                        with pytest.raises(cf.TimeoutError):
                            blocked.result(timeout=0.05)
                        with pytest.raises(cf.TimeoutError):
                            blocked.exception(timeout=0)
                        nested.append(blocked._condition._is_owned())
                    append(waiters, waiter)

                monkeypatch.setattr(_future.Waiters, "append", append_with_a_handler_inside)
                done, not_done = cf.wait([blocked], timeout=0.05)  # (its `with` ends normally)
                monkeypatch.undo()
                assert (done, not_done) == (set(), {blocked})
            else:
                pool = ex._pool
                enqueue = pool.enqueue_locked

                def enqueue_with_a_handler_inside(*args):
                    if not entered:
                        entered.append(True)
                        assert pool.lock._is_owned()
                        with pytest.raises(cf.TimeoutError):
                            ex.submit(fh.ok, 2).result(timeout=0)
                        with pytest.raises(cf.TimeoutError):
                            list(ex.map(fh.ok, [3], timeout=0))
                        nested.append(pool.lock._is_owned())
                    return enqueue(*args)

                monkeypatch.setattr(pool, "enqueue_locked", enqueue_with_a_handler_inside)
                outer = ex.submit(fh.ok, 1)  # (its `with pool.lock` ends normally)
                monkeypatch.undo()
            assert nested == [True]
            assert not blocked._condition._is_owned()
            assert not ex._pool.lock._is_owned()
        finally:
            q.put("done")
        assert blocked.result(timeout=30) == "done"
        assert outer.result(timeout=30) == 1
        assert ex.submit(fh.ok, 4).result(timeout=30) == 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("left", ["the pool's lock", "the future's condition"])
def test_a_lock_a_ctrl_c_left_held_is_released_by_the_next_failing_call(left):
    """A Ctrl-C landing right after a ``with lock:`` acquired (outside the pool's
    guarded entry points: ``cancel()``, ``add_done_callback``, the acquiring
    loop of ``concurrent.futures.wait()``) leaves the lock held by the main
    thread: the resolver would block on it for ever.  The next pool call that
    fails in that thread, called from no frame of the pool's, releases it."""
    q = interpexec.Queue()
    with InterpreterPoolExecutor(1) as ex:
        blocked = ex.submit(fh.block_on_queue, q)
        lock = ex._pool.lock if left == "the pool's lock" else blocked._condition
        try:
            lock.acquire()  # (what the Ctrl-C leaves)
            with pytest.raises(cf.TimeoutError):
                blocked.result(timeout=0.01)
            assert not lock._is_owned()
        finally:
            q.put("done")
        assert blocked.result(timeout=30) == "done"
        assert ex.submit(fh.ok, 4).result(timeout=30) == 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("condition", ["a future's condition", "the pool's worker events"])
def test_a_ctrl_c_right_after_a_condition_wait_released_its_lock(condition, monkeypatch):
    """A Ctrl-C landing right after a condition's wait released its lock, before
    the wait's protection began, left the lock released: the caller's ``with``
    then failed with "cannot release un-acquired lock" instead of the
    KeyboardInterrupt.  The release now happens inside the protection.  The
    Ctrl-C is injected right after the release."""
    from interpexec import _compat, _condition, _state

    module = _condition if condition == "a future's condition" else _state

    def release_then_interrupted(lock):
        _compat.release_all(lock)
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "release_all", release_then_interrupted)
    if module is _condition:
        lock = cond = _condition.FutureCondition()
    else:
        lock = threading.RLock()
        cond = _state.Events(lock)
    with pytest.raises(KeyboardInterrupt):
        with lock:
            with lock:  # (held twice: restored as deeply)
                cond.wait(0.01)
            assert lock._recursion_count() == 1
    assert not lock._is_owned()


@contextlib.contextmanager
def _resolver_held_busy(ex):
    """Hold the pool's resolver in a done-callback until the block ends: the
    main thread then takes and delivers the results itself."""
    busy, free = threading.Event(), threading.Event()
    ex.submit(fh.ok, "c").add_done_callback(lambda f: (busy.set(), free.wait(20)))
    try:
        assert busy.wait(10)  # the resolver runs the callback until freed
        yield
    finally:
        free.set()


@pytest.mark.timeout(60)
def test_a_worker_its_watchdog_retired_that_ends_before_the_news_is_handled_is_replaced():
    """At a deadline a worker's watchdog reports the timeout and retires the
    worker (TIMEOUT, EV_STUCK); the worker ends as soon as the task returns.  If
    it ended before the resolver handled EV_STUCK, nothing replaced it: the
    resolver's retire() found it gone, and the worker's exit, not retired yet
    on the pool's side, started no other.  Twice, and a pool was left with no
    worker and its queued tasks for ever (seen in CI on 3.13 and 3.14, in the
    random deadlines test).  The resolver is held busy here so that the worker
    always ends first.  The news, handled late, must not retire the replacement
    (which may have the same slot): it names the interpreter it came from."""
    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        (first,) = pool.workers.values()
        retired = threading.Event()
        retire = pool.retire

        def retire_and_tell(*args, **kwargs):
            retire(*args, **kwargs)
            retired.set()

        pool.retire = retire_and_tell
        with _resolver_held_busy(ex):
            late = ex.schedule(fh.busy_then_value, (30.0, "late"), timeout=0.05)
            queued = [ex.submit(fh.ok, i) for i in range(3)]
            _until(lambda: first.slot not in pool.workers or pool.workers[first.slot] is not first, "the worker ended")
        assert isinstance(late.exception(timeout=20), TimeoutError)
        assert [f.result(timeout=20) for f in queued] == [0, 1, 2]
        assert retired.wait(20)  # (the late news handled)
        assert pool.active == 1
        assert [w.retired for w in pool.workers.values()] == [False]
        assert ex.submit(fh.ok, "after").result(timeout=20) == "after"


@pytest.mark.timeout(60)
def test_a_signal_handler_waiting_right_after_the_outer_wait_deregistered_its_pipe():
    """A signal handler that waits for a pool result, run right after the main
    thread's own result() took its pipe out of the thread's live waits (and
    left that registry empty): the nested wait registers and deregisters in the
    same registry, and removes it; the outer one then removed it again and
    raised KeyError out of result() (found by this stop's review with SIGALRM
    every millisecond).  The handler is run at exactly that point here."""
    from interpexec import _waiting

    code = _waiting.Waiting.detach_waiter.__code__
    # (the instruction right after the call that pops the pipe from the live waits,
    # where CPython may run a signal handler)
    pops = [i for i in dis.get_instructions(code) if i.opname.startswith("CALL") and "live.pop" in _line(code, i)]
    assert pops, "detach_waiter no longer pops its pipe from the live waits"
    after = next(i.offset for i in dis.get_instructions(code) if i.offset > pops[0].offset)
    with InterpreterPoolExecutor(2) as ex:
        ex.prestart(wait=True)
        nested: list[object] = []
        tool = sys.monitoring.DEBUGGER_ID
        sys.monitoring.use_tool_id(tool, "nested wait test")

        def at(code_, offset):
            if offset == after and not nested and threading.current_thread() is threading.main_thread():
                nested.append(ex.submit(fh.ok, "nested").result(timeout=20))  # (a wait: registers a pipe)
            return sys.monitoring.DISABLE if nested else None

        sys.monitoring.register_callback(tool, sys.monitoring.events.INSTRUCTION, at)
        sys.monitoring.set_local_events(tool, code, sys.monitoring.events.INSTRUCTION)
        try:
            for i in range(50):  # (the outer wait must block, to register its pipe)
                assert ex.submit(fh.busy_then_value, 0.002, i).result(timeout=20) == i
                if nested:
                    break
        finally:
            sys.monitoring.set_local_events(tool, code, 0)
            sys.monitoring.register_callback(tool, sys.monitoring.events.INSTRUCTION, None)
            sys.monitoring.free_tool_id(tool)
        assert nested == ["nested"]
        assert not _waiting.LIVE_WAITS.get(threading.get_ident())


@contextlib.contextmanager
def _monitored(code, event, callback):
    """Call ``callback`` at every ``event`` (LINE or INSTRUCTION) that ``code``
    runs inside the block (where a signal handler could run)."""
    tool = sys.monitoring.DEBUGGER_ID
    sys.monitoring.use_tool_id(tool, "handler test")
    sys.monitoring.register_callback(tool, event, callback)
    sys.monitoring.set_local_events(tool, code, event)
    try:
        yield
    finally:
        sys.monitoring.set_local_events(tool, code, 0)
        sys.monitoring.register_callback(tool, event, None)
        sys.monitoring.free_tool_id(tool)


def _line(code, ins):
    import linecache

    return linecache.getline(code.co_filename, ins.positions.lineno) if ins.positions else ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cancel_futures", [False, True])
def test_shutdown_while_every_slot_is_held_by_a_retired_worker_still_runs_the_queued_work(cancel_futures):
    """Six deadlines retire six workers stuck in C (each keeps its slot until
    its call returns): every slot of a one-worker pool is held, and work queued
    behind them waits for a slot.  shutdown(wait=True) returned at once and
    the resolver ended, so that work never ran and its futures never resolved
    (found by this stop's second review).  Now shutdown waits until a stuck
    call returns, a replacement runs the work, and every future resolves."""
    ex = InterpreterPoolExecutor(1, interrupt_grace=0.05)
    try:
        pool = ex._pool
        stuck = [ex.schedule(fh.sleep_in_c, (1.0,), timeout=0.01) for _ in range(pool.layout.slots)]
        queued = [ex.submit(fh.ok, i) for i in range(5)]
        _until(
            lambda: not pool.free_slots and all(w.retired for w in list(pool.workers.values())), "every slot retired"
        )
    finally:
        ex.shutdown(wait=True, cancel_futures=cancel_futures)
    assert all(f.done() for f in queued)  # (dispatched already: not cancellable)
    assert [f.result(timeout=0) for f in queued] == [0, 1, 2, 3, 4]
    assert all(isinstance(f.exception(timeout=0), TimeoutError) for f in stuck)


@pytest.mark.timeout(60)
def test_shutdown_does_not_wait_for_an_interrupted_call_stuck_in_c():
    """An interrupted task stuck in C keeps its place in the window until its
    worker reports it (never, while the call lasts), but its future is done:
    shutdown(wait=True) waits for work still to run, not for that one (the
    first version of the fix above waited for the C call to return)."""
    import time

    ex = InterpreterPoolExecutor(1, interrupt_grace=0.05)
    started_r, started_w = os.pipe()
    block_r, block_w = os.pipe()
    try:
        stuck = ex.submit(fh.block_reading, started_w, block_r)
        # (running() is true from dispatch, before the worker takes the task:
        # an interrupt then skips it; and one that lands before the call
        # enters C ends it.  So it waits until the call blocks.)
        _blocked_reading(int(os.read(started_r, 32)), block_r)
        assert ex.interrupt(stuck)
        # (list(): retire() adds the replacement to the dict meanwhile)
        _until(lambda: any(w.retired for w in list(ex._pool.workers.values())), "the stuck worker retired")
    finally:
        began = time.monotonic()
        ex.shutdown(wait=True)
        took = time.monotonic() - began
        os.write(block_w, b"x")  # (the stuck call returns; its thread ends)
        for fd in (started_r, started_w, block_r, block_w):
            os.close(fd)
    assert took < 10
    assert stuck.cancelled()


@pytest.mark.timeout(60)
def test_bare_task_ids_wherever_a_collect_finds_them_resolve_their_futures_to_none():
    """A task that returns None reports it as its bare id (no tuple: nothing the
    main interpreter must hand back to the worker to release).  The collect
    turns each into a VALUE message as it takes it; one that a nested take cut
    short by an exception left as it came (in ``arrived``, or already moved on
    to ``inbox``) is handled all the same."""
    from interpexec import _compat

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        with _resolver_held_busy(ex):
            futures = [ex.submit(fh.ok, None) for _ in range(4)]
            _until(lambda: _compat.queue_count(pool.results.qid) >= 4, "the results queued")
            taken = collections.deque()
            _compat.queue_take(pool.results.qid, 2, taken)
            assert [type(m) for m in taken] == [int, int]  # what the workers put
            pool.arrived.append(taken.popleft())
            pool.inbox.append(taken.popleft())
            pool.collect()  # (the other two still on the queue)
            assert [f.result(timeout=0) for f in futures] == [None] * 4
            tids = {f._ie_tid for f in futures}
            assert not tids & (pool.inflight.keys() | pool.unsettled.keys())
            assert not pool.inbox and not pool.arrived


@pytest.mark.timeout(60)
def test_results_a_recycling_workers_last_take_moves_are_delivered_though_nobody_waits():
    """BUG (found by this stop's hostile review, on 3.13, 3.14 and 3.15): a worker
    whose interpreter ends (``max_tasks_per_child``) takes every result still
    queued, any worker's, into the pool's inbox before it destroys its
    interpreter, and delivers none of them.  The worker that had put one of
    them, seeing it taken, wrote no wake-up ("whoever took it delivers it"),
    and the resolver slept on: the future stayed running for ever unless
    somebody called ``result()``.  Another thread plays the recycling worker's
    take here, while the task's worker lingers after its put; nobody waits
    for the future but by polling ``done()``."""
    import time

    from interpexec import _compat
    from interpexec._transport import COLLECTOR_ASLEEP

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        _until(lambda: pool.ctl[COLLECTOR_ASLEEP] == 1, "the resolver asleep")
        took = []

        def recycling_workers_last_take():
            deadline = time.monotonic() + 10
            while not _compat.queue_count(pool.results.qid) and time.monotonic() < deadline:
                pass  # (a busy look: the take must come within the worker's linger)
            took.append(pool.take_results(final=True))

        taker = threading.Thread(target=recycling_workers_last_take)
        taker.start()
        fut = ex.submit(fh.busy_then_value, 0.05, 7)
        taker.join(20)
        assert took == [True]
        _until(fut.done, "the future resolved")
        assert fut.result(timeout=0) == 7


@pytest.mark.timeout(60)
def test_a_result_delivered_while_another_thread_moves_its_task_out_of_the_window_resolves():
    """BUG (found by the signal-storm test in CI on 3.13.0, where it lost a
    result in about one 6-second run in three; not about signals): a thread
    delivering a result looked its task up in ``unsettled``, then in
    ``inflight``, while the resolver, having taken that result off the queue,
    moved the task out of the window (into ``unsettled``, then out of
    ``inflight``).  A move between the two lookups made the task found in
    neither: the result was dropped as a late report, and its future stayed
    running for ever.  The move is made to happen exactly there."""
    from interpexec import _compat

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        with _resolver_held_busy(ex):
            fut = ex.submit(fh.ok, 7)
            tid = fut._ie_tid
            _until(lambda: _compat.queue_count(pool.results.qid) >= 1, "the result queued")
            _compat.queue_take(pool.results.qid, 1, pool.inbox)

            class MovedRightAfterALookup(dict):
                """``unsettled``, with the resolver's move of the task out of the
                window (as in _leave_window) right after a lookup of it."""

                def get(self, key, default=None):
                    found = super().get(key, default)
                    if key == tid and key in pool.inflight:
                        self[key] = pool.inflight[key]
                        del pool.inflight[key]
                    return found

            pool.unsettled = MovedRightAfterALookup(pool.unsettled)
            try:
                pool.collect()
            finally:
                pool.unsettled = dict(pool.unsettled)
            assert fut.result(timeout=5) == 7
            assert tid not in pool.inflight and tid not in pool.unsettled


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["taking results off the queue", "delivering them"])
def test_a_signal_handler_collecting_inside_the_main_threads_own_collect(where, monkeypatch):
    """A signal handler (or a finalizer) that calls the pool runs a collect
    nested inside the main thread's own, which its re-entrant locks let
    through: the nested one moved on the messages the outer one was working
    on, which then failed with IndexError (or could overwrite a message).  The
    handler is simulated inside the outer collect, with the resolver held busy
    so that the main thread takes and delivers the results itself."""
    import collections

    from interpexec import _compat, _resolver

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        with _resolver_held_busy(ex):
            futures = [ex.submit(bytearray, 1000 + i) for i in range(3)]  # (results with out-of-band buffers)
            _until(lambda: _compat.queue_count(pool.results.qid) >= 3, "the results queued")
            nested: list[bool] = []

            def handler() -> None:
                if not nested:
                    nested.append(True)
                    nested.append(pool.collect())

            if where == "taking results off the queue":
                materialize = _resolver.materialize

                def materialize_with_a_handler_inside(enc):
                    copied = materialize(enc)
                    handler()
                    return copied

                monkeypatch.setattr(_resolver, "materialize", materialize_with_a_handler_inside)
            else:

                class HeldWithAHandlerInside(collections.deque):
                    def extend(self, values):
                        super().extend(values)
                        handler()  # (right after a message was moved into it)

                monkeypatch.setattr(pool, "held", HeldWithAHandlerInside())
            pool.collect()
            monkeypatch.undo()
            assert nested == [True, True]  # (the nested collect delivered)
            assert all(f.done() for f in futures)
        assert [f.result(timeout=10) for f in futures] == [bytearray(1000 + i) for i in range(3)]
        assert ex.submit(fh.ok, 4).result(timeout=30) == 4


SCRIPT_PROLOGUE = """
import faulthandler, linecache, os, signal, sys, threading
from interpexec import InterpreterPoolExecutor
from interpexec._compat import queue_count
from tests import helpers as h

faulthandler.dump_traceback_later(20, exit=True)  # (a deadlock: say where, end)
arrived_r, arrived_w = os.pipe()
go_r, go_w = os.pipe()
TOOL = sys.monitoring.DEBUGGER_ID


def line_of(function, start):
    \"\"\"The code of ``function`` and the number of its line starting ``start``.\"\"\"
    code = function.__code__
    text = lambda n: linecache.getline(code.co_filename, n).strip()
    lines = [n for _, _, n in code.co_lines() if n and text(n).startswith(start)]
    assert lines, f"{function.__qualname__} has no line {start!r} any more"
    return code, lines[0]


def on_lines(code, callback):
    \"\"\"Call ``callback(line)`` at every line ``code`` runs (None: stop).\"\"\"
    sys.monitoring.use_tool_id(TOOL, "handler test")
    sys.monitoring.register_callback(TOOL, sys.monitoring.events.LINE, lambda c, line: callback(line))
    sys.monitoring.set_local_events(TOOL, code, sys.monitoring.events.LINE)


def off_lines(code):
    sys.monitoring.set_local_events(TOOL, code, 0)


def hold_resolver(ex):
    \"\"\"Hold the pool's resolver in a done-callback until the event returned is
    set: the main thread then takes and delivers results itself.\"\"\"
    busy, free = threading.Event(), threading.Event()
    ex.submit(h.identity, "c").add_done_callback(lambda f: (busy.set(), free.wait(20)))
    assert busy.wait(10)
    return free


def main_thread_takes(ex):
    \"\"\"Start ``ex`` and hold its resolver: the main thread then takes results
    itself.  The code of the take, its line that moves ``arrived`` (its views
    copied out) into the inbox, and the event that frees the resolver.\"\"\"
    ex.prestart(wait=True)
    code, line = line_of(type(ex._pool)._take_queued, "inbox.extend(")
    return code, line, hold_resolver(ex)


def first_in_main(line, wanted, seen):
    return line == wanted and threading.current_thread() is threading.main_thread() and not seen
"""

HANDLER_COLLECTS_INSIDE_SUBMIT = (
    SCRIPT_PROLOGUE
    + """
with InterpreterPoolExecutor(1) as ex:
    ex.prestart(wait=True)
    pool = ex._pool
    code, lock_line = line_of(type(pool).take_results, "self._leave_window(taken)")
    in_take, lock_held, resolver_waits = threading.Event(), threading.Event(), threading.Event()

    def at(line):  # (the resolver: held at its take's start, then seen about to wait for the lock)
        if threading.get_ident() != pool.resolver_ident:
            return None
        if not in_take.is_set():
            in_take.set()
            lock_held.wait(20)
        elif line == lock_line:
            resolver_waits.set()
            return sys.monitoring.DISABLE
        return None

    on_lines(code, at)
    seen = []
    signal.signal(signal.SIGUSR1, lambda *a: seen.append(ex.stats()["completed"]))
    first = ex.submit(h.identity, 1)
    second = ex.submit(h.gated, arrived_w, go_r, 2)
    assert in_take.wait(20), "the resolver took the first result"
    with pool.lock:  # (as submit() holds it)
        lock_held.set()
        assert resolver_waits.wait(20), "the resolver waits for the pool's lock"
        os.read(arrived_r, 1)
        os.write(go_w, b"g")
        while not queue_count(pool.results.qid):  # (the second result queued: a state, not a delay)
            os.sched_yield()
        signal.raise_signal(signal.SIGUSR1)  # (its handler runs here, in this thread, holding the lock)
    off_lines(code)
    assert seen == [2], seen
    assert (first.result(timeout=20), second.result(timeout=20)) == (1, 2)
    assert ex.submit(h.identity, 3).result(timeout=20) == 3
print("ok")
"""
)


@pytest.mark.timeout(60)
def test_a_signal_handler_collecting_while_its_thread_holds_the_pools_lock():
    """A signal handler calling ``stats()`` (or ``result()``: both collect)
    while the main thread is inside ``submit()``, holding the pool's lock: the
    resolver, having taken a result off the queue while holding the collect
    lock, waited for the pool's lock, and the handler waited for the collect
    lock, for ever (found by stop 25's review).  The resolver now lets go of
    the collect lock before it takes the pool's lock.  Run in a script, so that
    a deadlock ends it (faulthandler) rather than the test session."""
    proc = run_script(HANDLER_COLLECTS_INSIDE_SUBMIT, as_c=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stdout + proc.stderr


HANDLER_SHUTS_DOWN_INSIDE_A_TAKE = (
    SCRIPT_PROLOGUE
    + """
with InterpreterPoolExecutor(1) as ex:
    pool = ex._pool
    code, move_line, free = main_thread_takes(ex)
    seen = []

    def at(line):
        if first_in_main(line, move_line, seen):
            seen.append(len(pool.arrived))
            signal.raise_signal(signal.SIGTERM)  # (its handler runs here, inside the take)
            return sys.monitoring.DISABLE
        return None

    def on_term(*args):
        free.set()
        ex.shutdown(wait=True)
        seen.append("shut down")

    signal.signal(signal.SIGTERM, on_term)
    on_lines(code, at)
    fut = ex.submit(h.identity, 7)
    assert fut.result(timeout=20) == 7
    off_lines(code)
    assert seen == [1, "shut down"], seen
    assert pool.shutdown_flag
assert pool.closed and not pool.workers  # (the with block's own shutdown waited)
print("ok")
"""
)


@pytest.mark.timeout(60)
def test_a_signal_handler_shutting_down_inside_its_threads_take_of_results():
    """A SIGTERM handler calling ``shutdown(wait=True)`` while the main thread
    is taking results off the queue (holding the collect lock): each worker
    takes its last results before it ends, so it waited for that lock, and the
    handler waited for the worker, for ever (found by stop 26's review).  There
    it cannot wait (letting go of the lock would let a worker destroy its
    interpreter under the take's views of its buffers: a crash, found by the
    second review): it returns, and the workers end once the handler has.  Run
    in a script, so that a deadlock ends it (faulthandler)."""
    proc = run_script(HANDLER_SHUTS_DOWN_INSIDE_A_TAKE, as_c=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stdout + proc.stderr


@pytest.mark.timeout(60)
def test_a_pool_call_failing_in_a_handler_run_as_a_wait_registers_leaves_that_wait_its_pipe():
    """A pool call that fails (here a ``result()`` that times out) in a signal
    handler run while the main thread's ``result()`` registers its pipe,
    before the pipe counted as a live wait: the failing call took the outer
    wait for one an exception left behind and gave its pipe back, which the
    outer wait gave back again when it ended (the pipe twice on the free list:
    two waits sharing it, its descriptors closed twice; found by stop 26's
    review, also seen under a SIGALRM storm).  The handler runs right before
    the live wait is stored."""
    from interpexec import _wakeup

    with InterpreterPoolExecutor(2) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        code = type(pool).attach_waiter.__code__
        instructions = list(dis.get_instructions(code))
        live = [i.offset for i in instructions if i.argval == "setdefault"]
        assert live, "attach_waiter no longer registers a live wait"
        store = next(i.offset for i in instructions if i.offset > live[0] and i.opname == "STORE_SUBSCR")
        blocker_r, blocker_w = os.pipe()  # (arrived)
        blocker_go_r, blocker_go_w = os.pipe()
        outer_r, outer_w = os.pipe()
        outer_go_r, outer_go_w = os.pipe()
        blocker = ex.submit(helpers.gated, blocker_w, blocker_go_r, 0)  # running: the handler's call fails
        helpers.wait_bytes(blocker_r, 1)
        failed: list[str] = []

        def at(code_, offset):
            if offset == store and threading.current_thread() is threading.main_thread() and not failed:
                try:  # (what a signal handler run here would do)
                    blocker.result(timeout=0.01)
                except TimeoutError:
                    failed.append("the handler's call failed")
                os.write(outer_go_w, b"g")  # (now the outer task may finish)
                return sys.monitoring.DISABLE
            return None

        try:
            outer = ex.submit(helpers.gated, outer_w, outer_go_r, 7)
            helpers.wait_bytes(outer_r, 1)  # (running: its wait registers a pipe)
            with _monitored(code, sys.monitoring.events.INSTRUCTION, at):
                assert outer.result(timeout=20) == 7
        finally:
            os.write(blocker_go_w, b"g")
        assert failed == ["the handler's call failed"]
        assert blocker.result(timeout=20) == 0
        free = list(_wakeup._free)
        assert len(free) == len(set(free)), free
        assert not _wakeup.lent()
    for fd in (blocker_r, blocker_w, blocker_go_r, blocker_go_w, outer_r, outer_w, outer_go_r, outer_go_w):
        os.close(fd)


RECYCLED_UNDER_A_TAKE = (
    SCRIPT_PROLOGUE
    + """
import time

with InterpreterPoolExecutor(1, max_tasks_per_child=1) as ex:
    pool = ex._pool
    code, return_line = line_of(type(pool)._take_queued, "return taken")
    free = hold_resolver(ex)
    (worker,) = pool.workers.values()
    deadline = time.monotonic() + 20

    def next_interpreter(after):  # (a state of the worker, not a delay)
        while worker.interp_id in (after, None) and time.monotonic() < deadline:
            os.sched_yield()
        return worker.interp_id

    fresh = next_interpreter(ex.submit(h.current_interp_id).result(timeout=20))
    last_take, main_takes = threading.Event(), threading.Event()
    take_results = pool.take_results

    def take_results_and_tell(final=False):  # (the worker's last take, before it destroys its interpreter)
        if final:
            # The main thread's take first (a state, not a delay): a last take
            # that came first would take the result itself, and the main
            # thread would never be inside a take while the worker ends.
            main_takes.wait(20)
            last_take.set()
        return take_results(final)

    pool.take_results = take_results_and_tell
    seen = []

    def at(line):  # (the take done, arrived empty: the worker ends meanwhile)
        if threading.current_thread() is threading.main_thread():
            main_takes.set()
        if first_in_main(line, return_line, seen):
            seen.append(last_take.wait(20))
            return sys.monitoring.DISABLE
        return None

    on_lines(code, at)
    fut = ex.submit(h.buffer_and_interp_id, 100)
    assert fut.result(timeout=20) == (bytearray(100), fresh)
    off_lines(code)
    free.set()
    assert seen == [True], seen
    assert next_interpreter(fresh) not in (fresh, None)  # (the worker went on, once the take had ended)
    assert ex.submit(h.identity, 2).result(timeout=20) == 2
print("ok")
"""
)


@pytest.mark.timeout(60)
def test_a_worker_recycled_right_after_the_main_thread_took_its_result():
    """A take of results kept a reference to the last original message (its
    views of the worker's memory) after moving it on, until it returned; a
    worker that ended meanwhile saw nothing left to take, destroyed its
    interpreter, and releasing those views then crashed 3.13 (found by this
    stop's second review).  Now no reference is kept, and a worker's last
    take waits for any take in progress.  The main thread is held at the end
    of its take until the worker has begun its last take (before either fix,
    the worker went on at once to destroy its interpreter).  Run in a script:
    a crash ends it, not the test session."""
    proc = run_script(RECYCLED_UNDER_A_TAKE, as_c=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stdout + proc.stderr


@pytest.mark.timeout(60)
def test_a_signal_handler_waiting_inside_submit_for_a_result_another_thread_holds():
    """A signal handler, run while the main thread is inside ``submit()``
    holding the pool's lock, waits for a result that another thread has taken
    off the queue and, about to handle it, waits for that lock: the message
    was only in that thread's hands, so the handler waited for ever (seen
    under this stop's SIGALRM storm with ``idle_timeout``).  That thread now
    shows the message (``stalled``) and wakes the wait, whose collect handles
    it.  Here another thread takes the result and delivers it while the main
    thread holds the lock."""
    from interpexec import _compat

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        with _resolver_held_busy(ex):
            fut = ex.submit(fh.ok, 5)
            _until(lambda: _compat.queue_count(pool.results.qid) >= 1, "the result queued")

            def deliver() -> None:
                with pool.collect_lock:
                    pool._take_queued()  # (into the inbox; the window is left to _handle)
                pool._deliver()

            deliverer = threading.Thread(target=deliver, name="deliverer")
            with pool.lock:  # (as submit() holds it)
                deliverer.start()
                _until(lambda: pool.stalled, "the other thread waiting for the lock, the result in hand")
                assert fut.result(timeout=10) == 5  # (what a signal handler run here would do)
            deliverer.join(20)
            assert not deliverer.is_alive()
        assert not pool.stalled and not pool.inflight
        assert ex.submit(fh.ok, 6).result(timeout=30) == 6


@pytest.mark.timeout(60)
def test_a_signal_handler_waiting_inside_submit_for_a_result_another_waiter_took():
    """As above, but the thread with the result in hand is another waiter for
    the same future (its pipe is the registered one, so the worker woke only
    it): it took the result into the inbox and waited for the pool's lock to
    move its task out of the window, and nothing woke the handler's wait
    (found by this stop's third review).  A thread that takes results and
    finds the lock taken now wakes the waits for them."""
    from interpexec._executor import _enqueue
    from interpexec._future import PipeWaiter

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        arrived_r, arrived_w = os.pipe()
        go_r, go_w = os.pipe()
        fut = ex.submit(helpers.gated, arrived_w, go_r, 7)
        helpers.wait_bytes(arrived_r, 1)
        other: list[object] = []
        waiter = threading.Thread(target=lambda: other.append(fut.result(timeout=20)), name="other waiter")
        waiter.start()
        _until(lambda: pool.inflight[fut._ie_tid].waiter_fd, "the other waiter registered")

        def finish_once_the_handler_waits() -> None:  # (a state, not a delay)
            _until(lambda: any(type(w) is PipeWaiter for w in fut._waiters), "the handler's wait")
            os.write(go_w, b"g")

        code = _enqueue.__code__  # (submit()'s locked part)
        line = next(n for _, _, n in code.co_lines() if n and "_exiting" in _line_text(code, n))
        seen: list[object] = []

        def at(code_, line_):
            if line_ == line and threading.current_thread() is threading.main_thread() and not seen:
                threading.Thread(target=finish_once_the_handler_waits).start()
                try:  # (what a signal handler run here, inside submit(), would do)
                    seen.append(fut.result(timeout=10))
                except BaseException as exc:
                    seen.append(exc)
                return sys.monitoring.DISABLE
            return None

        with _monitored(code, sys.monitoring.events.LINE, at):
            after = ex.submit(fh.ok, 1)
        assert seen == [7]
        waiter.join(20)
        assert other == [7]
        assert after.result(timeout=20) == 1
    for fd in (arrived_r, arrived_w, go_r, go_w):
        os.close(fd)


@pytest.mark.timeout(60)
def test_a_result_stalled_before_a_handlers_wait_joined_the_waiters_is_handled():
    """The handler's wait (no pipe of its own: another wait holds the task's
    slot, here an event loop's watch) joins the future's waiters list after
    the thread with the result stalled and woke the waiters it saw: it slept
    without looking (found by this stop's third review).  It now collects
    once it has joined the list."""
    from interpexec import _compat
    from interpexec._waiting import Waiting

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        arrived_r, arrived_w = os.pipe()
        go_r, go_w = os.pipe()
        with _resolver_held_busy(ex):
            fut = ex.submit(helpers.gated, arrived_w, go_r, 7)
            helpers.wait_bytes(arrived_r, 1)
            watch = ex.watch(fut)  # (as an event loop's: the handler's wait gets no pipe)
            assert watch is not None

            def deliver() -> None:
                with pool.collect_lock:
                    pool._take_queued()
                pool._deliver()

            deliverer = threading.Thread(target=deliver, name="deliverer")
            code = Waiting._wait_done.__code__
            line = next(n for _, _, n in code.co_lines() if n and "with fut._condition:" in _line_text(code, n))
            stalled: list[bool] = []

            def at(code_, line_):  # (before the wait joins the waiters: the result comes and stalls)
                if line_ == line and threading.current_thread() is threading.main_thread() and not stalled:
                    os.write(go_w, b"g")
                    _until(lambda: _compat.queue_count(pool.results.qid) >= 1, "the result queued")
                    deliverer.start()
                    _until(lambda: pool.stalled, "the other thread waiting for the lock, the result in hand")
                    stalled.append(True)
                    return sys.monitoring.DISABLE
                return None

            with _monitored(code, sys.monitoring.events.LINE, at), pool.lock:  # (as submit() holds it)
                assert fut.result(timeout=10) == 7  # (what a signal handler run here would do)
            assert stalled == [True]
            deliverer.join(20)
            watch.close()
        assert not pool.stalled
        assert ex.submit(fh.ok, 1).result(timeout=20) == 1
    for fd in (arrived_r, arrived_w, go_r, go_w):
        os.close(fd)


def _line_text(code, n):
    import linecache

    return linecache.getline(code.co_filename, n)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("then", ["result", "resolver", "callback"])
def test_calls_a_ctrl_c_left_queued_with_room_in_the_window_are_still_sent(then):
    """A Ctrl-C in ``submit()`` while it made room in a full window (it
    collected the last results in flight, then dispatched the queued calls)
    puts the call it was moving back in ``pending`` and ends the dispatch: the
    queued calls, each returned by an earlier ``submit()``, had a free window
    and nothing in flight whose result would dispatch them.  Nobody sent them,
    and ``result()`` on any of them waited for ever (found by the step test,
    about one run in six).  Now a thread that waits in ``result()`` sends them,
    and so does the resolver, woken by the dispatch cut short, in its loop and
    in a done-callback's wait."""
    from interpexec import _compat

    q = interpexec.Queue()
    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        code = type(pool).dispatch_locked.__code__
        popped = next(n for _, _, n in code.co_lines() if n and "pending.popleft()" in _line_text(code, n))
        after = min(n for _, _, n in code.co_lines() if n and n > popped)  # (the next line that runs)
        fired = []

        def at(code_, line):
            if line == after and threading.current_thread() is threading.main_thread() and not fired:
                fired.append(line)
                raise KeyboardInterrupt  # (a Ctrl-C right after the pop)
            return None

        # The resolver held in a done-callback (the main thread collects and
        # dispatches), which then waits for the queued calls itself ("callback").
        busy, go, held_done = threading.Event(), threading.Event(), threading.Event()
        queued: list[cf.Future] = []
        in_callback: list[object] = []

        def hold(f):
            busy.set()
            go.wait(20)
            if then == "callback":
                try:
                    in_callback.extend(g.result(timeout=20) for g in queued)
                except BaseException as exc:
                    in_callback.append(exc)
            held_done.set()

        ex.submit(fh.ok, "c").add_done_callback(hold)
        try:
            assert busy.wait(10)
            blockers = [ex.submit(fh.block_on_queue, q) for _ in range(pool.window - len(pool.inflight))]
            queued += [ex.submit(fh.ok, i) for i in range(5)]
            assert [f._state for f in queued] == ["PENDING"] * 5
            for _ in blockers:
                q.put("done")
            _until(lambda: _compat.queue_count(pool.results.qid) >= len(blockers), "the blockers' results queued")
            with _monitored(code, sys.monitoring.events.LINE, at), pytest.raises(KeyboardInterrupt):
                ex.submit(fh.ok, 99)  # (the window is full: it collects, then dispatches)
            assert fired and not pool.inflight and len(pool.pending) == 5
            if then == "result":  # (the resolver still held: the waiting thread itself sends them)
                got = [f.result(timeout=20) for f in queued]
            elif then == "resolver":  # (freed, it looks: another thread waits)
                go.set()
                got = []
                t = threading.Thread(target=lambda: got.extend(f.result(timeout=20) for f in queued))
                t.start()
                t.join(30)
            else:  # (freed, its callback waits for them: nobody else touches the pool)
                go.set()
                assert held_done.wait(30)
                got = in_callback
        finally:
            go.set()
        assert got == list(range(5))
        assert [f.result(timeout=20) for f in blockers] == ["done"] * len(blockers)
        assert ex.submit(fh.ok, 6).result(timeout=30) == 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["general", "inline"])
def test_a_signal_handler_waiting_for_the_result_its_thread_is_delivering(path):
    """A signal handler that waits for the very future whose result the main
    thread is in the middle of delivering (the message in ``held``, inside
    ``_handle``): collect()'s quick check looked at the queue, ``arrived`` and
    the inbox, not at ``held``, so the handler waited for a delivery nobody
    would make (found by stop 26's review, also seen under a SIGALRM storm).
    The handler is run in the main thread at the first line of ``_handle``
    (a future with a done-callback), or where ``_deliver_in_main`` looks at
    the message on its inline path (one without)."""
    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        if path == "general":
            code = type(pool)._handle.__code__
            line_wanted = None
        else:
            code = type(pool)._deliver_in_main.__code__
            line_wanted = next(n for _, _, n in code.co_lines() if n and "= _plain(msg)" in _line_text(code, n))
        nested: list[object] = []
        box: list[object] = []

        def at(code_, line):
            if line_wanted is not None and line != line_wanted:
                return None
            if threading.current_thread() is threading.main_thread() and box and not nested:
                try:  # (what a signal handler run here would do)
                    nested.append(box[0].result(timeout=10))
                except BaseException as exc:
                    nested.append(exc)
                return sys.monitoring.DISABLE
            return None

        with _resolver_held_busy(ex):  # (the main thread delivers its result itself)
            box.append(ex.submit(fh.ok, 5))
            if path == "general":
                box[0].add_done_callback(lambda f: None)
            with _monitored(code, sys.monitoring.events.LINE, at):
                assert box[0].result(timeout=30) == 5
        assert nested == [5]
        assert not pool.held
        assert ex.submit(fh.ok, 6).result(timeout=30) == 6


@pytest.mark.timeout(60)
def test_stats_racing_a_shutdown_in_another_thread_does_not_fail():
    """``stats()`` (like ``result()``) first checks, without a lock, whether
    results are queued: a shutdown in another thread could close the pool
    between its look at ``closed`` and its look at the queue, which then no
    longer existed (QueueNotFoundError out of stats(), seen in a churn test on
    3.14).  The stats() thread is held at exactly that point here."""
    import dis

    from interpexec import _resolver

    with InterpreterPoolExecutor(1) as ex:
        assert ex.submit(fh.ok, 1).result(timeout=30) == 1
        pool = ex._pool
        code = _resolver.Resolver.collect.__code__
        counts = [i.offset for i in dis.get_instructions(code) if i.argval == "queue_count_if_open"]
        assert counts, "collect() no longer checks the queue"
        held, closed = threading.Event(), threading.Event()

        def at(code_, offset):
            if offset == counts[0] and threading.current_thread().name == "stats-caller":
                held.set()
                closed.wait(20)
                return sys.monitoring.DISABLE
            return None

        out: list[object] = []

        def stats_caller():
            try:
                out.append(ex.stats()["completed"])
            except BaseException as exc:
                out.append(exc)

        with _monitored(code, sys.monitoring.events.INSTRUCTION, at):
            try:
                caller = threading.Thread(target=stats_caller, name="stats-caller")
                caller.start()
                assert held.wait(20)
                ex.shutdown(wait=True)
                assert pool.closed
            finally:
                closed.set()
            caller.join(20)
        assert out == [1]


TRACING_SCRIPT = """
import tracemalloc
from interpexec import BrokenInterpreterPool, InterpreterPoolExecutor

tracemalloc.start()
with InterpreterPoolExecutor(2) as ex:
    for i in range(4):
        try:  # (the first submit's future fails; later submits may fail at once)
            print("ran", ex.submit(abs, -i).result(timeout=20))
        except BrokenInterpreterPool as exc:
            print("refused:", "tracemalloc.stop()" in str(exc))
tracemalloc.stop()
with InterpreterPoolExecutor(2) as ex:
    print(sum(ex.map(abs, range(-5, 5))))
"""


@pytest.mark.timeout(60)
def test_a_pool_refuses_to_start_workers_while_tracemalloc_traces():
    """Creating a subinterpreter while tracemalloc traces crashes 3.14.10
    (SIGSEGV) and 3.13.0 at exit (CPython gh-134604, gh-144172): the pool
    refuses to, and its futures fail with BrokenInterpreterPool saying why and
    what to do; once tracing stops, a new pool works."""
    proc = run_script(TRACING_SCRIPT, as_c=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "refused: True\n" * 4 + "25\n", proc.stdout + proc.stderr


@pytest.mark.timeout(60)
def test_a_map_iterator_a_ctrl_c_cut_short_in_its_creation_is_collected_quietly(capsys):
    """A Ctrl-C landing inside ``MapIterator.__init__`` left an object without
    its futures; collecting it printed "Exception ignored ... AttributeError"."""
    import gc

    from interpexec import _map

    it = _map.MapIterator.__new__(_map.MapIterator)
    it.close()
    del it
    gc.collect()
    assert "Exception ignored" not in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("raised_by", ["the queue", "a signal handler right after the put"])
def test_an_exception_at_the_task_put_fails_the_future_only_if_the_put_failed(raised_by, monkeypatch):
    """A put the task queue refuses fails that future only.  An exception a
    signal handler raises right after a successful put used to be taken for
    the put's own: the future failed with it though its task ran, and the
    handler's exception never reached the program.  It now propagates from the
    call that was running, and the task's result is delivered as usual."""
    from interpexec import _dispatch

    class HandlerError(Exception):
        pass

    q = interpexec.Queue()
    with InterpreterPoolExecutor(1) as ex:
        ex.submit(fh.ok, 0).result(timeout=30)
        put = _dispatch.QUEUE_PUT
        sent = []

        def handler():
            raise HandlerError("from the handler")

        def put_then_a_handler(qid, msg, *tail):
            put(qid, msg, *tail)
            sent.append(msg[0])
            handler()

        monkeypatch.setattr(_dispatch, "QUEUE_PUT", int if raised_by == "the queue" else put_then_a_handler)
        if raised_by == "the queue":  # (int(qid, msg, ...) raises TypeError in C, as a refused put does)
            fut = ex.submit(q.put, "ran")
            monkeypatch.undo()
            assert isinstance(fut.exception(timeout=30), TypeError)
            assert ex._pool.inflight.get(fut._ie_tid) is None
        else:
            with pytest.raises(HandlerError):
                ex.submit(q.put, "ran")
            monkeypatch.undo()
            assert q.get(timeout=30) == "ran"  # the task was sent, and ran once
            tid = sent[0]
            _until(lambda: tid not in ex._pool.inflight and tid not in ex._pool.unsettled, "its result delivered")
        assert ex.submit(fh.ok, 4).result(timeout=30) == 4
        assert q.empty()


@pytest.mark.timeout(60)
def test_a_ctrl_c_as_the_main_thread_hands_callbacks_to_the_resolver_loses_none(monkeypatch):
    """The main thread, delivering results inside its own ``result()`` wait,
    hands a finished future's done-callbacks to the resolver (it does not run
    them: it may hold a lock they take).  A Ctrl-C landing in that step must
    neither skip the callbacks (the future is finished already) nor run them
    twice: it is held back over it, and raised after.  The Ctrl-C is a real
    SIGINT sent from inside that step."""
    import time as _time

    from interpexec import _compat

    with InterpreterPoolExecutor(2) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        ran = []
        with _resolver_held_busy(ex):
            b = ex.submit(fh.ok, "b")
            b.add_done_callback(lambda f: ran.append((f, threading.current_thread())))
            _until(lambda: _compat.queue_count(pool.results.qid) >= 1, "b's result queued")
            a = ex.submit(fh.ok, "a")
            hand_over = pool.run_callbacks_later
            sent = []

            def hand_over_with_a_ctrl_c_inside(fut):
                if not sent:
                    sent.append(True)
                    os.kill(os.getpid(), signal.SIGINT)
                    _time.sleep(0)  # (a call: where the handler would run, were it not held back)
                return hand_over(fut)

            monkeypatch.setattr(pool, "run_callbacks_later", hand_over_with_a_ctrl_c_inside)
            with pytest.raises(KeyboardInterrupt):
                a.result(timeout=30)  # (delivers b first, inside its own wait)
            monkeypatch.undo()
            assert sent == [True]
            assert b.result(timeout=0) == "b"
            assert not ran  # (the resolver is still busy)
        _until(lambda: ran, "b's callback run by the resolver")
        assert a.result(timeout=30) == "a"
        ex.shutdown(wait=True)  # (the resolver ends: whatever it had to run has run)
        assert ran == [(b, pool.resolver_thread)]  # once, on the resolver


@pytest.mark.timeout(60)
def test_the_pool_works_when_threading_rlock_is_the_pure_python_one(monkeypatch):
    """gevent's ``patch_thread()`` (and lock-tracing tools) make
    ``threading.RLock()`` return the pure-Python RLock; the pool's own locks
    must still be the C ones its lock-level bookkeeping reads."""
    monkeypatch.setattr(threading, "_CRLock", None)
    assert type(threading.RLock()).__module__ == "threading"
    with InterpreterPoolExecutor(2) as ex:
        assert ex.submit(fh.ok, 1).result(timeout=30) == 1
        assert list(ex.map(fh.ok, range(5), timeout=30)) == list(range(5))
        with pytest.raises(cf.TimeoutError):
            ex.submit(fh.block_in_c, 0.5).result(timeout=0)


#: The main thread's pool code a signal handler can interrupt (and call the pool).
def _main_thread_pool_functions():
    from interpexec._dispatch import Dispatcher
    from interpexec._executor import InterpreterPoolExecutor as Executor
    from interpexec._executor import _enqueue
    from interpexec._future import PoolFuture
    from interpexec._resolver import Resolver
    from interpexec._waiting import Waiting, Watch

    return [
        Resolver.take_results,
        Resolver._take_queued,
        Resolver.collect,
        Resolver._deliver_in_main,
        Resolver._handle,
        Dispatcher.dispatch_locked,
        Dispatcher.enqueue_locked,
        Waiting.abandon_waits,
        Waiting.wait_for,
        Watch.check,
        PoolFuture.result,
        PoolFuture._settle,
        PoolFuture._finish,
        Resolver.run_callbacks_later,
        Executor._submit,
        _enqueue,
    ]


@pytest.mark.timeout(120)
def test_a_pool_call_at_every_point_a_signal_handler_can_run_in_the_main_threads_pool_code():
    """A signal handler runs in the main thread after a call, at a function's
    start or at a loop's jump back, inside the pool's own code too, and may call
    the pool.  At each such point of the main thread's pool functions in turn
    (``sys.monitoring`` finds them), a "handler" submits a call and polls every
    future with ``result(timeout=0)`` while the main thread collects results
    itself (the resolver held busy): nothing but a timeout may come out of
    either, every future resolves with its value, every done-callback runs
    once, and no lock or task is left behind.  (After a reviewer's harness;
    it found IndexError, KeyError, QueueEmpty, "deque mutated during
    iteration" and "cannot release un-acquired lock" escaping.)"""
    import collections
    import dis
    import sys
    import traceback

    main = threading.get_ident()
    functions = _main_thread_pool_functions()
    points = {}
    for fn in functions:
        found, after_call = {-1}, False
        for ins in dis.get_instructions(fn.__code__):
            if after_call or ins.opname == "JUMP_BACKWARD":
                found.add(ins.offset)
            after_call = ins.opname.startswith("CALL") and not ins.opname.startswith("CALL_INTRINSIC")
        points[fn.__code__] = found
    state = {"target": None, "hit": False, "on": False, "seen": set()}
    futures: list[cf.Future] = []
    problems: list[str] = []
    ex = InterpreterPoolExecutor(2)

    def handler() -> None:
        try:
            futures.append(ex.submit(fh.ok, len(futures)))
        except Exception as exc:
            problems.append(f"{state['target']} handler submit: {traceback.format_exception(exc)[-3:]}")
        for f in list(futures):
            try:
                f.result(timeout=0)
            except cf.TimeoutError:
                pass
            except Exception as exc:
                problems.append(f"{state['target']} handler result: {traceback.format_exception(exc)[-3:]}")

    def at_instruction(code, offset):
        if not state["on"] or threading.get_ident() != main or offset not in points[code]:
            return
        key = (code.co_qualname, offset)
        state["seen"].add(key)
        if key == state["target"] and not state["hit"]:
            state["hit"] = True
            state["on"] = False
            try:
                handler()
            finally:
                state["on"] = True

    def park_resolver():
        """Hold the resolver in a done-callback until released (the main thread
        collects meanwhile); returns the release event."""
        while True:
            parked, release, here = threading.Event(), threading.Event(), []

            def park(f, here=here, parked=parked, release=release):
                if threading.get_ident() == main:
                    here.append(f)  # (delivered by the main thread: try again)
                    return
                parked.set()
                release.wait(60)

            ex.submit(fh.ok, 0).add_done_callback(park)
            if not here:
                assert parked.wait(20)
                return release

    ran: collections.Counter[int] = collections.Counter()
    everyone: list[tuple[object, cf.Future]] = []  # (kept alive: ran is keyed by id)

    def batch(n: int) -> None:
        del futures[:]
        release = park_resolver()
        mine = []
        try:
            for i in range(n):
                f = ex.submit(fh.ok, 1000 + i)
                f.add_done_callback(lambda f: ran.update([id(f)]))
                mine.append(f)
                futures.append(f)
            state["on"] = True
            try:
                for f in reversed(mine):
                    try:
                        f.result(timeout=20)
                    except Exception as exc:
                        problems.append(f"{state['target']} outer: {traceback.format_exception(exc)[-3:]}")
            finally:
                state["on"] = False
        finally:
            release.set()
        for f in list(futures):
            try:
                f.result(timeout=20)
            except Exception as exc:
                problems.append(f"{state['target']} afterwards: {exc!r}")
        assert [f.result() for f in mine] == [1000 + i for i in range(n)]
        # (The callbacks run on the resolver, now free: whether each ran once
        # is checked once it has ended.)
        everyone.extend((state["target"], f) for f in mine)
        _until(lambda: all(ran[id(f)] for f in mine), "every done-callback run")
        pool = ex._pool
        for name, lock in (("the pool's lock", pool.lock), ("the collect lock", pool.collect_lock)):
            if lock._is_owned():
                problems.append(f"{state['target']}: {name} left held")
        _until(lambda: not pool.inflight, "every task settled")

    tool = sys.monitoring.PROFILER_ID
    sys.monitoring.use_tool_id(tool, "interpexec-test")
    try:
        events = sys.monitoring.events
        sys.monitoring.register_callback(tool, events.INSTRUCTION, at_instruction)
        sys.monitoring.register_callback(tool, events.PY_START, lambda code, offset: at_instruction(code, -1))
        for fn in functions:
            sys.monitoring.set_local_events(tool, fn.__code__, events.INSTRUCTION | events.PY_START)
        ex.submit(fh.ok, 1).result(timeout=30)
        state["target"] = ("none", 0)
        batch(6)
        todo, done = sorted(state["seen"]), set()
        while todo:
            target = todo.pop(0)
            if target in done:
                continue
            done.add(target)
            state["target"], state["hit"] = target, False
            batch(6)
            todo += sorted(state["seen"] - done)
            state["seen"] = set(done)
        assert len(done) > 40  # (the points were found and visited)
    finally:
        for fn in functions:
            sys.monitoring.set_local_events(tool, fn.__code__, 0)
        sys.monitoring.register_callback(tool, sys.monitoring.events.INSTRUCTION, None)
        sys.monitoring.register_callback(tool, sys.monitoring.events.PY_START, None)
        sys.monitoring.free_tool_id(tool)
        ex.shutdown(wait=True)
    for target, f in everyone:
        if ran[id(f)] != 1:
            problems.append(f"{target}: a done-callback ran {ran[id(f)]} times")
    assert not problems, problems[:5]


@pytest.mark.timeout(60)
def test_waiting_for_worker_events_without_the_lock_is_refused():
    """Like ``threading.Condition.wait``: the main thread's pipe-based wait for
    the pool's worker events refuses a caller that does not hold the lock
    (it used to release nothing, then take the lock for good at count 0)."""
    from interpexec import _compat, _state

    lock = _compat.RLock()
    events = _state.Events(lock)
    with pytest.raises(RuntimeError, match="un-acquired"):
        events.wait(0.01)
    assert not lock._is_owned()
    assert lock.acquire(blocking=False)
    lock.release()


def _with_on_condition(fut):
    with fut._condition:
        return fut._state


def _interrupted_calls(call, make, seconds):
    """Call ``call(make())`` over and over for ``seconds`` under a SIGALRM storm
    (every 50 us) whose handler raises KeyboardInterrupt once per arming; return
    (interrupts, futures whose lock an interrupt left held)."""
    import time

    from interpexec import _compat

    armed = [False]

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    def calls(fut):
        # (A loop of its own: a signal handler's exception raised at a loop's
        # jump back can miss the try around the loop on 3.13-3.14,
        # CPython gh-130279; here it ends this function, caught by the caller.)
        for _ in range(200):
            call(fut)
            fut = make()

    interrupts, leaks = 0, 0
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            fut = make()
            try:
                armed[0] = True
                calls(fut)
                armed[0] = False
            except KeyboardInterrupt as exc:
                interrupts += 1
                # (The future the interrupt caught: the newest local of calls'.)
                tb = exc.__traceback__
                while tb is not None and tb.tb_frame.f_code is not calls.__code__:
                    tb = tb.tb_next
                held = tb.tb_frame.f_locals["fut"] if tb is not None else fut
                if _compat.lock_level(held._condition):
                    leaks += 1
                    _compat.release_if_owned(held._condition)
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        # (SIG_IGN, not the default, which would end the process on a last
        # alarm already on its way to another thread.)
        signal.signal(signal.SIGALRM, signal.SIG_IGN if old in (None, signal.SIG_DFL) else old)
    return interrupts, leaks


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["with", "done", "dispatch", "set_result"])
def test_a_ctrl_c_storm_never_leaves_a_futures_lock_held(where):
    """CPython 3.14 runs signal handlers right after a ``with``'s C ``__enter__``
    returns, before the block is protected (gh-148874): a Ctrl-C there left a
    future's lock held by the main thread, and the resolver, which takes it to
    settle or start that future, blocked on it for ever, with the pool.  Every
    ``with`` on a future's condition counts: ours, and the standard ``Future``
    methods'.  After each interrupt of a storm, the future's lock must be free
    (3.14.10 without the fix: about every second interrupt left it held)."""
    from interpexec._future import PoolFuture, start_running, start_running_locked

    def make():
        fut = PoolFuture(None, 1)
        if where == "set_result":
            start_running(fut)
        return fut

    call = {
        "with": _with_on_condition,
        "done": lambda fut: fut.done(),
        "dispatch": start_running_locked,
        "set_result": lambda fut: fut.set_result(1),
    }[where]
    interrupts, leaks = _interrupted_calls(call, make, 1.5)
    assert interrupts > 100  # (the storm reached the calls)
    assert leaks == 0, f"{leaks} of {interrupts} interrupts left the future's lock held"


class _InterruptedStart(threading.Thread):
    """A thread whose start() raises KeyboardInterrupt (as a signal handler's
    exception does while start() waits for the new thread to run), ``when``
    "after" the OS thread started or "before" it did, once per test."""

    when = "after"
    fired = False

    def start(self):
        if not _InterruptedStart.fired and self.when == "before":
            _InterruptedStart.fired = True
            raise KeyboardInterrupt
        if not _InterruptedStart.fired and self.when == "leak":
            # As CPython's Event.wait does when the exception lands right
            # after its Condition took the lock: kept by this thread, and the
            # new thread blocks setting the event.
            _InterruptedStart.fired = True
            event = self._started

            def leaky_wait(timeout=None):
                event._cond.__enter__()
                raise KeyboardInterrupt

            event.wait = leaky_wait
        super().start()
        if not _InterruptedStart.fired:
            _InterruptedStart.fired = True
            raise KeyboardInterrupt


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["before", "after", "leak"])
@pytest.mark.parametrize("which", ["resolver", "worker"])
def test_a_thread_start_cut_short_by_an_exception_leaves_one_resolver_and_no_phantom_worker(monkeypatch, which, when):
    """``Thread.start()`` waits in Python for the new thread to run, so an
    exception a signal handler raises (one the pool does not hold back, as it
    holds back Ctrl-C) can leave it before or after the OS thread started, or
    with its start event's lock kept, the new thread blocked on it for ever.  The
    pool must count the thread as it is: a resolver started anyway is the only
    one (a second start made three resolvers run at once under a signal storm),
    a worker that never started is not counted (it would never take work, nor
    end, and shutdown would wait for it)."""
    import types

    from interpexec import _resolver, _worker

    monkeypatch.setattr(_InterruptedStart, "when", when)
    monkeypatch.setattr(_InterruptedStart, "fired", False)
    target = _resolver if which == "resolver" else _worker
    fake = types.SimpleNamespace(**vars(threading))
    fake.Thread = _InterruptedStart
    monkeypatch.setattr(target, "threading", fake)
    before = set(threading.enumerate())
    ex = InterpreterPoolExecutor(2)
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.submit(fh.ok, 0)
        futures = [ex.submit(fh.ok, i) for i in range(1, 20)]
        assert [f.result(timeout=30) for f in futures] == list(range(1, 20))
        resolvers = [t for t in threading.enumerate() if t not in before and t.name.endswith("_resolver")]
        assert len(resolvers) == 1, resolvers
        assert ex._pool.resolver_thread is resolvers[0]
        stats = ex.stats()
        # (The interrupted submit raised before it queued its call: that never runs.)
        assert (stats["completed"], stats["pending"], stats["in_flight"]) == (19, 0, 0)
    finally:
        ex.shutdown(wait=True)
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not [t for t in threading.enumerate() if t not in before]  # (none left listed, started or not)


@pytest.mark.timeout(60)
def test_a_dispatch_never_waits_for_a_pending_futures_lock_another_thread_holds():
    """The main thread can hold a pending future's lock in an outer frame
    (registering its wait for it, or inside ``concurrent.futures.wait()``)
    while a signal handler run there waits for the pool's lock (a
    ``submit()``).  The dispatcher, under the pool's lock, waited for that
    future's lock: both waited for ever (seen under a signal storm on 3.14 and
    3.15).  Here the lock is held while the resolver dispatches the future:
    the future must start, and a submit must get through, meanwhile."""
    q = interpexec.Queue()
    with InterpreterPoolExecutor(1) as ex:
        blocker = ex.submit(fh.block_on_queue, q)
        _until(lambda: blocker.running() and not ex._pool.pending and q.qsize() == 0, "the worker busy")
        queued = [ex.submit(fh.ok, i) for i in range(ex._pool.window + 3)]  # (the last ones wait in pending)
        last = queued[-1]
        assert last._state == "PENDING" and ex._pool.pending
        with last._condition:  # (as the main thread's outer frame would)
            q.put("go")  # the blocker returns; the resolver dispatches what waits
            _until(lambda: last._state == "RUNNING", "the future started while its lock is held elsewhere")
            extra = ex.submit(fh.ok, "extra")  # (the pool's lock is free again)
        assert [f.result(timeout=30) for f in queued] == list(range(len(queued)))
        assert extra.result(timeout=30) == "extra"
        assert blocker.result(timeout=30) == "go"
        # (cancel() still has its meaning: a pending future is cancelled, a started one is not.)
        assert not last.cancel()


@pytest.mark.timeout(60)
def test_shutdown_right_after_a_first_submit_cut_short_between_the_resolver_and_the_workers(monkeypatch):
    """The first submit cut short by a signal handler's exception right after
    the resolver started, before the workers: the pool is not "started", but its
    resolver runs.  ``shutdown()`` closed the channels under it (the resolver
    died of EBADF reading its pipe, or read a descriptor reused meanwhile);
    now the resolver, woken, ends and closes them itself."""
    import types

    from interpexec import _resolver

    monkeypatch.setattr(_InterruptedStart, "when", "after")
    monkeypatch.setattr(_InterruptedStart, "fired", False)
    fake = types.SimpleNamespace(**vars(threading))
    fake.Thread = _InterruptedStart
    monkeypatch.setattr(_resolver, "threading", fake)
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    ex = InterpreterPoolExecutor(2)
    with pytest.raises(KeyboardInterrupt):
        ex.submit(fh.ok, 0)
    pool = ex._pool
    resolver = pool.resolver_thread
    assert resolver is not None and not pool.started
    ex.shutdown(wait=True)
    resolver.join(timeout=30)
    assert not resolver.is_alive()
    assert pool.closed and pool.resolver_finished
    assert errors == []


@pytest.mark.timeout(60)
def test_release_future_locks_finds_the_future_dispatch_is_putting_in_a_call_cell():
    """BUG (found by a hostile review on 3.13): ``release_future_locks()``
    (what ``shutdown()`` and the exit do first, to free a future's lock a Ctrl-C
    left held inside ``concurrent.futures.wait()``) looked for the future
    dispatch was moving in ``dispatching``, ``pending`` and ``inflight``; while
    the dispatcher wrote the task's call cell, it was in none of them, so the
    lock stayed held and the resolver would later wait for it for ever.  The
    dispatcher (the resolver thread, once a window slot frees) is held exactly
    there."""
    from interpexec import Queue
    from interpexec._compat import lock_level

    with InterpreterPoolExecutor(1) as ex:
        ex.prestart(wait=True)
        pool = ex._pool
        gate = Queue()
        blocked = [ex.submit(fh.block_on_queue, gate) for _ in range(pool.window)]
        fut = ex.submit(fh.ok, 7)
        assert fut._state == "PENDING"  # (the window is full)
        in_cell, go = threading.Event(), threading.Event()
        own_in_cell = pool._in_cell

        def held_in_cell(msg):
            if msg[0] == fut._ie_tid:
                in_cell.set()
                go.wait(20)
            return own_in_cell(msg)

        pool._in_cell = held_in_cell
        fut._condition.acquire()  # as a Ctrl-C inside concurrent.futures.wait() leaves it
        try:
            gate.put(None)  # one blocked task ends: the resolver dispatches ``fut``
            assert in_cell.wait(20), "dispatch never reached the call cell"
            pool.release_future_locks()
            level = lock_level(fut._condition)
        finally:
            go.set()
            while lock_level(fut._condition):
                fut._condition.release()
            del pool._in_cell
            for _ in blocked[1:]:
                gate.put(None)
        assert level == 0
        assert fut.result(timeout=20) == 7
        assert [f.result(timeout=20) for f in blocked] == [None] * len(blocked)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("then", ["result", "shutdown"])
def test_a_futures_lock_the_main_thread_left_held_holds_up_that_future_only(then):
    """A Ctrl-C inside ``concurrent.futures.wait()`` or ``as_completed()`` (the
    standard library takes the futures' locks in a Python loop) can leave some
    held by the main thread for good: acquired and never released, as done here
    on purpose.  The resolver waited for such a lock for ever to settle its
    future, and every result behind it waited too: the pool stopped.  Now that
    outcome waits aside and the rest flow; the main thread, which can take the
    lock, settles it in its own ``result()``, and ``shutdown()`` from the main
    thread releases such locks, so the future completes and its callbacks run."""
    q = interpexec.Queue()
    ran = []
    with InterpreterPoolExecutor(2) as ex:
        stuck = ex.submit(fh.block_on_queue, q)
        stuck.add_done_callback(lambda f: ran.append(f.result()))
        _until(stuck.running, "the stuck call running")
        stuck._condition.acquire()  # left held, as by a Ctrl-C inside cf.wait()
        q.put("late")  # (the call returns now: its result waits for that lock)
        # Results flow to a thread that relies on the resolver (as_completed
        # waits on the futures' conditions), and so do done-callbacks.
        others = [ex.submit(fh.ok, i) for i in range(50)]
        called = threading.Event()
        others[-1].add_done_callback(lambda f: called.set())
        got = []
        consumer = threading.Thread(target=lambda: got.extend(f.result() for f in cf.as_completed(others, timeout=20)))
        consumer.start()
        consumer.join(30)
        assert sorted(got) == list(range(50))
        assert called.wait(20)
        assert stuck._state == "RUNNING" and not ran
        if then == "result":
            assert stuck.result(timeout=20) == "late"  # (this thread holds the lock: it settles it)
            stuck._condition.release()
    # (shutdown: the with block's, from the main thread, releases the lock first)
    assert stuck.result(timeout=0) == "late"
    assert ran == ["late"]


@pytest.mark.timeout(60)
def test_a_parked_outcome_is_tried_again_every_park_retry_not_once_per_result():
    """An outcome parked because the main thread left its future's lock held
    (a Ctrl-C inside ``concurrent.futures.wait()`` leaves thousands at once) is
    tried again every ``parked_retry`` (doubling while none settles), as the
    docs say.  The resolver tried every parked outcome again on every pass
    of its loop, once per result or two while results flowed: each pass
    cost as much as the parked outcomes were many."""
    from interpexec._resolver import PARK_RETRY

    q = interpexec.Queue()
    with InterpreterPoolExecutor(2) as ex:
        pool = ex._pool
        stuck = ex.submit(fh.block_on_queue, q)
        _until(stuck.running, "the stuck call running")
        stuck._condition.acquire()  # left held, as by a Ctrl-C inside cf.wait()
        q.put("late")
        _until(lambda: pool.parked, "the outcome parked")
        tries = []
        retry_parked = pool.retry_parked

        def counted():
            if threading.get_ident() == pool.resolver_ident:
                tries.append(None)
            return retry_parked()

        pool.retry_parked = counted
        # Results flow through the resolver: submitted and waited for by
        # another thread (the main thread, which holds the lock, would settle
        # the parked outcome at its first collect).
        flowed = {}

        def flow():
            t0 = time.monotonic()
            fs = [ex.submit(fh.ok, i) for i in range(3000)]
            done, _ = cf.wait(fs, timeout=30)
            flowed["seconds"] = time.monotonic() - t0
            flowed["results"] = sorted(f.result() for f in done)

        t = threading.Thread(target=flow)
        t.start()
        t.join(40)
        del pool.retry_parked
        assert flowed["results"] == list(range(3000))
        assert stuck._state == "RUNNING" and pool.parked
        assert len(tries) <= flowed["seconds"] / PARK_RETRY + 3, (len(tries), flowed)
        assert stuck.result(timeout=20) == "late"  # (this thread holds the lock: it settles it)
        stuck._condition.release()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["add_done_callback", "set_result"])
def test_shutdown_in_a_done_callback_releases_a_lock_a_ctrl_c_left(where):
    """``shutdown()`` releases the futures' locks a Ctrl-C left held (inside
    ``concurrent.futures.wait()``), but not those a frame further up holds
    legitimately.  Called from a done-callback that the standard library runs
    in the main thread, whose frames hold no future's lock,
    it must still release them: it released nothing there, and waited for
    the resolver for ever."""
    q = interpexec.Queue()
    ex = InterpreterPoolExecutor(2)
    stuck = ex.submit(fh.block_on_queue, q)
    _until(stuck.running, "the stuck call running")
    stuck._condition.acquire()  # left held, as by a Ctrl-C inside cf.wait()
    q.put("late")
    returned = []

    def stop(_):
        ex.shutdown(wait=True)
        returned.append(True)

    other = cf.Future()
    if where == "set_result":
        other.add_done_callback(stop)
        other.set_result(None)
    else:
        other.set_result(None)
        other.add_done_callback(stop)  # (runs at once, in this thread)
    assert returned == [True]
    assert stuck.result(timeout=0) == "late"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("then", ["release", "shutdown"])
def test_a_pool_breaking_while_the_main_thread_holds_a_futures_lock_fails_the_others(tmp_path, then):
    """The pool breaks (its next interpreter's initializer fails) while the main
    thread holds, as a Ctrl-C inside ``concurrent.futures.wait()`` can leave it,
    the lock of a call still queued.  The resolver, which fails the queued
    calls, waited for that lock for ever: every call after it stayed pending,
    and a thread waiting on them waited for ever.  Now that failure waits aside
    and the others fail at once; the held one fails once the lock is let go,
    by the program or by ``shutdown()`` (which releases such locks: the
    failure waiting aside is in none of the pool's queues, and shutdown hung)."""
    mark = tmp_path / "fail-now"
    q = interpexec.Queue()
    ex = InterpreterPoolExecutor(1, initializer=fh.init_fails_once_marked, initargs=(str(mark),), max_tasks_per_child=1)
    try:
        said = interpexec.Queue()
        first = ex.submit(fh.say_then_block_on_queue, said, q)
        assert said.get(timeout=20) == "started"  # (its interpreter's initializer ran)
        held = ex.submit(fh.ok, 1)  # (queued behind it)
        others = [ex.submit(fh.ok, i) for i in range(2, 6)]
        held._condition.acquire()  # left held, as by a Ctrl-C inside cf.wait()
        try:
            mark.touch()
            q.put("x")  # the first call returns; the worker's next interpreter fails to start
            got = []
            waiter = threading.Thread(target=lambda: got.append(cf.wait(others, timeout=30)))
            waiter.start()
            waiter.join(40)
            assert got and not got[0].not_done, [f._state for f in others]
            for f in others:
                with pytest.raises(BrokenInterpreterPool):
                    f.result(timeout=0)
            assert first.result(timeout=0) == "x"
            assert not held.done()
            if then == "shutdown":
                ex.shutdown(wait=True)  # (releases the lock this thread holds: see release_future_locks)
                assert held.done()
        finally:
            if then == "release":
                held._condition.release()
        with pytest.raises(BrokenInterpreterPool):
            held.result(timeout=20)
    finally:
        ex.shutdown(wait=True)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("seed", [20261206])
def test_ctrl_c_storms_inside_cf_wait_leave_the_pool_working(seed):
    """Seeded: SIGINT every 0.2-2 ms while the main thread loops in
    ``concurrent.futures.wait()`` and ``as_completed()`` over 1,500 futures
    still running, catching ``KeyboardInterrupt`` and going on (locks left held
    by the standard library's loops: up to all of them).  Then the calls
    finish: a call submitted after them must reach a thread that relies on the
    resolver, and at the end every future has its value and callbacks ran
    once.  Before, the pool stalled in the first round."""
    import random
    import time

    rng = random.Random(seed)
    armed = [False]

    def handler(signum, frame):
        if armed[0]:  # (a second one can land while the first unwinds: that leaves locks held)
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    ran = collections.Counter()
    everything = []
    try:
        with InterpreterPoolExecutor(2) as ex:
            for _round in range(2):
                gate = interpexec.Queue()
                futs = [ex.submit(fh.block_on_queue, gate) for _ in range(1500)]
                for f in futs:
                    f.add_done_callback(lambda f: ran.update([id(f)]))
                everything += futs
                stop = threading.Event()

                def storm(stop=stop):
                    while not stop.wait(rng.uniform(0.0002, 0.002)):
                        os.kill(os.getpid(), signal.SIGINT)

                t = threading.Thread(target=storm, daemon=True)
                t.start()
                interrupts = 0
                end = time.monotonic() + 1.0
                released = False
                try:
                    while time.monotonic() < end:
                        try:
                            armed[0] = True
                            if rng.random() < 0.5:
                                cf.wait(futs, timeout=0.02)
                            else:
                                for _ in cf.as_completed(futs, timeout=0.02):
                                    pass
                            armed[0] = False
                        except KeyboardInterrupt:
                            armed[0] = False  # (first: no call before it, so no handler runs there)
                            interrupts += 1
                        except cf.TimeoutError:
                            armed[0] = False
                        except RuntimeError as exc:
                            # (A KeyboardInterrupt inside threading's own
                            # Event.wait makes its with release an unlocked
                            # lock: CPython's, not the pool's, as in
                            # test_stress.  3.15 words it "un-acquired lock".)
                            armed[0] = False
                            if "unlocked lock" not in str(exc) and "un-acquired lock" not in str(exc):
                                raise
                            interrupts += 1
                    stop.set()
                    t.join()
                    assert interrupts > 10  # (the storm reached the waits)
                finally:
                    armed[0] = False
                    stop.set()
                    for i in range(1500):  # (even on a failure: shutdown waits for the calls)
                        gate.put(i)
                    released = True
                assert released
                new = ex.submit(fh.ok, "new")
                with cf.ThreadPoolExecutor(1) as helper:  # (relies on the resolver)
                    got = helper.submit(_values_as_completed, [new]).result(40)
                assert got == ["new"], "the pool stalled"
    finally:
        signal.signal(signal.SIGINT, old)
    # (The with block's shutdown, from the main thread, released the locks left held.)
    assert sorted(f.result(timeout=0) for f in everything) == sorted(list(range(1500)) * 2)
    assert all(ran[id(f)] == 1 for f in everything)


def _values_as_completed(fs):
    return [f.result() for f in cf.as_completed(fs, timeout=30)]


@pytest.mark.timeout(60)
def test_shutdown_returns_once_a_result_waiting_aside_for_a_lock_settles():
    """A result arrives while another thread holds its future's lock (here a
    thread that took it and keeps it a while): the outcome waits aside.  The
    workers end meanwhile (a shutdown), and the resolver, which settled the
    outcome at a retry, then slept with no deadline: nothing would wake it
    again, and ``shutdown(wait=True)`` never returned.  (Found by review.)"""
    q = interpexec.Queue()
    ex = InterpreterPoolExecutor(2)
    x = ex.submit(fh.block_on_queue, q)
    _until(x.running, "x running")
    held, release = threading.Event(), threading.Event()

    def hold():
        with x._condition:
            held.set()
            release.wait(20)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    q.put("late")
    _until(lambda: ex._pool.parked, "the outcome parked")
    done = threading.Event()
    stopper = threading.Thread(target=lambda: (ex.shutdown(wait=True), done.set()))
    stopper.start()
    _until(lambda: not ex._pool.workers, "the workers gone")
    release.set()
    holder.join(10)
    assert done.wait(20), "shutdown(wait=True) did not return"
    assert x.result(timeout=0) == "late"


@pytest.mark.timeout(60)
def test_the_main_thread_never_waits_for_a_lock_another_thread_holds_to_settle_a_parked_outcome():
    """A thread inside ``cf.wait()`` took future M's lock and blocks on L's,
    which the main thread left held (a Ctrl-C in an earlier wait): M's result
    waits aside.  The main thread's next collect (here an unrelated
    ``result()``) settled parked outcomes waiting for their locks, M's too:
    it waited for that thread, which waits for it.  (Found by review.)"""
    q1, q2 = interpexec.Queue(), interpexec.Queue()
    with InterpreterPoolExecutor(2) as ex:
        a, b = ex.submit(fh.block_on_queue, q1), ex.submit(fh.block_on_queue, q2)
        _until(lambda: a.running() and b.running(), "both running")
        (fm, qm), (fl, ql) = sorted([(a, q1), (b, q2)], key=lambda p: id(p[0]))  # (cf.wait takes them in id order)
        fl._condition.acquire()  # left held, as by a Ctrl-C inside cf.wait()
        waiter = threading.Thread(target=lambda: cf.wait([fm, fl]), daemon=True)
        try:
            waiter.start()
            _until(lambda: _taken_by_another_thread(fm._condition), "M's lock taken by the waiting thread")
            qm.put("m")
            _until(lambda: ex._pool.parked, "M's outcome parked")
            assert ex.submit(fh.ok, 42).result(timeout=10) == 42
        finally:
            fl._condition.release()
            ql.put("l")
            waiter.join(10)
        assert (fm.result(timeout=10), fl.result(timeout=10)) == ("m", "l")


def _taken_by_another_thread(lock):
    if lock.acquire(False):
        lock.release()
        return False
    return True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["wait", "wait_first", "as_completed"])
def test_a_done_callback_waiting_with_concurrent_futures_for_calls_of_its_pool(how):
    """A done-callback (run on the resolver) that submits calls and waits for
    them with ``concurrent.futures.wait()`` or ``as_completed()``: nobody but
    the resolver delivers them, and it waited out its timeout, or for ever
    without one (``result()`` there already went on delivering).  More calls
    than the window, so that the nested delivery also dispatches the ones
    waiting.  (A timeout here only keeps a regression from hanging the run.)"""
    got, ran_in, returned = [], [], threading.Event()
    with InterpreterPoolExecutor(2) as ex:
        n = ex._pool.window + 8

        def callback(f):
            ran_in.append(threading.current_thread())
            # (FIRST_COMPLETED: fewer calls than the window, so that none is
            # delivered before the wait by a submit that finds the window full.)
            fs = [ex.submit(fh.ok, i) for i in range(2 if how == "wait_first" else n)]
            try:
                if how == "wait":
                    done, not_done = cf.wait(fs, timeout=20)
                    got.append(sorted(g.result(timeout=0) for g in done) if not not_done else "not done")
                elif how == "wait_first":
                    done, _ = cf.wait(fs, timeout=20, return_when=cf.FIRST_COMPLETED)
                    got.append(bool(done) and all(g.done() for g in done))
                else:
                    got.append(sorted(g.result(timeout=0) for g in cf.as_completed(fs, timeout=20)))
            except cf.TimeoutError:
                got.append("timed out")
            returned.set()

        ex.submit(fh.ok, -1).add_done_callback(callback)
        assert returned.wait(40), "the callback's wait did not return"
        assert ran_in == [ex._pool.resolver_thread]
    assert got == ([True] if how == "wait_first" else [list(range(n))])


@pytest.mark.timeout(60)
def test_a_done_callback_waiting_with_a_timeout_for_a_call_that_runs_on():
    """``concurrent.futures.wait()`` with a timeout in a done-callback, for a call
    that is still running when it ends: it returns after its timeout, the call
    not done, and the pool goes on delivering afterwards."""
    q = interpexec.Queue()
    got, returned = [], threading.Event()
    with InterpreterPoolExecutor(2) as ex:
        g = ex.submit(fh.block_on_queue, q)
        _until(g.running, "g running")

        def callback(f):
            done, not_done = cf.wait([g], timeout=0.2)
            got.append((len(done), len(not_done)))
            returned.set()

        ex.submit(fh.ok, 1).add_done_callback(callback)
        assert returned.wait(30), "the callback's wait did not return"
        q.put("g")
        assert g.result(timeout=20) == "g"
    assert got == [(0, 1)]


@pytest.mark.timeout(180)
def test_an_as_completed_generator_a_done_callback_keeps_can_be_finished_by_another_thread():
    """A done-callback takes the first finished future from ``as_completed()``
    and keeps the generator; the main thread iterates the rest.  The waiter's
    event had the main thread run the resolver's own delivery loop beside the
    resolver: they shared its pipe and lost wake-ups, and both slept with
    results undelivered (1 run in 4; found by review).  Only the resolver
    thread waits by delivering now.  (A timeout turns a regression into a
    failure, not a hang.)"""
    import time

    for _ in range(4):
        kept = {}
        with InterpreterPoolExecutor(2) as ex:
            done0 = ex.submit(fh.ok, -1)
            assert done0.result(timeout=20) == -1
            q = interpexec.Queue()
            gate = ex.submit(fh.block_on_queue, q)
            # (Some calls sleep a little: results trickle in, and the resolver
            # sleeps and wakes between them.)
            futs = [done0] + [ex.submit(time.sleep, 0.0005) if i % 3 == 0 else ex.submit(fh.ok, i) for i in range(2000)]
            ready = threading.Event()

            def callback(_, futs=futs, kept=kept, ready=ready):
                g = cf.as_completed(futs, timeout=10)
                kept["first"] = next(g)  # (one already done: no wait here)
                kept["gen"] = g
                ready.set()

            gate.add_done_callback(callback)
            q.put(1)
            assert ready.wait(20)
            rest = list(kept["gen"])
        assert {kept["first"], *rest} == set(futs)
        assert [f.result() for f in futs] == [-1] + [None if i % 3 == 0 else i for i in range(2000)]


@pytest.mark.timeout(60)
def test_a_kept_as_completed_generator_writes_to_no_pipe_after_its_pool_closed(monkeypatch):
    """The event of an ``as_completed()`` generator that a done-callback kept
    wrote a wake-up to the resolver's pipe whenever a future of its set
    finished, even after the pool had closed that pipe, whose number an
    unrelated file may have by then (a byte appended to it; found by review).
    It writes only while the resolver waits on it."""
    import interpexec._future as future_module

    plain, kept, ready = cf.Future(), {}, threading.Event()
    ex = InterpreterPoolExecutor(1)
    f = ex.submit(fh.ok, 1)

    def callback(_):
        g = cf.as_completed([f, plain])
        kept["first"] = next(g)
        kept["gen"] = g
        ready.set()

    f.add_done_callback(callback)
    assert ready.wait(20)
    ex.shutdown(wait=True)
    written = []
    monkeypatch.setattr(future_module, "notify", written.append)
    plain.set_result(2)
    assert written == []
    assert kept["first"] is f
    assert next(kept["gen"]) is plain  # (and the generator still ends as the standard one does)


@pytest.mark.timeout(60)
def test_a_callback_waiting_in_result_never_runs_another_callback_inside_itself():
    """Callback X, on the resolver, holds a lock and waits in ``result()`` for G;
    G's done-callback Y takes that lock.  The resolver went on delivering while
    X waited, and ran Y nested inside X: it waited for itself for ever (with
    an RLock, Y ran inside X's critical section).  Y now runs once X returns.
    (Found by review.)"""
    lock, order = threading.Lock(), []
    q = interpexec.Queue()
    with InterpreterPoolExecutor(2) as ex:
        g = ex.submit(fh.block_on_queue, q)
        _until(g.running, "g running")

        def y(f):
            with lock:
                order.append("Y")

        def x(f):
            with lock:
                order.append("X waits")
                q.put("g")
                order.append(g.result(timeout=20))

        g.add_done_callback(y)
        ex.submit(fh.ok, 1).add_done_callback(x)
        _until(lambda: len(order) == 3, "both callbacks ran")
    assert order == ["X waits", "g", "Y"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["shutdown", "prestart"])
def test_waiting_pool_calls_in_a_done_callback_return(call):
    """``shutdown(wait=True)`` or ``prestart(wait=True)`` in a done-callback
    (run on the resolver) waited for results only the resolver delivers:
    with more calls than the window, for ever.  They return without waiting,
    and the work finishes after the callback.  (Found by review.)"""
    ex = InterpreterPoolExecutor(1)
    returned = threading.Event()

    def callback(f):
        if call == "shutdown":
            ex.shutdown(wait=True)
        else:
            ex.prestart(wait=True)
        returned.set()

    fs = [ex.submit(fh.ok, i) for i in range(50)]
    fs[0].add_done_callback(callback)
    try:
        assert returned.wait(30), f"{call}(wait=True) in a done-callback did not return"
        assert [f.result(timeout=30) for f in fs] == list(range(50))
    finally:
        ex.shutdown(wait=True)


SCRIPT_IMPORTS_INCOMPATIBLE = textwrap.dedent(
    """
    import _testsinglephase  # (refuses subinterpreters; the parent alone uses it)
    from interpexec import IncompatibleModuleError, InterpreterPoolExecutor

    def work(x):
        return x * 2

    if __name__ == "__main__":
        with InterpreterPoolExecutor(1) as pool:
            try:
                pool.submit(work, 1).result(timeout=20)
            except IncompatibleModuleError as exc:
                print("module", exc.module)
                print("notes", " ".join(getattr(exc, "__notes__", [])))
    """
)


@pytest.mark.timeout(60)
def test_a_scripts_top_level_import_workers_cannot_load_is_explained(tmp_path):
    """A script that imports, at its top level, a module workers cannot load
    (NumPy, say), used only under its ``__main__`` guard: every task defined in
    it fails, because workers run the script's top level to find its functions.
    The error named the module and said to import it "in the parent only",
    which the user thinks they do; it now says the script's top level raised it,
    and what to move where."""
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT_IMPORTS_INCOMPATIBLE)
    proc = run_script("", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "module _testsinglephase" in proc.stdout, proc.stdout
    assert "the top level of your script" in proc.stdout and '`if __name__ == "__main__":`' in proc.stdout, proc.stdout
