"""Task functions for tests/test_transfer.py (importable by workers)."""

from __future__ import annotations

import enum


def second(a, b):
    """Return the second argument unchanged."""
    return b


def identity(x):
    return x


def appended(x):
    """A new object equal to the argument plus one item."""
    return x + x[:1]


def fresh_copy(x):
    """An equal but distinct object (sliced copy)."""
    return x[:-1] + x[-1:]


def kind_and_size(x):
    return type(x).__name__, len(x)


def shadowed():
    return "the function submitted"


#: The function above, after its module-level name was bound to another one:
#: a worker looking ``shadowed`` up by name would run the wrong function.
first_shadowed = shadowed


def shadowed():  # (the second on purpose: see first_shadowed)
    return "another function of the same name"


class Holder:
    """A class whose attributes a test sets in the caller only."""


class Flag(enum.IntEnum):
    """An int subclass: it must cross pickled, to stay a Flag."""

    ON = 1
