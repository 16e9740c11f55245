"""The command line of ``benchmarks/bench.py`` and the run as a whole: rounds of
children in a rotating order, then the report."""

from __future__ import annotations

import os
import sys
import time

import _tasks as workloads

from harness import scaling
from harness.config import MIB, SWEEP_STEPS, Config, available_executors, free_threaded
from harness.options import add_arguments
from harness.report import (
    METRICS,
    _ratio,
    column_name,
    evaluate_targets,
    legend,
    render_plot,
    render_sweep_table,
    render_table,
    summarize,
    summarize_sweep,
)
from harness.runner import Progress, run_child
from harness.scaling import QUEUED_COUNTS, QUICK_QUEUED_COUNTS, QUICK_WORKER_COUNTS, WORKER_COUNTS

PROG = "benchmarks/bench.py"

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

    Record = dict[str, Any]

DESCRIPTION = """\
Compare interpexec.InterpreterPoolExecutor with ProcessPoolExecutor (forkserver),
ThreadPoolExecutor and, on Python 3.14+, concurrent.futures.InterpreterPoolExecutor,
all with the same number of workers.  Table on stdout, progress on stderr."""

EPILOG = """\
metrics:
  cold start incl. import
                a fresh process imports the executor's module, creates a pool
                and gets the results of 2N quick tasks; median of 3 processes (s)
  cold start    construct the executor, submit N quick tasks, wait for all (s)
  round trip    median of ex.submit(noop).result() over many calls (us)
  throughput    submit 10,000 no-ops, then wait for all (tasks/s)
  chunked map   ex.map(inc, range(200_000), chunksize=256) (items/s)
  CPU speedup   2N pure-Python loops of ~0.2 s each: serial time / pool time,
                best of 3 alternating runs of each
  16 MiB echo   ex.submit(identity, payload).result() (ms): median of 10, after
                one untimed echo per worker
  memory        resident memory (VmRSS) of the process and all its descendants once
                every worker has run a task, minus the same before the pool existed,
                divided by N (MB = 2**20 bytes); for ProcessPoolExecutor this
                includes the forkserver and resource tracker processes
  floor         the same for N bare subinterpreters made as interpexec makes them,
                each having run one trivial call (measured beside interpexec)

Every (round, executor) pair runs in a fresh child process (python -P -m
harness.child ...): cold start and memory start from a clean process,
and a crash or hang costs only that pair's figures, which are then reported as
errors.  Rounds interleave the executors in a rotating order; the table shows each
executor's median and interpexec's ratios to the stdlib pool and to
ProcessPoolExecutor, checked against the targets.  --scaling also measures how
cost grows with 1..16 workers and with 1,000..1,000,000 queued tasks, and --plot
draws those curves (without --scaling: throughput and CPU speedup with 1..N
workers); --plot needs matplotlib (pip install matplotlib).

exit status: 0 when the benchmark ran (missed targets included), 1 with --strict
if any measurement failed, or if --plot cannot work; 2 for bad arguments."""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog=prog or PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


def _check_output_path(path: str, what: str) -> str | None:
    """An error message if ``path`` cannot be written (checked before the run)."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{what} {path} is a directory"
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        return f"cannot create the directory of {what} {path}: {exc.strerror}"
    if not os.access(parent, os.W_OK):
        return f"cannot write {what} {path}: the directory is not writable"
    return None


def main(
    argv: list[str] | None = None,
    *,
    default_json_dir: str | None = None,
    prog: str | None = None,
    bytecode_note: str | None = None,
) -> int:
    """Run the benchmark.  Without ``--json``, the JSON goes to ``default_json_dir``
    if given (benchmarks/bench.py passes benchmarks/results), else nowhere.
    ``bytecode_note`` (from _util.setup_interpexec) is printed and recorded."""
    args = build_parser(prog).parse_args(argv)
    try:
        return _run(args, default_json_dir, bytecode_note)
    except KeyboardInterrupt:  # the running child's process group was killed on the way out
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130


def _listed(values: list[int]) -> str:
    return ",".join(f"{v:,}" for v in values)


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _run(args: argparse.Namespace, default_json_dir: str | None, bytecode_note: str | None) -> int:
    import json
    import platform

    quick: bool = args.quick
    rounds_n: int = args.rounds or (1 if quick else 3)
    workers: int = args.workers
    version = platform.python_version()
    json_path: str | None = args.json or (
        os.path.join(default_json_dir, f"bench-{version}.json") if default_json_dir else None
    )
    plot_path: str | None = args.plot
    if plot_path:
        try:
            import matplotlib  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        except ImportError:
            return _fail("--plot needs matplotlib, which is not installed: pip install matplotlib", 1)
    for path, what in ((json_path, "--json"), (plot_path, "--plot")):
        if path and (problem := _check_output_path(path, what)):
            return _fail(problem, 2)
    cores = os.process_cpu_count() or 1
    kinds, missing = available_executors()
    wanted: list[str] = args.executors
    kinds = [k for k in kinds if k in wanted]
    if not kinds:
        why = "; ".join(f"{k}: {missing[k]}" for k in wanted if k in missing)
        return _fail(f"none of the requested executors can run on this Python ({why})", 2)
    no_gil = free_threaded()
    cpu_seconds = 0.02 if quick else 0.2
    cfg = Config(
        workers=workers,
        rt_calls=200 if quick else 2000,
        submits=500 if quick else 10_000,
        map_items=4096 if quick else 200_000,
        chunksize=256,
        cpu_iters=workloads.calibrate_cpu(cpu_seconds),
        cpu_tasks=2 * workers,
        cpu_reps=1 if quick else 3,
        echo_bytes=16 * MIB,
        echo_reps=2 if quick else 10,
        timeout=args.timeout or (20.0 if quick else 120.0),
    )
    scaling_on: bool = args.scaling
    sweep_ws = list(range(1, workers)) if plot_path and not scaling_on else []
    sweep_cfgs = {w: cfg.sized(w, SWEEP_STEPS) for w in sweep_ws}
    scale_ws: list[int] = args.scaling_workers or list(QUICK_WORKER_COUNTS if quick else WORKER_COUNTS)
    scale_ms: list[int] = args.scaling_tasks or list(QUICK_QUEUED_COUNTS if quick else QUEUED_COUNTS)
    scale_cpu_iters = workloads.calibrate_cpu(cpu_seconds / 4) if scaling_on else 1
    load_before = os.getloadavg()
    build = "free-threaded, GIL disabled" if no_gil else platform.python_implementation()
    print(
        f"interpexec benchmark: Python {version} ({build}, {sys.platform}), "
        f"{workers} workers, {cores} usable cores, {rounds_n} interleaved round(s){' [quick]' if quick else ''}"
        + (f"; plot sweep over 1..{workers} workers" if sweep_ws else "")
        + (f"; scaling over {_listed(scale_ws)} workers and {_listed(scale_ms)} queued tasks" if scaling_on else ""),
        flush=True,
    )
    if bytecode_note:
        print(bytecode_note, flush=True)
    started = time.time()
    total_steps = rounds_n * (
        sum(len(cfg.for_kind(k).steps) + len(sweep_ws) * len(SWEEP_STEPS) for k in kinds)
        + (scaling.steps_per_round(cfg, scale_ws, scale_ms, kinds) if scaling_on else 0)
    )
    progress = Progress(total_steps)
    rounds: list[Record] = []
    sweep_rounds: list[Record] = []
    done = [0]

    def run_one(kind: str, where: str, c: Config) -> Record:
        """One child, with the progress bar following its steps."""
        base, count = done[0], [0]

        def on_step(step: str) -> None:
            count[0] += 1
            following = c.steps[count[0]] if count[0] < len(c.steps) else "done"
            progress.advance(base + count[0], f"{where}: {following}")

        progress.advance(base, f"{where}: {c.steps[0]}")
        t0 = time.perf_counter()
        result = run_child(kind, c, on_step)
        done[0] += len(c.steps)
        progress.advance(done[0])
        nerr = sum("error" in rec for rec in result["results"].values())
        progress.message(f"{where:<42} {time.perf_counter() - t0:6.1f} s" + (f"  ({nerr} error(s))" if nerr else ""))
        return result

    scale_records: list[Record] = []
    try:
        for r in range(rounds_n):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for w, c in [(workers, cfg), *sweep_cfgs.items()]:
                results: Record = {}
                for kind in order:
                    where = f"round {r + 1}/{rounds_n}: {kind}, {w} worker{'s' if w > 1 else ''}"
                    results[kind] = run_one(kind, where, c.for_kind(kind))
                record = {"round": r + 1, "order": order, "workers": w, "results": results}
                (rounds if c is cfg else sweep_rounds).append(record)
        if scaling_on:
            scale_records = scaling.run(cfg, kinds, rounds_n, scale_ws, scale_ms, scale_cpu_iters, run_one)
    finally:
        progress.close()

    medians, notes = summarize(rounds, kinds)
    errors = {
        k: {m: sum("error" in r["results"][k]["results"].get(m, {}) for r in rounds) for m in [*METRICS, "shutdown_s"]}
        for k in kinds
    }
    targets = evaluate_targets(medians, missing, workers, cores)
    sweep: dict[str, dict[str, dict[str, float | None]]] | None = None
    if plot_path and not scaling_on:
        sweep, sweep_notes = summarize_sweep(sweep_rounds, medians, kinds, workers)
        notes += sweep_notes
    load_after = os.getloadavg()
    print(
        f"medians of {rounds_n} round(s); round trip over {cfg.rt_calls} calls; map over {cfg.map_items:,} items; "
        f"CPU: {cfg.cpu_tasks} tasks of ~{cpu_seconds:g} s, best of {cfg.cpu_reps}; "
        f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(render_table(medians, errors, missing, targets, cfg, no_gil))
    print(legend(no_gil))
    for kind, why in missing.items():
        print(f"n/a: {kind}: {why}")
    if any(v for e in errors.values() for v in e.values()):
        print("*: some rounds failed, median of the others; ERROR: every round failed")
    seen = {
        k: [r["results"][k]["results"]["cold_start_s"].get("extra", {}).get("workers_seen", "-") for r in rounds]
        for k in kinds
    }
    print(
        f"workers that ran the {workers} cold-start tasks, per round: "
        + "; ".join(f"{k} {','.join(map(str, v))}" for k, v in seen.items())
    )
    for note in notes:
        print("note:", note.splitlines()[0])
    status = 0
    if sweep is not None and plot_path:
        print(f"\nthroughput ({cfg.submits:,} no-op submits) and CPU speedup against the number of workers:")
        print(render_sweep_table(sweep, workers, no_gil))
        title = (
            f"interpexec bench: Python {version}{' (free-threaded)' if no_gil else ''}, {cores} cores, "
            f"medians of {rounds_n} round(s)"
        )
        try:
            render_plot(plot_path, sweep, workers, cores, title, no_gil)
        except Exception as exc:
            status = _fail(f"could not write the plot {plot_path}: {type(exc).__name__}: {exc}", 1)
        else:
            print(f"plot: {plot_path}")
    scale: Record | None = None
    if scaling_on:
        summary, scale_notes = scaling.summarize(scale_records, kinds)
        scale = {"summary": summary, "targets": scaling.targets(summary), "per_child": scale_records}
        notes += scale_notes
        for note in scale_notes:
            print("note:", note.splitlines()[0])
        print("\n" + scaling.render(summary, kinds, lambda k: column_name(k, no_gil)))
        if plot_path:
            title = f"interpexec bench --scaling: Python {version}, {cores} cores, medians of {rounds_n} round(s)"
            try:
                scaling.render_plot(plot_path, summary, cores, title, lambda k: column_name(k, no_gil))
            except Exception as exc:
                status = _fail(f"could not write the plot {plot_path}: {type(exc).__name__}: {exc}", 1)
            else:
                print(f"plot: {plot_path}")
        else:
            print("plot: none (--plot PATH draws these curves; it needs matplotlib)")

    report = {
        "python": version,
        "python_build": sys.version,
        "free_threaded": no_gil,
        "platform": platform.platform(),
        "cores": cores,
        "workers": workers,
        "rounds": rounds_n,
        "quick": quick,
        "config": cfg.to_dict(),
        "executors": kinds,
        "unavailable": missing,
        "bytecode": bytecode_note,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "median": medians,
        "errors": errors,
        "ratios": {
            f"interpexec/{base}": {
                m: _ratio(medians.get("interpexec", {}).get(m), medians.get(base, {}).get(m)) for m in METRICS
            }
            for base in ("stdlib", "process")
        },
        "targets": targets,
        "notes": notes,
        "sweep": sweep,
        "per_round": rounds,
        "per_round_sweep": sweep_rounds,
        "scaling": scale,
    }
    if json_path:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
            with open(json_path, "w") as f:
                json.dump(report, f, indent=2)
                f.write("\n")
        except OSError as exc:
            status = _fail(f"could not write {json_path}: {exc}", 1)
        else:
            print(f"results: {json_path}")
    else:
        print("results: not saved (--json PATH writes every round's figures)")
    failed = any(v for e in errors.values() for v in e.values())
    return 1 if args.strict and failed else status
