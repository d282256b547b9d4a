"""Codec "exp-rows" (container codec 4, the exponent codec row by row) from
Python: ibp.pack / Store.from_array with codec="exp-rows", gathers exact for
float32, float16 and bfloat16 (NumPy and torch) at a SIMD row width (64) and
an odd one (40: the portable decoder), pickling, the options it refuses, and
ibp.torch embedding bags over it against torch.nn.EmbeddingBag (bitwise for
float32 and float16, bfloat16 within test_torch_bag.py's ulp bounds). Small
tables: the whole file runs in a few seconds."""

import copy
import io
import pickle

import numpy as np
import pytest

import ibp
from conftest import bf16_bits

WIDTHS = [64, 40]
ROWS = 300


def table(width, seed=0, specials=True):
    """float32 rows like trained weights (a few exponents common), with
    specials that take the escape path: zeros, -0, subnormals, huge and
    tiny values, inf and NaN (specials=False: finite, for bags)."""
    rng = np.random.default_rng(seed + width)
    a = (rng.standard_normal((ROWS, width)) * 0.05).astype(np.float32)
    a[rng.random(a.shape) < 0.02] *= 1e4  # rare exponents
    a[3] = 0.0
    a[4] = -0.0
    if specials:
        a[5, ::3] = np.float32(1e-40)  # subnormal
        a[6, 1] = np.inf
        a[6, 2] = -np.inf
        a[6, 3] = np.nan
        a[7, :5] = [np.float32(3e38), np.float32(-1e-30), 1.0, -2.0, 65504.0]
    return a


def as_dtype(a, dtype):
    """(array for Store.from_array, options, reference bits) for dtype."""
    if dtype == "float32":
        return a, {}, a.view(np.uint32)
    if dtype == "float16":
        with np.errstate(over="ignore"):  # 3e38 becomes inf, on purpose
            h = a.astype(np.float16)
        return h, {}, h.view(np.uint16)
    b = bf16_bits(a)
    return b, {"dtype": "bf16"}, b


def bits_of(x):
    """The bit patterns of a NumPy array or torch tensor, as NumPy."""
    if hasattr(x, "numpy"):
        t = x.contiguous()
        import torch
        return t.view(torch.int32 if t.element_size() == 4 else torch.int16).numpy().view(
            np.uint32 if t.element_size() == 4 else np.uint16)
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


# ---- stores ------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_store_gather_numpy(dtype, width):
    arr, opts, ref = as_dtype(table(width), dtype)
    s = ibp.Store.from_array(arr, codec="exp-rows", **opts)
    assert s.codec == "exp-rows" and not s.lossy and s.layout == "packed"
    assert s.dtype == dtype and s.shape == (ROWS, width) and len(s) == ROWS
    assert s.nblocks is None and s.block_rows is None and s.chunk is None
    assert "codec=exp-rows" in repr(s)
    ids = np.array([0, ROWS - 1, 6, 7, 5, 5, 3, 4, 123, 6], dtype=np.int64)
    assert np.array_equal(bits_of(s.gather(ids)), ref[ids])
    ids2 = np.random.default_rng(1).integers(0, ROWS, (7, 9)).astype(np.int32)
    assert np.array_equal(bits_of(s.gather(ids2)), ref[ids2])
    assert np.array_equal(bits_of(s.gather(ids, nthreads=1)), ref[ids])
    assert np.array_equal(bits_of(s[-1]), ref[-1]) and np.array_equal(bits_of(s[10:20:3]), ref[10:20:3])
    assert np.array_equal(bits_of(s.read()), ref)
    s.verify()
    with pytest.raises(ibp.OutOfRangeError):
        s.gather([ROWS])
    s.close()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_store_gather_torch(torch, dtype, width):
    w = torch.from_numpy(table(width)).to(getattr(torch, dtype))
    s = ibp.Store.from_array(w, codec="exp-rows")
    assert s.codec == "exp-rows" and s.dtype == dtype
    ids = torch.tensor([[1, 2, 6], [ROWS - 1, 6, 5]])
    out = s.gather(ids)
    assert isinstance(out, torch.Tensor) and out.dtype == w.dtype and out.shape == (2, 3, width)
    assert np.array_equal(bits_of(out), bits_of(w[ids]))
    buf = torch.empty(2, 3, width, dtype=w.dtype)
    assert s.gather(ids.to(torch.int32), out=buf) is buf and np.array_equal(bits_of(buf), bits_of(w[ids]))
    assert np.array_equal(bits_of(s.read(out=torch.empty_like(w))), bits_of(w))


@pytest.mark.parametrize("mmap", [False, True])
def test_pack_open_and_size(tmp_path, mmap):
    a = table(64, specials=False)
    for dtype, raw_share in (("float32", 0.95), ("float16", 1.0), ("bfloat16", 0.85)):
        arr, opts, ref = as_dtype(a, dtype)
        p = tmp_path / ("%s.ibp" % dtype)
        assert ibp.pack(arr, p, codec="exp-rows", nthreads=2, **opts) == p
        with ibp.open(p, verify="full", mmap=mmap) as s:
            assert s.codec == "exp-rows" and s.path == str(p)
            assert np.array_equal(bits_of(s.read()), ref)
            # weights-like rows shrink (about 0.85 / 0.93 / 0.70 of raw, header included: no row offsets)
            assert s.file_bytes < raw_share * s.nrows * s.row_bytes, (dtype, s.ratio)
            # a file-backed store pickles as its path
            s2 = pickle.loads(pickle.dumps(s))
            assert s2.codec == "exp-rows" and np.array_equal(bits_of(s2.gather([9, 1])), ref[[9, 1]])
            s2.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_pickle_and_deepcopy_store(width):
    arr, opts, ref = as_dtype(table(width), "bfloat16")
    s = ibp.Store.from_array(arr, codec="exp-rows", **opts)
    ids = np.arange(ROWS)[::-1].copy()
    for proto in (2, pickle.HIGHEST_PROTOCOL):
        s2 = pickle.loads(pickle.dumps(s, protocol=proto))
        assert s2.codec == "exp-rows" and s2.path is None and s2.shape == s.shape
        assert np.array_equal(bits_of(s2.gather(ids)), ref[ids])
        s2.close()
    s3 = copy.deepcopy(s)
    assert np.array_equal(bits_of(s3.gather(ids)), ref[ids])
    # its bytes open again
    s4 = ibp.Store.from_bytes(s.container_bytes(), verify="full")
    assert s4.codec == "exp-rows" and np.array_equal(bits_of(s4.read()), ref)


def test_options_and_errors():
    a = table(40)
    for bad in (dict(block_rows=4), dict(exp_table="hist"), dict(exp_sigma=1.0), dict(layout="packed"),
                dict(chunk=2), dict(clusters=2), dict(fp8_format="e4m3"), dict(xval=1)):
        with pytest.raises(ibp.InvalidArgumentError, match="do not apply to codec 'exp-rows'"):
            ibp.Store.from_array(a, codec="exp-rows", **bad)
    with pytest.raises(ibp.InvalidArgumentError, match="nthreads"):
        ibp.Store.from_array(a, codec="exp-rows", nthreads=-1)
    with pytest.raises(ibp.InvalidArgumentError, match="exp-rows"):  # not a float dtype
        ibp.Store.from_array(np.zeros((4, 8), np.int32), codec="exp-rows")
    with pytest.raises(ibp.InvalidArgumentError, match="0-dimensional"):
        ibp.Store.from_array(np.float32(1.0), codec="exp-rows")
    with pytest.raises(ibp.InvalidArgumentError, match="'exp-rows'"):  # the list of codecs names it
        ibp.Store.from_array(a, codec="exp_rows")
    # no codec object: the error says where the codec is
    with pytest.raises(ibp.InvalidArgumentError, match="ibp.pack"):
        ibp.codec("exp-rows")
    # an empty table and a 1-D array (rows of one element) still work
    s = ibp.Store.from_array(a[:0], codec="exp-rows")
    assert s.nrows == 0 and s.read().shape == (0, 40)
    v = a[:, 0].copy()
    s = ibp.Store.from_array(v, codec="exp-rows")
    assert np.array_equal(bits_of(s.read()), v.view(np.uint32))


def test_no_gpu_form():
    """Only codec "ibp" stores have a CudaStore: without a GPU the answer is
    ibp.NoDeviceError (as for "exp"), with one ibp.UnsupportedError naming
    the codec."""
    s = ibp.Store.from_array(table(64), codec="exp-rows")
    if ibp.device_count() == 0:
        with pytest.raises(ibp.NoDeviceError):
            s.to_cuda()
    else:
        pytest.importorskip("torch")
        with pytest.raises(ibp.UnsupportedError, match="exp-rows"):
            s.to_cuda()


# ---- embedding bags -----------------------------------------------------------


def bags(torch, n_rows, n_bags, max_len, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, max_len + 1, (n_bags,), generator=g)
    lens[::7] = 0  # empty bags
    idx = torch.randint(0, n_rows, (int(lens.sum()),), generator=g)
    offsets = torch.zeros(n_bags, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lens[:-1], 0)
    return idx.to(dtype), offsets.to(dtype), g


def assert_bitwise(torch, a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(torch.int32 if a.dtype == torch.float32 else torch.int16),
                       b.view(torch.int32 if b.dtype == torch.float32 else torch.int16)), \
        "max |diff| %g" % (a.float() - b.float()).abs().max()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_bitwise(torch, dtype, mode, width):
    it = pytest.importorskip("ibp.torch")
    w = torch.from_numpy(table(width, specials=False)).to(getattr(torch, dtype))
    n = w.shape[0]
    for idt in (torch.int64, torch.int32):
        idx, offsets, g = bags(torch, n, 60, 12, seed=width, dtype=idt)
        idx[::5] = 4  # the -0 row, often (a lone -0 sums to +0)
        ours = it.EmbeddingBag.from_pretrained(w, mode=mode, codec="exp-rows")
        assert ours.store.codec == "exp-rows" and "codec=exp-rows" in repr(ours)
        ref = torch.nn.EmbeddingBag.from_pretrained(w, mode=mode)
        assert_bitwise(torch, ours(idx, offsets), ref(idx, offsets))
        x2 = torch.randint(0, n, (16, 7), generator=g, dtype=idt)  # 2-D input: a bag per row
        assert_bitwise(torch, ours(x2), ref(x2))
        for nthreads in (1, 3):
            ours.nthreads = nthreads
            assert_bitwise(torch, ours(idx, offsets), ref(idx, offsets))
        if mode == "sum":
            psw = torch.rand(idx.shape, generator=g).to(w.dtype)
            assert_bitwise(torch, ours(idx, offsets, per_sample_weights=psw),
                           ref(idx, offsets, per_sample_weights=psw))
        # padding_idx and include_last_offset
        full = torch.cat([offsets, torch.tensor([idx.numel()], dtype=idt)])
        kw = dict(mode=mode, padding_idx=17, include_last_offset=True)
        idx_p = idx.clone()
        idx_p[::3] = 17
        ours = it.EmbeddingBag.from_pretrained(w, codec="exp-rows", **kw)
        ref = torch.nn.EmbeddingBag.from_pretrained(w, **kw)
        assert_bitwise(torch, ours(idx_p, full), ref(idx_p, full))
        if mode == "sum":
            psw = torch.rand(idx.shape, generator=g).to(w.dtype)
            assert_bitwise(torch, ours(idx_p, full, psw), ref(idx_p, full, psw))


def bf16_ulp(torch, x):
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** -126)))
    return torch.pow(2.0, e - 7)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_bfloat16(torch, mode, width):
    """test_torch_bag.py's bounds: 1 bfloat16 ulp of PyTorch for sums, 2 for
    means, none for max; sums within half an ulp of the float64 sum."""
    it = pytest.importorskip("ibp.torch")
    w = torch.from_numpy(table(width, specials=False)).to(torch.bfloat16)
    idx, offsets, _ = bags(torch, w.shape[0], 80, 20, seed=3, dtype=torch.int64)
    bag = it.EmbeddingBag.from_pretrained(w, mode=mode, codec="exp-rows")
    assert bag.store.codec == "exp-rows"
    ours = bag(idx, offsets).float()
    ref = torch.nn.EmbeddingBag.from_pretrained(w, mode=mode)(idx, offsets).float()
    exact = torch.nn.functional.embedding_bag(idx, w.double(), offsets, mode=mode)
    ulp = bf16_ulp(torch, exact.float())
    allowed = {"sum": 1.0, "mean": 2.0, "max": 0.0}[mode]
    assert ((ours - ref).abs() <= allowed * ulp).all()
    if mode == "sum":
        assert ((ours.double() - exact).abs() <= 0.5 * ulp.double() * (1 + 1e-6)).all()


def test_embedding_bag_pickle_deepcopy_state_dict(torch):
    it = pytest.importorskip("ibp.torch")
    w = torch.from_numpy(table(40, specials=False)).to(torch.float16)
    bag = it.EmbeddingBag.from_pretrained(w, mode="sum", codec="exp-rows", padding_idx=2)
    idx, offsets, g = bags(torch, w.shape[0], 30, 9, seed=7, dtype=torch.int64)
    want = bag(idx, offsets)
    for other in (pickle.loads(pickle.dumps(bag)), copy.deepcopy(bag)):
        assert other.store.codec == "exp-rows" and other.padding_idx == 2
        assert_bitwise(torch, other(idx, offsets), want)
    # the state dict holds the compressed table; it loads into another module
    f = io.BytesIO()
    torch.save(bag.state_dict(), f)
    f.seek(0)
    other = it.EmbeddingBag.from_pretrained(torch.zeros_like(w), mode="sum", codec="exp-rows", padding_idx=2)
    other.load_state_dict(torch.load(f))
    assert other.store.codec == "exp-rows"
    assert_bitwise(torch, other(idx, offsets), want)
    # options of other codecs are refused, as by Store.from_array
    with pytest.raises(ibp.InvalidArgumentError, match="block_rows"):
        it.EmbeddingBag.from_pretrained(w, codec="exp-rows", block_rows=4)
    with pytest.raises(ibp.Error):
        it.EmbeddingBag.from_pretrained(w, codec="exp-rows", exp_table="hist")


def test_embedding_bag_collection(torch):
    it = pytest.importorskip("ibp.torch")
    g = torch.Generator().manual_seed(5)
    user = torch.from_numpy(table(64, specials=False))
    item = torch.from_numpy(table(40, seed=1, specials=False)).to(torch.float16)
    for codec in ("exp-rows", {"user": "exp-rows", "item": "exp-rows"}):
        ebc = it.EmbeddingBagCollection.from_pretrained({"user": user, "item": item}, mode="sum", codec=codec)
        assert all(b.store.codec == "exp-rows" for b in ebc.bags.values())
        B = 6
        feats, want = {}, {}
        for name, t in (("user", user), ("item", item)):
            lens = torch.randint(0, 5, (B,), generator=g)
            v = torch.randint(0, t.shape[0], (int(lens.sum()),), generator=g)
            feats[name] = (v, lens)
            offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)[:-1]])
            want[name] = torch.nn.EmbeddingBag.from_pretrained(t, mode="sum")(v, offsets)
        kt = ebc(feats)
        for name in ("user", "item"):
            assert_bitwise(torch, kt[name], want[name].to(kt[name].dtype))
    with pytest.raises(ibp.InvalidArgumentError):
        it.EmbeddingBagCollection.from_pretrained({"user": user}, codec="exp-rows",
                                                  codec_opts={"user": {"block_rows": 4}})
