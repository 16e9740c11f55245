"""A two-stage pipeline through interpexec.Queue.

    python examples/pipeline.py [DOCUMENTS]

The parent feeds documents (str: natively shareable, no pickling) into a bounded
queue.  Stage 1, a task in one worker interpreter, counts the words of each
document and passes the counts on (a dict: pickled); stage 2, a task in a second
worker, merges the counts and streams a progress line back every 500 documents,
then the final top ten.  Both stages run in parallel, each on its own GIL; the
bounded queues keep a fast stage from running far ahead of a slow one; ``None``
ends each stage.  Every ``get`` blocks on a pipe: no thread polls or sleeps.
"""

from __future__ import annotations

import collections
import random
import sys
import time

import interpexec

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def count_words(documents: interpexec.Queue, counts: interpexec.Queue) -> int:
    """Stage 1: one document in, its word counts out."""
    done = 0
    while (text := documents.get()) is not None:
        counts.put(dict(collections.Counter(text.split())))
        done += 1
    counts.put(None)
    return done


def merge_counts(counts: interpexec.Queue, report: interpexec.Queue) -> None:
    """Stage 2: merge the counts; stream progress, then the top ten."""
    total: collections.Counter[str] = collections.Counter()
    seen = 0
    while (part := counts.get()) is not None:
        total.update(part)
        seen += 1
        if seen % 500 == 0:
            report.put(f"merged {seen} documents")
    for word, n in total.most_common(10):
        report.put((word, n))
    report.put(None)


def main() -> None:
    n_docs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rng = random.Random(42)
    documents = interpexec.Queue(maxsize=64)  # back-pressure on the parent
    counts = interpexec.Queue(maxsize=64)
    report = interpexec.Queue()
    start = time.perf_counter()
    with interpexec.InterpreterPoolExecutor(max_workers=2) as pool:
        stage1 = pool.submit(count_words, documents, counts)
        stage2 = pool.submit(merge_counts, counts, report)
        for _ in range(n_docs):
            documents.put(" ".join(rng.choices(WORDS, k=2000)))
        documents.put(None)
        # Take everything before the pool shuts down: items a worker put vanish
        # with its interpreter.
        while (line := report.get()) is not None:
            print(line if isinstance(line, str) else f"  {line[0]:<8} {line[1]:>9,}")
        stage2.result()
        print(f"{stage1.result()} documents in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
