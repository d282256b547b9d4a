"""ibp.torch.vllm's scheduler-side manager and worker, on vLLM's types
when vLLM (0.34 or 0.33) is installed and on the module's stand-ins
(0.34's) otherwise (this file runs in both: tools/test-python.sh's
environment, without vLLM, and
tools/test-clients.sh's vLLM environment), plus the version gate against
stand-in vllm packages. The comparison with vLLM's own manager and the
run through vLLM's own connector are python/tests/clients/test_vllm_*.py.

The worker moves real MiniLM K/V (datasets/sample) laid out as vLLM's
canonical caches: one (num_blocks, page) int8 tensor per layer, or one
for all layers (the cross-layer layout); each layer's page is [heads,
tokens, K|V] bf16."""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp  # noqa: E402
import ibp.torch.vllm as iv  # noqa: E402
from conftest import REPO  # noqa: E402

L, NB, H, T, D = 6, 12, 12, 16, 32  # layers, GPU blocks, heads, tokens a block, head size
PAGE = H * T * 2 * D * 2  # bytes of a layer's page


def key(h, group=0):  # vLLM's OffloadKey: block hash + big-endian group index
    return h + group.to_bytes(4, "big")


K = [key(b"blk%05d" % i) for i in range(40)]


def req(name="r", positions=None):
    r = iv.ReqContext(name)
    for k, p in (positions or {}).items():
        r.set_offload_key_position(k, p)
    return r


def out(o):
    return None if o is None else (list(o.keys_to_store), [int(x) for x in o.store_spec.block_ids],
                                   list(o.evicted_keys))


def evs(m):
    return [(list(e.keys), e.removed, e.metadata_only) for e in m.take_events()]


# ---- scheduler side ----------------------------------------------------------

def test_lookup_store_load_protocol():
    m = iv.IBPOffloadingManager(4, enable_events=True)
    r = req()
    assert m.on_new_request(r) is not None
    assert m.lookup(K[0], r) == iv.LookupResult.MISS
    assert out(m.prepare_store([K[0], K[1], K[0]], r)) == ([K[0], K[1]], [0, 1], [])
    assert m.lookup(K[0], r) == iv.LookupResult.HIT_PENDING  # not loadable before complete_store
    m.complete_store([K[0], K[1]], r)
    assert [m.lookup(k, r) for k in K[:3]] == [iv.LookupResult.HIT] * 2 + [iv.LookupResult.MISS]
    assert evs(m) == [([K[0], K[1]], False, False)] and evs(m) == []
    # chunks already held are skipped; an empty store has an empty spec
    assert out(m.prepare_store([K[0], K[2]], r)) == ([K[2]], [2], [])
    assert out(m.prepare_store([K[0]], r)) == ([], [], [])
    m.complete_store([K[2]], r)
    assert [int(x) for x in m.prepare_load([K[2], K[0]], r).block_ids] == [2, 0]
    m.complete_load([K[2], K[0]], r)
    with pytest.raises(ibp.InvalidArgumentError):
        m.complete_load([K[1]], r)  # was never being loaded
    with pytest.raises(ibp.InvalidArgumentError):
        m.prepare_load([K[9]], r)
    with pytest.raises(ibp.InvalidArgumentError):
        iv.IBPOffloadingManager(-1)


def test_eviction_order_pins_protection_and_failed_stores():
    m = iv.IBPOffloadingManager(3, enable_events=True)
    r = req()
    m.complete_store(m.prepare_store(K[:3], r).keys_to_store, r)
    evs(m)
    m.touch([K[0]], r)  # LRU order now 1, 2, 0
    m.prepare_load([K[1]], r)  # pinned: not evictable
    assert out(m.prepare_store([K[3]], r)) == ([K[3]], [2], [K[2]])  # 2's chunk reused
    assert evs(m) == [([K[2]], True, False)]
    # 3 is being stored and 1 pinned; only 0 could go: two new chunks do not fit, nothing changes
    assert m.prepare_store([K[4], K[5]], r) is None
    assert [m.lookup(k, r) for k in K[:4]] == [iv.LookupResult.HIT, iv.LookupResult.HIT, iv.LookupResult.MISS,
                                                iv.LookupResult.HIT_PENDING]
    # keys offered in the same call are never evicted for it
    assert m.prepare_store([K[0], K[4]], r) is None
    m.complete_load([K[1]], r)
    m.complete_store([K[3]], r, success=False)  # its chunk is free again, it was never announced
    assert m.lookup(K[3], r) == iv.LookupResult.MISS
    assert evs(m) == [([K[3]], True, True)]
    # one free chunk (2), one evicted: 1 (unpinned now) is older than 0
    # (the chunk freed last is handed out first)
    assert out(m.prepare_store([K[4], K[5]], r)) == ([K[4], K[5]], [1, 2], [K[1]])
    m.complete_store([K[4], K[5]], r)
    assert evs(m) == [([K[1]], True, False), ([K[4], K[5]], False, False)]
    # a failed store's key stored again before the events are taken is not reported freed
    m2 = iv.IBPOffloadingManager(2, enable_events=True)
    m2.prepare_store([K[7]], r)
    m2.complete_store([K[7]], r, success=False)
    m2.prepare_store([K[7]], r)
    assert evs(m2) == []
    quiet = iv.IBPOffloadingManager(1)
    quiet.complete_store(quiet.prepare_store([K[9]], r).keys_to_store, r)
    assert list(quiet.take_events()) == []


def test_store_threshold_counts_a_key_once_a_request():
    """vLLM 0.34 (and the stand-ins): a request that offers a key again (a
    retry, a re-offer after preemption) neither counts it again nor is it
    skipped again; another request's offer counts. vLLM 0.33 counted every
    offer."""
    m = iv.IBPOffloadingManager(4, store_threshold=2)
    a = req("a")
    assert out(m.prepare_store([K[0], K[1]], a)) == ([], [], []) and m.stores_skipped == 2
    again = out(m.prepare_store([K[0]], a))
    if iv._V034:
        assert again == ([], [], []) and m.counts[K[0]] == 1 and m.stores_skipped == 2
        assert out(m.prepare_store([K[1], K[0]], req("b"))) == ([K[1], K[0]], [0, 1], [])
    else:
        assert again == ([K[0]], [0], []) and m.counts[K[0]] == 2


def test_a_stored_chunks_event_names_its_request():
    m = iv.IBPOffloadingManager(2, enable_events=True)
    r = req("a")
    m.complete_store(m.prepare_store([K[0]], r).keys_to_store, r)
    m.complete_store(m.prepare_store([K[1]], r).keys_to_store, r, success=False)
    stored, failed = list(m.take_events())
    assert stored.keys == [K[0]] and not stored.removed and not stored.metadata_only
    assert stored.removal_expected == iv._V034 and (getattr(stored, "req_context", None) is r) == iv._V034
    assert failed.keys == [K[1]] and failed.removed and failed.metadata_only and not failed.removal_expected


def test_request_recency_by_token_position():
    """A finished request's chunks rank by position: its head most
    recent, so its tail goes first; a later request outranks it."""
    m = iv.IBPOffloadingManager(4)
    a = req("a", {K[0]: 16, K[1]: 32, K[2]: 48})
    m.on_new_request(a)
    for i in (2, 1, 0):  # stored out of order (e.g. backfills)
        m.complete_store(m.prepare_store([K[i]], a).keys_to_store, a)
    m.on_request_finished(a)
    b = req("b", {K[3]: 16})
    m.complete_store(m.prepare_store([K[3]], b).keys_to_store, b)
    m.on_request_finished(b)
    evicted = [out(m.prepare_store([K[10 + i]], req("x%d" % i)))[2] for i in range(3)]
    assert evicted == [[K[2]], [K[1]], [K[0]]]
    m.reset_cache()
    assert m.lookup(K[3], b) == iv.LookupResult.MISS and out(m.prepare_store([K[5]], b)) == ([K[5]], [0], [])


def test_store_threshold_counts_offers():
    m = iv.IBPOffloadingManager(4, store_threshold=2, max_tracker_size=3)
    assert out(m.prepare_store([K[0], K[1]], req("a"))) == ([], [], [])  # first offer: only counted
    assert out(m.prepare_store([K[0], K[2]], req("b"))) == ([K[0]], [0], [])
    assert m.stores_skipped == 3
    # the table holds 3 keys: the oldest go, never one offered in this call
    assert out(m.prepare_store([K[0], K[3], K[4]], req("c"))) == ([], [], [])
    assert list(m.counts) == [K[0], K[3], K[4]] and m.counts[K[0]] == 3 and m.stores_skipped == 5


# ---- worker side ---------------------------------------------------------------

@pytest.fixture(scope="module")
def pages():
    """(layer, block, page bytes): the MiniLM K/V of 8 blocks, then 4 empty blocks."""
    bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy"))
    kv = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).view(L, 2, 128, H * D)
    p = torch.zeros(L, NB, H, T, 2 * D, dtype=torch.bfloat16)
    for i in range(2):
        p[:, :8, :, :, i * D:(i + 1) * D] = kv[:, i].reshape(L, 8, T, H, D).permute(0, 1, 3, 2, 4)
    return p.view(torch.int8).reshape(L, NB, PAGE)


def caches(pages, packed):
    """vLLM's CanonicalKVCaches of the pages: (caches, [layer][block] byte views)."""
    if packed:  # one tensor, one ref covering every layer's page of a block
        t = pages.transpose(0, 1).contiguous().view(NB, L * PAGE)
        kc = iv.CanonicalKVCaches([iv.CanonicalKVCacheTensor(t, L * PAGE)], [[iv.CanonicalKVCacheRef(0, L * PAGE)]])
        return kc, t.view(NB, L, PAGE).transpose(0, 1)
    ts = [pages[i].clone() for i in range(L)]
    kc = iv.CanonicalKVCaches([iv.CanonicalKVCacheTensor(t, PAGE) for t in ts],
                              [[iv.CanonicalKVCacheRef(i, PAGE) for i in range(L)]])
    return kc, _Stack(ts)


class _Stack:
    """[layer][block] over separate tensors (writes go to the tensors)."""

    def __init__(self, ts):
        self.ts = ts

    def __getitem__(self, i):
        return self.ts[i]

    def zero_(self):
        for t in self.ts:
            t.zero_()


def gspec(ids, start=0):
    return iv.GPULoadStoreSpec(list(ids), group_sizes=[len(ids)], block_indices=[start])


def pointers(kc, spec):
    """The DevicePointers vLLM 0.34's connector makes of a GPU spec: with
    vLLM 0.34 installed its own pointer_utils.resolve_device_pointers, else
    the same here (per group, per ref, per block the page's address, base +
    block id x row stride, and bytes)."""
    if iv.HAVE_VLLM and iv._V034:
        from vllm.v1.kv_offload.pointer_utils import resolve_device_pointers
        return resolve_device_pointers(spec, kc)
    make = iv.DevicePointers if iv.DevicePointers is not None else _Pointers
    ids = np.asarray(spec.block_ids, dtype=np.uint64)
    ptrs, sizes, at = [], [], 0
    for n, refs in zip(spec.group_sizes, kc.group_data_refs):
        for r in refs:
            t = kc.tensors[r.tensor_idx].tensor
            ptrs.append(np.uint64(t.data_ptr()) + ids[at:at + n] * np.uint64(t.stride(0)))
            sizes.append(np.full(n, r.page_size_bytes, dtype=np.uint64))
        at += n
    return make(ptrs=np.concatenate(ptrs), sizes=np.concatenate(sizes), group_block_counts=tuple(spec.group_sizes),
                group_data_ref_counts=tuple(len(r) for r in kc.group_data_refs),
                block_indices=tuple(spec.block_indices))


class _Pointers:  # vLLM 0.33 installed: the worker takes 0.34's form all the same
    def __init__(self, **kw):
        self.__dict__.update(kw)


def spec_of(kc, form):
    """gspec in the form the test runs: block ids (vLLM 0.33) or device pointers (0.34)."""
    if form == "ids":
        return gspec
    return lambda ids, start=0: pointers(kc, gspec(ids, start))


FORMS = pytest.mark.parametrize("form", ["ids", "pointers"])


def done(w, ids):
    w.wait(set(ids))
    return sorted((r.job_id, r.success) for r in w.get_finished())


@FORMS
@pytest.mark.parametrize("packed", [False, True], ids=["per_layer", "cross_layer"])
def test_worker_round_trip(pages, packed, form):
    kc, view = caches(pages, packed)
    gspec = spec_of(kc, form)
    w = iv.IBPOffloadingWorker(kc, "bfloat16", 1, layers_per_group=[L])
    assert len(w.units) == L and len({u.nbytes for u in w.units}) == 1
    assert w.submit_store(1, gspec([0, 1, 2, 3]), iv.CPULoadStoreSpec([7, 6, 5, 4]))
    assert w.submit_store(2, gspec([4, 5, 6, 7], 4), iv.CPULoadStoreSpec([0, 1, 2, 3]))
    assert done(w, [1, 2]) == [(1, True), (2, True)]
    raw = 8 * L * PAGE
    assert w.raw_bytes == raw and 0 < w.host_bytes < raw  # compressed
    assert all(c in ("ibp", "exp", "raw") for c in w.codecs())
    view.zero_()
    # chunks back into other blocks, one load expedited
    w.submit_load(3, iv.CPULoadStoreSpec([0, 1, 2]), gspec([11, 10, 9]))
    w.submit_load(4, iv.CPULoadStoreSpec([7, 6, 5, 4, 3]), gspec([4, 5, 6, 7, 8]), expedited=True)
    assert done(w, [3, 4]) == [(3, True), (4, True)]
    for layer in range(L):
        for dst, src in [(11, 4), (10, 5), (9, 6), (4, 0), (5, 1), (6, 2), (7, 3), (8, 7)]:
            assert torch.equal(view[layer][dst], pages[layer, src]), (layer, dst, src)
        assert view[layer][:4].abs().sum() == 0
    # a chunk stored again frees what it held: the pool does not grow
    before = w.host_bytes
    w.submit_store(5, gspec([11]), iv.CPULoadStoreSpec([0]))
    assert done(w, [5]) == [(5, True)] and w.host_bytes == before
    w.shutdown()
    assert w.host_bytes == 0 and w.get_finished() == []
    with pytest.raises(ibp.InvalidArgumentError):
        w.submit_store(6, gspec([0]), iv.CPULoadStoreSpec([0]))


@FORMS
def test_worker_chunks_of_two_blocks_and_failures(pages, form):
    kc, view = caches(pages, True)
    gspec = spec_of(kc, form)  # block NB below: an address past the cache
    w = iv.IBPOffloadingWorker(kc, torch.bfloat16, 2, layers_per_group=[L])
    # blocks 1..7 of a request (the first starts inside chunk 0): chunks 0..3
    assert w.submit_store(1, gspec([1, 2, 3, 4, 5, 6, 7], 1), iv.CPULoadStoreSpec([0, 1, 2, 3]))
    assert done(w, [1]) == [(1, True)]
    view.zero_()
    w.submit_load(2, iv.CPULoadStoreSpec([1, 2]), gspec([9, 10, 11], 3))  # request blocks 3..5
    # failures come back as success=False, nothing written: block 0 of chunk 0 was never stored,
    # chunk 9 neither; spec sizes that disagree with the groups; a block id past the cache
    w.submit_load(3, iv.CPULoadStoreSpec([0]), gspec([0, 1]))
    w.submit_load(4, iv.CPULoadStoreSpec([9]), gspec([0]))
    w.submit_store(5, gspec([0, 1, 2]), iv.CPULoadStoreSpec([5]))
    w.submit_store(6, gspec([NB]), iv.CPULoadStoreSpec([5]))
    assert done(w, [2, 3, 4, 5, 6]) == [(2, True), (3, False), (4, False), (5, False), (6, False)]
    for layer in range(L):
        for dst, src in [(9, 3), (10, 4), (11, 5)]:
            assert torch.equal(view[layer][dst], pages[layer, src])
        assert view[layer][:9].abs().sum() == 0
    assert isinstance(w.last_error, ibp.InvalidArgumentError)
    w.shutdown()


@FORMS
def test_worker_device_path_twin(pages, form):
    """The GPU path's queued C orchestration (KVOffloader's host-fallback
    test hook: device semantics on host tensors) moves the same bytes."""
    kc, view = caches(pages, False)
    gspec = spec_of(kc, form)
    w = iv.IBPOffloadingWorker(kc, "bfloat16", 1, layers_per_group=[L], _host_fallback=True)
    assert w._on_device
    w.submit_store(1, gspec(range(8)), iv.CPULoadStoreSpec(range(8)))
    assert done(w, [1]) == [(1, True)]
    view.zero_()
    w.submit_load(2, iv.CPULoadStoreSpec(range(8)), gspec(range(4, 12)))
    assert done(w, [2]) == [(2, True)]
    for layer in range(L):
        assert torch.equal(view[layer][4:12], pages[layer, :8])
    w.shutdown()


@pytest.mark.parametrize("packed", [False, True], ids=["per_layer", "cross_layer"])
def test_worker_checks_device_pointers(pages, packed):
    """vLLM 0.34's DevicePointers are addresses: one that is not a block's
    page of its ref's tensor, a size that is not the page's, refs naming
    different blocks, or counts that disagree with the caches fail the job
    (success=False, nothing written); the good ones around them work."""
    kc, view = caches(pages, packed)
    w = iv.IBPOffloadingWorker(kc, "bfloat16", 1, layers_per_group=[L])
    good = pointers(kc, gspec([0, 1, 2]))
    assert w.submit_store(1, good, iv.CPULoadStoreSpec([0, 1, 2]))
    assert done(w, [1]) == [(1, True)]
    view.zero_()
    nrefs = len(kc.group_data_refs[0])
    t0 = kc.tensors[0].tensor

    def bent(**kw):
        d = dict(ptrs=good.ptrs.copy(), sizes=good.sizes.copy(), group_block_counts=good.group_block_counts,
                 group_data_ref_counts=good.group_data_ref_counts, block_indices=good.block_indices)
        d.update(kw)
        return type(good)(**d)

    p = good.ptrs.copy()
    p[1] += 2  # inside a page
    cases = [bent(ptrs=p)]
    p = good.ptrs.copy()
    p[0] = np.uint64(t0.data_ptr()) - np.uint64(t0.stride(0))  # the block before the tensor
    cases.append(bent(ptrs=p))
    p = good.ptrs.copy()
    p[2] = np.uint64(t0.data_ptr()) + np.uint64(NB * t0.stride(0))  # past its last block
    cases.append(bent(ptrs=p))
    sz = good.sizes.copy()
    sz[0] -= 1
    cases.append(bent(sizes=sz))
    cases.append(bent(ptrs=good.ptrs[:-1], sizes=good.sizes[:-1]))  # a copy short
    cases.append(bent(group_data_ref_counts=(nrefs + 1,)))
    cases.append(bent(group_block_counts=(3, 0)))  # two groups, the caches have one
    if nrefs > 1:  # per layer: a later ref names another block
        p = good.ptrs.copy()
        p[3] += np.uint64(kc.tensors[1].tensor.stride(0))
        cases.append(bent(ptrs=p))
    for i, c in enumerate(cases):
        assert w.submit_load(10 + i, iv.CPULoadStoreSpec([0, 1, 2]), c)
    assert done(w, range(10, 10 + len(cases))) == [(10 + i, False) for i in range(len(cases))]
    assert isinstance(w.last_error, ibp.InvalidArgumentError)
    for layer in range(L):
        assert view[layer].abs().sum() == 0
    assert w.submit_load(99, iv.CPULoadStoreSpec([2, 1, 0]), good)  # the chunks are intact
    assert done(w, [99]) == [(99, True)]
    for layer in range(L):
        for dst, src in [(0, 2), (1, 1), (2, 0)]:
            assert torch.equal(view[layer][dst], pages[layer, src])
    w.shutdown()


def test_worker_refuses_layouts_it_cannot_read(pages):
    kc, _ = caches(pages, False)
    with pytest.raises(ibp.UnsupportedError, match="fp8"):
        iv.IBPOffloadingWorker(kc, "fp8_e4m3")
    bad = iv.CanonicalKVCaches([iv.CanonicalKVCacheTensor(torch.zeros(4, 6, dtype=torch.int8), 6)],
                               [[iv.CanonicalKVCacheRef(0, 6)]])
    with pytest.raises(ibp.UnsupportedError, match="two rows"):
        iv.IBPOffloadingWorker(bad, "float32")
    with pytest.raises(ibp.InvalidArgumentError):
        iv.IBPOffloadingWorker(iv.CanonicalKVCaches([iv.CanonicalKVCacheTensor(torch.zeros(4, 8, dtype=torch.int8),
                                                                                8)],
                                                    [[iv.CanonicalKVCacheRef(0, 16)]]), "float16")


def test_chunk_count_and_dtypes():
    assert iv.chunk_count({"num_cpu_chunks": 5}, 100, 1, 1) == 5
    assert iv.chunk_count({"cpu_bytes_to_use": 10_000}, 100, 2, 2) == 25
    assert iv.chunk_count({"cpu_bytes_to_use": 10_000, "ibp_assumed_ratio": 1.5}, 100, 2, 2) == 37
    assert iv.chunk_count({"cpu_bytes_to_use": 10_000}, 0, 1, 1) == 0  # a scheduler without block sizes
    for bad in ({}, {"num_cpu_chunks": 0}, {"cpu_bytes_to_use": 1, "ibp_assumed_ratio": 0}):
        with pytest.raises(ibp.InvalidArgumentError):
            iv.chunk_count(bad, 100, 1, 1)
    assert iv.kv_dtype("bfloat16") == torch.bfloat16 and iv.kv_dtype("torch.float16") == torch.float16
    with pytest.raises(ibp.UnsupportedError):
        iv.kv_dtype("int8")


# ---- versions ------------------------------------------------------------------

def run_with_fake_vllm(tmp_path, version, body=""):
    """Imports ibp.torch.vllm beside a stand-in `vllm` distribution."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = %r\n%s" % (version, body))
    dist = site / ("vllm-%s.dist-info" % version)
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: %s\n" % version)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site)] + [p for p in sys.path if p]))
    code = ("import ibp, ibp.torch.vllm\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))


@pytest.mark.parametrize("version", ["0.17.0", "0.32.1", "0.35.0", "1.0.0rc1"])
def test_other_vllm_versions_are_refused(tmp_path, version):
    r = run_with_fake_vllm(tmp_path, version)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ibp._errors.UnsupportedError") or "UnsupportedError" in last, r.stderr
    assert "vLLM %s is installed" % version in last and "0.33.x and 0.34.x" in last and "pip install" in last


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_a_broken_supported_vllm_is_refused_not_hidden(tmp_path, version):
    r = run_with_fake_vllm(tmp_path, version)  # no vllm.v1.kv_offload in it
    assert r.returncode != 0 and "UnsupportedError" in r.stderr, r.stderr
    assert "does not import" in r.stderr and version in r.stderr


def test_the_spec_is_there_with_vllm_and_says_what_to_install_without():
    if iv.HAVE_VLLM:  # tools/test-clients.sh's environment
        from vllm.v1.kv_offload.base import OffloadingSpec
        assert iv.VLLM_VERSION.startswith(("0.33.", "0.34.")) and issubclass(iv.IBPOffloadingSpec, OffloadingSpec)
        return
    assert iv.VLLM_VERSION is None
    with pytest.raises(ImportError, match="pip install 'vllm==0.34.\\*'"):
        iv.IBPOffloadingSpec  # noqa: B018
    with pytest.raises(ImportError, match="0.33.x and 0.34.x"):
        iv.register()
