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
    with pytest.raises(ibp.UnsupportedError):
        it.KVOffloader(1, BLOCK, torch.bfloat16, device="cuda")
    with pytest.raises(ValueError):
        off.store(0, kv.float(), [0])
