"""Tasks for tests/test_wakeups.py (module level: workers import them by name)."""

from __future__ import annotations


def noop():
    return None


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
