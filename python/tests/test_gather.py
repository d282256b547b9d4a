"""Store.gather / store[...] semantics: order, duplicates, empty, range
checks (no wrap-around in gather), id dtypes, id shapes, out= in place."""

import numpy as np
import pytest

import ibp
from conftest import make_rows


@pytest.fixture(scope="module", params=["ibp", "inplace", "exp", "fp8"])
def store_and_ref(request):
    rng = np.random.default_rng(3)
    a = make_rows(rng, 500, (6, 4), "float32")
    kind = request.param
    if kind == "inplace":
        s = ibp.Store.from_array(a, layout="inplace")
    elif kind == "ibp":
        s = ibp.Store.from_array(a)
    elif kind == "exp":
        s = ibp.Store.from_array(a, codec="exp", block_rows=64)
    else:
        s = ibp.Store.from_array(a, codec="fp8", lossy=True, block_rows=64)
    ref = s.read()  # fp8: the lossy reconstruction every gather must reproduce
    if kind != "fp8":
        assert ref.tobytes() == a.tobytes()
    yield s, ref
    s.close()


def test_order_and_duplicates(store_and_ref):
    s, ref = store_and_ref
    ids = np.array([499, 0, 7, 7, 7, 250, 0, 498])
    g = s.gather(ids)
    assert g.shape == (8, 6, 4) and g.dtype == np.float32
    assert g.tobytes() == ref[ids].tobytes()


@pytest.mark.parametrize("idtype", [np.int32, np.int64, np.uint16, np.uint32, np.uint64, np.int8])
def test_id_dtypes(store_and_ref, idtype):
    s, ref = store_and_ref
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 127], dtype=idtype)
    assert s.gather(ids).tobytes() == ref[ids.astype(np.int64)].tobytes()


def test_id_shapes_and_sequences(store_and_ref):
    s, ref = store_and_ref
    ids = np.array([[1, 2, 3], [499, 0, 1]])
    assert s.gather(ids).shape == (2, 3, 6, 4)
    assert s.gather(ids).tobytes() == ref[ids].tobytes()
    assert s.gather([5, 6]).tobytes() == ref[[5, 6]].tobytes()
    assert s.gather(range(10, 20, 3)).tobytes() == ref[10:20:3].tobytes()
    assert s.gather(ids[:, ::2]).tobytes() == ref[ids[:, ::2]].tobytes()  # non-contiguous ids


def test_empty(store_and_ref):
    s, ref = store_and_ref
    for ids in ([], np.array([], dtype=np.int32), np.zeros((0, 3), np.int64)):
        g = s.gather(ids)
        assert g.shape == np.asarray(ids).shape + (6, 4) and g.size == 0
    out = np.empty((0, 6, 4), np.float32)
    assert s.gather([], out=out) is out


@pytest.mark.parametrize("bad", [[500], [0, 1, 500, 2], [-1], [3, -500], [1 << 40], [-(1 << 62)]])
def test_out_of_range_and_negative(store_and_ref, bad):
    s, ref = store_and_ref
    out = np.full((len(bad), 6, 4), 7.0, np.float32)
    with pytest.raises(ibp.OutOfRangeError) as ei:
        s.gather(np.array(bad, dtype=np.int64), out=out)
    assert isinstance(ei.value, IndexError) and isinstance(ei.value, ibp.Error)
    assert ei.value.status == 8 and "outside" in ei.value.detail
    pos = next(i for i, v in enumerate(bad) if not 0 <= v < 500)
    assert "ids[%d]" % pos in str(ei.value)
    assert (out == 7.0).all()  # ids are checked before anything is written


def test_uint64_beyond_int64(store_and_ref):
    s, _ = store_and_ref
    with pytest.raises(ibp.OutOfRangeError):
        s.gather(np.array([1, (1 << 64) - 1], dtype=np.uint64))


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), np.array([True, False]), ["a"], [1.5]])
def test_non_integer_ids(store_and_ref, bad):
    s, _ = store_and_ref
    with pytest.raises(ibp.InvalidArgumentError) as ei:
        s.gather(bad)
    assert isinstance(ei.value, ValueError)


def test_out_in_place(store_and_ref):
    s, ref = store_and_ref
    ids = np.array([9, 8, 7])
    out = np.empty((3, 6, 4), np.float32)
    ptr = out.ctypes.data
    r = s.gather(ids, out=out)
    assert r is out and out.ctypes.data == ptr
    assert out.tobytes() == ref[ids].tobytes()
    # a view into a bigger buffer: written in place, neighbours untouched
    big = np.zeros((5, 6, 4), np.float32)
    s.gather(ids, out=big[1:4])
    assert big[1:4].tobytes() == ref[ids].tobytes() and not big[0].any() and not big[4].any()


@pytest.mark.parametrize("make_out,match", [
    (lambda: np.empty((4, 6, 4), np.float32), "shape"),
    (lambda: np.empty((3, 24), np.float32), "shape"),
    (lambda: np.empty((3, 6, 4), np.float64), "dtype"),
    (lambda: np.empty((3, 6, 4), np.int32), "dtype"),
    (lambda: np.empty((3, 6, 8), np.float32)[:, :, ::2], "contiguous"),
    (lambda: np.broadcast_to(np.empty((1, 6, 4), np.float32), (3, 6, 4)), "contiguous"),
    (lambda: np.frombuffer(bytes(288), np.float32).reshape(3, 6, 4), "read-only"),
    (lambda: [[0.0] * 4] * 6, "NumPy array or a torch tensor"),
])
def test_bad_out(store_and_ref, make_out, match):
    s, _ = store_and_ref
    with pytest.raises(ibp.InvalidArgumentError, match=match):
        s.gather([1, 2, 3], out=make_out())


def test_getitem_and_len(store_and_ref):
    s, ref = store_and_ref
    assert len(s) == 500
    assert s[0].shape == (6, 4) and s[0].tobytes() == ref[0].tobytes()
    assert s[-1].tobytes() == ref[499].tobytes()  # Python rules for a single int
    assert s[np.int32(-2)].tobytes() == ref[498].tobytes()
    assert s[10:20:2].tobytes() == ref[10:20:2].tobytes()
    assert s[::-100].tobytes() == ref[::-100].tobytes()
    assert s[[1, 1, 2]].tobytes() == ref[[1, 1, 2]].tobytes()
    with pytest.raises(IndexError):
        s[500]
    with pytest.raises(IndexError):
        s[-501]
    with pytest.raises(ibp.OutOfRangeError):
        s[[-1]]  # arrays of ids never wrap around
    assert sum(1 for _ in s) == 500


@pytest.mark.parametrize("nthreads", [1, 2, 0])
def test_nthreads(store_and_ref, nthreads):
    s, ref = store_and_ref
    ids = np.random.default_rng(nthreads).integers(0, 500, 3000)
    assert s.gather(ids, nthreads=nthreads).tobytes() == ref[ids].tobytes()


def test_negative_nthreads(store_and_ref):
    s, _ = store_and_ref
    with pytest.raises(ibp.InvalidArgumentError):
        s.gather([1], nthreads=-1)


def test_closed_store(rng):
    s = ibp.Store.from_array(make_rows(rng, 10, (4,), "int16"))
    assert not s.closed
    with s:
        s.gather([1])
    assert s.closed
    s.close()  # idempotent
    with pytest.raises(ibp.InvalidArgumentError, match="closed"):
        s.gather([1])
    with pytest.raises(ibp.InvalidArgumentError, match="closed"):
        s.read()
    assert len(s) == 10 and "closed" in repr(s)


def test_store_constructor_refused():
    with pytest.raises(TypeError):
        ibp.Store()


def test_one_dimensional_array(rng):
    a = make_rows(rng, 100, (), "int32")
    with ibp.Store.from_array(a) as s:
        assert s.shape == (100,) and s.row_bytes == 4
        assert s.gather([5, 7]).tobytes() == a[[5, 7]].tobytes()
        assert s[3] == a[3] and s[3].shape == ()
