"""The demo workload: CPU-bound pure Python built from the standard library.

Each task generates a batch of log records, serializes them to JSON and back,
parses every line with a regular expression, aggregates the fields in plain
Python and returns a digest of the result, so that every executor's answer can
be checked against the serial one.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from typing import TextIO

_LINE = re.compile(r"(?P<ip>\d+\.\d+\.\d+\.\d+) (?P<method>[A-Z]+) (?P<path>/\S*) (?P<status>\d{3}) (?P<ms>\d+)ms")
_METHODS = ("GET", "POST", "PUT", "DELETE")
_PATHS = ("/", "/api/items", "/api/users", "/static/app.js", "/login", "/search")


def work(seed: int, records: int = 20000) -> str:
    """One task: generate, encode, decode, parse and aggregate ``records`` records."""
    rng = random.Random(seed)
    batch = [
        {
            "line": "%d.%d.%d.%d %s %s/%d %d %dms"
            % (
                rng.randrange(256),
                rng.randrange(256),
                rng.randrange(256),
                rng.randrange(256),
                rng.choice(_METHODS),
                rng.choice(_PATHS),
                rng.randrange(1000),
                rng.choice((200, 200, 200, 301, 404, 500)),
                rng.randrange(2000),
            ),
            "tags": [rng.randrange(100) for _ in range(5)],
        }
        for _ in range(records)
    ]
    decoded = json.loads(json.dumps(batch))
    per_status: dict[str, list[int]] = {}
    per_method: dict[str, int] = {}
    tag_sum = 0
    for rec in decoded:
        m = _LINE.match(rec["line"])
        if m is None:
            continue
        per_status.setdefault(m["status"], []).append(int(m["ms"]))
        per_method[m["method"]] = per_method.get(m["method"], 0) + 1
        tag_sum += sum(t * t for t in rec["tags"]) % 97
    summary = {status: (len(v), sum(v) // len(v), sorted(v)[len(v) // 2]) for status, v in sorted(per_status.items())}
    text = json.dumps([summary, sorted(per_method.items()), tag_sum], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _progress(label: str, done: int, total: int, stream: TextIO) -> None:
    width = 30
    filled = width * done // total
    end = "\n" if done == total else ""
    if stream.isatty():
        stream.write(f"\r  {label:<28} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
    elif done == total:
        stream.write(f"  {label:<28} {done}/{total} done\n")
    stream.flush()


def _run_executor(executor: cf.Executor, seeds: list[int], records: int, label: str) -> list[str]:
    futures = {executor.submit(work, seed, records): i for i, seed in enumerate(seeds)}
    results: list[str] = [""] * len(seeds)
    for done, fut in enumerate(cf.as_completed(futures), 1):
        results[futures[fut]] = fut.result()
        _progress(label, done, len(seeds), sys.stderr)
    return results


def run_demo(
    tasks: int | None = None, workers: int | None = None, records: int = 20000, out: TextIO = sys.stdout
) -> int:
    """Time the workload serially, on ProcessPoolExecutor and on interpexec."""
    import multiprocessing

    from ._executor import InterpreterPoolExecutor, default_max_workers

    workers = workers or default_max_workers()
    tasks = tasks or 4 * workers
    seeds = list(range(tasks))
    out.write(
        f"interpexec demo: {tasks} tasks of CPU-bound pure Python ({records} log records each: "
        f"JSON, regex, aggregation), {workers} workers, Python {sys.version.split()[0]}\n"
    )

    rows: list[tuple[str, float]] = []

    def timed(label: str, fn: Callable[[], list[str]]) -> list[str]:
        t0 = time.perf_counter()
        res = fn()
        rows.append((label, time.perf_counter() - t0))
        return res

    def serial() -> list[str]:
        res = []
        for i, seed in enumerate(seeds, 1):
            res.append(work(seed, records))
            _progress("serial", i, len(seeds), sys.stderr)
        return res

    def processes() -> list[str]:
        ctx = multiprocessing.get_context(
            "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        )
        with cf.ProcessPoolExecutor(workers, mp_context=ctx) as ex:
            return _run_executor(ex, seeds, records, "ProcessPoolExecutor")

    def interpreters() -> list[str]:
        with InterpreterPoolExecutor(workers) as ex:
            return _run_executor(ex, seeds, records, "interpexec")

    expected = timed("serial", serial)
    mismatch = []
    for label, fn in (("ProcessPoolExecutor", processes), ("interpexec", interpreters)):
        if timed(label, fn) != expected:
            mismatch.append(label)
    base = rows[0][1]
    out.write(f"\n  {'executor':<22}{'time (s)':>10}{'speedup':>10}\n")
    for label, secs in rows:
        out.write(f"  {label:<22}{secs:>10.2f}{base / secs:>9.2f}x\n")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out.write(
        f"\n  (the ideal speedup is min(workers, cores) = {min(workers, cores or 1)}x; process start-up and\n"
        "  pickling cost ProcessPoolExecutor, interpreter start-up costs interpexec)\n"
    )
    if mismatch:
        out.write(f"error: results differ from the serial run for: {', '.join(mismatch)}\n")
        return 1
    out.write("  all results equal the serial run\n")
    return 0
