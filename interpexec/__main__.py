"""``python -m interpexec`` (also the ``interpexec`` console script)."""

from __future__ import annotations

import argparse
import os
import sys

EXECUTORS = ("process", "thread", "stdlib", "interpexec")

BENCH_DESCRIPTION = """\
A quick self-check: interpexec.InterpreterPoolExecutor beside the executors the
standard library offers on this Python (ProcessPoolExecutor with forkserver,
ThreadPoolExecutor and, on 3.14+, concurrent.futures.InterpreterPoolExecutor),
each with N workers in a fresh process, their results checked:

  cold start    construct the executor, run N no-op tasks, wait for all (s)
  round trip    median of ex.submit(noop).result() (us)
  throughput    submit 5,000 no-ops (500 quick), wait for all (tasks/s)
  CPU speedup   2N pure-Python loops: serial time / pool time (x)

Exit status: 0 if every executor ran, 1 if one failed, 2 for bad arguments.
The full benchmark (rounds, memory, targets, plots) is benchmarks/bench.py in the
source repository."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _executor_list(text: str) -> list[str]:
    names = {name.strip() for name in text.split(",")} - {""}
    if unknown := sorted(names - set(EXECUTORS)):
        raise argparse.ArgumentTypeError(f"unknown executor {unknown[0]!r}: choose from {','.join(EXECUTORS)}")
    if not names:
        raise argparse.ArgumentTypeError(f"no executor named: choose from {','.join(EXECUTORS)}")
    return [kind for kind in EXECUTORS if kind in names]


def _prog() -> str:
    """The program as it was invoked: ``python -m interpexec`` (named after the
    interpreter that runs it), else the script's name (the ``interpexec`` console
    script)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name == "interpexec.__main__":
        return f"{os.path.basename(sys.executable) or 'python'} -m interpexec"
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    return script if script not in ("", "-c") else "interpexec"


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="interpexec: CPU-bound Python in parallel on a pool of subinterpreters.",
    )
    parser.add_argument("--version", action="version", version=f"interpexec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = sub.add_parser("demo", help="time CPU-bound pure Python: serial vs ProcessPoolExecutor vs interpexec")
    demo.add_argument("--tasks", type=_positive_int, help="number of tasks (default: 4 per worker)")
    demo.add_argument("--workers", type=_positive_int, help="workers per pool (default: CPUs available)")
    demo.add_argument("--records", type=_positive_int, default=20000, help="records per task (default: 20000)")

    doctor = sub.add_parser(
        "doctor",
        help="check whether installed packages work inside a worker interpreter",
        description="For each distribution: its modules and every compiled extension it ships, probed in a fresh "
        "worker interpreter; states: works, degraded (an accelerator did not load), refuses (a module refuses "
        "subinterpreters), crash, error, not found.",
    )
    doctor.add_argument(
        "modules",
        nargs="*",
        metavar="NAME",
        help="distributions or modules to check (default: every installed distribution)",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")

    sub.add_parser("info", help="Python build, subinterpreter support, CPUs and default worker count")

    bench = sub.add_parser(
        "bench",
        help="quick self-check: interpexec beside the standard library's executors on this Python",
        description=BENCH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument(
        "--workers", type=_positive_int, default=2, metavar="N", help="workers per executor (default: 2)"
    )
    bench.add_argument(
        "--executors",
        type=_executor_list,
        default=list(EXECUTORS),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(EXECUTORS)} (default: all; those this Python lacks show n/a)",
    )
    bench.add_argument("--quick", action="store_true", help="smaller sizes: a few seconds in all")
    bench.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    return parser


def info() -> int:
    import sysconfig

    from ._executor import default_max_workers

    try:
        from . import _compat

        support = f"yes (per-interpreter GIL; main interpreter id {_compat.main_interpreter_id()})"
    except ImportError as exc:  # pragma: no cover - a non-CPython or too old build
        support = f"no ({exc})"
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    rows = [
        ("Python", sys.version.replace("\n", " ")),
        ("implementation", sys.implementation.name),
        ("build", "free-threaded" if free_threaded else "with GIL"),
        ("subinterpreters", support),
        ("CPUs", f"{cpus} ({usable} usable by this process)"),
        ("default max_workers", str(default_max_workers())),
    ]
    for key, value in rows:
        print(f"{key:<20} {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        return run_demo(args.tasks, args.workers, args.records)
    if args.command == "doctor":
        from ._doctor import run_doctor

        return run_doctor(args.modules, as_json=args.json)
    if args.command == "info":
        return info()
    if args.command == "bench":
        from ._bench import run

        return run(args.workers, args.executors, args.quick, args.json)
    raise AssertionError(args.command)  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
