"""Short tasks travel several to a queue item (BATCH): what must hold around that.

A pool sends pending calls as one BATCH once recent tasks were short and every
worker has plenty queued (see ``interpexec._dispatch``).  The worker that takes
a batch holds its tasks until it runs them; these tests put a task that blocks
(in C, where no interrupt reaches it) at the head of a batch and check that its
batch-mates are not held with it: the watchdog takes them back when the task's
deadline passes, and the pool dispatches them again, even after ``shutdown()``
began.  The batches are made deterministically: both workers are held in a
gate while the calls gather.
"""

from __future__ import annotations

import concurrent.futures as cf
import os

import pytest

from interpexec import InterpreterPoolExecutor
from interpexec._dispatch import BATCH_MAX, BATCH_WINDOW, ESTIMATE_EVERY
from tests import helpers as h

WORKERS = 2


def _trained_pool():
    """A pool that batches, as it does once recent tasks were short.  (What the
    workers measure depends on the machine's load: the estimate is frozen here,
    and tested on its own below.)"""
    ex = InterpreterPoolExecutor(WORKERS)
    assert list(ex.map(h.square, range(20))) == [i * i for i in range(20)]
    pool = ex._pool
    with pool.lock:
        pool.batch_max, pool.window, pool.estimated_at = 16, pool.base_window * BATCH_WINDOW, 10**12
    return ex


def _add_work(pool, tasks, ns_each):
    """Count ``tasks`` more tasks of ``ns_each`` in worker slot 0 (idle here)."""
    layout, ctl = pool.layout, pool.ctl
    ctl[layout.tasks_done] += tasks
    ctl[layout.busy_ns] += tasks * ns_each
    pool.completed = pool.estimated_at + ESTIMATE_EVERY  # (an estimate is due)
    with pool.lock:
        pool.dispatch_locked()


@pytest.mark.timeout(60)
def test_the_estimate_turns_batching_on_for_short_tasks_and_off_for_long_ones():
    ex = InterpreterPoolExecutor(WORKERS)
    try:
        ex.submit(h.identity, 0).result(timeout=30)
        pool = ex._pool
        assert pool.batch_max == 1 and pool.window == pool.base_window  # (nothing known yet)
        _add_work(pool, 0, 0)  # an estimate that takes in the real task (its first one imports)
        _add_work(pool, 100, 5_000)  # 5 us each
        assert pool.batch_max == BATCH_MAX and pool.window == pool.base_window * BATCH_WINDOW
        _add_work(pool, 100, 40_000)  # 40 us each: about 0.5 ms of work per batch
        assert 1 < pool.batch_max < BATCH_MAX and pool.window == pool.base_window * BATCH_WINDOW
        _add_work(pool, 10, 1_000_000)  # 1 ms each (only the tasks since the last estimate count)
        assert pool.batch_max == 1 and pool.window == pool.base_window
        assert ex.submit(h.square, 7).result(timeout=30) == 49
    finally:
        ex.shutdown()


class _Gate:
    """Tasks that hold a worker until released (they block in os.read: in C)."""

    def __init__(self):
        self.arrived_r, self.arrived_w = os.pipe()
        self.go_r, self.go_w = os.pipe()

    def args(self, value=None):
        return (self.arrived_w, self.go_r, value)

    def wait_arrived(self, n):
        h.wait_bytes(self.arrived_r, n)

    def release(self, n):
        os.write(self.go_w, b"g" * n)

    def close(self):
        for fd in (self.arrived_r, self.arrived_w, self.go_r, self.go_w):
            os.close(fd)


def _batch_behind_held_workers(ex, gate, blocker_gate, timeout):
    """Hold both workers, fill the base window, then queue [blocker, 7 squares]:
    returns (held futures, fillers, blocker, squares)."""
    pool = ex._pool
    held = [ex.submit(h.gated, *gate.args(i)) for i in range(WORKERS)]
    gate.wait_arrived(WORKERS)
    fillers = [ex.submit(h.square, i) for i in range(pool.base_window - WORKERS)]
    sent = pool.batches
    blocker = ex.schedule(h.gated, blocker_gate.args("late"), timeout=timeout)
    squares = [ex.submit(h.square, i) for i in range(10, 17)]
    assert pool.batches == sent + 1, "the eight calls did not travel as one batch"
    return held, fillers, blocker, squares


@pytest.mark.timeout(60)
def test_short_tasks_travel_in_batches_and_every_result_is_right():
    ex = _trained_pool()
    try:
        sent = ex._pool.batches
        futures = [ex.submit(h.square, i) for i in range(5000)]
        assert [f.result(timeout=30) for f in reversed(futures)] == [i * i for i in reversed(range(5000))]
        assert ex._pool.batches > sent
    finally:
        ex.shutdown()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shutdown_first", [False, True], ids=["running", "after-shutdown"])
def test_a_task_stuck_at_the_head_of_a_batch_does_not_hold_its_batch_mates(shutdown_first):
    ex = _trained_pool()
    gate, blocker_gate = _Gate(), _Gate()
    try:
        held, fillers, blocker, squares = _batch_behind_held_workers(ex, gate, blocker_gate, timeout=0.3)
        if shutdown_first:
            ex.shutdown(wait=False)  # the STOPs are queued behind the batch
        gate.release(WORKERS)
        blocker_gate.wait_arrived(1)  # a worker took the batch and blocks in its first task
        # Its deadline passes; the worker stays stuck in C.  The batch-mates run
        # elsewhere meanwhile, while the blocker is still held.
        assert [f.result(timeout=30) for f in squares] == [i * i for i in range(10, 17)]
        assert [f.result(timeout=30) for f in fillers] == [i * i for i in range(len(fillers))]
        assert [f.result(timeout=30) for f in held] == list(range(WORKERS))
        with pytest.raises(TimeoutError):
            blocker.result(timeout=30)
    finally:
        blocker_gate.release(1)
        ex.shutdown(wait=True)
        gate.close()
        blocker_gate.close()


@pytest.mark.timeout(60)
def test_interrupting_a_task_that_waits_in_a_batch_cancels_it_alone():
    ex = _trained_pool()
    gate, blocker_gate = _Gate(), _Gate()
    try:
        held, fillers, blocker, squares = _batch_behind_held_workers(ex, gate, blocker_gate, timeout=None)
        gate.release(WORKERS)
        blocker_gate.wait_arrived(1)  # the batch is in a worker's hands
        assert ex.interrupt(squares[2]) is True
        blocker_gate.release(1)
        assert blocker.result(timeout=30) == "late"
        _done, not_done = cf.wait(squares, timeout=30)
        assert not not_done
        assert squares[2].cancelled()
        assert [f.result() for i, f in enumerate(squares) if i != 2] == [i * i for i in range(10, 17) if i != 12]
        assert [f.result(timeout=30) for f in fillers + held] == [i * i for i in range(len(fillers))] + [0, 1]
    finally:
        ex.shutdown(wait=True)
        gate.close()
        blocker_gate.close()


@pytest.mark.timeout(60)
def test_long_tasks_are_not_batched():
    ex = InterpreterPoolExecutor(WORKERS)
    try:
        for _ in range(3):
            assert ex.submit(h.spin, 2_000_000).result(timeout=30) is not None
            futures = [ex.submit(h.spin, 200_000) for _ in range(40)]
            cf.wait(futures, timeout=30)
        assert ex._pool.batch_max == 1 and ex._pool.batches == 0
    finally:
        ex.shutdown()
