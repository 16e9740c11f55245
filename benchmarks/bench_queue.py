"""Benchmark interpexec.Queue between the parent and a worker.

    python benchmarks/bench_queue.py [--rounds R] [--trips N] [--items M]

  round trip   the parent puts an int on one Queue, a task in a worker takes it and
               puts it on a second Queue, the parent takes it: median over N (us)
  throughput   a task puts M small ints, the parent takes them: M / time from
               submit to the last item (items/s); unbounded, and maxsize=1000

Each figure is the median over R rounds (a fresh two-worker pool per round).  For
context, the same round trip between two threads through ``queue.Queue``, and
through ``concurrent.interpreters.Queue`` (3.14+; its blocking get sleeps 10 ms
between polls, so only a few trips are timed).  Targets (from the issue): round
trip <= 100 us, throughput >= 100,000 items/s.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


# ------------------------------------------------------------ worker tasks
# Submitted as ``bench_queue.<name>`` so that workers import this module by name
# (not as the parent's __main__).


def echo(requests: Any, replies: Any) -> None:
    """Reply to each request until None."""
    while (x := requests.get()) is not None:
        replies.put(x)


def stream(q: Any, n: int) -> None:
    for i in range(n):
        q.put(i)
    q.put(None)


# ------------------------------------------------------------ measurements


def _round_trips(requests: Any, replies: Any, n: int) -> float:
    """Median round trip in microseconds (after a short warm-up)."""
    times = []
    for i in range(n + 50):
        t0 = time.perf_counter()
        requests.put(i)
        replies.get()
        if i >= 50:
            times.append(time.perf_counter() - t0)
    requests.put(None)
    return statistics.median(times) * 1e6


def bench_round_trip(ex: Any, queue_type: Any, n: int) -> float:
    import bench_queue

    requests, replies = queue_type(), queue_type()
    fut = ex.submit(bench_queue.echo, requests, replies)
    us = _round_trips(requests, replies, n)
    fut.result()
    return us


def bench_throughput(ex: Any, n: int, maxsize: int) -> float:
    import bench_queue

    from interpexec import Queue

    q = Queue(maxsize)
    t0 = time.perf_counter()
    fut = ex.submit(bench_queue.stream, q, n)
    count = 0
    while q.get() is not None:
        count += 1
    elapsed = time.perf_counter() - t0
    fut.result()
    assert count == n
    return n / elapsed


def bench_thread_round_trip(n: int) -> float:
    requests: queue.Queue[Any] = queue.Queue()
    replies: queue.Queue[Any] = queue.Queue()
    t = threading.Thread(target=echo, args=(requests, replies))
    t.start()
    us = _round_trips(requests, replies, n)
    t.join()
    return us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trips", type=int, default=2000)
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()

    import interpexec
    from interpexec import Queue

    try:
        from concurrent.interpreters import create_queue
    except ImportError:  # 3.13
        create_queue = None

    rows: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    for _ in range(args.rounds):
        ex = interpexec.InterpreterPoolExecutor(2)
        try:
            ex.submit(int).result()  # warm
            add("rt", bench_round_trip(ex, Queue, args.trips))
            add("tp0", bench_throughput(ex, args.items, 0))
            add("tp1000", bench_throughput(ex, args.items, 1000))
            if create_queue is not None:
                add("rt_std", bench_round_trip(ex, create_queue, 20))
        finally:
            ex.shutdown()
        add("rt_thread", bench_thread_round_trip(args.trips))

    labels = [
        ("rt", "round trip parent -> worker -> parent (us)", "<= 100", ".1f"),
        ("tp0", f"throughput, {args.items:,} ints task -> parent (items/s)", ">= 100,000", ",.0f"),
        ("tp1000", f"throughput, {args.items:,} ints, maxsize=1000 (items/s)", ">= 100,000", ",.0f"),
        ("rt_thread", "context: round trip thread <-> thread, queue.Queue (us)", "", ".1f"),
        ("rt_std", "context: round trip, concurrent.interpreters.Queue (us)", "", ",.0f"),
    ]
    v = sys.version_info
    print(f"interpexec.Queue, Python {v.major}.{v.minor}.{v.micro}, {args.rounds} rounds, median of rounds")
    print(f"| {'metric':<58} | {'median':>12} | {'min':>12} | {'max':>12} | target     |")
    print(f"|{'-' * 60}|{'-' * 14}|{'-' * 14}|{'-' * 14}|------------|")
    for key, label, target, fmt in labels:
        values = rows.get(key)
        if not values:
            continue
        med, lo, hi = statistics.median(values), min(values), max(values)
        print(f"| {label:<58} | {med:>12{fmt}} | {lo:>12{fmt}} | {hi:>12{fmt}} | {target:<10} |")


if __name__ == "__main__":
    main()
