"""The comparison benchmark: interpexec against the standard executors.

    python -m interpexec bench [--workers N] [--rounds R] [--quick] [--executors LIST]
                               [--json PATH] [--plot PATH]

(``benchmarks/bench.py`` in a checkout runs the same and writes its JSON to
``benchmarks/results/``.)
"""

# Only built-in modules are imported at the top: the benchmark's child processes run
# this module as their main module (``python -m interpexec._bench --child ...``), so
# ProcessPoolExecutor's forkserver and workers import it (as __mp_main__), and
# heavier imports here would inflate the process pool's memory figure.  Everything
# else is imported where it is used.
from __future__ import annotations

import os
import sys
import time

from interpexec import _bench_workloads as workloads

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    import subprocess
    from collections.abc import Callable
    from concurrent.futures import Executor
    from typing import Any, TextIO

    Record = dict[str, Any]

MIB = 1 << 20
PREFIX = "@@bench "  # marks the child's result lines on its stdout

EXECUTORS = ("process", "thread", "stdlib", "interpexec")

DESCRIPTION = """\
Compare interpexec.InterpreterPoolExecutor with ProcessPoolExecutor (forkserver),
ThreadPoolExecutor and, on Python 3.14+, concurrent.futures.InterpreterPoolExecutor,
all with the same number of workers.  Table on stdout, progress on stderr."""

EPILOG = """\
metrics:
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

Every (round, executor) pair runs in a fresh child process (python -m
interpexec._bench --child ...): cold start and memory start from a clean process,
and a crash or hang costs only that pair's figures, which are then reported as
errors.  Rounds interleave the executors in a rotating order; the table shows each
executor's median and interpexec's ratios to the stdlib pool and to
ProcessPoolExecutor, checked against the targets.  --plot also runs throughput and
CPU speedup with 1..N workers and draws both against the number of workers (needs
matplotlib: pip install 'interpexec[plot]').

exit status: 0 when the benchmark ran (missed targets included), 1 with --strict
if any measurement failed, or if --plot cannot work; 2 for bad arguments."""

# key -> (row label, number format); rows in this order.  Labels are completed with
# the run's sizes by _label().
METRICS: dict[str, tuple[str, str]] = {
    "cold_start_s": ("cold start, {workers} workers to first results (s)", ".3f"),
    "round_trip_us": ("round trip of one no-op submit (us)", ".0f"),
    "throughput_tps": ("{submits:,} no-op submits (tasks/s)", ",.0f"),
    "map_ips": ("map, chunksize={chunksize} (items/s)", ",.0f"),
    "cpu_speedup": ("speedup on CPU-bound pure Python (x)", ".2f"),
    "echo_ms": ("echo of {echo_mib} MiB bytes (ms)", ".2f"),
    "rss_mb_per_worker": ("resident memory per worker (MB)", ".1f"),
}

# (metric, executor compared with, or "" for the CPU target, operator, factor).
# The CPU target is factor * min(workers, cores).
TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("cold_start_s", "stdlib", "<=", 1.0),
    ("round_trip_us", "stdlib", "<=", 0.6),
    ("throughput_tps", "stdlib", ">=", 8.0),
    ("map_ips", "process", ">=", 1.5),
    ("cpu_speedup", "", ">=", 0.95),
    ("echo_ms", "stdlib", "<=", 0.5),
    ("rss_mb_per_worker", "stdlib", "<=", 1.0),
)

# The steps of the worker sweep behind --plot (a pool is needed for the middle two).
SWEEP_STEPS = ("cold_start_s", "throughput_tps", "cpu_speedup", "shutdown_s")
SWEEP_METRICS = ("throughput_tps", "cpu_speedup")


def free_threaded() -> bool:
    """True on a free-threaded build running without the GIL."""
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is not None and not is_gil_enabled()


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


class Config:
    """What every child measures; crosses to the child as JSON."""

    def __init__(
        self,
        *,
        workers: int,
        rt_calls: int,
        submits: int,
        map_items: int,
        chunksize: int,
        cpu_iters: int,
        cpu_tasks: int,
        cpu_reps: int,
        echo_bytes: int,
        echo_reps: int,
        timeout: float,
        steps: tuple[str, ...] | None = None,
    ) -> None:
        self.workers = workers
        self.rt_calls = rt_calls  # timed round trips
        self.submits = submits  # no-op submits of the throughput test
        self.map_items = map_items
        self.chunksize = chunksize
        self.cpu_iters = cpu_iters  # loop length of one CPU task
        self.cpu_tasks = cpu_tasks
        self.cpu_reps = cpu_reps  # alternating serial/pool runs; best of each kept
        self.echo_bytes = echo_bytes
        self.echo_reps = echo_reps
        self.timeout = timeout  # seconds allowed for each step of a child
        self.steps = tuple(Child.STEPS if steps is None else steps)  # what the child runs, in this order

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["steps"] = list(self.steps)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            if key == "timeout":
                kwargs[key] = float(value)
            elif key == "steps":
                kwargs[key] = tuple(str(s) for s in value)
            else:
                kwargs[key] = int(value)
        return cls(**kwargs)

    def sized(self, workers: int, steps: tuple[str, ...]) -> Config:
        """The same sizes for another worker count (2 CPU tasks per worker) and steps."""
        d = self.to_dict()
        d.update(workers=workers, cpu_tasks=2 * workers, steps=list(steps))
        return Config.from_dict(d)


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
    """The measurements of one executor, in one fresh process, in STEPS order."""

    STEPS = (
        "cold_start_s",
        "rss_mb_per_worker",  # right after the pool is warm, before the heavy steps
        "round_trip_us",
        "throughput_tps",
        "map_ips",
        "cpu_speedup",
        "echo_ms",
        "shutdown_s",
    )

    def __init__(self, kind: str, cfg: Config) -> None:
        self.cfg = cfg
        self.make = executor_factory(kind)
        self.ex: Executor | None = None
        self.baseline = tree_memory_kib(os.getpid())

    def executor(self) -> Executor:
        if self.ex is None:
            raise SkipStep("no executor (the cold start failed)")
        return self.ex

    def run_step(self, step: str) -> tuple[float, Record]:
        method: Callable[[], tuple[float, Record]] = getattr(self, "step_" + step)
        return method()

    def step_cold_start_s(self) -> tuple[float, Record]:
        n = self.cfg.workers
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


# --------------------------------------------------------------------- parent
def run_child(kind: str, cfg: Config, on_step: Callable[[str], None] | None = None) -> Record:
    """Measure ``kind`` in a fresh process; every step gets a value or an error.
    ``on_step(step)`` is called as each step finishes (for the progress bar)."""
    import json
    import subprocess
    import tempfile

    cmd = [sys.executable, "-m", "interpexec._bench", "--child", kind, "--config", json.dumps(cfg.to_dict())]
    budget = cfg.timeout * (len(cfg.steps) + 1) + 60  # backstop; each step has its own timeout
    # Files, not pipes: orphaned grandchildren (process pool workers whose parent
    # died) must not keep us waiting for end-of-file.
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out_f,
            stderr=err_f,
            start_new_session=True,  # its own process group, with its forkserver and workers
        )
        watcher = _StepWatcher(out_f.fileno(), on_step)
        try:
            killed = not _wait_exit(proc, budget, watcher.poll)
        finally:
            _kill_group_and_reap(proc)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    started: list[str] = []
    results: dict[str, Record] = {}
    for line in out.splitlines():
        if not line.startswith(PREFIX):
            continue
        rec = json.loads(line[len(PREFIX) :])
        step = rec.pop("step")
        if rec.get("event") == "start":
            started.append(step)
        else:
            results[step] = rec
    stderr_tail = "\n".join(err.rstrip().splitlines()[-40:])
    setup = results.pop("setup", None)
    for step in cfg.steps:
        if step in results:
            continue
        if setup is not None:
            results[step] = setup if step == cfg.steps[0] else {"error": "not run: the executor could not be set up"}
        elif step in started:
            if "Timeout (" in err:
                why = f"hung: no result after {cfg.timeout:g} s (thread stacks in the JSON report)"
            elif killed:
                why = f"killed after the child's budget of {budget:g} s"
            else:
                why = f"the child process died (exit code {proc.returncode})"
            results[step] = {"error": why, "stderr": stderr_tail}
        else:
            results[step] = {"error": "not run: the child process ended before this step"}
    return {"results": results, "returncode": proc.returncode, "stderr": stderr_tail if proc.returncode else ""}


class _StepWatcher:
    """Reads the child's output file while the child runs (with pread: the file
    offset is shared with the child) and reports each finished step."""

    def __init__(self, fd: int, on_step: Callable[[str], None] | None) -> None:
        self.fd = fd
        self.on_step = on_step
        self.pos = 0
        self.partial = b""

    def poll(self) -> None:
        if self.on_step is None:
            return
        import json

        while chunk := os.pread(self.fd, 1 << 16, self.pos):
            self.pos += len(chunk)
            self.partial += chunk
        *lines, self.partial = self.partial.split(b"\n")
        marker = PREFIX.encode()
        for line in lines:
            if line.startswith(marker):
                try:
                    rec = json.loads(line[len(marker) :])
                except ValueError:
                    continue
                if rec.get("event") != "start" and rec.get("step") != "setup":
                    self.on_step(str(rec.get("step")))


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float, poll: Callable[[], None] | None = None) -> bool:
    """Wait until ``proc`` exits, without reaping it when Linux allows (so its pid,
    which is also its process group id, stays ours), calling ``poll`` about four
    times a second meanwhile.  False on timeout."""
    import select
    import subprocess

    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                proc.wait(min(left, 0.25))
            except subprocess.TimeoutExpired:
                if poll is not None:
                    poll()
            else:
                return True
    poller = select.poll()  # (not select(): descriptors can be >= 1024)
    poller.register(pidfd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(max(1, int(min(left, 0.25) * 1000))):
                return True
            if poll is not None:
                poll()
    finally:
        os.close(pidfd)


def _kill_group_and_reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill whatever is left of the child's process group (leftover pool workers,
    or the child itself after a timeout), then reap the child."""
    import signal

    if proc.returncode is None:  # not reaped yet: the group id cannot have been reused
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


class Progress:
    """A text progress bar on stderr.  On a terminal it is redrawn in place as
    steps finish; otherwise one line (with the bar) is printed per finished child."""

    WIDTH = 30

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.label = ""

    def bar(self) -> str:
        filled = self.WIDTH * self.done // self.total
        return f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * self.done // self.total:3d}%"

    def advance(self, to: int, label: str | None = None) -> None:
        self.done = max(self.done, min(self.total, to))
        if label is not None:
            self.label = label
        if self.tty:
            self.stream.write(f"\r\x1b[K  {self.bar()}  {self.label}")
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line that stays (one per finished child)."""
        if self.tty:
            self.stream.write(f"\r\x1b[K  {text}\n  {self.bar()}  {self.label}")
        else:
            self.stream.write(f"  {self.bar()}  {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def calibrate_cpu(seconds: float) -> int:
    """Loop length for which workloads.cpu_work takes about ``seconds`` here."""
    n = 20_000
    while True:
        t0 = time.perf_counter()
        workloads.cpu_work(n)
        dt = time.perf_counter() - t0
        if dt >= 0.03:
            break
        n *= 2
    best = dt
    for _ in range(2):
        t0 = time.perf_counter()
        workloads.cpu_work(n)
        best = min(best, time.perf_counter() - t0)
    return max(1, round(n * seconds / best))


def available_executors() -> tuple[list[str], dict[str, str]]:
    import multiprocessing

    kinds, missing = [], {}
    for kind in EXECUTORS:
        if kind == "stdlib" and sys.version_info < (3, 14):
            missing[kind] = "needs Python 3.14+"
        elif kind == "process" and "forkserver" not in multiprocessing.get_all_start_methods():
            missing[kind] = "no forkserver start method on this platform"
        else:
            kinds.append(kind)
    return kinds, missing


def precompile_bytecode() -> tuple[bool, bool, str]:
    """With PYTHONDONTWRITEBYTECODE set, imports write no bytecode cache, so every
    worker interpreter (and every child process) would compile interpexec's modules
    from source again.  Installations normally have the caches: write them once
    here.  Returns (needed, succeeded, package directory)."""
    import interpexec

    pkg = os.path.dirname(os.path.abspath(interpexec.__file__ or ""))
    if not sys.flags.dont_write_bytecode:
        return False, True, pkg
    import compileall

    try:
        ok = bool(compileall.compile_dir(pkg, quiet=2))
    except OSError:
        ok = False
    return True, ok, pkg


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
            values = [r["results"][kind]["results"][metric].get("value") for r in rounds]
            medians[kind][metric] = _median([v for v in values if v is not None])
    for r in rounds:
        for kind in kinds:
            skipped = []
            for step in Child.STEPS:
                error = r["results"][kind]["results"][step].get("error")
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
            ratio = _ratio(value, medians.get(base, {}).get(metric))
            measured, threshold = ratio, factor
            if base in missing:
                status = "n/a"
            elif base not in medians:
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
    by_metric = {t["metric"]: t for t in targets}
    header = ["metric", *(column_name(k, no_gil) for k in EXECUTORS), "ie/stdlib", "ie/process", "target", "status"]
    rows = [header]
    for metric, (_, fmt) in METRICS.items():
        row = [_label(metric, cfg)]
        for kind in EXECUTORS:
            if kind in missing:
                row.append("n/a")
            elif kind not in medians:
                row.append("-")
            else:
                value, nerr = medians[kind][metric], errors[kind][metric]
                row.append("ERROR" if value is None else format(value, fmt) + ("*" if nerr else ""))
        mine = medians.get("interpexec", {}).get(metric)
        for base in ("stdlib", "process"):
            ratio = _ratio(mine, medians.get(base, {}).get(metric))
            row.append("n/a" if ratio is None else f"{ratio:.2f}x")
        target = by_metric.get(metric)
        row += [target["target"], target["status"]] if target else ["", ""]
        rows.append(row)
    return _markdown(rows)


def _markdown(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def line(cells: list[str]) -> str:
        padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "| " + " | ".join(padded) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(rows[0]), sep, *(line(r) for r in rows[1:])])


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
    return _markdown(rows)


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


# ------------------------------------------------------------ command line
def _positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _positive_float(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {text}")
    return value


def _executor_list(text: str) -> list[str]:
    import argparse

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in EXECUTORS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown executor {unknown[0]!r}: choose from {','.join(EXECUTORS)}")
    if not names:
        raise argparse.ArgumentTypeError(f"no executor named: choose from {','.join(EXECUTORS)}")
    return [kind for kind in EXECUTORS if kind in names]


def add_arguments(p: argparse.ArgumentParser, internal: bool = False) -> None:
    """The benchmark's options (shared by ``python -m interpexec bench``)."""
    import argparse

    p.add_argument("--workers", type=_positive_int, default=2, metavar="N", help="workers per executor (default: 2)")
    p.add_argument(
        "--rounds",
        type=_positive_int,
        metavar="R",
        help="interleaved rounds; medians are reported (default: 3, 1 quick)",
    )
    p.add_argument("--quick", action="store_true", help="smoke mode: small sizes, one round, runs in seconds")
    p.add_argument(
        "--executors",
        type=_executor_list,
        default=list(EXECUTORS),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(EXECUTORS)} (default: every one available on this Python)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the full results, every round included, as JSON")
    p.add_argument(
        "--plot",
        metavar="PATH",
        help="also measure with 1..N workers and write a PNG of throughput and CPU speedup against the "
        "number of workers (needs matplotlib: pip install 'interpexec[plot]')",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds allowed for each step of a measurement (default: 120, 20 quick)",
    )
    p.add_argument("--strict", action="store_true", help="exit with status 1 if any measurement failed")
    if internal:
        p.add_argument("--child", choices=EXECUTORS, help=argparse.SUPPRESS)
        p.add_argument("--config", help=argparse.SUPPRESS)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog=prog or "python -m interpexec._bench",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p, internal=True)
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
    args: argparse.Namespace | None = None,
    default_json_dir: str | None = None,
    prog: str | None = None,
) -> int:
    """Run the benchmark.  ``args`` is an already parsed namespace (from
    ``python -m interpexec bench``); otherwise ``argv`` is parsed.  Without
    ``--json``, the JSON goes to ``default_json_dir`` if given (benchmarks/bench.py
    passes benchmarks/results), else nowhere."""
    if args is None:
        args = build_parser(prog).parse_args(argv)
    if getattr(args, "child", None):
        import json

        return child_main(args.child, Config.from_dict(json.loads(args.config)))
    try:
        return _run(args, default_json_dir)
    except KeyboardInterrupt:  # the running child's process group was killed on the way out
        print("\ninterpexec bench: interrupted", file=sys.stderr)
        return 130


def _fail(message: str, status: int) -> int:
    print(f"interpexec bench: error: {message}", file=sys.stderr)
    return status


def _run(args: argparse.Namespace, default_json_dir: str | None) -> int:
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
            import matplotlib  # noqa: F401
        except ImportError:
            return _fail("--plot needs matplotlib, which is not installed: pip install 'interpexec[plot]'", 1)
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
    needed, compiled, pkg_dir = precompile_bytecode()
    cpu_seconds = 0.02 if quick else 0.2
    cfg = Config(
        workers=workers,
        rt_calls=200 if quick else 2000,
        submits=500 if quick else 10_000,
        map_items=4096 if quick else 200_000,
        chunksize=256,
        cpu_iters=calibrate_cpu(cpu_seconds),
        cpu_tasks=2 * workers,
        cpu_reps=1 if quick else 3,
        echo_bytes=16 * MIB,
        echo_reps=2 if quick else 10,
        timeout=args.timeout or (20.0 if quick else 120.0),
    )
    sweep_ws = list(range(1, workers)) if plot_path else []
    sweep_cfgs = {w: cfg.sized(w, SWEEP_STEPS) for w in sweep_ws}
    load_before = os.getloadavg()
    build = "free-threaded, GIL disabled" if no_gil else platform.python_implementation()
    print(
        f"interpexec benchmark: Python {version} ({build}, {sys.platform}), "
        f"{workers} workers, {cores} usable cores, {rounds_n} interleaved round(s){' [quick]' if quick else ''}"
        + (f"; plot sweep over 1..{workers} workers" if plot_path else ""),
        flush=True,
    )
    if needed:
        if compiled:
            print(
                f"bytecode: PYTHONDONTWRITEBYTECODE is set, so interpexec's modules were precompiled into "
                f"{os.path.join(pkg_dir, '__pycache__')} before measuring (as an installation has them; "
                "otherwise every worker interpreter would compile them from source)",
                flush=True,
            )
        else:
            print(
                f"bytecode: PYTHONDONTWRITEBYTECODE is set and {pkg_dir} could not be precompiled: workers compile "
                "interpexec's modules from source, which inflates cold start and memory figures",
                flush=True,
            )
    started = time.time()
    total_steps = rounds_n * len(kinds) * (len(cfg.steps) + len(sweep_ws) * len(SWEEP_STEPS))
    progress = Progress(total_steps)
    rounds: list[Record] = []
    sweep_rounds: list[Record] = []
    done_steps = 0
    try:
        for r in range(rounds_n):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for w, c in [(workers, cfg), *sweep_cfgs.items()]:
                results: Record = {}
                for kind in order:
                    where = f"round {r + 1}/{rounds_n}: {kind}, {w} worker{'s' if w > 1 else ''}"
                    base = done_steps
                    count = [0]

                    def on_step(
                        step: str, base: int = base, where: str = where, count: list[int] = count, c: Config = c
                    ) -> None:
                        count[0] += 1
                        following = c.steps[count[0]] if count[0] < len(c.steps) else "done"
                        progress.advance(base + count[0], f"{where}: {following}")

                    progress.advance(base, f"{where}: {c.steps[0]}")
                    t0 = time.perf_counter()
                    results[kind] = run_child(kind, c, on_step)
                    done_steps += len(c.steps)
                    progress.advance(done_steps)
                    nerr = sum("error" in rec for rec in results[kind]["results"].values())
                    progress.message(
                        f"{where:<42} {time.perf_counter() - t0:6.1f} s" + (f"  ({nerr} error(s))" if nerr else "")
                    )
                record = {"round": r + 1, "order": order, "workers": w, "results": results}
                (rounds if c is cfg else sweep_rounds).append(record)
    finally:
        progress.close()

    medians, notes = summarize(rounds, kinds)
    errors = {
        k: {m: sum("error" in r["results"][k]["results"][m] for r in rounds) for m in [*METRICS, "shutdown_s"]}
        for k in kinds
    }
    targets = evaluate_targets(medians, missing, workers, cores)
    sweep: dict[str, dict[str, dict[str, float | None]]] | None = None
    if plot_path:
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
        "bytecode_precompiled": compiled if needed else None,
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


if __name__ == "__main__":
    sys.exit(main())
