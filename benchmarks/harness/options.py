"""The options of ``benchmarks/bench.py`` (and their checks)."""

from __future__ import annotations

from harness.config import EXECUTORS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


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


def _count_list(text: str) -> list[int]:
    import argparse

    try:
        values = sorted({int(v.replace("_", "")) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"needs whole numbers of at least 1: {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options."""

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
        "number of workers (needs matplotlib: pip install matplotlib)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds allowed for each step of a measurement (default: 120, 20 quick)",
    )
    p.add_argument(
        "--scaling",
        action="store_true",
        help="also measure how cost grows: 1, 2, 4, 8, 16 workers (round trip, throughput, chunked map, CPU "
        "speedup) and 1,000 to 1,000,000 queued no-op tasks (throughput, peak memory per task); --plot draws it",
    )
    p.add_argument(
        "--scaling-workers",
        type=_count_list,
        metavar="LIST",
        help="worker counts of --scaling (default: 1,2,4,8,16; 1,2,4 quick)",
    )
    p.add_argument(
        "--scaling-tasks",
        type=_count_list,
        metavar="LIST",
        help="numbers of queued tasks of --scaling (default: 1000,10000,100000,1000000; 1000,10000 quick)",
    )
    p.add_argument("--strict", action="store_true", help="exit with status 1 if any measurement failed")
