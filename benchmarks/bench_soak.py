"""Soak test: a million no-op tasks and ten thousand worker recycles.

    python benchmarks/bench_soak.py [--quick] [--workers N] [--json PATH]

  no-op tasks   1,000,000 no-ops on one pool, in batches of 10,000: batches
                alternate between ``map(inc, range(...), chunksize=1)`` and
                ``submit(noop)`` + ``as_completed``
  recycles      ``max_tasks_per_child=1`` and 10,000 tasks on 2 workers: every
                task runs in a fresh interpreter (10,000 interpreters created and
                destroyed)

For each phase: resident memory (VmRSS, MiB) once the pool is warm and after the
last task, with the pool still alive (growth: target < 20 MiB), and after
shutdown.  At the end, with every pool shut down: live threads
(``threading.active_count()``, target 1: the main thread), live interpreters
(``_interpreters.list_all()``, target 1: the main interpreter) and open file
descriptors compared with the start.  ``--quick``: 20,000 tasks and 200
recycles.  JSON: benchmarks/results/soak-VERSION.json.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import sys
import threading
import time
from concurrent.futures import as_completed
from typing import Any

import _tasks as workloads
import _util

BATCH = 10_000
GROWTH_TARGET_MIB = 20.0
# The recycle phase stops early past this growth (CPython 3.13 keeps ~1.7 MiB per
# destroyed interpreter: 10,000 recycles would need ~20 GiB).
ABORT_GROWTH_MIB = 2048


def sample(label: str, samples: list[dict[str, Any]], t0: float, done: int) -> None:
    samples.append(
        {"label": label, "t_s": round(time.perf_counter() - t0, 2), "tasks": done, "rss_mib": round(_util.rss_mib(), 1)}
    )


class Progress:
    """A text bar on stderr: redrawn in place on a terminal, one line per tenth otherwise."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.t0, self.shown = label, total, time.perf_counter(), -1

    def update(self, done: int) -> None:
        width = 30
        filled = width * done // self.total
        line = (
            f"  {self.label:<10} [{'#' * filled}{'.' * (width - filled)}] {done:>9,}/{self.total:,} "
            f"{time.perf_counter() - self.t0:6.1f} s"
        )
        if sys.stderr.isatty():
            sys.stderr.write("\r" + line + ("\n" if done == self.total else ""))
        elif 10 * done // self.total > self.shown:
            self.shown = 10 * done // self.total
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def noop_phase(workers: int, total: int) -> dict[str, Any]:
    """``total`` no-op tasks on one pool, in batches."""
    samples: list[dict[str, Any]] = []
    import interpexec  # imported by main(), after _util.setup_interpexec()

    ex = interpexec.InterpreterPoolExecutor(workers)
    ex.prestart()
    # Warm-up (not counted): first imports, caches and allocator arenas.
    list(ex.map(workloads.inc, range(2 * BATCH)))
    gc.collect()
    rss_start = _util.rss_mib()
    t0 = time.perf_counter()
    sample("warm", samples, t0, 0)
    bar = Progress("no-ops", total)
    done, batch_no = 0, 0
    while done < total:
        n = min(BATCH, total - done)
        if batch_no % 2 == 0:
            got = 0
            for value in ex.map(workloads.inc, range(n), chunksize=1):
                got += value
            if got != n * (n + 1) // 2:
                raise RuntimeError(f"map returned wrong results in batch {batch_no}")
        else:
            futures = [ex.submit(workloads.noop) for _ in range(n)]
            for fut in as_completed(futures):
                if fut.result() is not None:
                    raise RuntimeError("noop returned a value")
            del futures, fut
        done += n
        batch_no += 1
        bar.update(done)
        if done % (total // 10 or 1) < BATCH:
            sample("run", samples, t0, done)
    elapsed = time.perf_counter() - t0
    gc.collect()
    rss_end = _util.rss_mib()
    stats = ex.stats()
    ex.shutdown(wait=True)
    del ex
    gc.collect()
    return {
        "tasks": done,
        "seconds": round(elapsed, 2),
        "tasks_per_s": done / elapsed,
        "rss_start_mib": rss_start,
        "rss_end_mib": rss_end,
        "growth_mib": rss_end - rss_start,
        "rss_after_shutdown_mib": _util.rss_mib(),
        "completed": stats["completed"],
        "samples": samples,
    }


def recycle_phase(workers: int, total: int) -> dict[str, Any]:
    """``total`` tasks with max_tasks_per_child=1: one fresh interpreter per task."""
    samples: list[dict[str, Any]] = []
    import interpexec

    ex = interpexec.InterpreterPoolExecutor(workers, max_tasks_per_child=1)
    warm = min(100, total // 10 or 1)
    for fut in [ex.submit(workloads.whoami) for _ in range(warm)]:
        fut.result()
    gc.collect()
    rss_start = _util.rss_mib()
    t0 = time.perf_counter()
    sample("warm", samples, t0, 0)
    bar = Progress("recycles", total)
    done = 0
    step = max(1, total // 50)
    interp_ids: set[int] = set()
    aborted = None
    while done < total:
        if _util.rss_mib() - rss_start > ABORT_GROWTH_MIB:
            aborted = f"stopped after {done:,} of {total:,} recycles: RSS grew by more than {ABORT_GROWTH_MIB:,} MiB"
            print(f"\n  {aborted}", file=sys.stderr)
            break
        n = min(step, total - done)
        futures = [ex.submit(workloads.whoami) for _ in range(n)]
        for fut in futures:
            interp_ids.add(fut.result()[1])
        del futures, fut
        done += n
        bar.update(done)
        if done % (total // 10 or 1) < step:
            sample("run", samples, t0, done)
    elapsed = time.perf_counter() - t0
    gc.collect()
    rss_end = _util.rss_mib()
    stats = ex.stats()
    restarts = sum(w["restarts"] for w in stats["workers"])
    ex.shutdown(wait=True)
    del ex
    gc.collect()
    return {
        "tasks": done,
        "seconds": round(elapsed, 2),
        "tasks_per_s": done / elapsed,
        "recycles_per_s": restarts / elapsed if elapsed else None,
        "restarts_reported_by_stats": restarts,
        "aborted": aborted,
        "rss_start_mib": rss_start,
        "rss_end_mib": rss_end,
        "growth_mib": rss_end - rss_start,
        "rss_after_shutdown_mib": _util.rss_mib(),
        "completed": stats["completed"],
        "samples": samples,
    }


def raw_interpreter_cycles(n: int) -> float:
    """Context for the recycle figure: RSS growth (MiB) of ``n`` bare
    create / exec("pass") / destroy cycles through CPython's own module, without
    interpexec (CPython 3.13 itself keeps about 1.7 MiB per destroyed interpreter)."""
    import _interpreters

    def cycle() -> None:
        interp = _interpreters.create()
        _interpreters.exec(interp, "pass")
        _interpreters.destroy(interp)

    for _ in range(5):
        cycle()
    before = _util.rss_mib()
    for _ in range(n):
        cycle()
    return _util.rss_mib() - before


def live_interpreters() -> int:
    import _interpreters  # a measurement only

    return len(_interpreters.list_all())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 tasks and 200 recycles")
    parser.add_argument("--workers", type=int, default=2, help="workers per pool (default 2)")
    parser.add_argument("--tasks", type=int, help="no-op tasks (default 1,000,000; 20,000 quick)")
    parser.add_argument("--recycles", type=int, help="tasks with max_tasks_per_child=1 (default 10,000; 200 quick)")
    parser.add_argument("--json", metavar="PATH", help="default: benchmarks/results/soak-VERSION.json")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    tasks = args.tasks or (20_000 if args.quick else 1_000_000)
    recycles = args.recycles or (200 if args.quick else 10_000)
    if tasks < 1 or recycles < 1:
        parser.error("--tasks and --recycles must be >= 1")

    faulthandler.enable()
    # A hang dumps every thread's stack (faulthandler: safe with subinterpreters)
    # and exits instead of waiting forever.
    faulthandler.dump_traceback_later(3600 if not args.quick else 300, exit=True)
    note = _util.setup_interpexec()  # before interpexec is imported
    import interpexec  # noqa: F401  (the phases use it: imported before the baseline below)

    print(_util.header("interpexec soak") + (" [quick]" if args.quick else ""), flush=True)
    if note:
        print(note, flush=True)
    gc.collect()
    start = {
        "rss_mib": _util.rss_mib(),
        "threads": threading.active_count(),
        "interpreters": live_interpreters(),
        "fds": _util.open_fds(),
    }
    noop = noop_phase(args.workers, tasks)
    fds_after_first_pool = _util.open_fds()
    recycle = recycle_phase(args.workers, recycles)
    time.sleep(0.2)  # let exiting threads finish their last bytecode
    gc.collect()
    end = {
        "rss_mib": _util.rss_mib(),
        "threads": threading.active_count(),
        "thread_names": [t.name for t in threading.enumerate()],
        "interpreters": live_interpreters(),
        "fds": _util.open_fds(),
    }
    raw_n = min(recycles, 500)
    raw_growth = raw_interpreter_cycles(raw_n)  # after the end figures: it adds to RSS
    faulthandler.cancel_dump_traceback_later()

    rows = [
        [
            "phase",
            "tasks",
            "time (s)",
            "tasks/s",
            "RSS warm (MiB)",
            "RSS end (MiB)",
            "growth (MiB)",
            "after shutdown (MiB)",
            "target",
            "status",
        ]
    ]
    phase_ok = {}
    for name, res in (
        (f"no-op tasks ({args.workers} workers)", noop),
        (f"recycles, max_tasks_per_child=1 ({args.workers} workers)", recycle),
    ):
        ok = res["growth_mib"] < GROWTH_TARGET_MIB
        phase_ok[name] = ok
        rows.append(
            [
                name,
                f"{res['tasks']:,}",
                f"{res['seconds']:.1f}",
                f"{res['tasks_per_s']:,.0f}",
                f"{res['rss_start_mib']:.1f}",
                f"{res['rss_end_mib']:.1f}",
                f"{res['growth_mib']:+.1f}",
                f"{res['rss_after_shutdown_mib']:.1f}",
                f"< {GROWTH_TARGET_MIB:g} MiB",
                _util.status(ok),
            ]
        )
    print(_util.markdown(rows))
    leak_rows = [["at the end, every pool shut down", "start", "end", "target", "status"]]
    checks = [
        ("live threads (threading.active_count())", start["threads"], end["threads"], "1", end["threads"] == 1),
        (
            "live interpreters (_interpreters.list_all())",
            start["interpreters"],
            end["interpreters"],
            "1",
            end["interpreters"] == 1,
        ),
        (
            "open file descriptors (after the first pool: %d)" % fds_after_first_pool,
            start["fds"],
            end["fds"],
            "<= after first pool",
            end["fds"] <= fds_after_first_pool,
        ),
    ]
    for label, a, b, target, ok in checks:
        leak_rows.append([label, str(a), str(b), target, _util.status(ok)])
    leak_rows.append(["resident memory (MiB)", f"{start['rss_mib']:.1f}", f"{end['rss_mib']:.1f}", "", ""])
    print(_util.markdown(leak_rows))
    print(
        f"recycles: {recycle['restarts_reported_by_stats']:,} interpreter restarts reported by stats(), "
        f"{recycle['recycles_per_s']:,.0f}/s"
    )
    print(
        f"context, CPython alone: {raw_n} bare create/exec/destroy cycles of an interpreter grew RSS by "
        f"{raw_growth:+.1f} MiB ({raw_growth * 1024 / raw_n:.0f} KiB each); interpexec's recycles: "
        f"{recycle['growth_mib'] * 1024 / recycle['tasks']:.0f} KiB each"
    )
    print(
        "note: interpexec keeps the wake-up pipes of finished pools for reuse (2 fds each), so the fd count "
        "after the first pool exceeds the start; it must not grow after that"
    )
    if recycle["aborted"]:
        print(f"recycles: {recycle['aborted']}")
    if end["threads"] != 1:
        print("threads still alive:", ", ".join(end["thread_names"]))
    path = _util.write_json(
        "soak",
        {
            "workers": args.workers,
            "noop_phase": noop,
            "recycle_phase": recycle,
            "start": start,
            "fds_after_first_pool": fds_after_first_pool,
            "end": end,
            "growth_target_mib": GROWTH_TARGET_MIB,
            "raw_cpython_cycles": {"cycles": raw_n, "growth_mib": raw_growth},
            "passed": all(phase_ok.values()) and all(c[4] for c in checks),
        },
        args.quick,
        args.json,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
