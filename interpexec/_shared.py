"""``interpexec.share()``: lend a buffer to workers without copying it.

All interpreters live in one process, so a worker can read (and, when allowed,
write) the parent's memory directly.  ``share(obj)`` wraps any object that
exposes the buffer protocol (bytes, bytearray, memoryview, array.array, mmap, a
NumPy array, ...).  The task receives a ``memoryview`` over the same memory, with
the object's format and shape; the payload is never copied or pickled.

Ownership rules:

* The view is read-only in the worker unless ``writable=True`` (which needs a
  writable object).
* The parent keeps the object alive at least until the task's future resolves;
  a worker that keeps the view longer keeps the object alive too.
* A task may return the very view it was lent (not a slice of it, and not inside
  a container): the caller then gets a view over its own object, again without a
  copy.  Pickle refuses any other memoryview; return ``bytes(view[a:b])`` (a
  copy) instead.  Worker memory dies with its interpreter, so data a task
  creates always comes back as a copy.
* Nothing synchronizes access: two tasks writing the same bytes, or the parent
  writing while a task reads, is a data race, exactly as with shared memory
  between processes.  Give each task its own slice, or synchronize yourself.

This module is imported inside workers; it stays light.
"""

from __future__ import annotations

import sys

from . import _compat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Shared", "share"]


class Shared:
    """A buffer lent to interpexec workers; see :func:`share`."""

    __slots__ = ("__weakref__", "obj", "view", "writable")

    def __init__(self, obj: Any, *, writable: bool = False) -> None:
        try:
            view = memoryview(obj)
        except TypeError:
            raise TypeError(f"share() needs an object with the buffer protocol, not {type(obj).__name__}") from None
        if writable and view.readonly:
            raise ValueError(f"share(writable=True) needs a writable buffer; this {type(obj).__name__} is read-only")
        if not view.c_contiguous:
            raise ValueError("share() needs a C-contiguous buffer")
        self.obj = obj
        self.view = view
        self.writable = writable

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        view = self.view if self.writable else self.view.toreadonly()
        flat = view if view.ndim == 1 and view.format == "B" else view.cast("B")
        # With protocol 5 and interpexec's encoder the PickleBuffer travels out of
        # band, as a memoryview over this very memory.
        return (_lend, (_compat.PickleBuffer(flat), view.format, tuple(view.shape or ())))

    def __repr__(self) -> str:
        mode = "writable" if self.writable else "read-only"
        return f"<interpexec.Shared {mode} {type(self.obj).__name__} of {self.view.nbytes} bytes>"


def share(obj: Any, *, writable: bool = False) -> Shared:
    """Lend ``obj``'s memory to a task without copying; the task gets a memoryview.

    ``writable=True`` lets the task write into it.  See the module documentation
    for the ownership and data-race rules.
    """
    return Shared(obj, writable=writable)


# In a worker: id(view) -> (view, buffer it was built on) for the views lent to
# the task running now, so that returning one does not copy it back.
_lent: dict[int, tuple[memoryview, Any]] = {}
_LOOP = __package__ + "._worker_main"


def in_worker() -> bool:
    """Whether this interpreter is an interpexec worker: its loop is running
    (``_worker_main.serving``; the loop does not import this module, which a
    worker loads with the first buffer lent to a task)."""
    loop = sys.modules.get(_LOOP)
    return loop is not None and bool(getattr(loop, "serving", False))


def _lend(buffer: Any, fmt: str, shape: tuple[int, ...]) -> memoryview:
    """In a worker: the view a task receives for a lent buffer."""
    view = relend(buffer, fmt, shape)
    if in_worker():
        _lent[id(view)] = (view, buffer)
    return view


def lent_buffer(value: Any) -> Any:
    """The buffer behind ``value`` if it is a view lent to the running task."""
    entry = _lent.get(id(value))
    if entry is not None and entry[0] is value:
        return entry[1]
    return None


def relend(buffer: Any, fmt: str, shape: tuple[int, ...]) -> memoryview:
    """A view of ``fmt`` and ``shape`` over ``buffer``: what a task receives
    (:func:`_lend`), and, in the caller, the view a task returned, rebuilt over
    the caller's memory."""
    view = memoryview(buffer)
    if fmt != "B" or len(shape) != 1:
        try:
            view = view.cast(fmt, shape)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            pass  # a format memoryview cannot cast to: the raw bytes
    return view
