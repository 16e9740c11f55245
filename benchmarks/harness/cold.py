"""Measurements that need a process of their own, run by a child (harness.child)
as grandchildren with the child's environment (so the same interpexec, and
benchmarks/ on the path):

* cold start including import: a fresh process imports the executor's module,
  creates a pool and gets the first results of a few small tasks, the way a user
  meets it; the clock starts before the import.
* the floor of a worker's memory: a fresh process that has imported what the
  pool child had imported at its baseline (interpexec) starts N threads, each
  of which creates a bare interpreter with the very call interpexec uses
  (``interpexec._compat.create_interpreter``) and runs one trivial call in it,
  and reports the growth of its resident memory divided by N while they are
  alive: the same arithmetic as the pools' "memory per worker".  Every worker
  of every interpreter pool is an interpreter on an OS thread of its own (the
  only way it runs in parallel), so the floor has the thread too: its stack
  and the C allocator's arena for that thread (about 0.2 MB here).  The same
  measure with the interpreters made in the main thread (no thread, no
  parallelism) is kept in the record as ``main_thread_mb``.

Like child.py, this module imports only built-in modules at the top.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: What each executor's cold start imports, and how it makes a pool of ``n``.
IMPORTS = {
    "process": (
        "import multiprocessing\nfrom concurrent.futures import ProcessPoolExecutor\n"
        "ctx = multiprocessing.get_context('forkserver')",
        "ProcessPoolExecutor(n, mp_context=ctx)",
    ),
    "thread": ("from concurrent.futures import ThreadPoolExecutor", "ThreadPoolExecutor(n)"),
    "stdlib": ("from concurrent.futures import InterpreterPoolExecutor", "InterpreterPoolExecutor(n)"),
    "interpexec": ("from interpexec import InterpreterPoolExecutor", "InterpreterPoolExecutor(n)"),
}

# The clock starts before the executor's import (``time`` is built in and already
# loaded at start-up); _tasks imports only built-in modules, and is imported
# first so that no executor is charged for it.  The results print after the
# clock stops, and shutdown is not timed.
COLD_SOURCE = """\
import time
import _tasks
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
n = {workers}
ex = {make}
futures = [ex.submit(_tasks.whoami) for _ in range({tasks})]
seen = [f.result() for f in futures]
t2 = time.perf_counter()
import json
print("{prefix}" + json.dumps({{"total": t2 - t0, "import": t1 - t0, "workers_seen": len(set(seen))}}))
ex.shutdown()
"""

#: What both floors' fresh processes start with (no braces: the sources go through str.format).
_BARE_HEAD = """\
import json
import interpexec._compat as compat

def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")
"""

BARE_SOURCE = (
    _BARE_HEAD
    + """\
import threading

ready = threading.Semaphore(0)
done = threading.Event()
failures = []

def worker():
    try:
        interp = compat.create_interpreter()
    except BaseException as exc:
        failures.append(repr(exc))
        ready.release()
        return
    try:
        failure = compat.run_string(interp, "pass")
        if failure is not None:
            failures.append(failure.message)
        ready.release()
        done.wait()
    finally:
        compat.destroy_interpreter(interp)

before = rss_kib()
threads = [threading.Thread(target=worker) for _ in range({count})]
for t in threads:
    t.start()
for t in threads:
    ready.acquire()
after = rss_kib()
done.set()
for t in threads:
    t.join()
if failures:
    raise RuntimeError(failures[0])
print("{prefix}" + json.dumps({{"kib_per_interp": (after - before) / {count}}}))
"""
)

BARE_MAIN_THREAD_SOURCE = (
    _BARE_HEAD
    + """\
ids = []
before = rss_kib()
for _ in range({count}):
    ids.append(compat.create_interpreter())
    failure = compat.run_string(ids[-1], "pass")
    if failure is not None:
        raise RuntimeError(failure.message)
after = rss_kib()
for i in ids:
    compat.destroy_interpreter(i)
print("{prefix}" + json.dumps({{"kib_per_interp": (after - before) / {count}}}))
"""
)

MARK = "@@cold "


def _run(source: str, timeout: float) -> dict[str, Any]:
    """Run ``source`` in a fresh ``python -P`` with this process's environment;
    return the JSON it printed after MARK."""
    import json
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-P", "-c", source],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            result: dict[str, Any] = json.loads(line[len(MARK) :])
            return result
    tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
    raise RuntimeError(f"the fresh process exited with status {proc.returncode} and no result: {tail}")


def cold_start(kind: str, workers: int, tasks: int, runs: int, timeout: float) -> tuple[float, dict[str, Any]]:
    """Median over ``runs`` fresh processes of import + pool + first results (s)."""
    import statistics

    imports, make = IMPORTS[kind]
    source = COLD_SOURCE.format(imports=imports, make=make, workers=workers, tasks=tasks, prefix=MARK)
    records = [_run(source, timeout) for _ in range(runs)]
    totals = [r["total"] for r in records]
    return statistics.median(totals), {
        "runs": runs,
        "tasks": tasks,
        "import_s": round(statistics.median(r["import"] for r in records), 4),
        "pool_to_results_s": round(statistics.median(r["total"] - r["import"] for r in records), 4),
        "all_s": [round(t, 4) for t in totals],
        "workers_seen": min(r["workers_seen"] for r in records),
    }


def bare_interpreter_mb(count: int, runs: int, timeout: float) -> tuple[float, dict[str, Any]]:
    """Median over ``runs`` fresh processes of the resident memory that ``count``
    bare interpreters, each on a thread of its own and having run one trivial
    call, add, per interpreter (MB = 2**20 bytes); the record has the same
    without the threads (``main_thread_mb``)."""
    import statistics

    source = BARE_SOURCE.format(count=count, prefix=MARK)
    values = [_run(source, timeout)["kib_per_interp"] / 1024 for _ in range(runs)]
    main_source = BARE_MAIN_THREAD_SOURCE.format(count=count, prefix=MARK)
    main_values = [_run(main_source, timeout)["kib_per_interp"] / 1024 for _ in range(runs)]
    return statistics.median(values), {
        "interpreters": count,
        "runs": runs,
        "all_mb": [round(v, 2) for v in values],
        "main_thread_mb": round(statistics.median(main_values), 2),
    }
