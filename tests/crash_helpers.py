"""Tasks for tests/test_crashes.py (importable by reference in workers)."""

from __future__ import annotations

import importlib


def import_and_name(name: str) -> str:
    """Import ``name`` for the first time in this worker."""
    importlib.import_module(name)
    return name


def import_ctypes_together(started, go, index):
    """Say it is ready, wait for the word, then import ctypes (with the other
    workers doing the same at that moment)."""
    started.put(index)
    go.get(timeout=20)
    import ctypes

    return ctypes.sizeof(ctypes.py_object)
