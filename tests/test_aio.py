"""Async use of interpexec: ``loop.run_in_executor`` with an interpexec pool, and
``interpexec.aio.run_sync`` on asyncio and trio (through anyio's pytest plugin).

Tasks that must stay running are held on a pipe (``aio_helpers.gated``) or spin
in pure Python until they are interrupted (``aio_helpers.spin_until_stopped``);
the test learns that they started, or stopped, by reading a byte the task
writes.  No sleep is used to synchronize.  One test watches the event loop for
0.3 s on purpose: checking that nothing wakes it during that window is what it
measures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import os
import threading
import time

import anyio
import anyio.lowlevel
import pytest

import interpexec
from interpexec import RemoteTraceback, _wakeup, aio

from . import aio_helpers as h
from .helpers import readable, wait_bytes

MAIN_INTERP_ID = h.interp_id()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


# ============================================================ test scaffolding


class Env:
    """Pools and pipes of one test.  At teardown: every gate is opened (blocked
    tasks read EOF and return), every pool is shut down (running tasks are
    interrupted), and only then are the pipes closed, so no task can write to a
    descriptor number that was reused."""

    def __init__(self):
        self.pools = []
        self.fds = []
        self.go_fds = []

    def pool(self, max_workers=2, **kwargs):
        executor = interpexec.InterpreterPoolExecutor(max_workers, **kwargs)
        executor.prestart()
        self.pools.append(executor)
        return executor

    def pipe(self):
        r, w = os.pipe()
        self.fds += [r, w]
        return r, w

    def gate(self):
        """(arrived_r, arrived_w, go_r, go_w) for ``aio_helpers.gated``."""
        arrived_r, arrived_w = self.pipe()
        go_r, go_w = self.pipe()
        self.go_fds.append(go_w)
        return arrived_r, arrived_w, go_r, go_w

    def close(self):
        for fd in self.go_fds:
            _close(fd)
        for executor in self.pools:
            executor.shutdown(wait=True, cancel_futures=True, interrupt_running=True)
        for fd in self.fds:
            _close(fd)


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def read_bytes(fd, n=1, timeout=20.0):
    """Block until ``n`` bytes arrived on ``fd``; fail after ``timeout``."""
    return wait_bytes(fd, n, timeout)


def nothing_to_read(fd):
    return not readable(fd, 0)


async def async_read_bytes(fd, n=1, timeout=20.0):
    """``read_bytes`` in a worker thread: the event loop keeps running."""
    return await anyio.to_thread.run_sync(read_bytes, fd, n, timeout)


def _fill_until_pending(executor):
    """Submit quick calls until the next one waits in the pool's own queue (a
    call already handed to the workers counts as running, as with
    ProcessPoolExecutor, and can no longer be cancelled by ``Future.cancel()``)."""
    fillers = []
    while executor.stats()["pending"] == 0:
        fillers.append(executor.submit(h.add, 0, 0))
    return fillers


@pytest.fixture
def fresh_default():
    """Let a test create the default pool; restore the previous one afterwards."""
    saved = aio._default
    aio.set_default_executor(None)
    yield
    current = aio._default
    if current is not None and current is not saved:
        current.shutdown(wait=True, cancel_futures=True, interrupt_running=True)
    aio.set_default_executor(saved)


# ====================================================== aio.run_sync: results


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_wakeup_pipes_are_bounded_and_reused(pool):
    results = []
    free_before = len(_wakeup._free)

    async def one(i):
        results.append(await aio.run_sync(h.add, i, 1, executor=pool))

    for _ in range(3):
        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(one, i)
    assert sorted(results) == sorted(list(range(1, 201)) * 3)
    assert not _wakeup._out
    assert len(_wakeup._free) - free_before <= _wakeup.MAX_LENT


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_run_sync_on_a_shut_down_pool_raises_and_keeps_no_pipe():
    executor = interpexec.InterpreterPoolExecutor(1)
    executor.shutdown()
    with pytest.raises(RuntimeError, match="shutdown"):
        await aio.run_sync(h.add, 1, 2, executor=executor)
    assert not _wakeup._out


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_run_sync_returns_result_from_a_worker(pool):
    assert await aio.run_sync(h.add, 2, 3, executor=pool) == 5
    assert await aio.run_sync(h.add, "ab", "cd", executor=pool) == "abcd"
    assert await aio.run_sync(h.add, (1, [2]), ({"k": b"v"},), executor=pool) == (1, [2], {"k": b"v"})
    assert await aio.run_sync(h.noop, executor=pool) is None
    interp = await aio.run_sync(h.interp_id, executor=pool)
    assert interp != MAIN_INTERP_ID
    assert interp in {w["interpreter_id"] for w in pool.stats()["workers"]}


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_keyword_arguments_through_partial(pool):
    call = functools.partial(h.describe, 2, b=3, scale=10, label="sum")
    assert await aio.run_sync(call, executor=pool) == h.describe(2, b=3, scale=10, label="sum") == "sum:50"
    assert await aio.run_sync(functools.partial(h.describe, label="p"), 4, executor=pool) == "p:4"


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_exception_propagates_with_remote_traceback(pool):
    with pytest.raises(h.AioTaskError) as info:
        await aio.run_sync(h.fail, "bad input", 7, executor=pool)
    assert type(info.value) is h.AioTaskError
    assert (info.value.message, info.value.code) == ("bad input", 7)
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "in fail" in str(info.value.__cause__)
    # The pool is fine afterwards.
    assert await aio.run_sync(h.add, 1, 1, executor=pool) == 2


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_many_concurrent_calls(pool):
    n = 3000
    results = [None] * n

    async def one(i):
        results[i] = await aio.run_sync(h.add, i, i, executor=pool)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    assert results == [2 * i for i in range(n)]
    stats = pool.stats()
    assert (stats["pending"], stats["in_flight"]) == (0, 0)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_calls_run_in_parallel_on_distinct_interpreters(env):
    executor = env.pool(2)
    n = 2_000_000
    spans = {}

    async def one(key):
        spans[key] = await aio.run_sync(h.timed_spin, n, executor=executor)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "a")
        tg.start_soon(one, "b")
    (a0, a1), (b0, b1) = spans["a"], spans["b"]
    # Both ran at the same time (in two interpreters with their own GIL).
    assert a0 < b1 and b0 < a1


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_calls_made_one_after_the_other_run_in_one_interpreter(fresh_default):
    """anyio's own test of ``to_interpreter.run_sync``: a call runs in another
    interpreter, and a second call after it in the same one (anyio takes its
    workers most recently used first; so does interpexec's dispatcher)."""
    first = await aio.run_sync(h.interp_id)
    assert first != MAIN_INTERP_ID
    for _ in range(20):
        assert await aio.run_sync(h.interp_id) == first


async def _two_calls_one_token(env, executor, token, **limit):
    """Two calls on two idle workers, through ``token`` (a limiter of one
    token): one runs, the other waits in the limiter, then runs."""
    arrived_r, arrived_w, go_r, go_w = env.gate()
    results = []

    async def one(value):
        results.append(await aio.run_sync(h.gated, arrived_w, go_r, value, executor=executor, **limit))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 1)
        tg.start_soon(one, 2)
        assert await async_read_bytes(arrived_r) == b"a"
        await anyio.wait_all_tasks_blocked()
        # Two idle workers, but the limiter let only one call through.
        assert token.statistics().borrowed_tokens == 1
        assert token.statistics().tasks_waiting == 1
        assert executor.stats()["in_flight"] == 1
        assert nothing_to_read(arrived_r)
        os.write(go_w, b"g")
        assert await async_read_bytes(arrived_r) == b"a"
        os.write(go_w, b"g")
    assert sorted(results) == [1, 2]
    assert token.statistics().borrowed_tokens == 0


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_the_default_limiter_is_anyio_s_and_bounds_calls_once_made(env):
    """``current_default_interpreter_limiter()``, as ``anyio.to_interpreter``'s:
    one per event loop, a token per CPU; once made, calls given no limiter hold
    it (so lowering its tokens bounds them)."""
    executor = env.pool(2)
    limiter = aio.current_default_interpreter_limiter()
    assert aio.current_default_interpreter_limiter() is limiter
    assert limiter.total_tokens == (os.process_cpu_count() or 1)
    limiter.total_tokens = 1
    await _two_calls_one_token(env, executor, limiter)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_limiter_bounds_concurrent_calls(env):
    limiter = anyio.CapacityLimiter(1)
    await _two_calls_one_token(env, env.pool(2), limiter, limiter=limiter)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_executor_argument_selects_the_pool(env):
    first, second = env.pool(1), env.pool(1)
    first_ids = {w["interpreter_id"] for w in first.stats()["workers"]}
    second_ids = {w["interpreter_id"] for w in second.stats()["workers"]}
    assert first_ids.isdisjoint(second_ids)
    for _ in range(5):
        assert await aio.run_sync(h.interp_id, executor=first) in first_ids
        assert await aio.run_sync(h.interp_id, executor=second) in second_ids


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_default_pool_is_built_off_the_loop_and_reused(fresh_default, monkeypatch):
    built = []

    class Recording(interpexec.InterpreterPoolExecutor):
        def __init__(self, *args, **kwargs):
            built.append(("init", threading.get_ident()))
            super().__init__(*args, **kwargs)

        def prestart(self, wait=True):
            built.append(("prestart", threading.get_ident()))
            super().prestart(wait)

    monkeypatch.setattr(aio, "InterpreterPoolExecutor", Recording)
    loop_thread = threading.get_ident()

    # Many tasks ask at once: one pool is built, in a worker thread, already warm.
    results = []

    async def one(i):
        results.append(await aio.run_sync(h.add, i, 1))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    assert sorted(results) == list(range(1, 21))
    assert [what for what, _ in built] == ["init", "prestart"]
    assert all(thread != loop_thread for _, thread in built)
    default = await aio.current_default_executor()
    assert type(default) is Recording
    workers = default.stats()["workers"]
    assert len(workers) == default._max_workers
    assert all(w["interpreter_id"] is not None for w in workers)

    # Reused by later calls.
    assert await aio.run_sync(h.interp_id) in {w["interpreter_id"] for w in workers}
    assert await aio.current_default_executor() is default
    assert len(built) == 2

    # Replaced once it was shut down.
    await anyio.to_thread.run_sync(default.shutdown)
    assert await aio.run_sync(h.add, 1, 2) == 3
    replacement = await aio.current_default_executor()
    assert replacement is not default
    assert len(built) == 4


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_set_default_executor(env, fresh_default):
    executor = env.pool(1)
    aio.set_default_executor(executor)
    assert await aio.current_default_executor() is executor
    ids = {w["interpreter_id"] for w in executor.stats()["workers"]}
    assert await aio.run_sync(h.interp_id) in ids
    with pytest.raises(TypeError):
        aio.set_default_executor(cf.ThreadPoolExecutor())


# ================================================= aio.run_sync: cancellation


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_cancelling_a_queued_call_cancels_it(env):
    executor = env.pool(1)
    arrived_r, arrived_w, go_r, go_w = env.gate()
    record_r, record_w = env.pipe()

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(aio.run_sync, h.gated, arrived_w, go_r, executor=executor))
        assert await async_read_bytes(arrived_r) == b"a"  # the only worker is busy
        fillers = _fill_until_pending(executor)

        with anyio.CancelScope() as scope:
            tg.start_soon(_cancel_when_blocked, scope)
            await aio.run_sync(h.record, record_w, 1, executor=executor)
        assert scope.cancelled_caught
        os.write(go_w, b"g")
    assert [f.result(timeout=10) for f in fillers] == [0] * len(fillers)
    # The cancelled call never ran; a later one does.
    assert await aio.run_sync(h.record, record_w, 2, executor=executor) == 2
    assert read_bytes(record_r, 1) == bytes([2])
    assert nothing_to_read(record_r)
    stats = executor.stats()
    assert (stats["pending"], stats["in_flight"]) == (0, 0)


async def _cancel_when_blocked(scope):
    await anyio.wait_all_tasks_blocked()
    scope.cancel()


@pytest.mark.anyio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("max_pipes", [64, 0], ids=["pipe-wakeup", "token-wakeup"])
async def test_cancelling_a_running_call_interrupts_it_promptly(env, monkeypatch, max_pipes):
    # On trio a call waits on a pipe, or (with too many calls in flight) for a
    # TrioToken callback: both ways must interrupt.
    monkeypatch.setattr(_wakeup, "MAX_LENT", max_pipes)
    executor = env.pool(1)
    arrived_r, arrived_w = env.pipe()
    stopped_r, stopped_w = env.pipe()
    interp = await aio.run_sync(h.interp_id, executor=executor)
    cancelled_at = []

    async def cancel_once_running(scope):
        assert await async_read_bytes(arrived_r) == b"a"
        cancelled_at.append(time.monotonic())
        scope.cancel()

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as scope:
            tg.start_soon(cancel_once_running, scope)
            await aio.run_sync(h.spin_until_stopped, arrived_w, stopped_w, executor=executor)
        seen = time.monotonic()
    assert scope.cancelled_caught
    assert seen - cancelled_at[0] < 1.0
    # The task was stopped inside the worker (its finally block ran).
    assert await async_read_bytes(stopped_r) == b"s"
    # The worker is free again, with the same interpreter (not retired).
    assert await aio.run_sync(h.interp_id, executor=executor) == interp
    stats = executor.stats()
    assert (stats["pending"], stats["in_flight"]) == (0, 0)
    assert [w["retired"] for w in stats["workers"]] == [False]


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_fail_after_interrupts_a_running_call(env):
    executor = env.pool(1)
    arrived_r, arrived_w = env.pipe()
    stopped_r, stopped_w = env.pipe()
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.5):
            await aio.run_sync(h.spin_until_stopped, arrived_w, stopped_w, executor=executor)
    assert time.monotonic() - start < 5.0
    assert read_bytes(arrived_r) == b"a"
    assert await async_read_bytes(stopped_r) == b"s"
    assert await aio.run_sync(h.add, 2, 2, executor=executor) == 4


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_call_from_a_cancelled_scope_is_never_submitted(env):
    executor = env.pool(1)
    record_r, record_w = env.pipe()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await aio.run_sync(h.record, record_w, 1, executor=executor)
    assert scope.cancelled_caught
    assert executor.stats()["completed"] == 0
    assert await aio.run_sync(h.record, record_w, 2, executor=executor) == 2
    assert read_bytes(record_r, 1) == bytes([2])


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_many_cancelled_calls_leave_the_pool_clean(env):
    executor = env.pool(2)
    arrived_r, arrived_w, go_r, go_w = env.gate()
    record_r, record_w = env.pipe()
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(functools.partial(aio.run_sync, h.gated, arrived_w, go_r, executor=executor))
        assert await async_read_bytes(arrived_r, 2) == b"aa"  # both workers busy
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                for _ in range(500):
                    inner.start_soon(functools.partial(aio.run_sync, h.record, record_w, 1, executor=executor))
                await anyio.wait_all_tasks_blocked()
                # Most wait in the pool's queue; a few were already handed to the
                # workers' task channel (dispatched, not started).
                stats = executor.stats()
                dispatched = stats["in_flight"] - 2
                assert stats["pending"] + dispatched == 500
                assert stats["pending"] > 0
                scope.cancel()
        assert scope.cancelled_caught
        os.write(go_w, b"gg")
    assert await aio.run_sync(h.record, record_w, 2, executor=executor) == 2
    recorded = read_bytes(record_r, 1)
    while not nothing_to_read(record_r):
        recorded += os.read(record_r, 1024)
    # None of the queued calls ran.  A dispatched one is stopped by a message to
    # its worker, which may start it first (then the interrupt stops it).
    assert recorded.count(1) <= dispatched
    assert recorded.endswith(bytes([2])) and recorded.count(2) == 1
    stats = executor.stats()
    assert (stats["pending"], stats["in_flight"]) == (0, 0)


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_call_cancelled_by_the_pool_raises_cancelled_error(env):
    executor = env.pool(1)
    arrived_r, arrived_w, go_r, go_w = env.gate()
    outcome = []

    async def queued():
        try:
            await aio.run_sync(h.add, 1, 2, executor=executor)
        except cf.CancelledError as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(aio.run_sync, h.gated, arrived_w, go_r, executor=executor))
        assert await async_read_bytes(arrived_r) == b"a"
        fillers = _fill_until_pending(executor)
        tg.start_soon(queued)
        await anyio.wait_all_tasks_blocked()
        assert executor.stats()["pending"] == 2  # the last filler and our call
        executor.shutdown(wait=False, cancel_futures=True)
        os.write(go_w, b"g")
    # Not the caller's cancellation: an ordinary exception the caller can handle.
    assert len(outcome) == 1 and type(outcome[0]) is cf.CancelledError
    assert fillers[-1].cancelled()
    assert [f.result(timeout=10) for f in fillers[:-1]] == [0] * (len(fillers) - 1)


# ================================================== aio.run_sync: event loop


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_waiting_neither_blocks_nor_polls_the_event_loop(env, anyio_backend):
    executor = env.pool(1)
    arrived_r, arrived_w, go_r, go_w = env.gate()
    result = []

    async def call():
        result.append(await aio.run_sync(h.gated, arrived_w, go_r, "done", executor=executor))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        assert await async_read_bytes(arrived_r) == b"a"
        await anyio.wait_all_tasks_blocked()
        # The call is running in the worker and its caller waits.  Count how often
        # the event loop wakes up in 0.3 s: a sleeping loop wakes once (for our
        # own timer); a loop that polled for the result would wake many times.
        with _count_loop_wakeups(anyio_backend) as wakeups:
            await anyio.sleep(0.3)
        assert wakeups[0] <= 3, f"the event loop woke {wakeups[0]} times while waiting"
        assert result == []
        os.write(go_w, b"g")
    assert result == ["done"]


class _count_loop_wakeups:
    """Count the event loop's waits for I/O (each ends with a wake-up)."""

    def __init__(self, backend):
        self.backend = backend
        self.count = [0]

    def __enter__(self):
        count = self.count
        if self.backend == "trio":
            import trio

            class Instrument(trio.abc.Instrument):
                def before_io_wait(self, timeout):
                    count[0] += 1

            self.instrument = Instrument()
            trio.lowlevel.add_instrument(self.instrument)
        else:
            selector = asyncio.get_running_loop()._selector
            original = selector.select

            def select(timeout=None):
                count[0] += 1
                return original(timeout)

            selector.select = select
            self.selector = selector
        return count

    def __exit__(self, *exc_info):
        if self.backend == "trio":
            import trio

            trio.lowlevel.remove_instrument(self.instrument)
        else:
            del self.selector.select


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_event_loop_runs_other_tasks_during_a_cpu_bound_call(env):
    executor = env.pool(1)
    arrived_r, arrived_w = env.pipe()
    stopped_r, stopped_w = env.pipe()
    ticks = 0

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(aio.run_sync, h.spin_until_stopped, arrived_w, stopped_w, executor=executor))
        assert await async_read_bytes(arrived_r) == b"a"
        for _ in range(1000):
            await anyio.lowlevel.checkpoint()
            ticks += 1
        tg.cancel_scope.cancel()
    assert ticks == 1000
    assert await async_read_bytes(stopped_r) == b"s"


# ========================================= asyncio: loop.run_in_executor(pool)


def _run(coro_fn, *args):
    return asyncio.run(coro_fn(*args))


@pytest.mark.timeout(60)
def test_run_in_executor_many_concurrent_awaits(pool):
    async def main():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(loop.run_in_executor(pool, h.add, i, i) for i in range(2000)))

    assert _run(main) == [2 * i for i in range(2000)]
    stats = pool.stats()
    assert (stats["pending"], stats["in_flight"]) == (0, 0)


@pytest.mark.timeout(60)
def test_event_loop_wakeups_are_callbacks_the_delivering_thread_runs_itself(pool):
    """Done-callbacks run on the pool's resolver thread, except those that only
    hand the news to an event loop (asyncio's ``wrap_future``, which
    ``run_in_executor`` uses, and this package's): an event loop collecting a
    burst of results runs those itself.  Recognised by name: this fails if a
    Python renames asyncio's."""
    from interpexec import _future

    arrived_r, arrived_w = os.pipe()
    go_r, go_w = os.pipe()

    async def main():
        loop = asyncio.get_running_loop()
        fut = pool.submit(h.gated, arrived_w, go_r, 3)  # (pending until released)
        wrapped = asyncio.wrap_future(fut, loop=loop)
        assert fut._done_callbacks and _future._inline_safe(fut._done_callbacks)
        fut.add_done_callback(lambda f: None)  # a user's: the resolver's
        assert not _future._inline_safe(fut._done_callbacks)
        os.write(go_w, b"x")
        return await wrapped

    try:
        assert _run(main) == 3
    finally:
        for fd in (arrived_r, arrived_w, go_r, go_w):
            os.close(fd)


@pytest.mark.timeout(60)
def test_run_in_executor_propagates_exceptions(pool):
    async def main():
        return await asyncio.get_running_loop().run_in_executor(pool, h.fail, "boom", 3)

    with pytest.raises(h.AioTaskError) as info:
        _run(main)
    assert info.value.code == 3
    assert isinstance(info.value.__cause__, RemoteTraceback)


@pytest.mark.timeout(60)
def test_run_in_executor_cancel_cancels_a_queued_call(env):
    executor = env.pool(1)
    arrived_r, arrived_w, go_r, go_w = env.gate()
    record_r, record_w = env.pipe()

    async def main():
        loop = asyncio.get_running_loop()
        busy = loop.run_in_executor(executor, h.gated, arrived_w, go_r)
        await asyncio.to_thread(read_bytes, arrived_r)
        fillers = _fill_until_pending(executor)
        waiting = asyncio.Event()

        async def caller():
            waiting.set()
            return await loop.run_in_executor(executor, h.record, record_w, 1)

        task = asyncio.create_task(caller())
        await waiting.wait()
        pending = executor.stats()["pending"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        os.write(go_w, b"g")
        await busy
        await asyncio.gather(*(asyncio.wrap_future(f) for f in fillers))
        return pending, await loop.run_in_executor(executor, h.record, record_w, 2)

    pending, last = _run(main)
    assert pending == 2  # the last filler and the cancelled call
    assert last == 2
    assert read_bytes(record_r) == bytes([2])  # the cancelled call never ran
    assert nothing_to_read(record_r)


@pytest.mark.timeout(60)
def test_run_in_executor_cancel_interrupts_a_running_task(env):
    """asyncio cancels the pool's future when the awaiting task is cancelled: on a
    pool made with ``interrupt_on_cancel=True``, a task already running in a
    worker is interrupted (its ``finally`` runs), and the worker takes the next
    call."""
    executor = env.pool(1, interrupt_on_cancel=True)
    arrived_r, arrived_w = env.pipe()
    stopped_r, stopped_w = env.pipe()

    async def main():
        loop = asyncio.get_running_loop()

        async def caller():
            return await loop.run_in_executor(executor, h.spin_until_stopped, arrived_w, stopped_w)

        task = asyncio.create_task(caller())
        await asyncio.to_thread(read_bytes, arrived_r)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seen = time.monotonic() - cancelled_at
        stopped = await asyncio.to_thread(read_bytes, stopped_r)
        return seen, stopped, await loop.run_in_executor(executor, h.add, 20, 1)

    seen, stopped, after = _run(main)
    assert seen < 1.0
    assert stopped == b"s"  # stopped by the interrupt, not run out
    assert after == 21


@pytest.mark.timeout(60)
def test_plain_future_cancel_keeps_its_standard_meaning(env):
    """Outside asyncio's cancellation, ``Future.cancel()`` of a running task
    returns False and the task runs on (the concurrent.futures contract)."""
    executor = env.pool(1)
    arrived_r, arrived_w, go_r, go_w = env.gate()
    fut = executor.submit(h.gated, arrived_w, go_r, "done")
    read_bytes(arrived_r)
    assert fut.cancel() is False
    assert fut.running()
    os.write(go_w, b"g")
    assert fut.result(timeout=30) == "done"


@pytest.mark.timeout(60)
def test_plain_asyncio_task_cancel_interrupts_run_sync(env):
    executor = env.pool(1)
    arrived_r, arrived_w = env.pipe()
    stopped_r, stopped_w = env.pipe()

    async def main():
        task = asyncio.create_task(aio.run_sync(h.spin_until_stopped, arrived_w, stopped_w, executor=executor))
        await asyncio.to_thread(read_bytes, arrived_r)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seen = time.monotonic() - cancelled_at
        stopped = await asyncio.to_thread(read_bytes, stopped_r)
        after = await aio.run_sync(h.add, 20, 1, executor=executor)
        return seen, stopped, after

    seen, stopped, after = _run(main)
    assert seen < 1.0
    assert stopped == b"s"
    assert after == 21


@pytest.mark.timeout(60)
def test_asyncio_timeout_interrupts_run_sync(env):
    executor = env.pool(1)
    arrived_r, arrived_w = env.pipe()
    stopped_r, stopped_w = env.pipe()

    async def main():
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await aio.run_sync(h.spin_until_stopped, arrived_w, stopped_w, executor=executor)
        return await asyncio.to_thread(read_bytes, stopped_r)

    assert _run(main) == b"s"
    assert read_bytes(arrived_r) == b"a"


@pytest.mark.timeout(60)
def test_one_pool_serves_several_event_loops_at_once(pool):
    """Calls from event loops in different threads each get their own results."""

    def loop_thread(base, out):
        async def main():
            return await asyncio.gather(*(aio.run_sync(h.add, base, i, executor=pool) for i in range(300)))

        out[base] = asyncio.run(main())

    out = {}
    threads = [threading.Thread(target=loop_thread, args=(base, out)) for base in (0, 1000, 2000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert out == {base: [base + i for i in range(300)] for base in (0, 1000, 2000)}
