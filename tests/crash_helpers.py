"""Tasks for tests/test_crashes.py (importable by reference in workers)."""

from __future__ import annotations

import importlib


def import_and_name(name: str) -> str:
    """Import ``name`` for the first time in this worker."""
    importlib.import_module(name)
    return name
