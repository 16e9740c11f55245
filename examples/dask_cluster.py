"""CPU-bound pure-Python Dask tasks in subinterpreters, on one machine or many.

On one machine (this script starts a LocalCluster of 2 worker processes)::

    python examples/dask_cluster.py

On several machines: install interpexec and distributed (same versions) on every
machine, start a scheduler on one and a worker on each, with interpexec's
preload, then point this script at the scheduler::

    dask scheduler                                                 # machine A
    dask worker tcp://machine-a:8786 --preload interpexec.dask     # every machine
    python examples/dask_cluster.py tcp://machine-a:8786

The code that builds and computes the graph (``run`` below) is the same in both
cases.  ``--named`` installs the pool as the named executor "interpreters" instead
of the default one: only the tasks built under
``dask.annotate(executor="interpreters")`` run in subinterpreters, the others stay
on the workers' thread pools (on a command-line cluster, start the workers with
``DASK_INTERPEXEC__EXECUTOR=interpreters`` for the same effect).

Each task reports the interpreter it ran in: 0 is a worker's main interpreter,
anything else one of its subinterpreters.
"""

from __future__ import annotations

import argparse
import time

import dask
from distributed import Client, LocalCluster

from interpexec.dask import EXECUTOR_NAME, InterpreterWorkerPlugin


def count_primes(lo: int, hi: int) -> tuple[int, int]:
    """Pure-Python CPU work: (primes in [lo, hi), the interpreter that counted)."""
    import _interpreters

    count = sum(1 for k in range(max(lo, 2), hi) if all(k % d for d in range(2, int(k**0.5) + 1)))
    return count, _interpreters.get_current()[0]


def total(parts: list[tuple[int, int]]) -> int:
    return sum(count for count, _ in parts)


def run(client: Client, named: bool) -> None:
    """Build a graph of 32 CPU-bound tasks and compute it on ``client``'s cluster."""
    step = 20_000
    annotate = dask.annotate(executor=EXECUTOR_NAME) if named else dask.annotate()
    with annotate:
        parts = [dask.delayed(count_primes)(lo, lo + step) for lo in range(0, 32 * step, step)]
    start = time.perf_counter()
    (computed_parts,) = dask.compute(parts)
    primes = total(computed_parts)  # a small final step, here on the client
    elapsed = time.perf_counter() - start
    interpreters = sorted({interp for _, interp in computed_parts})
    print(f"{primes} primes below {32 * step:,} in {elapsed:.2f} s; tasks ran in interpreters {interpreters}")


def ensure_plugin(client: Client, named: bool) -> None:
    """Install the plugin unless the workers were started with ``--preload interpexec.dask``."""
    name = EXECUTOR_NAME if named else "default"

    def installed(dask_worker, name=name):
        return type(dask_worker.executors.get(name)).__name__ == "InterpreterTaskExecutor"

    if not all(client.run(installed).values()):
        client.register_plugin(InterpreterWorkerPlugin(executor=name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scheduler", nargs="?", help="address of a running scheduler (default: a LocalCluster)")
    parser.add_argument("--named", action="store_true", help=f"install as the named executor {EXECUTOR_NAME!r}")
    args = parser.parse_args()

    if args.scheduler is None:
        # Dask's profiler cannot sample subinterpreter threads; the plugin pauses it,
        # turning it off here saves its overhead (the config reaches the workers).
        dask.config.set({"distributed.worker.profile.enabled": False})
        cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0")
        client = Client(cluster)
    else:
        cluster = None
        client = Client(args.scheduler)
    try:
        ensure_plugin(client, args.named)
        print(f"cluster: {client}")
        run(client, args.named)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
