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
