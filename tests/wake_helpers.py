"""Tasks for tests/test_wakeups.py (module level: workers import them by name)."""

from __future__ import annotations


def noop():
    return None


def interp_id():
    """The id of the interpreter that runs this call."""
    import _interpreters

    return int(_interpreters.get_current()[0])


def rendezvous(started, release, index):
    """Say it started, then hold its worker until released (or 20 s pass)."""
    started.put(index)
    return release.get(timeout=20)


def one_hangs(tokens, gate):
    """An initializer: the first worker to run it hangs until ``gate`` gets an item."""
    import queue

    try:
        tokens.get_nowait()
    except queue.Empty:
        return
    gate.get(timeout=30)


def needs_a_token(tokens):
    """An initializer that fails in every worker after those that got a token."""
    import queue

    try:
        tokens.get_nowait()
    except queue.Empty:
        raise RuntimeError("no token left for this worker") from None


def say_ran(ran, index):
    ran.put(index)
    return index


def release_once_all_started(started, release, k, value=None):
    """In a thread of the main interpreter: wait until ``k`` rendezvous calls
    have started, then release them all, each with ``value`` (or the index it
    started with).  Returns the thread, started."""
    import threading

    def run():
        seen = sorted(started.get(timeout=40) for _ in range(k))
        for index in seen:
            release.put(index if value is None else value)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
