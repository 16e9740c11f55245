"""``BrokenInterpreterPool``, and the class of a task's exception's ``__cause__``,
in a module of their own.

Their base classes, ``concurrent.futures.process.BrokenProcessPool`` and the
process pool's remote traceback class, live in a module that imports
``multiprocessing`` (several milliseconds, and nothing a pool of interpreters
otherwise needs).  So this module is imported only when a class is asked for:
``interpexec.BrokenInterpreterPool`` (a lazy attribute of the package), a pool
that breaks and raises it, or the first task that fails.  Whichever comes
first, the classes are created once, with the real base classes, so ``except
BrokenProcessPool`` catches it whatever the user imported, and in which order,
and code written for ProcessPoolExecutor that checks the cause's class finds
the one it expects.
"""

from __future__ import annotations

from . import _compat
from ._errors import RemoteTraceback

# (Possibly during the exit: a pool that breaks, or a task that fails, then.)
with _compat.imports_during_exit():
    from concurrent.futures.process import BrokenProcessPool

    try:  # 3.14+
        from concurrent.futures.interpreter import (  # type: ignore[import-not-found,unused-ignore]
            BrokenInterpreterPool as _StdBroken,
        )

        _broken_bases: tuple[type, ...] = (BrokenProcessPool, _StdBroken)
    except ImportError:  # 3.13
        _broken_bases = (BrokenProcessPool,)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BrokenInterpreterPool", "RemoteTracebackCause"]


class BrokenInterpreterPool(*_broken_bases):  # type: ignore[misc]
    """The pool can no longer run work: a worker's initializer failed, a worker
    loop died, or the workers were terminated.  Subclasses
    ``concurrent.futures.process.BrokenProcessPool`` and, on 3.14+,
    ``concurrent.futures.interpreter.BrokenInterpreterPool``."""


class RemoteTracebackCause(RemoteTraceback, _compat.ProcessRemoteTraceback):  # type: ignore[misc]
    """The ``__cause__`` of a task's exception: an :class:`interpexec.RemoteTraceback`
    that is also ProcessPoolExecutor's own remote traceback class.  Shown and
    pickled as ``interpexec.RemoteTraceback``."""

    def __reduce__(self) -> tuple[Any, ...]:
        # (Its attributes, notes among them, come along.)
        return (RemoteTraceback, (self.tb,), dict(self.__dict__) or None)


RemoteTracebackCause.__module__ = RemoteTraceback.__module__
RemoteTracebackCause.__qualname__ = RemoteTracebackCause.__name__ = RemoteTraceback.__name__
