"""Hostile review of the wake-up rework (_wakeup), watch()/usable/Watch, the
watchdog's repeated Interrupted, Queue on _wakeup, interpexec.dask as a package
and the command line (--version, bench).

Tests marked "BUG" fail on the code they were written against; each says what
is wrong and where.  The others pin behaviour that held up under attack.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import queue
import random
import selectors
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import interpexec
from interpexec import aio

from . import hostile14_helpers as h

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEEKS = 30 * 86400.0  # a timeout longer than poll()'s int milliseconds (24.8 days)


def run_script(code: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=ROOT,
    )


def wait_readable(fd: int, timeout: float) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(timeout))


def watch_until_done(watch: interpexec.Watch, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(watch.fd, selectors.EVENT_READ)
        while not watch.check():
            left = deadline - time.monotonic()
            assert left > 0, "the watch never reported the future done"
            sel.select(left)


@pytest.fixture(scope="module")
def pool():
    executor = interpexec.InterpreterPoolExecutor(max_workers=2)
    executor.prestart()
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


def running(pool: interpexec.InterpreterPoolExecutor, fn, *args) -> cf.Future:
    """Submit ``fn(q, *args)`` and return once it has started in a worker."""
    q = interpexec.Queue()
    fut = pool.submit(fn, q, *args)
    assert q.get(timeout=20) == "running"
    return fut


# =============================================================================
# 1. Long timeouts: poll() takes an int of milliseconds
# =============================================================================


@pytest.mark.timeout(30)
def test_result_with_a_timeout_of_weeks_behaves_like_a_standard_future(pool):
    """BUG: ``fut.result(timeout=30 days)`` raises OverflowError("timeout is too
    large") while the task runs; a standard Future (Condition.wait) accepts it.
    _wakeup.wait (interpexec/_wakeup.py:100, polled at :106) passes ``int(left * 1000)`` to
    poll(), whose limit is INT_MAX ms (24.8 days): clamp the wait (or loop)."""
    plain: cf.Future[int] = cf.Future()
    threading.Timer(0.05, plain.set_result, (1,)).start()
    assert plain.result(timeout=WEEKS) == 1  # the standard behaviour
    fut = pool.submit(h.sleep_then, 0.3, 2)
    assert fut.result(timeout=WEEKS) == 2


@pytest.mark.timeout(30)
def test_queue_get_and_put_with_a_timeout_of_weeks():
    """BUG: ``Queue.get(timeout=30 days)`` on an empty queue (and ``put`` on a full
    one) raise OverflowError instead of waiting; queue.Queue accepts such a
    timeout.  Same cause: _wakeup.wait (interpexec/_wakeup.py:100)."""
    q = interpexec.Queue(maxsize=1)
    threading.Timer(0.05, q.put, ("x",)).start()
    assert q.get(timeout=WEEKS) == "x"
    q.put("a")
    threading.Timer(0.05, q.get).start()
    q.put("b", timeout=WEEKS)
    assert q.get(timeout=5) == "b"


@pytest.mark.timeout(60)
def test_a_deadline_of_weeks_keeps_the_task_interruptible(make_pool):
    """BUG: ``schedule(timeout=30 days)`` (or ``task_timeout``) kills the worker's
    watchdog thread: ``poller.poll(ms)`` in Watchdog._run
    (interpexec/_watchdog.py:181) raises OverflowError ("Exception ignored in
    thread started by Watchdog._run" on stderr).  From then on that worker's
    tasks cannot be stopped: interrupt() cancels the future but the task keeps
    spinning, and the next task waits behind it."""
    pool = make_pool(max_workers=1)
    fut = running(pool, h.announce_then_spin, 20)
    assert pool.interrupt(fut)
    pool.submit(h.identity, 0).result(timeout=10)  # a sane worker: a fresh watchdog
    q = interpexec.Queue()
    # (It blocks in C for a moment first: the watchdog then reads the deadline.)
    fut = pool.schedule(h.announce_sleep_spin, args=(q, 0.2, 6), timeout=WEEKS)
    assert q.get(timeout=20) == "slept"
    assert pool.interrupt(fut)
    # The interrupted task must have stopped: the worker takes the next task.
    assert pool.submit(h.identity, 7).result(timeout=4) == 7


@pytest.mark.timeout(60)
def test_an_idle_timeout_of_weeks_keeps_the_pool_usable(make_pool):
    """BUG (older than this change): ``idle_timeout=30 days`` breaks the pool as
    soon as a worker goes idle: ``idle_poll.poll(idle_ms)`` in _serve
    (interpexec/_worker_main.py:314) raises OverflowError and the worker dies
    (BrokenInterpreterPool: "A worker interpreter stopped unexpectedly")."""
    pool = make_pool(max_workers=1, idle_timeout=WEEKS)
    assert pool.submit(h.identity, 1).result(timeout=10) == 1
    q = interpexec.Queue()
    q.put("go")
    # The worker idles between these two (it blocks in its idle poll).
    assert pool.submit(h.wait_on, q).result(timeout=10) == "go"
    threading.Timer(0.1, q.put, ("later",)).start()
    assert pool.submit(h.identity, 2).result(timeout=10) == 2
    assert q.get(timeout=10) == "later"
    assert pool.submit(h.identity, 3).result(timeout=10) == 3


# =============================================================================
# 2. watch() / Watch / usable
# =============================================================================


@pytest.mark.timeout(60)
def test_a_held_watch_does_not_starve_result_in_another_thread(make_pool):
    """BUG: while a Watch on a running future is open and nobody checks it (its
    holder is busy, or is itself the thread calling ``fut.result()``: ``w =
    pool.watch(f); f.result(timeout=5)`` times out), ``fut.result(timeout=...)``
    in any thread times out although the task finished long ago.  The worker writes only to the watch's pipe
    (interpexec/_worker_main.py:343: the wake_waiter write sets woke=True, so the
    resolver is not woken), and Waiting.wait_for (interpexec/_waiting.py:101)
    falls back to the Condition wait, which only the resolver would satisfy.
    concurrent.futures.wait()/as_completed() on the future starve the same way."""
    pool = make_pool(max_workers=1)
    fut = running(pool, h.announce_then_sleep, 0.2)
    watch = pool.watch(fut)
    assert watch is not None
    try:
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(fut.result(timeout=5)))
        t.start()
        t.join(20)
        assert got == ["slept"]
    finally:
        watch.close()


@pytest.mark.timeout(60)
def test_watch_returns_none_unless_the_task_is_in_this_pools_hands(make_pool):
    pool = make_pool(max_workers=1)
    other = make_pool(max_workers=1)
    assert pool.watch(cf.Future()) is None  # not a pool's future
    busy = running(pool, h.announce_then_spin, 20)
    queued = [pool.submit(h.identity, i) for i in range(40)]  # beyond the in-flight window
    assert pool.watch(queued[-1]) is None
    foreign = running(other, h.announce_then_spin, 20)
    assert pool.watch(foreign) is None  # another pool's task
    w = other.watch(foreign)
    assert w is not None
    assert other.watch(foreign) is None  # watched already
    w.close()
    w.close()  # a second close does nothing
    assert pool.interrupt(busy) and other.interrupt(foreign)
    assert [f.result(timeout=20) for f in queued] == list(range(40))
    assert pool.watch(queued[0]) is None  # done
    busy = running(pool, h.announce_then_spin, 20)
    queued = [pool.submit(h.identity, i) for i in range(40)]
    assert queued[-1].cancel()
    assert pool.watch(queued[-1]) is None  # cancelled
    assert pool.interrupt(busy)
    assert [f.result(timeout=20) for f in queued[:-1]] == list(range(39))


@pytest.mark.timeout(60)
def test_watch_in_a_selector_loop_sees_completion_interrupt_and_shutdown(make_pool):
    pool = make_pool(max_workers=2)
    # completion
    fut = pool.submit(h.sleep_then, 0.1, "v")
    pool.submit(h.identity, 0).result(timeout=10)  # (fut is in a worker's hands now)
    with pool.watch(fut) as w:
        assert w is not None
        watch_until_done(w)
    assert fut.result(timeout=0) == "v"
    # interrupt() from another thread wakes the watch at once
    fut = running(pool, h.announce_then_spin, 30)
    w = pool.watch(fut)
    assert w is not None and not w.check()
    threading.Timer(0.05, pool.interrupt, (fut,)).start()
    t0 = time.monotonic()
    watch_until_done(w)
    assert time.monotonic() - t0 < 5
    assert fut.cancelled()
    w.close()
    # shutdown(cancel_futures=True): a running task still finishes, its watch says so
    fut = running(pool, h.announce_then_sleep, 0.2)
    w = pool.watch(fut)
    assert w is not None
    later = [pool.submit(h.identity, i) for i in range(30)]
    pool.shutdown(wait=False, cancel_futures=True)
    assert not pool.usable
    watch_until_done(w)
    w.close()
    assert fut.result(timeout=0) == "slept"
    assert any(f.cancelled() for f in later)
    assert all(f.cancelled() or f.result(timeout=20) == i for i, f in enumerate(later))
    assert pool.watch(fut) is None


@pytest.mark.timeout(60)
def test_usable_tracks_shutdown_and_breakage(make_pool):
    pool = make_pool(max_workers=1)
    assert pool.usable
    pool.submit(h.identity, 1).result(timeout=10)
    assert pool.usable
    pool.shutdown(wait=True)
    assert not pool.usable
    broken = make_pool(max_workers=1, initializer=h.identity, initargs=("not", "one arg"))
    with pytest.raises(interpexec.BrokenInterpreterPool):
        broken.submit(h.identity, 1).result(timeout=20)
    assert not broken.usable


@pytest.mark.timeout(60)
def test_watch_from_a_done_callback_on_the_resolver_thread(make_pool):
    """A done-callback (on the resolver thread) may watch another future and
    wait on it there: check() resolves in that thread."""
    pool = make_pool(max_workers=2)
    outcome: list[object] = []
    finished = threading.Event()

    def callback(_: cf.Future) -> None:
        try:
            g = pool.submit(h.sleep_then, 0.05, "inner")
            w = None
            while w is None and not g.done():
                w = pool.watch(g)
            if w is not None:
                with w:
                    watch_until_done(w)
            outcome.append(g.result(timeout=10))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            finished.set()

    f = pool.submit(h.identity, 1)
    f.add_done_callback(callback)
    assert f.result(timeout=10) == 1
    assert finished.wait(20)
    assert outcome == ["inner"]


@pytest.mark.timeout(90)
def test_64_watches_out_then_result_and_aio_still_work(make_pool):
    """With MAX_LENT (64) watches held open, a 65th is refused (None), and
    result()/aio on other futures fall back to the resolver and stay right;
    closing the watches makes them available again."""
    pools = [make_pool(max_workers=1) for _ in range(9)]  # 9 x 8 tasks in flight
    gate = interpexec.Queue()
    blocked = [(p, p.submit(h.wait_on, gate)) for p in pools for _ in range(8)]
    watches = [p.watch(f) for p, f in blocked]
    held = [w for w in watches if w is not None]
    try:
        assert len(held) == 64
        other = make_pool(max_workers=1)
        g = running(other, h.announce_then_sleep, 0.1)
        assert other.watch(g) is None  # no watch left to lend
        assert g.result(timeout=20) == "slept"  # result() falls back to the resolver

        async def main() -> list[int]:
            return await asyncio.gather(*[aio.run_sync(h.sleep_then, 0.01, i, executor=other) for i in range(20)])

        assert asyncio.run(main()) == list(range(20))
        for _ in blocked:
            gate.put("go")
        for w in held:
            watch_until_done(w)
    finally:
        for w in held:
            w.close()
    assert [f.result(timeout=20) for _, f in blocked] == ["go"] * len(blocked)
    g = running(other, h.announce_then_sleep, 0.1)
    w = other.watch(g)
    assert w is not None  # lent again
    w.close()
    assert g.result(timeout=20) == "slept"


# =============================================================================
# 3. The watchdog's repeated Interrupted
# =============================================================================


@pytest.mark.timeout(60)
def test_cleanup_in_finally_is_not_cut_short(make_pool):
    """BUG (design): docs/timeouts.md promises "the task unwinds normally: its
    finally blocks run and its with statements exit", but the watchdog now raises
    Interrupted again 50 ms, 150 ms, 350 ms... after the first one for as long as
    the task runs (Watchdog._run, interpexec/_watchdog.py:206-207), including
    while its ``finally`` runs: a cleanup that takes longer than ~50 ms of Python
    (flushing, closing connections, writing a checkpoint) is itself interrupted
    and never completes.  One Ctrl-C raises one KeyboardInterrupt; a refire could
    be limited to a stop that was swallowed (the unraisable hook sees those)."""
    pool = make_pool(max_workers=1)
    q = interpexec.Queue()
    fut = pool.submit(h.loop_then_clean_up, q, 0.4)
    assert q.get(timeout=20) == "running"
    assert pool.interrupt(fut)
    assert q.get(timeout=5) == "cleaned up"


@pytest.mark.timeout(60)
def test_a_task_that_swallows_the_stop_is_stopped_again(make_pool):
    """A retry loop catching BaseException does not make a task unstoppable: once
    ``interrupt_grace`` has passed (its time to unwind) the watchdog raises again,
    at growing intervals, until it ends (here after the 4th); the pool serves the
    next task meanwhile."""
    pool = make_pool(max_workers=1)
    q = interpexec.Queue()
    fut = pool.submit(h.swallow_interrupts, q, 4)
    assert q.get(timeout=20) == "running"
    assert pool.interrupt(fut)
    assert fut.cancelled()
    assert pool.submit(h.identity, "next").result(timeout=20) == "next"


@pytest.mark.timeout(60)
def test_interrupting_a_task_blocked_in_c_frees_the_future_at_once(make_pool):
    pool = make_pool(max_workers=1, interrupt_grace=0.2)
    fut = running(pool, h.announce_then_sleep, 1.5)
    t0 = time.monotonic()
    assert pool.interrupt(fut)
    with pytest.raises(cf.CancelledError):
        fut.result(timeout=5)
    assert time.monotonic() - t0 < 1.0
    # after the grace the worker is replaced; the pool goes on
    assert [pool.submit(h.identity, i).result(timeout=20) for i in range(3)] == [0, 1, 2]


@pytest.mark.timeout(90)
def test_random_interrupts_never_reach_another_task(pool):
    """interrupt() raced against tasks finishing: every future whose interrupt
    returned False (or was never interrupted) has its own value; every True one
    is cancelled.  A stray Interrupted in the next task would show as a
    cancelled/failed future that nobody interrupted."""
    rng = random.Random(14)
    futs = [pool.submit(h.short_spin, i, rng.choice((0, 50, 300, 1000))) for i in range(2000)]
    stopped: set[int] = set()

    def interrupter() -> None:
        r = random.Random(41)
        for _ in range(1000):
            i = r.randrange(len(futs))
            if pool.interrupt(futs[i]):
                stopped.add(i)

    t = threading.Thread(target=interrupter)
    t.start()
    t.join(60)
    for i, f in enumerate(futs):
        if i in stopped:
            assert f.cancelled(), i
        else:
            assert f.result(timeout=30) == i


@pytest.mark.timeout(90)
def test_tiny_deadlines_in_a_loop_then_the_process_exits_promptly():
    code = """
        import time
        import interpexec
        from tests import hostile14_helpers as h
        pool = interpexec.InterpreterPoolExecutor(max_workers=2)
        outcomes = []
        for i in range(40):
            spin, deadline = (0, 2000, 20000, 10**7)[i % 4], (0.0001, 0.001, 0.005)[i % 3]
            f = pool.schedule(h.short_spin, args=(i, spin), timeout=deadline)
            g = pool.submit(h.identity, -i)
            try:
                outcomes.append(f.result(timeout=30) == i)
            except TimeoutError:
                outcomes.append("timeout")
            assert g.result(timeout=30) == -i
        assert outcomes.count("timeout") >= 10, outcomes
        assert all(o is True or o == "timeout" for o in outcomes), outcomes
        print("done", flush=True)
    """
    t0 = time.monotonic()
    proc = run_script(code, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "done"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert time.monotonic() - t0 < 30


# =============================================================================
# 4. Queue on _wakeup
# =============================================================================


@pytest.mark.timeout(90)
def test_bounded_queue_with_producers_and_consumers_in_threads_and_workers(pool):
    q = interpexec.Queue(maxsize=3)
    n = 300
    with cf.ThreadPoolExecutor(4) as threads:
        producers = [
            pool.submit(h.produce, q, 0, n),
            threads.submit(h.produce, q, n, n),
            threads.submit(h.produce, q, 2 * n, n),
        ]
        consumers = [pool.submit(h.consume, q, n), threads.submit(h.consume, q, n), threads.submit(h.consume, q, n)]
        got = [x for c in consumers for x in c.result(timeout=60)]
        assert [p.result(timeout=10) for p in producers] == [n] * 3
    assert sorted(got) == list(range(3 * n))
    assert q.empty()


@pytest.mark.timeout(60)
def test_queue_timeouts_and_many_dropped_queues_leave_no_stale_wakeups(pool):
    for i in range(300):
        q = interpexec.Queue(maxsize=2)
        q.put(i)
        q.put(i + 1)  # full; two wake-up bytes pending in each pipe
        del q
    q = interpexec.Queue(maxsize=1)  # its pipes come from the ones just freed
    t0 = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.2)
    assert time.monotonic() - t0 >= 0.19
    q.put("x")
    with pytest.raises(queue.Full):
        q.put("y", timeout=0.1)
    assert pool.submit(h.consume, q, 1).result(timeout=20) == ["x"]


@pytest.mark.timeout(60)
def test_interrupt_a_task_blocked_in_queue_get(make_pool):
    pool = make_pool(max_workers=1)
    ready = interpexec.Queue()
    q = interpexec.Queue()
    fut = pool.submit(h.block_in_get, q, ready)
    assert ready.get(timeout=20) == "in"
    t0 = time.monotonic()
    assert pool.interrupt(fut)
    assert ready.get(timeout=10) == "left"
    assert time.monotonic() - t0 < 2
    q.put("item")  # the stopped getter took nothing
    assert pool.submit(h.consume, q, 1).result(timeout=20) == ["item"]


# =============================================================================
# 1 (cont.). Descriptors: many of them, none left, none leaked
# =============================================================================


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(120)
def test_descriptors_do_not_grow_with_pools_waiters_loops_and_queues():
    import trio

    def one_round() -> None:
        with interpexec.InterpreterPoolExecutor(max_workers=2) as p:
            futs = [p.submit(h.sleep_then, 0.01, i) for i in range(16)]
            waiters = [threading.Thread(target=f.result) for f in futs]
            for t in waiters:
                t.start()
            for t in waiters:
                t.join(30)

            async def on_asyncio() -> list[int]:
                return await asyncio.gather(*[aio.run_sync(h.sleep_then, 0.01, i, executor=p) for i in range(40)])

            assert asyncio.run(on_asyncio()) == list(range(40))

            async def on_trio() -> list[int]:
                out: list[int] = []
                async with trio.open_nursery() as nursery:
                    for i in range(20):

                        async def one(i: int = i) -> None:
                            out.append(await aio.run_sync(h.sleep_then, 0.01, i, executor=p))

                        nursery.start_soon(one)
                return sorted(out)

            assert trio.run(on_trio) == list(range(20))
            queues = [interpexec.Queue(maxsize=2) for _ in range(20)]
            for q in queues:
                q.put(1)
            del queues
            f = running(p, h.announce_then_sleep, 0.05)
            w = p.watch(f)
            assert w is not None
            with w:
                watch_until_done(w)

    one_round()
    one_round()
    base = _fd_count()
    for _ in range(3):
        one_round()
    assert _fd_count() <= base


@pytest.mark.timeout(60)
def test_queues_made_in_tasks_do_not_leak_descriptors_when_workers_recycle(make_pool):
    """BUG (documented in _queue's docstring as a known leak, older than this
    change): a Queue created inside a task takes two pipes from that worker
    interpreter's own _wakeup free list, and when the worker is recycled
    (max_tasks_per_child, idle_timeout, a timeout) that list is never closed:
    4 descriptors leak per recycled worker, so a long-running pool with
    max_tasks_per_child=1 whose tasks use a Queue runs out of descriptors
    (EMFILE) after a few thousand tasks.  The worker could close its free list
    (no writer can remain for a pipe on it) when its serve() ends
    (interpexec/_worker_main.py:serve), and hand parked ones to the parent."""
    pool = make_pool(max_workers=1, max_tasks_per_child=1)
    assert pool.submit(h.temp_queue, -1).result(timeout=20) == -1
    before = _fd_count()
    assert [pool.submit(h.temp_queue, i).result(timeout=20) for i in range(40)] == list(range(40))
    assert _fd_count() - before < 8


@pytest.mark.timeout(60)
def test_descriptor_numbers_above_1024():
    code = """
        import asyncio, os, selectors, threading
        import interpexec
        from interpexec import aio
        from tests import hostile14_helpers as h
        hold = [os.open(os.devnull, os.O_RDONLY) for _ in range(2000)]
        assert max(hold) > 1024
        pool = interpexec.InterpreterPoolExecutor(max_workers=2)
        assert pool.submit(h.sleep_then, 0.05, 1).result(timeout=20) == 1
        async def main():
            return await asyncio.gather(*[aio.run_sync(h.sleep_then, 0.01, i, executor=pool) for i in range(20)])
        assert asyncio.run(main()) == list(range(20))
        q = interpexec.Queue(1)
        assert min(q._items + q._space) > 1024
        threading.Timer(0.05, q.put, ("x",)).start()
        assert q.get(timeout=10) == "x"
        ready = interpexec.Queue()
        f = pool.submit(h.announce_then_sleep, ready, 0.2)
        assert ready.get(timeout=10) == "running"
        w = pool.watch(f)
        assert w is not None and w.fd > 1024
        sel = selectors.DefaultSelector()
        sel.register(w.fd, selectors.EVENT_READ)
        while not w.check():
            sel.select(10)
        w.close()
        assert f.result() == "slept"
        pool.shutdown()
        print("ok")
    """
    proc = run_script(code, timeout=50)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.timeout(90)
def test_out_of_descriptors_results_arrive_and_queue_creation_fails_clearly():
    """With every descriptor taken (RLIMIT_NOFILE), result() and aio fall back to
    the resolver and lose nothing, a Queue that needs a new pipe raises OSError,
    and everything works again once descriptors are free."""
    code = """
        import asyncio, os, resource
        import interpexec
        from interpexec import aio
        from tests import hostile14_helpers as h
        pool = interpexec.InterpreterPoolExecutor(max_workers=2)
        pool.prestart()
        loop = asyncio.new_event_loop()
        async def calls(n):
            return await asyncio.gather(*[aio.run_sync(h.sleep_then, 0.01, i, executor=pool) for i in range(n)])
        # (What the workers import lazily is imported before the descriptors go.)
        assert loop.run_until_complete(calls(4)) == list(range(4))
        assert [f.result() for f in [pool.submit(h.warm_worker) for _ in range(8)]] == [True] * 8
        assert [f.result() for f in [pool.submit(h.sleep_then, 0.01, i) for i in range(8)]] == list(range(8))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))
        hold = []
        try:
            while True:
                hold.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        assert [pool.submit(h.sleep_then, 0.01, i).result(timeout=20) for i in range(20)] == list(range(20))
        assert loop.run_until_complete(calls(20)) == list(range(20))
        made, error = [], None
        for _ in range(64):
            try:
                made.append(interpexec.Queue(1))
            except OSError as exc:
                error = exc
                break
        assert error is not None and error.errno == 24, error
        for q in made:
            q.put(1)
            assert q.get(timeout=5) == 1
        for fd in hold:
            os.close(fd)
        q = interpexec.Queue(1)
        q.put("x")
        assert pool.submit(h.consume, q, 1).result(timeout=20) == ["x"]
        pool.shutdown()
        print("ok")
    """
    proc = run_script(code, timeout=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.timeout(60)
def test_threads_with_and_without_timeouts_wait_on_one_future(pool):
    rng = random.Random(7)

    def impatient(fut: cf.Future, got: list[object]) -> None:
        while True:
            try:
                got.append(fut.result(timeout=rng.choice((0, 0.0001, 0.001))))
                return
            except TimeoutError:
                pass

    def patient(fut: cf.Future, got: list[object]) -> None:
        got.append(fut.result(timeout=20))

    for rnd in range(120):
        fut = pool.submit(h.short_spin, rnd, rng.choice((0, 100, 1000, 3000)))
        got: list[object] = []
        threads = [threading.Thread(target=t, args=(fut, got)) for t in (impatient, patient, impatient, patient)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert got == [rnd] * 4


@pytest.mark.timeout(60)
def test_a_failing_queue_wrapper_import_does_not_break_the_pool(make_pool):
    """BUG (older than this change; more likely now that descriptors can run
    out): a worker's first get on its empty task queue makes CPython import the
    queue wrapper module (test.support.interpreters.queues on 3.13).  If that
    import fails (3.13 without its test package, EMFILE, a slow disk),
    _compat.queue_get (interpexec/_compat.py:200-206) tells emptiness from
    errors by the count; a task submitted meanwhile makes the count 1, so the
    ImportError/OSError is re-raised out of the worker loop
    (_worker_main.py:295): the worker dies and the whole pool is broken
    ("A worker interpreter stopped unexpectedly").  The worker loop could check
    ``queue_count`` before ``get`` (it avoids the 35 ms import too), or
    queue_get could return the default on any error while retrying once."""
    attempts = interpexec.Queue()
    pool = make_pool(max_workers=1, initializer=h.hide_queue_wrapper, initargs=(0.5, attempts))
    pool.prestart()
    for i in range(20):  # the worker goes idle between these (its task queue empty)
        assert pool.submit(h.identity, i).result(timeout=20) == i
    assert pool.map(h.identity, range(100), chunksize=7) is not None
    assert list(pool.map(h.identity, range(100), chunksize=7)) == list(range(100))
    # The worker loop counts before it gets: it never needs the wrapper at all.
    assert attempts.qsize() == 0


@pytest.mark.timeout(90)
def test_a_forked_child_does_not_share_the_parents_wake_up_pipes():
    """BUG: the free list of wake-up pipes (_wakeup._free) survives os.fork():
    parent and child then lend the same pipe, the parent to a thread blocked in
    result(), the child to a Queue (or a waiter of a pool of its own).  Each
    drains the other's wake-up bytes, so result() in the parent misses the
    worker's wake-up: with a timeout it raises TimeoutError though the result
    is in; without one it sleeps until some other result wakes the resolver
    (the worker wrote only to the stolen pipe).  The reverse loses a child's
    Queue wake-ups.  Nothing resets _wakeup._free / _lent (nor _queue._parked)
    in the child: interpexec/_stopping.py:_after_fork_in_child (line 219)
    could close the child's copies of those descriptors and empty the lists."""
    code = """
        import os, queue, warnings
        warnings.simplefilter("ignore")  # (fork() with threads running)
        import interpexec
        from tests import hostile14_helpers as h
        pool = interpexec.InterpreterPoolExecutor(max_workers=1)
        pool.prestart()
        for i in range(3):  # waits that leave pipes on the free list
            assert pool.submit(h.sleep_then, 0.01, i).result(timeout=10) == i
        stop_r, stop_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a Queue of its own and a getter that waits on it
            os.close(stop_w)
            os.set_blocking(stop_r, False)
            q = interpexec.Queue()
            while True:
                try:
                    if os.read(stop_r, 1):
                        break
                except BlockingIOError:
                    pass
                try:
                    q.get(timeout=0.001)
                except queue.Empty:
                    pass
            os._exit(0)
        os.close(stop_r)
        missed = 0
        for i in range(30):
            try:
                assert pool.submit(h.sleep_then, 0.002, i).result(timeout=0.5) == i
            except TimeoutError:
                missed += 1
        os.write(stop_w, b"x")
        os.waitpid(pid, 0)
        pool.shutdown()
        print("missed", missed)
    """
    proc = run_script(code, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "missed 0"


# =============================================================================
# 5. interpexec.dask as a package
# =============================================================================


@pytest.mark.timeout(60)
def test_dask_package_imports_lazily():
    code = """
        import sys
        import interpexec.dask as d
        assert not [m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")], sorted(sys.modules)
        assert set(d.__all__) <= set(dir(d))
        from interpexec.dask import EXECUTOR_NAME, UnsupportedDistributedError, dask_setup
        assert not [m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")]
        from interpexec.dask import InterpreterWorkerPlugin
        assert InterpreterWorkerPlugin.__module__ == "interpexec.dask._plugin"
        try:
            from interpexec.dask import no_such_name
        except ImportError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError("no ImportError")
        print("ok")
    """
    proc = run_script(code, timeout=50)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.timeout(60)
def test_a_plan_runs_in_a_worker_without_dask(make_pool):
    from interpexec.dask import _plan

    pool = make_pool(max_workers=1)
    apply = _plan.Apply(h.heavy_modules, (_plan.Build("list", (_plan.Apply(len, ((1, 2),), {}),)),), {})
    assert pool.submit(_plan.run_plan, apply).result(timeout=20) == []
    graph = _plan.Graph(
        ("a",),
        (5,),
        (("b", _plan.Apply(h.identity, (_plan.Local("a"),), {})), ("c", _plan.Build("tuple", (_plan.Local("b"), 1)))),
        (("a",), ("b",)),
        "c",
    )
    assert pool.submit(_plan.run_plan, graph).result(timeout=20) == (5, 1)
    assert pool.submit(h.heavy_modules).result(timeout=20) == []


# =============================================================================
# 6. The command line
# =============================================================================


def _cli(*args: str, timeout: float = 60, cwd: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run(
        [sys.executable, "-m", "interpexec", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=cwd,
    )


@pytest.mark.timeout(60)
def test_version_and_prog_names():
    script = os.path.join(os.path.dirname(sys.executable), "interpexec")
    assert os.path.exists(script), script
    environ = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    by_script = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=50, env=environ)
    by_module = _cli("--version")
    assert by_script.returncode == by_module.returncode == 0
    assert by_script.stdout == by_module.stdout == f"interpexec {interpexec.__version__}\n"
    help_script = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=50, env=environ)
    assert help_script.stdout.startswith("usage: interpexec [-h] [--version] COMMAND")
    help_module = _cli("bench", "--help")
    assert help_module.stdout.startswith(f"usage: {os.path.basename(sys.executable)} -m interpexec bench")


@pytest.mark.timeout(120)
def test_bench_quick_prints_a_table(tmp_path):
    proc = _cli(
        "bench",
        "--quick",
        "--executors",
        "thread,interpexec",
        timeout=100,
        cwd=str(tmp_path),
        PYTHONDONTWRITEBYTECODE="1",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| metric"))
    assert [c.strip() for c in header.split("|")[1:-1]] == ["metric", "thread", "interpexec"]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| metric")]
    assert len(rows) == 4
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert all(float(c.replace(",", "")) >= 0 for c in cells[1:]), row  # (a 0.000 s cold start rounds to 0)


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "--workers", "0"),
        ("bench", "--workers", "two"),
        ("bench", "--executors", "nope"),
        ("bench", "--executors", ","),
        ("bench", "--bogus"),
        (),
    ],
)
@pytest.mark.timeout(60)
def test_bench_bad_options_exit_2(args):
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "error:" in proc.stderr.splitlines()[-1]


@pytest.mark.timeout(60)
def test_bench_with_an_unwritable_json_path_is_a_bad_argument(tmp_path):
    """BUG (minor): ``--json /no/such/dir/x.json`` is found unwritable only after
    every executor has been measured (a full run takes a minute), and the exit
    status is then 1, which docs/benchmarks.md reserves for "an executor
    failed"; bad arguments are documented as 2.  interpexec/_bench.py:run opens
    the file at the very end (line 245)."""
    missing = tmp_path / "no" / "such" / "dir" / "x.json"
    proc = _cli("bench", "--quick", "--executors", "thread", "--json", str(missing))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "| metric" not in proc.stdout  # nothing measured for nothing


@pytest.mark.timeout(120)
def test_bench_writes_no_bytecode_whatever_the_variable_says(tmp_path):
    """BUG (minor): docs/benchmarks.md and the _bench docstring say the bench
    "writes nothing else (no bytecode cache either, whatever
    PYTHONDONTWRITEBYTECODE says)", but without that variable its child
    processes (``[sys.executable, "-c", ...]`` in _bench._measure,
    interpexec/_bench.py:157, no ``-B``) and their worker interpreters write
    __pycache__ into the installed package (23 files on 3.13), even when the
    bench itself runs with ``python -B``."""
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "interpexec"), site / "interpexec", ignore=shutil.ignore_patterns("__pycache__"))
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environ["PYTHONPATH"] = str(site)
    proc = subprocess.run(
        [sys.executable, "-B", "-m", "interpexec", "bench", "--quick", "--executors", "interpexec"],
        capture_output=True,
        text=True,
        timeout=100,
        env=environ,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [str(p) for p in site.rglob("*.pyc")] == []
