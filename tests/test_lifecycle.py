"""Pool lifecycle: prestart, recycling, idle workers, the reusable pool, map's
buffersize and cancellation on close, stats."""

from __future__ import annotations

import gc
import os
import threading

import pytest

import interpexec
from interpexec import InterpreterPoolExecutor, get_reusable_executor

from . import fault_helpers as fh


@pytest.mark.timeout(30)
def test_prestart_starts_every_worker_before_any_task():
    with InterpreterPoolExecutor(3, thread_name_prefix="ie-prestart") as ex:
        ex.prestart()
        workers = ex.stats()["workers"]
        assert len(workers) == 3
        assert all(w["interpreter_id"] for w in workers)
        assert len({w["interpreter_id"] for w in workers}) == 3
        names = [t.name for t in threading.enumerate() if t.name.startswith("ie-prestart")]
        assert len([n for n in names if not n.endswith("resolver")]) == 3


@pytest.mark.timeout(60)
def test_max_tasks_per_child_recycles_interpreters_without_losing_work():
    with InterpreterPoolExecutor(2, max_tasks_per_child=5) as ex:
        results = list(ex.map(fh.interp_id, range(60)))
        # Every 5 tasks a worker gets a fresh interpreter: many distinct ids.
        assert len(set(results)) >= 60 // 5
        stats = ex.stats()
        assert sum(w["restarts"] for w in stats["workers"]) >= 60 // 5 - 2
        assert stats["completed"] >= 60


@pytest.mark.timeout(60)
def test_a_failed_interpreter_creation_says_why(monkeypatch):
    """CPython's "interpreter creation failed" says why only down its chain of
    contexts: the broken pool's message carries the whole chain."""
    from interpexec import _compat

    def fail_to_create() -> int:  # (the chain CPython makes when the fds run out)
        try:
            try:
                raise RuntimeError("error evaluating path")
            except RuntimeError:
                raise _compat.InterpreterError("sub-interpreter creation failed")
        except _compat.InterpreterError:
            raise _compat.InterpreterError("interpreter creation failed")

    monkeypatch.setattr(_compat, "create_interpreter", fail_to_create)
    with InterpreterPoolExecutor(1) as ex:
        error = ex.submit(abs, -1).exception(timeout=30)
    assert isinstance(error, interpexec.BrokenInterpreterPool)
    assert (
        "InterpreterError('interpreter creation failed'), from InterpreterError('sub-interpreter creation "
        "failed'), from RuntimeError('error evaluating path')"
    ) in str(error), str(error)


@pytest.mark.timeout(30)
def test_idle_workers_release_their_interpreters_and_come_back():
    import _interpreters

    with InterpreterPoolExecutor(2, idle_timeout=0.1, thread_name_prefix="ie-idle") as ex:
        ex.prestart()
        ours = {w["interpreter_id"] for w in ex.stats()["workers"]}
        assert len(ours) == 2
        assert ex.submit(fh.ok, 1).result(timeout=10) == 1
        # The idle workers' threads end on their own: join them (no sleeping).
        for t in [t for t in threading.enumerate() if t.name.startswith("ie-idle")]:
            if not t.name.endswith("resolver"):
                t.join(timeout=10)
        assert ex.stats()["workers"] == []
        assert not ours & {int(entry[0]) for entry in _interpreters.list_all()}
        assert ex.submit(fh.ok, 2).result(timeout=10) == 2


@pytest.mark.timeout(30)
def test_reusable_executor_is_reused_resized_and_recreated():
    a = get_reusable_executor(2)
    assert get_reusable_executor(2) is a
    assert get_reusable_executor(reuse=True) is a  # (keeps its size)
    assert a.submit(fh.ok, 1).result(timeout=10) == 1
    b = get_reusable_executor(3)
    assert b is not a and b._max_workers == 3
    assert b.submit(fh.ok, 2).result(timeout=10) == 2
    b.shutdown()
    c = get_reusable_executor(reuse=True)
    assert c is not b and c.submit(fh.ok, 3).result(timeout=10) == 3
    c.shutdown()


@pytest.mark.timeout(30)
def test_reusable_executor_takes_loky_s_reuse_and_keeps_its_size_by_default():
    """``max_workers=None`` keeps the current size (one per CPU for the first:
    loky resizes in place, which this pool cannot, and a caller alternating
    sizes with one that gives none made a new pool each time); as loky's,
    ``reuse=True`` keeps the executor when other arguments differ,
    ``reuse=False`` makes a new one."""
    get_reusable_executor(reuse=True).shutdown()
    cpus = os.process_cpu_count() or 1
    assert get_reusable_executor()._max_workers == cpus
    one = get_reusable_executor(1)
    for _ in range(3):  # (alternating: no new pool)
        assert get_reusable_executor() is one and get_reusable_executor(1) is one
    default = one
    assert get_reusable_executor(reuse=True, task_timeout=5.0) is default
    changed = get_reusable_executor(task_timeout=5.0)
    assert changed is not default
    assert get_reusable_executor(reuse=False, task_timeout=5.0) is not changed
    with pytest.raises(ValueError, match="reuse"):
        get_reusable_executor(reuse="sometimes")
    assert get_reusable_executor(reuse=True).submit(fh.ok, 4).result(timeout=10) == 4
    get_reusable_executor(reuse=True).shutdown()


@pytest.mark.timeout(30)
def test_reusable_executor_resized_with_reuse_true_keeps_its_settings():
    """loky resizes its executor in place, keeping its initializer: with
    ``reuse=True`` a new size gets a new pool made with the current one's
    settings, not the defaults of the call."""
    get_reusable_executor(reuse=True).shutdown()
    first = get_reusable_executor(1, initializer=fh.set_tag, initargs=(42,))
    assert first.submit(fh.get_tag).result(timeout=10) == 42
    resized = get_reusable_executor(2, reuse=True)
    assert resized is not first and resized._max_workers == 2
    assert set(resized.map(fh.get_tag, range(8), timeout=20)) == {42}
    assert get_reusable_executor(2, reuse=True, initializer=fh.set_tag, initargs=(7,)) is resized
    assert get_reusable_executor(2, initializer=fh.set_tag, initargs=(42,)) is resized  # ("auto": the same settings)
    assert get_reusable_executor(2, reuse=1, task_timeout=5.0) is resized  # (1 and 0: True and False)
    assert get_reusable_executor(2, reuse=0, initializer=fh.set_tag, initargs=(42,)) is not resized
    get_reusable_executor(reuse=True).shutdown()
    resized.shutdown()


@pytest.mark.timeout(30)
def test_reusable_executor_keeps_idle_interpreters_on_3_13():
    """Its idle workers give their interpreters back after 300 s, except on
    3.13, where CPython does not give a destroyed interpreter's memory back
    (a bursty service grew by megabytes at every idle period)."""
    import sys

    ex = get_reusable_executor(reuse=False)
    try:
        assert ex._pool.idle_timeout == (300.0 if sys.version_info >= (3, 14) else None)
        assert get_reusable_executor(reuse=False, idle_timeout=5.0)._pool.idle_timeout == 5.0
    finally:
        get_reusable_executor(reuse=True).shutdown()
        ex.shutdown()


@pytest.mark.timeout(30)
def test_map_buffersize_bounds_submissions():
    with InterpreterPoolExecutor(2) as ex:
        consumed = []

        def source():
            for i in range(100):
                consumed.append(i)
                yield i

        it = ex.map(fh.ok, source(), buffersize=4)
        assert len(consumed) == 4
        assert next(it) == 0
        assert len(consumed) <= 6
        assert list(it) == list(range(1, 100))


@pytest.mark.timeout(30)
def test_closing_map_iterator_cancels_unconsumed_futures():
    with InterpreterPoolExecutor(1) as ex:
        blocker = ex.submit(fh.busy_then_value, 0.3, "x")
        it = ex.map(fh.ok, range(200))
        fs_before = ex.stats()["pending"]
        assert fs_before > 0
        it.close()
        assert ex.stats()["pending"] == 0
        assert blocker.result(timeout=10) == "x"


@pytest.mark.timeout(30)
def test_garbage_collected_map_iterator_cancels_too():
    with InterpreterPoolExecutor(1) as ex:
        blocker = ex.submit(fh.busy_then_value, 0.3, "x")
        it = ex.map(fh.ok, range(200))
        assert ex.stats()["pending"] > 0
        del it
        gc.collect()
        assert ex.stats()["pending"] == 0
        assert blocker.result(timeout=10) == "x"


@pytest.mark.timeout(30)
def test_mp_context_is_accepted_and_ignored():
    import multiprocessing

    with InterpreterPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        assert ex.submit(fh.ok, 5).result(timeout=10) == 5


@pytest.mark.timeout(30)
def test_stats_counts_work():
    with InterpreterPoolExecutor(2) as ex:
        list(ex.map(fh.ok, range(50)))
        stats = ex.stats()
        assert stats["completed"] == 50
        assert stats["pending"] == 0 and stats["in_flight"] == 0
        assert stats["max_workers"] == 2


def test_public_names():
    for name in interpexec.__all__:
        assert getattr(interpexec, name) is not None


@pytest.mark.timeout(60)
def test_shutdown_interrupting_returns_while_initializers_are_stuck_in_c():
    """``shutdown(wait=True, cancel_futures=True, interrupt_running=True)`` while
    every initializer is blocked in C (where no interrupt lands): the workers
    are retired after ``interrupt_grace`` and not waited for, as
    ``terminate_workers()`` does; the call no worker took is cancelled.  It
    waited for ever: a retired worker's replacement, started for that
    (already cancelled) call, ran the initializer and got stuck in it too."""
    from . import hostile_helpers as hh

    r, w = os.pipe()
    arrived_r, arrived_w = os.pipe()
    ex = InterpreterPoolExecutor(2, initializer=hh.arrive_and_block, initargs=(arrived_w, r), interrupt_grace=0.5)
    try:
        fut = ex.submit(fh.ok, 1)
        assert len(os.read(arrived_r, 1) + os.read(arrived_r, 1)) == 2  # (both initializers are blocked)
        stopper = threading.Thread(
            target=ex.shutdown, kwargs={"wait": True, "cancel_futures": True, "interrupt_running": True}
        )
        stopper.start()
        stopper.join(30)
        assert not stopper.is_alive(), "shutdown() waited for initializers stuck in C"
        assert fut.cancelled()
        assert len(ex._pool.workers) <= 2  # (the two stuck ones, retired: no replacement)
    finally:
        os.close(w)  # (every initializer's read returns: the workers end)
        ex.shutdown(wait=True)
        for fd in (r, arrived_r, arrived_w):
            os.close(fd)
