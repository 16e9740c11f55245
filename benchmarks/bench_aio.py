"""Compare ``interpexec.aio.run_sync`` with ``anyio.to_interpreter.run_sync``.

    python benchmarks/bench_aio.py [--rounds R] [--backends asyncio,trio] [--workers N]
                                   [--calls C] [--anyio-calls A] [--quick] [--json PATH]

Side by side, on each anyio backend (asyncio and trio), with N workers (default:
the CPU count) for both:

  round trip    sequential ``await run_sync(noop)``: median over batches of 100 (us);
                all implementations in one process, in alternating batches, so
                that they meet the same background load; ie/anyio is the median
                of the per-process ratios
  concurrent    C calls started at once, each ``await run_sync(noop,
                limiter=CapacityLimiter(N))``; calls / time to the last result
  CPU speedup   2N pure-Python loops of ~0.2 s each: serial time in the main
                thread / time for 2N concurrent ``run_sync`` calls (best of 3
                alternating runs of each, against the noise of a shared machine)

``anyio.to_interpreter`` builds one new subinterpreter for every call that finds
no idle one, on the event-loop thread (~15-25 ms and ~3-4 MiB each), so C
concurrent calls cost it C interpreters: it runs A concurrent calls (default 200)
instead of C (5,000 would take minutes and ~20 GiB); its rate does not depend on
the count (it is bounded by interpreter creation), which the table shows by also
timing interpexec at A calls.  For reference on asyncio, the same figures for
``loop.run_in_executor(pool, ...)`` on the same interpexec pool.

Every (round, backend, implementation) runs in a fresh child process (this script
with ``--child``), in a rotating order; the table shows medians over the rounds
and checks the issue's targets: round trip <= 0.5 x anyio's, concurrent
throughput >= 50 x anyio's, CPU speedup >= 0.95 x min(workers, cores).
"""

from __future__ import annotations

import os
import sys
import time

# The tasks, as the main benchmark's (workers import _tasks by name: the script's
# directory is first on sys.path in every interpreter of the process).
from _tasks import calibrate_cpu, cpu_work, noop

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PREFIX = "@@bench_aio "
IMPLS = ("anyio", "interpexec", "run_in_executor")
LABELS = {
    "anyio": "anyio.to_interpreter",
    "interpexec": "interpexec.aio",
    "run_in_executor": "run_in_executor(ie)",
}


# ------------------------------------------------------------------ child side


def _child(impl: str, backend: str, workers: int, calls: int, anyio_calls: int, seq: int, cpu_n: int) -> dict[str, Any]:
    import anyio

    result: dict[str, Any] = {}
    if impl == "paired":
        anyio.run(_paired_main, backend, workers, seq, result, backend=backend)
    else:
        anyio.run(_child_main, impl, workers, calls, anyio_calls, seq, cpu_n, result, backend=backend)
    return result


async def _paired_main(backend: str, workers: int, seq: int, out: dict[str, Any]) -> None:
    """Sequential round trips of every implementation in one process, in
    alternating batches, so that all of them meet the same background load."""
    import statistics

    import anyio
    import anyio.to_interpreter
    import anyio.to_thread

    import interpexec
    from interpexec import aio

    def make() -> interpexec.InterpreterPoolExecutor:
        ex = interpexec.InterpreterPoolExecutor(workers)
        ex.prestart()
        return ex

    executor = await anyio.to_thread.run_sync(make)
    limiter = anyio.CapacityLimiter(workers)

    async def anyio_call() -> None:
        await anyio.to_interpreter.run_sync(noop, limiter=limiter)

    async def ie_call() -> None:
        await aio.run_sync(noop, executor=executor)

    calls = {"anyio": anyio_call, "interpexec": ie_call}
    if backend == "asyncio":
        import asyncio

        loop = asyncio.get_running_loop()

        async def rie_call() -> None:
            await loop.run_in_executor(executor, noop)

        calls["run_in_executor"] = rie_call
    batch = 100
    means: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm up
        for _ in range(batch):
            await call()
    for k in range(max(1, seq // batch)):
        names = list(calls)
        names = names[k % len(names) :] + names[: k % len(names)]
        for name in names:
            call = calls[name]
            start = time.perf_counter()
            for _ in range(batch):
                await call()
            means[name].append((time.perf_counter() - start) / batch)
    for name, values in means.items():
        out[f"round_trip_us_{name}"] = statistics.median(values) * 1e6
    out["round_trip_ratio"] = out["round_trip_us_interpexec"] / out["round_trip_us_anyio"]
    await anyio.to_thread.run_sync(executor.shutdown)


async def _child_main(
    impl: str, workers: int, calls: int, anyio_calls: int, seq: int, cpu_n: int, out: dict[str, Any]
) -> None:
    import functools

    import anyio
    import anyio.to_thread

    executor = None
    if impl == "anyio":
        import anyio.to_interpreter

        async def call(fn: Any, *args: Any, limiter: Any = None) -> Any:
            if limiter is None:
                limiter = default_limiter
            return await anyio.to_interpreter.run_sync(fn, *args, limiter=limiter)

        default_limiter = anyio.CapacityLimiter(workers)
    else:
        import interpexec
        from interpexec import aio

        def make() -> interpexec.InterpreterPoolExecutor:
            ex = interpexec.InterpreterPoolExecutor(workers)
            ex.prestart()
            return ex

        executor = await anyio.to_thread.run_sync(make)
        if impl == "interpexec":

            async def call(fn: Any, *args: Any, limiter: Any = None) -> Any:
                return await aio.run_sync(fn, *args, limiter=limiter, executor=executor)
        else:
            import asyncio

            loop = asyncio.get_running_loop()

            async def call(fn: Any, *args: Any, limiter: Any = None) -> Any:
                if limiter is None:
                    return await loop.run_in_executor(executor, fn, *args)
                async with limiter:
                    return await loop.run_in_executor(executor, fn, *args)

    async def concurrent(n: int, fn: Any, *args: Any, limiter: Any = None) -> float:
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(functools.partial(call, fn, *args, limiter=limiter))
        return time.perf_counter() - start

    # Warm up: every worker (anyio: one interpreter per concurrent call) exists.
    await concurrent(2 * workers, noop)
    for _ in range(200):
        await call(noop)

    # Concurrent calls under CapacityLimiter(workers).
    n = anyio_calls
    out["concurrent_small_cps"] = n / await concurrent(n, noop, limiter=anyio.CapacityLimiter(workers))
    if impl != "anyio":
        out["concurrent_cps"] = calls / await concurrent(calls, noop, limiter=anyio.CapacityLimiter(workers))

    # CPU-bound: 2N loops serially in this thread, then concurrently in workers;
    # three times, alternating, keeping the best of each (the machine is shared).
    tasks = 2 * workers
    serial, parallel = [], []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(tasks):
            cpu_work(cpu_n)
        serial.append(time.perf_counter() - start)
        parallel.append(await concurrent(tasks, cpu_work, cpu_n))
    out["cpu_speedup"] = min(serial) / min(parallel)
    out["cpu_serial_s"] = min(serial)

    if executor is not None:
        await anyio.to_thread.run_sync(executor.shutdown)


# ------------------------------------------------------------------ parent side


def _run_child(argv: list[str]) -> dict[str, Any]:
    import json
    import subprocess

    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(PREFIX):
            record: dict[str, Any] = json.loads(line[len(PREFIX) :])
            return record
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--backends", default="asyncio,trio")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--anyio-calls", type=int, default=200)
    p.add_argument("--seq", type=int, default=2000, help="sequential calls timed per child")
    p.add_argument("--cpu-seconds", type=float, default=0.2, help="duration of one CPU-bound call")
    p.add_argument("--quick", action="store_true", help="1 round, fewer calls")
    p.add_argument("--json", help="also write the records and medians to this file")
    args = p.parse_args(argv)

    if args.child:
        impl, backend, workers, calls, anyio_calls, seq, cpu_n = args.child
        record = _child(impl, backend, int(workers), int(calls), int(anyio_calls), int(seq), int(cpu_n))
        print(PREFIX + json.dumps(record), flush=True)
        return 0

    if args.quick:
        args.rounds, args.calls, args.anyio_calls, args.seq = 1, 1000, 50, 500
    backends = [b for b in args.backends.split(",") if b]
    cores = os.cpu_count() or 1
    cpu_n = calibrate_cpu(args.cpu_seconds)
    print(
        f"Python {sys.version.split()[0]}, {cores} cores, {args.workers} workers, {args.rounds} rounds; "
        f"concurrent: {args.calls:,} calls (anyio: {args.anyio_calls:,}) under CapacityLimiter({args.workers})",
        flush=True,
    )
    records: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for backend in backends:
            impls = ["paired", *(i for i in IMPLS if backend == "asyncio" or i != "run_in_executor")]
            shift = r % len(impls)
            for impl in impls[shift:] + impls[:shift]:
                rec = _run_child(
                    [
                        impl,
                        backend,
                        str(args.workers),
                        str(args.calls),
                        str(args.anyio_calls),
                        str(args.seq),
                        str(cpu_n),
                    ]
                )
                records.setdefault((backend, impl), []).append(rec)
                shown = rec.get("error") or ", ".join(f"{k}={v:.4g}" for k, v in rec.items())
                print(f"  round {r + 1} {backend:7} {impl:15} {shown}", file=sys.stderr, flush=True)

    def med(backend: str, impl: str, key: str) -> float:
        return _median([rec[key] for rec in records.get((backend, impl), []) if key in rec])

    cpu_target = 0.95 * min(args.workers, cores)
    summary: dict[str, Any] = {}
    lines = []
    header = [
        "backend",
        "metric",
        LABELS["anyio"],
        LABELS["interpexec"],
        LABELS["run_in_executor"],
        "ie/anyio",
        "target",
        "ok",
    ]
    lines.append(header)
    for backend in backends:
        rt = [med(backend, "paired", f"round_trip_us_{i}") for i in IMPLS]
        small = [med(backend, i, "concurrent_small_cps") for i in IMPLS]
        big = [
            float("nan"),
            med(backend, "interpexec", "concurrent_cps"),
            med(backend, "run_in_executor", "concurrent_cps"),
        ]
        cpu = [med(backend, i, "cpu_speedup") for i in IMPLS]
        rt_ratio = med(backend, "paired", "round_trip_ratio")  # median of the per-process ratios
        conc_ratio = big[1] / small[0]
        summary[backend] = {
            "round_trip_us": dict(zip(IMPLS, rt, strict=True)),
            "concurrent_small_cps": dict(zip(IMPLS, small, strict=True)),
            "concurrent_cps": dict(zip(IMPLS, big, strict=True)),
            "cpu_speedup": dict(zip(IMPLS, cpu, strict=True)),
            "round_trip_ratio": rt_ratio,
            "concurrent_ratio": conc_ratio,
        }
        lines.append(
            [
                backend,
                "sequential round trip (us)",
                *(_fmt(v, ".0f") for v in rt),
                f"{rt_ratio:.2f}",
                "<= 0.5",
                _ok(rt_ratio <= 0.5),
            ]
        )
        lines.append(
            [
                backend,
                f"{args.anyio_calls:,} concurrent calls (calls/s)",
                *(_fmt(v, ",.0f") for v in small),
                f"{small[1] / small[0]:.0f}",
                "",
                "",
            ]
        )
        lines.append(
            [
                backend,
                f"{args.calls:,} concurrent calls (calls/s)",
                "(see above)",
                *(_fmt(v, ",.0f") for v in big[1:]),
                f"{conc_ratio:.0f}",
                ">= 50",
                _ok(conc_ratio >= 50),
            ]
        )
        lines.append(
            [
                backend,
                f"CPU-bound speedup, {2 * args.workers} tasks (x)",
                *(_fmt(v, ".2f") for v in cpu),
                "",
                f">= {cpu_target:.2f}",
                _ok(cpu[1] >= cpu_target),
            ]
        )
    print(_markdown(lines))
    print(
        f"\nie/anyio: round trip = interpexec / anyio; concurrent = interpexec at {args.calls:,} calls / anyio at "
        f"{args.anyio_calls:,} (anyio builds one interpreter per concurrent call, so its rate is flat in the count).",
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "python": sys.version,
                    "args": vars(args),
                    "cpu_n": cpu_n,
                    "summary": summary,
                    "records": {f"{b}/{i}": v for (b, i), v in records.items()},
                },
                f,
                indent=1,
            )
    return 0


def _fmt(value: float, spec: str) -> str:
    return "n/a" if value != value else format(value, spec)


def _ok(flag: bool) -> str:
    return "yes" if flag else "NO"


def _markdown(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for k, row in enumerate(rows):
        out.append("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
        if k == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
