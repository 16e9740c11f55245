"""``interpexec bench``: a quick self-check of interpexec beside the executors the
standard library offers on this Python, with a small table.

Each executor runs in a fresh child process (``python -c`` calling
:func:`child_main`), so that its cold start is a real one and a crash or a hang
costs only its own figures; the child prints one JSON line per figure.  Nothing is
written but the table (and ``--json``): in particular no bytecode cache, whatever
PYTHONDONTWRITEBYTECODE says (children run with ``-B``).  The full benchmark (rounds, memory, targets, plots)
is ``benchmarks/bench.py`` in the source repository.

Only built-in modules are imported at the top: worker interpreters and processes
import this module, by reference, for the tasks.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Executor

# figure -> (row label, number format); {n} is the worker count, {m} the submits.
ROWS = {
    "cold_start_s": ("cold start, {n} workers to first results (s)", ".3f"),
    "round_trip_us": ("round trip of one no-op submit (us)", ".0f"),
    "throughput_tps": ("{m:,} no-op submits (tasks/s)", ",.0f"),
    "cpu_speedup": ("speedup on CPU-bound pure Python (x)", ".2f"),
}
LEGEND = (
    "process = ProcessPoolExecutor (forkserver), thread = ThreadPoolExecutor, "
    "stdlib = concurrent.futures.InterpreterPoolExecutor, interpexec = interpexec.InterpreterPoolExecutor"
)
CHILD_TIMEOUT = 120.0  # seconds; a child still running then dumps its threads' stacks and exits
_CHILD = "import sys; from interpexec._bench import child_main; sys.exit(child_main(sys.argv[1:]))"


def noop() -> None:
    """A task that does nothing (cold start, round trip, throughput)."""


def cpu_work(n: int) -> int:
    """A pure-Python CPU-bound loop; runs under the GIL of whoever calls it."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def unavailable() -> dict[str, str]:
    """Executor -> why this Python cannot run it."""
    import multiprocessing

    missing = {}
    if "forkserver" not in multiprocessing.get_all_start_methods():
        missing["process"] = "no forkserver start method on this platform"
    if sys.version_info < (3, 14):
        missing["stdlib"] = "concurrent.futures.InterpreterPoolExecutor needs Python 3.14+"
    return missing


def _factory(kind: str) -> Callable[[int], Executor]:
    """Import what ``kind`` needs (before any timing) and return its constructor."""
    if kind == "process":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("forkserver")
        return lambda n: ProcessPoolExecutor(n, mp_context=context)
    if kind == "thread":
        from concurrent.futures import ThreadPoolExecutor

        return ThreadPoolExecutor
    if kind == "stdlib":
        from concurrent.futures import InterpreterPoolExecutor as StdlibPool  # type: ignore[attr-defined,unused-ignore]

        return StdlibPool  # type: ignore[no-any-return,unused-ignore]
    if kind == "interpexec":
        from ._executor import InterpreterPoolExecutor

        return InterpreterPoolExecutor
    raise ValueError(f"unknown executor {kind!r}")


def child_main(argv: list[str]) -> int:
    """In the child: measure one executor, print ``[figure, value]`` JSON lines.
    ``argv``: kind, workers, submits, round trips, CPU loop length."""
    import faulthandler
    import json
    import statistics
    from concurrent.futures import wait

    kind, (n, submits, trips, cpu_n) = argv[0], map(int, argv[1:])
    faulthandler.dump_traceback_later(CHILD_TIMEOUT, exit=True)
    make = _factory(kind)

    def emit(figure: str, value: float) -> None:
        print(json.dumps([figure, value]), flush=True)

    t0 = time.perf_counter()
    with make(n) as ex:
        for future in [ex.submit(noop) for _ in range(n)]:
            future.result()
        emit("cold_start_s", time.perf_counter() - t0)
        for _ in range(min(50, trips)):  # warm-up, not timed
            ex.submit(noop).result()
        times = []
        for _ in range(trips):
            t0 = time.perf_counter()
            ex.submit(noop).result()
            times.append(time.perf_counter() - t0)
        emit("round_trip_us", statistics.median(times) * 1e6)
        t0 = time.perf_counter()
        futures = [ex.submit(noop) for _ in range(submits)]
        wait(futures)
        elapsed = time.perf_counter() - t0
        for future in futures:
            future.result()  # raises the first failure
        emit("throughput_tps", submits / elapsed)
        t0 = time.perf_counter()
        expected = [cpu_work(cpu_n) for _ in range(2 * n)]
        serial = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = list(ex.map(cpu_work, [cpu_n] * (2 * n)))
        pooled = time.perf_counter() - t0
        if got != expected:
            raise RuntimeError(f"the CPU-bound tasks returned {got}, not {expected}")
        emit("cpu_speedup", serial / pooled)
    return 0


def _calibrate(seconds: float) -> int:
    """Loop length for which cpu_work takes about ``seconds`` here."""
    n = 10_000
    while True:
        t0 = time.perf_counter()
        cpu_work(n)
        elapsed = time.perf_counter() - t0
        if elapsed >= 0.02:
            return max(1, round(n * seconds / elapsed))
        n *= 2


def _measure(kind: str, args: list[str]) -> tuple[dict[str, float], str | None]:
    """Run the child for ``kind``: its figures, and what went wrong if anything."""
    import json
    import subprocess
    import tempfile

    # Files, not pipes: a process pool's orphaned workers must not keep us waiting
    # for end-of-file.
    # -B: no bytecode written, whatever PYTHONDONTWRITEBYTECODE says; -P and
    # PYTHONPATH: the child imports this very interpexec, never one that happens
    # to be in the current directory.
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        status = subprocess.call(
            [sys.executable, "-B", "-P", "-c", _CHILD, kind, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(os.environ, PYTHONPATH=path),
        )
        out.seek(0)
        err.seek(0)
        figures = {str(k): float(v) for k, v in (json.loads(line) for line in out if line.startswith("["))}
        if status == 0 and len(figures) == len(ROWS):
            return figures, None
        lines = [line.strip() for line in err if line.strip()]
    last = next((line for line in reversed(lines) if not line.startswith(("File ", "^", "~"))), "no message")
    return figures, f"exit status {status}: {last}"


def _markdown(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| "
        + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        + " |"
        for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|")
    return "\n".join(lines)


def _bytecode_note() -> str | None:
    """Why interpexec's figures may be slow here: no bytecode caches to read."""
    import importlib.util

    pkg = os.path.dirname(os.path.abspath(__file__))
    sources = [os.path.join(pkg, name) for name in os.listdir(pkg) if name.endswith(".py")]
    if all(os.path.exists(importlib.util.cache_from_source(s)) for s in sources):
        return None
    return (
        "note: some of interpexec's modules lack a bytecode cache here (and bench writes none): "
        "every worker interpreter compiles them from source, which slows interpexec's cold start"
    )


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written, checked before anything is measured."""
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else "permission denied"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return "no such directory"
    return None if os.access(folder, os.W_OK) else "permission denied"


def run(workers: int, executors: list[str], quick: bool, json_path: str | None) -> int:
    """``interpexec bench``: 0 if every executor ran and returned right results,
    1 if one failed, 2 if none of ``executors`` can run here."""
    import platform

    if json_path and (why_not := _unwritable(json_path)):
        print(f"interpexec bench: error: cannot write {json_path}: {why_not}", file=sys.stderr)
        return 2
    missing = unavailable()
    kinds = [kind for kind in executors if kind not in missing]
    if not kinds:
        why = "; ".join(f"{kind}: {missing[kind]}" for kind in executors)
        print(f"interpexec bench: error: none of these executors can run on this Python ({why})", file=sys.stderr)
        return 2
    submits, trips = (500, 200) if quick else (5000, 1000)
    cpu_n = _calibrate(0.02 if quick else 0.1)
    print(
        f"interpexec bench: Python {platform.python_version()}, {workers} workers, "
        f"{os.process_cpu_count()} usable cores{' [quick]' if quick else ''}",
        flush=True,
    )
    figures: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    for kind in kinds:
        t0 = time.perf_counter()
        try:
            figures[kind], error = _measure(kind, [str(workers), str(submits), str(trips), str(cpu_n)])
        except KeyboardInterrupt:  # the child got the same SIGINT
            print("\ninterpexec bench: interrupted", file=sys.stderr)
            return 130
        if error:
            errors[kind] = error
        print(f"  {kind:<10} {time.perf_counter() - t0:5.1f} s{'  FAILED' if error else ''}", file=sys.stderr)
    rows = [["metric", *executors]]
    for figure, (label, fmt) in ROWS.items():
        cells = [label.format(n=workers, m=submits)]
        for kind in executors:
            value = figures.get(kind, {}).get(figure)
            cells.append("n/a" if kind in missing else "ERROR" if value is None else format(value, fmt))
        rows.append(cells)
    print(_markdown(rows))
    print(f"{LEGEND}; CPU: {2 * workers} tasks of ~{0.02 if quick else 0.1:g} s, the ideal is min(workers, cores)")
    for kind in executors:
        if kind in missing or kind in errors:
            print(f"{'n/a' if kind in missing else 'FAILED'}: {kind}: {missing.get(kind) or errors[kind]}")
    if "interpexec" in kinds and (note := _bytecode_note()):
        print(note)
    if json_path:
        import json

        report = {"python": sys.version, "workers": workers, "quick": quick, "figures": figures}
        report.update(unavailable=missing, errors=errors)
        try:
            with open(json_path, "w") as f:
                json.dump(report, f, indent=2)
        except OSError as exc:
            print(f"interpexec bench: error: cannot write {json_path}: {exc.strerror}", file=sys.stderr)
            return 1
    return 1 if errors else 0
