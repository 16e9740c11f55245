"""Passing large buffers: copies against ``interpexec.share()``.

    python benchmarks/bench_share.py [--quick] [--reps N] [--json PATH]

  16 MiB echo       round trip of a 16 MiB ``bytes`` payload through a worker that
                    returns it: interpexec with the bytes (copied in and out);
                    interpexec with ``share(payload)`` returned as the very view it
                    was lent (no copy either way); the stdlib
                    ``concurrent.futures.InterpreterPoolExecutor`` (3.14+) with the
                    bytes.  Median of N calls (default 20; 3 with --quick), ms.
  256 MiB in place  a 256 MiB ``bytearray`` shared writable with 2 workers, each
                    inverting its half in place (1 MiB at a time); peak resident
                    memory (VmHWM, reset just before; sampled VmRSS where the reset is
                    refused) above the level before the call, relative to the
                    payload.  Target < 10%.  For context, the copying way: the two
                    halves sent as bytes and returned inverted.

``--quick`` uses a 32 MiB buffer for the second part.  JSON:
benchmarks/results/share-VERSION.json.
"""

from __future__ import annotations

import argparse
import faulthandler
import statistics
import sys
import threading
import time
from typing import Any

import _tasks
import _util

MIB = _util.MIB
PEAK_TARGET = 0.10


def echo_ms(ex: Any, arg: Any, payload: bytes, reps: int, expect_view: bool) -> dict[str, Any]:
    """Median time of ``ex.submit(identity, arg).result()``, checked against ``payload``."""
    times = []
    for i in range(reps + 1):  # the first call warms up and is not timed
        t0 = time.perf_counter()
        out = ex.submit(_tasks.identity, arg).result()
        elapsed = time.perf_counter() - t0
        if i:
            times.append(elapsed * 1e3)
        if expect_view:
            if type(out) is not memoryview or out.nbytes != len(payload) or out.obj is None:
                raise RuntimeError(f"share() echo returned {type(out).__name__}, not a view of the payload")
            if out[:64] != payload[:64] or out[-64:] != payload[-64:]:
                raise RuntimeError("share() echo returned different bytes")
            out.release()
        elif type(out) is not bytes or out != payload:
            raise RuntimeError(f"echo returned {type(out).__name__}, or different bytes")
        del out
    return {"median_ms": statistics.median(times), "min_ms": min(times), "reps": reps}


class PeakMeter:
    """Peak resident memory during a block, in MiB above the level at its start:
    VmHWM after resetting it (Linux clear_refs), or VmRSS sampled every 0.5 ms."""

    def __init__(self) -> None:
        self.method = ""
        self.start = 0.0
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMeter:
        self.start = _util.rss_mib()
        if _util.reset_peak_rss() and abs(_util.proc_status_kib("VmHWM") / 1024 - self.start) < 1.0:
            self.method = "VmHWM"
        else:
            self.method = "sampled VmRSS"
            self.peak = self.start
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.0005):
            self.peak = max(self.peak, _util.rss_mib())

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, _util.rss_mib())
        else:
            self.peak = _util.proc_status_kib("VmHWM") / 1024

    @property
    def growth(self) -> float:
        return self.peak - self.start


def in_place(ex: Any, share: Any, size: int) -> dict[str, Any]:
    """Invert a ``size``-byte bytearray in place, half per worker."""
    pattern = bytes(range(256))
    buf = bytearray(pattern) * (size // 256)  # resident now: every page written
    half = size // 2
    shared = share(buf, writable=True)
    t0 = time.perf_counter()
    with PeakMeter() as meter:
        futures = [ex.submit(_tasks.invert_range, shared, 0, half), ex.submit(_tasks.invert_range, shared, half, size)]
        done = sum(f.result() for f in futures)
    elapsed = time.perf_counter() - t0
    del futures, shared
    expected = pattern.translate(bytes(range(255, -1, -1))) * (MIB // 256)
    view = memoryview(buf)
    if done != size or any(view[lo : lo + MIB] != expected for lo in range(0, size, MIB)):
        raise RuntimeError("the buffer was not inverted in place")
    view.release()
    del buf
    return {"peak_growth_mib": meter.growth, "method": meter.method, "seconds": elapsed, "payload_mib": size / MIB}


def copying(ex: Any, size: int) -> dict[str, Any]:
    """The same work the copying way: halves sent as bytes, inverted bytes returned."""
    pattern = bytes(range(256))
    buf = bytearray(pattern) * (size // 256)
    half = size // 2
    t0 = time.perf_counter()
    with PeakMeter() as meter:
        # bytes(...) of each half is part of the copying way's cost
        futures = [ex.submit(_tasks.invert_bytes, bytes(buf[:half])), ex.submit(_tasks.invert_bytes, bytes(buf[half:]))]
        halves = [f.result() for f in futures]
        buf[:half], buf[half:] = halves
        del halves, futures
    elapsed = time.perf_counter() - t0
    del buf
    return {"peak_growth_mib": meter.growth, "method": meter.method, "seconds": elapsed, "payload_mib": size / MIB}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 echoes, a 32 MiB in-place buffer")
    parser.add_argument("--reps", type=int, help="timed echoes per variant (default 20; 3 quick)")
    parser.add_argument("--json", metavar="PATH", help="default: benchmarks/results/share-VERSION.json")
    args = parser.parse_args()
    reps = args.reps or (3 if args.quick else 20)
    if reps < 1:
        parser.error("--reps must be >= 1")
    big = (32 if args.quick else 256) * MIB

    note = _util.setup_interpexec()  # before interpexec is imported
    import interpexec

    faulthandler.enable()
    faulthandler.dump_traceback_later(900, exit=True)
    print(_util.header("interpexec share()") + (" [quick]" if args.quick else ""), flush=True)
    if note:
        print(note, flush=True)
    import os

    payload = os.urandom(16 * MIB)
    echo: dict[str, Any] = {}
    with interpexec.InterpreterPoolExecutor(2) as ex:
        ex.prestart()
        print("  16 MiB echo: interpexec ...", file=sys.stderr, flush=True)
        echo["interpexec_bytes"] = echo_ms(ex, payload, payload, reps, expect_view=False)
        echo["interpexec_share"] = echo_ms(ex, interpexec.share(payload), payload, reps, expect_view=True)
        # warm the in-place task in both workers on a small buffer first
        in_place(ex, interpexec.share, 2 * MIB)
        copying(ex, 2 * MIB)
        print(f"  {big // MIB} MiB in place ...", file=sys.stderr, flush=True)
        shared_run = in_place(ex, interpexec.share, big)
        copy_run = copying(ex, big)
    try:
        from concurrent.futures import InterpreterPoolExecutor as StdlibPool  # type: ignore[attr-defined]
    except ImportError:
        StdlibPool = None
    if StdlibPool is not None:
        print("  16 MiB echo: stdlib ...", file=sys.stderr, flush=True)
        with StdlibPool(2) as std:
            for f in [std.submit(_tasks.noop) for _ in range(4)]:
                f.result()
            echo["stdlib_bytes"] = echo_ms(std, payload, payload, reps, expect_view=False)
    faulthandler.cancel_dump_traceback_later()

    std_ms = echo.get("stdlib_bytes", {}).get("median_ms")
    rows = [["16 MiB echo", "median (ms)", "min (ms)", "vs stdlib"]]
    for key, label in (
        ("interpexec_bytes", "interpexec, bytes"),
        ("interpexec_share", "interpexec, share() -> same view back"),
        ("stdlib_bytes", "stdlib InterpreterPoolExecutor, bytes"),
    ):
        if key not in echo:
            rows.append([label, "n/a (3.14+)", "", ""])
            continue
        r = echo[key]
        rows.append(
            [
                label,
                f"{r['median_ms']:.3f}",
                f"{r['min_ms']:.3f}",
                f"{r['median_ms'] / std_ms:.3f}x" if std_ms else "n/a",
            ]
        )
    print(f"median of {reps} call(s) after one warm-up")
    print(_util.markdown(rows))
    rows = [
        [
            f"{big // MIB} MiB bytearray, 2 workers, half each",
            "peak growth (MiB)",
            "of payload",
            "time (s)",
            "target",
            "status",
        ]
    ]
    ok = shared_run["peak_growth_mib"] < PEAK_TARGET * big / MIB
    rows.append(
        [
            "share(writable=True), inverted in place",
            f"{shared_run['peak_growth_mib']:.1f}",
            f"{shared_run['peak_growth_mib'] / (big / MIB):.1%}",
            f"{shared_run['seconds']:.2f}",
            f"< {PEAK_TARGET:.0%}",
            _util.status(ok),
        ]
    )
    rows.append(
        [
            "context: halves sent as bytes, returned inverted",
            f"{copy_run['peak_growth_mib']:.1f}",
            f"{copy_run['peak_growth_mib'] / (big / MIB):.1%}",
            f"{copy_run['seconds']:.2f}",
            "",
            "",
        ]
    )
    print(f"peak resident memory above the level before the call ({shared_run['method']})")
    print(_util.markdown(rows))
    path = _util.write_json(
        "share",
        {
            "echo_bytes": 16 * MIB,
            "echo": echo,
            "in_place": shared_run,
            "copying": copy_run,
            "peak_target_fraction": PEAK_TARGET,
            "passed": ok,
        },
        args.quick,
        args.json,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
