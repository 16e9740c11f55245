"""Values that need pickle on their way between interpreters (see
:func:`interpexec._transport.encode`): pickling with out-of-band buffers, and
rebuilding those buffers.

A worker loads this with the first value that needs pickling (pickle itself
loads then too): the module is not among those every worker imports.
"""

import sys

from . import _compat
from ._protocol import PICKLED

TYPE_CHECKING = False  # typing is not imported: this module loads in workers (signatures are type comments)
if TYPE_CHECKING:
    from typing import Any  # noqa: F401 (names used only in type comments)

    from ._compat import PickleBuffer


def encode_pickled(obj, share_buffers, snapshot):  # type: (Any, bool, bool) -> tuple[Any, ...]
    """Turn ``obj``, which does not cross natively, into a natively shareable
    tuple: pickle protocol 5.

    Large buffers (``bytearray`` and anything whose reducer emits a
    ``PickleBuffer``) travel beside the pickle, out of band, never inside it:

    * ``share_buffers``: as memoryviews over the sender's memory (only safe when
      the sender outlives the receiver's use: main to worker).  The receiver
      copies once (rebuilding a ``bytearray``) or not at all (``share()``).
    * ``snapshot``: as memoryviews over an immutable ``bytes`` copy (worker to
      main: the receiver must copy them out before the sender's interpreter can
      go, see ``Pool.collect``).
    * otherwise: as ``bytes`` copies that live on their own (queue items).

    Raises whatever pickling raises.
    """
    buffers: list[PickleBuffer] = []
    if _has_bytearray(obj):
        obj = _wrap_bytearrays(obj)
    try:
        if _MANAGERS in _modules:  # (manager proxies, wherever they are, carry their key)
            from ._pickling import dumps_with_proxies

            data = dumps_with_proxies(obj, buffers.append)
        else:
            data = _compat.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except RuntimeError as exc:  # (a multiprocessing.Queue, say: says what to pass instead)
        from ._errors import explain_inheritance_only

        explain_inheritance_only(exc)
        raise
    if not buffers:
        return (PICKLED, data)
    if share_buffers:
        views = tuple(_as_view(b) for b in buffers)
    elif snapshot:
        views = tuple(memoryview(bytes(b.raw())) for b in buffers)
    else:
        views = tuple(bytes(b.raw()) for b in buffers)
    return (PICKLED, data, views)


_MANAGERS = "multiprocessing.managers"
_modules = sys.modules


def _has_bytearray(obj):  # type: (Any) -> bool
    """A bytearray at the top or one level down (the shapes arguments and results
    take); deeper ones are pickled in band as usual."""
    tp = type(obj)
    if tp is bytearray:
        return True
    if tp is tuple or tp is list:
        return any(type(x) is bytearray or (type(x) is tuple and any(type(y) is bytearray for y in x)) for x in obj)
    if tp is dict:
        return any(type(x) is bytearray for x in obj.values())
    return False


def as_bytearray(buf):  # type: (Any) -> bytearray
    """Rebuilds a bytearray sent out of band; a bytearray the receiver already
    made (its one copy) is taken as it is."""
    return buf if type(buf) is bytearray else bytearray(buf)


class _OutOfBand:
    """Pickles a bytearray as a PickleBuffer (out of band); pickle itself writes
    bytearrays into the stream, and its C pickler does so before consulting
    reducer_override."""

    __slots__ = ("data",)

    def __init__(self, data):  # type: (bytearray) -> None
        self.data = data

    def __reduce_ex__(self, protocol):  # type: (Any) -> tuple[Any, ...]
        return (as_bytearray, (_compat.PickleBuffer(self.data),))


def _wrap(x):  # type: (Any) -> Any
    return _OutOfBand(x) if type(x) is bytearray else x


def _wrap_bytearrays(obj):  # type: (Any) -> Any
    """The same shapes _has_bytearray looks at, with bytearrays wrapped."""
    tp = type(obj)
    if tp is bytearray:
        return _OutOfBand(obj)
    if tp is tuple or tp is list:
        return tp(tuple(map(_wrap, x)) if type(x) is tuple else _wrap(x) for x in obj)
    if tp is dict:
        return {k: _wrap(v) for k, v in obj.items()}
    return obj


def materialize(enc):  # type: (tuple[Any, ...]) -> tuple[Any, ...]
    """Copy a snapshot-encoded value's out-of-band views into this interpreter's
    memory (one ``bytearray`` each)."""
    if len(enc) == 3 and enc[0] == PICKLED:
        return (PICKLED, enc[1], tuple(bytearray(v) for v in enc[2]))
    return enc


def _as_view(buf):  # type: (PickleBuffer) -> Any
    """An out-of-band buffer from main to a worker.  A buffer lent with
    ``interpexec.share()`` (a PickleBuffer over a memoryview) crosses as it is;
    any other (a ``bytearray``, a NumPy array's data) is snapshotted now, as
    ProcessPoolExecutor does at submit: the caller may resize or change its
    object as soon as ``submit()`` returns, and the task sees it as it was."""
    raw = buf.raw()
    if type(raw.obj) is memoryview:
        return raw
    return memoryview(bytes(raw))
