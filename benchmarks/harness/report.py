"""From the children's records to the output: medians over the rounds, the
targets, the tables and the plot."""

from __future__ import annotations

import _util

from harness.config import EXECUTORS, MIB, STEPS, SWEEP_METRICS, SWEEP_STEPS, Config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    Record = dict[str, Any]

# key -> (row label, number format); rows in this order.  Labels are completed with
# the run's sizes by _label().
METRICS: dict[str, tuple[str, str]] = {
    "cold_import_s": ("cold start incl. import, fresh process, {workers} workers (s)", ".3f"),
    "cold_start_s": ("cold start, {workers} workers to first results (s)", ".3f"),
    "round_trip_us": ("round trip of one no-op submit (us)", ".0f"),
    "throughput_tps": ("{submits:,} no-op submits (tasks/s)", ",.0f"),
    "map_ips": ("map, chunksize={chunksize} (items/s)", ",.0f"),
    "cpu_speedup": ("speedup on CPU-bound pure Python (x)", ".2f"),
    "echo_ms": ("echo of {echo_mib} MiB bytes (ms)", ".2f"),
    "rss_mb_per_worker": ("resident memory per worker (MB)", ".1f"),
    "bare_mb_per_interp": ("floor: bare subinterpreter on a thread + one call (MB)", ".1f"),
}

# (metric, executor compared with, or "" for the CPU target, or "bare" for the
# floor measured beside interpexec, operator, factor).  The CPU target is
# factor * min(workers, cores).  A metric may have several targets.
TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("cold_import_s", "stdlib", "<=", 0.7),
    ("cold_start_s", "stdlib", "<=", 1.0),
    ("round_trip_us", "stdlib", "<=", 0.6),
    ("throughput_tps", "thread", ">=", 1.0),
    ("map_ips", "process", ">=", 1.5),
    ("cpu_speedup", "", ">=", 0.95),
    ("echo_ms", "stdlib", "<=", 0.5),
    ("rss_mb_per_worker", "stdlib", "<=", 0.8),
    ("rss_mb_per_worker", "bare", "<=", 1.2),
)


def column_name(kind: str, no_gil: bool) -> str:
    return "thread (free-threaded)" if kind == "thread" and no_gil else kind


def legend(no_gil: bool) -> str:
    thread = (
        "thread (free-threaded) = ThreadPoolExecutor on this free-threaded build (GIL disabled)"
        if no_gil
        else "thread = ThreadPoolExecutor"
    )
    return (
        f"process = ProcessPoolExecutor (forkserver), {thread}, "
        "stdlib = concurrent.futures.InterpreterPoolExecutor, interpexec = interpexec.InterpreterPoolExecutor; "
        "ie/X = interpexec's figure / X's"
    )


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def summarize(rounds: list[Record], kinds: list[str]) -> tuple[dict[str, dict[str, float | None]], list[str]]:
    """Per-executor medians over the rounds, and one note per error."""
    medians: dict[str, dict[str, float | None]] = {}
    notes: list[str] = []
    for kind in kinds:
        medians[kind] = {}
        for metric in [*METRICS, "shutdown_s"]:
            values = [r["results"][kind]["results"].get(metric, {}).get("value") for r in rounds]
            medians[kind][metric] = _median([v for v in values if v is not None])
    for r in rounds:
        for kind in kinds:
            skipped = []
            for step in STEPS:
                error = r["results"][kind]["results"].get(step, {}).get("error")
                if error is None:
                    continue
                if error.startswith("not run:"):
                    skipped.append(step)
                else:
                    notes.append(f"[{kind}] round {r['round']}, {step}: {error}")
            if skipped:
                notes.append(f"[{kind}] round {r['round']}: not run after that: {', '.join(skipped)}")
    for r in rounds:
        for kind in kinds:
            seen = r["results"][kind]["results"]["rss_mb_per_worker"].get("extra", {}).get("workers_seen")
            if seen is not None and seen < r["workers"]:
                notes.append(f"[{kind}] round {r['round']}: only {seen} of {r['workers']} workers ever ran a task")
    return medians, notes


def summarize_sweep(
    sweep_rounds: list[Record], medians: dict[str, dict[str, float | None]], kinds: list[str], workers: int
) -> tuple[dict[str, dict[str, dict[str, float | None]]], list[str]]:
    """kind -> str(worker count) -> metric -> median, for 1..workers workers (the
    full run supplies ``workers`` itself), and one note per error."""
    sweep: dict[str, dict[str, dict[str, float | None]]] = {kind: {} for kind in kinds}
    notes: list[str] = []
    for w in range(1, workers):
        of_w = [r for r in sweep_rounds if r["workers"] == w]
        for kind in kinds:
            sweep[kind][str(w)] = {
                m: _median([v for r in of_w if (v := r["results"][kind]["results"][m].get("value")) is not None])
                for m in SWEEP_METRICS
            }
            for r in of_w:
                for step in SWEEP_STEPS:
                    error = r["results"][kind]["results"][step].get("error")
                    if error is not None and not error.startswith("not run:"):
                        notes.append(f"[{kind}] sweep, {w} worker(s), round {r['round']}, {step}: {error}")
    for kind in kinds:
        sweep[kind][str(workers)] = {m: medians[kind][m] for m in SWEEP_METRICS}
    return sweep, notes


def evaluate_targets(
    medians: dict[str, dict[str, float | None]], missing: dict[str, str], workers: int, cores: int
) -> list[Record]:
    mine = medians.get("interpexec", {})
    out: list[Record] = []
    for metric, base, op, factor in TARGETS:
        value = mine.get(metric)
        rec: Record = {"metric": metric, "versus": base or None, "op": op, "factor": factor, "value": value}
        if base:
            text = f"{op} {base}" if factor == 1.0 else f"{op} {factor:g}x {base}"
            versus = mine.get("bare_mb_per_interp") if base == "bare" else medians.get(base, {}).get(metric)
            ratio = _ratio(value, versus)
            measured, threshold = ratio, factor
            if base in missing:
                status = "n/a"
            elif base not in medians and base != "bare":
                status = "n/a"
            elif value is None:
                status = "ERROR"
            elif ratio is None:
                status = "n/a"  # the baseline failed
            else:
                status = "PASS" if _holds(ratio, op, factor) else "MISS"
        else:
            threshold = factor * min(workers, cores)
            text = f"{op} {threshold:.2f} ({factor:g}x{min(workers, cores)})"
            measured = value
            status = "ERROR" if value is None else ("PASS" if _holds(value, op, threshold) else "MISS")
        if "interpexec" not in medians:
            status = "n/a"
        rec.update({"target": text, "measured": measured, "threshold": threshold, "status": status})
        out.append(rec)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _holds(x: float, op: str, threshold: float) -> bool:
    return x >= threshold if op == ">=" else x <= threshold


def _label(metric: str, cfg: Config) -> str:
    return METRICS[metric][0].format(
        workers=cfg.workers, submits=cfg.submits, chunksize=cfg.chunksize, echo_mib=f"{cfg.echo_bytes / MIB:g}"
    )


def render_table(
    medians: dict[str, dict[str, float | None]],
    errors: dict[str, dict[str, int]],
    missing: dict[str, str],
    targets: list[Record],
    cfg: Config,
    no_gil: bool = False,
) -> str:
    by_metric: dict[str, list[Record]] = {}
    for t in targets:
        by_metric.setdefault(t["metric"], []).append(t)
    header = ["metric", *(column_name(k, no_gil) for k in EXECUTORS), "ie/stdlib", "ie/process", "target", "status"]
    rows = [header]
    for metric, (_, fmt) in METRICS.items():
        row = [_label(metric, cfg)]
        for kind in EXECUTORS:
            if kind in missing:
                row.append("n/a")
            elif kind not in medians or (metric == "bare_mb_per_interp" and kind != "interpexec"):
                row.append("-")
            else:
                value, nerr = medians[kind][metric], errors[kind].get(metric, 0)
                row.append("ERROR" if value is None else format(value, fmt) + ("*" if nerr else ""))
        mine = medians.get("interpexec", {}).get(metric)
        for base in ("stdlib", "process"):
            ratio = _ratio(mine, medians.get(base, {}).get(metric))
            row.append("n/a" if ratio is None else f"{ratio:.2f}x")
        mine_targets = by_metric.get(metric, [])
        row += ["; ".join(t["target"] for t in mine_targets), "/".join(t["status"] for t in mine_targets)]
        rows.append(row)
    return _util.markdown(rows)


def render_sweep_table(sweep: dict[str, dict[str, dict[str, float | None]]], workers: int, no_gil: bool) -> str:
    kinds = list(sweep)
    rows = [["workers", *(f"{column_name(k, no_gil)} tasks/s" for k in kinds), *(f"{k} speedup" for k in kinds)]]
    for w in range(1, workers + 1):
        row = [str(w)]
        for metric, fmt in (("throughput_tps", ",.0f"), ("cpu_speedup", ".2f")):
            for kind in kinds:
                value = sweep[kind][str(w)][metric]
                row.append("ERROR" if value is None else format(value, fmt))
        rows.append(row)
    return _util.markdown(rows)


def render_plot(
    path: str,
    sweep: dict[str, dict[str, dict[str, float | None]]],
    workers: int,
    cores: int,
    title: str,
    no_gil: bool,
) -> None:
    """Throughput and CPU speedup against the number of workers, as a PNG."""
    import matplotlib  # type: ignore[import-not-found,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]

    ws = list(range(1, workers + 1))
    fig, (ax_tp, ax_cpu) = plt.subplots(1, 2, figsize=(12, 4.8))
    for kind, by_w in sweep.items():
        label = column_name(kind, no_gil)
        for ax, metric in ((ax_tp, "throughput_tps"), (ax_cpu, "cpu_speedup")):
            points = [(w, by_w[str(w)][metric]) for w in ws]
            xs = [w for w, v in points if v is not None]
            ys = [v for _, v in points if v is not None]
            if xs:
                ax.plot(xs, ys, marker="o", label=label)
    ax_cpu.plot(ws, [min(w, cores) for w in ws], linestyle="--", color="grey", label="ideal: min(workers, cores)")
    ax_tp.set_yscale("log")
    ax_tp.set_title("no-op submit throughput")
    ax_tp.set_ylabel("tasks/s (log scale)")
    ax_cpu.set_title("CPU-bound pure Python")
    ax_cpu.set_ylabel("speedup over serial (x)")
    ax_cpu.set_ylim(bottom=0)
    for ax in (ax_tp, ax_cpu):
        ax.set_xlabel("workers")
        ax.set_xticks(ws)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
