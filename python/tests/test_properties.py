"""Property tests (hypothesis) over shapes, dtypes, codecs and ids."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ibp

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "bool"]


@st.composite
def arrays(draw, dtypes=DTYPES, min_rows=1):
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    nrows = draw(st.integers(min_rows, 200))
    row_shape = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = (nrows,) + row_shape
    kind = draw(st.sampled_from(["random", "sparse", "constant"]))
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    if kind == "sparse":
        raw[rng.random(raw.size) < 0.9] = 0
    elif kind == "constant" and raw.size:
        raw[:] = raw[0]
    a = raw.view(dtype).reshape(shape) if dtype != np.bool_ else (raw % 2).astype(bool).reshape(shape)
    return a


@SETTINGS
@given(a=arrays(), data=st.data(), layout=st.sampled_from(["packed", "inplace"]))
def test_gather_matches_numpy(a, data, layout):
    ids = data.draw(st.lists(st.integers(0, a.shape[0] - 1), max_size=64))
    idtype = data.draw(st.sampled_from([np.int32, np.int64]))
    ids = np.array(ids, dtype=idtype)
    with ibp.Store.from_array(a, layout=layout) as s:
        assert s.shape == a.shape and s.row_bytes == a[0].nbytes
        assert s.read().tobytes() == a.tobytes()
        assert s.gather(ids).tobytes() == a[ids.astype(np.int64)].tobytes()
        bad = data.draw(st.one_of(st.integers(a.shape[0], 2**63 - 1), st.integers(-2**63, -1)))
        pos = data.draw(st.integers(0, len(ids)))
        with pytest.raises(ibp.OutOfRangeError):
            s.gather(np.insert(ids.astype(np.int64), pos, bad))


@SETTINGS
@given(a=arrays(dtypes=["float16", "float32"]), codec=st.sampled_from(["exp", "fp8"]),
       data=st.data())
def test_block_codecs_gather_equals_read(a, codec, data):
    a = np.nan_to_num(a, nan=0.0, posinf=1.0, neginf=-1.0)
    block_rows = data.draw(st.integers(1, 64))
    kw = dict(lossy=True) if codec == "fp8" else {}
    with ibp.Store.from_array(a, codec=codec, block_rows=block_rows, **kw) as s:
        full = s.read()
        if codec == "exp":
            assert full.tobytes() == a.tobytes()
        ids = np.array(data.draw(st.lists(st.integers(0, a.shape[0] - 1), max_size=50)), np.int64)
        assert s.gather(ids).tobytes() == full[ids].tobytes()


@SETTINGS
@given(a=arrays(), chunk=st.sampled_from([1, 2, 4, 8, "auto"]))
def test_codec_round_trip(a, chunk):
    c = ibp.train(a, chunk=chunk)
    enc = c.encode(a)
    assert c.decode(enc).tobytes() == a.tobytes()


@SETTINGS
@given(a=arrays(dtypes=["float16", "float32"], min_rows=0), mod=st.sampled_from(["exp", "fp8"]))
def test_tensor_codecs_shape_and_dtype(a, mod):
    m = getattr(ibp, mod)
    back = m.decompress(m.compress(a))
    assert back.shape == a.shape and back.dtype == a.dtype
    if mod == "exp":
        assert back.tobytes() == a.tobytes()


@SETTINGS
@given(data=st.binary(max_size=300), mod=st.sampled_from(["exp", "fp8"]))
def test_random_bytes_never_crash(data, mod):
    try:
        getattr(ibp, mod).decompress(data)
    except ibp.Error:
        pass
