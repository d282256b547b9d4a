"""Round trips: every dtype through every codec that takes it, through a file
(ibp.pack + ibp.open), in memory (Store.from_array) and the Codec API."""

import numpy as np
import pytest

import ibp
from conftest import FLOAT_DTYPES, NP_DTYPES, bf16_bits, make_rows


@pytest.mark.parametrize("dtype", NP_DTYPES)
@pytest.mark.parametrize("layout", ["packed", "inplace"])
def test_ibp_codec_every_dtype(tmp_path, rng, dtype, layout):
    a = make_rows(rng, 300, (7, 3), dtype)
    p = tmp_path / "a.ibp"
    assert ibp.pack(a, p, layout=layout) == p
    with ibp.open(p) as s:
        assert s.shape == a.shape and s.dtype == dtype and s.codec == "ibp" and not s.lossy
        assert s.nrows == 300 and len(s) == 300 and s.row_bytes == 21 * a.itemsize
        assert s.layout == layout and s.chunk in (1, 2, 4, 8)
        assert s.ratio == pytest.approx(a.nbytes / p.stat().st_size)
        back = s.read()
        assert back.dtype == a.dtype and back.shape == a.shape
        assert back.tobytes() == a.tobytes()
        ids = rng.integers(0, 300, size=50)
        assert s.gather(ids).tobytes() == a[ids].tobytes()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["bf16"])
@pytest.mark.parametrize("codec", ["ibp", "exp", "fp8"])
def test_float_codecs_file_and_memory(tmp_path, rng, dtype, codec):
    x = make_rows(rng, 257, (33,), "float32")
    if dtype == "bf16":
        a, kw = bf16_bits(x), {"dtype": "bf16"}
    else:
        a, kw = x.astype(dtype), {}
    if codec == "fp8":
        kw["lossy"] = True
    if codec != "ibp":
        kw["block_rows"] = 50  # several blocks
    p = tmp_path / "f.ibp"
    ibp.pack(a, p, codec=codec, **kw)
    for s in (ibp.open(p), ibp.Store.from_array(a, codec=codec, **kw)):
        with s:
            assert s.codec == codec and s.lossy == (codec == "fp8")
            assert s.dtype == ("bfloat16" if dtype == "bf16" else dtype)
            back = s.read()
            bits = back.view(np.uint16) if dtype == "bf16" else back
            ids = np.array([256, 0, 17, 17, 100])
            g = s.gather(ids)
            gbits = g.view(np.uint16) if dtype == "bf16" else g
            assert gbits.tobytes() == bits[ids].tobytes()  # gather == read, any codec
            if codec != "fp8":
                assert bits.tobytes() == a.tobytes()
            else:
                ref = x if dtype == "bf16" else a.astype(np.float32)
                got = (bits.astype(np.uint32) << 16).view(np.float32) if dtype == "bf16" \
                    else bits.astype(np.float32)
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                assert 0 < err < 0.08, err


def test_exp_fp8_refuse_integer_data(rng):
    a = make_rows(rng, 10, (4,), "int32")
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.Store.from_array(a, codec="exp")
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.Store.from_array(a, codec="fp8", lossy=True)


def test_fp8_needs_lossy(rng):
    a = make_rows(rng, 10, (16,), "float32")
    with pytest.raises(ibp.InvalidArgumentError, match="lossy=True"):
        ibp.Store.from_array(a, codec="fp8")


def test_options_of_another_codec_refused(rng, tmp_path):
    a = make_rows(rng, 10, (16,), "float32")
    with pytest.raises(ibp.InvalidArgumentError, match="fp8_block"):
        ibp.pack(a, tmp_path / "x.ibp", codec="exp", fp8_block=64)
    with pytest.raises(ibp.InvalidArgumentError, match="chunk"):
        ibp.pack(a, tmp_path / "x.ibp", codec="fp8", lossy=True, chunk=4)
    assert not (tmp_path / "x.ibp").exists()


@pytest.mark.parametrize("opts", [
    dict(chunk=1, threshold=0.8), dict(chunk=8, threshold=1.0), dict(chunk=2, sample=0.5),
    dict(clusters=3), dict(clusters="auto", seed=7), dict(xval=0), dict(xval=2),
])
def test_ibp_training_options(rng, opts):
    a = make_rows(rng, 400, (24,), "uint16")
    with ibp.Store.from_array(a, **opts) as s:
        if "chunk" in opts:
            assert s.chunk == opts["chunk"]
        if "threshold" in opts:
            assert s.threshold == pytest.approx(opts["threshold"])
        assert s.read().tobytes() == a.tobytes()


def test_train_codec_encode_decode(rng):
    a = make_rows(rng, 500, (16,), "float32")
    c = ibp.train(a, chunk=4, threshold=0.9, clusters=2)
    assert c.chunk == 4 and c.threshold == pytest.approx(0.9) and c.row_bytes == 64
    assert c.nclusters in (1, 2) and c.masks.shape == (c.nclusters, c.nchunks * 4)
    assert c.bitvals.shape == c.masks.shape and c.xvals.shape == c.masks.shape
    assert not (c.bitvals & ~c.masks).any()  # Bitval bits lie inside the Mask
    with pytest.raises(ValueError):
        c.masks[0, 0] = 1  # read-only
    e = c.encode(a)
    assert e.nrows == 500 and e.offsets[0] == 0 and e.offsets[-1] == e.payload.size
    assert e.payload.nbytes < a.nbytes and e.nbytes == e.payload.nbytes + 8 * 501 + 500 + (500 if c.nclusters > 1 else 0)
    assert c.decode(e).tobytes() == a.tobytes()
    out = np.empty_like(a)
    assert c.decode(e, out=out) is out and out.tobytes() == a.tobytes()
    # other rows of the same shape
    b = make_rows(np.random.default_rng(5), 30, (16,), "float32")
    assert c.decode(c.encode(b)).tobytes() == b.tobytes()
    with pytest.raises(ibp.InvalidArgumentError):
        c.encode(np.zeros((3, 5), np.float32))  # wrong row size
    c.close()
    with pytest.raises(ibp.InvalidArgumentError, match="closed"):
        c.encode(a)


def test_codec_decode_rejects_corrupt_encoded(rng):
    a = make_rows(rng, 100, (16,), "float32")
    c = ibp.train(a)
    e = c.encode(a)
    e.flags[3] |= 0x80  # reserved flag bits
    with pytest.raises(ibp.CorruptError):
        c.decode(e)
    e = c.encode(a)
    e.offsets[50] = e.offsets[-1] + 10  # offsets outside the payload
    with pytest.raises(ibp.CorruptError):
        c.decode(e)


@pytest.mark.parametrize("mod", ["exp", "fp8"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["bf16"])
@pytest.mark.parametrize("shape", [(1000,), (3, 5, 7), (), (0, 4)])
def test_tensor_codecs(rng, mod, dtype, shape):
    m = getattr(ibp, mod)
    x = np.asarray(make_rows(rng, 1, shape, "float32")[0] if shape else np.float32(0.7),
                   dtype=np.float32).reshape(shape)
    if dtype == "bf16":
        a = bf16_bits(x)  # bit patterns, named bf16 by dtype=
        buf = m.compress(a, dtype="bf16")
    else:
        a = x.astype(dtype)
        buf = m.compress(a)
    assert isinstance(buf, np.ndarray) and buf.dtype == np.uint8
    back = m.decompress(buf)
    assert isinstance(back, np.ndarray) and back.shape == shape
    assert back.dtype.itemsize == a.dtype.itemsize
    if dtype != "bf16":
        assert back.dtype == a.dtype
    bits = back.view(a.dtype)
    if mod == "exp":
        assert bits.tobytes() == a.tobytes()
    elif a.size and np.linalg.norm(x):
        got = (bits.astype(np.uint32) << 16).view(np.float32) if dtype == "bf16" \
            else bits.astype(np.float32)
        assert np.linalg.norm(got - x) / np.linalg.norm(x) < 0.08
    # bytes in, out= written in place
    out = np.empty(shape, dtype=a.dtype)
    assert m.decompress(bytes(buf), out=out) is out
    assert out.tobytes() == bits.tobytes()


def test_exp_compresses_real_ratio(rng):
    x = (rng.standard_normal(1 << 16) * 0.02).astype(np.float32)
    buf = ibp.exp.compress(x)
    assert buf.dtype == np.uint8 and buf.ndim == 1
    assert x.nbytes / buf.nbytes > 1.1
    buf8 = ibp.fp8.compress(x)
    assert 3.5 < x.nbytes / buf8.nbytes < 4.0
    with pytest.raises(ibp.CorruptError, match="ibp.exp"):
        ibp.fp8.decompress(buf)  # a frame of the other codec


@pytest.mark.parametrize("dtype", ["bf16", "float16", "float32"])
def test_exp_rans_table(rng, dtype):
    # table="rans": entropy-coded exponents, bit-exact, smaller than "hist"
    x = (rng.standard_normal(1 << 17) * 0.02).astype(np.float32)
    a = bf16_bits(x) if dtype == "bf16" else x.astype(dtype)
    kw = {"dtype": "bf16"} if dtype == "bf16" else {}
    r = ibp.exp.compress(a, table="rans", **kw)
    h = ibp.exp.compress(a, table="hist", **kw)
    assert r.nbytes < h.nbytes
    assert ibp.exp.decompress(r).view(a.dtype).tobytes() == a.tobytes()
    c = ibp.exp.compress_chunks(a, 1 << 16, table="rans", **kw)
    assert ibp.exp.decompress_chunks(c).view(a.dtype).tobytes() == a.tobytes()
    with pytest.raises(ibp.InvalidArgumentError, match="'rans'"):
        ibp.exp.compress(a, table="ans", **kw)
