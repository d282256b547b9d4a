"""Store.gather's fast paths (C-contiguous int64 NumPy / CPU torch ids, an
exact out=) against its general path: same rows, same errors, out= written in
place, nothing taken from an array the fast path must refuse."""

import threading

import numpy as np
import pytest

import ibp
from conftest import make_rows


@pytest.fixture(scope="module")
def sx():
    x = make_rows(np.random.default_rng(3), 300, (4, 8), "float32")
    s = ibp.Store.from_array(x)
    yield s, x
    s.close()


IDS = [7, 0, 299, 7, 150]


def variants():
    a = np.array(IDS, np.int64)
    ro = a.copy()
    ro.flags.writeable = False
    nc = np.repeat(a, 2)[::2]
    assert not nc.flags.c_contiguous
    return {"int64": a, "read-only": ro, "strided": nc, "int32": a.astype(np.int32),
            "uint16": a.astype(np.uint16), "2-D": a[:4].reshape(2, 2), "list": list(IDS)}


@pytest.mark.parametrize("name", list(variants()))
def test_numpy_ids_all_paths_agree(sx, name):
    s, x = sx
    ids = variants()[name]
    want = x[np.asarray(ids)]
    got = s.gather(ids)
    assert type(got) is np.ndarray and got.shape == want.shape and np.array_equal(got, want)
    out = np.empty_like(want)
    assert s.gather(ids, out=out) is out and np.array_equal(out, want)


def test_numpy_out_refusals(sx):
    s, x = sx
    ids = np.array(IDS, np.int64)
    ro = np.empty((5, 4, 8), np.float32)
    ro.flags.writeable = False
    for bad in (ro, np.empty((5, 4, 9), np.float32), np.empty((5, 4, 8), np.float64),
                np.empty((5, 8, 4), np.float32).transpose(0, 2, 1), np.empty((4, 4, 8), np.float32)):
        before = bad.copy()
        with pytest.raises(ibp.InvalidArgumentError):
            s.gather(ids, out=bad)
        assert np.array_equal(bad, before, equal_nan=True) or not bad.flags.writeable


def test_out_of_range_writes_nothing(sx):
    s, x = sx
    out = np.zeros((3, 4, 8), np.float32)
    for bad in ([1, 300, 2], [1, -1, 2]):
        with pytest.raises(ibp.OutOfRangeError):
            s.gather(np.array(bad, np.int64), out=out)
        assert not out.any()


def test_torch_fast_and_general_paths(sx, torch):
    s, x = sx
    want = torch.from_numpy(x[IDS])
    base = torch.tensor(IDS, dtype=torch.int64)
    for ids in (base, base.to(torch.int32), torch.stack([base, base], 1)[:, 0], base.view(5, 1)):
        got = s.gather(ids)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        assert torch.equal(got.reshape(want.shape), want)
        out = torch.empty(got.shape)
        assert s.gather(ids, out=out) is out and torch.equal(out, got)
    out = torch.empty(5, 4, 8)
    p = out.data_ptr()
    assert s.gather(base, out=out).data_ptr() == p  # no copy
    # tensors the fast path must refuse: non-contiguous, wrong dtype, wrong shape, negative view
    for bad in (torch.empty(5, 8, 4).transpose(1, 2), torch.empty(5, 4, 8, dtype=torch.float64),
                torch.empty(5, 4, 7), torch._neg_view(torch.empty(5, 4, 8))):
        with pytest.raises(ibp.InvalidArgumentError):
            s.gather(base, out=bad)
    # numpy ids with a torch out=, and torch ids with a numpy out=
    o = torch.empty(5, 4, 8)
    assert s.gather(np.array(IDS), out=o) is o and torch.equal(o, want)
    o = np.empty((5, 4, 8), np.float32)
    assert s.gather(base, out=o) is o and np.array_equal(o, x[IDS])


def test_bf16_store_outputs(torch):
    t = torch.randn(50, 16).to(torch.bfloat16)
    with ibp.Store.from_array(t) as s:
        ids = torch.tensor([3, 1, 49])
        got = s.gather(ids)
        assert got.dtype == torch.bfloat16 and torch.equal(got, t[ids])
        out = torch.empty(3, 16, dtype=torch.bfloat16)
        assert s.gather(ids, out=out) is out and torch.equal(out, t[ids])
        u16 = np.empty((3, 16), np.uint16)  # bit patterns
        assert s.gather(ids.numpy(), out=u16) is u16
        assert np.array_equal(u16, t[ids].view(torch.int16).numpy().view(np.uint16))


def test_closed_store_and_close_waits(rng):
    x = make_rows(rng, 2000, (64,), "float32")
    s = ibp.Store.from_array(x)
    ids = np.arange(2000, dtype=np.int64)
    out = np.empty((2000, 64), np.float32)
    errs = []

    def loop():
        try:
            while True:
                s.gather(ids, out=out, nthreads=1)
        except ibp.InvalidArgumentError as e:
            errs.append(e)

    ts = [threading.Thread(target=loop) for _ in range(3)]
    for t in ts:
        t.start()
    s.close()  # waits for running gathers, then later calls refuse
    for t in ts:
        t.join()
    assert len(errs) == 3 and all("closed" in str(e) for e in errs)
    assert s._handle._active == 0
