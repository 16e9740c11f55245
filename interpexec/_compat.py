# The one module that touches CPython's private interpreter APIs.
#
# ``_interpreters`` and ``_interpqueues`` are private and change between releases.
# Everything else in interpexec goes through the small, stable surface below.
#
# Differences hidden here (checked against each branch's ``Modules/_interpretersmodule.c``
# and ``Modules/_interpqueuesmodule.c``):
#
# * 3.13: ``_interpqueues.create(maxsize, fmt, unboundop)``, ``put(qid, obj, fmt,
#   unboundop)``, ``get(qid) -> (obj, fmt, unboundop)``.  ``fmt`` 0 means "shareable
#   objects only"; an unshareable object raises ``NotShareableError`` and an int
#   beyond 64 bits raises ``OverflowError``.
# * 3.14 and 3.15: ``create(maxsize, unboundop, fallback)``, ``put(qid, obj,
#   unboundop)``, ``get(qid) -> (obj, unboundop)``; unshareable objects fall back to
#   pickle inside the queue (interpexec never relies on that: it decides itself).
# * 3.15: most functions are positional-only, so every call below is positional.
# * Getting from an empty queue raises the ``QueueEmpty`` class of the stdlib wrapper
#   (``test.support.interpreters`` on 3.13, ``concurrent.interpreters`` on 3.14+),
#   which the C module imports on first use; :func:`queue_get` returns a default
#   instead.  In the main interpreter this module registers classes of its own
#   with its first queue (:func:`_register_queue_errors`: a signal handler
#   inside that import crashes CPython).
#
# This module is imported inside worker interpreters too, so it stays small and
# imports nothing heavy.

import _interpqueues
import _interpreters
import _queue
import _thread
import os
import sys

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from _pickle import PickleBuffer, PicklingError, dumps, loads
    from collections import deque  # noqa: F401 (names used only in type comments)
    from collections.abc import Callable  # noqa: F401
    from types import CodeType  # noqa: F401
    from typing import Any, Literal  # noqa: F401

# Low-level names the rest of the package uses through here: the C modules behind
# pickle, queue and threading, which a worker imports without paying for the
# pure-Python wrappers.
QueueEmpty = _queue.Empty
QueueNotFoundError = _interpqueues.QueueNotFoundError
allocate_lock = _thread.allocate_lock
RLock = _thread.RLock
get_ident = _thread.get_ident

_IN_MAIN_INTERPRETER = _thread._is_main_interpreter()  # type: bool  # type: ignore[attr-defined]

#: Whether this is one of a pool's worker interpreters: one that imported the
#: worker loop before this module.
_IN_WORKER = not _IN_MAIN_INTERPRETER and __package__ + "._worker_main" in sys.modules  # type: bool

#: Whether this module defines the pool's side: the functions and constants
#: under ``if _POOL_SIDE:`` below, which only the main interpreter's pool
#: calls (interpreters, signals, lock repair, exit hooks).  A worker skips
#: them at import, and with them their code objects: about 20 KiB of every
#: worker's objects (docs/architecture.md, "What a worker loads").
#: There they are defined on first use of one (:func:`__getattr__`,
#: :func:`_define_pool_side`), for a task's module that imports the executor,
#: say.  A module-level ``if`` is what skips them: a
#: skipped ``def``'s code lives only in the module's code object, which is
#: freed once the import ends.  ``_DEFINING_POOL_SIDE`` is set by that later
#: definition.
_POOL_SIDE = not _IN_WORKER or bool(globals().get("_DEFINING_POOL_SIDE"))  # type: bool

# What only the pool's side uses (signals, queue_take) is bound at the end of
# this module (_bind_main_side) in the main interpreter and in any other that
# has not imported the worker loop first: a worker does not load those C modules
# (itertools alone costs a subinterpreter 60 KiB, the three 100 KiB).  There
# they load on first use of one of _MAIN_SIDE_NAMES (__getattr__) or of
# queue_take; the signal functions are main-thread only.
_signal = None  # type: Any
_first = None  # type: Any
_repeat = None  # type: Any

#: The C pickle module's names, imported on first use (:func:`__getattr__`): a
#: worker whose calls and results all cross natively (functions go by reference,
#: see ``_pickling``) never loads pickle, which costs each interpreter 0.6-0.7 MB
#: and 2 ms.  Modules that load in workers use them as ``_compat.dumps``.
_PICKLE_NAMES = ("PickleBuffer", "PicklingError", "dumps", "loads")


#: Names bound at import except in a worker (see above), and there on first use.
_MAIN_SIDE_NAMES = ("SIG_DFL", "SIG_IGN", "set_signal_wakeup_fd")


def __getattr__(name):  # type: (str) -> Any
    names = globals()
    if name in _PICKLE_NAMES:
        import _pickle

        for each in _PICKLE_NAMES:
            names[each] = getattr(_pickle, each)
        return names[name]
    if name in _MAIN_SIDE_NAMES:
        _bind_main_side(names)
        return names[name]
    if name in _POOL_SIDE_NAMES and not _POOL_SIDE:
        _define_pool_side(names)
        return names[name]
    if name == "ProcessRemoteTraceback":
        if not _POOL_SIDE:  # (a worker: the pool side first; defined once)
            _define_pool_side(names)
        #: ``concurrent.futures.process._RemoteTraceback``, the class of a
        #: ProcessPoolExecutor task's exception's ``__cause__`` (its module
        #: imports multiprocessing: on first use, in the main interpreter).
        with imports_during_exit():
            from concurrent.futures import process

        names[name] = process._RemoteTraceback
        return names[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: What ``if _POOL_SIDE:`` defines (tests/test_imports.py checks this list
#: against the module).
_POOL_SIDE_NAMES = (
    "ExecFailure",
    "TRACING_REFUSAL",
    "_LOCKING_MODULES",
    "_QUEUE_WRAPPERS",
    "_fill_ctypes_field_table",
    "_mitigate_crashes",
    "_register_queue_errors",
    "_run_now",
    "create_interpreter",
    "ctypes_token",
    "daemon_threads_allowed",
    "ended_on_unhandled_ctrl_c",
    "forget_ctypes_token_after_fork",
    "futures_held_up_the_stack",
    "held",
    "imports_during_exit",
    "lock_is_owned",
    "os_thread_started",
    "outer_level",
    "raise_sigint",
    "register_atexit",
    "register_atexit_unwrapped",
    "release_if_owned",
    "run_string",
    "sigint_handler",
    "sigint_swapper",
    "start_thread_object",
    "swap_sigint_handler",
    "tracing_allocations",
)


def _define_pool_side(names):  # type: (dict[str, Any]) -> None
    # Define :data:`_POOL_SIDE_NAMES` in a worker that skipped them: run this
    # module's code again in a scratch namespace that asks for them, then bind
    # its functions, and its classes' methods, to this module's globals (their
    # state, such as ``_mitigated``, is this module's; the scratch copies of
    # everything else are dropped).  All at once, in one ``update``: a function
    # found there finds the others it calls.  (No class outside the pool side:
    # the scratch copy of one would be cyclic garbage.)
    with _pool_side_lock:
        if _POOL_SIDE_NAMES[0] not in names:  # (not defined by another thread meanwhile)
            _define_pool_side_locked(names)


#: Held while a worker defines the pool side: threads that reach it at once
#: get one definition (the same functions, which pickle by reference).
_pool_side_lock = _thread.RLock()


def _define_pool_side_locked(names):  # type: (dict[str, Any]) -> None
    scratch = {  # type: dict[str, Any]
        "__name__": __name__,
        "__package__": __package__,
        "__spec__": __spec__,
        "__file__": __file__,
        "__builtins__": __builtins__,
        "_DEFINING_POOL_SIDE": True,
    }
    loader = __spec__.loader  # type: Any
    exec(loader.get_code(__name__), scratch)
    function = type(_define_pool_side_locked)  # type: Any

    def rebind(value):  # type: (Any) -> Any
        rebound = function(value.__code__, names, value.__name__, value.__defaults__, value.__closure__)
        rebound.__kwdefaults__ = value.__kwdefaults__
        rebound.__doc__ = value.__doc__
        rebound.__qualname__ = value.__qualname__
        return rebound

    defined = {}  # type: dict[str, Any]
    for name in _POOL_SIDE_NAMES:
        value = scratch[name]
        if type(value) is function:
            value = rebind(value)
        elif isinstance(value, type):
            for attr, member in list(vars(value).items()):
                if type(member) is function:
                    setattr(value, attr, rebind(member))
                elif isinstance(member, (staticmethod, classmethod)) and type(member.__func__) is function:
                    setattr(value, attr, type(member)(rebind(member.__func__)))
                elif isinstance(member, property):
                    parts = [rebind(f) if type(f) is function else f for f in (member.fget, member.fset, member.fdel)]  # type: list[Any]
                    setattr(value, attr, property(parts[0], parts[1], parts[2], member.__doc__))
        defined[name] = value
    scratch.clear()  # (the scratch functions and their namespace: a cycle)
    names.update(defined)


_exit_import_lock = _thread.allocate_lock()
_exit_import_depth = 0
_saved_register = None  # type: Any


if _POOL_SIDE:

    class imports_during_exit:  # (used as a function: ``with imports_during_exit():``)
        """Around an import of a ``concurrent.futures`` module that may first
        happen during the program's exit (the first failed task or broken pool
        then): ``concurrent.futures.process`` and ``.thread`` register an exit hook
        with ``threading._register_atexit`` when imported, which raises once
        threading's exit has begun, and the import failed.  Then the hook runs at
        once instead, as it would have run at the exit's start: the module knows
        the exit has begun (a pool of its own made later refuses work, as the
        standard library's pools do during the exit; skipping the hook let one
        run, and the exit then waited for its threads for ever).  Nested and
        concurrent uses share one replacement (``_exit_import_depth``)."""

        def __enter__(self):  # type: () -> None
            import threading

            global _exit_import_depth, _saved_register
            if not getattr(threading, "_SHUTTING_DOWN", False):
                self.counted = False
                return
            with _exit_import_lock:
                if _exit_import_depth == 0:
                    _saved_register = threading._register_atexit  # type: ignore[attr-defined]
                    threading._register_atexit = _run_now  # type: ignore[attr-defined]
                _exit_import_depth += 1
            self.counted = True

        def __exit__(self, *exc):  # type: (*object) -> None
            global _exit_import_depth, _saved_register
            if not self.counted:
                return
            import threading

            with _exit_import_lock:
                _exit_import_depth -= 1
                if _exit_import_depth == 0:
                    threading._register_atexit = _saved_register  # type: ignore[attr-defined]
                    _saved_register = None

    def _run_now(func, *args, **kwargs):  # type: (Any, *Any, **Any) -> None
        """``threading._register_atexit`` once the exit has begun: the hook runs now."""
        func(*args, **kwargs)


def _bind_main_side(names):  # type: (dict[str, Any]) -> None
    import _signal  # type: ignore[import-not-found,unused-ignore]
    from _operator import itemgetter  # type: ignore[import-not-found,unused-ignore]
    from itertools import repeat

    names.update(_signal=_signal, _repeat=repeat, _first=itemgetter(0))
    #: The two handlers that are not functions, as ``_signal`` gives them (0 and
    #: 1; equal to :mod:`signal`'s enum members).
    names["SIG_DFL"] = _signal.SIG_DFL
    names["SIG_IGN"] = _signal.SIG_IGN
    #: ``signal.set_wakeup_fd(fd)`` without importing ``signal`` (and enum): from
    #: then on every signal Python handles writes a byte to ``fd``; returns the
    #: descriptor installed before (-1 for none).  Main thread of the main
    #: interpreter only.  The C function itself, so that ``map`` can call it with
    #: no Python frame (no point where a KeyboardInterrupt could cut off its result).
    names["set_signal_wakeup_fd"] = _signal.set_wakeup_fd


__all__ = [
    "SIG_DFL",
    "SIG_IGN",
    "VERSION",
    "WITH_ENTRY_INTERRUPTIBLE",
    "ExecFailure",
    "InterpreterError",
    "NotShareableError",
    "PickleBuffer",
    "PicklingError",
    "QueueEmpty",
    "QueueNotFoundError",
    "RLock",
    "allocate_lock",
    "create_interpreter",
    "current_interpreter_id",
    "daemon_threads_allowed",
    "destroy_interpreter",
    "dumps",
    "ended_on_unhandled_ctrl_c",
    "get_ident",
    "held",
    "is_main_thread",
    "loads",
    "lock_is_owned",
    "lock_level",
    "main_interpreter_id",
    "os_thread_started",
    "outer_level",
    "queue_bind",
    "queue_count",
    "queue_count_if_open",
    "queue_create",
    "queue_destroy",
    "queue_exists",
    "queue_get",
    "queue_get_counted",
    "queue_is_full",
    "queue_put",
    "queue_put_nowait",
    "queue_release",
    "queue_take",
    "raise_sigint",
    "reacquire",
    "register_atexit",
    "register_atexit_unwrapped",
    "release_all",
    "release_if_owned",
    "run_string",
    "set_async_exc",
    "set_signal_wakeup_fd",
    "sigint_handler",
    "sigint_swapper",
    "start_thread",
    "start_thread_object",
    "swap_sigint_handler",
    "thread_count",
    "tracing_allocations",
    "wrap_thread_starts",
]

VERSION = sys.version_info[:2]  # type: tuple[int, int]

#: Whether ``with lock:`` can leave ``lock`` held when a signal handler raises
#: (a KeyboardInterrupt): CPython gh-148874, in 3.14 only.  There ``with``
#: calls ``__enter__`` with a CALL that runs pending signal handlers after the
#: call returns, before the block's protection starts; 3.13's BEFORE_WITH does
#: not, and 3.15 skips that check after a LOAD_SPECIAL (gh-150911, not in
#: 3.14.10).  Measured: 50,000 leaks in 100,000 interrupted ``with`` blocks on
#: 3.14.10, none on 3.13 and 3.15.2.
WITH_ENTRY_INTERRUPTIBLE = VERSION == (3, 14)  # type: bool

#: Whether destroying an interpreter gives its memory back.  On 3.13 CPython
#: frees an interpreter's obmalloc arenas only when no block in them is still
#: allocated (gh-113055): every destroyed worker interpreter leaks 3 MiB, and
#: more after imports (about 9 MiB after jinja2, PyYAML and packaging).
INTERPRETER_MEMORY_FREED = VERSION >= (3, 14)  # type: bool

InterpreterError = _interpreters.InterpreterError  # type: type[Exception]
NotShareableError = _interpreters.NotShareableError  # type: type[Exception]

# Unbound-item operations (what happens to an item when the interpreter that put it
# is destroyed): the same numbers on every supported version.
_UNBOUND_REMOVE = 1  # type: Literal[1]


# ----------------------------------------------------- CPython crash mitigations
# Each names its upstream issue; each runs once, in the main interpreter, before
# the first worker interpreter exists (see create_interpreter).
_mitigated = False


if _POOL_SIDE:

    def _mitigate_crashes():  # type: () -> None
        global _mitigated
        if VERSION == (3, 13):
            # gh-136421 / gh-136423 (fixed in 3.14 by gh-136583): _datetime initializes
            # its static types in whichever interpreter imports it first, without a
            # lock, and finalizes them again in each; several subinterpreters importing
            # datetime at once (email.utils, tomllib, yaml, dateutil, requests, ...)
            # corrupt the heap ("double free or corruption", SIGSEGV).  Importing it
            # in the main interpreter first makes the main interpreter own those
            # types, as 3.14 does at start-up.
            import _datetime  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

            _fill_ctypes_field_table()
        _mitigated = True  # (after: a second worker thread must not go ahead meanwhile)

    def _fill_ctypes_field_table():  # type: () -> None
        """ctypes: the first simple ctypes type created in the process fills a
        process-wide table of field descriptors (``_ctypes_get_fielddesc``) after
        setting its "initialized" flag, without a lock, so interpreters importing
        ctypes at once (tasks importing ctypes or uuid, or two workers' watchdogs
        interrupting tasks at the same moment) read a half-filled table: SIGSEGV in
        ctypes/__init__.py, or "class must define a '_type_' attribute" for a
        supported type.  On 3.13.0: 1 process in 60 with four workers importing it
        together; with one simple type created here first, 0 in 100 (importing
        _ctypes costs 0.4 ms, in the main interpreter only).  3.14.10 and 3.15.2
        fail the same way and this does not cure them: there, every interpreter's
        ``_ctypes`` exec rewrites the shared table (no "initialized" flag any
        more), so an import in one interpreter races type creation in any other;
        not applied, not curable from Python (docs/extensions.md).  A Python
        without ctypes has no race."""
        try:
            import _ctypes  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return
        type("_FieldTableFilled", (_ctypes._SimpleCData,), {"_type_": "O"})

    #: The stdlib wrappers that register ``_interpqueues``' QueueEmpty and QueueFull
    #: (see :func:`_register_queue_errors`).
    _QUEUE_WRAPPERS = (
        ("interpreters.queues", "test.support.interpreters.queues")
        if VERSION == (3, 13)
        else ("concurrent.interpreters._queues",)
    )


_queue_errors_registered = False


if _POOL_SIDE:

    def _register_queue_errors():  # type: () -> None
        """Give ``_interpqueues`` its QueueEmpty and QueueFull classes in this
        interpreter before any get or put can need them.

        The C module has no classes of its own for an empty or a full queue: the
        first time a get finds its queue empty (or a put finds it full) it imports
        its stdlib wrapper, whose last line registers them.  That import is Python
        code; a signal handler that runs inside it, in the main thread, and gets from
        an empty queue (a pool call in the handler, whose take of results finds the
        queue emptied by another thread) finds the wrapper half imported, no class
        registered, and CPython crashes (SIGSEGV in ``PyObject_CallOneArg`` on a
        NULL type; 3.13.0, 3.13.18, 3.14.10 and 3.15.2; no upstream issue found;
        reproducer in tests/test_crashes.py).  Registering our own classes, with
        the first queue interpexec creates in the main interpreter (every get and
        put of interpexec's is on such a queue), leaves no such import to
        interrupt, and costs importing ``queue`` (0.5 ms; the wrapper's QueueFull
        is a ``queue.Full``), where importing the wrapper costs 27 ms on 3.13 (it
        loads unittest) and 1.4 to 3.7 ms on 3.14+.

        The C module lets a wrapper register its classes again (it does so when
        reloaded): a program that imports the wrapper later gets the wrapper's own
        classes from then on, as without interpexec.  Not done when a wrapper is in
        ``sys.modules`` already: the module is there before its body runs, and the
        registration is its body's last line, so a wrapper imported meanwhile by
        another thread still registers after these.  Until then a raw
        ``_interpqueues`` get from an empty queue raises this QueueEmpty, a
        ``queue.Empty``, and a put into a full one this QueueFull, a
        ``queue.Full``, as the wrapper's are."""
        global _queue_errors_registered
        _queue_errors_registered = True  # (first: tried once, whatever happens)
        import queue

        base = _interpqueues.QueueError
        empty = type("QueueEmpty", (base, queue.Empty), {"__module__": __name__})
        full = type("QueueFull", (base, queue.Full), {"__module__": __name__})
        # (The wrapper's Queue class too, which the C module makes shareable; no
        # instance of this one exists, so none is ever shared.)
        queue_type = type("Queue", (), {"__module__": __name__, "__slots__": ()})
        register, modules = _interpqueues._register_heap_types, sys.modules  # type: ignore[attr-defined]
        # From the test to the registration, no call: no other thread runs in
        # between (the GIL changes hands only where a signal handler could run),
        # so a wrapper imported by another thread either is in sys.modules here,
        # or registers its classes after these.  (Tested after the classes are
        # made: a look first and a registration after those calls let a whole
        # import of the wrapper in between, whose classes these then replaced.)
        if _QUEUE_WRAPPERS[0] not in modules and _QUEUE_WRAPPERS[-1] not in modules:
            register(queue_type, empty, full)


#: Interpreters are created and destroyed one at a time in the process: CPython
#: 3.13.0 crashed (SIGSEGV in a queue lookup) when several workers destroyed and
#: re-created their interpreters at once around os.fork(); creation and
#: destruction are rare, so serializing them costs nothing measurable.
_lifecycle_lock = _thread.allocate_lock()


if _POOL_SIDE:
    #: Why no interpreter is created while tracemalloc traces (see create_interpreter).
    TRACING_REFUSAL = (
        "tracemalloc is tracing memory allocations, and CPython crashes when a subinterpreter is "
        "created or destroyed while it does (CPython gh-134604, gh-144172): call tracemalloc.stop() "
        "(or run without -X tracemalloc / PYTHONTRACEMALLOC) before the pool starts its workers"
    )

    def tracing_allocations():  # type: () -> bool
        """Whether :mod:`tracemalloc` traces memory allocations in this process."""
        try:
            import _tracemalloc  # (built in: no file, no cost worth counting)
        except ImportError:  # a Python built without it traces nothing
            return False
        return bool(_tracemalloc.is_tracing())

    def create_interpreter():  # type: () -> int
        """Create an isolated interpreter (own GIL, own obmalloc) and return its id.

        Refused (RuntimeError) while tracemalloc traces: with it, 3.14.10 crashes
        creating the first one (SIGSEGV), and 3.13.0 at exit ("double free or
        corruption"); upstream, destroying one while tracing reads freed memory
        on every version (gh-144172, open)."""
        if not _mitigated:
            _mitigate_crashes()
        if tracing_allocations():
            raise RuntimeError(TRACING_REFUSAL)
        with _lifecycle_lock:
            return int(_interpreters.create())


def destroy_interpreter(interp_id):  # type: (int) -> None
    # Destroy an interpreter; it must not be running in any thread.
    with _lifecycle_lock:
        _interpreters.destroy(interp_id)


def current_interpreter_id():  # type: () -> int
    return int(_interpreters.get_current()[0])


def main_interpreter_id():  # type: () -> int
    return int(_interpreters.get_main()[0])


if _POOL_SIDE:

    class ExecFailure:
        """An exception that escaped code run by :func:`run_string` (it cannot cross)."""

        __slots__ = ("message", "traceback", "type_name")

        def __init__(self, type_name, message, traceback):  # type: (str, str, str) -> None
            self.type_name = type_name
            self.message = message
            self.traceback = traceback

    def run_string(interp_id, source, shared=None):  # type: (int, str | CodeType, dict[str, Any] | None) -> ExecFailure | None
        """Run ``source`` (text, or a code object compiled in the caller) in the
        interpreter's ``__main__`` in the calling thread.

        ``shared`` binds shareable values (such as a memoryview) as globals of that
        ``__main__`` first.  Blocks until the code finishes.  Returns None on success,
        or a description of the exception that escaped.

        Text is compiled here first: on 3.13 text goes through
        ``run_eval_code_obj``, which clears CPython's record of the main module's
        unhandled KeyboardInterrupt (gh-128130, fixed in 3.14), so a worker starting
        after the program's Ctrl-C made it exit with status 1 instead of dying of
        SIGINT; a code object runs through ``PyEval_EvalCode``.
        """
        code = compile(source, "<interpexec>", "exec") if isinstance(source, str) else source
        excinfo = _interpreters.exec(interp_id, code, shared or {})
        if excinfo is None:
            return None
        tp = getattr(excinfo, "type", None)
        type_name = str(getattr(tp, "__qualname__", None) or getattr(tp, "__name__", "Exception"))
        message = str(getattr(excinfo, "msg", "") or "")
        text = getattr(excinfo, "errdisplay", None) or getattr(excinfo, "formatted", None)
        return ExecFailure(type_name, message, str(text) if text else repr(excinfo))


#: What ``_interpqueues.create`` takes after the maxsize, and ``put`` after the
#: queue and the object (the same on each version): on 3.13 the format (0:
#: shareable objects only) and the unbound-item operation; on 3.14+ the
#: unbound-item operation and the fallback (-1: the default; interpexec never
#: puts what would need it).
if sys.version_info < (3, 14):
    QUEUE_PUT_A, QUEUE_PUT_B = 0, _UNBOUND_REMOVE  # type: Any, Any  # (the stubs want literals per version)
else:
    QUEUE_PUT_A, QUEUE_PUT_B = _UNBOUND_REMOVE, -1


def queue_create(maxsize=0):  # type: (int) -> int
    if not _queue_errors_registered and _IN_MAIN_INTERPRETER:  # (signal handlers run only there)
        _register_queue_errors()
    qid = int(_interpqueues.create(maxsize, QUEUE_PUT_A, QUEUE_PUT_B))
    _interpqueues.bind(qid)
    return qid


#: ``queue_put(qid, obj)`` as ``QUEUE_PUT(qid, obj, QUEUE_PUT_A, QUEUE_PUT_B)``: a C
#: call, with no Python frame in which a Ctrl-C could land first.  (Four
#: positional arguments on every version: a ``*tail`` costs a list and a tuple
#: per call, 100-200 ns.)
QUEUE_PUT = _interpqueues.put  # type: Any


def queue_put(qid, obj):  # type: (int, Any) -> None
    QUEUE_PUT(qid, obj, QUEUE_PUT_A, QUEUE_PUT_B)


def queue_get(qid, default=None):  # type: (int, Any) -> Any
    # Return the next item of the queue, or ``default`` when it is empty.
    #
    # The count is checked first: the error a get from an empty queue raises makes
    # the C module import its stdlib wrapper (``test.support.interpreters``, with
    # unittest and traceback, on 3.13; ``concurrent.interpreters`` on 3.14+), tens
    # of milliseconds and a few MB in every worker the first time it goes idle.
    if not _interpqueues.get_count(qid):
        return default
    return queue_get_counted(qid, default)


def queue_get_counted(qid, default=None):  # type: (int, Any) -> Any
    # :func:`queue_get` for a caller that has just found the queue not empty:
    # no second count (every call into the queue module takes its registry's
    # mutex, which all interpreters share).  Another taker may have emptied it
    # since.
    try:
        return _interpqueues.get(qid)[0]
    except _queue.Empty:
        return default
    except Exception:
        # The C module raises the stdlib wrapper's QueueEmpty, importing that wrapper
        # on first use; where it cannot (a Python without the test package on 3.13)
        # another error comes out.  Tell emptiness from real errors by the count.
        if _interpqueues.get_count(qid) == 0:
            return default
        raise


def queue_take(qid, n, into):  # type: (int, int, deque[Any]) -> None
    # Append the next ``n`` items of the queue (it holds ``n``) to ``into``, in one
    # C-level loop: no Python code runs between taking an item and storing it, so a
    # Ctrl-C cannot land in between and lose it.
    if _first is None:  # (an interpreter that imported the worker loop first)
        _bind_main_side(globals())
    into.extend(map(_first, map(_interpqueues.get, _repeat(qid, n))))


def queue_exists(qid):  # type: (int) -> bool
    try:
        _interpqueues.get_count(qid)
    except QueueNotFoundError:
        return False
    return True


def queue_count(qid):  # type: (int) -> int
    return int(_interpqueues.get_count(qid))


def queue_count_if_open(qid):  # type: (int) -> int
    # :func:`queue_count`, or 0 for a queue destroyed meanwhile: for a pool's
    # checks made without its locks, which may read a queue its pool closed a
    # moment ago (a destroyed queue holds nothing more to take).
    try:
        return int(_interpqueues.get_count(qid))
    except QueueNotFoundError:
        return 0


def queue_is_full(qid):  # type: (int) -> bool
    return bool(_interpqueues.is_full(qid))


def queue_bind(qid):  # type: (int) -> None
    # Take a reference to the queue (from any interpreter); the queue is
    # destroyed when the last reference is released.
    _interpqueues.bind(qid)


def queue_release(qid):  # type: (int) -> None
    try:
        _interpqueues.release(qid)
    except QueueNotFoundError:  # already gone: nothing to release
        pass


def queue_put_nowait(qid, obj):  # type: (int, Any) -> bool
    # Put unless the queue is at its maxsize; False when it is full.  Checks first:
    # the error a put into a full queue raises makes CPython import its stdlib
    # wrapper module (35 ms in a 3.13 worker).
    if _interpqueues.is_full(qid):
        return False
    try:
        queue_put(qid, obj)
    except Exception as exc:
        # Full since the check (another putter): the C module raises its
        # QueueFull (a queue.Full: this module's, see _register_queue_errors, or
        # its stdlib wrapper's), or, in a worker where it cannot import that
        # wrapper (3.13 without the test package), another error, told apart by
        # the state.  Anything else (the queue is gone) raises.
        import queue

        if isinstance(exc, queue.Full) or _interpqueues.is_full(qid):
            return False
        raise
    return True


def queue_destroy(qid):  # type: (int) -> None
    # Drop the queue (and anything still in it).
    try:
        _interpqueues.destroy(qid)
    except QueueNotFoundError:  # already gone: nothing to drop
        pass


# ---------------------------------------------------------------- threads
_ctypes_token_fds = None  # type: tuple[int, int] | None  # (the main interpreter's: see ctypes_token)
_ctypes_token_lock = _thread.allocate_lock()

if _POOL_SIDE:

    def ctypes_token():  # type: () -> tuple[int, int]
        """The process's ctypes token, handed to every worker: a pipe holding
        one byte, which a worker reads before its first ``import ctypes`` and
        writes back after (``import_ctypes``).  ctypes keeps a table of its simple
        types that all interpreters share, which ``import ctypes`` rewrites and
        creating a type reads, with no lock (see _fill_ctypes_field_table): on 3.14
        and 3.15 two workers' watchdogs interrupting tasks at the same moment
        (a pool stopped at a Ctrl-C, deadlines passing together) could crash
        the process.  Made on first use; a forked child makes its own."""
        global _ctypes_token_fds
        with _ctypes_token_lock:
            if _ctypes_token_fds is None:
                rfd, wfd = os.pipe()
                os.write(wfd, b"\0")
                _ctypes_token_fds = (rfd, wfd)
            return _ctypes_token_fds

    def forget_ctypes_token_after_fork():  # type: () -> None
        # In a forked child: the token's pipe is the parent's too (a byte taken
        # here would be missing there); the child's pools get a pipe of its own.
        global _ctypes_token_fds, _ctypes_token_lock
        _ctypes_token_lock = _thread.allocate_lock()  # (a parent thread may have held it)
        fds, _ctypes_token_fds = _ctypes_token_fds, None
        for fd in fds or ():
            try:
                os.close(fd)
            except OSError:
                pass


_held_token = None  # type: tuple[int, int] | None


def hold_ctypes_token(fds):  # type: (tuple[int, int]) -> None
    # In a worker: the pool's ctypes token (see ctypes_token), for import_ctypes.
    global _held_token
    _held_token = fds


def ctypes_ready():  # type: () -> bool
    # Whether this interpreter has imported ctypes (an import still running in
    # another thread does not count).
    module = sys.modules.get("ctypes")
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def import_ctypes():  # type: () -> Any
    # ctypes, imported the first time in this interpreter holding the process's
    # ctypes token, if this interpreter was given one (see ctypes_token): the
    # import creates ctypes' types, reading the table another interpreter's
    # import may be rewriting.  Only the import: the calls use types made by
    # then.  (The import releases this interpreter's GIL, which a task may keep
    # for a long C call meanwhile: the token is held that long, so a worker
    # imports here before it takes locks its task thread waits for.)
    if ctypes_ready():
        return sys.modules["ctypes"]
    token = _held_token
    taken = False
    try:
        if token is not None:
            taken = bool(os.read(token[0], 1))  # (b"": the pipe's other end closed, not expected)
        try:
            import ctypes
        except ImportError:
            raise
        except Exception:
            # Seen once on 3.14 under a Ctrl-C storm, in a worker's watchdog thread:
            # the first import of ctypes failed inside ctypes/__init__ ("class must
            # define a '_type_' attribute").  A failed import leaves nothing in
            # sys.modules; importing again is the remedy.
            sys.modules.pop("ctypes", None)
            import ctypes
        return ctypes
    finally:
        if taken and token is not None:
            os.write(token[1], b"\0")


def set_async_exc(thread_id, exc):  # type: (int, type[BaseException] | None) -> None
    # Raise ``exc`` asynchronously in a thread of the calling interpreter
    # (``PyThreadState_SetAsyncExc``; None cancels a pending one: none can be
    # before ctypes was imported here, and the cancel imports nothing).
    if exc is None and not ctypes_ready():
        return
    ctypes = import_ctypes()
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


def start_thread(fn):  # type: (Any) -> Any
    # Start a joinable, non-daemon thread without the threading module (which a
    # worker does not import for itself); returns a handle with ``join()``.
    # Through whatever wrap_thread_starts installed by then, as task code's.
    return _thread.start_joinable_thread(fn, daemon=False)


if _POOL_SIDE:

    def start_thread_object(thread):  # type: (Any) -> None
        """``thread.start()`` (a ``threading.Thread``) that an exception from a
        signal handler cannot leave with the new thread blocked for ever.

        ``start()`` waits for the new thread on an Event, whose ``wait`` enters a
        Condition in Python code: an exception right after that Condition took its
        lock leaves the lock held by this thread, and the new thread then blocks
        in ``_bootstrap_inner`` setting the event, never running.  Here the event's
        lock is re-entrant, so that the lock this thread may have kept is told
        apart from the new thread's own hold, and released."""
        import threading

        started = threading.Event()
        started._cond = threading.Condition(RLock())  # type: ignore[attr-defined]
        thread._started = started
        try:
            thread.start()
        except BaseException:
            release_if_owned(started._cond._lock)  # type: ignore[attr-defined]
            if not os_thread_started(thread):
                # (start() takes a thread out of its "starting" table only on an
                # Exception: cut short otherwise, it stays listed by enumerate().)
                with threading._active_limbo_lock:  # type: ignore[attr-defined]
                    threading._limbo.pop(thread, None)  # type: ignore[attr-defined]
            raise

    def os_thread_started(thread):  # type: (Any) -> bool
        """Whether ``thread.start()`` (a ``threading.Thread``) got as far as starting
        its OS thread.  For a start an exception cut short: ``start()`` waits in
        Python for the new thread to run, so a signal handler's exception can leave
        it after the thread started (it runs) or before (it never will).  The
        thread's handle (``_handle`` on 3.13, ``_os_thread_handle`` since 3.14) has
        an ident from the moment the C call that starts the thread returns."""
        handle = getattr(thread, "_os_thread_handle", None) or getattr(thread, "_handle", None)
        return handle is not None and bool(handle.ident)


def thread_count():  # type: () -> int
    # Threads of the calling interpreter besides its main one (``_thread._count``).
    return int(_thread._count())


def wrap_thread_starts(wrap):  # type: (Any) -> None
    # Make every thread started from now on in this interpreter run
    # ``wrap(function)`` instead of ``function`` (``_thread.start_new_thread``,
    # ``start_new``, ``start_joinable_thread``, and ``threading``'s copy of the
    # last, if threading is already imported).  Called once per worker interpreter;
    # ``_thread`` is per interpreter, so nothing else is affected.
    original_new = _thread.start_new_thread
    original_joinable = _thread.start_joinable_thread

    def start_new_thread(function, *args, **kwargs):  # type: (Any, *Any, **Any) -> Any
        return original_new(wrap(function), *args, **kwargs)

    def start_joinable_thread(function, *args, **kwargs):  # type: (Any, *Any, **Any) -> Any
        return original_joinable(wrap(function), *args, **kwargs)

    _thread.start_new_thread = _thread.start_new = start_new_thread
    _thread.start_joinable_thread = start_joinable_thread
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._start_joinable_thread = start_joinable_thread  # type: ignore[attr-defined]


def end_threading():  # type: () -> list[Any]
    # For an interpreter about to end (a worker's): what threading._shutdown()
    # does before it joins the threads left, which CPython runs only when the
    # interpreter is finalized, after the worker has waited for those threads.
    # No more threading atexit registrations; main_thread() is seen as ended (a
    # thread looping on its is_alive() ends, as in a worker process); and the
    # registered callbacks (concurrent.futures' thread pools wake and join their
    # idle threads: a pool a task left would otherwise wait for work for ever)
    # are taken out and returned, newest first, for the caller to run.  Nothing
    # when the interpreter never imported threading.
    threading = sys.modules.get("threading")
    if threading is None or getattr(getattr(threading, "__spec__", None), "_initializing", False):
        return []  # (never imported; or a thread left is importing it: nothing registered yet)
    try:
        main = threading._main_thread
        callbacks = threading._threading_atexits
    except AttributeError:  # (not expected: a threading CPython changed)
        return []
    threading._SHUTTING_DOWN = True  # type: ignore[attr-defined]
    handle = getattr(main, "_os_thread_handle", None) or getattr(main, "_handle", None)  # (3.14+; 3.13)
    try:
        if handle is not None and not handle.is_done():
            handle._set_done()
    except Exception:  # (not expected either; the callbacks matter more)
        pass
    calls = list(reversed(callbacks))
    del callbacks[:]  # (run once: CPython's finalization runs what is left)
    return calls


if _POOL_SIDE:

    def daemon_threads_allowed():  # type: () -> bool
        """Whether this interpreter may start daemon threads (an isolated
        subinterpreter may not; a pool's resolver thread is one)."""
        return bool(_thread.daemon_threads_allowed())


def is_main_thread():  # type: () -> bool
    # True in the main thread of the main interpreter: the one thread Python
    # runs signal handlers in (so the one a Ctrl-C must wake).
    return _IN_MAIN_INTERPRETER and _thread.get_ident() == _thread._get_main_thread_ident()  # type: ignore[attr-defined]


if _POOL_SIDE:

    def swap_sigint_handler(handler):  # type: (Any) -> Any
        """``signal.signal(SIGINT, handler)`` without :mod:`signal`'s enum conversions
        (a fifth of the cost); SIG_DFL/SIG_IGN come back as 0/1.  Main thread only."""
        return _signal.signal(_signal.SIGINT, handler)

    def sigint_handler():  # type: () -> Any
        return _signal.getsignal(_signal.SIGINT)

    def ended_on_unhandled_ctrl_c():  # type: () -> bool
        """Whether the program ends on an unhandled KeyboardInterrupt: the exception
        CPython printed last (``sys.last_exc``) is one, and it unwound the outermost
        frame.  One printed and handled earlier (by ``code.InteractiveInterpreter``,
        a debugger, a REPL's prompt) is not the end of the program."""
        exc = getattr(sys, "last_exc", None)
        if not isinstance(exc, KeyboardInterrupt) or hasattr(sys, "ps1"):  # (ps1: interactive)
            return False
        tb = exc.__traceback__
        return tb is None or tb.tb_frame.f_back is None

    def sigint_swapper():  # type: () -> Any
        """``functools.partial(signal.signal, SIGINT)``: a C callable that installs a
        SIGINT handler and returns the one it replaced, with no Python frame in
        between (none where a KeyboardInterrupt could land).  Main interpreter only
        (it imports functools)."""
        import functools

        return functools.partial(_signal.signal, _signal.SIGINT)

    def raise_sigint():  # type: () -> None
        _signal.raise_signal(_signal.SIGINT)


if TYPE_CHECKING:  # (bound below; not annotations: on 3.14+ they compile to a module __annotate__)
    SIG_DFL = SIG_IGN = 0  # type: int
    set_signal_wakeup_fd = None  # type: Any
if not _IN_WORKER:
    _bind_main_side(globals())


#: ``release_all(lock)``: release an RLock the calling thread holds, however
#: many times (the C RLock's ``_release_save``, which ``threading.Condition.wait``
#: uses).  ``reacquire(lock, held(lock))``, with ``held`` taken before the
#: release, takes it again as deeply (``_acquire_restore``).  Both are the C
#: methods themselves: no Python frame, where a Ctrl-C could land between the
#: lock's release (or re-acquisition) and the caller's ``try`` (or its end).
#: The safe shape: ``saved = held(lock)``; ``try: release_all(lock); ...``
#: ``finally: reacquire(lock, saved)``.
release_all = _thread.RLock._release_save  # type: Callable[[Any], Any]  # type: ignore[attr-defined]
reacquire = _thread.RLock._acquire_restore  # type: Callable[[Any, Any], None]  # type: ignore[attr-defined]


if _POOL_SIDE:

    def held(lock):  # type: (Any) -> tuple[int, int]
        """What :data:`reacquire` takes to hold ``lock`` again as this thread holds
        it now: ``_release_save``'s own result, computed before releasing."""
        return lock._recursion_count(), _thread.get_ident()

    def lock_is_owned(lock):  # type: (Any) -> bool
        """Whether the calling thread holds the RLock ``lock`` (its ``_is_owned``)."""
        return bool(lock._is_owned())


#: ``lock_level(lock)``: how many times the calling thread holds the RLock
#: ``lock`` (0: not at all).  The C RLock's ``_recursion_count`` itself (any
#: RLock of the package is one), called with no Python frame: about 30 ns.
lock_level = _thread.RLock._recursion_count  # type: Callable[[Any], int]  # type: ignore[attr-defined]


if _POOL_SIDE:

    def release_if_owned(lock, level=0):  # type: (Any, int) -> None
        """Release the levels of an RLock that the calling thread holds above
        ``level`` (by default every level).  A KeyboardInterrupt can land right after
        ``__enter__`` of a ``with lock:`` returns and before the block's protection
        starts, so the lock is never released (CPython's "with is not signal safe");
        public entry points call this when an exception leaves them, with
        :func:`outer_level` of the level the thread held when it entered."""
        while lock._recursion_count() > level:
            lock.release()

    #: Modules whose frames may hold the pool's locks or its futures' conditions:
    #: the package's own, and ``concurrent.futures.wait()``/``as_completed()``'s.
    _LOCKING_MODULES = ("interpexec.", "concurrent.futures._base")

    def outer_level(level):  # type: (int) -> int
        """The part of ``level`` (a lock level the calling thread held when a public
        entry point began, now failing) that an outer frame holds legitimately: all
        of it if this entry point runs inside the pool's own code or inside
        ``concurrent.futures.wait()`` (a signal handler or a finalizer called
        there; releasing that frame's level would leave it running unlocked), else
        none: no caller holds the pool's locks, so a level held on entry is one an
        earlier Ctrl-C left behind, which must go.  Called only on the failure path
        with a level above 0 (it walks the stack)."""
        if not level:
            return 0
        frame: Any = sys._getframe(1)
        # The entry point's own frames (this package's), then its caller's.
        while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(_LOCKING_MODULES):
            frame = frame.f_back
        while frame is not None:
            if str(frame.f_globals.get("__name__", "")).startswith(_LOCKING_MODULES):
                return level
            frame = frame.f_back
        return 0

    def futures_held_up_the_stack():  # type: () -> set[int]
        """The ids of the futures whose conditions a frame further up this thread's
        stack may hold legitimately, for a release of conditions a Ctrl-C left
        held (a signal handler can run inside those frames): those that
        ``concurrent.futures.wait()`` and ``as_completed()`` wait on (they hold
        every one while they install or remove their waiter), and the one a
        frame of this package works on (``self`` or ``fut``).  A frame of either
        module above that holds none (a done-callback run from it) protects
        nothing."""
        from concurrent.futures import Future

        held: set[int] = set()
        frame: Any = sys._getframe(1)
        while frame is not None:
            module = str(frame.f_globals.get("__name__", ""))
            if module.startswith(_LOCKING_MODULES):
                local = frame.f_locals
                if module == "concurrent.futures._base":
                    futures = local.get("fs")
                    owner = local.get("self")
                    if futures is None and owner is not None:
                        futures = getattr(owner, "futures", None)  # (_AcquireFutures)
                    # (A collection only: as_completed's ``fs`` is the caller's
                    # iterable, a generator say, until its first line makes a set.)
                    named = frame.f_code.co_name in ("wait", "as_completed", "__enter__", "__exit__")
                    if named and isinstance(futures, (set, frozenset, list, tuple)):
                        held.update(id(f) for f in list(futures))
                else:
                    for name in ("self", "fut"):
                        if isinstance(local.get(name), Future):
                            held.add(id(local[name]))
            frame = frame.f_back
        return held

    def register_atexit(fn):  # type: (Any) -> None
        """Run ``fn`` at interpreter exit before non-daemon threads are joined
        (``threading._register_atexit``, as concurrent.futures does)."""
        import threading

        threading._register_atexit(fn)  # type: ignore[attr-defined]

    def register_atexit_unwrapped(fn):  # type: (Any) -> None
        """:func:`register_atexit` for a C callable, called as it is: the public
        registration wraps it in a Python lambda, whose first bytecode is a point
        where a KeyboardInterrupt can land before ``fn`` runs."""
        import threading

        if threading._SHUTTING_DOWN:  # type: ignore[attr-defined]  # (what _register_atexit checks)
            raise RuntimeError("can't register atexit after shutdown")
        threading._threading_atexits.append(fn)  # type: ignore[attr-defined]
