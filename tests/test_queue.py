"""interpexec.Queue: shared by the parent and the tasks of any worker.

Nothing here synchronizes by sleeping: tasks report progress on queues, and the
only waits are the blocking calls under test (durations are bounded loosely, the
machine is shared).
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import queue as stdqueue
import threading
import time

import pytest

from interpexec import _queue
from interpexec._queue import Queue

from . import queue_helpers as qh
from .queue_helpers import Record, typed

VALUES = [
    None,
    True,
    0,
    -(2**63),
    2**63 - 1,
    2**64,  # beyond 64 bits: pickled
    -0.0,
    1.5,
    "text",
    "",
    b"bytes",
    b"",
    (),
    (1, "a", (2.5, None)),
    (1, b"x"),  # looks like an envelope: must come out as this very tuple
    (0, b"\x80\x05N."),
    ("list inside", [1, 2]),
    [1, "two", 3.0],
    {"a": 1, "b": [2, 3]},
    Record("r", {"k": (1, 2)}),
    bytearray(b"mutable"),
    frozenset({1, 2}),
    True.__class__,  # a class, by reference
]


# ======================================================================== parent only


@pytest.mark.timeout(10)
def test_fifo_and_state():
    q = Queue()
    assert q.empty() and q.qsize() == 0 and not q.full() and q.maxsize == 0
    for i in range(100):
        q.put(i)
    assert q.qsize() == 100 and not q.empty() and not q.full()
    assert [q.get() for _ in range(100)] == list(range(100))
    assert q.empty()
    assert "maxsize=0" in repr(q)


@pytest.mark.timeout(10)
def test_nowait_and_bounded_state():
    q = Queue(2)
    with pytest.raises(stdqueue.Empty):
        q.get_nowait()
    with pytest.raises(stdqueue.Empty):
        q.get(block=False)
    q.put_nowait(1)
    q.put(2, block=False)
    assert q.full() and q.qsize() == 2
    with pytest.raises(stdqueue.Full):
        q.put_nowait(3)
    with pytest.raises(stdqueue.Full):
        q.put(3, block=False)
    assert q.get_nowait() == 1
    assert not q.full()
    q.put_nowait(3)
    assert [q.get(), q.get()] == [2, 3]


@pytest.mark.timeout(10)
def test_negative_maxsize_is_unbounded_and_timeout_must_not_be_negative():
    q = Queue(-5)
    assert q.maxsize == 0
    for i in range(1000):
        q.put_nowait(i)
    assert not q.full()
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    with pytest.raises(ValueError):
        Queue(1).put(1, timeout=-1)


@pytest.mark.timeout(10)
def test_values_round_trip_locally():
    q = Queue()
    for v in VALUES:
        q.put(v)
    assert [typed(q.get()) for _ in VALUES] == [typed(v) for v in VALUES]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("timeout", [0, 0.2])
def test_get_timeout_raises_empty(timeout):
    q = Queue()
    start = time.monotonic()
    with pytest.raises(stdqueue.Empty):
        q.get(timeout=timeout)
    elapsed = time.monotonic() - start
    assert timeout <= elapsed < timeout + 3


@pytest.mark.timeout(10)
@pytest.mark.parametrize("timeout", [0, 0.2])
def test_put_timeout_raises_full(timeout):
    q = Queue(1)
    q.put("x")
    start = time.monotonic()
    with pytest.raises(stdqueue.Full):
        q.put("y", timeout=timeout)
    elapsed = time.monotonic() - start
    assert timeout <= elapsed < timeout + 3
    assert q.get_nowait() == "x" and q.empty()


@pytest.mark.timeout(10)
def test_unpicklable_item_raises_at_put():
    q = Queue()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        q.put(lambda: None)
    with pytest.raises(TypeError):
        q.put(threading.Lock())
    with pytest.raises(TypeError):
        q.put(("ok", threading.Lock()))
    assert q.empty()
    q.put("still usable")
    assert q.get_nowait() == "still usable"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("maxsize", [0, 3])
def test_threads_no_lost_wakeup(maxsize):
    """Many getters blocked at once, fed by a few putters: every get returns."""
    q = Queue(maxsize)
    getters, per_getter, putters = 8, 500, 2
    total = getters * per_getter
    got: list[list[int]] = [[] for _ in range(getters)]

    def getter(i):
        for _ in range(per_getter):
            got[i].append(q.get(timeout=20))

    def putter(start):
        for x in range(start, total, putters):
            q.put(x, timeout=20)

    threads = [threading.Thread(target=getter, args=(i,)) for i in range(getters)]
    threads += [threading.Thread(target=putter, args=(s,)) for s in range(putters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(x for g in got for x in g) == list(range(total))
    assert q.empty()


@pytest.mark.timeout(10)
def test_interrupt_fd_lets_an_async_exception_reach_a_blocked_get():
    """The hook the pool's watchdog uses to stop a task blocked in get()."""
    q = Queue()
    rfd, wfd = os.pipe()
    ready = threading.Event()
    outcome = []

    def blocked():
        _queue.INTERRUPT_FDS[threading.get_ident()] = rfd
        ready.set()
        try:
            q.get()
        except KeyError as exc:
            outcome.append(exc)
        finally:
            del _queue.INTERRUPT_FDS[threading.get_ident()]

    t = threading.Thread(target=blocked)
    t.start()
    ready.wait()
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(KeyError))
    os.write(wfd, b"\0")
    t.join(5)
    assert not t.is_alive() and len(outcome) == 1
    os.close(rfd)
    os.close(wfd)
    q.put(1)  # still works
    assert q.get(timeout=5) == 1


# ======================================================================== lifetime


@pytest.mark.timeout(10)
def test_copy_shares_the_queue_and_outlives_the_creator():
    q = Queue(4)
    copy = pickle.loads(pickle.dumps(q))
    assert copy.maxsize == 4
    q.put("from creator")
    assert copy.get_nowait() == "from creator"
    pipes = q._items
    del q
    gc.collect()
    other = Queue()  # the queue is alive (the copy holds it): its pipes are not reused
    assert other._items != pipes
    copy.put("still alive")
    assert copy.get_nowait() == "still alive"
    del copy
    gc.collect()
    reused = [Queue() for _ in range(4)]  # now they may be
    assert any(r._items == pipes or r._space == pipes for r in reused)


@pytest.mark.timeout(10)
def test_copy_of_a_dropped_queue_fails_clearly():
    q = Queue()
    blob = pickle.dumps(q)
    del q
    gc.collect()
    with pytest.raises(RuntimeError, match="no longer exists"):
        pickle.loads(blob)


# ======================================================================== across interpreters


@pytest.mark.timeout(30)
def test_parent_to_worker_and_back(pool):
    q_in, q_out = Queue(), Queue()
    fut = pool.submit(qh.forward, q_in, q_out, len(VALUES))
    for v in VALUES:
        q_in.put(v)
    got = [q_out.get(timeout=10) for _ in VALUES]
    assert [typed(x) for x in got] == [typed(v) for v in VALUES]
    assert fut.result(timeout=10) == len(VALUES)


@pytest.mark.timeout(30)
def test_items_arrive_typed_in_the_worker(pool):
    q = Queue()
    for v in VALUES:
        q.put(v)
    assert pool.submit(qh.typed_items, q, len(VALUES)).result(timeout=20) == [typed(v) for v in VALUES]


@pytest.mark.timeout(30)
def test_worker_streams_to_parent(pool):
    q = Queue()
    n = 20_000
    fut = pool.submit(qh.stream, q, n)
    got = []
    while (x := q.get(timeout=20)) is not None:
        got.append(x)
    assert got == list(range(n))
    assert fut.result(timeout=10) == n


@pytest.mark.timeout(30)
def test_worker_to_worker_pipeline(pool):
    q1, q2, q3 = Queue(16), Queue(16), Queue(16)
    f1 = pool.submit(qh.square_stage, q1, q2)
    f2 = pool.submit(qh.add_stage, q2, q3, 1)
    n = 2000
    results = []

    def feed():
        for i in range(n):
            q1.put(i, timeout=20)
        q1.put(None, timeout=20)

    feeder = threading.Thread(target=feed)
    feeder.start()
    while (x := q3.get(timeout=20)) is not None:
        results.append(x)
    feeder.join()
    assert results == [i * i + 1 for i in range(n)]
    f1.result(timeout=10)
    f2.result(timeout=10)


@pytest.mark.timeout(30)
def test_bounded_put_in_worker_released_by_get_in_parent(pool):
    q, progress = Queue(2), Queue()
    n = 6
    fut = pool.submit(qh.put_with_progress, q, progress, n)
    got = []
    for i in range(n):
        # The worker announces put i and then makes it; with two items queued it
        # blocks there until this interpreter takes one.
        assert progress.get(timeout=20) == i
        if i >= 2:
            assert q.qsize() == 2 and q.full() and not fut.done()
            got.append(q.get(timeout=20))
    got += [q.get(timeout=20) for _ in range(n - len(got))]
    assert got == list(range(n))
    assert fut.result(timeout=10) == n


@pytest.mark.timeout(30)
def test_bounded_put_in_parent_released_by_get_in_worker(pool):
    q = Queue(1)
    n = 50
    fut = pool.submit(qh.take, q, n)
    for i in range(n):
        q.put(i, timeout=20)  # blocks until the worker has taken the previous one
        assert q.qsize() <= 1
    assert fut.result(timeout=20) == list(range(n))


@pytest.mark.timeout(30)
def test_timeouts_in_a_worker(pool):
    empty, bounded = Queue(), Queue(1)
    bounded.put("x")
    kind, _, elapsed = pool.submit(qh.timed_get, empty, 0.2).result(timeout=20)
    assert kind == "empty" and 0.2 <= elapsed < 3.2
    kind, elapsed = pool.submit(qh.timed_put, bounded, "y", 0.2).result(timeout=20)
    assert kind == "full" and 0.2 <= elapsed < 3.2
    assert pool.submit(qh.nowait_errors, Queue(1)).result(timeout=20) == ["empty", "full", (1, False, True, 1), "a"]


@pytest.mark.timeout(30)
def test_get_in_worker_woken_by_parent_before_its_timeout(pool):
    q, out = Queue(), Queue()
    fut = pool.submit(qh.forward, q, out, 2)
    q.put("first")
    assert out.get(timeout=20) == "first"  # then the worker waits in get() again
    q.put("second")
    assert out.get(timeout=20) == "second"
    assert fut.result(timeout=10) == 2


@pytest.mark.timeout(30)
def test_unpicklable_item_raises_at_put_in_worker(pool):
    error = pool.submit(qh.put_unpicklable, Queue()).result(timeout=20)
    assert error in ("PicklingError", "AttributeError", "TypeError")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("maxsize", [0, 8])
def test_many_producers_and_consumers(pool, maxsize):
    """One producer and one consumer task in the workers, two of each as threads in
    the parent, all on one queue: every item is taken exactly once."""
    q = Queue(maxsize)
    per = 3000
    consumers = 3  # one task + two threads
    task_producer = pool.submit(qh.produce, q, 0, per)
    task_consumer = pool.submit(qh.consume, q)
    thread_got: list[list[int]] = [[], []]

    def thread_producer(k):
        for i in range(k * per, (k + 1) * per):
            q.put(i, timeout=30)

    def thread_consumer(k):
        while (x := q.get(timeout=30)) is not None:
            thread_got[k].append(x)

    threads = [threading.Thread(target=thread_producer, args=(k,)) for k in (1, 2)]
    threads += [threading.Thread(target=thread_consumer, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    assert task_producer.result(timeout=40) == per
    for t in threads[:2]:
        t.join()
    for _ in range(consumers):
        q.put(None, timeout=30)
    for t in threads[2:]:
        t.join()
    got = task_consumer.result(timeout=40) + thread_got[0] + thread_got[1]
    assert sorted(got) == list(range(3 * per))
    assert q.empty()


@pytest.mark.timeout(30)
def test_queue_dropped_by_the_parent_before_its_task_starts(pool):
    """The pool keeps a task's arguments (this Queue) alive until the task is done."""
    gate = Queue()
    blockers = [pool.submit(qh.take, gate, 1) for _ in range(2)]  # both workers busy
    fut = pool.submit(qh.timed_get, Queue(), 0)  # the only reference is in the task
    gc.collect()
    gate.put(1)
    gate.put(2)
    assert sorted(b.result(timeout=20)[0] for b in blockers) == [1, 2]
    assert fut.result(timeout=20)[0] == "empty"


@pytest.mark.timeout(30)
def test_queue_inside_an_item_carries_replies(pool):
    requests = Queue()
    fut = pool.submit(qh.serve_replies, requests)
    replies = [Queue() for _ in range(5)]
    for i, reply in enumerate(replies):
        requests.put((i, reply))
    assert [reply.get(timeout=20) for reply in replies] == [0, 2, 4, 6, 8]
    requests.put(None)
    assert fut.result(timeout=20) == 5


@pytest.mark.timeout(30)
def test_queue_created_in_a_task_cannot_be_returned(pool):
    """Documented limitation: the task's own reference was the last one."""
    with pytest.raises(RuntimeError, match="create it in the parent"):
        pool.submit(qh.make_queue).result(timeout=20)


def _interpreter_ids():
    from interpexec import _compat

    return {int(entry[0]) for entry in _compat._interpreters.list_all()}


@pytest.mark.timeout(60)
def test_items_a_worker_put_outlive_its_interpreter(make_pool):
    """CPython removes a queue's items when the interpreter that put them is
    destroyed: they vanished when the pool shut down or recycled the worker.
    An ended worker's interpreter is now kept while a queue it put into holds
    items, and destroyed by the get that empties it."""
    q = Queue()
    before = _interpreter_ids()
    ex = make_pool(1, max_tasks_per_child=1)
    for i in range(3):  # each in a fresh interpreter
        assert ex.submit(qh.produce, q, 5 * i, 5).result(timeout=30) == 5
    ex.shutdown(wait=True)
    assert len(_interpreter_ids() - before) == 3  # (kept: the pool's workers are gone)
    assert [q.get(timeout=5) for _ in range(15)] == list(range(15))
    assert q.empty()  # (released by the next call: not inside the get that took the item)
    assert _interpreter_ids() == before


@pytest.mark.timeout(60)
def test_past_the_kept_limit_the_oldest_interpreter_goes_with_a_warning(make_pool, monkeypatch):
    monkeypatch.setattr(_queue, "KEPT_MAX", 1)
    q = Queue()
    ex = make_pool(1, max_tasks_per_child=1)
    with pytest.warns(RuntimeWarning, match="may be gone") as caught:
        for i in range(3):
            assert ex.submit(qh.produce, q, 10 * i, 2).result(timeout=30) == 2
        ex.shutdown(wait=True)
    assert len([w for w in caught if "may be gone" in str(w.message)]) == 2
    assert [q.get_nowait(), q.get_nowait()] == [20, 21]  # the newest interpreter's
    assert q.empty()


@pytest.mark.timeout(60)
def test_a_stream_that_never_empties_releases_kept_interpreters_as_their_items_are_taken(make_pool, monkeypatch):
    """A queue that is never empty (the consumer keeps a backlog): a kept
    interpreter goes once as many items were taken as the queue held when its
    worker ended.  Kept until the queue emptied, they piled up past the limit,
    with warnings about items that had all been taken (found by review)."""
    import warnings

    monkeypatch.setattr(_queue, "KEPT_MAX", 8)
    q = Queue()
    for i in range(3):
        q.put(-1 - i)
    ex = make_pool(1, max_tasks_per_child=1)
    got, most_kept = [], 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(40):
            assert ex.submit(qh.produce, q, i, 1).result(timeout=30) == 1
            got.append(q.get(timeout=5))
            most_kept = max(most_kept, len(_queue._kept))
        ex.shutdown(wait=True)
    got += [q.get_nowait() for _ in range(3)]
    assert q.empty()
    assert got == [-1, -2, -3, *range(40)]
    assert not [w for w in caught if "interpexec" in str(w.message)]
    assert most_kept < 8 and not _queue._kept


@pytest.mark.timeout(60)
def test_a_ctrl_c_while_kept_interpreters_are_destroyed_leaves_none_behind(make_pool, monkeypatch):
    """A Ctrl-C between two destructions left the rest in no list: never
    destroyed, and a fork later crashed the child (review 38).  It is raised
    once every interpreter the release took is destroyed.  (A get runs the
    release before it takes its item, so a Ctrl-C there loses no item.)"""
    import signal

    from interpexec import _compat

    q = Queue()
    before = _interpreter_ids()
    ex = make_pool(1, max_tasks_per_child=1)
    for i in range(4):
        ex.submit(qh.produce, q, i, 1).result(timeout=30)
    ex.shutdown(wait=True)
    assert len(_interpreter_ids() - before) == 4
    # (Taken in a worker, which the main interpreter does not count: the four
    # are due at once, when a release finds the queue empty.)
    consumer = make_pool(1)
    assert consumer.submit(qh.take, q, 4).result(timeout=30) == [0, 1, 2, 3]
    assert len(_queue._kept) == 4  # (its shutdown would release them)
    real, calls = _compat.destroy_interpreter, []

    def destroy_then_ctrl_c(interp_id):
        real(interp_id)
        calls.append(interp_id)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(_compat, "destroy_interpreter", destroy_then_ctrl_c)
    q.put("mine")
    assert q.get(timeout=5) == "mine"  # (it finds the queue empty: the release is due)
    with pytest.raises(KeyboardInterrupt):
        q.empty()
    assert len(calls) == 4 and not _queue._kept
    consumer.shutdown(wait=True)
    assert _interpreter_ids() == before


@pytest.mark.timeout(60)
def test_a_dropped_queue_lets_its_kept_interpreter_go(make_pool):
    """A queue dropped with items in it: the next release finds it gone."""
    q = Queue()
    before = _interpreter_ids()
    ex = make_pool(1)
    ex.submit(qh.produce, q, 0, 3).result(timeout=30)
    ex.shutdown(wait=True)
    assert len(_interpreter_ids() - before) == 1
    del q
    gc.collect()
    _queue.release_kept()
    assert _interpreter_ids() == before
