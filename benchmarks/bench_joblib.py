"""joblib: the ``"interpexec"`` backend against joblib's default (loky), in one run.

    python benchmarks/bench_joblib.py [--jobs 2] [--rounds 7] [--small-items 100000]
                                      [--cpu-tasks 12] [--task-ms 250] [--startup-runs 5]
                                      [--max-foreign 0.15] [--attempts 4] [--json PATH]

Three measurements, each backend in turn (the order alternates between rounds),
with the task functions defined in this script, as a user's would be (both
backends then send them by value with cloudpickle):

  small     throughput: ``Parallel()(delayed(small)(i) for i in range(N))`` with
            joblib's automatic batching, on a warm pool; items per second
  cpu       speedup: ``--cpu-tasks`` pure-Python CPU-bound tasks of about
            ``--task-ms`` ms each (longer than joblib's smallest ideal batch,
            0.2 s, so batches keep one call and no straggler batch decides
            the time); serial time (measured here, in the same round) /
            parallel time
  startup   the first ``Parallel`` call of a fresh process (a subprocess that
            has already imported joblib and interpexec.joblib): pool creation
            plus ``4 * jobs`` small tasks; the standard library's
            ProcessPoolExecutor (its first ``map``) is shown for reference

Medians over the rounds; the interpexec/loky column compares the two within
each round (loky's time / interpexec's), then takes the median.  Targets (issue
15): small-task throughput >= loky's, CPU speedup within 5% of loky's, start-up
well under loky's.

On a shared machine, other processes take CPUs from the parallel runs.  So
(when psutil is installed) each timed run first waits until the machine is
idle, measures the CPU that processes other than this one and its children used
meanwhile, and runs again (up to ``--attempts`` times) when that exceeded
``--max-foreign`` cores on average; the table reports the worst foreign load it
accepted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# Measure the interpexec of this checkout (children too, for the start-up runs).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

BACKENDS = ("loky", "interpexec")


def small(i: int) -> int:
    """A small pure-Python task (about 5 microseconds)."""
    return sum((i * k) % 7 for k in range(40))


def cpu_work(n: int) -> int:
    """A pure-Python CPU-bound loop."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def calibrate(seconds: float) -> int:
    """Loop length for which cpu_work takes about ``seconds`` here."""
    n = 20_000
    while True:
        t0 = time.perf_counter()
        cpu_work(n)
        dt = time.perf_counter() - t0
        if dt >= 0.05:
            break
        n *= 2
    return max(1, round(n * seconds / dt))


# ----------------------------------------------------------------- machine load
def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, of this process and its children),
    or None without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    t = psutil.cpu_times()
    machine = sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    me = psutil.Process()
    ours = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            c = proc.cpu_times()
        except psutil.Error:
            continue
        ours += c.user + c.system
    return machine, ours


def wait_idle(max_busy: float, timeout: float) -> None:
    """Wait (up to ``timeout`` s) until fewer than ``max_busy`` cores were busy over
    the last second."""
    deadline = time.monotonic() + timeout
    while True:
        before = cpu_seconds()
        if before is None:
            return
        time.sleep(1.0)  # a measurement window, not synchronization
        after = cpu_seconds()
        assert after is not None
        if after[0] - before[0] < max_busy or time.monotonic() > deadline:
            return


def timed(run: Callable[[], object], max_foreign: float, attempts: int) -> tuple[float, float, object]:
    """(seconds, foreign cores, result) of ``run()`` on an idle enough machine."""
    for attempt in range(1, attempts + 1):
        wait_idle(max_foreign, timeout=120)
        before = cpu_seconds()
        start = time.perf_counter()
        out = run()
        elapsed = time.perf_counter() - start
        after = cpu_seconds()
        if before is None or after is None:
            return elapsed, float("nan"), out
        foreign = max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / elapsed
        if foreign <= max_foreign or attempt == attempts:
            return elapsed, foreign, out
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------- runs
def run_parallel(backend: str, jobs: int, fn: Callable[[int], int], args: list[int]) -> list[int]:
    from joblib import Parallel, delayed, parallel_config

    with parallel_config(backend=backend, n_jobs=jobs):
        out: list[int] = Parallel()(delayed(fn)(a) for a in args)
        return out


def startup_child(kind: str, jobs: int) -> None:
    """In a fresh process: time the first parallel call (imports done before)."""
    args = list(range(4 * jobs))
    if kind == "process":
        from concurrent.futures import ProcessPoolExecutor

        start = time.perf_counter()
        with ProcessPoolExecutor(jobs) as pool:
            out = list(pool.map(small, args))
    else:
        import joblib  # noqa: F401

        import interpexec.joblib  # noqa: F401

        start = time.perf_counter()
        out = run_parallel(kind, jobs, small, args)
    elapsed = time.perf_counter() - start
    assert out == [small(a) for a in args]
    print(json.dumps({"seconds": elapsed}))


def startup(kind: str, jobs: int) -> float:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--startup-child", kind, "--jobs", str(jobs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"start-up child for {kind} failed:\n{proc.stderr}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=min(4, os.process_cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--small-items", type=int, default=100_000)
    parser.add_argument("--cpu-tasks", type=int, default=12)
    parser.add_argument("--task-ms", type=float, default=250.0)
    parser.add_argument("--startup-runs", type=int, default=5)
    parser.add_argument("--max-foreign", type=float, default=0.15, help="cores other processes may use (avg)")
    parser.add_argument("--attempts", type=int, default=4, help="runs of one measurement before accepting")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--startup-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.startup_child:
        startup_child(args.startup_child, args.jobs)
        return 0

    import joblib

    import interpexec.joblib  # noqa: F401  (registers the backend)

    jobs, mf, attempts = args.jobs, args.max_foreign, args.attempts
    size = calibrate(args.task_ms / 1000)
    cpu_args = [size] * args.cpu_tasks
    small_args = list(range(args.small_items))
    expected_small = [small(i) for i in small_args]
    expected_cpu = [cpu_work(n) for n in cpu_args]
    print(
        f"Python {sys.version.split()[0]}, joblib {joblib.__version__}, {os.process_cpu_count()} usable CPUs, "
        f"n_jobs={jobs}; small: {args.small_items} items; cpu: {args.cpu_tasks} tasks of about "
        f"{args.task_ms:.0f} ms; {args.rounds} rounds",
        flush=True,
    )
    for backend in BACKENDS:  # warm pools: every worker started
        run_parallel(backend, jobs, cpu_work, [size // 20] * (2 * jobs))

    small_t: dict[str, list[float]] = {b: [] for b in BACKENDS}
    cpu_t: dict[str, list[float]] = {b: [] for b in (*BACKENDS, "serial")}
    foreign: list[float] = []
    for r in range(args.rounds):
        elapsed, busy, out = timed(lambda: [cpu_work(n) for n in cpu_args], mf, attempts)
        assert out == expected_cpu
        cpu_t["serial"].append(elapsed)
        foreign.append(busy)
        for backend in BACKENDS if r % 2 == 0 else BACKENDS[::-1]:
            elapsed, busy, out = timed(lambda b=backend: run_parallel(b, jobs, small, small_args), mf, attempts)
            assert out == expected_small
            small_t[backend].append(elapsed)
            foreign.append(busy)
            elapsed, busy, out = timed(lambda b=backend: run_parallel(b, jobs, cpu_work, cpu_args), mf, attempts)
            assert out == expected_cpu
            cpu_t[backend].append(elapsed)
            foreign.append(busy)
            print(
                f"  round {r + 1}: {backend:<10} small {small_t[backend][-1]:6.3f} s   cpu {elapsed:6.3f} s  "
                f"(serial {cpu_t['serial'][-1]:.3f} s)",
                flush=True,
            )

    kinds = (*BACKENDS, "process")
    start_t: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(args.startup_runs):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            wait_idle(mf, timeout=120)
            start_t[kind].append(startup(kind, jobs))

    # Per round, then the median: the machine's speed drifts between rounds, and
    # each round measures serial, loky and interpexec minutes apart at most.
    speedups = {b: [s / p for s, p in zip(cpu_t["serial"], cpu_t[b], strict=True)] for b in BACKENDS}
    med: dict[str, dict[str, float]] = {
        "small_items_per_s": {b: args.small_items / statistics.median(small_t[b]) for b in BACKENDS},
        "cpu_speedup": {b: statistics.median(v) for b, v in speedups.items()},
        "startup_s": {k: statistics.median(v) for k, v in start_t.items()},
        # interpexec against loky within each round (higher is better for interpexec)
        "paired": {
            "small": statistics.median(lo / ie for lo, ie in zip(small_t["loky"], small_t["interpexec"], strict=True)),
            "cpu": statistics.median(lo / ie for lo, ie in zip(cpu_t["loky"], cpu_t["interpexec"], strict=True)),
        },
    }
    report(med, jobs, max(foreign))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "python": sys.version.split()[0],
                    "joblib": joblib.__version__,
                    "jobs": jobs,
                    "small_s": small_t,
                    "cpu_s": cpu_t,
                    "startup_s": start_t,
                    "foreign_cores_max": max(foreign),
                    "medians": med,
                },
                f,
                indent=2,
            )
    return 0


def report(med: dict[str, dict[str, Any]], jobs: int, foreign: float) -> None:
    paired = med["paired"]
    rows = [
        ("small tasks, items/s", "{:,.0f}", med["small_items_per_s"], paired["small"]),
        (f"CPU-bound speedup ({jobs} jobs)", "{:.2f}x", med["cpu_speedup"], paired["cpu"]),
        (
            "start-up, first call (s)",
            "{:.3f}",
            med["startup_s"],
            med["startup_s"]["interpexec"] / med["startup_s"]["loky"],
        ),
    ]
    print()
    print(f"| {'measure':<28} | {'loky':>10} | {'interpexec':>10} | {'interpexec/loky':>15} |")
    print(f"|{'-' * 30}|{'-' * 11}:|{'-' * 11}:|{'-' * 16}:|")
    for label, fmt, values, ratio in rows:
        loky, ours = fmt.format(values["loky"]), fmt.format(values["interpexec"])
        print(f"| {label:<28} | {loky:>10} | {ours:>10} | {ratio:>14.2f}x |")
    process = med["startup_s"]["process"]
    print("(interpexec/loky: for throughput and speedup, the median over rounds of loky's time / interpexec's")
    print(f" in the same round; start-up of the standard library's ProcessPoolExecutor: {process:.3f} s;")
    print(f" most cores other processes used during an accepted run: {foreign:.2f})")
    print()
    tput, speed = paired["small"], paired["cpu"]
    boot = med["startup_s"]["interpexec"] / med["startup_s"]["loky"]
    print(f"small-task throughput vs loky: {tput:.2f}x  (target >= 1.0: {'met' if tput >= 1.0 else 'MISSED'})")
    print(f"CPU speedup vs loky's:        {speed:.3f}  (target >= 0.95: {'met' if speed >= 0.95 else 'MISSED'})")
    print(f"start-up vs loky's:           {boot:.2f}x  (target well under 1: {'met' if boot <= 0.5 else 'MISSED'})")


if __name__ == "__main__":
    sys.exit(main())
