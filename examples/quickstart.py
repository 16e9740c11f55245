"""Quickstart: the README's example, runnable.

Counts primes in pure Python on every core with InterpreterPoolExecutor, both
with map() and with submit(), and checks the answers against a serial run.
"""

from interpexec import InterpreterPoolExecutor


def count_primes(n: int) -> int:
    return sum(all(k % d for d in range(2, int(k**0.5) + 1)) for k in range(2, n))


if __name__ == "__main__":
    with InterpreterPoolExecutor() as pool:  # one worker per CPU
        print(list(pool.map(count_primes, [50_000] * 8)))
        future = pool.submit(count_primes, 10_000)
        print(future.result())
    assert future.result() == count_primes(10_000)
