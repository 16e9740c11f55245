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


def _prepend_path(entry: str) -> None:
    """Put ``entry`` first on sys.path and on PYTHONPATH (which child processes,
    and the worker interpreters they start, inherit)."""
    sys.path.insert(0, entry)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (entry, os.environ.get("PYTHONPATH")) if p)


def _has_bytecode(pkg: str) -> bool:
    """Whether every module of the package at ``pkg`` has an up-to-date bytecode cache."""
    import importlib.util

    for folder, dirs, files in os.walk(pkg):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                source = os.path.join(folder, name)
                try:
                    if os.stat(importlib.util.cache_from_source(source)).st_mtime < os.stat(source).st_mtime:
                        return False
                except OSError:
                    return False
    return True


def setup_interpexec() -> str | None:
    """Decide which interpexec this process, its worker interpreters and its child
    processes import; call it before importing interpexec.  Returns a note for the
    output, or None.

    Without an installed interpexec, the checkout's is used.  An installation has
    bytecode caches (pip writes them); a checkout run with PYTHONDONTWRITEBYTECODE
    set has none and writes none, so every worker interpreter would compile
    interpexec's modules from source, which inflates cold start and memory figures.
    Then a compiled copy of the package, in a temporary directory removed at exit,
    goes first on sys.path and PYTHONPATH: nothing is written into the package."""
    import importlib.util

    if "interpexec" in sys.modules:
        raise RuntimeError("setup_interpexec() must run before interpexec is imported")
    spec = importlib.util.find_spec("interpexec")
    if spec is None:  # a checkout without interpexec installed: use the checkout
        _prepend_path(os.path.dirname(HERE))
        spec = importlib.util.find_spec("interpexec")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("interpexec is neither installed nor in this checkout")
    pkg = next(iter(spec.submodule_search_locations))
    if not sys.flags.dont_write_bytecode or _has_bytecode(pkg):
        return None
    import atexit
    import compileall
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="interpexec-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    copy = os.path.join(tmp, "interpexec")
    shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if not compileall.compile_dir(copy, quiet=2):
        return f"bytecode: PYTHONDONTWRITEBYTECODE is set, {pkg} lacks caches and its copy failed to compile"
    _prepend_path(tmp)
    return (
        f"bytecode: PYTHONDONTWRITEBYTECODE is set and {pkg} lacks bytecode caches: measuring a compiled copy "
        f"in {tmp} (as an installation has them; removed at exit)"
    )


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
