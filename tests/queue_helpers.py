"""Task functions and classes that tests/test_queue.py runs inside worker interpreters.

Workers import task functions by reference, so they live at module level here.
Keep this module light: each worker interpreter imports it.
"""

from __future__ import annotations

import queue as stdqueue
import time

T = 30  # every blocking call in a task gives up eventually: a failed test must not hang the pool


class Record:
    """A plain class (pickled by reference) with instance state."""

    def __init__(self, name, values):
        self.name = name
        self.values = values

    def __eq__(self, other):
        return type(other) is Record and (self.name, self.values) == (other.name, other.values)

    def __repr__(self):
        return f"Record({self.name!r}, {self.values!r})"


def typed(obj):
    """A structure equal only when types and values match all the way down."""
    tp = type(obj)
    if tp in (list, tuple):
        return (tp, [typed(x) for x in obj])
    if tp is dict:
        return (tp, [(typed(k), typed(v)) for k, v in obj.items()])
    if tp is float:
        return (tp, repr(obj))
    return (tp, obj)


def forward(q_in, q_out, n):
    """Move n items from q_in to q_out, one at a time."""
    for _ in range(n):
        q_out.put(q_in.get(timeout=T))
    return n


def typed_items(q, n):
    """Take n items and describe them as they arrived in this interpreter."""
    return [typed(q.get(timeout=T)) for _ in range(n)]


def stream(q, n):
    """Put 0..n-1, then None."""
    for i in range(n):
        q.put(i, timeout=T)
    q.put(None)
    return n


def square_stage(q_in, q_out):
    """Pipeline stage: x -> x * x until None (forwarded)."""
    while (x := q_in.get(timeout=T)) is not None:
        q_out.put(x * x, timeout=T)
    q_out.put(None, timeout=T)


def add_stage(q_in, q_out, k):
    """Pipeline stage: x -> x + k until None (forwarded)."""
    while (x := q_in.get(timeout=T)) is not None:
        q_out.put(x + k, timeout=T)
    q_out.put(None, timeout=T)


def produce(q, start, n):
    for i in range(start, start + n):
        q.put(i, timeout=T)
    return n


def consume(q):
    """Take items until None; return them."""
    out = []
    while (x := q.get(timeout=T)) is not None:
        out.append(x)
    return out


def take(q, n):
    return [q.get(timeout=T) for _ in range(n)]


def put_with_progress(q, progress, n):
    """Announce each put on ``progress`` before doing it (q is bounded)."""
    for i in range(n):
        progress.put(i)
        q.put(i, timeout=T)
    return n


def timed_get(q, timeout):
    start = time.monotonic()
    try:
        return ("item", q.get(timeout=timeout), time.monotonic() - start)
    except stdqueue.Empty:
        return ("empty", None, time.monotonic() - start)


def timed_put(q, item, timeout):
    start = time.monotonic()
    try:
        q.put(item, timeout=timeout)
        return ("put", time.monotonic() - start)
    except stdqueue.Full:
        return ("full", time.monotonic() - start)


def nowait_errors(q):
    """Exercise get_nowait/put_nowait on an empty bounded queue of size 1."""
    out = []
    try:
        q.get_nowait()
    except stdqueue.Empty:
        out.append("empty")
    q.put_nowait("a")
    try:
        q.put_nowait("b")
    except stdqueue.Full:
        out.append("full")
    out.append((q.qsize(), q.empty(), q.full(), q.maxsize))
    out.append(q.get_nowait())
    return out


def put_unpicklable(q):
    try:
        q.put(lambda: None)
    except Exception as exc:
        return type(exc).__name__
    return "no error"


def echo_round_trips(requests, replies):
    """Reply to each request until None."""
    while (x := requests.get(timeout=T)) is not None:
        replies.put(x)


def serve_replies(requests):
    """Answer (x, reply_queue) requests with x * 2 on reply_queue until None."""
    served = 0
    while (msg := requests.get(timeout=T)) is not None:
        x, reply = msg
        reply.put(x * 2)
        served += 1
    return served


def make_queue():
    """Return a Queue created here: it dies with this task's last reference."""
    from interpexec._queue import Queue

    q = Queue()
    q.put("lost")
    return q
