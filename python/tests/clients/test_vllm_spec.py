"""IBPOffloadingSpec in vLLM itself (0.34; 0.33 in an environment of its
own, IBP_CLIENTS=vllm033): loaded by vLLM's
OffloadingSpecFactory from the config vLLM's connector builds, given the
CanonicalKVCaches vLLM's worker-side connector derives from a real MiniLM
KV cache (per-layer and cross-layer layouts), driven through that
connector's own store / load / get_finished calls (0.34's connector hands
the worker DevicePointers); every byte comes back."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: tools/test-clients.sh runs this file in its "
                    "environment (~/.cache/ibp/clients/vllm)")
import torch  # noqa: E402
from _vllm_env import BLOCK, LAYERS, kv_cache, minilm_kv, offloading_config, vllm_config  # noqa: E402
from conftest import REPO  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (  # noqa: E402
    OffloadingConnectorMetadata, TransferJob)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import OffloadingConnectorWorker  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.kv_offload.base import GPULoadStoreSpec, OffloadingSpec  # noqa: E402
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec  # noqa: E402
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402

import ibp  # noqa: E402
import ibp.torch.vllm as iv  # noqa: E402

NB = 12  # GPU blocks: 8 hold the 128 MiniLM tokens, 4 are free
EXTRA = {"spec_name": "IBPOffloadingSpec", "spec_module_path": "ibp.torch.vllm", "cpu_bytes_to_use": 64 << 20}


@pytest.fixture(scope="module")
def kv():
    return minilm_kv(REPO)


def test_version_is_the_supported_one():
    assert iv.HAVE_VLLM and iv.VLLM_VERSION.startswith(("0.33.", "0.34.")) and iv.SUPPORTED_VLLM == "0.33.x and 0.34.x"
    assert iv._V034 == iv.VLLM_VERSION.startswith("0.34.")


def test_factory_loads_the_spec_by_module_path_and_by_name():
    _, _, kcc = kv_cache(KVCacheLayout.LBHNC, NB)
    cfg = offloading_config(EXTRA, kcc)
    spec = OffloadingSpecFactory.create_spec(cfg)
    assert type(spec) is iv.IBPOffloadingSpec and isinstance(spec, OffloadingSpec)
    # cpu_bytes_to_use in raw chunks, as vLLM's CPU spec counts them (MiniLM: 6 layers x 24 KiB a block)
    assert cfg.worker_kv_bytes_per_block == LAYERS * BLOCK * 12 * 32 * 2 * 2
    assert spec.num_chunks == (64 << 20) // cfg.worker_kv_bytes_per_block
    assert spec.dtype == torch.bfloat16 and spec.blocks_per_chunk == 1
    m = spec.get_manager()
    assert isinstance(m, iv.IBPOffloadingManager) and m.num_chunks == spec.num_chunks and spec.get_manager() is m
    # by name alone once registered
    if iv.SPEC_NAME not in OffloadingSpecFactory._registry:
        iv.register()
    with pytest.raises(ValueError):
        iv.register()  # vLLM refuses a second registration
    spec2 = OffloadingSpecFactory.create_spec(offloading_config({"spec_name": "IBPOffloadingSpec",
                                                                 "num_cpu_chunks": 7, "blocks_per_chunk": 2}, kcc))
    assert type(spec2) is iv.IBPOffloadingSpec and spec2.num_chunks == 7 and spec2.blocks_per_chunk == 2
    spec3 = OffloadingSpecFactory.create_spec(offloading_config(dict(EXTRA, ibp_assumed_ratio=1.5), kcc))
    assert spec3.num_chunks == int((64 << 20) * 1.5) // cfg.worker_kv_bytes_per_block


def test_spec_refuses_what_it_cannot_do():
    _, _, kcc = kv_cache(KVCacheLayout.LBHNC, NB)
    with pytest.raises(ibp.InvalidArgumentError, match="cpu_bytes_to_use"):
        OffloadingSpecFactory.create_spec(offloading_config({k: v for k, v in EXTRA.items()
                                                             if k != "cpu_bytes_to_use"}, kcc))
    with pytest.raises(ibp.UnsupportedError, match="lru"):
        OffloadingSpecFactory.create_spec(offloading_config(dict(EXTRA, eviction_policy="arc"), kcc))
    with pytest.raises(ibp.UnsupportedError, match="fp8"):
        OffloadingSpecFactory.create_spec(offloading_config(EXTRA, kcc, cache_dtype="fp8_e4m3"))
    with pytest.raises(ibp.UnsupportedError, match="canonical_layout"):
        OffloadingSpecFactory.create_spec(offloading_config(dict(EXTRA, canonical_layout=True), kcc))


def connector(layout, kv, extra=EXTRA):
    """vLLM's worker-side OffloadingConnector part, on our spec, with the
    caches registered: (raw buffer, connector worker, our worker)."""
    raw, views, kcc = kv_cache(layout, NB, kv)
    vc = vllm_config(extra)
    spec = OffloadingSpecFactory.create_spec(offloading_config(extra, kcc))
    w = OffloadingConnectorWorker(spec, vc, kcc)
    w.register_kv_caches(views)
    assert isinstance(w.worker, iv.IBPOffloadingWorker)
    return raw, w, w.worker


def gpu_spec(ids, start=0):
    return GPULoadStoreSpec(list(ids), group_sizes=[len(ids)], block_indices=[start])


def device_spec(w, ids, start=0):
    """What vLLM's connector hands the worker for these blocks: 0.34 resolves
    them to DevicePointers against its caches, 0.33 passes the spec."""
    spec = gpu_spec(ids, start)
    if not iv._V034:
        return spec
    from vllm.v1.kv_offload.pointer_utils import resolve_device_pointers
    return resolve_device_pointers(spec, w._kv_caches)


def run_stores(w, jobs):
    """jobs: {job_id: (gpu ids, chunk ids, first block index)}, as the
    scheduler sends them: deferred to the next step, then submitted."""
    meta = OffloadingConnectorMetadata(load_jobs={}, store_jobs={
        j: TransferJob("r", gpu_spec(g, s), CPULoadStoreSpec(c)) for j, (g, c, s) in jobs.items()})
    w.prepare_store_kv(meta)
    w.start_kv_transfers(OffloadingConnectorMetadata(load_jobs={}, store_jobs={}))
    w.worker.wait(set(jobs))
    w.get_finished(set())  # asserts every result's success
    return w.build_connector_worker_meta()


def run_loads(w, jobs, sync):
    meta = OffloadingConnectorMetadata(store_jobs={}, load_jobs={
        j: TransferJob("r%d" % j, CPULoadStoreSpec(c), gpu_spec(g, s), sync=sync) for j, (c, g, s) in jobs.items()})
    w.start_kv_transfers(meta)  # sync loads are waited for here
    if not sync:
        w.worker.wait(set(jobs))
    _, recving = w.get_finished(set())
    assert recving == (set() if sync else {"r%d" % j for j in jobs})
    return w.build_connector_worker_meta()


def page_bytes(raw, layout):
    """The raw buffer as [block][layer page] bytes, whatever the layout."""
    page = BLOCK * 12 * 64 * 2
    r = raw.view(LAYERS, NB, page) if layout.is_layer_compact else raw.view(NB, LAYERS, page).transpose(0, 1)
    return r.transpose(0, 1)


@pytest.mark.parametrize("layout", [KVCacheLayout.LBHNC, KVCacheLayout.LBNHC, KVCacheLayout.BLHNC,
                                    KVCacheLayout.BLNHC])
def test_round_trip_through_vllms_connector(kv, layout):
    raw, w, ours = connector(layout, kv)
    canon = len(ours._rows)
    assert canon == (LAYERS if layout.is_layer_compact else 1)  # cross-layer: one tensor for all layers
    assert len(ours.units) == LAYERS  # a codec per layer either way
    orig = page_bytes(raw, layout).clone()
    assert orig[:8].abs().sum() > 0 and orig[8:].abs().sum() == 0
    # the 8 filled blocks stored as chunks 3..10 in three jobs
    meta = run_stores(w, {1: ([0, 1, 2], [3, 4, 5], 0), 2: ([3, 4], [6, 7], 3), 3: ([5, 6, 7], [8, 9, 10], 5)})
    assert sorted(meta.completed_jobs) == [1, 2, 3]
    assert meta.transfer_stats.store.bytes == 8 * LAYERS * BLOCK * 12 * 64 * 2
    assert set(ours.codecs()) <= {"ibp", "exp", "raw"} and None not in ours.codecs()
    assert 0 < ours.host_bytes < ours.raw_bytes == 8 * LAYERS * BLOCK * 12 * 64 * 2
    raw.zero_()
    # chunks back into other GPU blocks: sync (expedited) and async loads
    run_loads(w, {4: ([5, 6, 7], [9, 2, 11], 5)}, sync=True)
    run_loads(w, {5: ([3, 4], [0, 10], 0), 6: ([8, 9, 10], [4, 8, 3], 0)}, sync=False)
    got = page_bytes(raw, layout)
    for dst, src in [(9, 2), (2, 3), (11, 4), (0, 0), (10, 1), (4, 5), (8, 6), (3, 7)]:  # chunk c holds block c - 3
        assert torch.equal(got[dst], orig[src]), (dst, src)
    assert got[[1, 5, 6, 7]].abs().sum() == 0
    w.shutdown()
    assert ours.host_bytes == 0


def test_chunks_of_two_blocks_and_a_load_starting_inside_one(kv):
    extra = dict(EXTRA, blocks_per_chunk=2)
    raw, w, ours = connector(KVCacheLayout.BLHNC, kv, extra)
    assert ours.bpc == 2
    orig = page_bytes(raw, KVCacheLayout.BLHNC).clone()
    run_stores(w, {1: ([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], 0)})
    raw.zero_()
    # blocks 3..6 of the request: the first starts in the middle of chunk 1
    run_loads(w, {2: ([1, 2, 3], [8, 9, 10, 11], 3)}, sync=True)
    got = page_bytes(raw, KVCacheLayout.BLHNC)
    for dst, src in zip([8, 9, 10, 11], [3, 4, 5, 6]):
        assert torch.equal(got[dst], orig[src])
    assert got[:8].abs().sum() == 0
    w.shutdown()


def test_a_failed_transfer_is_reported_not_raised(kv):
    raw, w, ours = connector(KVCacheLayout.LBHNC, kv)
    before = raw.clone()
    # chunk 5 was never stored: submitted fine, finished with success=False, nothing written
    assert ours.submit_load(7, CPULoadStoreSpec([5]), device_spec(w, [0])) is True
    assert ours.submit_store(8, device_spec(w, [0, 1]), CPULoadStoreSpec([0])) is True  # 2 blocks, 1 chunk
    ours.wait({7, 8})
    res = sorted(ours.get_finished(), key=lambda r: r.job_id)
    assert [(r.job_id, r.success) for r in res] == [(7, False), (8, False)]
    assert torch.equal(raw, before) and ours.host_bytes == 0
    assert isinstance(ours.last_error, ibp.InvalidArgumentError)
    # vLLM's connector does not take failures (it asserts); the worker itself keeps going
    assert ours.submit_store(9, device_spec(w, [0]), CPULoadStoreSpec([0]))
    ours.wait({9})
    assert [r.success for r in ours.get_finished()] == [True]
    w.shutdown()
