"""interpexec.dask: Dask workers that run their tasks in subinterpreters.

Two parts:

* the task executor alone, in this process: the result dict it builds for the
  worker is compared with what distributed's own task runner returns for the same
  task (success, failure, nested tasks, fused subgraphs, aliases);
* a real ``distributed.LocalCluster`` (two worker processes): results, where the
  tasks ran, errors and tracebacks at the client, the worker's bookkeeping,
  restart, the named executor, ``--preload interpexec.dask``.

dask and distributed are imported by the ``dk`` fixture, not at collection:
``import dask`` runs ``tblib.pickling_support.install()``, which registers a
pickler for every exception class of the process (``copyreg``) and so would change
what other test modules see.  The fixture puts ``copyreg.dispatch_table`` back
when this module is done.  For the same reason the module is skipped through
``find_spec`` rather than ``pytest.importorskip`` when distributed is missing.

Dask's profiler samples threads with ``sys._current_frames()``, which must not
run while subinterpreters exist (see docs/dask.md): it is switched off for every
Server these tests start in this process.  The workers would be safe anyway (the
plugin pauses the profiler), and the command-line test leaves it on to show it.
"""

from __future__ import annotations

import contextlib
import copyreg
import importlib.util
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

import pytest

import interpexec
import interpexec.dask as idask
from interpexec.dask import UnsupportedDistributedError

from . import dask_helpers as h
from .test_examples import EXTRA_CASES

pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="distributed is not installed")

ROOT = Path(__file__).resolve().parent.parent
INTERPEXEC_DIR = os.path.dirname(interpexec.__file__)
CONFIG = {"distributed.worker.profile.enabled": False}


@pytest.fixture(scope="module")
def dk():
    """dask and distributed, for this module only (see the module docstring)."""
    saved = dict(copyreg.dispatch_table)
    import dask
    import dask.bag
    import dask.utils
    import distributed
    import distributed.worker
    from dask.sizeof import sizeof

    from interpexec.dask import _detect

    try:
        from dask import _task_spec
    except ImportError:
        _task_spec = None
    ns = types.SimpleNamespace(
        dask=dask,
        db=dask.bag,
        distributed=distributed,
        dw=distributed.worker,
        sizeof=sizeof,
        ts=_task_spec,
        Client=distributed.Client,
        LocalCluster=distributed.LocalCluster,
        get_task_stream=distributed.get_task_stream,
        Plugin=idask.InterpreterWorkerPlugin,
        shape=_detect.load().shape,
        exception_key=_detect.load().exception_key,
        detect_shape=_detect.detect_shape,
    )
    try:
        with dask.config.set(CONFIG):
            yield ns
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved)


@pytest.fixture
def task_spec(dk):
    if dk.shape != "task-spec":
        pytest.skip(f"distributed {dk.distributed.__version__} is older than 2024.11 (legacy task tuples)")
    return dk.ts


# =============================================================================
# The executor alone (no cluster)
# =============================================================================


@pytest.fixture(scope="module")
def task_executor(dk):
    ex = idask.InterpreterTaskExecutor(2)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


def run_both(dk, ex, task, data):
    """(our result dict, distributed's own runner's) for one task."""
    ours = ex.submit(dk.dw._run_task_simple, task, data, 0.0).result(timeout=30)
    theirs = dk.dw._run_task_simple(task, data, 0.0)
    return ours, theirs


def assert_same_success(ours, theirs):
    assert set(ours) == set(theirs)
    assert ours["op"] == theirs["op"] == "task-finished"
    assert ours["status"] == "OK"
    assert ours["result"] == theirs["result"]
    assert ours["nbytes"] == theirs["nbytes"]
    assert ours["type"] is theirs["type"]
    assert ours["start"] <= ours["stop"]
    assert isinstance(ours["thread"], int)


# Tasks as dask's task spec builds them (ts: dask._task_spec, apply: dask.utils.apply).
TASKS = {
    "args-and-kwargs": lambda ts, apply: ts.Task("k", h.add, ts.TaskRef("a"), y=3),
    "plain-list-argument": lambda ts, apply: ts.Task("k", h.total, [1, 2, 3]),
    "nested-task-in-list": lambda ts, apply: ts.Task(
        "k", h.total, ts.List(ts.Task(None, h.inc, ts.TaskRef("a")), 5, ts.DataNode(None, 7))
    ),
    "nested-calls": lambda ts, apply: ts.Task(
        "k", h.add, ts.Task(None, h.inc, ts.Task(None, h.inc, ts.TaskRef("a"))), y=ts.TaskRef("b")
    ),
    "dict-container": lambda ts, apply: ts.Task(
        "k", sorted, ts.Dict({"x": ts.TaskRef("a"), "y": ts.Task(None, h.inc, 1)})
    ),
    "dask-utils-apply": lambda ts, apply: ts.Task("k", apply, h.add, (1,), {"y": 2}),
    "fused-subgraph": lambda ts, apply: ts.Task.fuse(
        ts.Task("t1", h.inc, ts.TaskRef("a")),
        ts.Task("t2", h.inc, ts.TaskRef("t1")),
        ts.Task("t3", h.add, ts.TaskRef("t2"), ts.TaskRef("t1")),
        ts.Task("t4", h.add, ts.TaskRef("t3"), y=ts.TaskRef("b")),
    ),
    "alias": lambda ts, apply: ts.Alias("k", "a"),
    "data": lambda ts, apply: ts.DataNode("k", [1, 2]),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(TASKS))
def test_result_dict_matches_distributed_runner(dk, task_spec, task_executor, name):
    task = TASKS[name](task_spec, dk.dask.utils.apply)
    ours, theirs = run_both(dk, task_executor, task, {"a": 4, "b": 10})
    assert_same_success(ours, theirs)


# Calls of the legacy runner, apply_function_simple(function, args, kwargs, delay).
LEGACY_CALLS = {
    "function-args-kwargs": lambda dw: (h.add, (1,), {"y": 2}),
    "nested": lambda dw: (dw.execute_task, ((h.total, [(h.inc, 1), 5, (h.add, 2, 3)]),), {}),
    "failure": lambda dw: (h.fail, (3,), {}),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(LEGACY_CALLS))
def test_legacy_result_dict_matches_distributed_runner(dk, task_executor, name):
    if dk.shape != "legacy":
        pytest.skip(f"distributed {dk.distributed.__version__} has no legacy task runner")
    call = LEGACY_CALLS[name](dk.dw)
    ours = task_executor.submit(dk.dw.apply_function_simple, *call, 0.0).result(timeout=30)
    theirs = dk.dw.apply_function_simple(*call, 0.0)
    assert set(ours) == set(theirs)
    if theirs["op"] == "task-finished":
        assert_same_success(ours, theirs)
    else:
        assert ours["exception_text"] == theirs["exception_text"]
        assert type(ours[dk.exception_key]) is type(theirs[dk.exception_key])


@pytest.mark.timeout(60)
def test_tasks_run_in_a_subinterpreter_without_dask(dk, task_spec, task_executor):
    ts = task_spec
    ours = task_executor.submit(dk.dw._run_task_simple, ts.Task("k", h.interp_id), {}, 0.0).result(timeout=30)
    assert ours["result"] != 0
    # A nested task travels as a plan (interpexec.dask._plan.run_plan); the interpreter
    # running it still imports neither dask nor distributed.
    nested = ts.Task("k", h.identity, ts.Task(None, h.dask_modules))
    ours = task_executor.submit(dk.dw._run_task_simple, nested, {}, 0.0).result(timeout=30)
    assert ours["result"] == []


@pytest.mark.timeout(60)
def test_failure_dict_matches_distributed_runner(dk, task_spec, task_executor):
    ours, theirs = run_both(dk, task_executor, task_spec.Task("k", h.fail, 5), {})
    assert set(ours) == set(theirs)
    assert ours["op"] == theirs["op"] == "task-erred"
    assert ours["status"] == "error"
    assert type(ours[dk.exception_key]) is h.TaskFailed
    assert ours["exception_text"] == theirs["exception_text"]
    # The traceback is the task's own frames, not interpexec's machinery.
    assert "_fail_inner" in ours["traceback_text"]
    assert "dask_helpers.py" in ours["traceback_text"]
    assert INTERPEXEC_DIR not in ours["traceback_text"]


@pytest.mark.timeout(60)
def test_non_task_calls_stay_in_the_main_interpreter(task_executor):
    # e.g. the worker's disk/memory benchmarks go through worker.executor too
    assert task_executor.submit(h.interp_id).result(timeout=30) == 0


@pytest.mark.timeout(60)
def test_unknown_task_node_fails_that_task_clearly(dk, task_spec, task_executor):
    class Weird(task_spec.GraphNode):
        __slots__ = ()

        def __init__(self):
            self.key = "weird"
            self._dependencies = frozenset()

    ours = task_executor.submit(dk.dw._run_task_simple, Weird(), {}, 0.0).result(timeout=30)
    assert ours["op"] == "task-erred"
    assert isinstance(ours[dk.exception_key], UnsupportedDistributedError)
    assert "Weird" in str(ours[dk.exception_key])

    # An error while preparing the task (here: a dependency missing from data)
    # fails that task with its own traceback.
    task = task_spec.Task("k", h.inc, task_spec.TaskRef("missing"))
    ours = task_executor.submit(dk.dw._run_task_simple, task, {}, 0.0).result(timeout=30)
    assert ours["op"] == "task-erred"
    assert isinstance(ours[dk.exception_key], KeyError)
    assert "_convert" in ours["traceback_text"]


@pytest.mark.timeout(30)
def test_unsupported_distributed_is_refused_loudly(dk):
    async def execute(self, key):  # runs tasks some other way
        return await self.loop.run_in_executor(None, print, key)

    fake = types.SimpleNamespace(Worker=types.SimpleNamespace(execute=execute))
    with pytest.raises(UnsupportedDistributedError, match=r"does not support distributed 9999\.1"):
        dk.detect_shape(fake, "9999.1")
    shape, runner, exception_key = dk.detect_shape(dk.dw, dk.distributed.__version__)
    assert (shape, runner) in (
        ("task-spec", getattr(dk.dw, "_run_task_simple", None)),
        ("legacy", getattr(dk.dw, "apply_function_simple", None)),
    )
    assert exception_key in ("actual_exception", "actual-exception")

    # A runner whose result dict differs (here: a renamed key) is refused too.
    def _run_task_simple(task, data, time_delay):
        return {"op": "task-finished", "status": "OK", "value": None, "nbytes": 0, "type": None}

    async def execute2(self, key):
        return await self.loop.run_in_executor(None, self._run_task_simple, key, {}, 0.0)

    fake = types.SimpleNamespace(Worker=types.SimpleNamespace(execute=execute2), _run_task_simple=_run_task_simple)
    with pytest.raises(UnsupportedDistributedError, match="result dict"):
        dk.detect_shape(fake, "9999.2")


@pytest.mark.timeout(30)
def test_plugin_arguments(dk):
    assert dk.Plugin().name == "interpexec"
    assert dk.Plugin(executor="interpreters").name == "interpexec-interpreters"
    with pytest.raises(ValueError, match="offload"):
        dk.Plugin(executor="offload")
    with pytest.raises(ValueError, match="max_workers"):
        dk.Plugin(max_workers=0)


@pytest.mark.timeout(60)
def test_importing_interpexec_does_not_import_dask():
    code = (
        "import sys, interpexec, interpexec.dask\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert out.stdout.strip() == "[]"


# =============================================================================
# A real cluster: two worker processes, two threads each
# =============================================================================


@pytest.fixture(scope="module")
def client(dk):
    with (
        dk.LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster,
        dk.Client(cluster) as c,
    ):
        c.register_plugin(dk.Plugin())
        yield c


def worker_executors(client):
    return client.run(lambda dask_worker: {k: type(v).__name__ for k, v in dask_worker.executors.items()})


def story_transitions(client, key):
    """(start, finish) transitions of ``key`` in every worker's state machine."""

    def transitions(dask_worker, key=key):
        return [(s[1], s[2]) for s in dask_worker.state.story(key) if len(s) > 3 and isinstance(s[2], str)]

    return [t for per_worker in client.run(transitions).values() for t in per_worker]


@pytest.mark.timeout(60)
def test_graph_results_equal_serial(dk, client):
    dask = dk.dask
    # dask.delayed, computed on the cluster and serially in this process
    parts = [dask.delayed(h.collatz_steps)(n) for n in range(1, 60)]
    graph = dask.delayed(h.add)(dask.delayed(h.total)(parts), y=dask.delayed(h.inc)(parts[3]))
    expected = h.add(h.total([h.collatz_steps(n) for n in range(1, 60)]), y=h.inc(h.collatz_steps(4)))
    assert client.compute(graph, sync=True) == expected
    # futures, with futures as arguments
    xs = client.map(h.collatz_steps, range(1, 200))
    assert client.submit(h.total, xs).result() == sum(h.collatz_steps(n) for n in range(1, 200))
    assert client.submit(h.add, xs[5], y=xs[6]).result() == h.collatz_steps(6) + h.collatz_steps(7)
    # dask.bag: fused subgraphs of dask functions (dask itself loads in subinterpreters)
    bag = dk.db.from_sequence(range(1, 300), npartitions=4).map(h.collatz_steps).filter(h.is_odd)
    assert bag.sum().compute() == sum(s for s in map(h.collatz_steps, range(1, 300)) if s % 2)
    # a lambda travels by value (cloudpickle)
    assert client.submit(lambda x: x * 2, 21).result() == 42


@pytest.mark.timeout(60)
def test_tasks_run_in_subinterpreters(client):
    ids = client.gather(client.map(h.interp_id, range(40)))
    assert 0 not in ids
    assert set(client.run(h.interp_id).values()) == {0}  # client.run: the worker's main interpreter
    # distributed never loads in a subinterpreter (dask may: dask.bag's functions need it)
    for f in client.map(h.dask_modules, range(8), pure=False):
        assert not [m for m in f.result() if m.startswith("distributed")]
    sizes = client.run(lambda dask_worker: (dask_worker.executors["default"].max_workers, dask_worker.state.nthreads))
    assert len(sizes) == 2
    assert all(pool == nthreads == 2 for pool, nthreads in sizes.values())


@pytest.mark.timeout(60)
def test_worker_bookkeeping(dk, client):
    t0 = time.time()
    with dk.get_task_stream(client=client) as stream:
        f = client.submit(h.busy, 300_000, pure=False)
        g = client.submit(h.make_bytes, 123_456, pure=False)
        client.gather([f, g])
    t1 = time.time()
    compute = {
        rec["key"]: next(s for s in rec["startstops"] if s["action"] == "compute")
        for rec in stream.data
        if rec["key"] in (f.key, g.key)
    }
    for span in compute.values():
        assert t0 - 1 <= span["start"] <= span["stop"] <= t1 + 1
    assert compute[f.key]["stop"] - compute[f.key]["start"] > 0.001
    assert client.nbytes(summary=False)[g.key] == dk.sizeof(b"x" * 123_456)
    assert client.run_on_scheduler(lambda dask_scheduler, key=g.key: dask_scheduler.tasks[key].type) == "bytes"
    assert ("executing", "memory") in story_transitions(client, g.key)
    idle = client.run(lambda dask_worker: (dask_worker.state.executing_count, len(dask_worker.active_keys)))
    assert set(idle.values()) == {(0, 0)}


@pytest.mark.timeout(60)
def test_error_and_traceback_reach_the_client(client):
    f = client.submit(h.fail, 7)
    with pytest.raises(h.TaskFailed, match="bad input 7") as info:
        f.result()
    frames = traceback.extract_tb(info.value.__traceback__)
    names = [fr.name for fr in frames]
    assert names[-2:] == ["fail", "_fail_inner"]
    assert frames[-1].filename.endswith("dask_helpers.py")
    assert not any(fr.filename.startswith(INTERPEXEC_DIR) for fr in frames)
    assert f.status == "error"
    assert "_fail_inner" in "".join(traceback.format_tb(f.traceback()))
    assert ("executing", "error") in story_transitions(client, f.key)
    assert client.run_on_scheduler(lambda dask_scheduler, key=f.key: dask_scheduler.tasks[key].state) == "erred"


@pytest.mark.timeout(60)
def test_incompatible_module_fails_the_task_not_the_cluster(client):
    if importlib.util.find_spec("_testsinglephase") is None:
        pytest.skip("this CPython build has no _testsinglephase")
    f = client.submit(h.import_single_phase, pure=False)
    with pytest.raises(interpexec.IncompatibleModuleError) as info:
        f.result()
    assert info.value.module == "_testsinglephase"
    assert 0 not in client.gather(client.map(h.interp_id, range(100, 120)))
    assert client.submit(h.inc, 41, pure=False).result() == 42


@pytest.mark.timeout(60)
def test_named_executor(dk, client):
    # Back to the thread pool by default, subinterpreters only for annotated tasks.
    client.unregister_worker_plugin("interpexec")
    try:
        assert {e["default"] for e in worker_executors(client).values()} == {"ThreadPoolExecutor"}
        client.register_plugin(dk.Plugin(executor="interpreters"))
        with dk.dask.annotate(executor="interpreters"):
            annotated = client.map(h.interp_id, range(200, 220))
            graph = dk.dask.delayed(h.total)([dk.dask.delayed(h.interp_id)(i) for i in range(5)])
        plain = client.map(h.interp_id, range(220, 240))
        assert 0 not in client.gather(annotated)
        assert set(client.gather(plain)) == {0}
        assert client.compute(graph, sync=True) > 0
    finally:
        with contextlib.suppress(ValueError):
            client.unregister_worker_plugin("interpexec-interpreters")
        client.register_plugin(dk.Plugin())
    assert {e["default"] for e in worker_executors(client).values()} == {"InterpreterTaskExecutor"}


@pytest.mark.timeout(60)
def test_restart_with_a_task_running(client, tmp_path):
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    f = client.submit(h.announce_then_spin, str(fifo), 300, pure=False)
    with open(fifo, "rb") as started:
        assert started.read(1) == b"x"  # the task is running in a subinterpreter
    t0 = time.monotonic()
    client.restart()
    assert time.monotonic() - t0 < 30  # the task was stopped, not waited for
    assert f.status in ("cancelled", "lost", "pending")
    assert {e["default"] for e in worker_executors(client).values()} == {"InterpreterTaskExecutor"}
    assert 0 not in client.gather(client.map(h.interp_id, range(300, 320)))


@pytest.mark.timeout(60)
def test_preload_hook(dk):
    """``--preload interpexec.dask`` as LocalCluster does it (dask_setup), in the
    named mode chosen through the dask config."""
    with (
        dk.dask.config.set({"interpexec.executor": "interpreters"}),
        dk.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", preload=["interpexec.dask"]
        ) as cluster,
        dk.Client(cluster) as c,
    ):
        assert [e["interpreters"] for e in worker_executors(c).values()] == ["InterpreterTaskExecutor"]
        with dk.dask.annotate(executor="interpreters"):
            f = c.submit(h.interp_id, 1)
        assert f.result() != 0
        assert c.submit(h.interp_id, 2).result() == 0


@pytest.mark.timeout(90)
def test_command_line_scheduler_and_worker(dk, tmp_path):
    """``dask scheduler`` + ``dask worker SCHEDULER --preload interpexec.dask``, as
    on a multi-machine cluster (here both on localhost), with Dask's profiler left
    on: the plugin keeps it from sampling while subinterpreters exist."""
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", None)
    dask_cli = [sys.executable, "-m", "dask"]
    scheduler = ["scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(scheduler_file)]
    worker = ["worker", "--scheduler-file", str(scheduler_file), "--nthreads", "2", "--host", "127.0.0.1"]
    worker += ["--preload", "interpexec.dask", "--no-nanny"]
    procs = []
    try:
        for args in (scheduler, worker):
            procs.append(
                subprocess.Popen(
                    [*dask_cli, *args, "--no-dashboard"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        with dk.Client(scheduler_file=str(scheduler_file), timeout=60) as c:
            c.wait_for_workers(1, timeout=60)
            assert 0 not in c.gather(c.map(h.interp_id, range(20)))
            squares = c.map(h.collatz_steps, range(1, 50))
            assert c.submit(h.total, squares).result() == sum(map(h.collatz_steps, range(1, 50)))
            assert list(c.run(lambda dask_worker: dask_worker.status.name).values()) == ["running"]
    finally:
        # The worker first, while the scheduler it says goodbye to is still there.
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.timeout(120)
def test_example_script(dk):
    args, expected = EXTRA_CASES["dask_cluster.py"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "dask_cluster.py"), *args],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout
    assert "tasks ran in interpreters [" in proc.stdout
    assert "interpreters [0" not in proc.stdout  # never in a worker's main interpreter


@pytest.mark.timeout(60)
def test_a_task_raising_while_handling_another_keeps_that_context_for_dask(dk):
    """The runner's failure report puts the task's own frames in place of the
    RemoteTraceback: the exception it was handling (its context, which the
    RemoteTraceback keeps as a suppressed context) must stay, as its context."""
    from interpexec import InterpreterPoolExecutor
    from interpexec.dask._report import failure_msg

    from . import helpers

    with InterpreterPoolExecutor(1) as ex:
        exc = ex.submit(helpers.raise_while_handling, "bad 3").exception(timeout=30)
    msg = failure_msg(exc, 0.0, 1.0, 0.0, "exception")
    assert msg["op"] == "task-erred" and msg["exception"] is exc
    assert exc.__cause__ is None and isinstance(exc.__context__, KeyError) and not exc.__suppress_context__
