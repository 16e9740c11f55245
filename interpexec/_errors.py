"""Exceptions that cross from workers to the caller, and how they are packed.

A worker imports it only when something must be packed (a task or its
initializer failed), so it stays light (no concurrent.futures).
"""

from __future__ import annotations

import sys

from . import _compat
from ._protocol import UNREPORTABLE, Interrupted, qualified_type_name

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from collections.abc import Callable
    from re import Pattern
    from typing import Any

__all__ = [
    "IncompatibleModuleError",
    "RemoteError",
    "RemoteTraceback",
    "pack_exception",
    "unpack_exception",
]


class RemoteTraceback(Exception):
    """Carries the worker-side traceback; set as ``__cause__`` of a task's exception
    (the same convention as ``concurrent.futures.process``)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class RemoteError(Exception):
    """Stands in for a task's exception that could not be pickled or unpickled.

    ``type_name`` is the original exception's qualified type name, ``message`` its
    ``str()``, ``traceback_text`` the worker-side formatted traceback.
    """

    def __init__(self, type_name: str, message: str, traceback_text: str) -> None:
        super().__init__(type_name, message, traceback_text)
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


class IncompatibleModuleError(ImportError):
    """An extension module refused to load in an isolated subinterpreter.

    ``module`` is its fully dotted name, ``distribution`` the installed
    distribution that ships it (or None), ``detail`` the refusal's own text; the
    original exception is the ``__cause__`` (its own ``__cause__`` carries the
    worker's traceback)."""

    def __init__(self, module: str, detail: str = "", distribution: str | None = None) -> None:
        if distribution is None:
            distribution = distribution_of(module)
        version = "%d.%d" % sys.version_info[:2]
        dist = f" (from the {distribution!r} distribution)" if distribution else ""
        msg = (
            f"module {module!r}{dist} cannot be imported in an interpexec worker on Python {version}: "
            "it does not support isolated subinterpreters; run this work on a ProcessPoolExecutor, or import "
            "the module in the parent only and pass plain data to the workers"
            + (f" (check with `python -m interpexec doctor {distribution}`)" if distribution else "")
        )
        super().__init__(msg, name=module)
        self.module = module
        self.detail = detail
        self.distribution = distribution

    def __reduce__(self) -> tuple[Any, ...]:
        notes = getattr(self, "__notes__", None)  # (they cross too: where it was raised, say)
        state = {"__notes__": list(notes)} if notes else None
        return (type(self), (self.module, self.detail, self.distribution or ""), state)


_DISTRIBUTIONS: dict[str, list[str]] = {}


def distribution_of(module: str) -> str | None:
    """The installed distribution that provides top-level package of ``module``."""
    top = module.partition(".")[0]
    if not _DISTRIBUTIONS:
        try:
            import importlib.metadata

            _DISTRIBUTIONS.update(importlib.metadata.packages_distributions())
        except Exception:  # broken metadata: no distribution name, nothing worse
            _DISTRIBUTIONS["\0"] = []
    dists = _DISTRIBUTIONS.get(top)
    return dists[0] if dists else None


# How extension modules refuse isolated interpreters (compiled on first use).
_INCOMPATIBLE_SOURCES = [
    # CPython's guard for single-phase init modules (NumPy, most Cython modules).
    r"module (?P<mod>[\w.]+) does not support loading in subinterpreters",
    # PyO3 (pydantic-core, orjson, ...).
    r"PyO3 modules (?:do not yet|don't yet|do not) support subinterpreters",
    # Cython's per-process guard.
    r"Interpreter change detected",
    r"(?i:(?:cannot|can't|can only) be (?:loaded|imported).{0,40}(?:interpreter|subinterpreter))",
]
_incompatible_patterns: list[Pattern[str]] = []


def _patterns() -> list[Pattern[str]]:
    if not _incompatible_patterns:
        import re

        _incompatible_patterns.extend(re.compile(src) for src in _INCOMPATIBLE_SOURCES)
    return _incompatible_patterns


def as_incompatible_module_error(exc: BaseException) -> IncompatibleModuleError | None:
    """Recognize a refusal to load in a subinterpreter anywhere in exc's chain
    (the innermost refusal names the module)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    found: tuple[BaseException, str] | None = None
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, IncompatibleModuleError):
            return cur
        if isinstance(cur, ImportError):
            text = str(cur)
            for pattern in _patterns():
                m = pattern.search(text)
                if m:
                    found = (cur, m.groupdict().get("mod") or cur.name or "")
                    break
        cur = cur.__cause__ or cur.__context__
    if found is None:
        return None
    refusal, short = found
    name = _full_module_name(refusal, short) or short or "<unknown>"
    detail = str(refusal).strip().splitlines()[-1] if str(refusal).strip() else ""
    return IncompatibleModuleError(name, detail)


def _full_module_name(exc: BaseException, short: str) -> str | None:
    """The fully dotted name of the module being imported when ``exc`` was raised.

    CPython's message names a submodule by its last component alone when its
    package imports it relatively for the first time (``from ._version import
    ...`` gives ``_version``); importlib removes its own frames from the
    traceback, so the name is rebuilt from the innermost frame whose package
    holds an extension module of that name."""
    if not short or "." in short:
        return short or None
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    import importlib.machinery
    import os

    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for frame in reversed(frames):
        # (the package itself may be gone from sys.modules: its import failed)
        package, path = frame.f_globals.get("__package__"), frame.f_globals.get("__file__")
        if not package or not isinstance(path, str):
            continue
        directory = os.path.dirname(path)
        if any(os.path.exists(os.path.join(directory, short + suffix)) for suffix in suffixes):
            return f"{package}.{short}"
    return short


# (pickled exception or None, type name, message, traceback text, packed cause or
#  None, NameError/AttributeError ``name`` or None)
Packed = tuple["Any", ...]

_MAX_CHAIN = 8


def pack_exception(exc: BaseException) -> Packed:
    """Pack an exception raised in a worker for the trip to the caller."""
    import traceback

    try:
        tb_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Interrupted:
        raise
    except BaseException:  # e.g. a __str__ raising SystemExit: send the rest
        tb_text = "<the traceback could not be formatted>\n"
    incompatible = as_incompatible_module_error(exc)
    if incompatible is not None and incompatible is not exc:
        # The original exception comes along as the cause (see unpack_exception),
        # and the package's own notes on it (where it was raised) with this one.
        for note in getattr(exc, "__notes__", None) or ():
            if isinstance(note, str) and note.startswith("interpexec:"):
                incompatible.add_note(note)
        return _pack_one(incompatible, tb_text, _pack_one(exc, "", _pack_chain(exc, 0)))
    return _pack_one(exc, tb_text, _pack_chain(exc, 0))


def next_in_chain(exc: BaseException) -> BaseException | None:
    """The exception a traceback shows below ``exc``: its cause, else its
    context unless ``raise ... from None`` suppressed it."""
    return exc.__cause__ if exc.__cause__ is not None else (None if exc.__suppress_context__ else exc.__context__)


def _pack_chain(exc: BaseException, depth: int) -> Packed | None:
    """The exception's cause (or context), packed with its own chain, so that
    ``raise X from Y`` arrives with ``Y`` reachable (and an exception raised
    while handling ``Y`` too, as its context: see :func:`_is_context`)."""
    nxt = next_in_chain(exc)
    if nxt is None or depth >= _MAX_CHAIN:
        return None
    return _pack_one(nxt, "", _pack_chain(nxt, depth + 1))


def _is_context(exc: BaseException) -> bool:
    """Whether what :func:`_pack_chain` packs for ``exc`` is its context (an
    exception raised while handling another), not its cause (``from``)."""
    return exc.__cause__ is None and not exc.__suppress_context__ and exc.__context__ is not None


def _pack_one(exc: BaseException, tb_text: str, chain: Packed | None) -> Packed:
    tp = type(exc)
    try:
        message = str(exc)
    except Interrupted:
        raise
    except BaseException:  # a __str__ that raises (even SystemExit) must not stop the report
        message = f"<unprintable {tp.__qualname__}>"
    blob: bytes | None
    why: str | None = None
    try:
        blob = _compat.dumps(exc, protocol=5)
        _compat.loads(blob)  # it must also come back out on the other side
    except Interrupted:
        raise
    except BaseException as failure:  # any failure of the user's __reduce__/__setstate__: send it as text
        blob = None
        why = _describe(failure)
    # NameError's and AttributeError's ``name`` is not pickled: send it beside.
    attr_name = getattr(exc, "name", None) if isinstance(exc, (NameError, AttributeError)) else None
    return (
        blob,
        qualified_type_name(tp),
        message,
        tb_text,
        chain,
        attr_name if isinstance(attr_name, str) else None,
        chain is not None and _is_context(exc),
        why,
    )


def _describe(failure: BaseException) -> str:
    """``Type: message`` of an exception raised by user code (whose ``__str__``
    may raise too)."""
    try:
        text = str(failure)
    except Interrupted:
        raise
    except BaseException:
        text = ""
    name = type(failure).__qualname__
    return f"{name}: {text}" if text else name


def pack_unreportable(exc: BaseException, failure: BaseException) -> Packed:
    """What is left to say of ``exc`` when packing it raised ``failure`` (its
    ``__str__`` raised SystemExit, memory ran out, ...): its type name, and why
    nothing more could be sent.  Touches neither exception's methods."""
    try:
        tp = type(exc)
        name = qualified_type_name(tp)
        why = type(failure).__qualname__
    except Interrupted:
        raise
    except BaseException:  # last resort, e.g. no memory for the strings
        return UNREPORTABLE
    return (None, name, f"<the exception could not be reported: {why} while packing it>", "", None, None)


def explain_missing_main_global(exc: BaseException) -> None:
    """In the parent: a task's ``NameError`` for a global that the parent's
    ``__main__`` has (set under the ``__main__`` guard, or after the pool was
    made) gets a note saying why workers do not have it."""
    name = getattr(exc, "name", None)
    main = sys.modules.get("__main__")
    if type(exc) is not NameError or not isinstance(name, str) or main is None or name not in vars(main):
        return
    exc.add_note(
        f"interpexec: {name!r} is a global of your __main__ module, but workers do not have it: they run your "
        'script as __mp_main__, without its `if __name__ == "__main__":` block and without what the parent did '
        f"after starting (as ProcessPoolExecutor's spawn and forkserver workers). Pass {name} as an argument, or set "
        "it in an initializer."
    )


def explain_inheritance_only(exc: BaseException) -> None:
    """A ``RuntimeError`` from pickling a ``multiprocessing`` queue, lock,
    semaphore or event (``multiprocessing.context.assert_spawning``: objects a
    child process gets only at spawn) gets a note with what to pass to
    interpreter workers instead."""
    tb = exc.__traceback__
    if type(exc) is not RuntimeError or tb is None:
        return
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame
    if frame.f_code.co_name != "assert_spawning" or frame.f_globals.get("__name__") != "multiprocessing.context":
        return
    exc.add_note(
        "interpexec: workers get arguments, initargs and results by pickling, never by inheritance at spawn. "
        "Share a queue with tasks through interpexec.Queue, or use a multiprocessing Manager's proxies "
        "(manager.Queue(), manager.Lock(), manager.Event()); a worker's logging records reach this "
        "interpreter's handlers without a QueueHandler."
    )


def unpack_exception(packed: Packed, cause_class: Callable[[], type[RemoteTraceback]] | None = None) -> BaseException:
    """Rebuild a packed exception.  Its ``__cause__`` is a :class:`RemoteTraceback`
    with the worker-side traceback (as ProcessPoolExecutor does, and one of its
    own class too: ``_broken.RemoteTracebackCause``); the original
    cause, if any, hangs off that RemoteTraceback's own ``__cause__``, and an
    exception the task was handling when it raised off its ``__context__``,
    with ``__suppress_context__`` set: the traceback text shows it already,
    as "During handling of the above exception" (shown again as a context of
    the RemoteTraceback, it read as its direct cause)."""
    exc = _unpack_one(packed)
    # (The class of the RemoteTraceback, ``cause_class()``, comes after it: the
    # resolver's loads multiprocessing, which must not be what resolves a
    # class of the caller's script, see _state._main_info.)
    remote = (cause_class() if cause_class is not None else RemoteTraceback)('\n"""\n%s"""' % packed[3])
    if isinstance(exc, IncompatibleModuleError) and packed[4] is not None:
        # The refusal's own exception (a third party's text, NumPy's advice) is
        # the cause, not part of the message; the worker's traceback is its cause.
        original = _unpack_one(packed[4])
        if packed[4][4] is not None:
            _link(remote, packed[4], suppress=True)
        original.__cause__ = remote
        exc.__cause__ = original
        return exc
    if packed[4] is not None:
        _link(remote, packed, suppress=True)
    exc.__cause__ = remote
    return exc


def _link(exc: BaseException, packed: Packed, suppress: bool = False) -> None:
    """Hang the chain ``packed`` carries on ``exc``: as its cause, or as its
    context for an exception the task was handling (``suppress``: not shown)."""
    chained = _unpack_chain(packed[4])
    if len(packed) > 6 and packed[6]:
        exc.__context__ = chained
        if suppress:
            exc.__suppress_context__ = True
    else:
        exc.__cause__ = chained


def _unpack_chain(packed: Packed) -> BaseException:
    exc = _unpack_one(packed)
    if packed[4] is not None:
        _link(exc, packed)
    return exc


def _unpack_one(packed: Packed) -> BaseException:
    blob, type_name, message, tb_text = packed[:4]
    why: str | None = packed[7] if len(packed) > 7 else None  # (why the worker could not pickle it)
    exc: BaseException | None = None
    if blob is not None:
        try:
            exc = _compat.loads(bytes(blob))
        except KeyboardInterrupt:  # a Ctrl-C, not the user's class: the resolver re-delivers
            raise
        except BaseException as failure:  # the user's __setstate__ raised (even SystemExit): sent as text
            exc = None
            why = _describe(failure)
        if not isinstance(exc, BaseException):
            exc = None
    if exc is None:
        exc = RemoteError(type_name, message, tb_text)
        if why:
            exc.add_note(
                f"interpexec: the task's {type_name} could not be rebuilt here ({why}), so it arrives as "
                "RemoteError. To get the exception itself, make its class picklable: pass every argument of "
                "its __init__ on to super().__init__(...), or define __reduce__."
            )
    elif packed[5] is not None and isinstance(exc, (NameError, AttributeError)):
        try:
            exc.name = packed[5]
        except AttributeError:  # a subclass with a read-only name: leave it
            pass
    return exc
