"""Stopping work that runs too long: deadlines and interrupt().

schedule(fn, args, timeout=...) stops a task once it has run for `timeout`
seconds (an exception is raised inside it, so its `finally` blocks run) and the
future fails with TimeoutError; the worker then takes the next task.
interrupt(future) stops a task that is already running.
"""

import concurrent.futures as cf
import time

from interpexec import InterpreterPoolExecutor


def forever(label: str) -> str:
    try:
        while True:
            pass
    finally:
        print(f"  {label}: cleanup ran")


def quick(x: int) -> int:
    return x * 2


if __name__ == "__main__":
    with InterpreterPoolExecutor(2) as pool:
        t0 = time.perf_counter()
        fut = pool.schedule(forever, ("deadline",), timeout=0.2)
        try:
            fut.result()
        except TimeoutError as exc:
            print(f"deadline: {exc} (after {time.perf_counter() - t0:.2f} s)")
        print("the same pool goes on:", pool.submit(quick, 21).result())

        running = pool.submit(forever, "interrupt")
        print("interrupt() ->", pool.interrupt(running))  # stops it, running or not
        try:
            running.result()
        except cf.CancelledError:
            print("interrupted: the future is cancelled")
        print("and goes on:", pool.submit(quick, 4).result())
