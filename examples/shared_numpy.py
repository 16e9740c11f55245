"""A NumPy array processed in place by workers, without copies.

NumPy itself cannot be imported inside isolated subinterpreters, but its data
can be lent to them: share(arr, writable=True) gives each task a memoryview over
the array's memory (format "d", one float per element).  Each task transforms
its own chunk in place with plain Python; the parent then reads the finished
array.  Chunks do not overlap, so no synchronization is needed.

Note where numpy is imported: only under the ``__main__`` guard.  Workers load
this script to find smooth_chunk, and an import of numpy at the top would fail
there (interpexec.IncompatibleModuleError).

    python examples/shared_numpy.py [ELEMENTS]
"""

import sys

from interpexec import InterpreterPoolExecutor, share


def smooth_chunk(view: memoryview, start: int, stop: int) -> int:
    """x -> x * x + 1 over view[start:stop], in place."""
    for i in range(start, stop):
        x = view[i]
        view[i] = x * x + 1.0
    return stop - start


if __name__ == "__main__":
    import numpy as np

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    arr = np.linspace(0.0, 1.0, n)
    expected = arr * arr + 1.0

    shared = share(arr, writable=True)
    with InterpreterPoolExecutor() as pool:
        step = -(-n // (4 * pool.max_workers))
        bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
        done = sum(pool.map(smooth_chunk, [shared] * len(bounds), *zip(*bounds, strict=True)))

    assert done == n
    assert np.allclose(arr, expected)
    print(f"transformed {n:,} floats in place in {len(bounds)} chunks; first {arr[:3]}, last {arr[-1]}")
