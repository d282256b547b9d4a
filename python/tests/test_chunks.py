"""ibp.exp / ibp.fp8 compress_chunks and decompress_chunks (ibp.Chunks)."""

import numpy as np
import pytest

import ibp
from conftest import bf16_bits

FRAME = 32  # ibp.exp/fp8.compress header for a 1-D tensor: 24 + 8 * ndim


def unsealed(block: bytes, codec: str) -> bytes:
    """A chunk's block without its checksum (flag cleared, sum zeroed): the
    block a whole-tensor frame holds (the frame's checksum covers it)."""
    b = bytearray(block)
    if codec == "exp":
        b[48] = 0
    else:
        b[6] &= ~4
    b[56:64] = bytes(8)
    return bytes(b)


def data(rng, shape, dtype):
    x = rng.standard_normal(shape) * 0.02
    if dtype == "bf16":
        return bf16_bits(x), "bf16"
    return x.astype(dtype), None


MODS = [ibp.exp, ibp.fp8]


@pytest.mark.parametrize("mod", MODS, ids=["exp", "fp8"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bf16"])
@pytest.mark.parametrize("chunk", [64, 100, 1, 5000])
def test_round_trip_and_independent_chunks(rng, mod, dtype, chunk):
    x, dt = data(rng, (50, 64), dtype)
    ch = mod.compress_chunks(x, chunk, dtype=dt, nthreads=1)
    assert isinstance(ch, ibp.Chunks) and ch.codec == mod.__name__.split(".")[-1]
    assert ch.shape == (50, 64) and ch.nchunks == -(-x.size // chunk) == len(ch)
    assert ch.offsets.dtype == np.uint64 and ch.offsets[0] == 0 and ch.nbytes == ch.payload.nbytes
    back = mod.decompress_chunks(ch)
    assert back.shape == x.shape
    if mod is ibp.exp:
        assert np.array_equal(back.view(x.dtype) if dtype == "bf16" else back, x)
    elif chunk >= x.size:  # one chunk: the whole-tensor codec's result, bit for bit
        ref = mod.decompress(mod.compress(x, dtype=dt))
        assert np.array_equal(np.asarray(back).view(np.uint8), np.asarray(ref).view(np.uint8))
    else:  # lossy: close to the input
        f = (lambda a: (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)) \
            if dtype == "bf16" else (lambda a: a.astype(np.float32))
        err = np.linalg.norm(f(np.asarray(back)) - f(x)) / np.linalg.norm(f(x))
        assert err < 0.1
    # each chunk is exactly what compress gives for those elements alone,
    # but for the chunk's own checksum (a frame's block has the frame's)
    flat = x.reshape(-1)
    for i in sorted({0, ch.nchunks // 2, ch.nchunks - 1}):
        part = flat[i * chunk:(i + 1) * chunk]
        got = bytes(ch.chunk(i))
        assert unsealed(got, ch.codec) == bytes(mod.compress(part, dtype=dt))[FRAME:]
        assert got != unsealed(got, ch.codec), "a chunk carries its checksum"


@pytest.mark.parametrize("mod", MODS, ids=["exp", "fp8"])
def test_out_reuse_and_out_array(rng, mod):
    x, _ = data(rng, (40, 32), "float32")
    ch = mod.compress_chunks(x, 32)
    ref = bytes(ch.payload)
    again = mod.compress_chunks(x, 32, out=ch)
    assert again is ch and bytes(ch.payload) == ref
    buf, offs = ch._buf, ch.offsets
    mod.compress_chunks(x, 32, out=ch)
    assert ch._buf is buf and ch.offsets is offs
    out = np.empty_like(x)
    assert mod.decompress_chunks(ch, out=out) is out
    with pytest.raises(ibp.InvalidArgumentError):
        mod.decompress_chunks(ch, out=np.empty((40, 31), np.float32))
    with pytest.raises(ibp.InvalidArgumentError):
        mod.compress_chunks(x, 32, out=bytearray(10))


@pytest.mark.parametrize("mod", MODS, ids=["exp", "fp8"])
def test_torch_in_torch_out(rng, mod, torch):
    t = torch.randn(30, 16).to(torch.bfloat16)
    ch = mod.compress_chunks(t, 16)
    back = mod.decompress_chunks(ch)
    assert isinstance(back, torch.Tensor) and back.dtype == torch.bfloat16 and back.shape == t.shape
    if mod is ibp.exp:
        assert torch.equal(back, t)


@pytest.mark.parametrize("mod", MODS, ids=["exp", "fp8"])
def test_empty_and_bad_arguments(rng, mod):
    ch = mod.compress_chunks(np.empty((0, 8), np.float32), 8)
    assert ch.nchunks == 0 and ch.nbytes == 0
    assert mod.decompress_chunks(ch).shape == (0, 8)
    x = np.ones((4, 4), np.float32)
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ibp.InvalidArgumentError):
            mod.compress_chunks(x, bad)
    with pytest.raises(ibp.InvalidArgumentError):
        mod.compress_chunks(np.ones(4, np.int32), 2)
    other = ibp.fp8 if mod is ibp.exp else ibp.exp
    with pytest.raises(ibp.InvalidArgumentError):
        other.decompress_chunks(mod.compress_chunks(x, 4))
    with pytest.raises(ibp.InvalidArgumentError):
        mod.decompress_chunks(b"not chunks")


@pytest.mark.parametrize("mod", MODS, ids=["exp", "fp8"])
def test_rebuilt_from_parts_and_corruption(rng, mod):
    x, _ = data(rng, (20, 64), "float32")
    ch = mod.compress_chunks(x, 64)
    name = ch.codec
    again = ibp.Chunks(name, bytes(ch.payload), ch.offsets.astype(np.int64), ch.shape, "float32", 64)
    assert np.array_equal(np.asarray(mod.decompress_chunks(again)), np.asarray(mod.decompress_chunks(ch)))
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.Chunks(name, ch.payload, ch.offsets[:-1], ch.shape, "float32", 64)
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.Chunks("zstd", ch.payload, ch.offsets, ch.shape, "float32", 64)
    with pytest.raises(ibp.InvalidArgumentError):
        ibp.Chunks(name, ch.payload, ch.offsets, ch.shape, "int32", 64)
    # offsets past the payload, decreasing offsets, flipped bytes: CorruptError, never a crash
    offs = ch.offsets.copy()
    offs[-1] += 1000
    with pytest.raises(ibp.CorruptError):
        mod.decompress_chunks(ibp.Chunks(name, ch.payload, offs, ch.shape, "float32", 64))
    offs = ch.offsets.copy()
    offs[3], offs[4] = offs[4], offs[3]
    with pytest.raises(ibp.CorruptError):
        mod.decompress_chunks(ibp.Chunks(name, ch.payload, offs, ch.shape, "float32", 64))
    r = np.random.default_rng(5)
    for _ in range(30):
        p = ch.payload.copy()
        k = int(r.integers(0, 64))  # inside the first block's header
        p[k] ^= np.uint8(1 << int(r.integers(0, 8)))
        try:
            mod.decompress_chunks(ibp.Chunks(name, p, ch.offsets, ch.shape, "float32", 64))
        except ibp.CorruptError:
            pass
    with pytest.raises(ibp.CorruptError):
        ibp.Chunks(name, ch.payload, -ch.offsets.astype(np.int64), ch.shape, "float32", 64)
