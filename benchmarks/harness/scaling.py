"""``--scaling``: how cost grows with the number of workers and with the number
of queued tasks.

* workers: a fresh child per (round, executor, worker count) measures the round
  trip, no-op submit throughput, chunked map and CPU speedup (one serial/pool
  pair of shorter CPU tasks) with 1, 2, 4, 8, 16 workers: past the core count
  the pools are over-subscribed, and nothing should collapse.
* queued tasks: a fresh child per (round, executor, M) submits M no-op tasks at
  once to a pool of the run's worker count and waits for all: the rate, and the
  peak growth of the process's resident memory per task (the futures are kept,
  as a caller keeps them).

Targets (interpexec): throughput at 16 workers >= 0.8x at 2; at most 1 KB of
peak memory per queued task at the largest M.  ``--plot`` draws the curves.
"""

from __future__ import annotations

import _util

from harness.config import QUEUED_STEPS, SCALING_METRICS, SCALING_STEPS, Config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Record = dict[str, Any]

WORKER_COUNTS = (1, 2, 4, 8, 16)
QUEUED_COUNTS = (1_000, 10_000, 100_000, 1_000_000)
QUICK_WORKER_COUNTS = (1, 2, 4)
QUICK_QUEUED_COUNTS = (1_000, 10_000)

LABELS = {
    "round_trip_us": ("round trip (us)", ".0f"),
    "throughput_tps": ("no-op submits (tasks/s)", ",.0f"),
    "map_ips": ("chunked map (items/s)", ",.0f"),
    "cpu_speedup": ("CPU speedup (x)", ".2f"),
    "queued_tps": ("queued no-ops (tasks/s)", ",.0f"),
    "peak_bytes_per_task": ("peak memory per task (bytes)", ",.0f"),
}

# (what, operator, threshold): see the module docstring.
THROUGHPUT_KEEP = 0.8
BYTES_PER_TASK = 1024


def plan(cfg: Config, worker_counts: list[int], queued_counts: list[int], cpu_iters: int) -> list[tuple[str, Config]]:
    """(label, config) of every child of one round, in order."""
    out: list[tuple[str, Config]] = []
    for w in worker_counts:
        c = cfg.sized(w, SCALING_STEPS, cpu_reps=1, cpu_iters=cpu_iters, rt_calls=min(cfg.rt_calls, 1000))
        out.append((f"{w} worker{'s' if w > 1 else ''}", c))
    for m in queued_counts:
        c = cfg.sized(cfg.workers, QUEUED_STEPS, queued=m, cpu_tasks=cfg.cpu_tasks)
        c.timeout = max(cfg.timeout, m / 2000)
        out.append((f"{m:,} queued tasks", c))
    return out


def run(
    cfg: Config,
    kinds: list[str],
    rounds_n: int,
    worker_counts: list[int],
    queued_counts: list[int],
    cpu_iters: int,
    run_one: Callable[[str, str, Config], Record],
) -> list[Record]:
    """Every child of the scaling run; ``run_one(kind, label, config)`` runs one."""
    records: list[Record] = []
    for r in range(rounds_n):
        order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
        for label, c in plan(cfg, worker_counts, queued_counts, cpu_iters):
            for kind in order:
                result = run_one(kind, f"scaling round {r + 1}/{rounds_n}: {kind}, {label}", c)
                records.append(
                    {"round": r + 1, "kind": kind, "workers": c.workers, "queued": c.queued, "results": result}
                )
    return records


def steps_per_round(cfg: Config, worker_counts: list[int], queued_counts: list[int], kinds: list[str]) -> int:
    return len(kinds) * sum(len(c.steps) for _, c in plan(cfg, worker_counts, queued_counts, 1))


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def summarize(records: list[Record], kinds: list[str]) -> tuple[Record, list[str]]:
    """{"workers": kind -> str(w) -> metric -> median, "queued": kind -> str(m) ->
    {queued_tps, peak_bytes_per_task}}, and one note per error."""
    by_workers: dict[str, dict[str, dict[str, float | None]]] = {k: {} for k in kinds}
    by_queued: dict[str, dict[str, dict[str, float | None]]] = {k: {} for k in kinds}
    notes: list[str] = []
    groups: dict[tuple[str, str, int], list[Record]] = {}
    for rec in records:
        axis = "queued" if rec["queued"] else "workers"
        groups.setdefault((rec["kind"], axis, rec["queued"] or rec["workers"]), []).append(rec)
        for step, res in rec["results"]["results"].items():
            error = res.get("error")
            if error is not None and not error.startswith("not run:"):
                what = f"{rec['queued']:,} queued tasks" if rec["queued"] else f"{rec['workers']} worker(s)"
                notes.append(f"[{rec['kind']}] scaling, {what}, round {rec['round']}, {step}: {error}")
    for (kind, axis, n), recs in sorted(groups.items()):
        results = [rec["results"]["results"] for rec in recs]
        if axis == "workers":
            by_workers[kind][str(n)] = {
                m: _median([v for res in results if (v := res.get(m, {}).get("value")) is not None])
                for m in SCALING_METRICS
            }
        else:
            queued = [res.get("queued_tps", {}) for res in results]
            by_queued[kind][str(n)] = {
                "queued_tps": _median([v for q in queued if (v := q.get("value")) is not None]),
                "peak_bytes_per_task": _median(
                    [v for q in queued if (v := q.get("extra", {}).get("peak_bytes_per_task")) is not None]
                ),
            }
    return {"workers": by_workers, "queued": by_queued}, notes


def targets(summary: Record) -> list[Record]:
    """interpexec's scaling targets: the same records as report.evaluate_targets."""
    mine_w = summary["workers"].get("interpexec", {})
    mine_q = summary["queued"].get("interpexec", {})
    out: list[Record] = []
    at2 = mine_w.get("2", {}).get("throughput_tps")  # (n/a unless both counts were run)
    at16 = mine_w.get("16", {}).get("throughput_tps")
    ratio = at16 / at2 if at2 and at16 else None
    out.append(
        {
            "metric": "no-op submit throughput, 16 workers / 2 workers",
            "target": f">= {THROUGHPUT_KEEP:g}x",
            "measured": ratio,
            "status": "n/a" if ratio is None else ("PASS" if ratio >= THROUGHPUT_KEEP else "MISS"),
        }
    )
    largest = max((int(m) for m in mine_q), default=None)
    per_task = mine_q.get(str(largest), {}).get("peak_bytes_per_task") if largest else None
    out.append(
        {
            "metric": f"peak memory per queued task at {largest or 0:,} tasks",
            "target": f"<= {BYTES_PER_TASK:,} bytes",
            "measured": per_task,
            "status": "n/a" if per_task is None else ("PASS" if per_task <= BYTES_PER_TASK else "MISS"),
        }
    )
    return out


def render(summary: Record, kinds: list[str], column: Callable[[str], str]) -> str:
    """Two tables (by workers, by queued tasks) and the targets, as text."""
    parts = []
    counts = sorted({int(w) for k in kinds for w in summary["workers"][k]})
    if counts:
        rows = [["metric", "executor", *(f"{w}w" for w in counts)]]
        for metric in SCALING_METRICS:
            label, fmt = LABELS[metric]
            for kind in kinds:
                cells = [summary["workers"][kind].get(str(w), {}).get(metric) for w in counts]
                rows.append([label, column(kind), *("-" if v is None else format(v, fmt) for v in cells)])
        parts.append("how cost grows with the number of workers (medians):\n" + _util.markdown(rows))
    queued = sorted({int(m) for k in kinds for m in summary["queued"][k]})
    if queued:
        rows = [["metric", "executor", *(f"{m:,}" for m in queued)]]
        for metric in ("queued_tps", "peak_bytes_per_task"):
            label, fmt = LABELS[metric]
            for kind in kinds:
                cells = [summary["queued"][kind].get(str(m), {}).get(metric) for m in queued]
                rows.append([label, column(kind), *("-" if v is None else format(v, fmt) for v in cells)])
        parts.append("how cost grows with the number of queued no-op tasks (medians):\n" + _util.markdown(rows))
    rows = [["scaling target (interpexec)", "measured", "target", "status"]]
    for t in targets(summary):
        v = t["measured"]
        shown = "n/a" if v is None else (f"{v:.2f}x" if "throughput" in t["metric"] else f"{v:,.0f} bytes")
        rows.append([t["metric"], shown, t["target"], t["status"]])
    parts.append(_util.markdown(rows))
    return "\n\n".join(parts)


def render_plot(path: str, summary: Record, cores: int, title: str, column: Callable[[str], str]) -> None:
    """The curves of the scaling run, as a PNG (needs matplotlib)."""
    import matplotlib  # type: ignore[import-not-found,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]

    panels = [
        ("workers", "round_trip_us", "round trip (us)", True),
        ("workers", "throughput_tps", "no-op submits (tasks/s)", True),
        ("workers", "map_ips", "chunked map (items/s)", True),
        ("workers", "cpu_speedup", "CPU speedup (x)", False),
        ("queued", "queued_tps", "queued no-ops (tasks/s)", True),
        ("queued", "peak_bytes_per_task", "peak memory per queued task (bytes)", True),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, (axis, metric, name, log) in zip(axes.flat, panels, strict=True):
        xs_all: set[int] = set()
        for kind, by_n in summary[axis].items():
            points = sorted((int(n), v[metric]) for n, v in by_n.items() if v.get(metric) is not None)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=column(kind))
                xs_all.update(p[0] for p in points)
        if metric == "cpu_speedup" and xs_all:
            ideal = sorted(xs_all)
            ax.plot(ideal, [min(w, cores) for w in ideal], linestyle="--", color="grey", label="ideal")
        if metric == "peak_bytes_per_task":
            ax.axhline(BYTES_PER_TASK, linestyle="--", color="grey", label="target: 1 KB")
        ax.set_xscale("log", base=2 if axis == "workers" else 10)
        if xs_all:
            ticks = sorted(xs_all)
            ax.set_xticks(ticks, [f"{x:,}" for x in ticks])
            ax.minorticks_off()
        if log:
            ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("workers" if axis == "workers" else "tasks queued at once")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
