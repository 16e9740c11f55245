"""How callables travel to workers (main interpreter side only).

Callables: pickled by reference (module + qualified name), as multiprocessing
does.  Functions that cannot be found by reference in a worker (lambdas,
closures, functions typed at a REPL) go by value through cloudpickle when it is
installed; otherwise the call fails with an error naming the function.
"""

from __future__ import annotations

import os
import sys
import types
import weakref

from ._compat import PicklingError, dumps

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

_FN_BLOBS: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


#: The last function pickled and its pickle: a burst of submits sends the same
#: function again and again, and a weak reference is cheaper to check than a
#: WeakKeyDictionary lookup (which builds a new weak reference every time).
#: Only pickles by reference (module and name) are cached: they cannot go
#: stale.  A function sent by value (a closure, a lambda, a REPL function) is
#: pickled at every submit, so the task sees its cells and globals as they are
#: now, as with ProcessPoolExecutor.
_last: tuple[weakref.ref[Any], bytes] | None = None


def dumps_callable(fn: Any) -> bytes:
    """Pickle a callable for a worker, caching plain functions' pickles by reference."""
    global _last
    if type(fn) is types.FunctionType:
        last = _last
        if last is not None and last[0]() is fn:
            return last[1]
        blob = _FN_BLOBS.get(fn)
        if blob is None:
            blob, by_reference = _pickle_callable(fn)
            if not by_reference:
                return blob
            _FN_BLOBS[fn] = blob
        _last = (weakref.ref(fn), blob)
        return blob
    return _pickle_callable(fn)[0]


def _pickle_callable(fn: Any) -> tuple[bytes, bool]:
    """The pickle, and whether it is by reference."""
    if getattr(fn, "__module__", None) == "__main__" and not _main_is_importable():
        return _pickle_by_value(fn, "it is defined in an interactive session (REPL, notebook or python -c)"), False
    qualname = getattr(fn, "__qualname__", "")
    if type(fn) is types.FunctionType and ("<lambda>" in qualname or "<locals>" in qualname):
        why = "lambdas, closures and functions defined inside functions have no importable name"
        return _pickle_by_value(fn, why), False
    try:
        return dumps(fn, protocol=5), type(fn) is types.FunctionType
    except (PicklingError, AttributeError, TypeError) as exc:
        return _pickle_by_value(fn, f"it cannot be pickled by reference ({exc})"), False


def _main_is_importable() -> bool:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and os.path.exists(path):  # not "<stdin>" (python -)
        return True
    spec = getattr(main, "__spec__", None)
    return bool(spec is not None and spec.name)


def _pickle_by_value(fn: Any, why: str) -> bytes:
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        raise PicklingError(
            f"cannot send {name!r} to an interpreter worker: {why}. Define it at the top level of a "
            "module (or of a script run as a file), or install cloudpickle so interpexec can send it by value."
        ) from None
    return bytes(cloudpickle.dumps(fn, protocol=5))
