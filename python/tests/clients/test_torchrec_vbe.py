"""ibp.torch.EmbeddingBagCollection against torchrec's own
EmbeddingBagCollection (installed from the registry: torchrec 1.9 with
fbgemm-gpu-cpu, which loads with torch 2.14.1) on the same
KeyedJaggedTensors, variable batch per feature (stride_per_key_per_rank)
included: where torchrec returns, the same keys, lengths and values (float32
tables: bitwise); where it raises, ibp.InvalidArgumentError; never a
result of another shape. Also a state_dict and pickle round trip of the
collection inside torchrec's world (its KeyedTensor output).

Runs in the client environment of torchrec (tools/client-env.sh torchrec
"torch==2.14.1" "torchrec==1.9.2" "fbgemm-gpu-cpu==1.9.0", then fbgemm-gpu
removed: see the skip below); elsewhere it is skipped, with the reason."""

import copy
import pickle

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
try:
    import torchrec
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.modules.embedding_configs import PoolingType
except (ImportError, OSError) as e:  # OSError: fbgemm_gpu's library failed to load
    # torchrec requires fbgemm-gpu, whose registry wheel is the CUDA build: installed
    # over fbgemm-gpu-cpu it needs libnvidia-ml. The environment must then drop both
    # and install fbgemm-gpu-cpu again with --no-deps.
    hint = "; fbgemm_gpu is the CUDA build, not fbgemm-gpu-cpu" if "fbgemm" in str(e) else ""
    pytest.skip("torchrec is not importable here (%s: %s%s); the torchrec client environment has it"
                % (type(e).__name__, str(e).splitlines()[0][:200], hint), allow_module_level=True)

import ibp  # noqa: E402
import ibp.torch as it  # noqa: E402

MODES = {PoolingType.SUM: "sum", PoolingType.MEAN: "mean"}


def pair(weighted=False):
    """torchrec's collection (random float32 tables, 3 tables, 4 features)
    and ibp's made from the same weights."""
    torch.manual_seed(0)
    pool = PoolingType.SUM if weighted else None
    tables = [EmbeddingBagConfig(name="t1", embedding_dim=8, num_embeddings=50, feature_names=["f1"],
                                 pooling=pool or PoolingType.SUM),
              EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=30, feature_names=["f2", "f3"],
                                 pooling=pool or PoolingType.MEAN),
              EmbeddingBagConfig(name="t3", embedding_dim=16, num_embeddings=20, feature_names=["f4"],
                                 pooling=pool or PoolingType.SUM)]
    ref = EmbeddingBagCollection(tables=tables, is_weighted=weighted, device=torch.device("cpu"))
    ours = it.EmbeddingBagCollection.from_pretrained(
        {t.name: ref.embedding_bags[t.name].weight.detach().clone() for t in tables},
        feature_names={t.name: list(t.feature_names) for t in tables},
        mode={t.name: MODES[t.pooling] for t in tables}, is_weighted=weighted,
        codec={"t1": "ibp", "t2": "exp", "t3": "ibp"})
    return ref, ours


KEYS = ["f1", "f2", "f3", "f4"]
ROWS = {"f1": 50, "f2": 30, "f3": 30, "f4": 20}


def kjt(strides, g, inverse_batch=None, bad_inverse=False, weighted=False, ranks=1):
    """A KJT over KEYS with strides[k] samples of feature k (split over
    `ranks` ranks when > 1: stride_per_key_per_rank), random lengths 0..4
    and ids; with inverse_batch B, inverse_indices mapping each feature's
    samples onto a batch of B."""
    lengths, values, spr = [], [], []
    for k, s in zip(KEYS, strides):
        ln = torch.randint(0, 5, (s,), generator=g)
        lengths.append(ln)
        values.append(torch.randint(0, ROWS[k], (int(ln.sum()),), generator=g))
        per = [s // ranks] * ranks
        per[-1] += s - sum(per)
        spr.append(per)
    kw = dict(keys=KEYS, values=torch.cat(values), lengths=torch.cat(lengths))
    if weighted:
        kw["weights"] = torch.rand(kw["values"].numel(), generator=g)
    if len(set(strides)) > 1 or ranks > 1 or inverse_batch is not None:
        kw["stride_per_key_per_rank"] = spr
    if inverse_batch is not None:
        inv = torch.stack([torch.randint(0, s, (inverse_batch,), generator=g) for s in strides])
        if bad_inverse:
            inv[1, 0] = strides[1]  # one past the feature's samples
        kw["inverse_indices"] = (KEYS, inv)
    return KeyedJaggedTensor(**kw)


def outcome(ebc, features):
    try:
        return ebc(features)
    except Exception as e:  # noqa: B902 (compared below)
        return e


def agree(ref, ours, features):
    """'returned' (same keys, lengths and values) or 'raised' (torchrec
    raises, ibp raises ibp.InvalidArgumentError)."""
    r, o = outcome(ref, features), outcome(ours, features)
    if isinstance(r, Exception):
        assert isinstance(o, ibp.InvalidArgumentError), "torchrec raised %r, ibp gave %r" % (r, o)
        return "raised"
    assert not isinstance(o, Exception), "torchrec returned, ibp raised %r" % (o,)
    assert isinstance(o, torchrec.KeyedTensor)
    assert o.keys() == r.keys() and o.length_per_key() == r.length_per_key()
    assert o.values().dtype == r.values().dtype == torch.float32
    assert o.values().shape == r.values().shape
    assert torch.equal(o.values(), r.values()), (o.values() - r.values()).abs().max()
    return "returned"


@pytest.mark.parametrize("weighted", [False, True])
def test_variable_batch_as_torchrec(weighted):
    ref, ours = pair(weighted)
    g = torch.Generator().manual_seed(1 + weighted)
    cases = [  # (strides, inverse batch, bad inverse, ranks) -> what torchrec does
        (([4, 4, 4, 4], None, False, 1), "returned"),   # fixed batch
        (([3, 3, 3, 3], None, False, 2), "returned"),   # variable layout, equal batches
        (([2, 5, 1, 3], None, False, 1), "raised"),     # batches differ: no common shape
        (([2, 6, 1, 3], None, False, 2), "raised"),     # ... over 2 ranks
        (([2, 5, 1, 3], 6, False, 1), "returned"),      # inverse indices: expanded to 6
        (([4, 2, 3, 1], 5, False, 2), "returned"),
        (([4, 4, 4, 4], 4, False, 1), "returned"),
        (([2, 5, 1, 3], 6, True, 1), "raised"),         # an inverse index past the samples
        (([1, 1, 1, 1], None, False, 1), "returned"),
        (([0, 0, 0, 0], None, False, 1), "returned"),   # empty batch
    ]
    got = [agree(ref, ours, kjt(s, g, inv, bad, weighted, ranks)) for (s, inv, bad, ranks), _ in cases]
    assert got == [want for _, want in cases]


def test_random_variable_batches():
    ref, ours = pair()
    g = torch.Generator().manual_seed(7)
    returned = 0
    for _ in range(40):
        strides = torch.randint(1, 7, (4,), generator=g).tolist()
        inv = int(torch.randint(1, 9, (1,), generator=g)) if torch.rand(1, generator=g) < 0.7 else None
        r = agree(ref, ours, kjt(strides, g, inv, ranks=int(torch.randint(1, 3, (1,), generator=g))))
        returned += r == "returned"
    assert 20 <= returned < 40  # both outcomes were compared


def test_state_dict_and_pickle_keep_the_torchrec_outputs():
    ref, ours = pair()
    g = torch.Generator().manual_seed(3)
    features = kjt([2, 5, 1, 3], g, inverse_batch=6)
    want = ref(features).values()
    for copy_ in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert torch.equal(copy_(features).values(), want)
    fresh = it.EmbeddingBagCollection.from_pretrained(
        {n: torch.zeros_like(ref.embedding_bags[n].weight) for n in ("t1", "t2", "t3")},
        feature_names={"t1": ["f1"], "t2": ["f2", "f3"], "t3": ["f4"]},
        mode={"t1": "sum", "t2": "mean", "t3": "sum"})
    fresh.load_state_dict(ours.state_dict())
    assert torch.equal(fresh(features).values(), want)
