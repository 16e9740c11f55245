"""Task functions for the shared-buffer tests."""

from __future__ import annotations


def fill(view, start, stop, value):
    for i in range(start, stop):
        view[i] = value
    return stop - start


def identity(x):
    return x


def describe(view):
    return type(view).__name__, view.format, tuple(view.shape), view.readonly, view.nbytes


def total(view):
    return sum(view)


def write_first(view):
    view[0] = 1


def reverse_in_place(view, start, stop):
    view[start:stop] = bytes(reversed(view[start:stop]))
    return stop - start
