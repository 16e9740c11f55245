"""interpexec.share(): buffers lent to tasks without copies, and the default
semantics of bytes/bytearray arguments."""

from __future__ import annotations

import array
import mmap
import pickle

import pytest

from interpexec import InterpreterPoolExecutor, Shared, share

from . import share_helpers as sh


@pytest.fixture(scope="module")
def pool():
    with InterpreterPoolExecutor(2) as ex:
        yield ex


@pytest.mark.timeout(30)
def test_writable_share_lets_tasks_fill_disjoint_halves(pool):
    buf = bytearray(1000)
    shared = share(buf, writable=True)
    futs = [pool.submit(sh.fill, shared, 0, 500, 1), pool.submit(sh.fill, shared, 500, 1000, 2)]
    assert [f.result(timeout=10) for f in futs] == [500, 500]
    assert buf == bytes([1]) * 500 + bytes([2]) * 500


@pytest.mark.timeout(30)
def test_format_and_shape_are_kept(pool):
    arr = array.array("d", [0.5] * 10)
    assert pool.submit(sh.describe, share(arr)).result(timeout=10) == ("memoryview", "d", (10,), True, 80)
    assert pool.submit(sh.total, share(arr)).result(timeout=10) == 5.0
    assert pool.submit(sh.fill, share(arr, writable=True), 2, 4, 3.25).result(timeout=10) == 2
    assert list(arr) == [0.5, 0.5, 3.25, 3.25] + [0.5] * 6


@pytest.mark.timeout(30)
def test_read_only_by_default(pool):
    buf = bytearray(b"abc")
    with pytest.raises(TypeError, match="read-only"):
        pool.submit(sh.write_first, share(buf)).result(timeout=10)
    assert buf == b"abc"


@pytest.mark.timeout(30)
def test_writable_needs_a_writable_object():
    with pytest.raises(ValueError, match="read-only"):
        share(b"immutable", writable=True)
    with pytest.raises(TypeError, match="buffer protocol"):
        share([1, 2, 3])


@pytest.mark.timeout(30)
def test_returning_the_lent_view_gives_back_the_callers_memory(pool):
    buf = bytearray(b"0123456789")
    view = pool.submit(sh.identity, share(buf, writable=True)).result(timeout=10)
    assert isinstance(view, memoryview)
    view[0] = ord("X")  # it is the caller's own memory, not a copy
    assert buf[:1] == b"X"


@pytest.mark.timeout(30)
def test_mmap_can_be_shared(pool):
    with mmap.mmap(-1, 4096) as m:
        assert pool.submit(sh.fill, share(m, writable=True), 0, 4096, 7).result(timeout=10) == 4096
        assert m[:3] == b"\x07\x07\x07"
        # The worker dropped its view before reporting: the mmap can be closed now.


@pytest.mark.timeout(30)
def test_bytes_and_bytearray_arguments_keep_their_types(pool):
    data = bytes(range(256)) * 100
    assert pool.submit(sh.identity, data).result(timeout=10) == data
    ba = bytearray(data)
    out = pool.submit(sh.identity, ba).result(timeout=10)
    assert type(out) is bytearray and out == ba and out is not ba


@pytest.mark.timeout(30)
def test_numpy_array_can_be_shared_if_installed(pool):
    np = pytest.importorskip("numpy")
    arr = np.zeros(16, dtype=np.float64)
    assert pool.submit(sh.fill, share(arr, writable=True), 0, 8, 2.5).result(timeout=10) == 8
    assert arr[:8].tolist() == [2.5] * 8 and arr[8:].tolist() == [0.0] * 8


def test_shared_repr_and_pickle_without_interpexec():
    s = share(bytearray(8), writable=True)
    assert isinstance(s, Shared) and "writable" in repr(s)
    # Pickled in band (not through interpexec) it still rebuilds a view of a copy.
    view = pickle.loads(pickle.dumps(s, protocol=5))
    assert bytes(view) == bytes(8)
