"""The measurements of one executor, in a fresh process:

    python -P -m harness.child KIND CONFIG_JSON

(run by runner.run_child with benchmarks/ on PYTHONPATH).  One line per event on
stdout, each ``PREFIX`` + JSON.  This module is the child's main module, so the
process pool's workers import it too (as ``__mp_main__``): it imports only
built-in modules at the top, and heavier imports would inflate the process pool's
memory figure.  The tasks live in ``_tasks``, which every worker imports by name.
"""

from __future__ import annotations

import os
import sys
import time

import _tasks as workloads
from _util import proc_status_kib, reset_peak_rss

from harness.config import PREFIX, Config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Executor
    from typing import Any

    Record = dict[str, Any]


# --------------------------------------------------------------------- memory
def _rss_kib(pid: int) -> int:
    """VmRSS of one process in KiB (0 if it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _pss_kib(pid: int) -> int:
    """Proportional set size in KiB (shared pages split between their users), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_memory_kib(root: int) -> list[tuple[int, int, int]]:
    """(pid, RSS KiB, PSS KiB) of ``root`` and of every descendant, ``root`` first."""
    if os.path.exists(f"/proc/{root}/status"):
        return [(pid, _rss_kib(pid), _pss_kib(pid)) for pid in [root, *_descendants(root)]]
    try:  # no /proc (macOS): psutil if it happens to be installed
        import psutil  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise RuntimeError("measuring memory needs /proc (Linux) or psutil") from None
    top = psutil.Process(root)
    return [(p.pid, p.memory_info().rss // 1024, 0) for p in [top, *top.children(recursive=True)]]


# ---------------------------------------------------------------------- child
def executor_factory(kind: str) -> Callable[[int], Executor]:
    """Import what ``kind`` needs (outside any measurement) and return its constructor."""
    if kind == "process":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("forkserver")
        return lambda n: ProcessPoolExecutor(n, mp_context=ctx)
    if kind == "thread":
        from concurrent.futures import ThreadPoolExecutor

        return lambda n: ThreadPoolExecutor(n)
    if kind == "stdlib":
        from concurrent.futures import InterpreterPoolExecutor  # type: ignore[attr-defined,unused-ignore]

        return lambda n: InterpreterPoolExecutor(n)  # type: ignore[no-any-return,unused-ignore]
    if kind == "interpexec":
        from interpexec import InterpreterPoolExecutor as InterpexecPool

        return lambda n: InterpexecPool(n)
    raise ValueError(f"unknown executor {kind!r}")


class SkipStep(Exception):
    """A step that cannot run because an earlier one failed."""


class Child:
    """The measurements of one executor, in one fresh process: one ``step_X``
    method per step X of config.STEPS."""

    def __init__(self, kind: str, cfg: Config) -> None:
        self.kind = kind
        self.cfg = cfg
        self.make = executor_factory(kind)
        self.ex: Executor | None = None
        # Memory "before the pool existed": taken again right before the pool is
        # made (step_cold_start_s), after the steps that run fresh processes of
        # their own (their subprocess/json imports are the harness's, not the
        # pool's), as the bare floor's "before" is taken right before its
        # interpreters are made.
        self.baseline = tree_memory_kib(os.getpid())

    def executor(self) -> Executor:
        if self.ex is None:
            raise SkipStep("no executor (the cold start failed)")
        return self.ex

    def run_step(self, step: str) -> tuple[float, Record]:
        method: Callable[[], tuple[float, Record]] = getattr(self, "step_" + step)
        return method()

    def step_cold_import_s(self) -> tuple[float, Record]:
        from harness import cold

        return cold.cold_start(self.kind, self.cfg.workers, 2 * self.cfg.workers, self.cfg.cold_runs, self.cfg.timeout)

    def step_bare_mb_per_interp(self) -> tuple[float, Record]:
        from harness import cold

        return cold.bare_interpreter_mb(self.cfg.workers, self.cfg.cold_runs, self.cfg.timeout)

    def step_queued_tps(self) -> tuple[float, Record]:
        """Submit ``cfg.queued`` no-ops at once (most wait in the executor's queue),
        then wait for all: the rate, and the peak of this process's resident
        memory over the run, per task (the futures are kept, as a caller would)."""
        from concurrent.futures import wait

        ex, noop, m = self.executor(), workloads.noop, self.cfg.queued
        reset = reset_peak_rss()
        before = proc_status_kib("VmRSS")
        t0 = time.perf_counter()
        futures = [ex.submit(noop) for _ in range(m)]
        submitted = time.perf_counter()
        wait(futures)
        elapsed = time.perf_counter() - t0
        peak = proc_status_kib("VmHWM")
        failed = sum(1 for f in futures if f.exception() is not None)
        if failed:
            raise RuntimeError(f"{failed} of {m} tasks failed")
        del futures
        return m / elapsed, {
            "tasks": m,
            "seconds": round(elapsed, 3),
            "submit_seconds": round(submitted - t0, 3),
            "peak_bytes_per_task": round(max(0, peak - before) * 1024 / m, 1),
            "peak_growth_mb": round(max(0, peak - before) / 1024, 1),
            "peak_reset": reset,
        }

    def step_cold_start_s(self) -> tuple[float, Record]:
        n = self.cfg.workers
        self.baseline = tree_memory_kib(os.getpid())
        t0 = time.perf_counter()
        self.ex = ex = self.make(n)
        futures = [ex.submit(workloads.whoami) for _ in range(n)]
        seen = {f.result() for f in futures}
        elapsed = time.perf_counter() - t0
        return elapsed, {"workers_seen": len(seen)}

    def step_rss_mb_per_worker(self) -> tuple[float, Record]:
        ex, n = self.executor(), self.cfg.workers
        # Keep every worker busy for a moment so that pools which start workers on
        # demand start all N of them.
        seen: set[tuple[int, int]] = set()
        for _ in range(5):
            futures = [ex.submit(workloads.busy_whoami, 0.05) for _ in range(2 * n)]
            seen.update(f.result() for f in futures)
            if len(seen) >= n:
                break
        warm = tree_memory_kib(os.getpid())
        base_rss, base_pss = sum(m[1] for m in self.baseline), sum(m[2] for m in self.baseline)
        warm_rss, warm_pss = sum(m[1] for m in warm), sum(m[2] for m in warm)
        return (warm_rss - base_rss) / 1024 / n, {
            "workers_seen": len(seen),
            "baseline_rss_mb": round(base_rss / 1024, 1),
            "warm_rss_mb": round(warm_rss / 1024, 1),
            "main_process_growth_mb": round((warm[0][1] - self.baseline[0][1]) / 1024, 1),
            "descendants_rss_mb": [round(rss / 1024, 1) for _, rss, _ in warm[1:]],
            "pss_mb_per_worker": round((warm_pss - base_pss) / 1024 / n, 1) if base_pss else None,
        }

    def step_round_trip_us(self) -> tuple[float, Record]:
        import statistics

        ex, noop = self.executor(), workloads.noop
        for _ in range(min(100, self.cfg.rt_calls)):  # warm-up, not timed
            ex.submit(noop).result()
        times: list[float] = []
        for _ in range(self.cfg.rt_calls):
            t0 = time.perf_counter()
            ex.submit(noop).result()
            times.append(time.perf_counter() - t0)
        times.sort()
        return statistics.median(times) * 1e6, {
            "calls": len(times),
            "p10_us": round(times[len(times) // 10] * 1e6, 1),
            "p90_us": round(times[len(times) * 9 // 10] * 1e6, 1),
        }

    def step_throughput_tps(self) -> tuple[float, Record]:
        from concurrent.futures import wait

        ex, noop, m = self.executor(), workloads.noop, self.cfg.submits
        t0 = time.perf_counter()
        futures = [ex.submit(noop) for _ in range(m)]
        wait(futures)
        elapsed = time.perf_counter() - t0
        failed = [exc for f in futures if (exc := f.exception()) is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} of {m} tasks failed, the first with {failed[0]!r}") from failed[0]
        return m / elapsed, {"tasks": m, "seconds": round(elapsed, 4)}

    def step_map_ips(self) -> tuple[float, Record]:
        ex, k = self.executor(), self.cfg.map_items
        t0 = time.perf_counter()
        total = 0
        for value in ex.map(workloads.inc, range(k), chunksize=self.cfg.chunksize):
            total += value
        elapsed = time.perf_counter() - t0
        if total != k * (k - 1) // 2 + k:
            raise RuntimeError(f"map returned wrong results (sum {total})")
        return k / elapsed, {"items": k, "seconds": round(elapsed, 4)}

    def step_cpu_speedup(self) -> tuple[float, Record]:
        ex, work = self.executor(), workloads.cpu_work
        iters, tasks = self.cfg.cpu_iters, self.cfg.cpu_tasks
        # Serial and pooled runs alternate, and each side keeps its best time: a
        # (virtual) machine whose speed drifts, or a burst of other work, then
        # lowers neither figure alone.
        serials: list[float] = []
        pooled: list[float] = []
        for _ in range(self.cfg.cpu_reps):
            t0 = time.perf_counter()
            expected = [work(iters) for _ in range(tasks)]
            serials.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            futures = [ex.submit(work, iters) for _ in range(tasks)]
            got = [f.result() for f in futures]
            pooled.append(time.perf_counter() - t0)
            if got != expected:
                raise RuntimeError("CPU tasks returned wrong results")
        serial, pool = min(serials), min(pooled)
        return serial / pool, {
            "tasks": tasks,
            "reps": len(serials),
            "serial_s": round(serial, 4),
            "pool_s": round(pool, 4),
            "serial_all_s": [round(t, 4) for t in serials],
            "pool_all_s": [round(t, 4) for t in pooled],
        }

    def step_echo_ms(self) -> tuple[float, Record]:
        import statistics

        ex = self.executor()
        payload = os.urandom(self.cfg.echo_bytes)
        # Untimed first: one echo per worker, so that no executor is timed on the
        # page faults of its workers' first large allocations.
        for _ in range(self.cfg.workers):
            ex.submit(workloads.identity, payload).result()
        times: list[float] = []
        for _ in range(self.cfg.echo_reps):
            t0 = time.perf_counter()
            echoed = ex.submit(workloads.identity, payload).result()
            times.append(time.perf_counter() - t0)
            if type(echoed) is not bytes:
                raise RuntimeError(f"echo returned {type(echoed).__name__}, not bytes")
            if echoed != payload:
                raise RuntimeError("echo returned different bytes")
            del echoed
        return statistics.median(times) * 1e3, {"reps": len(times), "min_ms": round(min(times) * 1e3, 3)}

    def step_shutdown_s(self) -> tuple[float, Record]:
        ex, self.ex = self.executor(), None
        t0 = time.perf_counter()
        ex.shutdown(wait=True)
        return time.perf_counter() - t0, {}


def child_main(kind: str, cfg: Config) -> int:
    """Run every step, printing one JSON line per event on stdout.  A step that
    hangs makes faulthandler dump every thread's stack to stderr and exit."""
    import faulthandler
    import json
    import traceback

    faulthandler.enable()

    def emit(record: Record) -> None:
        sys.stdout.write(PREFIX + json.dumps(record) + "\n")
        sys.stdout.flush()

    try:
        child = Child(kind, cfg)
    except Exception as exc:
        emit({"step": "setup", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        return 1
    for step in cfg.steps:
        emit({"step": step, "event": "start"})
        faulthandler.dump_traceback_later(cfg.timeout, exit=True)
        try:
            value, extra = child.run_step(step)
        except SkipStep as exc:
            emit({"step": step, "error": f"not run: {exc}"})
        except Exception as exc:
            emit({"step": step, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        else:
            emit({"step": step, "value": value, "extra": extra})
        finally:
            faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    import json

    sys.exit(child_main(sys.argv[1], Config.from_dict(json.loads(sys.argv[2]))))
