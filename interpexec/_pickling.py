"""How callables travel to workers (main interpreter side only).

Callables: by reference (module + qualified name), as multiprocessing does.  A
plain function that pickle would send by reference goes as the natively
shareable ``(module, qualname)`` itself, which the worker resolves the way
pickle would (``_transport.load_callable``), so a worker whose calls and results
all cross natively never imports pickle; other callables (bound methods,
``functools.partial``, callable instances) are pickled.  Functions that cannot
be found by reference in a worker (lambdas, closures, functions typed at a REPL)
go by value through cloudpickle when it is installed; otherwise the call fails
with an error naming the function.
"""

from __future__ import annotations

import os
import sys
import types
import weakref

from . import _compat

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

#: A callable as it travels: a ``(module, qualname)`` reference or a pickle.
Encoded = tuple[str, str] | bytes

_FN_BLOBS: weakref.WeakKeyDictionary[Any, Encoded] = weakref.WeakKeyDictionary()


#: The last function encoded and its encoding: a burst of submits sends the same
#: function again and again, and a weak reference is cheaper to check than a
#: WeakKeyDictionary lookup (which builds a new weak reference every time).
#: Only references (module and name) are cached: they cannot go stale.  A
#: function sent by value (a closure, a lambda, a REPL function) is pickled at
#: every submit, so the task sees its cells and globals as they are now, as with
#: ProcessPoolExecutor.
_last: tuple[weakref.ref[Any], Encoded] | None = None


def encode_callable(fn: Any) -> Encoded:
    """A callable as it travels to a worker; plain functions' references are cached."""
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
    if type(fn) is types.BuiltinFunctionType and type(fn.__self__) is types.ModuleType:
        # A module's C function (abs, math.sqrt): no weak reference to cache it
        # under, and looking its name up is as cheap as a cache.
        ref = _reference(fn)
        if ref is not None:
            return ref
    return _pickle_callable(fn)[0]


def _pickle_callable(fn: Any) -> tuple[Encoded, bool]:
    """The encoding, and whether it is by reference."""
    if getattr(fn, "__module__", None) == "__main__" and not _main_is_importable():
        return _pickle_by_value(fn, "it is defined in an interactive session (REPL, notebook or python -c)"), False
    qualname = getattr(fn, "__qualname__", "")
    if type(fn) is types.FunctionType and ("<lambda>" in qualname or "<locals>" in qualname):
        why = "lambdas, closures and functions defined inside functions have no importable name"
        return _pickle_by_value(fn, why), False
    if type(fn) is types.FunctionType:
        ref = _reference(fn)
        if ref is not None:
            return ref, True
    try:
        return dumps(fn), type(fn) is types.FunctionType
    except (_compat.PicklingError, AttributeError, TypeError) as exc:
        return _pickle_by_value(fn, f"it cannot be pickled by reference ({exc})"), False


def _reference(fn: types.FunctionType | types.BuiltinFunctionType) -> tuple[str, str] | None:
    """``(module, qualname)`` when that names ``fn`` itself, as pickle checks
    before it pickles a function by reference; None to leave it to pickle
    (its module not imported, or the name bound to something else)."""
    module, qualname = fn.__module__, fn.__qualname__
    if type(module) is not str or type(qualname) is not str:
        return None
    obj: object = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None or part == "<locals>":
            return None
        obj = getattr(obj, part, None)
    return (module, qualname) if obj is fn else None


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
        raise _compat.PicklingError(
            f"cannot send {name!r} to an interpreter worker: {why}. Define it at the top level of a "
            "module (or of a script run as a file), or install cloudpickle so interpexec can send it by value."
        ) from None
    return dumps(fn, by_value=cloudpickle)


_MANAGERS = "multiprocessing.managers"
_proxy_picklers: dict[type, Any] = {}


def dumps(obj: Any, by_value: Any = None) -> bytes:
    """Pickle ``obj`` (protocol 5, buffers in band) for a worker: a callable
    that is not a plain reference (a bound method, a ``partial``, a callable
    instance), or an initializer with its arguments; with ``by_value`` (the
    cloudpickle module), a function sent by value.  Manager proxies in it
    carry their key (see :func:`dumps_with_proxies`)."""
    try:
        if _MANAGERS in sys.modules:
            if by_value is None:
                return dumps_with_proxies(obj, None)
            return _dump(_proxy_pickler_class(by_value.Pickler), obj, None)
        if by_value is not None:
            return bytes(by_value.dumps(obj, protocol=5))
        return _compat.dumps(obj, protocol=5)
    except RuntimeError as exc:  # (a multiprocessing.Queue, say: says what to pass instead)
        from ._errors import explain_inheritance_only

        explain_inheritance_only(exc)
        raise


def dumps_with_proxies(obj: Any, buffer_callback: Any) -> bytes:
    """Pickle ``obj`` (protocol 5) whose values include ``multiprocessing``
    manager proxies.  A proxy unpickled in a worker connects to its manager
    with the current process's authentication key, which a worker interpreter
    does not share with the main one (``multiprocessing`` draws a random key
    per interpreter): each proxy carries its own key, as it does when
    ``multiprocessing`` sends it to a child process it spawns.  Used once
    ``multiprocessing.managers`` is loaded: the override runs only for objects
    that are not of the builtin types pickle handles itself (1-2 us more per
    pickled call, for the pickler object)."""
    import pickle

    return _dump(_proxy_pickler_class(pickle.Pickler), obj, buffer_callback)


def _dump(pickler_class: Any, obj: Any, buffer_callback: Any) -> bytes:
    import io

    out = io.BytesIO()
    pickler_class(out, protocol=5, buffer_callback=buffer_callback).dump(obj)
    return out.getvalue()


def _proxy_pickler_class(base: Any) -> Any:
    """``base`` (pickle's or cloudpickle's pickler) with proxies reduced with
    their key; made once per base."""
    cls = _proxy_picklers.get(base)
    if cls is None:
        from multiprocessing.managers import BaseProxy

        base_override = getattr(base, "reducer_override", None)

        class ProxyPickler(base):  # type: ignore[misc]
            def reducer_override(self, o: Any) -> Any:
                if not isinstance(o, BaseProxy):
                    # (cloudpickle reduces functions and classes by value here)
                    return NotImplemented if base_override is None else base_override(self, o)
                rebuild, (proxy_type, token, serializer, kwds) = o.__reduce__()
                key = bytes(o._authkey)  # type: ignore[attr-defined]
                return rebuild, (proxy_type, token, serializer, {**kwds, "authkey": key})

        cls = _proxy_picklers[base] = ProxyPickler
    return cls
