"""ibp.codec: one interface (name, lossless, encode, decode, pack(codec=obj))
for the ibp, exp and fp8 codecs, equal to the spellings it stands beside."""

import copy
import pickle

import numpy as np
import pytest

import ibp
from conftest import bf16_bits


def weights(rng, shape=(64, 48)):
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)


@pytest.mark.parametrize("name", ["ibp", "exp", "fp8"])
def test_one_interface(rng, name):
    x = weights(rng)
    c = ibp.codec(name, rows=x) if name == "ibp" else ibp.codec(name, lossy=True) if name == "fp8" \
        else ibp.codec(name)
    assert c.name == name and c.lossless == (name != "fp8")
    enc = c.encode(x)
    back = c.decode(enc)
    assert back.shape == x.shape and back.dtype == x.dtype
    if c.lossless:
        assert back.tobytes() == x.tobytes()
    else:
        assert np.max(np.abs(back - x)) < 0.1 * np.max(np.abs(x))
    out = np.empty_like(x)
    assert c.decode(enc, out=out) is out and out.tobytes() == back.tobytes()


def test_exp_equals_the_module_functions(rng):
    x = weights(rng)
    for kw in ({}, {"table": "hist"}, {"sigma": 0.02}):
        c = ibp.codec("exp", **kw)
        enc = c.encode(x, nthreads=1)
        ref = ibp.exp.compress_chunks(x, x.size, nthreads=1, **kw)
        assert enc.chunk_elems == x.size and enc.nchunks == 1
        assert enc.payload.tobytes() == ref.payload.tobytes()
        assert c.compress(x).tobytes() == ibp.exp.compress(x, **kw).tobytes()
        assert c.decompress(c.compress(x)).tobytes() == x.tobytes()
    c = ibp.codec("exp", chunk_elems=48)
    enc = c.encode(x)
    assert enc.payload.tobytes() == ibp.exp.compress_chunks(x, 48).payload.tobytes()
    assert ibp.exp.Codec is ibp.ExpCodec and ibp.fp8.Codec is ibp.Fp8Codec


def test_fp8_equals_the_module_functions(rng):
    x = weights(rng)
    c = ibp.codec("fp8", lossy=True, format="e5m2", block=64, chunk_elems=96)
    enc = c.encode(x)
    ref = ibp.fp8.compress_chunks(x, 96, format="e5m2", block=64)
    assert enc.payload.tobytes() == ref.payload.tobytes()
    assert c.decode(enc).tobytes() == ibp.fp8.decompress_chunks(ref).tobytes()
    assert c.compress(x).tobytes() == ibp.fp8.compress(x, format="e5m2", block=64).tobytes()


def test_bf16_and_torch(rng):
    bits = bf16_bits(rng.standard_normal((32, 16)) * 0.02)
    c = ibp.codec("exp", dtype="bf16")
    assert c.decode(c.encode(bits)).view(np.uint16).tobytes() == bits.tobytes()
    torch = pytest.importorskip("torch")
    t = torch.randn(16, 8, dtype=torch.bfloat16)
    back = ibp.codec("exp").decode(ibp.codec("exp").encode(t))
    assert isinstance(back, torch.Tensor) and torch.equal(back, t)


def test_errors():
    with pytest.raises(ibp.InvalidArgumentError, match="lossy"):
        ibp.codec("fp8")
    with pytest.raises(ibp.InvalidArgumentError, match="rows="):
        ibp.codec("ibp")
    with pytest.raises(ibp.InvalidArgumentError, match="codec must be"):
        ibp.codec("zstd")
    with pytest.raises(ibp.InvalidArgumentError, match="exp table"):
        ibp.codec("exp", table="nope")
    with pytest.raises(ibp.InvalidArgumentError, match="block"):
        ibp.codec("fp8", lossy=True, block=100)
    with pytest.raises(ibp.InvalidArgumentError, match="chunk_elems"):
        ibp.codec("exp", chunk_elems=0)
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.codec("exp", bogus=1)
    with pytest.raises(ibp.InvalidArgumentError, match="rows="):
        ibp.codec("exp", rows=np.zeros(4, np.float32))
    x = np.zeros((4, 4), np.float32)
    enc = ibp.codec("fp8", lossy=True).encode(x)
    with pytest.raises(ibp.InvalidArgumentError, match="codec 'exp'"):
        ibp.codec("exp").decode(enc)


def test_objects_survive_pickle_and_copy(rng):
    x = weights(rng)
    for c in (ibp.codec("exp", table="hist", chunk_elems=48), ibp.codec("fp8", lossy=True, block=32)):
        for d in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c), copy.copy(c)):
            assert d == c and hash(d) == hash(c) and repr(d) == repr(c)
            assert d.encode(x).payload.tobytes() == c.encode(x).payload.tobytes()
    assert ibp.codec("exp") != ibp.codec("exp", table="hist")
    assert "table='hist'" in repr(ibp.codec("exp", table="hist"))


def test_pack_takes_codec_objects(rng, tmp_path):
    x = weights(rng, (128, 32))
    c = ibp.codec("ibp", rows=x, clusters=1)
    p = ibp.pack(x, tmp_path / "a.ibp", codec=c, layout="inplace")
    with ibp.open(p) as s:
        assert s.codec == "ibp" and s.gather(np.arange(128)).tobytes() == x.tobytes()
        assert s.layout == "inplace"
    p = ibp.pack(x, tmp_path / "b.ibp", codec=ibp.codec("exp", table="hist"), block_rows=16)
    ref = ibp.pack(x, tmp_path / "b2.ibp", codec="exp", exp_table="hist", block_rows=16)
    assert open(p, "rb").read() == open(ref, "rb").read()
    p = ibp.pack(x, tmp_path / "c.ibp", codec=ibp.codec("fp8", lossy=True, format="e5m2"))
    ref = ibp.pack(x, tmp_path / "c2.ibp", codec="fp8", lossy=True, fp8_format="e5m2")
    assert open(p, "rb").read() == open(ref, "rb").read()
    with pytest.raises(ibp.InvalidArgumentError, match="do not apply"):
        ibp.pack(x, tmp_path / "d.ibp", codec=ibp.codec("exp"), exp_table="hist")
    with pytest.raises(ibp.InvalidArgumentError, match="do not apply"):
        ibp.pack(x, tmp_path / "d.ibp", codec=c, threshold=0.9)
    with pytest.raises(ibp.InvalidArgumentError, match="codec object"):
        ibp.pack(x, tmp_path / "d.ibp", codec=3)
    assert not (tmp_path / "d.ibp").exists()
