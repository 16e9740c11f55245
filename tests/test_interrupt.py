"""Stopping running work: deadlines (schedule, task_timeout), interrupt(), and
retiring a worker stuck in C code."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import os
import random
import threading
import types

import pytest

from interpexec import BrokenInterpreterPool, InterpreterPoolExecutor, _compat

from . import fault_helpers as fh
from . import helpers


def _interpreter_ids() -> set[int]:
    """Ids of the interpreters that exist now (CPython never reuses an id)."""
    import _interpreters

    return {int(entry[0]) for entry in _interpreters.list_all()}


@pytest.fixture
def signals():
    """Two pipes tasks write to: ``started`` once they run, ``stopped`` when they are
    stopped (see fault_helpers.spin_until_stopped / busy_signalled)."""
    started_r, started_w = os.pipe()
    stopped_r, stopped_w = os.pipe()
    yield types.SimpleNamespace(started_r=started_r, started_w=started_w, stopped_r=stopped_r, stopped_w=stopped_w)
    for fd in (started_r, started_w, stopped_r, stopped_w):
        os.close(fd)


@pytest.mark.timeout(30)
def test_pure_python_loop_is_stopped_at_its_deadline_and_worker_is_replaced():
    with InterpreterPoolExecutor(1) as ex:
        first = ex.submit(fh.interp_id).result(timeout=20)
        fut = ex.schedule(fh.spin_forever, timeout=0.2)
        with pytest.raises(TimeoutError):
            fut.result(timeout=10)
        assert not fut.cancelled()
        # At the deadline a fresh worker takes the timed-out one's place (capacity
        # comes back at once even when a call is stuck in C); the old one ends
        # when its call returns.
        assert ex.submit(fh.interp_id).result(timeout=10) != first
        workers = ex.stats()["workers"]
        assert sum(not w["retired"] for w in workers) == 1


@pytest.mark.timeout(30)
def test_stopped_task_runs_its_finally_blocks():
    rfd, wfd = os.pipe()
    try:
        with InterpreterPoolExecutor(1) as ex:
            fut = ex.schedule(fh.spin_with_cleanup, (wfd,), timeout=0.1)
            with pytest.raises(TimeoutError):
                fut.result(timeout=10)
            assert os.read(rfd, 16) == b"cleaned"
    finally:
        os.close(rfd)
        os.close(wfd)


@pytest.mark.timeout(30)
def test_pool_wide_task_timeout_applies_to_submit():
    with InterpreterPoolExecutor(1, task_timeout=0.2) as ex:
        with pytest.raises(TimeoutError):
            ex.submit(fh.spin_forever).result(timeout=10)
        assert ex.submit(fh.ok, 3).result(timeout=10) == 3
        # schedule() can override the default.
        assert ex.schedule(fh.busy_then_value, (0.3, "long"), timeout=5).result(timeout=10) == "long"


@pytest.mark.timeout(30)
def test_interrupt_stops_a_running_task_and_cancel_keeps_its_meaning(signals):
    with InterpreterPoolExecutor(1) as ex:
        running = ex.submit(fh.spin_until_stopped, signals.started_w, signals.stopped_w)
        queued = ex.submit(fh.ok, 1)
        # Wait until it runs (the single worker cannot start the second task before it).
        assert helpers.wait_bytes(signals.started_r, 1) == b"r"
        assert not running.cancel()  # standard meaning: a running task is not cancelled
        assert ex.interrupt(running)
        assert running.cancelled()
        with pytest.raises(cf.CancelledError):
            running.result(timeout=1)
        # Stopped inside the worker (its finally ran), which then takes the next task.
        assert helpers.wait_bytes(signals.stopped_r, 1) == b"s"
        assert queued.result(timeout=10) == 1
        done = ex.submit(fh.ok, 2)
        assert done.result(timeout=10) == 2
        assert not ex.interrupt(done)  # already finished


def _bytes_in_pipe(fd: int) -> int:
    """How many bytes wait in the pipe ``fd``, without taking any."""
    import fcntl
    import struct
    import termios

    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


@pytest.mark.timeout(60)
def test_a_worker_s_first_ctypes_import_holds_the_process_s_token(signals):
    """A worker imports ctypes (to interrupt its task) holding the process's one
    ctypes token: ctypes' type table, shared by every interpreter and rewritten
    by each one's import, crashed 3.14 when two workers' watchdogs interrupted
    at the same moment.  Interrupts asked while the token is held elsewhere wait
    for it, go through once it is back, and leave it whole."""
    rfd, wfd = _compat.ctypes_token()
    with InterpreterPoolExecutor(4) as ex:  # (fresh workers: none has imported ctypes)
        ex.prestart(wait=True)
        futs = [ex.submit(fh.spin_until_stopped, signals.started_w, signals.stopped_w) for _ in range(4)]
        assert helpers.wait_bytes(signals.started_r, 4) == b"rrrr"
        taken = b""
        try:
            taken = os.read(rfd, 1)  # (this test holds the token)
            assert all(ex.interrupt(f) for f in futs)
            # (A bounded look for what must not happen: no task stops meanwhile.)
            assert not helpers.readable(signals.stopped_r, 0.3)
        finally:
            if taken:
                os.write(wfd, taken)
        assert helpers.wait_bytes(signals.stopped_r, 4) == b"ssss"
        assert all(f.cancelled() for f in futs)
    assert _bytes_in_pipe(rfd) == 1  # (neither kept nor given back twice)


@pytest.mark.timeout(60)
def test_a_deadline_fails_its_future_at_once_while_the_ctypes_token_is_held_elsewhere(signals):
    """A worker's first interrupt waits for the process's ctypes token (held
    here, as another worker importing ctypes would), but its deadline fails the
    future at once all the same: the TIMEOUT goes first, the interrupt after."""
    rfd, wfd = _compat.ctypes_token()
    with InterpreterPoolExecutor(1) as ex:  # (a fresh worker: it has not imported ctypes)
        ex.prestart(wait=True)
        taken = b""
        try:
            taken = os.read(rfd, 1)  # (this test holds the token)
            fut = ex.schedule(fh.spin_until_stopped, (signals.started_w, signals.stopped_w), timeout=0.2)
            assert helpers.wait_bytes(signals.started_r, 1) == b"r"
            with pytest.raises(TimeoutError):
                fut.result(timeout=20)
            assert fut.done()  # (the deadline's TimeoutError, not the wait's)
            assert not helpers.readable(signals.stopped_r, 0)  # (still spinning: no interrupt yet)
        finally:
            if taken:
                os.write(wfd, taken)
        assert helpers.wait_bytes(signals.stopped_r, 1) == b"s"
    assert _bytes_in_pipe(rfd) == 1


@pytest.mark.timeout(30)
def test_interrupt_a_pending_task_cancels_it(signals):
    with InterpreterPoolExecutor(1) as ex:
        blocker = ex.submit(fh.spin_until_stopped, signals.started_w, signals.stopped_w)
        pending = [ex.submit(fh.ok, i) for i in range(50)]
        assert helpers.wait_bytes(signals.started_r, 1) == b"r"  # the blocker runs
        assert ex.interrupt(pending[-1])
        assert pending[-1].cancelled()
        assert ex.interrupt(blocker)
        assert helpers.wait_bytes(signals.stopped_r, 1) == b"s"
        assert [f.result(timeout=10) for f in pending[:-1]] == list(range(49))


@pytest.mark.timeout(60)
def test_stuck_c_call_is_retired_and_capacity_comes_back():
    with InterpreterPoolExecutor(2, interrupt_grace=0.2) as ex:
        ex.prestart()
        stuck = ex.schedule(fh.block_in_c, (5,), timeout=0.1)
        with pytest.raises(TimeoutError):
            stuck.result(timeout=10)
        # The next tasks run on two live workers without waiting for the stuck one
        # (which would block them for 5 s).
        futs = [ex.submit(fh.busy_then_value, 0.3, i) for i in range(2)]
        assert [f.result(timeout=4) for f in futs] == [0, 1]
        stats = ex.stats()
        assert sum(1 for w in stats["workers"] if not w["retired"]) == 2
        assert any(w["retired"] for w in stats["workers"])


def _stuck(ex, not_done):
    """What the pool looked like when futures did not resolve (seen once in CI on
    3.14 and once in a review on 3.13; the case reproduced since had lost both
    workers: see test_faults.py's test of a worker its watchdog retired that
    ended before the news was handled)."""
    pool = ex._pool
    return {
        "not done": len(not_done),
        "their states": sorted({f._state for f in not_done}),
        "pending": len(pool.pending),
        "inflight": len(pool.inflight),
        "inflight states": sorted({item.future._state for item in list(pool.inflight.values())}),
        "window": pool.window,
        "active": pool.active,
        "task queue": _compat.queue_count(pool.tasks.qid),
        "result queue": _compat.queue_count(pool.results.qid),
        "workers": [(w.slot, w.retired) for w in list(pool.workers.values())],
        "resolver alive": pool.resolver_thread is not None and pool.resolver_thread.is_alive(),
    }


@pytest.mark.timeout(120)
def test_random_deadlines_and_interrupts_leave_nothing_behind():
    # Compared as sets: threads or interpreters of earlier tests (a worker retired
    # while stuck in C ends on its own) may come and go meanwhile.
    threads_before = set(threading.enumerate())
    interps_before = _interpreter_ids()
    prefix = "ietest-leak"
    rng = random.Random(1234)
    with InterpreterPoolExecutor(2, interrupt_grace=0.5, thread_name_prefix=prefix) as ex:
        futs = []
        for i in range(1000):
            kind = rng.random()
            if kind < 0.3:
                futs.append(ex.schedule(fh.busy_then_value, (rng.random() * 0.004, i), timeout=rng.random() * 0.004))
            else:
                futs.append(ex.submit(fh.busy_then_value, rng.random() * 0.002, i))
            if rng.random() < 0.2:
                ex.interrupt(rng.choice(futs))
        _, not_done = cf.wait(futs, timeout=90)
        assert not not_done, str(_stuck(ex, not_done))  # (a str: pytest abbreviates a dict)
        for i, f in enumerate(futs):
            if f.cancelled():
                continue
            exc = f.exception()
            assert exc is None or isinstance(exc, TimeoutError), repr(exc)
            if exc is None:
                assert f.result() == i
    # shutdown(wait=True) has joined the resolver and every worker, except one
    # retired because a stopped task did not return within interrupt_grace: such a
    # worker ends by itself once its (short) task returns.  Only those may remain.
    leftover = [t for t in threading.enumerate() if t not in threads_before]
    assert all(t.name.startswith(prefix + "_") and t.name != prefix + "_resolver" for t in leftover), leftover
    still_listed = ex.stats()["workers"]
    assert all(w["retired"] for w in still_listed), still_listed
    for t in leftover:
        t.join(timeout=30)
    assert [t for t in threading.enumerate() if t not in threads_before] == []
    assert _interpreter_ids() - interps_before == set()


@pytest.mark.timeout(60)
def test_shutdown_can_interrupt_running_tasks(signals):
    ex = InterpreterPoolExecutor(2)
    try:
        running = [ex.submit(fh.spin_until_stopped, signals.started_w, signals.stopped_w) for _ in range(2)]
        queued = [ex.submit(fh.ok, i) for i in range(10)]
        # Both really run, one in each worker, before shutdown is asked to stop them.
        assert helpers.wait_bytes(signals.started_r, 2) == b"rr"
        assert not any(f.done() for f in running + queued)
        ex.shutdown(wait=True, cancel_futures=True, interrupt_running=True)
        assert all(f.cancelled() for f in running)
        assert helpers.wait_bytes(signals.stopped_r, 2) == b"ss"  # stopped inside the workers
        assert all(f.done() for f in queued)
        # A queued task a freed worker took before its interrupt request arrived may
        # have finished; every other one is cancelled.
        assert all(f.cancelled() or f.result() == i for i, f in enumerate(queued))
    finally:
        ex.shutdown(wait=True, cancel_futures=True, interrupt_running=True)


@pytest.mark.timeout(60)
def test_map_timeout_can_interrupt_running_tasks(signals):
    with InterpreterPoolExecutor(2) as ex:
        it = ex.map(
            fh.busy_signalled,
            itertools.repeat(signals.started_w),
            itertools.repeat(signals.stopped_w),
            [0.05, 30, 30],
            ["a", "b", "c"],
            timeout=1,
            interrupt_on_timeout=True,
        )
        # All three ran: "a" ended at once, "b" and "c" now run, one per worker.
        assert helpers.wait_bytes(signals.started_r, 3) == b"rrr"
        assert next(it) == "a"
        with pytest.raises(TimeoutError):
            next(it)
        # The long tasks were stopped inside their workers: the pool is free again at once.
        assert helpers.wait_bytes(signals.stopped_r, 2) == b"ss"
        assert ex.submit(fh.ok, 1).result(timeout=5) == 1


@pytest.mark.timeout(30)
def test_deadline_stops_a_task_blocked_in_an_interpexec_queue():
    import interpexec

    q = interpexec.Queue()
    with InterpreterPoolExecutor(1, interrupt_grace=5) as ex:
        first = ex.submit(fh.interp_id).result(timeout=20)
        fut = ex.schedule(fh.block_on_queue, (q,), timeout=0.2)
        with pytest.raises(TimeoutError):
            fut.result(timeout=10)
        # The blocked get() woke up (the old worker ended); a fresh one serves.
        assert ex.submit(fh.interp_id).result(timeout=10) != first


@pytest.mark.timeout(60)
def test_deadlines_hold_where_error_reporting_cannot_load():
    """A worker loads its error packing with its first failure; where it cannot
    (no descriptor left, imports broken), a deadline is still enforced, for a
    task and for an initializer."""
    with InterpreterPoolExecutor(1) as ex:
        with pytest.raises(TimeoutError):
            ex.schedule(fh.spin_where_error_reporting_cannot_load, timeout=0.2).result(timeout=20)
        assert ex.submit(fh.ok, 1).result(timeout=20) == 1
    ex = InterpreterPoolExecutor(1, initializer=fh.spin_where_error_reporting_cannot_load, task_timeout=0.2)
    with ex:
        with pytest.raises(BrokenInterpreterPool) as broken:
            ex.submit(fh.ok, 1).result(timeout=20)
        cause = broken.value.__cause__
        assert "TimeoutError" in repr(cause) or isinstance(cause, TimeoutError), repr(cause)


@pytest.mark.timeout(60)
def test_a_watchdog_that_cannot_interrupt_lives_on(signals):
    """An interrupt that fails (ctypes cannot load) is reported; the watchdog
    goes on enforcing deadlines.  (CPython's own unraisable hook refused the
    report, which ended the watchdog thread: later deadlines were ignored.)"""
    with InterpreterPoolExecutor(1) as ex:
        fut = ex.submit(fh.spin_where_ctypes_cannot_load, signals.started_w)
        assert helpers.wait_bytes(signals.started_r, 1) == b"r"
        ex.interrupt(fut)
        with contextlib.suppress(cf.CancelledError):
            fut.result(timeout=20)
        with pytest.raises(TimeoutError):
            ex.schedule(fh.spin_forever, timeout=0.2).result(timeout=20)
        assert ex.submit(fh.ok, 2).result(timeout=20) == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("order", ["first, then second", "second, then first"])
def test_two_queued_tasks_on_one_slot_interrupted_neither_runs(order):
    """interrupt() of a queued task marks it in the control block, one mark per
    slot (tid % nslots), and tells the workers' watchdogs.  Two queued tasks
    whose ids share a slot (ids used up in between: calls that failed at
    submit) both interrupted: the second mark replaced the first, and the first
    task ran to its end, its value dropped into a cancelled future.  The
    watchdogs now remember interrupted tasks not running in their worker."""
    rfd, wfd = os.pipe()
    try:
        with InterpreterPoolExecutor(1) as ex, helpers.Gate() as gate:
            nslots = ex._pool.layout.nslots
            blocker = gate.submit(ex, "blocker")
            gate.wait_arrived(1)
            first = ex.submit(helpers.record, wfd, 1)
            while True:  # use up ids: arguments that cannot be pickled fail at submit
                failed = ex.submit(helpers.identity, threading.Lock())
                assert isinstance(failed.exception(timeout=10), TypeError)
                if failed._ie_tid == first._ie_tid + nslots - 1:
                    break
            second = ex.submit(helpers.record, wfd, 2)
            assert second._ie_tid % nslots == first._ie_tid % nslots
            pair = [first, second] if order == "first, then second" else [second, first]
            assert [ex.interrupt(f) for f in pair] == [True, True]
            gate.release(1)
            assert blocker.result(timeout=30) == "blocker"
            assert ex.submit(helpers.record, wfd, 3).result(timeout=30) == 3
            assert first.cancelled() and second.cancelled()
        assert os.read(rfd, 100) == b"\x03"  # only the last task ran
    finally:
        os.close(rfd)
        os.close(wfd)


@pytest.mark.timeout(120)
def test_an_interrupt_storm_leaves_the_pool_working():
    """Seeded: bursts of short tasks, about half interrupted at once, on a
    2-worker pool.  A worker reads its queued commands itself before it starts a
    task (d68aea7) while its watchdog reads them too: a get that lost that race
    returned None and killed the worker (BrokenInterpreterPool within seconds)."""
    import time

    rng = random.Random(20261205)
    end = time.monotonic() + 8  # (bounded: the race needed 0.5 to 5 s to show)
    with InterpreterPoolExecutor(2) as ex:
        while time.monotonic() < end:
            futs = [ex.submit(helpers.spin, rng.randint(0, 2000)) for _ in range(8)]
            asked = [f for f in futs if rng.random() < 0.5 and ex.interrupt(f)]
            for f in futs:
                try:
                    f.result(timeout=30)
                except cf.CancelledError:
                    assert f in asked
        assert ex.submit(helpers.spin, 10).result(timeout=30) == helpers.spin(10)


@pytest.mark.timeout(120)
def test_work_queued_behind_workers_retired_in_c_still_runs():
    """Tasks past their deadline while blocked in C retire their worker (it ends
    when the call returns) and a replacement starts, in a free slot.  With every
    slot held by retired workers, none could start, and when those ended nothing
    started one either: the queued work waited for the next submit (for ever
    without one)."""
    with InterpreterPoolExecutor(1) as ex:
        slots = ex._pool.layout.slots
        futs = [ex.schedule(fh.sleep_in_c, (1,), timeout=0.05) for _ in range(2 * slots)]
        not_done = cf.wait(futs, timeout=60).not_done
        assert not not_done, f"{len(not_done)} of {len(futs)} never ran"
        assert all(isinstance(f.exception(), TimeoutError) for f in futs)
