"""ibp.torch GNN feature loading: the PyG FeatureStore interface, the
GraphBolt-style Feature, DGL's gather_pinned_tensor_rows, and GraphSAGE on
the real Debian package graph trained with features served from compressed
stores, whose losses must be bit-identical to the same run on plain tensors.
torch_geometric is used when installed (SAGEConv, its FeatureStore base
class); without it the same tests run on ibp's plain base class and a SAGE
layer written in torch."""

import numpy as np
import pytest

import ibp

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch as it  # noqa: E402
from ibp.torch import _features  # noqa: E402

import debian_graph  # noqa: E402

HAVE_PYG = _features.HAVE_PYG


@pytest.fixture(scope="module")
def graph():
    return debian_graph.load()


@pytest.fixture
def fs(graph):
    s = it.FeatureStore()
    s.put_tensor(torch.from_numpy(graph["bow"]), group_name="package", attr_name="bow", index=None)
    s["package", "pca", None] = torch.from_numpy(graph["pca"])
    yield s
    s.close()


def test_is_a_pyg_feature_store():
    if not HAVE_PYG:
        pytest.skip("torch_geometric is not installed: FeatureStore has PyG's methods on a plain class")
    from torch_geometric.data import FeatureStore as PygFeatureStore
    assert issubclass(it.FeatureStore, PygFeatureStore)


def test_put_get_size_attrs(fs, graph):
    bow, pca = torch.from_numpy(graph["bow"]), torch.from_numpy(graph["pca"])
    assert fs.store("package", "bow").ratio > 20  # the 0/1 bag of words compresses ~190x
    assert fs.nbytes < fs.plain_nbytes
    assert fs.store("package", "bow").codec == "ibp"
    ids = torch.tensor([4604, 0, 17, 17, 3000])
    for idt in (torch.int64, torch.int32):
        assert torch.equal(fs["package", "bow", ids.to(idt)], bow[ids])
    assert torch.equal(fs.get_tensor("package", "pca", ids), pca[ids])
    assert torch.equal(fs["package", "pca", None], pca)
    assert torch.equal(fs["package", "pca", slice(None)], pca)
    assert torch.equal(fs["package", "pca", slice(10, 40, 3)], pca[10:40:3])
    assert torch.equal(fs["package", "pca", 7], pca[7])
    assert torch.equal(fs["package", "pca", -1], pca[-1])
    # NumPy ids (PyG's own TensorAttr cannot hold them through fs[...]: its
    # is_set compares the array with UNSET)
    assert torch.equal(fs._get_tensor(it.TensorAttr("package", "pca", ids.numpy())), pca[ids])
    assert torch.equal(fs["package", "pca", ids.reshape(5, 1)], pca[ids.reshape(5, 1)])
    mask = torch.zeros(pca.shape[0], dtype=torch.bool)
    mask[[3, 9]] = True
    assert torch.equal(fs["package", "pca", mask], pca[mask])
    assert fs["package", "pca", torch.tensor([], dtype=torch.int64)].shape == (0, 100)
    assert fs.get_tensor_size("package", "bow") == bow.shape
    assert fs.get_tensor_size("package", "bow", ids) == (5, 1433)
    assert fs.get_tensor_size("package", "nope") is None
    keys = sorted((a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs())
    assert keys == [("package", "bow"), ("package", "pca")]
    with pytest.raises(ibp.OutOfRangeError):
        fs["package", "pca", torch.tensor([4605])]
    with pytest.raises(IndexError):
        fs["package", "pca", torch.tensor([-1])]  # arrays of ids never wrap
    with pytest.raises(KeyError):
        fs["package", "nope", ids]


def test_multi_get_batches(fs, graph, monkeypatch):
    bow, pca = torch.from_numpy(graph["bow"]), torch.from_numpy(graph["pca"])
    calls = []
    real = _features._gather
    monkeypatch.setattr(_features, "_gather", lambda s, ids, n=0: calls.append(ids.numel()) or real(s, ids, n))
    a, b = torch.tensor([5, 6, 5]), torch.tensor([100, 2])
    out = fs.multi_get_tensor([("package", "bow", a), ("package", "pca", a), ("package", "bow", b),
                               ("package", "pca", 9)])
    assert torch.equal(out[0], bow[a]) and torch.equal(out[1], pca[a])
    assert torch.equal(out[2], bow[b]) and torch.equal(out[3], pca[9])
    assert sorted(calls) == [1, 3, 5]  # bow: one gather for a and b; pca: a, then row 9


def test_read_only_and_remove(fs, graph):
    pca = torch.from_numpy(graph["pca"])
    with pytest.raises(ValueError, match="read-only"):
        fs.put_tensor(pca[:10], group_name="package", attr_name="pca", index=torch.arange(10))
    # a whole tensor may be put again (PyG's update_tensor: remove + put)
    assert fs.put_tensor(pca, group_name="package", attr_name="pca", index=torch.arange(pca.shape[0]))
    assert fs.update_tensor(pca * 2, group_name="package", attr_name="pca", index=None)
    assert torch.equal(fs["package", "pca", 3], pca[3] * 2)
    assert fs.remove_tensor(group_name="package", attr_name="pca", index=None)
    assert not fs.remove_tensor(group_name="package", attr_name="pca", index=None)
    assert len(fs) == 1


def test_every_row_dtype_and_codec():
    g = torch.Generator().manual_seed(3)
    with it.FeatureStore(codec="exp", block_rows=16) as fs:
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            t = (torch.randn(200, 7, generator=g) * 0.1).to(dt)
            fs["n", str(dt), None] = t
            ids = torch.randint(0, 200, (50,), generator=g)
            assert torch.equal(fs["n", str(dt), ids], t[ids])
    with it.FeatureStore() as fs:
        y = torch.randint(0, 7, (300,), generator=g)
        fs["n", "y", None] = y  # 1-D: rows of one element
        assert torch.equal(fs["n", "y", torch.tensor([3, 1])], y[[3, 1]])


def test_pyg_views(fs, graph):
    if not HAVE_PYG:
        pytest.skip("torch_geometric is not installed (AttrView is PyG's)")
    bow = torch.from_numpy(graph["bow"])
    ids = torch.tensor([1, 2])
    assert torch.equal(fs["package"].bow[ids], bow[ids])
    assert torch.equal(fs.view(group_name="package", attr_name="bow")[ids], bow[ids])


def test_feature(graph):
    pca = torch.from_numpy(graph["pca"])
    f = it.Feature(pca)
    assert f.size() == torch.Size([100]) and f.count() == pca.shape[0]
    assert torch.equal(f.read(), pca)
    ids = torch.tensor([9, 0, 9], dtype=torch.int32)
    assert torch.equal(f.read(ids), pca[ids.long()])
    gen = f.read_async(ids)
    for _ in range(f.read_async_num_stages(ids.device)):
        fut = next(gen)
    assert torch.equal(fut.wait(), pca[ids.long()])
    with pytest.raises(NotImplementedError, match="read-only"):
        f.update(pca[:2], torch.tensor([0, 1]))
    assert f.metadata()["codec"] == "ibp"
    f.close()
    with ibp.Store.from_array(pca) as s:  # a Store passed in is used, not owned
        f2 = it.Feature(s)
        assert torch.equal(f2.read(torch.tensor([5])), pca[[5]])
        f2.close()
        assert not s.closed


def test_gather_pinned_tensor_rows(graph):
    bow = torch.from_numpy(graph["bow"])
    f = it.Feature(bow)
    ids = torch.tensor([4604, 3, 3, 0])
    for src in (bow, f, f.store):
        for idt in (torch.int64, torch.int32):
            r = it.gather_pinned_tensor_rows(src, ids.to(idt))
            assert r.device == ids.device and torch.equal(r, bow[ids])
        with pytest.raises(ibp.OutOfRangeError):
            it.gather_pinned_tensor_rows(src, torch.tensor([4605]))
        with pytest.raises(ValueError):
            it.gather_pinned_tensor_rows(src, torch.tensor([1.0]))
    if not torch.cuda.is_available():
        # No GPU here: CUDA ids cannot even be made. Where there is one, the
        # Store path decodes on the GPU through ibp.CudaStore.
        with pytest.raises(ibp.NoDeviceError):
            f.store.to_cuda()
    f.close()


SAGE_KW = dict(epochs=2, batch=1024, fanouts=(5, 3))


@pytest.fixture(scope="module")
def sage_ref(graph):
    """The losses of GraphSAGE trained on the plain tensors (PyG's SAGEConv
    when installed, else the same layer written in torch)."""
    bow, pca = torch.from_numpy(graph["bow"]), torch.from_numpy(graph["pca"])
    return debian_graph.train(lambda n_id: torch.cat([bow[n_id], pca[n_id]], 1), graph, use_pyg=HAVE_PYG,
                              **SAGE_KW)


def test_graphsage_losses_bit_identical(graph, sage_ref):
    use_pyg = HAVE_PYG
    bow, pca = torch.from_numpy(graph["bow"]), torch.from_numpy(graph["pca"])

    with it.FeatureStore() as fs:
        fs["package", "bow", None] = bow
        fs["package", "pca", None] = pca
        assert fs.nbytes < fs.plain_nbytes

        def served(n_id):
            b, p = fs.multi_get_tensor([("package", "bow", n_id), ("package", "pca", n_id)])
            return torch.cat([b, p], 1)

        got = debian_graph.train(served, graph, use_pyg=use_pyg, **SAGE_KW)
    ref = sage_ref
    assert len(ref) == 2 * 3  # 2763 training nodes in batches of 1024, 2 epochs
    assert got == ref  # bit-identical floats, every step
    assert ref[-1] < ref[0] * 0.8  # and it learns


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_graphsage_losses_bit_identical_loader_workers(graph, sage_ref, ctx):
    """The same training with every step's features read by DataLoader
    workers (num_workers=2) from a FeatureStore the parent has read already
    (its stores' pools run): forked workers inherit the stores, spawned ones
    unpickle them from their compressed bytes. The losses are bit-identical
    to those on plain tensors."""
    import procs_data
    bow, pca = torch.from_numpy(graph["bow"]), torch.from_numpy(graph["pca"])
    steps = [n_id for _, n_id, _, _ in debian_graph.node_batches(graph, **SAGE_KW)]
    with it.FeatureStore() as fs:
        fs["package", "bow", None] = bow
        fs["package", "pca", None] = pca
        for attr in ("bow", "pca"):  # the parent reads on all threads first
            fs.store("package", attr).gather(steps[0], nthreads=0)
        loader = torch.utils.data.DataLoader(procs_data.NodeFeatures(fs, steps), batch_size=None, num_workers=2,
                                             multiprocessing_context=ctx, timeout=300,
                                             generator=torch.Generator())
        batches = iter(loader)
        calls = []

        def served(n_id):
            i, x = next(batches)
            assert i == len(calls) and torch.equal(n_id, steps[i])  # in order, the step's nodes
            calls.append(i)
            assert torch.equal(x, torch.cat([bow[n_id], pca[n_id]], 1))
            return x

        got = debian_graph.train(served, graph, use_pyg=HAVE_PYG, **SAGE_KW)
    assert len(calls) == len(steps) == len(sage_ref)
    assert got == sage_ref  # bit-identical floats, every step
