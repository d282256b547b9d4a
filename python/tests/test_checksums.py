"""Checksummed buffers (ibp.exp / ibp.fp8): every single-bit flip and every
truncation of a compressed buffer raises ibp.CorruptError, trusted=True
skips only the checksum, and buffers of the earlier format (frame version 1,
blocks of format version 1, written by libibp before checksums existed:
python/tests/data/v1/) still decode to the same values."""

import os

import numpy as np
import pytest

import ibp
import ibp.exp
import ibp.fp8

DATA = os.path.join(os.path.dirname(__file__), "data", "v1")


def _kv():
    return np.load(os.path.join(DATA, "kv_bf16.npy"))


def _emb():
    return np.load(os.path.join(DATA, "emb_f32.npy"))


def _flips(buf, rng, count=1000):
    """Every bit of the first 64 bytes (the frame and block headers) and
    `count` random bits of the rest."""
    b = np.frombuffer(bytes(buf), dtype=np.uint8)
    head = min(64 * 8, b.size * 8)
    bits = list(range(head)) + [int(x) for x in rng.integers(head, b.size * 8, size=count)]
    for bit in bits:
        c = b.copy()
        c[bit // 8] ^= np.uint8(1 << (bit % 8))
        yield bit, c


CASES = [
    ("exp", "bf16", lambda: ibp.exp.compress(_kv(), dtype="bf16"), ibp.exp.decompress),
    ("exp", "f32", lambda: ibp.exp.compress(_emb()), ibp.exp.decompress),
    ("fp8", "f32", lambda: ibp.fp8.compress(_emb()), ibp.fp8.decompress),
]


@pytest.mark.parametrize("codec,dt,make,dec", CASES, ids=[c[0] + "-" + c[1] for c in CASES])
def test_every_flip_and_truncation_raises(codec, dt, make, dec):
    buf = make()
    rng = np.random.default_rng(17)
    good = dec(buf)
    for bit, c in _flips(buf, rng):
        with pytest.raises(ibp.CorruptError):
            dec(c)
            pytest.fail("%s %s: bit %d flipped decoded without an error" % (codec, dt, bit))
    b = bytes(buf)
    for n in range(len(b)):  # every truncation
        with pytest.raises(ibp.CorruptError):
            dec(b[:n])
    # the intact buffer, with and without the check
    assert np.array_equal(np.asarray(dec(buf, trusted=True)).view(np.uint8),
                          np.asarray(good).view(np.uint8))


def test_checksum_error_is_a_corrupt_error_and_trusted_skips_it():
    emb = _emb()
    buf = np.array(ibp.exp.compress(emb))
    hdr = 24 + 8 * emb.ndim
    # a sign/mantissa byte of the block: structurally valid, only the checksum sees it
    c = buf.copy()
    c[hdr + 64 + 4096 // 8 * 0 + 300] ^= 1
    with pytest.raises(ibp.ChecksumError):
        ibp.exp.decompress(c)
    try:
        back = ibp.exp.decompress(c, trusted=True)  # the caller vouches: only structure is checked
    except ibp.CorruptError:
        back = None  # that byte happened to be structural; the point is the checksum was skipped
    if back is not None:
        assert back.shape == emb.shape


@pytest.mark.parametrize("codec", ["exp", "fp8"])
def test_chunks_every_flip_raises(codec):
    emb = _emb()
    mod = ibp.exp if codec == "exp" else ibp.fp8
    ch = mod.compress_chunks(emb, chunk_elems=emb.shape[1])
    good = mod.decompress_chunks(ch)
    payload = np.asarray(ch.payload).copy()
    rng = np.random.default_rng(5)
    # every bit of the first block's header, 1000 random bits anywhere
    bits = list(range(64 * 8)) + [int(x) for x in rng.integers(0, payload.size * 8, size=1000)]
    for bit in bits:
        p = payload.copy()
        p[bit // 8] ^= np.uint8(1 << (bit % 8))
        bad = ibp.Chunks(codec, p, ch.offsets, ch.shape, ch.dtype, ch.chunk_elems)
        with pytest.raises(ibp.CorruptError):
            mod.decompress_chunks(bad)
            pytest.fail("%s chunks: bit %d flipped decoded without an error" % (codec, bit))
    back = mod.decompress_chunks(ch, trusted=True)
    assert np.array_equal(back.view(np.uint8), good.view(np.uint8))


def _v1(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


def test_version_1_buffers_still_decode():
    kv, emb = _kv(), _emb()
    back = ibp.exp.decompress(_v1("exp_bf16.ibpt"))
    assert np.array_equal(back.view(np.uint16), kv)
    assert np.array_equal(ibp.exp.decompress(_v1("exp_f32.ibpt")), emb)
    got = ibp.fp8.decompress(_v1("fp8_f32.ibpt"))
    assert np.array_equal(got.view(np.uint32), np.load(os.path.join(DATA, "fp8_f32_decoded.npy")).view(np.uint32))
    for codec, mod in (("exp", ibp.exp), ("fp8", ibp.fp8)):
        payload = np.load(os.path.join(DATA, codec + "_f32_chunks_payload.npy"))
        offs = np.load(os.path.join(DATA, codec + "_f32_chunks_offsets.npy"))
        ch = ibp.Chunks(codec, payload, offs, emb.shape, "float32", emb.shape[1])
        out = mod.decompress_chunks(ch)
        want = emb if codec == "exp" else np.load(os.path.join(DATA, "fp8_f32_chunks_decoded.npy"))
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    # a version-1 frame is still checked structurally: damage in its header is refused
    b = bytearray(_v1("exp_f32.ibpt"))
    b[6] = 99  # dtype code
    with pytest.raises(ibp.CorruptError):
        ibp.exp.decompress(bytes(b))


def test_new_buffers_are_version_2_with_a_checksum():
    emb = _emb()
    for mod in (ibp.exp, ibp.fp8):
        b = bytes(mod.compress(emb))
        assert b[:4] == b"IBPT" and b[4] == 2
        assert int.from_bytes(b[16:24], "little") != 0
    with pytest.raises(ibp.CorruptError, match="frame version 3"):
        b = bytearray(ibp.exp.compress(emb))
        b[4] = 3
        ibp.exp.decompress(bytes(b))
