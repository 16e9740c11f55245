"""Helpers shared by the benchmark scripts in this directory (not by interpexec)."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
MIB = 1 << 20


def proc_status_kib(field: str = "VmRSS") -> int:
    """A ``/proc/self/status`` figure in KiB (VmRSS, VmHWM, ...)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_mib() -> float:
    return proc_status_kib("VmRSS") / 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current VmRSS (Linux: write 5 to clear_refs); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def median(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    """95th percentile, nearest-rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def markdown(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(cells: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
            + " |"
        )

    sep = "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(rows[0]), sep, *(line(r) for r in rows[1:])])


def header(title: str) -> str:
    load = os.getloadavg()[0]
    cores = os.process_cpu_count() or 1
    return f"{title}: Python {platform.python_version()}, {cores} usable cores, load average {load:.2f}"


def write_json(name: str, report: dict[str, Any], quick: bool, path: str | None = None) -> str:
    """Write ``report`` (plus the environment) to benchmarks/results/NAME-VERSION[-quick].json."""
    version = platform.python_version()
    if path is None:
        path = os.path.join(RESULTS, f"{name}-{version}{'-quick' if quick else ''}.json")
    full = {
        "python": version,
        "python_build": sys.version,
        "platform": platform.platform(),
        "cores": os.process_cpu_count(),
        "quick": quick,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loadavg_after": os.getloadavg(),
        **report,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(full, f, indent=2)
        f.write("\n")
    return path


def status(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def precompile_interpexec() -> str | None:
    """As ``python -m interpexec bench`` does: with PYTHONDONTWRITEBYTECODE set,
    write interpexec's bytecode caches once, so that worker interpreters do not
    compile its modules from source.  Returns a note for the output, or None."""
    if not sys.flags.dont_write_bytecode:
        return None
    import compileall

    import interpexec

    pkg = os.path.dirname(os.path.abspath(interpexec.__file__ or ""))
    ok = compileall.compile_dir(pkg, quiet=2)
    if ok:
        return f"bytecode: PYTHONDONTWRITEBYTECODE is set; precompiled interpexec into {pkg}/__pycache__ first"
    return f"bytecode: PYTHONDONTWRITEBYTECODE is set and {pkg} could not be precompiled"
