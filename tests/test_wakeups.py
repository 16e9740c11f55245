"""Which worker wakes for a queued task.  A pool with more workers than CPUs
wakes as few sleeping workers as it can (each wake-up takes a CPU from the
thread that submits), but never so few that a queued call waits while a worker
sleeps: as with ProcessPoolExecutor, a free worker takes the next call.  The
calls here only finish once all of a round have started together, so each
round needs every one of them on its own worker, whatever the interleaving
with bursts of short calls that leave workers lingering for more."""

from __future__ import annotations

import os
import random

import pytest

import interpexec

from . import wake_helpers as wh

CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [2, CPUS + 1, 4 * CPUS])
def test_calls_that_must_run_together_each_get_a_worker(workers):
    rng = random.Random(20261204 + workers)
    started, release = interpexec.Queue(), interpexec.Queue()
    with interpexec.InterpreterPoolExecutor(workers) as pool:
        for round_no in range(12):
            together = rng.randint(2, workers)
            burst = [pool.submit(wh.noop) for _ in range(rng.choice((0, 1, 5, 50)))]
            gated = []
            for i in range(together):
                gated.append(pool.submit(wh.rendezvous, started, release, i))
                burst += [pool.submit(wh.noop) for _ in range(rng.choice((0, 0, 1, 3)))]
            seen = sorted(started.get(timeout=15) for _ in range(together))
            assert seen == list(range(together)), f"round {round_no}: {together} calls did not all start"
            for _ in range(together):
                release.put(round_no)
            assert [f.result(timeout=15) for f in gated] == [round_no] * together
            assert [f.result(timeout=15) for f in burst] == [None] * len(burst)
