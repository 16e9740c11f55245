"""``python -m interpexec`` (also the ``interpexec`` console script)."""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m interpexec",
        description="interpexec: CPU-bound Python in parallel on a pool of subinterpreters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    from . import _bench  # imports only built-in modules at the top

    _positive = _bench._positive_int

    demo = sub.add_parser("demo", help="time CPU-bound pure Python: serial vs ProcessPoolExecutor vs interpexec")
    demo.add_argument("--tasks", type=_positive, help="number of tasks (default: 4 per worker)")
    demo.add_argument("--workers", type=_positive, help="workers per pool (default: CPUs available)")
    demo.add_argument("--records", type=_positive, default=20000, help="records per task (default: 20000)")

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
        help="benchmark interpexec against ProcessPoolExecutor, ThreadPoolExecutor and the stdlib interpreter pool",
        description=_bench.DESCRIPTION,
        epilog=_bench.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _bench.add_arguments(bench)
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
        from . import _bench

        return _bench.main(args=args)
    raise AssertionError(args.command)  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
