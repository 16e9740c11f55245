"""Load-test examples/web_service.py on loopback: interpexec versus asyncio.to_thread.

    python examples/load_test.py [--modes interpexec,thread] [--duration 10] [--connections 8]
                                 [--n 30000] [--probe-rate 20] [--rounds 1] [--client auto|wrk|python]

For each mode, the script starts the service (``web_service.py --mode MODE``) on
127.0.0.1, then for ``--duration`` seconds:

* a load generator keeps ``--connections`` keep-alive connections busy with
  ``GET /primes?n=N`` (``wrk`` when installed, e.g. ``apt-get install wrk``; else a
  small asyncio client in this script, bounded by a request count and the time);
* a prober sends ``GET /health`` ``--probe-rate`` times a second on its own
  connection and records each response time.

It prints a Markdown table: CPU-bound requests per second, their latency, and
the health endpoint's latency under that load (and idle, before the load).
Only loopback addresses are used; every loop is bounded in count and time; the
service is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import time

HOST = "127.0.0.1"
HERE = os.path.dirname(os.path.abspath(__file__))
SERVICE = os.path.join(HERE, "web_service.py")
MAX_REQUESTS = 1_000_000  # a hard cap on any request loop, whatever the duration


# ----------------------------------------------------------- a tiny HTTP client


class Connection:
    """One HTTP/1.1 keep-alive connection (enough for this service's replies)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
        self.reader, self.writer, self.port = reader, writer, port

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer, port)

    async def get(self, path: str) -> tuple[int, bytes]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n\r\n".encode())
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        match = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        body = await self.reader.readexactly(int(match.group(1))) if match else b""
        return status, body

    def close(self) -> None:
        self.writer.close()


async def probe(port: int, path: str, rate: float, duration: float) -> tuple[list[float], int]:
    """GET ``path`` ``rate`` times a second for ``duration`` s; response times (s)."""
    conn = await Connection.open(port)
    latencies: list[float] = []
    errors = 0
    interval = 1.0 / rate
    start = time.perf_counter()
    next_at = start
    try:
        for _ in range(min(MAX_REQUESTS, int(rate * duration) + 1)):
            now = time.perf_counter()
            if now - start >= duration:
                break
            if next_at > now:
                await asyncio.sleep(next_at - now)  # pacing, not synchronization
            sent = time.perf_counter()
            status, _ = await conn.get(path)
            latencies.append(time.perf_counter() - sent)
            errors += status != 200
            next_at += interval
    finally:
        conn.close()
    return latencies, errors


async def python_load(port: int, path: str, connections: int, duration: float) -> dict[str, float]:
    """Keep ``connections`` connections busy with GET ``path`` for ``duration`` s."""
    deadline = time.perf_counter() + duration
    latencies: list[float] = []
    errors = 0

    async def one() -> None:
        nonlocal errors
        conn = await Connection.open(port)
        try:
            for _ in range(MAX_REQUESTS // connections):
                if time.perf_counter() >= deadline:
                    break
                sent = time.perf_counter()
                status, _ = await conn.get(path)
                latencies.append(time.perf_counter() - sent)
                errors += status != 200
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(connections)))
    elapsed = time.perf_counter() - start
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": _pct(latencies, 50) * 1e3,
        "p99_ms": _pct(latencies, 99) * 1e3,
        "errors": errors,
    }


# ------------------------------------------------------------------------- wrk


def start_wrk(port: int, path: str, connections: int, duration: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency", f"http://{HOST}:{port}{path}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def parse_wrk(text: str) -> dict[str, float]:
    def unit_ms(value: str, unit: str) -> float:
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]

    out: dict[str, float] = {"errors": 0}
    if m := re.search(r"Requests/sec:\s*([\d.]+)", text):
        out["rps"] = float(m.group(1))
    for pct in ("50", "99"):
        if m := re.search(rf"^\s*{pct}(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\b", text, re.M):
            out[f"p{pct}_ms"] = unit_ms(m.group(1), m.group(2))
    if m := re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text):
        out["errors"] += int(m.group(1))
    if m := re.search(r"Socket errors:.*?read (\d+), write (\d+), timeout (\d+)", text):
        out["errors"] += sum(int(g) for g in m.groups())
    if "rps" not in out:
        raise RuntimeError(f"could not parse wrk's output:\n{text}")
    return out


# --------------------------------------------------------------------- service


def start_service(mode: str, port: int, workers: int | None) -> subprocess.Popen[str]:
    cmd = [sys.executable, SERVICE, "--mode", mode, "--port", str(port)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sel.select(deadline - time.monotonic()):
            line = proc.stdout.readline()
            if line.startswith("READY"):
                return proc
            if not line:
                break
    stop_service(proc)
    raise RuntimeError(f"the service ({mode}) did not start")


def stop_service(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # uvicorn shuts down gracefully
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------ main


def run_mode(mode: str, args: argparse.Namespace, port: int, use_wrk: bool) -> dict[str, float]:
    proc = start_service(mode, port, args.workers)
    path = f"/primes?n={args.n}"
    try:

        async def measure() -> dict[str, float]:
            conn = await Connection.open(port)
            status, body = await conn.get(path)
            conn.close()
            if status != 200 or f'"primes":{args.expected}'.encode() not in body.replace(b" ", b""):
                raise RuntimeError(f"wrong answer from /primes: {status} {body!r}")
            idle, _ = await probe(port, "/health", args.probe_rate, 2.0)
            if use_wrk:
                wrk = start_wrk(port, path, args.connections, args.duration)
                health, health_errors = await probe(port, "/health", args.probe_rate, args.duration - 1)
                out, _ = await asyncio.to_thread(wrk.communicate, timeout=args.duration + 60)
                load = parse_wrk(out)
            else:
                (health, health_errors), load = await asyncio.gather(
                    probe(port, "/health", args.probe_rate, args.duration - 1),
                    python_load(port, path, args.connections, args.duration),
                )
            return {
                **{f"cpu_{k}": v for k, v in load.items()},
                "health_idle_p50_ms": _pct(idle, 50) * 1e3,
                "health_p50_ms": _pct(health, 50) * 1e3,
                "health_p99_ms": _pct(health, 99) * 1e3,
                "health_max_ms": max(health) * 1e3,
                "health_errors": health_errors,
            }

        return asyncio.run(measure())
    finally:
        stop_service(proc)


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="interpexec,thread")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per mode and round")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--n", type=int, default=30_000, help="/primes?n=N")
    p.add_argument("--probe-rate", type=float, default=20.0, help="/health requests per second")
    p.add_argument("--workers", type=int, default=None, help="interpexec workers (default: one per CPU)")
    p.add_argument("--rounds", type=int, default=1, help="rounds (modes interleaved); the table shows medians")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--client", choices=("auto", "wrk", "python"), default="auto")
    args = p.parse_args(argv)
    args.duration = min(max(args.duration, 2.0), 300.0)

    sys.path.insert(0, HERE)
    from web_service import count_primes

    args.expected = count_primes(args.n)
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk") is not None)
    modes = [m for m in args.modes.split(",") if m]
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; /primes?n={args.n} under {args.connections} "
        f"connections ({'wrk' if use_wrk else 'asyncio client'}) for {args.duration:g} s; "
        f"/health probed {args.probe_rate:g}/s",
        flush=True,
    )
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            res = run_mode(mode, args, args.port, use_wrk)
            results[mode].append(res)
            print(f"  round {r + 1} {mode}: " + ", ".join(f"{k}={v:.4g}" for k, v in res.items()), flush=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(rec[key] for rec in results[mode])

    rows = [
        [
            "mode",
            "CPU req/s",
            "CPU p50 (ms)",
            "CPU p99 (ms)",
            "health idle p50 (ms)",
            "health p50 (ms)",
            "health p99 (ms)",
            "health max (ms)",
            "errors",
        ],
    ]
    for mode in modes:
        errors = sum(rec["cpu_errors"] + rec["health_errors"] for rec in results[mode])
        rows.append(
            [
                mode,
                f"{med(mode, 'cpu_rps'):.1f}",
                f"{med(mode, 'cpu_p50_ms'):.1f}",
                f"{med(mode, 'cpu_p99_ms'):.1f}",
                f"{med(mode, 'health_idle_p50_ms'):.2f}",
                f"{med(mode, 'health_p50_ms'):.2f}",
                f"{med(mode, 'health_p99_ms'):.2f}",
                f"{med(mode, 'health_max_ms'):.2f}",
                str(int(errors)),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if "interpexec" in results and "thread" in results:
        print(f"\ninterpexec / to_thread: {med('interpexec', 'cpu_rps') / med('thread', 'cpu_rps'):.2f}x CPU req/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
