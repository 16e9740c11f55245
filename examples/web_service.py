"""A small async web service that offloads a CPU-bound endpoint to interpexec.

    pip install starlette uvicorn
    python examples/web_service.py [--mode interpexec|thread|inline] [--port 8000] [--workers N]

Endpoints (loopback only, 127.0.0.1):

  GET /primes?n=30000   count the primes below n in pure Python (CPU-bound)
  GET /health           answers "ok" at once

``--mode`` picks how /primes runs:

  interpexec   ``await interpexec.aio.run_sync(count_primes, n)``: in a warm pool of
               subinterpreters, each with its own GIL; the event loop stays free
  thread       ``await asyncio.to_thread(count_primes, n)``: in a thread of the
               same interpreter, so every request competes for one GIL, with
               the event loop too
  inline       ``count_primes(n)`` on the event loop itself (what not to do)

``examples/load_test.py`` drives it with ``wrk`` and records the figures of
docs/async.md.  The web framework is imported only inside ``create_app()``: the
pool's workers import this file to find ``count_primes`` and need nothing else.
"""

from __future__ import annotations

import argparse
import math
import sys


def count_primes(n: int) -> int:
    """Primes below ``n`` by trial division: pure-Python CPU work."""
    count = 0
    for k in range(2, n):
        for d in range(2, math.isqrt(k) + 1):
            if k % d == 0:
                break
        else:
            count += 1
    return count


def create_app(mode: str = "interpexec", workers: int | None = None):  # type: ignore[no-untyped-def]
    import asyncio
    import contextlib

    import anyio.to_thread
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    from interpexec import InterpreterPoolExecutor, aio

    executor: InterpreterPoolExecutor | None = None

    @contextlib.asynccontextmanager
    async def lifespan(app):  # type: ignore[no-untyped-def]
        nonlocal executor
        if mode == "interpexec":
            if workers is None:
                # The per-process default pool (one worker per CPU), built and
                # warmed in a worker thread, not on the event loop.
                executor = await aio.current_default_executor()
            else:

                def make() -> InterpreterPoolExecutor:
                    pool = InterpreterPoolExecutor(workers)
                    pool.prestart()
                    return pool

                executor = await anyio.to_thread.run_sync(make)
        print(f"READY {mode}", flush=True)  # examples/load_test.py waits for this line
        yield
        if executor is not None:
            await anyio.to_thread.run_sync(executor.shutdown)

    async def primes(request):  # type: ignore[no-untyped-def]
        n = min(int(request.query_params.get("n", "30000")), 5_000_000)
        if mode == "interpexec":
            count = await aio.run_sync(count_primes, n, executor=executor)
        elif mode == "thread":
            count = await asyncio.to_thread(count_primes, n)
        else:
            count = count_primes(n)
        return JSONResponse({"n": n, "primes": count})

    async def health(request):  # type: ignore[no-untyped-def]
        return PlainTextResponse("ok")

    return Starlette(
        routes=[Route("/primes", primes), Route("/health", health)],
        lifespan=lifespan,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("interpexec", "thread", "inline"), default="interpexec")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=None, help="interpexec workers (default: one per CPU)")
    args = p.parse_args(argv)

    import socket

    import uvicorn

    # Listen before the app starts: a client that saw READY can connect at once
    # (uvicorn itself binds only after the lifespan startup).  proto=IPPROTO_TCP
    # matters: asyncio sets TCP_NODELAY only on sockets that say so, and without
    # it a response written in two parts waits ~40 ms for the client's ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))  # loopback only
    sock.listen(1024)
    config = uvicorn.Config(
        create_app(args.mode, args.workers),
        loop="asyncio",
        http="h11",  # pure Python, installs everywhere
        log_level="warning",
        access_log=False,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down already
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
