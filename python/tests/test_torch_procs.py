"""ibp.torch objects across processes (issue 27): DataLoader workers, forked
and spawned, reading stores the parent has read (batches equal to the
in-memory tensor's); pickle, deepcopy and torch.save / torch.load round
trips of stores, FeatureStore, Feature, EmbeddingBag,
EmbeddingBagCollection and KVOffloader (outputs equal); the embedding
bags' state_dict (the compressed table, loaded back by load_state_dict);
ids with torch's negative-view bit; variable-batch KeyedJaggedTensors
(without torchrec: a KJT-shaped stand-in; against torchrec itself in
clients/test_torchrec_vbe.py); ibp.ClosedError; `import ibp.torch` without
torch."""

import copy
import io
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import ibp

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch as it  # noqa: E402
import procs_data  # noqa: E402
from conftest import REPO  # noqa: E402

BLOCK = (16, 12, 32)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A 3000 x 64 float32 table, its .ibp file and a few id batches."""
    g = torch.Generator().manual_seed(27)
    x = (torch.randn(3000, 64, generator=g) * 0.02).to(torch.bfloat16).to(torch.float32)
    path = str(tmp_path_factory.mktemp("procs") / "x.ibp")
    ibp.pack(x, path)
    batches = [torch.randint(0, 3000, (700,), generator=g) for _ in range(6)]
    return x, path, batches


def roundtrips(obj):
    """obj through pickle (protocols 2 and 5), deepcopy and torch.save /
    torch.load, each a new object."""
    out = [pickle.loads(pickle.dumps(obj, protocol=2)), pickle.loads(pickle.dumps(obj, protocol=5)),
           copy.deepcopy(obj)]
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    out.append(torch.load(buf, weights_only=False))
    assert all(o is not obj for o in out)
    return out


# ---- DataLoader workers ---------------------------------------------------------

@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_workers_read_what_the_parent_read(table, ctx):
    x, path, batches = table
    sources = {"file": ibp.open(path), "mmap": ibp.open(path, mmap=True, verify=False),
               "exp": ibp.Store.from_array(x, codec="exp", block_rows=50), "feature": it.Feature(x)}
    fs = it.FeatureStore()
    fs["n", "x", None] = x
    sources["fs"] = fs
    if ctx == "fork":  # a cache cannot be pickled for spawned workers (below)
        sources["cache"] = (ibp.Cache(500 * 256, store=sources["file"]), sources["file"])
    # the parent reads first, on all threads: every store's pool runs
    for name, got in procs_data.Batches(sources, batches[:1])[0][1].items():
        assert torch.equal(got, x[batches[0]]), name
    loader = torch.utils.data.DataLoader(procs_data.Batches(sources, batches), batch_size=None, num_workers=2,
                                         multiprocessing_context=ctx, timeout=120, generator=torch.Generator())
    seen = []
    for i, got in loader:  # twice: workers made again read as well
        assert sorted(got) == sorted(sources)
        for name, rows in got.items():
            assert torch.equal(rows, x[batches[i]]), (name, i)
        seen.append(i)
    for i, got in loader:
        seen.append(i)
        assert all(torch.equal(rows, x[batches[i]]) for rows in got.values())
    assert seen == list(range(len(batches))) * 2
    for name, got in procs_data.Batches(sources, batches[-1:])[0][1].items():  # the parent still reads
        assert torch.equal(got, x[batches[-1]]), name
    for s in sources.values():
        if isinstance(s, tuple):
            s[0].close()
        else:
            s.close()


def test_spawned_workers_refuse_a_cache_clearly(table):
    x, path, batches = table
    s = ibp.open(path)
    cache = ibp.Cache(1 << 20, store=s)
    loader = torch.utils.data.DataLoader(procs_data.Batches({"cache": (cache, s)}, batches), batch_size=None,
                                         num_workers=1, multiprocessing_context="spawn", timeout=120)
    with pytest.raises(ibp.UnsupportedError, match="ibp.Cache cannot be pickled"):
        next(iter(loader))
    cache.close()
    s.close()


# ---- pickle, deepcopy, torch.save -------------------------------------------------

def test_store_roundtrips(table):
    x, path, batches = table
    ids = batches[0]
    for s in (ibp.open(path), ibp.Store.from_array(x, codec="ibp"), ibp.Store.from_array(x.to(torch.bfloat16),
                                                                                        codec="exp")):
        ref = s.gather(ids)
        for t in roundtrips(s):
            assert t.path == s.path and t.dtype == s.dtype
            assert torch.equal(t.gather(ids), ref) and torch.equal(t.gather(ids, nthreads=1), ref)
            t.close()
        if s.path is None:  # torch.save writes the compressed bytes as one raw tensor
            buf = io.BytesIO()
            torch.save(s, buf)
            assert len(buf.getvalue()) < s.file_bytes + 4096 < s.nrows * s.row_bytes
        s.close()


def test_featurestore_and_feature_roundtrips(table):
    x, path, batches = table
    fs = it.FeatureStore(codec="exp", block_rows=40)
    fs["n", "x", None] = x
    fs["n", "y", None] = x[:, :8].contiguous()
    feat = it.Feature(x)
    opened = ibp.open(path)
    shared = it.Feature(opened)  # not owned: pickled with it all the same
    ids = batches[1]
    for f2 in roundtrips(fs):
        assert type(f2) is it.FeatureStore and len(f2) == 2
        assert torch.equal(f2["n", "x", ids], x[ids]) and torch.equal(f2["n", "y", ids], x[ids, :8])
        assert f2.nbytes == fs.nbytes
        f2["n", "z", None] = x[:10]  # the copy is a working store of its own
        assert torch.equal(f2["n", "z", 3], x[3]) and len(fs) == 2
        f2.close()
    for f in (feat, shared):
        for f2 in roundtrips(f):
            assert torch.equal(f2.read(ids), x[ids]) and f2.size() == f.size() and f2.count() == 3000
            f2.close()
    buf = io.BytesIO()
    torch.save(fs, buf)
    assert len(buf.getvalue()) < fs.nbytes + 64 * 1024  # compressed, not the rows
    for o in (fs, feat, shared):
        o.close()
    assert not opened.closed
    opened.close()


def test_embedding_bag_roundtrips_and_state_dict(table):
    x, path, batches = table
    bag = it.EmbeddingBag.from_pretrained(x, mode="sum", codec="exp")
    ids = batches[2]
    offsets = torch.arange(0, ids.numel(), 7)
    ref = bag(ids, offsets)
    assert torch.equal(ref, torch.nn.EmbeddingBag.from_pretrained(x, mode="sum")(ids, offsets))
    for b2 in roundtrips(bag):
        assert type(b2) is it.EmbeddingBag and b2.mode == "sum" and b2.store is not bag.store
        assert torch.equal(b2(ids, offsets), ref)
    # state_dict: the compressed table as one uint8 tensor
    sd = bag.state_dict()
    assert list(sd) == ["table"] and sd["table"].dtype == torch.uint8
    assert sd["table"].numel() == bag.store.file_bytes < x.numel() * 4
    assert np.array_equal(sd["table"].numpy(), bag.store.container_bytes())
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    sd2 = torch.load(buf, weights_only=True)  # tensors only: the safe loader takes it
    other = it.EmbeddingBag.from_pretrained(torch.zeros_like(x), mode="sum")
    assert not torch.equal(other(ids, offsets), ref)
    assert other.load_state_dict(sd2) is not None
    assert torch.equal(other(ids, offsets), ref) and other.store.codec == "exp"
    # mismatches and damage, as torch reports a parameter's
    small = it.EmbeddingBag.from_pretrained(x[:100], mode="sum")
    with pytest.raises(RuntimeError, match="size mismatch for table"):
        small.load_state_dict(sd2)
    with pytest.raises(RuntimeError, match="Missing key.*table"):
        small.load_state_dict({})
    small.load_state_dict({}, strict=False)
    with pytest.raises(RuntimeError, match="Unexpected key.*weight"):
        other.load_state_dict(dict(sd2, weight=x))
    bad = sd2["table"].clone()
    bad[bad.numel() // 2] ^= 0x10
    with pytest.raises(ibp.CorruptError):
        other.load_state_dict({"table": bad})
    assert torch.equal(other(ids, offsets), ref)  # a failed load changes nothing


def test_embedding_bag_collection_roundtrips_and_state_dict(table):
    x, _, batches = table
    tables = {"user": x[:1000], "item": x[1000:2500, :32].contiguous()}
    ebc = it.EmbeddingBagCollection.from_pretrained(tables, feature_names={"item": ["item", "hist"]},
                                                    mode={"user": "sum", "item": "mean"},
                                                    codec={"user": "ibp", "item": "exp"})
    g = torch.Generator().manual_seed(5)
    kjt = {"user": (torch.randint(0, 1000, (40,), generator=g), torch.tensor([10, 0, 20, 10])),
           "item": (torch.randint(0, 1500, (12,), generator=g), torch.tensor([3, 3, 3, 3])),
           "hist": (torch.randint(0, 1500, (9,), generator=g), torch.tensor([0, 9, 0, 0]))}
    ref = ebc(kjt).values()
    assert ref.shape == (4, 64 + 32 + 32)
    for e2 in roundtrips(ebc):
        assert torch.equal(e2(kjt).values(), ref) and e2.feature_names() == ebc.feature_names()
    sd = ebc.state_dict()
    assert sorted(sd) == ["bags.item.table", "bags.user.table"]
    fresh = it.EmbeddingBagCollection.from_pretrained({k: torch.ones_like(v) for k, v in tables.items()},
                                                      feature_names={"item": ["item", "hist"]},
                                                      mode={"user": "sum", "item": "mean"})
    fresh.load_state_dict(sd)
    assert torch.equal(fresh(kjt).values(), ref)


def test_kv_offloader_roundtrips():
    g = torch.Generator().manual_seed(9)
    kv = (torch.randn(2, 6, *BLOCK, generator=g) * 0.1).to(torch.bfloat16)
    off = it.KVOffloader(2, BLOCK, torch.bfloat16)
    off.calibrate(0, kv)
    h0 = off.store(0, kv, [0, 1, 2])
    h1 = off.store(1, kv, [3, 4, 5])
    off.free([h0[1]])
    for o2 in roundtrips(off):
        assert [o2.codec(i) for i in range(2)] == [off.codec(i) for i in range(2)]
        assert o2.used_bytes == off.used_bytes and o2.ratio(0) == off.ratio(0)
        cache = torch.zeros(2, 8, *BLOCK, dtype=torch.bfloat16)
        o2.load(0, [h0[0], h0[2]], cache, [7, 1])
        o2.load(1, h1, cache, [2, 3, 4])
        assert torch.equal(cache[:, [7, 1, 2, 3, 4]].view(torch.int16), kv[:, [0, 2, 3, 4, 5]].view(torch.int16))
        with pytest.raises(KeyError):
            o2.load(0, [h0[1]], cache, [0])  # freed before the copy
        h = o2.store(0, kv, [5])  # new handles continue after the old ones
        assert h[0] > max(h1)
        o2.close()
    off.close()


# ---- negative views ---------------------------------------------------------------

def test_negative_view_ids(table):
    x, path, batches = table
    ids = batches[3]
    neg = torch._neg_view(-ids)  # reads as ids; its memory holds -ids
    assert neg.is_neg() and torch.equal(neg, ids)
    with ibp.open(path) as s:
        assert torch.equal(s.gather(neg), x[ids]) and torch.equal(s[neg], x[ids])
        assert torch.equal(ibp.Cache(1 << 20, store=s).gather(s, neg), x[ids])
        with pytest.raises(ibp.InvalidArgumentError, match="negative"):
            s.gather(ids, out=torch._neg_view(torch.empty(ids.numel(), 64)))
    feat = it.Feature(x)
    assert torch.equal(feat.read(neg), x[ids])
    assert torch.equal(it.gather_pinned_tensor_rows(feat, neg), x[ids])
    fs = it.FeatureStore()
    fs["n", "x", None] = x
    assert torch.equal(fs["n", "x", neg], x[ids])
    w = torch.rand(ids.numel(), generator=torch.Generator().manual_seed(1))
    offsets = torch.arange(0, ids.numel(), 10)
    bag = it.EmbeddingBag.from_pretrained(x, mode="sum")
    ref = torch.nn.EmbeddingBag.from_pretrained(x, mode="sum")(ids, offsets, per_sample_weights=w)
    got = bag(neg, torch._neg_view(-offsets), per_sample_weights=torch._neg_view(-w))
    assert torch.equal(got, ref)
    # a negative view as a KV cache: stored and loaded by value
    kv = (torch.randn(2, 3, *BLOCK, generator=torch.Generator().manual_seed(2))).to(torch.float16)
    off = it.KVOffloader(1, BLOCK, torch.float16)
    hs = off.store(0, torch._neg_view(-kv), torch._neg_view(-torch.tensor([0, 1, 2])))
    dst = torch._neg_view(torch.zeros(2, 3, *BLOCK, dtype=torch.float16))
    off.load(0, hs, dst, [2, 1, 0])
    assert torch.equal(dst[:, [2, 1, 0]], kv)
    for o in (feat, fs, off):
        o.close()


# ---- variable batch per feature (without torchrec) ----------------------------

class VBEKJT:
    """The parts of torchrec's KeyedJaggedTensor the collection reads, with a
    variable batch per feature (stride_per_key) and optional inverse indices."""

    def __init__(self, keys, values, lengths, strides, inverse=None):
        self._k, self._v, self._l, self._s, self._inv = keys, values, lengths, strides, inverse

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def lengths(self):
        return self._l

    def weights_or_none(self):
        return None

    def stride_per_key(self):
        return self._s

    def inverse_indices_or_none(self):
        return self._inv


def test_variable_batch_kjt(table):
    x, _, _ = table
    ebc = it.EmbeddingBagCollection.from_pretrained({"a": x[:100], "b": x[100:300, :16].contiguous()}, mode="sum")
    bag_a = torch.nn.EmbeddingBag.from_pretrained(x[:100], mode="sum")
    bag_b = torch.nn.EmbeddingBag.from_pretrained(x[100:300, :16].contiguous(), mode="sum")
    values = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
    # a: 2 samples (lengths 2, 1), b: 3 samples (3, 1, 1): 6 lengths, 3 keys' worth of 2
    lengths = torch.tensor([2, 1, 3, 1, 1])
    pa = bag_a(values[:3], torch.tensor([0, 2]))
    pb = bag_b(values[3:], torch.tensor([0, 3, 4]))
    with pytest.raises(ibp.InvalidArgumentError, match="different batch sizes"):
        ebc(VBEKJT(["a", "b"], values, lengths, [2, 3]))  # never a silently reshaped result
    with pytest.raises(ibp.InvalidArgumentError, match="do not split"):
        ebc(VBEKJT(["a", "b"], values, lengths, [2, 2]))
    inv = (["b", "a"], torch.tensor([[2, 0, 1, 2], [1, 1, 0, 0]]))
    got = ebc(VBEKJT(["a", "b"], values, lengths, [2, 3], inv)).values()
    assert torch.equal(got, torch.cat([pa[[1, 1, 0, 0]], pb[[2, 0, 1, 2]]], 1))
    with pytest.raises(ibp.InvalidArgumentError, match="outside"):
        ebc(VBEKJT(["a", "b"], values, lengths, [2, 3], (["a", "b"], torch.tensor([[0, 2], [0, 1]]))))
    same = ebc(VBEKJT(["a", "b"], values[:6], torch.tensor([2, 1, 2, 1]), [2, 2])).values()  # even: no inverse needed
    assert torch.equal(same, torch.cat([pa, bag_b(values[3:6], torch.tensor([0, 2]))], 1))


# ---- closed objects -------------------------------------------------------------

def test_closed_torch_objects(table):
    x, _, _ = table
    ids = torch.tensor([1, 2])
    fs = it.FeatureStore()
    fs["n", "x", None] = x
    fs.close()
    calls = [lambda: fs["n", "x", ids], lambda: fs.multi_get_tensor([("n", "x", ids)]),
             lambda: fs.put_tensor(x, group_name="n", attr_name="y", index=None),
             lambda: fs.remove_tensor(group_name="n", attr_name="x", index=None),
             lambda: fs.get_tensor_size("n", "x"), fs.get_all_tensor_attrs, lambda: fs.store("n", "x"),
             lambda: fs.nbytes, lambda: pickle.dumps(fs)]
    feat = it.Feature(x)
    feat.close()
    calls_f = [lambda: feat.read(ids), feat.read, lambda: next(feat.read_async(ids)), feat.size, feat.count,
               feat.metadata, lambda: feat.store, lambda: feat.nbytes, lambda: pickle.dumps(feat)]
    off = it.KVOffloader(1, BLOCK, torch.bfloat16)
    off.close()
    kv = torch.zeros(2, 1, *BLOCK, dtype=torch.bfloat16)
    calls_k = [lambda: off.store(0, kv, [0]), lambda: off.load(0, [0], kv, [0]), lambda: off.calibrate(0, kv),
               lambda: off.free([0]), lambda: off.wait(0), off.pool_stats,
               lambda: setattr(off, "capacity_bytes", 1 << 20), lambda: pickle.dumps(off)]
    for name, cs in (("ibp.torch.FeatureStore", calls), ("ibp.torch.Feature", calls_f),
                     ("ibp.torch.KVOffloader", calls_k)):
        for f in cs:
            with pytest.raises(ibp.ClosedError, match="%s is closed" % name):
                f()
    assert "closed" in repr(fs) and "closed" in repr(feat)
    assert off.used_bytes == 0 and off.codec(0) is None  # descriptions stay (vLLM's worker reads them)
    fs.close()
    feat.close()
    off.close()  # idempotent
    bag = it.EmbeddingBag.from_pretrained(x)
    bag.store.close()
    with pytest.raises(ibp.ClosedError, match="ibp.Store <memory> is closed"):
        bag(ids, torch.tensor([0]))


# ---- import without torch ------------------------------------------------------

def test_import_ibp_torch_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
            "import ibp\n"
            "try:\n"
            "    import ibp.torch\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError: ibp.torch needs PyTorch"), out.stdout
    assert 'pip install "ibp[torch]"' in out.stdout
