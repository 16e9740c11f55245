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
import threading
import time

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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, CPUS + 1, 4 * CPUS])
def test_calls_made_one_after_the_other_run_in_the_interpreter_used_last(workers):
    """As anyio takes its interpreter workers most recently used first: a call
    made after the last one returned runs in the same interpreter (whose
    imports and caches are warm), whether that worker still lingers or has
    gone to sleep.  (A shared wake-up pipe wakes its longest sleeper: calls
    went round every worker.)  The pauses only vary which of the two it is:
    the assertion holds either way."""
    rng = random.Random(20261206 + workers)
    with interpexec.InterpreterPoolExecutor(workers) as pool:
        pool.prestart(wait=True)
        first = pool.submit(wh.interp_id).result(timeout=15)
        for i in range(60):
            time.sleep(rng.choice((0, 0, 0, 0.0005, 0.005)))  # (the caller's own work between calls)
            assert pool.submit(wh.interp_id).result(timeout=15) == first, f"call {i}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("config", range(4))
def test_seeded_mix_of_lone_calls_bursts_and_rendezvous_never_starves(config):
    """A seeded mix, from two submitting threads, of calls made one after the
    other (with pauses), bursts, and groups of calls that only finish once all
    of them run at once, in pools that recycle workers (``max_tasks_per_child``)
    or let idle ones go (``idle_timeout``): a group that does not all start
    within 15 s means a queued call waited while a worker slept.  Bounded to
    about 8 s per configuration."""
    rng = random.Random(20261206 * 10 + config)
    workers = rng.choice((2, 3, CPUS + 1, 2 * CPUS + 1))
    options = {}
    if config % 2:
        options["max_tasks_per_child"] = rng.choice((1, 3, 17))
    if config >= 2:
        options["idle_timeout"] = rng.choice((0.01, 0.05))
    failures = []
    with interpexec.InterpreterPoolExecutor(workers, **options) as pool:

        def submitter(seed, groups):
            r = random.Random(seed)
            deadline = time.monotonic() + 8
            round_no = 0
            while time.monotonic() < deadline and not failures:
                kind = r.randrange(3)
                if kind == 0:  # calls made one after the other
                    for _ in range(r.randint(1, 20)):
                        time.sleep(r.choice((0, 0, 0.0002, 0.002)))  # (varies the workers' state)
                        if pool.submit(wh.noop).result(timeout=15) is not None:
                            failures.append("a no-op returned something")
                elif kind == 1:  # a burst
                    burst = [pool.submit(wh.noop) for _ in range(r.choice((2, 10, 100)))]
                    if [f.result(timeout=15) for f in burst] != [None] * len(burst):
                        failures.append("a burst went wrong")
                elif groups is not None:  # a group that must run at once (one thread only: they would share workers)
                    started, release = groups
                    together = r.randint(2, workers)
                    gated = [pool.submit(wh.rendezvous, started, release, i) for i in range(together)]
                    try:
                        seen = sorted(started.get(timeout=15) for _ in range(together))
                    except Exception as exc:  # (the queue's Empty: some never started)
                        failures.append(f"round {round_no}: {together} calls did not all start ({exc!r})")
                        seen = []
                    for _ in range(together):
                        release.put(round_no)
                    if seen and [f.result(timeout=15) for f in gated] != [round_no] * together:
                        failures.append(f"round {round_no}: wrong results")
                    round_no += 1

        groups = (interpexec.Queue(), interpexec.Queue())
        threads = [
            threading.Thread(target=submitter, args=(rng.random(), groups)),
            threading.Thread(target=submitter, args=(rng.random(), None)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a submitter hung"
    assert not failures, (workers, options, failures)


# Workers start on demand: up to the CPUs at once, past them only when queued
# calls wait with no worker taking any (see Resolver.grow_if_stalled).  The CPU
# count is set to 2 here, so the figures do not depend on the machine.


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(os, "process_cpu_count", lambda: 2)


def _workers(pool):
    return len([w for w in pool.stats()["workers"] if not w["retired"]])


@pytest.mark.timeout(60)
def test_a_pool_larger_than_the_cpus_starts_only_what_its_work_needs(two_cpus):
    started, release = interpexec.Queue(), interpexec.Queue()
    with interpexec.InterpreterPoolExecutor(6) as pool:
        assert _workers(pool) == 0  # (nothing before the first submit)
        assert pool.submit(wh.noop).result(timeout=15) is None
        assert _workers(pool) == 2
        # Two calls that hold their workers: nothing is queued, nothing grows.
        held = [pool.submit(wh.rendezvous, started, release, i) for i in range(2)]
        assert sorted(started.get(timeout=15) for _ in range(2)) == [0, 1]
        assert _workers(pool) == 2
        # Three more, which only run on workers of their own: the pool grows.
        held += [pool.submit(wh.rendezvous, started, release, i) for i in range(2, 5)]
        assert sorted(started.get(timeout=15) for _ in range(3)) == [2, 3, 4]
        assert 5 <= _workers(pool) <= 6
        for i in range(5):
            release.put(i)
        assert sorted(f.result(timeout=15) for f in held) == list(range(5))
        pool.prestart()  # starts every worker
        assert _workers(pool) == 6


@pytest.mark.timeout(60)
def test_calls_queued_at_shutdown_that_need_more_workers_get_them(two_cpus):
    """shutdown(wait=True) waits for queued calls: they still get the workers
    they need (and those workers their STOPs)."""
    started, release = interpexec.Queue(), interpexec.Queue()
    pool = interpexec.InterpreterPoolExecutor(5)
    gated = [pool.submit(wh.rendezvous, started, release, i) for i in range(5)]
    releaser = wh.release_once_all_started(started, release, 5, value=5)
    pool.shutdown(wait=True)
    releaser.join(20)
    assert [f.result(timeout=0) for f in gated] == [5] * 5
    assert _workers(pool) == 0


@pytest.mark.timeout(60)
def test_a_worker_whose_initializer_hangs_does_not_keep_the_pool_from_growing(two_cpus):
    """A starting worker counts as one about to take a queued call, but only for
    a while: calls that need more workers than the rest get them even though
    one worker's initializer never ends."""
    tokens, gate = interpexec.Queue(), interpexec.Queue()
    tokens.put(1)
    started, release = interpexec.Queue(), interpexec.Queue()
    with interpexec.InterpreterPoolExecutor(4, initializer=wh.one_hangs, initargs=(tokens, gate)) as pool:
        try:
            gated = [pool.submit(wh.rendezvous, started, release, i) for i in range(2)]
            assert sorted(started.get(timeout=20) for _ in range(2)) == [0, 1]
            for i in range(2):
                release.put(i)
            assert sorted(f.result(timeout=15) for f in gated) == [0, 1]
            assert tokens.qsize() == 0  # (one initializer did take the token: it still hangs)
        finally:
            gate.put(None)


@pytest.mark.timeout(60)
def test_a_done_callback_that_waits_for_calls_needing_more_workers_gets_them(two_cpus):
    """A done-callback of a future nobody waits for runs in the resolver thread,
    which also grows the pool: one that waits for calls that need more workers
    (found by this stop's hostile review: they never got them, the pool stayed
    at 2) grows it itself."""
    import threading

    started, release = interpexec.Queue(), interpexec.Queue()
    out, done = {}, threading.Event()
    releaser = wh.release_once_all_started(started, release, 4)
    with interpexec.InterpreterPoolExecutor(4) as pool:

        def callback(_):
            out["thread"] = threading.current_thread().name
            gated = [pool.submit(wh.rendezvous, started, release, i) for i in range(4)]
            try:
                out["results"] = sorted(f.result(timeout=20) for f in gated)
            finally:
                done.set()

        pool.submit(wh.noop).add_done_callback(callback)
        assert done.wait(30)
    releaser.join(20)
    assert out["thread"].endswith("_resolver")
    assert out["results"] == [0, 1, 2, 3]


@pytest.mark.timeout(60)
def test_calls_no_worker_took_do_not_run_once_the_pool_broke(two_cpus):
    """Found by this stop's second hostile review (likelier with workers grown
    on demand, whose initializers run later): a pool broken by a worker's
    failed initializer failed every future, yet its surviving workers went on
    to run the calls still queued (and ``shutdown()`` waited for them).  The
    calls no worker has taken are taken back when the pool breaks."""
    tokens, started, release, ran = (interpexec.Queue() for _ in range(4))
    tokens.put(1)
    tokens.put(2)
    pool = interpexec.InterpreterPoolExecutor(4, initializer=wh.needs_a_token, initargs=(tokens,))
    try:
        held = [pool.submit(wh.rendezvous, started, release, i) for i in range(2)]
        assert sorted(started.get(timeout=20) for _ in range(2)) == [0, 1]
        # Queued behind two held workers: the pool grows, and its new worker fails.
        queued = [pool.submit(wh.say_ran, ran, i) for i in range(10)]
        for f in queued:
            assert isinstance(f.exception(timeout=20), interpexec.BrokenInterpreterPool)
    finally:
        release.put(0)
        release.put(1)
    pool.shutdown(wait=True)
    assert all(isinstance(f.exception(timeout=0), interpexec.BrokenInterpreterPool) for f in held)
    assert ran.qsize() == 0


@pytest.mark.timeout(60)
def test_two_pools_whose_callbacks_wait_for_each_others_calls_both_grow(two_cpus):
    """Found by this stop's second hostile review: each pool's resolver thread,
    busy in a done-callback waiting for calls of the other pool that need more
    workers, could not grow its own; both rendezvous gave up.  A thread that
    waits in ``result()`` grows the pool it waits for."""
    import threading

    out, done = {}, threading.Barrier(3)
    with interpexec.InterpreterPoolExecutor(4) as a, interpexec.InterpreterPoolExecutor(4) as b:

        def waits_for(other, name):
            def callback(_):
                started, release = interpexec.Queue(), interpexec.Queue()
                gated = [other.submit(wh.rendezvous, started, release, i) for i in range(4)]
                wh.release_once_all_started(started, release, 4)
                try:
                    out[name] = sorted(f.result(timeout=20) for f in gated)
                finally:
                    done.wait(30)

            return callback

        fa, fb = a.submit(wh.noop), b.submit(wh.noop)
        fa.add_done_callback(waits_for(b, "a"))
        fb.add_done_callback(waits_for(a, "b"))
        done.wait(30)
    assert out == {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]}
