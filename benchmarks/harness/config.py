"""What the comparison benchmark measures: the executors, the steps of a child,
and the sizes (Config), which cross to each child as JSON."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MIB = 1 << 20
PREFIX = "@@bench "  # marks a child's result lines on its stdout

EXECUTORS = ("process", "thread", "stdlib", "interpexec")

# The measurements of one child, in this order (see child.Child).  The first two
# run fresh processes of their own (harness.cold), before the child's pool exists.
STEPS = (
    "cold_import_s",  # a fresh process: import, pool, first results
    "bare_mb_per_interp",  # interpexec's child only: the floor of a worker's memory
    "cold_start_s",
    "rss_mb_per_worker",  # right after the pool is warm, before the heavy steps
    "round_trip_us",
    "throughput_tps",
    "map_ips",
    "cpu_speedup",
    "echo_ms",
    "shutdown_s",
)

# Steps only some executors run.
ONLY_FOR = {"bare_mb_per_interp": ("interpexec",)}

# The steps of the worker sweep behind --plot (a pool is needed for the middle two).
SWEEP_STEPS = ("cold_start_s", "throughput_tps", "cpu_speedup", "shutdown_s")
SWEEP_METRICS = ("throughput_tps", "cpu_speedup")

# --scaling: the steps run for each worker count, and for each number of queued tasks.
SCALING_STEPS = ("cold_start_s", "round_trip_us", "throughput_tps", "map_ips", "cpu_speedup", "shutdown_s")
SCALING_METRICS = ("round_trip_us", "throughput_tps", "map_ips", "cpu_speedup")
QUEUED_STEPS = ("cold_start_s", "queued_tps", "shutdown_s")


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
        cold_runs: int = 3,
        queued: int = 0,
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
        self.cold_runs = cold_runs  # fresh processes per cold start (and memory floor); median kept
        self.queued = queued  # no-op tasks submitted at once by the queued_tps step
        self.steps = tuple(STEPS if steps is None else steps)  # what the child runs, in this order

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

    def sized(self, workers: int, steps: tuple[str, ...], **changes: int) -> Config:
        """The same sizes for another worker count (2 CPU tasks per worker) and
        steps, with ``changes`` to other sizes."""
        d = self.to_dict()
        d.update(workers=workers, cpu_tasks=2 * workers, steps=list(steps))
        d.update(changes)
        return Config.from_dict(d)

    def for_kind(self, kind: str) -> Config:
        """The steps that ``kind`` runs (see ONLY_FOR)."""
        steps = [s for s in self.steps if kind in ONLY_FOR.get(s, (kind,))]
        if len(steps) == len(self.steps):
            return self
        return self.sized(self.workers, tuple(steps), cpu_tasks=self.cpu_tasks)


def free_threaded() -> bool:
    """True on a free-threaded build running without the GIL."""
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is not None and not is_gil_enabled()


def available_executors() -> tuple[list[str], dict[str, str]]:
    """The executors this Python can run, and why each of the others cannot."""
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
