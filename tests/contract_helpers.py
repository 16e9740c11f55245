"""Task functions and classes for tests/test_contracts.py (workers import them)."""

from __future__ import annotations

import os
import pickle
import time

# ------------------------------------------------------------- map timeout


def map_item(record_fd, arrived_fd, go_fd, i, blocker, busy_seconds):
    """One item of a map: write byte ``i`` to ``record_fd`` as soon as it runs; item
    ``blocker`` then writes to ``arrived_fd`` and blocks until the test writes to
    (or closes) ``go_fd``; any other item busy-loops ``busy_seconds`` (0: returns at
    once).  Returns ``i``."""
    os.write(record_fd, bytes([i]))
    if i == blocker:
        os.write(arrived_fd, b"a")
        os.read(go_fd, 1)
    elif busy_seconds:
        end = time.perf_counter() + busy_seconds
        while time.perf_counter() < end:
            pass
    return i


# ---------------------------------------------- pickle protocol 5, out of band


class OutOfBandBlob:
    """Holds a bytearray that its reducer hands to pickle as a ``PickleBuffer``
    (protocol 5), so pickle may send it out of band.

    ``arrived_as`` records the type of the buffer object the unpickler passed to
    :func:`rebuild_blob`: a ``memoryview`` when the buffer travelled out of band
    (``pickle.loads(..., buffers=...)`` hands those over as they are), a
    ``bytearray`` when it was written into the pickle stream (in-band
    ``PickleBuffer``s over writable memory unpickle as bytearrays)."""

    def __init__(self, data, arrived_as=None):
        self.data = bytearray(data)
        self.arrived_as = arrived_as

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            return (rebuild_blob, (pickle.PickleBuffer(self.data),))
        return (rebuild_blob, (bytes(self.data),))

    def __eq__(self, other):
        return type(other) is OutOfBandBlob and self.data == other.data

    def __repr__(self):
        return f"OutOfBandBlob(<{len(self.data)} bytes>, arrived_as={self.arrived_as!r})"


def rebuild_blob(buf):
    return OutOfBandBlob(buf, type(buf).__name__)


def blob_round_trip(blob):
    """Return how the blob's buffer arrived in this worker, and the blob itself."""
    return blob.arrived_as, blob


# ------------------------------------------------------------------ numpy


def import_numpy():
    import numpy

    return numpy.__version__


def interp_id():
    import _interpreters

    return int(_interpreters.get_current()[0])


def set_in_proxy(d, key, value):
    """Store into a multiprocessing manager's dict proxy; its size after."""
    d[key] = value
    return len(d)


def set_event_proxy(ev):
    ev.set()
    return ev.is_set()


def set_in_deep_proxy(bag, key, value):
    """``set_in_proxy`` on the proxy at ``bag.inner["levels"][0][0]``."""
    return set_in_proxy(bag.inner["levels"][0][0], key, value)
