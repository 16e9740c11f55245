"""Logging from inside workers reaches the parent's handlers.

Tasks use the logging module as usual; interpexec forwards each record to the
same-named logger in the parent (forward_logs=True, the default), so the
handlers and format configured here apply.  The record's processName says which
interpreter it came from.
"""

import logging

from interpexec import InterpreterPoolExecutor

log = logging.getLogger("example.worker")


def task(n: int) -> int:
    log.info("squaring %d", n)
    return n * n


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(processName)s] %(name)s: %(message)s")
    with InterpreterPoolExecutor(2) as pool:
        print(list(pool.map(task, range(4))))
