"""Contracts shared with ProcessPoolExecutor, and interpexec's own extras, checked
one by one: logging forwarding, argument validation, the BrokenInterpreterPool
hierarchy, a failing initializer, map()'s timeout, pickle protocol 5 out-of-band
buffers, and an extension module that refuses subinterpreters (NumPy).

Tasks that must stay running are held on pipes, never by sleeping.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import itertools
import logging
import multiprocessing
import os
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

import interpexec
from interpexec import (
    BrokenInterpreterPool,
    IncompatibleModuleError,
    InterpreterPoolExecutor,
    _pickled,
    _protocol,
    _transport,
)

from . import contract_helpers as ch
from . import helpers, log_helpers

# ============================================================ logging forwarding


@pytest.mark.timeout(60)
def test_worker_log_record_reaches_the_parent_logger_handler():
    name = "interpexec.tests.some.name"
    handler = log_helpers.Collect("msg 42")
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        # forward_logs is on by default; the parent's root level (WARNING unless
        # configured) lets a WARNING through.
        assert logger.isEnabledFor(logging.WARNING)
        with InterpreterPoolExecutor(1) as ex:
            interp = ex.submit(log_helpers.log_warning, name, 42).result(timeout=30)
            # The record travels on the results channel ahead of the result, but a
            # different thread (the collector) may be the one handing it over:
            # wait for it rather than assume it is there already.
            assert handler.arrived.wait(timeout=30), "the worker's record never reached the parent's handler"
        [record] = [r for r in handler.records if r.name == name]
        assert record.levelno == logging.WARNING
        assert record.levelname == "WARNING"
        assert record.name == name
        assert record.getMessage() == "msg 42"
        formatted = logging.Formatter("%(name)s|%(levelname)s|%(message)s|%(funcName)s").format(record)
        assert formatted == f"{name}|WARNING|msg 42|log_warning"
        # Documented: the record names the interpreter that emitted it.
        assert record.processName == f"interpreter-{interp}"
    finally:
        logger.removeHandler(handler)


# ================================================ validation like ProcessPoolExecutor

_SPAWN = multiprocessing.get_context("spawn")


def _process_pool_error(kwargs):
    """What ProcessPoolExecutor raises for these arguments on this Python (it checks
    them before starting any process)."""
    try:
        ppe = cf.ProcessPoolExecutor(mp_context=_SPAWN, **kwargs)
    except Exception as exc:
        return exc
    ppe.shutdown(wait=True)
    pytest.fail(f"ProcessPoolExecutor accepted {kwargs!r}")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"max_tasks_per_child": 0}, ValueError),
        ({"max_tasks_per_child": -1}, ValueError),
        ({"max_tasks_per_child": "3"}, None),  # whatever ProcessPoolExecutor raises
        ({"max_workers": "2"}, TypeError),
    ],
    ids=["max_tasks_per_child=0", "max_tasks_per_child=-1", "max_tasks_per_child='3'", "max_workers='2'"],
)
def test_invalid_arguments_raise_like_process_pool_executor(kwargs, expected):
    reference = type(_process_pool_error(kwargs))
    if expected is None:
        assert reference in (TypeError, ValueError)
        expected = reference
    assert reference is expected
    with pytest.raises(expected) as info:
        InterpreterPoolExecutor(mp_context=_SPAWN, **kwargs)
    assert type(info.value) is reference


# ========================================================= BrokenInterpreterPool


@pytest.mark.timeout(30)
def test_submitting_something_not_callable_fails_that_future_as_the_standard_pools_do():
    """``submit(5)``: the standard pools return a future that fails with
    TypeError "'int' object is not callable"; so does this one, and the pool
    goes on."""
    with cf.ThreadPoolExecutor(1) as tp:
        expected = tp.submit(5).exception(timeout=10)
    with InterpreterPoolExecutor(1) as ex:
        got = ex.submit(5).exception(timeout=10)
        assert type(got) is TypeError and str(got) == str(expected) == "'int' object is not callable"
        assert ex.submit(helpers.square, 3).result(timeout=10) == 9


@pytest.mark.timeout(10)
def test_broken_interpreter_pool_subclasses_the_standard_broken_pools():
    assert issubclass(BrokenInterpreterPool, BrokenProcessPool)
    assert issubclass(BrokenInterpreterPool, cf.BrokenExecutor)
    if sys.version_info >= (3, 14):
        from concurrent.futures.interpreter import BrokenInterpreterPool as StdBrokenInterpreterPool

        assert issubclass(BrokenInterpreterPool, StdBrokenInterpreterPool)
        assert BrokenInterpreterPool is not StdBrokenInterpreterPool
    else:
        # 3.13 has no concurrent.futures.interpreter: BrokenProcessPool is the only
        # standard base besides BrokenExecutor's own chain.
        with pytest.raises(ImportError):
            import concurrent.futures.interpreter  # noqa: F401
        std_bases = [c for c in BrokenInterpreterPool.__mro__[1:] if c.__module__.startswith("concurrent.futures")]
        assert std_bases == [BrokenProcessPool, cf.BrokenExecutor]


# ================================================================ failing initializer

BROKEN_BY_INITIALIZER = "A worker initializer failed"  # interpexec/_pool.py, Pool._event


def _assert_broken_by_initializer(exc, message):
    assert type(exc) is BrokenInterpreterPool, repr(exc)
    assert isinstance(exc, BrokenProcessPool)
    if sys.version_info >= (3, 14):
        from concurrent.futures.interpreter import BrokenInterpreterPool as StdBrokenInterpreterPool

        assert isinstance(exc, StdBrokenInterpreterPool)
    assert BROKEN_BY_INITIALIZER in str(exc)
    cause = exc.__cause__
    assert type(cause) is ValueError and str(cause) == message
    # The worker-side traceback (a RemoteTraceback) names the initializer.
    assert isinstance(cause.__cause__, interpexec.RemoteTraceback)
    assert "init_fail" in str(cause.__cause__)


@pytest.mark.timeout(90)
def test_failing_initializer_fails_every_pending_future_and_later_submits():
    message = "init went wrong"
    ex = InterpreterPoolExecutor(2, initializer=helpers.init_fail, initargs=(message,))
    try:
        # More futures than the pool hands to its workers at once: the ones still
        # waiting in the pool's own queue must fail too (as ProcessPoolExecutor
        # fails every pending work item), not stay pending forever.
        futs = [ex.submit(helpers.square, i) for i in range(40)]
        _, not_done = cf.wait(futs, timeout=30)
        assert not not_done, f"{len(not_done)} of {len(futs)} futures never resolved after the initializer failed"
        for fut in futs:
            _assert_broken_by_initializer(fut.exception(timeout=0), message)
        with pytest.raises(BrokenInterpreterPool) as info:
            ex.submit(helpers.square, 1)
        _assert_broken_by_initializer(info.value, message)
        with pytest.raises(BrokenInterpreterPool):
            ex.map(helpers.square, range(3))
        # The standard executors' private ``_broken``, which test suites read
        # (CPython's test_concurrent_futures waits on it): the reason, a str.
        assert isinstance(ex._broken, str) and BROKEN_BY_INITIALIZER in ex._broken
        assert ex._broken == str(info.value)
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


@pytest.mark.timeout(60)
def test_a_working_pool_is_not_broken_as_the_standard_executors_say_it():
    with InterpreterPoolExecutor(1) as ex:
        assert ex._broken is False
        assert ex.submit(helpers.square, 3).result(timeout=30) == 9
        assert ex._broken is False
        for std in (cf.ThreadPoolExecutor(1), cf.ProcessPoolExecutor(1)):
            with std:  # (the attribute is theirs: False while they work)
                assert std._broken is False
    assert ex._broken is False  # shut down is not broken


@pytest.mark.timeout(90)
def test_failing_initializer_is_logged_as_the_standard_pools_log_it(caplog):
    """ProcessPoolExecutor's and ThreadPoolExecutor's workers log CRITICAL
    "Exception in initializer:" with the traceback on the ``concurrent.futures``
    logger (CPython's own test_init asserts it); so does the pool, in the main
    interpreter, once per worker whose initializer failed.  As
    ThreadPoolExecutor's, the record is logged before the pool breaks: a
    handler has it when ``result()`` raises (what CPython's test_init checks
    with assertLogs around it)."""
    message = "init went wrong, logged"
    with caplog.at_level(logging.CRITICAL, logger="concurrent.futures"):
        ex = InterpreterPoolExecutor(2, initializer=helpers.init_fail, initargs=(message,))
        try:
            with pytest.raises(BrokenInterpreterPool):
                ex.submit(helpers.square, 1).result(timeout=30)
            assert any(r.name == "concurrent.futures" for r in caplog.records)  # (before the break)
        finally:
            ex.shutdown(wait=True)
    records = [r for r in caplog.records if r.name == "concurrent.futures"]
    assert records and all(r.getMessage() == "Exception in initializer:" for r in records)
    assert all(r.levelno == logging.CRITICAL and r.exc_info for r in records)
    assert message in caplog.text  # the exception, with the worker's traceback


@pytest.mark.timeout(90)
@pytest.mark.parametrize("raises", [ValueError, SystemExit])
def test_a_failing_initializer_breaks_the_pool_whatever_the_log_handler_does(raises):
    """A handler on the ``concurrent.futures`` logger that raises (even
    SystemExit) while the pool logs its failed initializer: the pool breaks all
    the same (a handler raising anything but an Exception once left the
    future running for ever)."""

    class Raising(logging.Handler):
        def emit(self, record):
            raise raises("a handler of the user's")

    logger = logging.getLogger("concurrent.futures")
    handler = Raising()
    logger.addHandler(handler)
    try:
        ex = InterpreterPoolExecutor(2, initializer=helpers.init_fail, initargs=("init failed",))
        try:
            fut = ex.submit(helpers.square, 1)
            try:
                fut.result(timeout=30)
            except SystemExit:
                # The handler's own, raised where it ran: this thread delivered
                # the worker's report while it waited (as a done-callback's
                # BaseException would be).  The pool broke all the same.
                assert raises is SystemExit
            except BrokenInterpreterPool:
                pass
            assert isinstance(fut.exception(timeout=30), BrokenInterpreterPool)
            with pytest.raises(BrokenInterpreterPool):
                ex.submit(helpers.square, 2)
        finally:
            ex.shutdown(wait=True)
    finally:
        logger.removeHandler(handler)


# ====================================================================== map timeout


@pytest.mark.timeout(90)
def test_map_timeout_counts_from_the_call_and_cancels_what_has_not_started():
    timeout = 2.5
    busy = 1.0  # item 0 keeps the consumer waiting this long before its last next()
    blocker = 2
    items = 40  # far more than the pool hands to its single worker at once
    record_r, record_w = os.pipe()
    arrived_r, arrived_w = os.pipe()
    go_r, go_w = os.pipe()
    ex = InterpreterPoolExecutor(1)
    try:
        ex.prestart()
        start = time.monotonic()
        it = ex.map(
            ch.map_item,
            itertools.repeat(record_w),
            itertools.repeat(arrived_w),
            itertools.repeat(go_r),
            range(items),
            itertools.repeat(blocker),
            [busy if i == 0 else 0 for i in range(items)],
            timeout=timeout,
        )
        assert [next(it) for _ in range(blocker)] == list(range(blocker))
        last_next = time.monotonic()
        with pytest.raises(TimeoutError):
            next(it)
        raised = time.monotonic()
        # The blocking item really runs (it is what the iterator timed out on).
        helpers.wait_bytes(arrived_r, 1)
        assert raised - start >= timeout
        assert last_next - start >= busy
        assert raised - last_next < timeout, (
            f"TimeoutError came {raised - last_next:.2f} s after the last next() and "
            f"{raised - start:.2f} s after map(): the timeout was counted from next(), not from the call"
        )
        with pytest.raises(StopIteration):
            next(it)  # the iterator is finished after its timeout
        # Every future not handed to the worker yet was cancelled; only the
        # blocking task and those already queued to the worker remain.
        stats = ex.stats()
        assert stats["pending"] == 0
        in_flight = stats["in_flight"]
        assert 1 <= in_flight < items - blocker
    finally:
        os.close(go_w)  # the blocked task reads EOF and returns
        ex.shutdown(wait=True)
        ran = helpers.read_all(record_r)
        for fd in (record_r, record_w, arrived_r, arrived_w, go_r):
            os.close(fd)
    # One worker runs the items in order: the early ones, the blocker, the ones it
    # had already been handed; the later, cancelled items never ran.
    assert list(ran) == list(range(blocker + in_flight))


# ========================================================= pickle protocol 5 buffers


@pytest.mark.timeout(60)
def test_pickle_buffer_travels_out_of_band_to_the_worker_and_back(make_pool):
    size = 4 * 1024 * 1024
    blob = ch.OutOfBandBlob(bytes(range(256)) * (size // 256))
    ex = make_pool(1)
    arrived_as, back = ex.submit(ch.blob_round_trip, blob).result(timeout=30)
    assert back == blob
    assert back is not blob and back.data is not blob.data
    # In the worker the buffer came as the memoryview that travelled beside the
    # pickle (an in-band PickleBuffer would have unpickled as a bytearray).
    assert arrived_as == "memoryview"

    # The encoding both directions use: a short pickle plus the buffer out of band.
    sent = _transport.encode(blob, share_buffers=True)  # caller -> worker (as submit does)
    assert sent[0] == _protocol.PICKLED and len(sent) == 3
    assert len(sent[1]) < 1024, f"{len(sent[1])} bytes of pickle for a {size}-byte buffer"
    [view] = sent[2]
    assert view.nbytes == size
    # ...over a snapshot taken at submit (as ProcessPoolExecutor's pickling
    # does): changing the object afterwards does not change what the task sees.
    blob.data[0] ^= 0xFF
    assert view[0] != blob.data[0]
    view.release()

    returned = _transport.encode(back, share_buffers=False, snapshot=True)  # worker -> caller
    assert returned[0] == _protocol.PICKLED and len(returned) == 3
    assert len(returned[1]) < 1024
    assert [v.nbytes for v in returned[2]] == [size]
    assert _transport.decode(_pickled.materialize(returned)) == back


# ============================================================ incompatible extension


@pytest.mark.timeout(120)
def test_importing_numpy_in_a_worker_fails_clearly_and_the_pool_goes_on(make_pool):
    ex = make_pool(1)
    interp = ex.submit(ch.interp_id).result(timeout=30)
    with pytest.raises(IncompatibleModuleError) as info:
        ex.submit(ch.import_numpy).result(timeout=60)
    err = info.value
    assert isinstance(err, ImportError)
    assert err.module.partition(".")[0] == "numpy"
    text = str(err)
    assert "'numpy'" in text
    assert "%d.%d" % sys.version_info[:2] in text
    assert "does not support isolated subinterpreters" in text
    assert "ProcessPoolExecutor" in text
    # One line; NumPy's own advice is the cause, not part of the message.
    assert "\n" not in text and "IMPORTANT" not in text
    assert err.distribution == "numpy"
    assert "IMPORTANT" in str(err.__cause__)
    # The same worker (same interpreter) runs the next task.
    assert ex.submit(ch.interp_id).result(timeout=30) == interp
    assert ex.submit(helpers.square, 7).result(timeout=30) == 49


# ============================================================ manager proxies


@pytest.mark.timeout(90)
def test_multiprocessing_manager_proxies_work_as_arguments():
    """A ``multiprocessing.Manager`` proxy passed to a task (a ProcessPoolExecutor
    idiom; CPython's test_ressources_gced_in_workers passes one): a worker
    interpreter has its own random ``multiprocessing`` authentication key, so the
    proxy's connection to its manager was refused ("digest sent was rejected").
    Proxies now carry their key, as they do to a spawned child process."""
    mgr = multiprocessing.get_context("spawn").Manager()
    try:
        d, ev = mgr.dict(a=1), mgr.Event()
        with InterpreterPoolExecutor(2) as ex:
            assert ex.submit(ch.set_in_proxy, d, "b", 2).result(timeout=60) == 2
            assert ex.submit(ch.set_event_proxy, ev).result(timeout=60) is True
            assert ex.submit(ch.set_in_proxy, d=d, key="c", value=3).result(timeout=60) == 3
            assert [ex.submit(ch.set_in_proxy, d, f"k{i}", i).result(timeout=60) for i in range(2)] == [4, 5]
            deep = helpers.Bag(inner={"levels": [[d]]})  # (anywhere inside an argument)
            assert ex.submit(ch.set_in_deep_proxy, deep, "deep", 6).result(timeout=60) == 6
        assert dict(d) == {"a": 1, "b": 2, "c": 3, "k0": 0, "k1": 1, "deep": 6}
        assert ev.is_set()
    finally:
        mgr.shutdown()


@pytest.mark.timeout(60)
def test_multiprocessing_queues_and_locks_fail_with_what_to_pass_instead():
    """A ``multiprocessing.Queue`` or ``Lock`` reaches a child process only at
    spawn (as ``initargs``, a ProcessPoolExecutor idiom); a worker interpreter
    gets everything by pickling, which multiprocessing refuses.  The error keeps
    its type and message and says what to use instead; only that future fails."""
    ctx = multiprocessing.get_context("spawn")
    q, lock = ctx.Queue(), ctx.Lock()
    try:
        with InterpreterPoolExecutor(1) as ex:
            futures = [ex.submit(helpers.identity, q), ex.submit(q.put, 1)]
            for fut in futures:
                err = fut.exception(timeout=30)
                assert type(err) is RuntimeError and "through inheritance" in str(err)
                assert "interpexec.Queue" in " ".join(err.__notes__)
            assert ex.submit(helpers.square, 3).result(timeout=30) == 9
        with pytest.raises(RuntimeError, match="through inheritance") as info:
            InterpreterPoolExecutor(1, initializer=helpers.identity, initargs=(lock,))
        assert "manager.Lock()" in " ".join(info.value.__notes__)
    finally:
        q.close()
        q.join_thread()


@pytest.mark.timeout(90)
def test_multiprocessing_manager_proxies_work_inside_callables_and_initargs():
    """A proxy inside the callable itself: a bound method of a proxy (CPython's
    test_wait submits ``manager.Event().wait``), a ``partial`` over one, a
    closure sent by value (cloudpickle), and one in ``initargs``.  These were
    pickled without the proxies' keys ("digest sent was rejected"; a failed
    initializer broke the pool)."""
    mgr = multiprocessing.get_context("spawn").Manager()
    try:
        d = mgr.dict()
        events = [mgr.Event() for _ in range(4)]

        def set_from_closure():
            events[2].set()
            return "closure"

        with InterpreterPoolExecutor(2) as ex:
            assert ex.submit(events[0].set).result(timeout=60) is None
            assert ex.submit(functools.partial(ch.set_event_proxy, events[1])).result(timeout=60) is True
            assert ex.submit(set_from_closure).result(timeout=60) == "closure"
        assert [e.is_set() for e in events] == [True, True, True, False]
        with InterpreterPoolExecutor(1, initializer=ch.set_in_proxy, initargs=(d, "init", 1)) as ex:
            assert ex.submit(events[3].is_set).result(timeout=60) is False
        assert dict(d) == {"init": 1}
    finally:
        mgr.shutdown()
