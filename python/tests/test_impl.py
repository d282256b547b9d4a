"""CPU implementations of the IBP codec (ibp.impls, Codec/Store.set_impl,
using_impl), Codec.encode(out=), paper_layout_size and static_bits."""

import threading

import numpy as np
import pytest

import ibp
from conftest import make_rows

ALL = ("portable", "bmi2", "avx2", "avx512")


@pytest.fixture
def rows(rng):
    return make_rows(rng, 700, (48,), "float32")


def test_impls_lists_what_runs_here():
    have = ibp.impls()
    assert isinstance(have, tuple) and "portable" in have
    assert set(have) <= set(ALL)
    assert list(have) == [n for n in ALL if n in have]  # slowest first
    assert ibp.default_impl() in have


def test_every_impl_gives_the_same_bytes(rows):
    codec = ibp.train(rows, nthreads=1)
    ref = None
    for name in ibp.impls():
        codec.set_impl(name)
        assert codec.impl == name
        enc = codec.encode(rows, nthreads=1)
        if ref is None:
            ref = enc
        assert bytes(enc.payload) == bytes(ref.payload)
        assert np.array_equal(enc.offsets, ref.offsets) and np.array_equal(enc.flags, ref.flags)
        assert np.array_equal(codec.decode(ref, nthreads=1), rows)


def test_set_impl_returns_the_previous_and_auto_restores_the_default(rows):
    codec = ibp.train(rows)
    assert codec.impl == ibp.default_impl()
    assert codec.set_impl("portable") == ibp.default_impl()
    assert codec.set_impl("AUTO") == "portable"  # names are case-insensitive
    assert codec.impl == ibp.default_impl()


def test_using_impl_restores_even_on_error(rows):
    codec = ibp.train(rows)
    before = codec.impl
    with codec.using_impl("portable") as c:
        assert c is codec and codec.impl == "portable"
    assert codec.impl == before
    with pytest.raises(RuntimeError):
        with codec.using_impl("portable"):
            raise RuntimeError("boom")
    assert codec.impl == before


@pytest.mark.parametrize("bad", ["sse4", "", None, 2, "avx-512"])
def test_unknown_name_is_invalid_argument(rows, bad):
    codec = ibp.train(rows)
    with pytest.raises(ibp.InvalidArgumentError) as e:
        codec.set_impl(bad)
    assert isinstance(e.value, ValueError) and "unknown CPU implementation" in str(e.value)
    assert codec.impl == ibp.default_impl()


def test_unsupported_impl_raises_unsupported(rows, monkeypatch):
    missing = [n for n in ALL if n not in ibp.impls()]
    codec = ibp.train(rows)
    if not missing:  # this CPU runs them all: make libibp say no, as it does elsewhere
        from ibp import _lib
        real = _lib.lib.ibp_codec_set_impl
        monkeypatch.setattr(_lib.lib, "ibp_codec_set_impl",
                            lambda c, code: 6 if code == 3 else real(c, code))
        missing = ["avx512"]
    with pytest.raises(ibp.UnsupportedError) as e:
        codec.set_impl(missing[0])
    assert e.value.func == "ibp_codec_set_impl" and e.value.status == 6
    assert codec.impl == ibp.default_impl()


def test_store_set_impl(rows):
    with ibp.Store.from_array(rows) as s:
        assert s.impl == ibp.default_impl()
        ids = np.arange(0, 700, 7)
        ref = s.gather(ids)
        for name in ibp.impls():
            with s.using_impl(name):
                assert s.impl == name
                assert np.array_equal(s.gather(ids), ref)
        assert s.impl == ibp.default_impl()
    with pytest.raises(ibp.InvalidArgumentError):
        s.set_impl("portable")  # closed


def test_store_without_ibp_codec(rows):
    with ibp.Store.from_array(rows, codec="exp") as s:
        assert s.impl is None
        with pytest.raises(ibp.UnsupportedError):
            s.set_impl("portable")
        with pytest.raises(ibp.InvalidArgumentError):
            s.set_impl("nonsense")


def test_set_impl_refused_while_another_thread_uses_the_store(rows):
    with ibp.Store.from_array(rows) as s:
        h = s._acquire()  # what a running gather holds
        try:
            with pytest.raises(ibp.InvalidArgumentError, match="in use"):
                s.set_impl("portable")
        finally:
            s._release()
        s.set_impl("portable")
        assert s.impl == "portable"
        assert h


def test_set_impl_and_gathers_from_threads(rows):
    # gathers never see a half-switched codec; set_impl either switches or refuses
    with ibp.Store.from_array(rows) as s:
        ids = np.arange(700)[::-1].copy()
        ref = s.gather(ids)
        stop, bad = threading.Event(), []

        def gather():
            while not stop.is_set():
                if not np.array_equal(s.gather(ids, nthreads=1), ref):
                    bad.append(1)

        ts = [threading.Thread(target=gather) for _ in range(2)]
        for t in ts:
            t.start()
        switched = 0
        for i in range(200):
            try:
                s.set_impl(ibp.impls()[i % len(ibp.impls())])
                switched += 1
            except ibp.InvalidArgumentError:
                pass
        stop.set()
        for t in ts:
            t.join()
        assert not bad


def test_encode_out_reuses_buffers(rows):
    codec = ibp.train(rows)
    enc = codec.encode(rows)
    ref = bytes(enc.payload)
    assert enc.payload.base is None or enc.payload.base.size == enc.payload.size  # trimmed copy
    again = codec.encode(rows, out=enc)
    assert again is enc and bytes(enc.payload) == ref
    buf, offs, flags = enc._buf, enc.offsets, enc.flags
    assert buf.size >= codec.row_bytes * len(rows)
    codec.encode(rows, out=enc)
    assert enc._buf is buf and enc.offsets is offs and enc.flags is flags  # no new allocation
    assert bytes(enc.payload) == ref and np.array_equal(codec.decode(enc), rows)
    # fewer rows into the same Encoded: shape and arrays follow
    codec.encode(rows[:10], out=enc)
    assert enc.shape == (10, 48) and enc.offsets.size == 11 and enc._buf is buf
    assert np.array_equal(codec.decode(enc), rows[:10])
    with pytest.raises(ibp.InvalidArgumentError):
        codec.encode(rows, out=np.empty(3))


def test_encode_out_with_clusters(rng):
    x = np.concatenate([make_rows(rng, 300, (32,), "float32"),
                        make_rows(rng, 300, (32,), "float32") * 1000])
    codec = ibp.train(x, clusters=4, seed=1)
    enc = codec.encode(x)
    ref = bytes(enc.payload)
    codec.encode(x, out=enc)
    if codec.nclusters > 1:
        assert enc.clusters is not None and enc.clusters.size == len(x)
    assert bytes(enc.payload) == ref and np.array_equal(codec.decode(enc), x)


def test_paper_layout_size_and_static_bits(rows):
    codec = ibp.train(rows, chunk=4, threshold=0.8, clusters=1)
    p = codec.paper_layout_size(rows)
    assert 0 < p <= rows.nbytes
    assert codec.paper_layout_size(rows[:0]) == 0
    assert 0 < codec.static_bits(0) <= codec.row_bytes * 8
    with pytest.raises(ibp.InvalidArgumentError):
        codec.static_bits(codec.nclusters)
    with pytest.raises(ibp.InvalidArgumentError):
        codec.paper_layout_size(rows[:, :8])
