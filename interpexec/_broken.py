"""``BrokenInterpreterPool``, in a module of its own.

Its base class, ``concurrent.futures.process.BrokenProcessPool``, lives in a
module that imports ``multiprocessing`` (several milliseconds, and nothing a
pool of interpreters otherwise needs).  So this module is imported only when the
class is asked for: ``interpexec.BrokenInterpreterPool`` (a lazy attribute of the
package), or a pool that breaks and raises it.  Whichever comes first, the class
is created once, with the real base classes, so ``except BrokenProcessPool``
catches it whatever the user imported, and in which order.
"""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

try:  # 3.14+
    from concurrent.futures.interpreter import (  # type: ignore[import-not-found,unused-ignore]
        BrokenInterpreterPool as _StdBroken,
    )

    _broken_bases: tuple[type, ...] = (BrokenProcessPool, _StdBroken)
except ImportError:  # 3.13
    _broken_bases = (BrokenProcessPool,)

__all__ = ["BrokenInterpreterPool"]


class BrokenInterpreterPool(*_broken_bases):  # type: ignore[misc]
    """The pool can no longer run work: a worker's initializer failed, a worker
    loop died, or the workers were terminated.  Subclasses
    ``concurrent.futures.process.BrokenProcessPool`` and, on 3.14+,
    ``concurrent.futures.interpreter.BrokenInterpreterPool``."""
