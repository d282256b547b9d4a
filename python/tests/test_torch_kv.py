"""ibp.torch.KVOffloader, CPU path: real MiniLM K/V (datasets/sample:
6 layers x K/V x 128 tokens x 12 heads x 32, bf16) laid out as vLLM's
per-layer paged cache, stored block by block and loaded back into other
blocks bit-exactly; per-layer codec choice and ratio; capacity eviction."""

import os

import numpy as np
import pytest

import ibp

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch as it  # noqa: E402
from conftest import REPO  # noqa: E402

BLOCK = (16, 12, 32)  # block_size, num_kv_heads, head_size


@pytest.fixture(scope="module")
def kv_layers():
    """Per layer a [2, 8, 16, 12, 32] bf16 cache: 128 tokens in 8 blocks."""
    bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy"))  # (6*2*128, 384)
    t = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return [t.view(6, 2, 128, 384)[layer].reshape(2, 8, *BLOCK).contiguous() for layer in range(6)]


def test_round_trip_bit_exact(kv_layers):
    off = it.KVOffloader(6, BLOCK, torch.bfloat16)
    ratios = []
    for layer, kv in enumerate(kv_layers):
        sizes = off.calibrate(layer, kv[:, :4])  # prefill-time calibration on half the blocks
        assert sizes["codec"] in ("ibp", "exp", "raw")
        assert sizes[sizes["codec"]] == min(sizes["ibp"], sizes["exp"], sizes["raw"])
        handles = off.store(layer, kv, list(range(8)))
        cache = torch.zeros(2, 12, *BLOCK, dtype=torch.bfloat16)
        dst = [11, 0, 5, 3, 9, 1, 7, 2]
        off.load(layer, handles, cache, dst)
        assert torch.equal(cache[:, dst].view(torch.int16), kv.view(torch.int16))
        assert torch.equal(cache[:, [4, 6, 8, 10]], torch.zeros_like(cache[:, [4, 6, 8, 10]]))
        ratios.append((off.codec(layer), round(off.ratio(layer), 3)))
    print("per-layer codec and ratio:", ratios)
    assert all(r >= 1.0 for _, r in ratios)
    assert any(r > 1.05 for _, r in ratios)  # real K/V do compress


def test_every_codec_path_and_fp16(kv_layers):
    kv = kv_layers[2]
    for dtype in (torch.bfloat16, torch.float16):
        x = kv.to(dtype)
        for kind in ("ibp", "exp", "raw"):
            off = it.KVOffloader(1, BLOCK, dtype)
            off.calibrate(0, x)
            off._kind[0] = kind  # force each path
            hs = off.store(0, x, [7, 1])
            cache = torch.empty_like(x)
            off.load(0, hs, cache, [0, 1])
            assert torch.equal(cache[:, [0, 1]].view(torch.int16), x[:, [7, 1]].view(torch.int16)), kind


def test_capacity_eviction_and_errors(kv_layers):
    kv = kv_layers[0]
    evicted = []
    off = it.KVOffloader(1, BLOCK, torch.bfloat16, on_evict=evicted.append)
    off.calibrate(0, kv)
    one = off.store(0, kv, [0])
    per_block = off.used_bytes
    off.free(one)
    assert off.used_bytes == 0
    off.capacity_bytes = int(per_block * 3.5)
    hs = off.store(0, kv, list(range(8)))
    assert off.used_bytes <= off.capacity_bytes and evicted == hs[:len(evicted)] and len(evicted) >= 4
    with pytest.raises(KeyError):
        off.load(0, [hs[0]], torch.zeros_like(kv), [0])
    cache = torch.zeros_like(kv)
    off.load(0, [hs[-1]], cache, [0])
    assert torch.equal(cache[:, 0], kv[:, 7])
    with pytest.raises((ibp.UnsupportedError, ibp.NoDeviceError)):  # GPU path: see test_torch_kv_cuda.py
        it.KVOffloader(1, BLOCK, torch.bfloat16, device="cuda")
    with pytest.raises(ValueError):
        off.store(0, kv.float(), [0])


def test_pool_capacity_eviction_reuse(kv_layers):
    """The blocks live in an ibp.SlabPool: the byte budget holds (slots
    included), every eviction is reported once and its handle is invalid,
    the survivors load bit-exactly, freed slots are reused without
    evicting, and a load counts as a use for the LRU policy."""
    kv = kv_layers[1]
    evicted = []
    off = it.KVOffloader(1, BLOCK, torch.bfloat16, capacity_bytes=200_000, on_evict=evicted.append)
    off.calibrate(0, kv)
    handles = []
    for rep in range(6):
        handles += off.store(0, kv, list(range(8)))
        st = off.pool_stats()
        assert st["slot_bytes_used"] <= 200_000 and off.used_bytes <= st["slot_bytes_used"]
    st = off.pool_stats()
    assert len(evicted) == st["evictions"] > 0 and len(set(evicted)) == len(evicted)
    assert st["blocks"] == len(handles) - len(evicted)
    live = [h for h in handles if h not in set(evicted)]
    cache = torch.zeros_like(kv)
    for h in live:
        off.load(0, [h], cache, [0])
        assert torch.equal(cache[:, 0].view(torch.int16), kv[:, h % 8].view(torch.int16))
    for h in evicted:
        with pytest.raises(KeyError):
            off.load(0, [h], cache, [0])
    # freed slots take new blocks of their class without evicting anything
    off.free(live)
    assert off.used_bytes == 0
    n_ev = len(evicted)
    off.store(0, kv, list(range(4)))
    assert len(evicted) == n_ev and off.pool_stats()["evictions"] == n_ev

    # LRU: raw blocks (one size class), room for three; a loaded block is spared
    raw = 2 * 16 * 12 * 32 * 2
    ev2 = []
    off2 = it.KVOffloader(1, BLOCK, torch.bfloat16, capacity_bytes=3 * raw, on_evict=ev2.append)
    off2.calibrate(0, kv)
    off2._kind[0] = "raw"
    hs = off2.store(0, kv, [0, 1, 2])
    assert ev2 == [] and off2.used_bytes == 3 * raw
    off2.load(0, [hs[0]], torch.zeros_like(kv), [0])
    hs += off2.store(0, kv, [3])
    assert ev2 == [hs[1]], ev2
    hs += off2.store(0, kv, [4])
    assert ev2 == [hs[1], hs[2]], ev2
    with pytest.raises(ValueError):
        it.KVOffloader(1, BLOCK, torch.bfloat16, capacity_bytes=8)
    with pytest.raises(ValueError):
        off2.capacity_bytes = 0
    assert off2.capacity_bytes == 3 * raw and off2.used_bytes == 3 * raw  # unchanged


def test_unbounded_adds_segments_and_resize(kv_layers, monkeypatch):
    """capacity_bytes=None never evicts: the offloader adds pool segments;
    setting a capacity later moves the blocks, oldest first, evicting
    (per size class, as the pool's policy picks) what no longer fits."""
    from ibp.torch import _kv
    monkeypatch.setattr(_kv, "_SEGMENT", 1)  # segments of 16 largest blocks
    kv = kv_layers[3]
    evicted = []
    off = it.KVOffloader(1, BLOCK, torch.bfloat16, on_evict=evicted.append)
    hs = []
    for rep in range(5):
        hs += off.store(0, kv, list(range(8)))
    assert evicted == [] and len(off._segments) >= 2
    cache = torch.zeros_like(kv)
    for h in hs[::7]:
        off.load(0, [h], cache, [1])
        assert torch.equal(cache[:, 1].view(torch.int16), kv[:, h % 8].view(torch.int16))
    total = off.used_bytes
    off.capacity_bytes = total // 3
    assert 0 < len(evicted) < len(hs) and off.used_bytes <= total // 3
    assert hs[-1] not in evicted  # moved oldest first: the newest block is kept
    for h in hs:
        if h in set(evicted):
            with pytest.raises(KeyError):
                off.load(0, [h], cache, [1])
        else:
            off.load(0, [h], cache, [1])
            assert torch.equal(cache[:, 1].view(torch.int16), kv[:, h % 8].view(torch.int16))
    off.close()
