"""Core behaviour of interpexec.InterpreterPoolExecutor: the concurrent.futures
contract (submit/map/shutdown), faithful results and exceptions, scale, real
parallelism in distinct subinterpreters, initializer and thread naming.

Every expected value is computed by running the same function serially in the
main interpreter.  Tests that need a task to stay running hold it on a pipe
(``helpers.Gate``), never by sleeping (one test lets a pool sit idle on purpose:
that is the scenario it checks, not synchronization).
"""

from __future__ import annotations

import _interpreters
import asyncio
import concurrent.futures as cf
import os
import pickle
import random
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

import interpexec
from interpexec import BrokenInterpreterPool, RemoteError, RemoteTraceback

from . import helpers
from .helpers import Gate, typed

MAIN_INTERP_ID = int(_interpreters.get_current()[0])


# ======================================================================= construction


@pytest.mark.timeout(10)
@pytest.mark.parametrize("max_workers", [0, -1])
def test_max_workers_must_be_positive(max_workers):
    with pytest.raises(ValueError):
        interpexec.InterpreterPoolExecutor(max_workers=max_workers)


@pytest.mark.timeout(20)
def test_submit_after_shutdown_raises_runtime_error(make_pool):
    started = make_pool(max_workers=2)
    assert started.submit(helpers.square, 3).result(timeout=10) == 9
    started.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        started.submit(helpers.square, 3)
    with pytest.raises(RuntimeError):
        started.map(helpers.square, [1, 2])

    never_started = make_pool(max_workers=2)
    never_started.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        never_started.submit(helpers.square, 3)


@pytest.mark.timeout(20)
def test_shutdown_twice_is_harmless(make_pool):
    executor = make_pool(max_workers=2)
    assert executor.submit(helpers.add, 1, 2).result(timeout=10) == 3
    executor.shutdown(wait=True)
    executor.shutdown(wait=True)
    executor.shutdown(wait=False, cancel_futures=True)


# ============================================================= submit and value types


@pytest.mark.timeout(20)
def test_submit_returns_result(pool):
    fut = pool.submit(helpers.square, 12)
    assert isinstance(fut, cf.Future)
    assert fut.result(timeout=10) == helpers.square(12)
    assert fut.done() and not fut.cancelled() and not fut.running()
    assert fut.exception() is None


@pytest.mark.timeout(20)
def test_kwargs_are_passed_through(pool):
    assert pool.submit(helpers.echo, 1, 2, a=3, b="x").result(timeout=10) == helpers.echo(1, 2, a=3, b="x")
    assert pool.submit(helpers.echo, b=[1], a={2: 3}).result(timeout=10) == ((), {"b": [1], "a": {2: 3}})
    # Names that submit() itself uses are positional-only there, so they pass through.
    assert pool.submit(helpers.echo, fn=1, self=2).result(timeout=10) == ((), {"fn": 1, "self": 2})
    assert pool.submit(helpers.echo).result(timeout=10) == ((), {})


VALUES = [
    ("zero", 0),
    ("int", 123456789),
    ("negative-int", -42),
    ("int64-max", 2**63 - 1),
    ("int64-min", -(2**63)),
    ("int64-max+1", 2**63),
    ("above-2**64", 2**64 + 1),
    ("below--2**64", -(2**64) - 12345),
    ("huge-int", 3**500),
    ("float", 1.25),
    ("negative-zero", -0.0),
    ("inf", float("inf")),
    ("nan", float("nan")),
    ("tiny-float", 5e-324),
    ("complex", complex(1.5, -2)),
    ("empty-str", ""),
    ("unicode-str", "héllo wörld ✓ \U0001f600 \x00"),
    ("lone-surrogate-str", "a\ud800b\udfff"),
    # A call's message goes through a 256-byte call cell when it fits (the
    # function's names included) and other tasks are in flight, otherwise as a
    # tuple: both sides of that line (see the call cell test below).
    ("str-in-a-call-cell", "é" * 80),
    ("str-just-past-a-call-cell", "x" * 220),
    ("long-str", "abc" * 100_000),
    ("empty-bytes", b""),
    ("bytes", bytes(range(256))),
    ("long-bytes", os.urandom(1 << 20)),
    ("bytearray", bytearray(b"mutable\x00bytes")),
    ("long-bytearray", bytearray(os.urandom(1 << 20))),
    ("empty-tuple", ()),
    ("flat-tuple", (1, "a", b"b", None, True, 2.5)),
    ("tuple-with-huge-int", (1, 2**100)),
    ("nested-tuple", (1, (2, (3, (4, ("deep",)))))),
    ("tuple-of-lists", ([1], [2, 3])),
    ("empty-list", []),
    ("list", [1, "two", 3.0, None, False]),
    ("nested-list", [1, [2, [3, [4, []]]]]),
    ("empty-dict", {}),
    ("dict", {"a": 1, 2: [3], (4, 5): {"b": None}, None: True}),
    ("empty-set", set()),
    ("set", {1, 2, 3, "x"}),
    ("frozenset", frozenset({"a", (1, 2)})),
    ("None", None),
    ("True", True),
    ("False", False),
    ("range", range(3, 30, 4)),
    ("point", helpers.Point(1, -2)),
    ("bag", helpers.Bag(name="bag", items=[1, 2], nested=helpers.Point(3, 4))),
    ("int-enum", helpers.Color.GREEN),
    (
        "nested-mix",
        {
            "ints": [0, -1, 2**70],
            "tuple": (b"x", "y", 1.5, None),
            "set": {frozenset({1}), (2, 3)},
            "points": [helpers.Point(i, -i) for i in range(5)],
            "raw": bytearray(b"ab"),
            "flags": (True, False),
        },
    ),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("value", [v for _, v in VALUES], ids=[name for name, _ in VALUES])
def test_values_round_trip_like_serial(pool, value):
    expected = typed(helpers.identity(value))
    # The argument arrives intact (the worker sees the same types and values) ...
    assert pool.submit(helpers.typed_remote, value).result(timeout=10) == expected
    # ... and the return value comes back intact.
    assert typed(pool.submit(helpers.identity, value).result(timeout=10)) == expected


@pytest.mark.timeout(60)
def test_calls_arrive_intact_while_a_long_task_holds_its_call_cell(pool):
    """A task's call cell (its message, when the message is small) stays its own
    until its report comes back: while one task runs, hundreds of others pass
    through every cell, those whose cell it holds travel as tuples, and every
    call arrives with its own arguments."""
    with Gate() as gate:
        held = gate.submit(pool, value=("held", 2**62, "ü"))
        gate.wait_arrived(1)
        args = [(i, -i * 7, f"s{i}" * (i % 40), (i, None, i % 2 == 0), b"b" * (i % 300)) for i in range(600)]
        futs = [pool.submit(helpers.echo, *a) for a in args]
        assert [f.result(timeout=30) for f in futs] == [(a, {}) for a in args]
        # Every kind of value, on both sides of the cell's size, behind that task.
        values = [v for _, v in VALUES]
        futs = [pool.submit(helpers.typed_remote, v) for v in values]
        assert [f.result(timeout=30) for f in futs] == [typed(v) for v in values]
        gate.release(1)
        assert held.result(timeout=10) == ("held", 2**62, "ü")


@pytest.mark.timeout(20)
def test_map_of_mixed_values_matches_serial(pool):
    values = [v for _, v in VALUES]
    assert [typed(r) for r in pool.map(helpers.identity, values)] == [typed(v) for v in values]
    assert list(pool.map(helpers.typed_remote, values)) == [helpers.typed_remote(v) for v in values]
    assert [typed(r) for r in pool.map(helpers.identity, values, chunksize=4)] == [typed(v) for v in values]


@pytest.mark.timeout(20)
def test_bytearray_comes_back_as_bytearray_and_arguments_are_copies(pool):
    buf = bytearray(b"abc")
    result = pool.submit(helpers.append_and_return, buf, b"def").result(timeout=10)
    assert type(result) is bytearray
    assert result == helpers.append_and_return(bytearray(b"abc"), b"def")
    assert buf == bytearray(b"abc")  # the worker mutated its own copy
    assert result is not buf


@pytest.mark.timeout(20)
def test_custom_class_instances(pool):
    point = pool.submit(helpers.make_point, 3, 4).result(timeout=10)
    assert type(point) is helpers.Point
    assert point == helpers.make_point(3, 4)
    color = pool.submit(helpers.identity, helpers.Color.RED).result(timeout=10)
    assert color is helpers.Color.RED
    bag = helpers.Bag(a=1, b=helpers.Point(0, 0))
    out = pool.submit(helpers.identity, bag).result(timeout=10)
    assert type(out) is helpers.Bag and out == bag and out is not bag


# ================================================================================ map


@pytest.mark.timeout(30)
def test_map_preserves_order(pool):
    # Earlier items take longer, so they tend to finish later than later items.
    ns = [200_000 - 4_000 * i for i in range(40)]
    assert list(pool.map(helpers.spin, ns)) == [helpers.spin(n) for n in ns]


@pytest.mark.timeout(20)
def test_map_with_several_iterables(pool):
    a, b, c = range(50), range(100, 130), [2, 3, 4, 5, 6] * 20
    assert list(pool.map(helpers.add, a, b)) == list(map(helpers.add, a, b))  # stops at the shortest
    assert list(pool.map(helpers.mul3, a, b, c)) == list(map(helpers.mul3, a, b, c))
    assert list(pool.map(helpers.add, ["x", "y"], ["1", "2", "3"])) == ["x1", "y2"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("chunksize", [2, 7, 64, 1000])
def test_map_with_chunksize_matches_serial(pool, chunksize):
    items = list(range(-50, 250))
    assert list(pool.map(helpers.square, items, chunksize=chunksize)) == [helpers.square(x) for x in items]
    a, b = [str(i) for i in range(101)], [bytes([i]) * 3 for i in range(101)]
    expected = list(map(helpers.echo, a, b))
    assert list(pool.map(helpers.echo, a, b, chunksize=chunksize)) == expected


@pytest.mark.timeout(10)
def test_map_rejects_chunksize_below_one(pool):
    with pytest.raises(ValueError):
        pool.map(helpers.square, [1, 2], chunksize=0)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("chunksize", [1, 5])
def test_empty_map(pool, chunksize):
    assert list(pool.map(helpers.square, [], chunksize=chunksize)) == []
    assert list(pool.map(helpers.add, [], range(10), chunksize=chunksize)) == []


@pytest.mark.timeout(20)
@pytest.mark.parametrize("chunksize", [1, 2])
def test_map_raises_the_failing_items_exception_in_order(pool, chunksize):
    items = [1, 2, -3, 4]
    it = pool.map(helpers.fail_if_negative, items, chunksize=chunksize)
    assert next(it) == helpers.fail_if_negative(1)
    if chunksize == 1:
        assert next(it) == helpers.fail_if_negative(2)
    with pytest.raises(ValueError, match="negative: -3"):
        list(it)


@pytest.mark.timeout(30)
def test_map_timeout_raises_timeout_error(make_pool):
    executor = make_pool(max_workers=1)
    with Gate() as gate:
        it = executor.map(helpers.gated, [gate.arrived_w], [gate.go_r], ["late"], timeout=0.3)
        with pytest.raises(TimeoutError):
            next(it)
        gate.release()
        executor.shutdown(wait=True)


@pytest.mark.timeout(30)
def test_pool_reuse_across_many_maps(pool):
    for round_ in range(150):
        items = range(round_, round_ + 12)
        chunksize = 1 + round_ % 4
        assert list(pool.map(helpers.add, items, items, chunksize=chunksize)) == [2 * x for x in items]


# ======================================================================== futures API


@pytest.mark.timeout(20)
def test_future_exception_method(pool):
    bad = pool.submit(helpers.fail_if_negative, -1)
    exc = bad.exception(timeout=10)
    assert type(exc) is ValueError and str(exc) == "negative: -1"
    good = pool.submit(helpers.fail_if_negative, 1)
    assert good.exception(timeout=10) is None
    assert good.result() == 10


@pytest.mark.timeout(30)
def test_result_and_exception_timeout_raise_timeout_error(pool):
    with Gate() as gate:
        fut = gate.submit(pool, "value")
        gate.wait_arrived(1)
        with pytest.raises(TimeoutError):
            fut.result(timeout=0.1)
        with pytest.raises(TimeoutError):
            fut.exception(timeout=0.1)
        with pytest.raises(TimeoutError):
            fut.result(timeout=0)
        assert not fut.done()
        gate.release()
        assert fut.result(timeout=10) == "value"


@pytest.mark.timeout(30)
def test_result_timeout_is_not_exceeded(pool):
    """result(timeout=T) on a running task gives up after about T seconds, not a
    multiple of it (generous margin: this checks the contract, not speed)."""
    timeout = 1.0
    with Gate() as gate:
        fut = gate.submit(pool, "value")
        gate.wait_arrived(1)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            fut.result(timeout=timeout)
        elapsed = time.monotonic() - start
        gate.release()
        assert fut.result(timeout=10) == "value"
    assert elapsed < timeout * 1.75, f"result(timeout={timeout}) blocked for {elapsed:.2f} s"


@pytest.mark.timeout(30)
def test_concurrent_futures_wait(pool):
    futs = [pool.submit(helpers.square, i) for i in range(30)]
    done, not_done = cf.wait(futs, timeout=20)
    assert done == set(futs) and not not_done
    assert [f.result() for f in futs] == [helpers.square(i) for i in range(30)]

    with Gate() as gate:
        blocked = gate.submit(pool, "blocked")
        gate.wait_arrived(1)
        quick = pool.submit(helpers.square, 7)
        done, not_done = cf.wait([blocked, quick], timeout=20, return_when=cf.FIRST_COMPLETED)
        assert done == {quick} and not_done == {blocked}
        failing = pool.submit(helpers.fail_if_negative, -5)
        done, not_done = cf.wait([blocked, failing], timeout=20, return_when=cf.FIRST_EXCEPTION)
        assert done == {failing} and not_done == {blocked}
        gate.release()
        assert blocked.result(timeout=10) == "blocked"


@pytest.mark.timeout(30)
def test_as_completed(pool):
    futs = {pool.submit(helpers.spin, 1_000 * i): i for i in range(40)}
    seen = {}
    for fut in cf.as_completed(futs, timeout=20):
        seen[futs[fut]] = fut.result()
    assert seen == {i: helpers.spin(1_000 * i) for i in range(40)}


@pytest.mark.timeout(30)
def test_add_done_callback_fires(pool):
    fired = threading.Event()
    calls = []

    def callback(fut):
        calls.append((fut, fut.result()))
        fired.set()

    with Gate() as gate:
        fut = gate.submit(pool, "cb")
        gate.wait_arrived(1)
        fut.add_done_callback(callback)
        assert not calls  # not done yet, so not called yet
        gate.release()
        # Nobody calls result(): the pool itself must complete the future.
        assert fired.wait(10), "done callback did not fire"
    assert calls == [(fut, "cb")]

    # A callback added to a finished future runs at once, in the calling thread.
    late = []
    fut.add_done_callback(lambda f: late.append((threading.get_ident(), f.result())))
    assert late == [(threading.get_ident(), "cb")]


@pytest.mark.timeout(30)
def test_cancel_a_pending_future(make_pool):
    executor = make_pool(max_workers=1)
    rfd, wfd = os.pipe()
    try:
        with Gate() as gate:
            blocker = gate.submit(executor, "blocker")
            gate.wait_arrived(1)
            futs = [executor.submit(helpers.record, wfd, i) for i in range(30)]
            assert futs[-1].cancel()
            assert futs[-1].cancelled()
            gate.release()
            assert blocker.result(timeout=10) == "blocker"
            executor.shutdown(wait=True)
        with pytest.raises(cf.CancelledError):
            futs[-1].result()
        assert [f.result() for f in futs[:-1]] == list(range(29))
        assert sorted(helpers.read_all(rfd)) == list(range(29))  # the cancelled task never ran
    finally:
        os.close(rfd)
        os.close(wfd)


@pytest.mark.timeout(30)
def test_asyncio_run_in_executor(pool):
    async def main():
        loop = asyncio.get_running_loop()
        one = await loop.run_in_executor(pool, helpers.square, 21)
        many = await asyncio.gather(*(loop.run_in_executor(pool, helpers.add, i, i) for i in range(20)))
        return one, many

    one, many = asyncio.run(main())
    assert one == helpers.square(21)
    assert many == [helpers.add(i, i) for i in range(20)]


# =========================================================================== shutdown


@pytest.mark.timeout(30)
def test_context_manager_waits_and_shuts_down():
    with interpexec.InterpreterPoolExecutor(max_workers=2) as executor:
        futs = [executor.submit(helpers.spin, 20_000 + i) for i in range(20)]
    assert all(f.done() for f in futs)  # __exit__ waited for them
    assert [f.result() for f in futs] == [helpers.spin(20_000 + i) for i in range(20)]
    with pytest.raises(RuntimeError):
        executor.submit(helpers.square, 2)


@pytest.mark.timeout(30)
def test_shutdown_wait_true_finishes_pending_work(make_pool):
    executor = make_pool(max_workers=2)
    futs = [executor.submit(helpers.spin, 30_000 + i) for i in range(40)]
    executor.shutdown(wait=True)
    assert all(f.done() for f in futs)
    assert [f.result() for f in futs] == [helpers.spin(30_000 + i) for i in range(40)]


@pytest.mark.timeout(30)
def test_shutdown_wait_false_returns_while_work_runs(make_pool):
    executor = make_pool(max_workers=1, thread_name_prefix="ietest-nowait")
    rfd, wfd = os.pipe()
    try:
        with Gate() as gate:
            blocker = gate.submit(executor, "blocker")
            gate.wait_arrived(1)
            futs = [executor.submit(helpers.record, wfd, i) for i in range(10)]
            # Returns although a task is blocked (if it waited, the test would hang).
            executor.shutdown(wait=False)
            assert not blocker.done()
            with pytest.raises(RuntimeError):
                executor.submit(helpers.square, 2)
            gate.release()
            # Work submitted before shutdown still runs to completion.
            assert blocker.result(timeout=10) == "blocker"
            assert [f.result(timeout=10) for f in futs] == list(range(10))
            executor.shutdown(wait=True)
        assert sorted(helpers.read_all(rfd)) == list(range(10))
        assert not [t for t in threading.enumerate() if t.name.startswith("ietest-nowait")]
    finally:
        os.close(rfd)
        os.close(wfd)


@pytest.mark.timeout(30)
def test_wait_and_as_completed_see_cancelled_futures_at_once(make_pool):
    # The standard executors' cancelled futures count as done for wait() and
    # as_completed() only once the executor dequeues them, which after
    # shutdown(cancel_futures=True) never happens: both would block.
    executor = make_pool(max_workers=1)
    with Gate() as gate:
        blocker = gate.submit(executor, "blocker")
        gate.wait_arrived(1)
        futs = [executor.submit(helpers.identity, i) for i in range(40)]
        assert futs[-1].cancel()
        done, not_done = cf.wait([futs[-1]], timeout=10)
        assert done == {futs[-1]} and not not_done
        assert list(cf.as_completed([futs[-1]], timeout=10)) == [futs[-1]]
        executor.shutdown(wait=False, cancel_futures=True)
        cancelled = [f for f in futs if f.cancelled()]
        assert len(cancelled) >= 30
        done, not_done = cf.wait(cancelled, timeout=10)
        assert done == set(cancelled) and not not_done
        gate.release()
        assert blocker.result(timeout=10) == "blocker"
    executor.shutdown(wait=True)
    assert all(f.done() for f in futs)


@pytest.mark.timeout(30)
def test_shutdown_cancel_futures_cancels_pending_work(make_pool):
    executor = make_pool(max_workers=1)
    rfd, wfd = os.pipe()
    try:
        with Gate() as gate:
            blocker = gate.submit(executor, "blocker")
            gate.wait_arrived(1)
            futs = [executor.submit(helpers.record, wfd, i) for i in range(50)]
            executor.shutdown(wait=False, cancel_futures=True)
            gate.release()
            assert blocker.result(timeout=10) == "blocker"
            executor.shutdown(wait=True)
        assert all(f.done() for f in futs)
        cancelled = [i for i, f in enumerate(futs) if f.cancelled()]
        ran = [i for i, f in enumerate(futs) if not f.cancelled()]
        # Only the few tasks already handed to the worker may still run.
        assert len(cancelled) >= 40, f"only {len(cancelled)} of 50 pending futures were cancelled"
        assert [futs[i].result() for i in ran] == ran
        for i in cancelled:
            with pytest.raises(cf.CancelledError):
                futs[i].result()
        assert sorted(helpers.read_all(rfd)) == ran  # cancelled tasks never ran
    finally:
        os.close(rfd)
        os.close(wfd)


# ========================================================================= exceptions


EXCEPTIONS = [
    (ValueError, ("boom",)),
    (KeyError, ("missing-key",)),
    (ZeroDivisionError, ("division by zero",)),
    (OSError, (2, "No such file")),
    (helpers.CustomError, ("custom failure", 7)),
    (RuntimeError, ()),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("exc_type", "args"), EXCEPTIONS, ids=[t.__name__ for t, _ in EXCEPTIONS])
def test_exception_type_message_and_remote_traceback(pool, exc_type, args):
    local = exc_type(*args)
    fut = pool.submit(helpers.raise_exc, exc_type, *args)
    with pytest.raises(exc_type) as info:
        fut.result(timeout=10)
    exc = info.value
    assert type(exc) is type(local)
    assert str(exc) == str(local)
    assert exc.args == local.args
    cause = exc.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "raise_exc" in str(cause)  # the worker-side function name
    assert type(local).__name__ in str(cause)
    assert "Traceback" in str(cause)


@pytest.mark.timeout(20)
def test_remote_traceback_names_every_worker_frame(pool):
    exc = pool.submit(helpers.outer_fails, "deep").exception(timeout=10)
    assert type(exc) is ValueError and str(exc) == "deep"
    text = str(exc.__cause__)
    assert "outer_fails" in text and "_inner_fails" in text
    assert text.index("outer_fails") < text.index("_inner_fails")


@pytest.mark.timeout(20)
def test_an_exception_raised_while_handling_another_keeps_it_as_context_shown_once(pool):
    """``raise`` inside ``except KeyError``: the KeyError is the exception's
    context, not its cause.  It came back as the RemoteTraceback's cause, shown
    as "the direct cause", and twice (it is in the traceback text already).
    Now it hangs off the RemoteTraceback's ``__context__``, not shown there,
    and the text shows it once, as "During handling of the above exception"."""
    import traceback

    exc = pool.submit(helpers.raise_while_handling, "while handling").exception(timeout=10)
    assert type(exc) is ValueError and str(exc) == "while handling"
    remote = exc.__cause__
    assert isinstance(remote, RemoteTraceback) and remote.__cause__ is None
    assert isinstance(remote.__context__, KeyError) and remote.__suppress_context__
    text = "".join(traceback.format_exception(exc))
    assert text.count("KeyError: 'missing key'") == 1, text
    assert text.count("During handling of the above exception") == 1, text
    assert text.count("direct cause") == 1, text  # (the RemoteTraceback's, of the ValueError)


@pytest.mark.timeout(20)
def test_the_remote_traceback_is_also_the_process_pools_own_class(pool):
    """Code written for ProcessPoolExecutor (CPython's own test_traceback)
    checks the cause's class, the private ``_RemoteTraceback``: the cause is
    one, and an ``interpexec.RemoteTraceback``, shown and pickled as that."""
    import pickle
    from concurrent.futures.process import _RemoteTraceback

    exc = pool.submit(helpers.outer_fails, "deep").exception(timeout=10)
    cause = exc.__cause__
    assert isinstance(cause, _RemoteTraceback) and isinstance(cause, RemoteTraceback)
    assert cause.tb == str(cause) and "outer_fails" in cause.tb
    assert f"{type(cause).__module__}.{type(cause).__qualname__}" == "interpexec._errors.RemoteTraceback"
    cause.add_note("a note of the caller's")
    again = pickle.loads(pickle.dumps(cause))
    assert type(again) is RemoteTraceback and str(again) == str(cause)
    assert again.__notes__ == ["a note of the caller's"]  # (its attributes come along)


@pytest.mark.timeout(20)
def test_custom_exception_keeps_its_attributes(pool):
    exc = pool.submit(helpers.raise_exc, helpers.CustomError, "bad", 42).exception(timeout=10)
    assert type(exc) is helpers.CustomError
    assert (exc.message, exc.code) == ("bad", 42)


@pytest.mark.timeout(20)
def test_exception_that_cannot_be_unpickled_arrives_as_remote_error(pool):
    # Sanity: the class really cannot make the round trip through pickle.
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(helpers.TwoArgError("first", "second")))

    fut = pool.submit(helpers.raise_two_arg_error, "first", "second")
    with pytest.raises(RemoteError) as info:
        fut.result(timeout=10)
    exc = info.value
    assert exc.type_name == "tests.helpers.TwoArgError"
    assert exc.message == "first"
    assert "raise_two_arg_error" in exc.traceback_text
    assert "TwoArgError" in exc.traceback_text
    assert "TwoArgError" in str(exc) and "first" in str(exc)
    assert isinstance(exc.__cause__, RemoteTraceback)
    assert "raise_two_arg_error" in str(exc.__cause__)
    # Why it could not be rebuilt, and the remedy, are said.
    (note,) = exc.__notes__
    assert "missing 1 required positional argument: 'b'" in note and "super().__init__" in note, note
    # The pool is still usable.
    assert pool.submit(helpers.square, 5).result(timeout=10) == 25


@pytest.mark.timeout(20)
def test_exception_that_cannot_be_pickled_arrives_as_remote_error(pool):
    exc = pool.submit(helpers.raise_unpicklable_error, "holds a lock").exception(timeout=10)
    assert isinstance(exc, RemoteError)
    assert exc.type_name == "ValueError"
    assert "holds a lock" in exc.message
    assert "raise_unpicklable_error" in exc.traceback_text
    (note,) = exc.__notes__
    assert "cannot pickle" in note and "__reduce__" in note, note
    assert pool.submit(helpers.square, 6).result(timeout=10) == 36


@pytest.mark.timeout(20)
def test_base_exception_from_a_task_is_reraised_and_worker_survives(pool):
    with pytest.raises(SystemExit) as info:
        pool.submit(helpers.raise_exc, SystemExit, 3).result(timeout=10)
    assert info.value.code == 3
    # Both workers are still alive and serving.
    assert list(pool.map(helpers.square, range(20))) == [helpers.square(i) for i in range(20)]


@pytest.mark.timeout(20)
def test_unpicklable_argument_fails_only_its_own_future(pool):
    lock = threading.Lock()
    with pytest.raises((TypeError, pickle.PicklingError)):
        pickle.dumps(lock)
    futs = [pool.submit(helpers.identity, x) for x in (1, lock, 3)]
    assert futs[0].result(timeout=10) == 1
    assert isinstance(futs[1].exception(timeout=10), (TypeError, pickle.PicklingError))
    assert futs[2].result(timeout=10) == 3
    assert pool.submit(helpers.square, 9).result(timeout=10) == 81


@pytest.mark.timeout(20)
def test_unpicklable_result_fails_only_its_own_future(pool):
    fut = pool.submit(helpers.make_lock)
    exc = fut.exception(timeout=10)
    assert exc is not None
    assert isinstance(exc, (TypeError, pickle.PicklingError, RemoteError))
    assert pool.submit(helpers.square, 11).result(timeout=10) == 121


# ================================================================ scale, concurrency


@pytest.mark.timeout(60)
def test_ten_thousand_submits(pool):
    futs = [pool.submit(helpers.square, i) for i in range(10_000)]
    assert [f.result(timeout=30) for f in futs] == [helpers.square(i) for i in range(10_000)]


@pytest.mark.timeout(40)
def test_ten_thousand_submits_collected_by_the_pool(make_pool):
    # Nobody waits on a particular future: the pool alone must complete them all,
    # while concurrent.futures.wait() installs its waiter on futures still pending.
    executor = make_pool(max_workers=2)
    for round_ in range(3):
        futs = [executor.submit(helpers.add, i, round_) for i in range(10_000)]
        done, not_done = cf.wait(futs, timeout=20)
        assert done == set(futs) and not not_done
        assert [f.result() for f in futs] == [helpers.add(i, round_) for i in range(10_000)]


@pytest.mark.timeout(40)
def test_as_completed_over_ten_thousand_futures(make_pool):
    executor = make_pool(max_workers=2)
    futs = {executor.submit(helpers.square, i): i for i in range(10_000)}
    results = {futs[f]: f.result() for f in cf.as_completed(futs, timeout=20)}
    assert results == {i: helpers.square(i) for i in range(10_000)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunksize", [1, 100])
def test_ten_thousand_item_map(pool, chunksize):
    items = range(10_000)
    assert list(pool.map(helpers.square, items, chunksize=chunksize)) == [helpers.square(i) for i in items]


@pytest.mark.timeout(60)
def test_sixteen_threads_submit_at_once(pool):
    nthreads, per_thread = 16, 250
    barrier = threading.Barrier(nthreads, timeout=30)
    results = {}
    errors = []

    def run(t):
        try:
            barrier.wait()
            if t % 2:
                futs = [pool.submit(helpers.mul3, t, i, 3) for i in range(per_thread)]
                results[t] = [f.result(timeout=40) for f in futs]
            else:
                results[t] = list(pool.map(helpers.mul3, [t] * per_thread, range(per_thread), [3] * per_thread))
        except BaseException as exc:  # reported below
            errors.append((t, exc))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(50)
    assert not any(th.is_alive() for th in threads), "a submitting thread hung"
    assert not errors, errors
    assert results == {t: [helpers.mul3(t, i, 3) for i in range(per_thread)] for t in range(nthreads)}


# ======================================================================= parallelism


@pytest.mark.timeout(30)
@pytest.mark.parametrize("max_workers", [2, 4])
def test_tasks_run_in_distinct_subinterpreters_at_once(make_pool, max_workers):
    executor = make_pool(max_workers=max_workers)
    with Gate() as gate:
        futs = [gate.submit_report(executor) for _ in range(max_workers)]
        # All of them have started before any is released: they run at the same
        # time, hence in distinct workers.
        gate.wait_arrived(max_workers)
        gate.release(max_workers)
        reports = [f.result(timeout=10) for f in futs]
    ids = [interp for interp, _ in reports]
    assert len(set(ids)) == max_workers, ids
    assert MAIN_INTERP_ID == 0
    assert all(i != MAIN_INTERP_ID for i in ids), ids
    # The pool is still up, so its interpreters exist: each is isolated, own GIL.
    for interp in ids:
        config = _interpreters.get_config(interp)
        assert config.gil == "own", config
        assert not config.use_main_obmalloc, config


@pytest.mark.timeout(60)
def test_back_to_back_submits_to_an_idle_pool_start_at_once(make_pool):
    """Tasks submitted one right after the other to a pool whose workers are idle
    must all start, each in its own worker (none may wait behind another while a
    worker sleeps).  Each gated task occupies its worker until released, so a task
    left queued while a worker sleeps never arrives."""
    executor = make_pool(max_workers=2)
    assert list(executor.map(helpers.square, range(8))) == [helpers.square(i) for i in range(8)]
    for round_ in range(40):
        if round_ % 8 == 0:
            # Not synchronization: the scenario is "submit to a pool that has been
            # idle for a while" (workers asleep); the assertion must hold for any
            # idle time, including none (the other rounds).
            time.sleep(0.05)
        with Gate() as gate:
            futs = [gate.submit_report(executor) for _ in range(2)]
            try:
                gate.wait_arrived(2, timeout=5)
            except AssertionError as exc:
                raise AssertionError(f"round {round_}: {exc}") from None
            gate.release(2)
            ids = [f.result(timeout=10)[0] for f in futs]
        assert len(set(ids)) == 2, (round_, ids)


@pytest.mark.timeout(120)
def test_tasks_into_an_over_subscribed_pool_all_start_at_once(make_pool):
    """More workers than CPUs: a dispatcher skips waking sleepers while the
    workers lingering after a task are as many as the tasks queued (each looks
    once more before it sleeps).  Seeded and bounded in time: rounds of a few
    no-op submits left running, then k gated tasks (k <= workers), all of
    which must start at once; a task left queued while workers sleep never
    arrives.  (Counting the lingering workers before the queue, the pool left
    one task queued about once in 1,500 rounds on 3.15; found by this stop's
    hostile review.)"""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(max(12, 2 * cpus + 2), 40)
    executor = make_pool(max_workers=workers)
    rng = random.Random(1605)
    end = time.monotonic() + 8
    rounds = 0
    while time.monotonic() < end:
        rounds += 1
        burst = rng.choice((0, 1, 2, 3, 5, 8, 64))
        noops = [executor.submit(helpers.square, i) for i in range(burst)]
        k = rng.randint(1, workers)
        with Gate() as gate:
            futs = [gate.submit_report(executor) for _ in range(k)]
            try:
                gate.wait_arrived(k, timeout=5)
            except AssertionError as exc:
                raise AssertionError(f"round {rounds} (burst {burst}): {exc}; {executor.stats()}") from None
            gate.release(k)
            ids = [f.result(timeout=10)[0] for f in futs]
        assert len(set(ids)) == k, (rounds, ids)
        assert [f.result(timeout=10) for f in noops] == [helpers.square(i) for i in range(burst)]
    assert rounds > 100, rounds


@pytest.mark.timeout(30)
def test_work_spreads_over_all_workers(make_pool):
    executor = make_pool(max_workers=2)
    n = _calibrate(0.05)
    ids = set(executor.map(helpers.interp_id_after_work, [n] * 20))
    assert len(ids) == 2, ids
    assert MAIN_INTERP_ID not in ids


def _calibrate(seconds):
    """Iterations of ``helpers.spin`` that take about ``seconds`` here."""
    probe = 200_000
    start = time.perf_counter()
    helpers.spin(probe)
    elapsed = time.perf_counter() - start
    return max(probe // 4, int(probe * seconds / max(elapsed, 1e-6)))


@pytest.mark.timeout(60)
def test_cpu_bound_tasks_overlap_in_time(make_pool):
    executor = make_pool(max_workers=2)
    with Gate() as gate:  # make sure both workers are up and idle first
        warm = [gate.submit(executor, i) for i in range(2)]
        gate.wait_arrived(2)
        gate.release(2)
        assert [f.result(timeout=10) for f in warm] == [0, 1]
    n = _calibrate(0.3)
    futs = [executor.submit(helpers.timed_spin, n) for _ in range(2)]
    (s1, e1, id1, acc1), (s2, e2, id2, acc2) = [f.result(timeout=40) for f in futs]
    assert acc1 == acc2 == helpers.spin(n)
    assert id1 != id2
    assert max(s1, s2) < min(e1, e2), f"intervals do not overlap: {(s1, e1)} {(s2, e2)}"


# ============================================================ initializer and naming


@pytest.mark.timeout(30)
def test_initializer_runs_once_in_each_worker(make_pool):
    rfd, wfd = os.pipe()
    try:
        executor = make_pool(max_workers=3, initializer=helpers.init_worker, initargs=("ready", wfd))
        with Gate() as gate:
            futs = [gate.submit_report(executor) for _ in range(3)]
            gate.wait_arrived(3)  # one task in each of the three workers
            gate.release(3)
            reports = [f.result(timeout=10) for f in futs]
        assert len({interp for interp, _ in reports}) == 3
        assert [value for _, value in reports] == ["ready"] * 3
        assert list(executor.map(helpers.get_init_value, range(10))) == ["ready"] * 10
        executor.shutdown(wait=True)
        assert helpers.read_all(rfd) == b"iii"  # once per worker, never per task
        assert helpers.INIT_VALUE is None  # the main interpreter's module is untouched
    finally:
        os.close(rfd)
        os.close(wfd)


@pytest.mark.timeout(10)
def test_broken_interpreter_pool_is_a_broken_process_pool():
    assert issubclass(BrokenInterpreterPool, BrokenProcessPool)


@pytest.mark.timeout(30)
def test_failing_initializer_breaks_the_pool(make_pool):
    executor = make_pool(max_workers=2, initializer=helpers.init_fail, initargs=("init went wrong",))
    fut = executor.submit(helpers.square, 3)
    with pytest.raises(BrokenInterpreterPool) as info:
        fut.result(timeout=20)
    assert isinstance(info.value, BrokenProcessPool)
    cause = info.value.__cause__
    assert isinstance(cause, ValueError) and "init went wrong" in str(cause)
    with pytest.raises(BrokenInterpreterPool):
        executor.submit(helpers.square, 4)
    executor.shutdown(wait=True)


@pytest.mark.timeout(30)
def test_thread_name_prefix_names_worker_threads(make_pool):
    prefix = "ietest-named-pool"
    executor = make_pool(max_workers=3, thread_name_prefix=prefix)
    assert executor._thread_name_prefix == prefix  # (the standard pools' attribute)
    assert make_pool(max_workers=1)._thread_name_prefix.startswith("InterpreterPoolExecutor-")
    with Gate() as gate:  # every worker thread is running a task
        futs = [gate.submit(executor, i) for i in range(3)]
        gate.wait_arrived(3)
        named = [t for t in threading.enumerate() if t.name.startswith(prefix)]
        gate.release(3)
        assert [f.result(timeout=10) for f in futs] == [0, 1, 2]
    assert len(named) >= 3, [t.name for t in threading.enumerate()]
    executor.shutdown(wait=True)
    assert not [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]
