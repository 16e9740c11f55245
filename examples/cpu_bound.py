"""CPU-bound pure Python on all cores: serial vs interpexec, with timings.

Hashes many strings with a pure-Python FNV-1a loop (no C extension does the
work), first serially, then through map(chunksize=...) on an
InterpreterPoolExecutor, and prints both times and the speedup.

    python examples/cpu_bound.py [ITEMS]
"""

import sys
import time

from interpexec import InterpreterPoolExecutor


def fnv1a(text: str) -> int:
    h = 0xCBF29CE484222325
    for _ in range(50):
        for ch in text:
            h ^= ord(ch)
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


if __name__ == "__main__":
    items = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000
    words = [f"item-{i:06d}-" * 4 for i in range(items)]

    t0 = time.perf_counter()
    serial = [fnv1a(w) for w in words]
    t_serial = time.perf_counter() - t0

    with InterpreterPoolExecutor() as pool:
        pool.prestart()  # start the workers before timing
        t0 = time.perf_counter()
        parallel = list(pool.map(fnv1a, words, chunksize=64))
        t_pool = time.perf_counter() - t0

    assert parallel == serial
    print(f"serial      {t_serial:6.2f} s")
    print(f"interpexec  {t_pool:6.2f} s  ({t_serial / t_pool:.2f}x, {pool.max_workers} workers)")
