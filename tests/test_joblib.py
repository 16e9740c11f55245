"""interpexec.joblib: the "interpexec" joblib backend, on a real joblib."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import traceback

import joblib  # a test requirement: a missing joblib fails the run, it skips nothing
import pytest

import interpexec
import interpexec.joblib
from interpexec import IncompatibleModuleError, Queue, RemoteTraceback
from interpexec.joblib import InterpreterBackend

from . import joblib_helpers as h

Parallel, delayed, parallel_config = joblib.Parallel, joblib.delayed, joblib.parallel_config

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def fresh_pool():
    """Each test starts on a fresh reusable pool (a test that imports joblib in a
    worker must not leave half-imported modules to the next one)."""
    interpexec.get_reusable_executor(reuse=True).shutdown(wait=True, cancel_futures=True)
    yield
    interpexec.get_reusable_executor(reuse=True).shutdown(wait=True, cancel_futures=True)


def drain(queue: Queue) -> list[str]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def test_registered_by_import():
    assert joblib.parallel.BACKENDS["interpexec"] is InterpreterBackend
    with parallel_config(backend="interpexec", n_jobs=3):
        assert joblib.effective_n_jobs(None) == 3
    with parallel_config(backend="interpexec", n_jobs=-1):
        assert joblib.effective_n_jobs(None) == joblib.cpu_count()
    with parallel_config(backend="interpexec", n_jobs=-2):
        assert joblib.effective_n_jobs(None) == max(joblib.cpu_count() - 1, 1)


def test_many_items_in_subinterpreters():
    items = list(range(20_000))
    with parallel_config(backend="interpexec", n_jobs=2):
        assert Parallel()(delayed(h.square)(x) for x in items) == [x * x for x in items]
        places = Parallel(batch_size=1)(delayed(h.where)() for _ in range(8))
    assert {pid for pid, _, _ in places} == {os.getpid()}  # one process...
    assert all(in_worker for _, in_worker, _ in places)  # ...in interpexec workers


def test_n_jobs_1_runs_sequentially_here():
    with parallel_config(backend="interpexec", n_jobs=1):
        places = Parallel()(delayed(h.where)() for _ in range(3))
    assert places == [(os.getpid(), False, places[0][2])] * 3  # in this thread of the main interpreter


def test_automatic_batching_grows(monkeypatch):
    sizes: list[int] = []
    submit = InterpreterBackend.submit

    def spy(self, func, callback=None):
        sizes.append(len(func))
        return submit(self, func, callback)

    monkeypatch.setattr(InterpreterBackend, "submit", spy)
    n = 20_000
    with parallel_config(backend="interpexec", n_jobs=2):
        parallel = Parallel()
        assert parallel(delayed(h.square)(x) for x in range(n)) == [x * x for x in range(n)]
    assert sum(sizes) == n
    assert sizes[0] == 1  # joblib starts with batches of one call...
    assert max(sizes) >= 16  # ...and grows them while batches finish fast
    assert parallel.n_dispatched_batches == len(sizes) < n // 10


def test_pool_stays_warm_across_calls():
    with parallel_config(backend="interpexec", n_jobs=2):
        Parallel()(delayed(h.square)(x) for x in range(10))
        pool = interpexec.get_reusable_executor(2)
        before = interpreters(pool)
        Parallel()(delayed(h.square)(x) for x in range(10))
    assert interpexec.get_reusable_executor(2) is pool
    assert before and before <= interpreters(pool)  # the same interpreters ran the second call


def interpreters(pool: interpexec.InterpreterPoolExecutor) -> set[int]:
    """The ids of the pool's live interpreters (a worker still starting has none yet)."""
    return {w["interpreter_id"] for w in pool.stats()["workers"] if w["interpreter_id"] is not None}


def test_return_as_generator():
    with parallel_config(backend="interpexec", n_jobs=2):
        gen = Parallel(return_as="generator")(delayed(h.square)(x) for x in range(500))
        assert not isinstance(gen, list)
        assert next(gen) == 0
        assert list(gen) == [x * x for x in range(1, 500)]


def test_return_as_generator_unordered_yields_in_completion_order():
    token = Queue()
    calls = [delayed(h.wait_for)(token)] + [delayed(h.square)(x) for x in range(1, 11)]
    with parallel_config(backend="interpexec", n_jobs=2):
        gen = Parallel(return_as="generator_unordered", batch_size=1)(calls)
        # The first call waits for a token that is sent only after the ten others
        # have come out: an ordered generator would never get there.
        first = [next(gen) for _ in range(10)]
        token.put("released")
        rest = list(gen)
    assert sorted(first) == [x * x for x in range(1, 11)]
    assert rest == ["released"]


def test_error_has_original_type_and_worker_traceback():
    with parallel_config(backend="interpexec", n_jobs=2), pytest.raises(ValueError, match="bad item 7") as info:
        Parallel()(delayed(h.fail_at)(x, 7) for x in range(50))
    remote = info.value.__cause__
    assert isinstance(remote, RemoteTraceback)
    assert "joblib_helpers.py" in remote.tb and "in fail_at" in remote.tb
    assert 'raise ValueError(f"bad item {x}")' in remote.tb
    shown = "".join(traceback.format_exception(info.value))
    assert "in fail_at" in shown  # what the user sees includes the worker's frames


def wait_until_both_workers_are_free() -> None:
    """Two calls that can only finish together: both workers are done with
    whatever they ran before (the pool takes batches first in, first out)."""
    a, b = Queue(), Queue()
    assert Parallel(batch_size=1)([delayed(h.swap)(a, b), delayed(h.swap)(b, a)]) == ["swapped"] * 2


def test_error_cancels_queued_batches_and_interrupts_running_ones():
    events, started, hold = Queue(), Queue(), Queue()
    calls = [delayed(h.block)(events, started, hold), delayed(h.fail_once_started)(events, started)]
    # The worker that fails takes this next: it waits until interrupted.
    calls.append(delayed(h.block)(events, None, hold, "next"))
    calls += [delayed(h.record)(events, f"queued{i}") for i in range(40)]
    with parallel_config(backend="interpexec", n_jobs=2):
        # pre_dispatch="all": every batch is in the pool's queue when the failure comes.
        with pytest.raises(ValueError, match="early failure"):
            Parallel(batch_size=1, pre_dispatch="all")(calls)
        wait_until_both_workers_are_free()
    seen = set(drain(events))
    # Both running calls were interrupted (neither reached its end), and none of
    # the 40 queued calls ever ran.
    assert {"block:start", "block:stopped", "fail"} <= seen
    assert seen - {"block:start", "block:stopped", "fail"} <= {"next:start", "next:stopped"}
    assert ("next:start" in seen) <= ("next:stopped" in seen)


def test_timeout_interrupts_the_running_batch():
    events, hold = Queue(), Queue()
    with parallel_config(backend="interpexec", n_jobs=2):
        wait_until_both_workers_are_free()  # (started: the call below starts at once)
        with pytest.raises(multiprocessing.TimeoutError):
            Parallel(timeout=2.0)([delayed(h.block)(events, None, hold)])
        wait_until_both_workers_are_free()
    assert drain(events) == ["block:start", "block:stopped"]


def test_shared_buffers_are_lent_not_copied():
    data = bytearray(4096)
    view = interpexec.share(data, writable=True)
    with parallel_config(backend="interpexec", n_jobs=2):
        done = Parallel(batch_size=1)(delayed(h.fill)(view, i * 1024, (i + 1) * 1024, i + 1) for i in range(4))
        described = Parallel()(delayed(h.describe)(arg) for arg in [bytearray(b"abc"), b"de", "f"])
    assert done == [1024] * 4
    assert data == b"".join(bytes([i + 1]) * 1024 for i in range(4))  # the workers wrote into our bytearray
    assert described == [("bytearray", 3), ("bytes", 2), ("str", 1)]


def test_dropping_a_generator_early_interrupts_its_running_batch():
    events, started, hold = Queue(), Queue(), Queue()
    calls = [delayed(h.block)(events, started, hold), delayed(h.record)(events, "quick")]
    with parallel_config(backend="interpexec", n_jobs=2):
        gen = Parallel(return_as="generator_unordered", batch_size=1)(calls)
        assert next(gen) == "quick"
        assert started.get(timeout=h.WAIT) == "block"  # it runs, waiting on `hold`
        with pytest.warns(UserWarning, match="cancelled"):
            gen.close()  # what dropping the last reference does
        wait_until_both_workers_are_free()
    assert sorted(drain(events)) == ["block:start", "block:stopped", "quick"]


def test_no_joblib_or_loky_in_workers():
    offset = 10
    with parallel_config(backend="interpexec", n_jobs=2):
        by_reference = Parallel(batch_size=1)(delayed(h.foreign_modules)() for _ in range(6))
        by_value = Parallel(batch_size=1)(delayed(lambda x: h.foreign_modules() or x + offset)(x) for x in range(6))
    assert by_reference == [[]] * 6
    assert by_value == [x + offset for x in range(6)]
    assert "joblib" in sys.modules  # (while this process has it)


def test_nested_parallel_in_a_task_fails_clearly():
    with parallel_config(backend="interpexec", n_jobs=2), pytest.raises(Exception) as info:
        Parallel()(delayed(h.nested)(3) for _ in range(2))
    if tuple(map(int, joblib.__version__.split(".")[:2])) >= (1, 5):
        # joblib cannot be imported in a subinterpreter (loky imports faulthandler)
        assert isinstance(info.value, IncompatibleModuleError) and info.value.module == "faulthandler"
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "nested Parallel calls are not supported" in notes


def test_lambdas_closures_and_local_classes_go_by_value():
    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    class LocalError(Exception):
        pass

    base = 100

    def shift(x: int) -> int:
        return x + base

    def fail(x: int) -> None:
        raise LocalError(f"local {x}")

    with parallel_config(backend="interpexec", n_jobs=2):
        assert Parallel()(delayed(lambda x: x * 3)(x) for x in range(5)) == [0, 3, 6, 9, 12]
        assert Parallel()(delayed(shift)(x) for x in range(5)) == [100, 101, 102, 103, 104]
        points = Parallel()(delayed(Point)(x) for x in range(3))
        with pytest.raises(LocalError, match=r"local \d") as info:
            Parallel()(delayed(fail)(x) for x in range(3))
    # The class came back as the caller's own class, not a copy.
    assert [type(p) for p in points] == [Point] * 3 and [p.x for p in points] == [0, 1, 2]
    assert isinstance(info.value.__cause__, RemoteTraceback) and "in fail" in info.value.__cause__.tb


def test_without_cloudpickle_a_lambda_fails_with_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # `import cloudpickle` now fails
    with parallel_config(backend="interpexec", n_jobs=2):
        assert Parallel()(delayed(h.square)(x) for x in range(5)) == [0, 1, 4, 9, 16]  # by reference
        with pytest.raises(pickle.PicklingError, match="needs cloudpickle"):
            Parallel()(delayed(lambda x: x)(x) for x in range(5))


def test_bad_options_are_refused():
    with pytest.raises(TypeError, match=r"unknown option.*not_an_option"):
        parallel_config(backend="interpexec", not_an_option=1)
    with pytest.raises(ValueError, match="n_jobs == 0"):
        Parallel(backend="interpexec", n_jobs=0)(delayed(h.square)(1) for _ in range(2))


def test_idle_worker_timeout_reaches_the_pool():
    with parallel_config(backend="interpexec", n_jobs=2, idle_worker_timeout=7.5):
        assert Parallel()(delayed(h.square)(x) for x in range(4)) == [0, 1, 4, 9]
    # The pool with that setting exists already: its workers have run the tasks.
    assert interpexec.get_reusable_executor(2, idle_timeout=7.5).stats()["workers"]  # (a new pool has none)


SCRIPT = """
import sys
import joblib
from joblib import Parallel, delayed
import interpexec.joblib

def cube(x):
    return x ** 3

if __name__ == "__main__":
    if "--no-cloudpickle" in sys.argv:
        sys.modules["cloudpickle"] = None  # `import cloudpickle` now fails
    with joblib.parallel_config(backend="interpexec", n_jobs=2):
        print(sum(Parallel()(delayed(cube)(x) for x in range(1000))))
"""


def run_script(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_script_with_joblib_at_top_level_runs_and_exits_cleanly(tmp_path):
    proc = run_script(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sum(x**3 for x in range(1000)))
    assert proc.stderr == ""


def test_script_functions_without_cloudpickle_fail_clearly(tmp_path):
    proc = run_script(tmp_path, "--no-cloudpickle")
    assert proc.returncode == 1
    assert "AttributeError" in proc.stderr and "cube" in proc.stderr
    assert "sent by value, which needs cloudpickle" in proc.stderr
