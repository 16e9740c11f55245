"""Tasks for tests/test_imports.py that import nothing themselves (so what a
worker has loaded is what interpexec loaded), importable by reference.  (No
annotations, and so no ``__future__`` import: see ``annotated``.)"""


def loaded(names):
    """Which of ``names`` this worker has imported (a tuple of bools: crosses natively)."""
    import sys

    return tuple(name in sys.modules for name in names)


def fail(message):
    raise ValueError(message)


def fail_where_error_reporting_cannot_load(message):
    """Raise with interpexec's error packing unloadable in this worker (as when
    a task broke the import system)."""
    import sys

    sys.modules["interpexec._errors"] = None  # (import of it now raises ImportError)
    raise ValueError(message)


def annotated():
    """What of interpexec's modules loaded in this worker carries annotations,
    which every worker would pay for: module and function names (a function's
    ``__annotate__`` on 3.14+, its ``__annotations__`` before), and
    ``"__future__"`` if that module is loaded."""
    import sys

    def carries(obj):
        annotate = getattr(obj, "__annotate__", None)  # (3.14+: never evaluated here)
        if annotate is not None:
            return True
        return sys.version_info < (3, 14) and bool(getattr(obj, "__annotations__", None))

    found = ["__future__"] if "__future__" in sys.modules else []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("interpexec") or module is None:
            continue
        if carries(module):
            found.append(name)
        for value in vars(module).values():
            members = [value, *vars(value).values()] if isinstance(value, type) else [value]
            for member in members:
                fn = getattr(member, "__func__", member)  # (staticmethod, classmethod)
                if getattr(fn, "__module__", None) == name and hasattr(fn, "__code__") and carries(fn):
                    found.append(f"{name}.{fn.__qualname__}")
    return found


def pool_side_defined():
    """Which names of ``_compat``'s pool side this worker has defined."""
    from interpexec import _compat

    names = vars(_compat)
    return [name for name in _compat._POOL_SIDE_NAMES if name in names]


def use_pool_side():
    """Reach every public name of ``_compat`` in this worker (the pool's side is
    defined on first use), then call some of what that defined: what each gave,
    and whether every function defined runs in ``_compat``'s own namespace."""
    import _thread

    from interpexec import _compat
    from interpexec._compat import held, lock_is_owned  # (``from`` goes through __getattr__ too)

    missing = [name for name in _compat.__all__ if not hasattr(_compat, name)]
    names = vars(_compat)
    functions = {}
    for name in _compat._POOL_SIDE_NAMES:
        value = names[name]
        if isinstance(value, type):  # (its methods, static and class methods, properties)
            for attr, member in vars(value).items():
                if isinstance(member, property):
                    parts = {"get": member.fget, "set": member.fset, "del": member.fdel}
                    functions.update((f"{name}.{attr}.{part}", fn) for part, fn in parts.items() if fn)
                else:
                    functions[f"{name}.{attr}"] = getattr(member, "__func__", member)
        else:
            functions[name] = value
    foreign = [name for name, fn in functions.items() if hasattr(fn, "__code__") and fn.__globals__ is not names]
    with _compat.imports_during_exit():  # (a class of the pool side: its methods run here)
        pass
    lock = _thread.RLock()
    lock.acquire()
    lock.acquire()
    state = (held(lock) == (2, _thread.get_ident()), lock_is_owned(lock))
    _compat.release_if_owned(lock, 1)
    state += (_compat.lock_level(lock),)
    _compat.release_if_owned(lock)
    state += (lock_is_owned(lock),)
    return {
        "missing": missing,
        "foreign": foreign,
        "state": list(state),
        "tracing": _compat.tracing_allocations(),
        "outer": _compat.outer_level(0),
        "exc": _compat.ExecFailure("T", "m", "tb").type_name,
    }


def import_the_executor():
    """What a task's module that imports the executor at the top does in a worker."""
    from interpexec import InterpreterPoolExecutor

    return InterpreterPoolExecutor.__name__


#: What keeps its docstring in a worker: the package's own (``help(interpexec)``),
#: and the exception a task itself may meet.
DOCUMENTED = ("interpexec", "interpexec._protocol.Interrupted")


def documented():
    """What of interpexec's modules loaded in this worker carries a docstring,
    which every worker would hold in memory: module names, and the qualified
    names of their functions, classes and methods (``DOCUMENTED`` left out)."""
    import sys

    found = []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("interpexec") or module is None:
            continue
        if module.__doc__ and name not in DOCUMENTED:
            found.append(name)
        for value in vars(module).values():
            if getattr(value, "__module__", None) != name:
                continue
            members = [value, *vars(value).values()] if isinstance(value, type) else [value]
            for member in members:
                fn = getattr(member, "__func__", member)  # (staticmethod, classmethod)
                if not (isinstance(fn, type) or hasattr(fn, "__code__")):
                    continue
                qualname = f"{name}.{fn.__qualname__}"
                if fn.__doc__ and qualname not in DOCUMENTED and (fn is value or fn.__doc__ is not value.__doc__):
                    found.append(qualname)
    return found


def race_to_the_pool_side(n):
    """``n`` threads of this worker reach ``_compat``'s pool side at once: how
    many different ``held`` functions they got, and whether the one they got
    is ``_compat.held`` (so it pickles by reference)."""
    import pickle
    import sys
    import threading

    barrier = threading.Barrier(n)
    got = []

    def reach():
        barrier.wait()
        from interpexec._compat import held

        got.append(held)

    threads = [threading.Thread(target=reach) for _ in range(n)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (this interpreter's GIL changes hands all the time)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    from interpexec import _compat

    try:
        pickles = all(pickle.loads(pickle.dumps(fn)) is fn for fn in got)
    except pickle.PicklingError:  # ("it's not the same object as interpexec._compat.held")
        pickles = False
    return len({id(fn) for fn in got}), all(fn is _compat.held for fn in got), pickles
