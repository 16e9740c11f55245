"""Tasks for tests/test_imports.py that import nothing themselves (so what a
worker has loaded is what interpexec loaded), importable by reference."""

from __future__ import annotations


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
