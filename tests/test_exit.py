"""What happens to a pool that is never shut down when the program ends.

As with ThreadPoolExecutor and ProcessPoolExecutor, queued work still runs and
exit waits for it; after an unhandled Ctrl-C, work not started yet is cancelled
so that the process ends promptly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _assert_ended_on_ctrl_c(proc):
    """The process ended on its KeyboardInterrupt, not on a CPython abort."""
    assert proc.returncode != 0
    assert "Fatal Python error" not in proc.stderr, proc.stderr[-2000:]
    assert "KeyboardInterrupt" in proc.stderr


def _run_with_pipe(script, *args):
    """Run ``script WFD *ARGS`` (with SIGINT's default disposition, whatever this
    process does with it); return the process and every byte it wrote to WFD
    (its tasks' done-callbacks write there, up to the very end of the process)."""
    rfd, wfd = os.pipe()
    try:
        proc = subprocess.run(
            [sys.executable, str(script), str(wfd), *args],
            capture_output=True,
            text=True,
            timeout=50,
            pass_fds=(wfd,),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        os.close(wfd)
        wfd = -1
        done = b""
        while chunk := os.read(rfd, 1024):
            done += chunk
    finally:
        os.close(rfd)
        if wfd >= 0:
            os.close(wfd)
    return proc, done


QUEUED_SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        wfd = int(sys.argv[1])
        pool = InterpreterPoolExecutor(2)
        for i in range(40):
            pool.submit(fh.busy_then_value, 0.01, i).add_done_callback(
                lambda f: os.write(wfd, bytes([f.result()]))
            )
        if sys.argv[2] == "nowait":
            pool.shutdown(wait=False)
        print("submitted", flush=True)
        # the end of the program: nothing waits for the 40 tasks but the exit itself
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["never", "nowait"])
def test_queued_work_still_runs_at_exit(tmp_path, how):
    script = tmp_path / "queued.py"
    script.write_text(QUEUED_SCRIPT.format(root=ROOT))
    proc, done = _run_with_pipe(script, how)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "submitted"
    assert sorted(done) == list(range(40))  # every queued task ran, once
    assert "Traceback" not in proc.stderr and "Fatal" not in proc.stderr


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        pool = InterpreterPoolExecutor(2)  # no with-block, no shutdown()
        futs = [pool.submit(fh.busy_then_value, 0.2, i) for i in range(400)]
        print("started", flush=True)
        futs[-1].result()
    """
)


@pytest.mark.timeout(60)
def test_unhandled_ctrl_c_cancels_queued_work_and_ends_the_process(tmp_path):
    script = tmp_path / "ctrlc.py"
    script.write_text(CTRL_C_SCRIPT.format(root=ROOT))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # 400 x 0.2 s of work on 2 workers would take 40 s
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert "Fatal Python error" not in err


# Ctrl-C pressed again and again while the program ends on the first one: the
# exit's own shutdown and join are interrupted too.  CPython aborts ("Fatal
# Python error: Py_EndInterpreter: not the last thread") if it finalizes while
# a worker still runs inside its interpreter, so those waits must go on.
CTRL_C_STORM_AT_EXIT_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        ex = InterpreterPoolExecutor(2)
        go = threading.Event()
        def storm():
            go.wait()
            for _ in range(300):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.002)  # (pacing, not synchronization)
        threading.Thread(target=storm, daemon=True).start()
        for _ in ex.map(fh.block_in_c, [0.05] * 400):
            go.set()  # (from the first result on: the workers are busy)
    """
)


@pytest.mark.timeout(120)
def test_ctrl_c_storm_during_exit_never_aborts_the_process(tmp_path):
    script = tmp_path / "storm_at_exit.py"
    script.write_text(CTRL_C_STORM_AT_EXIT_SCRIPT.format(root=ROOT))
    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=30,  # the work would take 10 s; it is cancelled at the first Ctrl-C
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        _assert_ended_on_ctrl_c(proc)


# A Ctrl-C at a chosen bytecode of the exit hook itself (raised from a
# sys.monitoring callback, so it is handled right there): at its very first one
# (before it could swap handlers: this aborted the process, "Fatal Python error:
# Py_EndInterpreter: not the last thread", or crashed 3.13.0), or at every one.
# The program either ends normally with work still queued (the Ctrl-C then
# cancels it) or on its own Ctrl-C.
CTRL_C_IN_EXIT_HOOK_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor, _stopping
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        wfd, where, ending = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        pool = InterpreterPoolExecutor(2)
        for i in range(40):
            pool.submit(fh.busy_then_value, 0.05, i).add_done_callback(
                lambda f: os.write(wfd, b"d") if not f.cancelled() else None
            )
        TOOL = sys.monitoring.DEBUGGER_ID
        E = sys.monitoring.events
        sys.monitoring.use_tool_id(TOOL, "ctrl-c in the exit hook")
        sys.monitoring.register_callback(TOOL, E.PY_START, lambda code, offset: signal.raise_signal(signal.SIGINT))
        sys.monitoring.register_callback(TOOL, E.INSTRUCTION, lambda code, offset: signal.raise_signal(signal.SIGINT))
        events = E.PY_START | (E.INSTRUCTION if where == "every" else 0)
        sys.monitoring.set_local_events(TOOL, _stopping._python_exit.__code__, events)
        os.write(wfd, b"s")
        if ending == "ctrl-c":
            raise KeyboardInterrupt
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ending", ["normal", "ctrl-c"])
@pytest.mark.parametrize("where", ["first", "every"])
def test_a_ctrl_c_at_any_bytecode_of_the_exit_hook_never_aborts(tmp_path, where, ending):
    script = tmp_path / "ctrl_c_in_exit_hook.py"
    script.write_text(CTRL_C_IN_EXIT_HOOK_SCRIPT.format(root=ROOT))
    proc, written = _run_with_pipe(script, where, ending)
    assert "Fatal Python error" not in proc.stderr, proc.stderr[-2000:]
    # A normal end stays one (as when a Ctrl-C interrupts any exit hook); an
    # unhandled Ctrl-C ends the process by SIGINT, as it does any Python program.
    expected = -signal.SIGINT if ending == "ctrl-c" else 0
    assert proc.returncode == expected, (proc.returncode, proc.stderr[-2000:])
    assert written.startswith(b"s")
    # The Ctrl-C made the exit an interrupted one: the queued calls were cancelled
    # (40 x 50 ms on 2 workers would take a second).
    assert written.count(b"d") < 40
    if ending == "ctrl-c":
        _assert_ended_on_ctrl_c(proc)


# A program that ends on an unhandled Ctrl-C dies of SIGINT (status 130 in a
# shell), as every Python program does, so that a shell loop or a make stops.
# On 3.13 a worker interpreter starting after the Ctrl-C (here: still starting
# when it comes) cleared CPython's record of it (gh-128130): exit status 1.
CTRL_C_STATUS_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        pool = InterpreterPoolExecutor(2)
        futures = [pool.submit(fh.busy_then_value, 0.05, i) for i in range(8)]
        if sys.argv[1] == "after-a-result":
            futures[0].result()
        raise KeyboardInterrupt
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["at-once", "after-a-result"])
def test_a_program_ended_by_ctrl_c_dies_of_sigint_like_any_python_program(tmp_path, when):
    script = tmp_path / "ctrl_c_status.py"
    script.write_text(CTRL_C_STATUS_SCRIPT.format(root=ROOT))
    proc = subprocess.run(
        [sys.executable, str(script), when],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.returncode == -signal.SIGINT, (proc.returncode, proc.stderr[-2000:])
    assert "KeyboardInterrupt" in proc.stderr and "Fatal Python error" not in proc.stderr


# Exits that go wrong around interpexec's exit hook (each a reproducer of the
# review of the exit guard): a Ctrl-C before any threading exit hook ran, or in
# another library's hook (the loop over them ends there, skipping interpexec's:
# a second hook among the atexit callbacks stops the pools then); a Ctrl-C
# printed and handled earlier (not the end of the program); a SIGINT handler of
# the program's that raises SystemExit during the exit's wait; a Ctrl-C the
# program ignores, arriving as the exit hook starts (recorded, then dropped).
EXIT_CASES_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor, _stopping
    from tests import fault_helpers as fh

    def ctrl_c_at_start_of(code):
        tool = sys.monitoring.DEBUGGER_ID
        sys.monitoring.use_tool_id(tool, "ctrl-c at a function's start")
        sys.monitoring.register_callback(
            tool, sys.monitoring.events.PY_START, lambda code, offset: signal.raise_signal(signal.SIGINT)
        )
        sys.monitoring.set_local_events(tool, code, sys.monitoring.events.PY_START)

    if __name__ == "__main__":
        wfd, case = int(sys.argv[1]), sys.argv[2]
        pool = InterpreterPoolExecutor(2)
        for i in range(40):  # (each future says how it ended: done, cancelled, failed)
            pool.submit(fh.busy_then_value, 0.05, i).add_done_callback(
                lambda f: os.write(wfd, b"c" if f.cancelled() else b"x" if f.exception() else b"d")
            )
        if case == "ctrl-c-in-threading-shutdown":
            import threading
            ctrl_c_at_start_of(threading._shutdown.__code__)
        elif case == "ctrl-c-in-another-exit-hook":
            import concurrent.futures.thread as cft  # (registers its exit hook after interpexec's)
            cft.ThreadPoolExecutor(1).submit(int).result()
            ctrl_c_at_start_of(cft._python_exit.__code__)
        elif case.startswith("handled-ctrl-c"):
            import code
            code.InteractiveInterpreter().runsource("raise KeyboardInterrupt")  # printed, handled
            if case == "handled-ctrl-c-then-exit-3":
                sys.exit(3)
        elif case == "program-ignores-ctrl-c":  # (as under nohup)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            ctrl_c_at_start_of(_stopping._python_exit.__code__)
        elif case == "handler-raises-systemexit":
            def handler(signum, frame):
                raise SystemExit(5)
            signal.signal(signal.SIGINT, handler)
            ctrl_c_at_start_of(_stopping.Stopper.join.__code__)  # (the exit's wait)
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("case", "status", "all_done"),
    [
        ("ctrl-c-in-threading-shutdown", 0, False),
        ("ctrl-c-in-another-exit-hook", 0, False),
        ("handled-ctrl-c-then-normal-end", 0, True),
        ("handled-ctrl-c-then-exit-3", 3, True),
        ("handler-raises-systemexit", 0, False),
        ("program-ignores-ctrl-c", 0, True),
    ],
)
def test_exits_that_go_wrong_around_the_exit_hook_still_stop_every_pool(tmp_path, case, status, all_done):
    script = tmp_path / "exit_cases.py"
    script.write_text(EXIT_CASES_SCRIPT.format(root=ROOT))
    proc, done = _run_with_pipe(script, case)
    assert "Fatal Python error" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == status, (proc.returncode, proc.stderr[-2000:])
    assert len(done) == 40, done  # every future resolved: the pool was stopped, not dropped
    if all_done:  # a normal exit: queued work still runs, and exit waits for it
        assert done == b"d" * 40
    else:  # an interrupted one: queued work is cancelled (40 x 50 ms would take 1 s)
        assert b"c" in done


LEAKED_LOCK_SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        wfd = int(sys.argv[1])
        pool = InterpreterPoolExecutor(1)
        futs = [pool.submit(fh.busy_then_value, 0.05, i) for i in range(3)]
        for f in futs:
            f.add_done_callback(lambda f: os.write(wfd, bytes([f.result()])))
        # What a Ctrl-C inside concurrent.futures.wait()/as_completed() can leave
        # behind (they take every future's lock in a Python loop): the main thread
        # still holds two futures' locks when the program ends.
        futs[0]._condition.acquire()
        futs[2]._condition.acquire()
        print("holding", flush=True)
        if sys.argv[2] == "ctrl-c":
            raise KeyboardInterrupt
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["normal", "ctrl-c"])
def test_future_locks_the_main_thread_left_held_do_not_hang_the_exit(tmp_path, how):
    script = tmp_path / "leaked.py"
    script.write_text(LEAKED_LOCK_SCRIPT.format(root=ROOT))
    proc, done = _run_with_pipe(script, how)
    assert "holding" in proc.stdout, proc.stderr
    if how == "normal":
        # Exit waits for the queued work, as usual, and every result is delivered.
        assert proc.returncode == 0, proc.stderr
        assert sorted(done) == [0, 1, 2]
    else:
        _assert_ended_on_ctrl_c(proc)


# The same, where it deadlocked: the resolver dispatching a queued future whose
# lock the main thread left held waits for that lock while holding the pool's
# own, so whatever takes the pool's lock first (the exit, shutdown()) waits for
# ever (the dispatcher now starts such a future without its lock).  The script
# waits until the resolver has reached that future (seen with sys.monitoring,
# when it starts dispatch's set_running step for it).
DISPATCH_LEAK_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    sys.path.insert(0, {root!r})
    from interpexec import InterpreterPoolExecutor
    from interpexec import _future
    from tests import fault_helpers as fh
    if __name__ == "__main__":
        wfd, how = int(sys.argv[1]), sys.argv[2]
        pool = InterpreterPoolExecutor(1)
        # More than the window of a 1-worker pool (8): the last ones stay queued.
        futs = [pool.submit(fh.busy_then_value, 0.01, i) for i in range(12)]
        for f in futs:
            f.add_done_callback(lambda f: os.write(wfd, bytes([f.result()])))
        held = futs[10]
        held._condition.acquire()  # as a Ctrl-C inside concurrent.futures.wait() can leave it
        reached = threading.Event()
        def on_start(code, offset):
            if threading.current_thread() is not threading.main_thread():
                if sys._getframe(1).f_locals.get("fut") is held:
                    reached.set()
        tool = sys.monitoring.PROFILER_ID
        sys.monitoring.use_tool_id(tool, "test")
        sys.monitoring.register_callback(tool, sys.monitoring.events.PY_START, on_start)
        sys.monitoring.set_local_events(tool, _future.start_running_locked.__code__, sys.monitoring.events.PY_START)
        assert reached.wait(30), "the resolver never reached the held future"
        print("holding", flush=True)
        if how == "shutdown":
            pool.shutdown(wait=True)
            print("shut down", flush=True)
        elif how == "ctrl-c":
            raise KeyboardInterrupt
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["exit", "ctrl-c", "shutdown"])
def test_a_queued_future_whose_lock_the_main_thread_left_held_does_not_deadlock(tmp_path, how):
    script = tmp_path / "dispatch_leak.py"
    script.write_text(DISPATCH_LEAK_SCRIPT.format(root=ROOT))
    proc, done = _run_with_pipe(script, how)
    assert "holding" in proc.stdout, proc.stderr
    if how == "ctrl-c":
        _assert_ended_on_ctrl_c(proc)
    else:
        assert proc.returncode == 0, proc.stderr
        assert sorted(done) == list(range(12))  # the held future's task ran too
    if how == "shutdown":
        assert "shut down" in proc.stdout


FAILS_DURING_EXIT_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    sys.path.insert(0, {root!r})
    import interpexec
    from tests import hostile_helpers as hh
    if __name__ == "__main__":
        r, w = os.pipe()
        if sys.argv[1] == "task":
            pool = interpexec.InterpreterPoolExecutor(1)
            fut = pool.submit(hh.raise_after_fd, r)
        else:  # the pool breaks: its initializer fails
            pool = interpexec.InterpreterPoolExecutor(1, initializer=hh.raise_after_fd, initargs=(r,))
            fut = pool.submit(abs, -1)

        def done(f):
            exc = f.exception()
            cause = exc.__cause__
            print("done", type(exc).__name__, type(cause).__name__, flush=True)

        fut.add_done_callback(done)
        print("concurrent.futures.process imported:", "concurrent.futures.process" in sys.modules, flush=True)
        # Runs once the exit has begun (threading's exit hooks run last registered
        # first: before the pool's, which then waits for the task).
        threading._register_atexit(lambda: os.write(w, b"x"))
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["task", "initializer"])
def test_a_first_failure_during_the_exit_still_resolves_its_future(tmp_path, what):
    """The classes of a task's failure (its cause is also ProcessPoolExecutor's
    remote traceback class) and of a broken pool are made when first needed,
    importing concurrent.futures.process, which registers an exit hook with
    threading; once the exit has begun that raises, and the future never
    resolved (an error printed instead)."""
    script = tmp_path / "fails_at_exit.py"
    script.write_text(FAILS_DURING_EXIT_SCRIPT.format(root=ROOT))
    proc = subprocess.run([sys.executable, str(script), what], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "concurrent.futures.process imported: False", proc.stdout
    # (A broken pool's cause is the initializer's exception, as the standard pools have it.)
    expected = "done ValueError RemoteTraceback" if what == "task" else "done BrokenInterpreterPool ValueError"
    assert lines[1:] == [expected], (proc.stdout, proc.stderr)
    assert "escaped" not in proc.stderr and "atexit" not in proc.stderr, proc.stderr
