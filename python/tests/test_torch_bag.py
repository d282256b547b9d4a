"""ibp.torch.EmbeddingBag and EmbeddingBagCollection against torch.nn.EmbeddingBag
on the real MiniLM token-embedding table (datasets/sample; the whole table
too when datasets/cache has it) and on random bags.

Equality is bitwise for float32 and float16 tables in every mode (libibp's
fused kernel accumulates in PyTorch's CPU order: ibp/bag.h). bfloat16 is the
exception: PyTorch's fbgemm bfloat16 kernel rounds its sums differently, so
there the test bounds the difference by 1 bfloat16 ulp for sums and 2 for
means (a mean divides two such sums' roundings), and checks that ibp's own
result is within half an ulp of the float64 sum (correctly rounded)."""

import os

import numpy as np
import pytest

import ibp

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch as it  # noqa: E402
from conftest import REPO  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

SAMPLE = os.path.join(REPO, "datasets", "sample", "minilm_tok_emb_f32.npy")
FULL = os.path.join(REPO, "datasets", "cache", "minilm_tok_emb_f32.npy")


def bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def assert_bitwise(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(bits(a), bits(b)), "max |diff| %g" % (a.float() - b.float()).abs().max()


@pytest.fixture(scope="module")
def minilm():
    """The MiniLM token embeddings: the committed 1024-row sample (rows
    1996..3019, frequent English word pieces), or the whole 30522-row table
    when make_datasets.py has cached it."""
    path = FULL if os.path.exists(FULL) else SAMPLE
    return torch.from_numpy(np.load(path))


@pytest.fixture(scope="module")
def minilm_store(minilm):
    """The table compressed once (packing the whole table takes a second);
    bags made from it share it."""
    s = ibp.Store.from_array(minilm)
    yield s
    s.close()


def random_bags(n_rows, n_bags, max_len, seed, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, max_len + 1, (n_bags,), generator=g)
    lens[::7] = 0  # empty bags
    idx = torch.randint(0, n_rows, (int(lens.sum()),), generator=g)
    offsets = torch.zeros(n_bags, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lens[:-1], 0)
    return idx.to(dtype), offsets.to(dtype), g


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("idt", [torch.int64, torch.int32])
def test_minilm_table_bitwise(minilm, minilm_store, mode, idt):
    bag = it.EmbeddingBag.from_pretrained(minilm_store, mode=mode)
    assert bag.store.codec == "ibp" and bag.nbytes < minilm.numel() * 4
    ref = torch.nn.EmbeddingBag.from_pretrained(minilm, mode=mode)
    idx, offsets, g = random_bags(minilm.shape[0], 512, 40, seed=1, dtype=idt)
    assert_bitwise(bag(idx, offsets), ref(idx, offsets))
    x2 = torch.randint(0, minilm.shape[0], (64, 20), generator=g, dtype=idt)
    assert_bitwise(bag(x2), ref(x2))
    if mode == "sum":
        w = torch.rand(idx.shape, generator=g)
        assert_bitwise(bag(idx, offsets, per_sample_weights=w), ref(idx, offsets, per_sample_weights=w))


def test_minilm_padding_and_last_offset(minilm, minilm_store):
    n = minilm.shape[0]
    idx, offsets, g = random_bags(n, 300, 30, seed=2)
    idx[::5] = 17  # the padding row, often
    full = torch.cat([offsets, torch.tensor([idx.numel()])])
    for mode in ("sum", "mean", "max"):
        for pad in (17, -n + 17):
            kw = dict(mode=mode, padding_idx=pad, include_last_offset=True)
            ours = it.EmbeddingBag.from_pretrained(minilm_store, **kw)
            ref = torch.nn.EmbeddingBag.from_pretrained(minilm, **kw)
            assert ours.padding_idx == 17
            assert_bitwise(ours(idx, full), ref(idx, full))
            if mode == "sum":  # PyTorch's padding kernel rounds w * row before adding
                w = torch.rand(idx.shape, generator=g)
                assert_bitwise(ours(idx, full, w), ref(idx, full, w))
    # a bag of nothing but padding gives zeros
    ours = it.EmbeddingBag.from_pretrained(minilm_store, mode="max", padding_idx=3)
    out = ours(torch.tensor([3, 3, 5]), torch.tensor([0, 2]))
    assert torch.equal(out[0], torch.zeros(minilm.shape[1])) and torch.equal(out[1], minilm[5])


@settings(max_examples=60, deadline=None)
@given(n_bags=st.integers(1, 40), max_len=st.integers(0, 9), seed=st.integers(0, 2**31 - 1),
       mode=st.sampled_from(["sum", "mean", "max"]), dtype=st.sampled_from([torch.float32, torch.float16]),
       weighted=st.booleans(), pad=st.sampled_from([None, 0, 3]), nthreads=st.sampled_from([0, 1, 3]))
def test_random_bags_bitwise(n_bags, max_len, seed, mode, dtype, weighted, pad, nthreads):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(50, 13, generator=g) * 0.5).to(dtype)
    w[4] = -0.0  # a lone -0 row sums to +0 (PyTorch starts at +0)
    idx, offsets, g = random_bags(50, n_bags, max_len, seed)
    idx[::3] = 4
    psw = torch.rand(idx.shape, generator=g).to(dtype) if weighted and mode == "sum" else None
    ours = it.EmbeddingBag.from_pretrained(w, mode=mode, padding_idx=pad, nthreads=nthreads)
    ref = torch.nn.EmbeddingBag.from_pretrained(w, mode=mode, padding_idx=pad)
    assert_bitwise(ours(idx, offsets, psw), ref(idx, offsets, psw))


def bf16_ulp(x):
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** -126)))
    return torch.pow(2.0, e - 7)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bfloat16_tolerance(minilm, mode):
    table = minilm.to(torch.bfloat16)
    idx, offsets, g = random_bags(table.shape[0], 400, 40, seed=3)
    ours = it.EmbeddingBag.from_pretrained(table, mode=mode)(idx, offsets).float()
    ref = torch.nn.EmbeddingBag.from_pretrained(table, mode=mode)(idx, offsets).float()
    exact = torch.nn.functional.embedding_bag(idx, table.double(), offsets, mode=mode)
    ulp = bf16_ulp(exact.float())
    allowed = {"sum": 1.0, "mean": 2.0, "max": 0.0}[mode]
    assert ((ours - ref).abs() <= allowed * ulp).all()
    if mode == "sum":
        assert ((ours.double() - exact).abs() <= 0.5 * ulp.double() * (1 + 1e-6)).all()


def test_codecs_and_threads(minilm, minilm_store):
    idx, offsets, _ = random_bags(minilm.shape[0], 200, 20, seed=4)
    ref = torch.nn.EmbeddingBag.from_pretrained(minilm, mode="mean")(idx, offsets)
    part = minilm[:2048]  # the exp codec: blocks of 8 rows
    ref_part = torch.nn.EmbeddingBag.from_pretrained(part, mode="mean")(idx % 2048, offsets)
    bags = [(it.EmbeddingBag.from_pretrained(minilm_store, mode="mean"), idx, ref),
            (it.EmbeddingBag.from_pretrained(part, mode="mean", codec="exp", block_rows=8), idx % 2048, ref_part)]
    for bag, ids, want in bags:
        for nthreads in (1, 2, 0):
            bag.nthreads = nthreads
            assert_bitwise(bag(ids, offsets), want)
    assert bags[1][0].store.codec == "exp"
    assert_bitwise(it.embedding_bag(idx, minilm_store, offsets, mode="mean"), ref)


def test_inference_only_and_errors(minilm, minilm_store):
    for kw in (dict(freeze=False), dict(max_norm=1.0), dict(scale_grad_by_freq=True), dict(sparse=True)):
        with pytest.raises(ibp.UnsupportedError, match="inference only"):
            it.EmbeddingBag.from_pretrained(minilm, **kw)
    bag = it.EmbeddingBag.from_pretrained(minilm_store, mode="sum")
    assert list(bag.parameters()) == []
    with pytest.raises(ibp.UnsupportedError, match="inference only"):
        bag.requires_grad_()
    idx, offsets = torch.tensor([1, 2, 3]), torch.tensor([0, 1])
    out = bag(idx, offsets)
    assert not out.requires_grad
    with pytest.raises(ibp.UnsupportedError, match="inference only"):
        bag(idx, offsets, per_sample_weights=torch.ones(3, requires_grad=True))
    with torch.no_grad():  # no gradient asked for: fine
        bag(idx, offsets, per_sample_weights=torch.ones(3, requires_grad=True))
    mean = it.EmbeddingBag.from_pretrained(minilm_store, mode="mean")
    with pytest.raises(NotImplementedError, match="per_sample_weights"):
        mean(idx, offsets, per_sample_weights=torch.ones(3))
    with pytest.raises(ibp.OutOfRangeError):
        bag(torch.tensor([minilm.shape[0]]), torch.tensor([0]))
    with pytest.raises(IndexError):
        bag(torch.tensor([-1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="offsets"):
        bag(idx)  # 1-D input needs offsets
    with pytest.raises(ValueError):
        bag(idx.view(1, 3), offsets)  # 2-D input takes none
    with pytest.raises(ValueError, match="offsets\\[0\\]"):
        bag(idx, torch.tensor([1, 2]))
    with pytest.raises(ibp.InvalidArgumentError):
        bag(idx, torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError):
        bag(idx.float(), offsets)
    last = it.EmbeddingBag.from_pretrained(minilm_store, mode="sum", include_last_offset=True)
    with pytest.raises(ValueError, match="last offset"):
        last(idx, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError):
        it.EmbeddingBag.from_pretrained(minilm_store, mode="median")
    with pytest.raises(ValueError):
        it.EmbeddingBag.from_pretrained(minilm.to(torch.float64))
    with pytest.raises(ValueError):
        it.EmbeddingBag.from_pretrained(minilm_store, padding_idx=minilm.shape[0])
    assert bag(torch.tensor([], dtype=torch.int64), torch.tensor([0, 0])).shape == (2, minilm.shape[1])


class KJT:
    """A stand-in for torchrec's KeyedJaggedTensor: keys(), values(),
    lengths() (key-major, batch_size per key), weights_or_none()."""

    def __init__(self, keys, values, lengths, weights=None):
        self._k, self._v, self._l, self._w = keys, values, lengths, weights

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def lengths(self):
        return self._l

    def weights_or_none(self):
        return self._w


def test_embedding_bag_collection(minilm):
    g = torch.Generator().manual_seed(5)
    item = (torch.randn(300, 16, generator=g) * 0.1).to(torch.float16)
    ebc = it.EmbeddingBagCollection.from_pretrained(
        {"token": minilm, "item": item}, feature_names={"item": ["item_id", "item_hist"]},
        mode={"token": "mean", "item": "sum"}, codec={"token": "ibp", "item": "exp"},
        codec_opts={"item": {"block_rows": 4}})
    assert ebc.feature_names() == ["token", "item_id", "item_hist"]
    assert ebc.bags["item"].store.codec == "exp" and ebc.bags["token"].store.codec == "ibp"
    B = 8
    feats = {"token": (minilm.shape[0], 6), "item_id": (300, 1), "item_hist": (300, 12)}
    keys, values, lengths, weights = [], [], [], []
    for k, (n, m) in feats.items():
        lens = torch.randint(0, m + 1, (B,), generator=g)
        keys.append(k)
        lengths.append(lens)
        values.append(torch.randint(0, n, (int(lens.sum()),), generator=g))
        weights.append(torch.rand(int(lens.sum()), generator=g))
    kjt = KJT(keys, torch.cat(values), torch.cat(lengths), torch.cat(weights))
    kt = ebc(kjt)
    assert kt.keys() == keys and kt.length_per_key() == [minilm.shape[1], 16, 16]
    assert kt.values().shape == (B, minilm.shape[1] + 32)
    tables = {"token": (minilm, "mean"), "item_id": (item, "sum"), "item_hist": (item, "sum")}
    for k, v, lens in zip(keys, values, lengths):
        t, mode = tables[k]
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)[:-1]])
        ref = torch.nn.EmbeddingBag.from_pretrained(t, mode=mode)(v, offsets)
        assert_bitwise(kt[k], ref.to(kt[k].dtype))
    # a dict of (values, lengths) works too
    kt2 = ebc({k: (v, lens) for k, v, lens in zip(keys, values, lengths)})
    assert torch.equal(kt2.values(), kt.values())
    # is_weighted: the KJT's weights scale the rows (mode sum tables only)
    ebcw = it.EmbeddingBagCollection.from_pretrained({"item": item}, feature_names={"item": ["item_id"]},
                                                     is_weighted=True)
    v, lens, w = values[1], lengths[1], weights[1].to(torch.float16)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)[:-1]])
    ref = torch.nn.EmbeddingBag.from_pretrained(item, mode="sum")(v, offsets, per_sample_weights=w)
    assert_bitwise(ebcw(KJT(["item_id"], v, lens, w)).values(), ref)
