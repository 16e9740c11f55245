"""Ctrl-C around steps that must not be cut in two (main interpreter only).

A ``KeyboardInterrupt`` is raised between any two bytecodes of the main thread,
including inside ``Thread.start()`` and between ``with lock:``'s ``__enter__`` and
its block.  :class:`defer_sigint` holds SIGINT back over such a step and raises
it afterwards; :func:`ignore_sigint` / :func:`restore_sigint` bracket the exit,
where a second Ctrl-C must not abort stopping the pools.  :func:`exit_guard`
closes the gap before that: from the first instant of the exit's hooks, a
Ctrl-C is only recorded until ``_stopping._python_exit`` decides what it means.
"""

from __future__ import annotations

import contextlib

from ._compat import (
    SIG_DFL,
    SIG_IGN,
    is_main_thread,
    raise_sigint,
    sigint_handler,
    sigint_swapper,
    swap_sigint_handler,
)

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any


class defer_sigint:
    """Hold a Ctrl-C back until the block ends, in the main thread (elsewhere it
    cannot land anyway): for steps that must not be cut in two, such as starting
    a thread (``Thread.start()`` can raise KeyboardInterrupt before or after the
    thread exists, which the caller cannot tell apart).  The SIGINT handler is
    swapped for one that records the signal; at the end the original is put
    back and called with what was recorded (so the KeyboardInterrupt is raised
    there).  Nothing is swapped when the handler was not installed from Python."""

    __slots__ = ("_caught", "_old")

    def __enter__(self) -> defer_sigint:
        self._caught: tuple[int, Any] | None = None
        self._old: Any = None
        if is_main_thread() and sigint_handler() is not None:
            # (Once swapped, no KeyboardInterrupt can leave __enter__: ours records.)
            self._old = swap_sigint_handler(self._record)
        return self

    def _record(self, signum: int, frame: Any) -> None:
        self._caught = (signum, frame)

    def __exit__(self, *exc: object) -> None:
        old, self._old = self._old, None
        if old is None:
            return
        swap_sigint_handler(old)
        caught, self._caught = self._caught, None
        if caught is None:
            return
        if callable(old):
            old(*caught)  # default_int_handler raises KeyboardInterrupt here
        elif old == SIG_DFL:
            raise_sigint()


#: What to enter instead of :class:`defer_sigint` where nothing is deferred.
NOT_DEFERRED = contextlib.nullcontext()


#: Ctrl-Cs recorded (signal number -> frame) while the exit guard is in place.
exit_caught: dict[int, Any] = {}
#: The handler that only records: a C method of a dict, so that no Python frame
#: runs between a Ctrl-C and its record (a KeyboardInterrupt raised in the first
#: bytecodes of the exit hook, before it could swap handlers itself, made CPython
#: finalize while workers still ran inside their interpreters: an abort, or a
#: segfault on 3.13.0).
exit_recorder = exit_caught.__setitem__
#: The handlers the exit guards replaced, in order: the first is the program's
#: own (the atexit guard, running second, may find the first one's recorder).
exit_before: list[Any] = []


def exit_guard() -> Any:
    """A C callable for the process's exit hooks (no Python frame: nothing a
    Ctrl-C can cut short) that swaps :data:`exit_recorder` in as the SIGINT
    handler and keeps the one it replaced in :data:`exit_before`."""
    import functools

    return functools.partial(exit_before.extend, map(sigint_swapper(), (exit_recorder,)))


def ignore_sigint() -> Any:
    """Ignore Ctrl-C from now on (main thread of the main interpreter only);
    returns the handler to give back to :func:`restore_sigint`, or None when
    nothing was changed."""
    if not is_main_thread() or sigint_handler() is None:
        return None
    return swap_sigint_handler(SIG_IGN)


def restore_sigint(handler: Any) -> None:
    swap_sigint_handler(handler)
