"""Interruption latency: how soon a stopped pure-Python task lets its caller go.

    python benchmarks/bench_interrupt.py [--quick] [--tasks N] [--timeout T] [--json PATH]

Every task (``_tasks.spin``) loops in pure Python forever.  It writes ``time.perf_counter()`` (one
clock for every interpreter of the process) into a ``share()``d array when it
starts, and again in a ``finally`` block when the exception that stops it
arrives.  Tasks run one at a time on a two-worker pool.

  deadline     ``schedule(spin, ..., timeout=T)``: from the deadline (the task's
               start + T) to the caller, blocked in ``future.exception()``,
               having the TimeoutError; and from the deadline to the task's
               ``finally`` block (the task really stopped)
  interrupt()  ``executor.interrupt(future)`` on a task that has run for 5-25 ms:
               from the call to the future resolved (cancelled) in the caller,
               and from the call to the task's ``finally`` block

Median and 95th percentile over N tasks (default 200 each; 20 with --quick), in
milliseconds.  Target: median under 20 ms.  JSON:
benchmarks/results/interrupt-VERSION.json.
"""

from __future__ import annotations

import argparse
import array
import concurrent.futures as cf
import faulthandler
import random
import sys
import time
from typing import Any

import _util

TARGET_MS = 20.0


# ----------------------------------------------------------- measurements


def wait_started(times: array.array[float], index: int, limit: float = 10.0) -> None:
    deadline = time.perf_counter() + limit
    while times[2 * index] == 0.0:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"task {index} did not start within {limit} s")
        time.sleep(0.0002)


def wait_stopped(times: array.array[float], index: int, limit: float = 10.0) -> None:
    deadline = time.perf_counter() + limit
    while times[2 * index + 1] == 0.0:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"task {index} did not run its finally block within {limit} s")
        time.sleep(0.0002)


def bench_deadline(ex: Any, share: Any, n: int, timeout: float, bar: Any) -> dict[str, list[float]]:
    import _tasks

    times = array.array("d", bytes(16 * n))
    shared = share(times, writable=True)
    resolved, stopped = [], []
    for i in range(n):
        fut = ex.schedule(_tasks.spin, (shared, i), timeout=timeout)
        exc = fut.exception(timeout=timeout + 30)
        t_resolved = time.perf_counter()
        if not isinstance(exc, TimeoutError):
            raise RuntimeError(f"task {i}: expected TimeoutError, got {exc!r}")
        wait_stopped(times, i)
        deadline = times[2 * i] + timeout
        resolved.append((t_resolved - deadline) * 1e3)
        stopped.append((times[2 * i + 1] - deadline) * 1e3)
        bar(i + 1)
    return {"resolved": resolved, "stopped": stopped}


def bench_interrupt(ex: Any, share: Any, n: int, bar: Any) -> dict[str, list[float]]:
    import _tasks

    rng = random.Random(1)
    times = array.array("d", bytes(16 * n))
    shared = share(times, writable=True)
    resolved, stopped = [], []
    for i in range(n):
        fut = ex.submit(_tasks.spin, shared, i)
        wait_started(times, i)
        time.sleep(rng.uniform(0.005, 0.025))
        t0 = time.perf_counter()
        ok = ex.interrupt(fut)
        cf.wait([fut], timeout=30)
        t_resolved = time.perf_counter()
        if not ok or not fut.cancelled():
            raise RuntimeError(f"task {i}: interrupt() returned {ok}, future {fut!r}")
        wait_stopped(times, i)
        resolved.append((t_resolved - t0) * 1e3)
        stopped.append((times[2 * i + 1] - t0) * 1e3)
        bar(i + 1)
    return {"resolved": resolved, "stopped": stopped}


def make_bar(label: str, total: int) -> Any:
    shown = [-1]

    def update(done: int) -> None:
        width = 30
        filled = width * done // total
        line = f"  {label:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        if sys.stderr.isatty():
            sys.stderr.write("\r" + line + ("\n" if done == total else ""))
        elif 4 * done // total > shown[0]:
            shown[0] = 4 * done // total
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return update


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 tasks of each kind")
    parser.add_argument("--tasks", type=int, help="tasks of each kind (default 200; 20 quick)")
    parser.add_argument("--timeout", type=float, default=0.05, help="the deadline T in seconds (default 0.05)")
    parser.add_argument("--json", metavar="PATH", help="default: benchmarks/results/interrupt-VERSION.json")
    args = parser.parse_args()
    n = args.tasks or (20 if args.quick else 200)
    if n < 1 or args.timeout <= 0:
        parser.error("--tasks and --timeout must be positive")

    note = _util.setup_interpexec()  # before interpexec is imported
    import interpexec

    faulthandler.enable()
    faulthandler.dump_traceback_later(600 + n * (args.timeout + 0.1) * 2, exit=True)
    print(_util.header("interpexec interruption latency") + (" [quick]" if args.quick else ""), flush=True)
    if note:
        print(note, flush=True)
    with interpexec.InterpreterPoolExecutor(2) as ex:
        ex.prestart()
        ex.submit(int).result()
        # warm-up: the first stop in each worker imports ctypes there
        bench_deadline(ex, interpexec.share, 4, 0.01, lambda done: None)
        bench_interrupt(ex, interpexec.share, 4, lambda done: None)
        deadline = bench_deadline(ex, interpexec.share, n, args.timeout, make_bar("deadline", n))
        interrupt = bench_interrupt(ex, interpexec.share, n, make_bar("interrupt", n))
        stats = ex.stats()
    faulthandler.cancel_dump_traceback_later()

    rows = [["latency (ms)", "median", "p95", "max", "target", "status"]]
    summary: dict[str, Any] = {}
    passed = True
    for key, label, values, has_target in (
        ("deadline_to_resolved", f"deadline (T={args.timeout:g} s) -> future resolved", deadline["resolved"], True),
        ("deadline_to_stopped", "deadline -> task's finally ran", deadline["stopped"], False),
        ("interrupt_to_resolved", "interrupt() -> future resolved", interrupt["resolved"], True),
        ("interrupt_to_stopped", "interrupt() -> task's finally ran", interrupt["stopped"], False),
    ):
        med, p95, top = _util.median(values), _util.p95(values), max(values)
        ok = med < TARGET_MS
        if has_target:
            passed &= ok
        summary[key] = {"median_ms": med, "p95_ms": p95, "max_ms": top, "min_ms": min(values), "n": len(values)}
        rows.append(
            [
                label,
                f"{med:.2f}",
                f"{p95:.2f}",
                f"{top:.2f}",
                f"< {TARGET_MS:g}" if has_target else "",
                _util.status(ok) if has_target else "",
            ]
        )
    print(f"{n} tasks of each kind, one at a time, 2 workers; pure-Python loop")
    print(_util.markdown(rows))
    restarts = sum(w["restarts"] for w in stats["workers"])
    retired = sum(w["retired"] for w in stats["workers"])
    print(f"workers after the run: {len(stats['workers'])}, restarts {restarts}, retired {retired}")
    path = _util.write_json(
        "interrupt",
        {
            "tasks": n,
            "timeout_s": args.timeout,
            "target_ms": TARGET_MS,
            "summary": summary,
            "passed": passed,
            "raw_ms": {"deadline": deadline, "interrupt": interrupt},
            "pool_stats": stats,
        },
        args.quick,
        args.json,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
