"""How a joblib batch travels, on both sides (standard library only: workers
import this module).

Parent: :func:`dumps_batch` pickles the batch's ``(func, args, kwargs)`` triples
into one ``bytes`` with cloudpickle when it is installed (as loky does: functions
and classes defined in the caller's script, lambdas and closures go by value), or
with plain pickle otherwise.  ``bytes`` crosses to the worker without pickling;
out-of-band buffers (``interpexec.share()``, ``bytearray``) travel beside it as
the call's other arguments, lent rather than copied.

Worker: :func:`run_batch` unpickles the triples, calls them in order, and returns
the results pickled the same way (plain pickle, or cloudpickle for values whose
class arrived by value).  An exception that plain pickle cannot send (its class
arrived by value) travels inside a :class:`ByValueError`.
"""

from __future__ import annotations

import sys

from .._compat import PickleBuffer, dumps, loads

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Triple = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

__all__ = ["ByValueError", "dumps_batch", "loads_results", "run_batch"]


class ByValueError(Exception):
    """Carries a task's exception whose class only cloudpickle can send (one
    defined in the caller's script), with the worker-side traceback text."""

    def __init__(self, blob: bytes, traceback_text: str) -> None:
        super().__init__(blob, traceback_text)
        self.blob = blob
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        return self.traceback_text


def dumps_batch(items: list[Triple]) -> tuple[bytes, list[PickleBuffer]]:
    """Pickle a batch in the parent: the pickle, and the buffers that travel out
    of band beside it (``interpexec.share()``, ``bytearray``: not copied into the
    pickle).  A batch that cannot be pickled raises an error that names the way out."""
    buffers: list[PickleBuffer] = []
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        try:
            return dumps(items, protocol=5, buffer_callback=buffers.append), buffers
        except Exception as exc:  # whatever pickle refused: re-raised as PicklingError with the remedy
            import pickle

            raise pickle.PicklingError(
                f"cannot send this joblib batch to an interpexec worker: {exc}. Lambdas, closures and functions "
                "defined in your script are sent by value, which needs cloudpickle (pip install cloudpickle); "
                "or define the function at the top level of an importable module"
            ) from exc
    return bytes(cloudpickle.dumps(items, protocol=5, buffer_callback=buffers.append)), buffers


def _dumps_any(obj: object) -> bytes:
    """Plain pickle, or cloudpickle when plain pickle refuses (a value whose class
    was sent by value, a lambda made in the task)."""
    try:
        return dumps(obj, protocol=5)
    except Exception as exc:  # plain pickle refused: try cloudpickle, else raise this error
        error = exc
    try:
        import cloudpickle
    except ImportError:
        raise error from None
    return bytes(cloudpickle.dumps(obj, protocol=5))


def run_batch(blob: bytes, *buffers: Any) -> bytes:
    """Run one joblib batch in a worker: call each ``(func, args, kwargs)`` of the
    pickled batch in order; return the list of results, pickled."""
    items: list[Triple] = loads(blob, buffers=buffers)
    try:
        results = [func(*args, **kwargs) for func, args, kwargs in items]
    except Exception as exc:
        carrier = _carrier(exc)
        if carrier is None:
            raise
        raise carrier from None
    return _dumps_any(results)


def _carrier(exc: Exception) -> ByValueError | None:
    """A ByValueError for ``exc`` when only cloudpickle can send it, else None
    (interpexec sends it as any task's exception)."""
    try:
        loads(dumps(exc, protocol=5))
        return None
    except Exception:  # plain pickle cannot round-trip it: try cloudpickle below
        pass
    cloudpickle = sys.modules.get("cloudpickle")
    if cloudpickle is None:
        return None
    try:
        blob = bytes(cloudpickle.dumps(exc, protocol=5))
    except Exception:  # cloudpickle cannot either: the worker reports it as any task's error
        return None
    import traceback

    return ByValueError(blob, "".join(traceback.format_exception(exc)))


def loads_results(blob: bytes) -> list[Any]:
    """The parent's side of :func:`run_batch`'s return value."""
    results: list[Any] = loads(blob)
    return results
