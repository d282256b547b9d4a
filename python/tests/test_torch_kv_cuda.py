"""ibp.torch.KVOffloader, device path (device="cuda"): on this machine only
its host-fallback twin runs (test hook _host_fallback=True: the C
orchestration, ibp_kv_encode_cuda / ibp_kv_decode_cuda, with the CPU twins
on host tensors). Real MiniLM K/V as in test_torch_kv.py: round trips
bit-exact, blocks byte-identical to the CPU path's and to a Python
reference of the block formats (which both paths load), capacity/eviction, pins held until wait, corrupt rows reported by
wait, errors. On a machine with a GPU the hook's twin takes the same C
calls' CPU path (IBP_KV_HOST; found on an H200, 2026-11-28, where the hook
refused to run), and test_real_gpu runs the round trip on the device
(skipped without one)."""

import os

import numpy as np
import pytest

import ibp

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch as it  # noqa: E402
from ibp import _cuda  # noqa: E402
from conftest import REPO  # noqa: E402

BLOCK = (16, 12, 32)


@pytest.fixture(scope="module")
def kv_layers():
    bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy"))
    t = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return [t.view(6, 2, 128, 384)[layer].reshape(2, 8, *BLOCK).contiguous() for layer in range(6)]


def dev(n=1, dtype=torch.bfloat16, **k):
    return it.KVOffloader(n, BLOCK, dtype, device="cuda", _host_fallback=True, **k)


def stored(off, h):
    _, _, seg, ph = off._entries[h]
    return off._segments[seg].get(ph)


def test_host_fallback_round_trip(kv_layers):
    off = dev(6)
    kinds = set()
    for layer, kv in enumerate(kv_layers):
        off.calibrate(layer, kv[:, :4])
        hs = off.store(layer, kv, list(range(8)))
        cache = torch.zeros(2, 12, *BLOCK, dtype=torch.bfloat16)
        dst = [11, 0, 5, 3, 9, 1, 7, 2]
        off.load(layer, hs, cache, dst)
        off.wait(layer)
        assert torch.equal(cache[:, dst].view(torch.int16), kv.view(torch.int16))
        assert not cache[:, [4, 6, 8, 10]].view(torch.int16).any()
        kinds.add(off.codec(layer))
        assert off.ratio(layer) >= 1.0
    assert kinds - {"raw"}  # something compressed


def ref_blocks(off, layer, kv, ids):
    """The block formats written in Python, independently of libibp's C
    orchestration: the IBP batch from Codec.encode with its 12-byte headers,
    the exponent block from ibp.exp.compress_chunks (one chunk per block),
    raw rows."""
    rows = off._rows(kv, ids)
    kind = off.codec(layer)
    out = []
    if kind == "ibp":
        enc = off._codec[layer].encode(rows)
        o = enc.offsets.astype(np.int64)
        for i in range(0, rows.shape[0], 2):
            hdr = np.zeros(12, np.uint8)
            hdr[0:8].view(np.uint32)[:] = (o[i + 1] - o[i], o[i + 2] - o[i + 1])
            hdr[8:10] = enc.flags[i:i + 2]
            if enc.clusters is not None:
                hdr[10:12] = enc.clusters[i:i + 2]
            out.append(np.concatenate([hdr, enc.payload[o[i]:o[i + 2]]]))
    elif kind == "exp":
        t = torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16) if off.dtype == torch.bfloat16 else rows
        ch = ibp.exp.compress_chunks(t, 2 * rows.shape[1], nthreads=1)
        p, o = np.asarray(ch.payload).view(np.uint8), np.asarray(ch.offsets).astype(np.int64)
        out = []
        for i in range(len(o) - 1):
            # in-memory KV blocks carry no checksum: the chunk's block without its flag and sum
            b = p[o[i]:o[i + 1]].copy()
            b[48] = 0
            b[56:64] = 0
            out.append(b)
    else:
        out = [np.ascontiguousarray(rows[i:i + 2]).reshape(-1).view(np.uint8) for i in range(0, rows.shape[0], 2)]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["ibp", "exp", "raw"])
def test_same_bytes_as_cpu_and_python_reference(kv_layers, kind, dtype):
    kv = kv_layers[3].to(dtype)
    cpu = it.KVOffloader(1, BLOCK, dtype)
    gpu = dev(dtype=dtype)
    cpu.calibrate(0, kv)
    gpu._codec[0], gpu._kind[0] = cpu._codec[0], kind
    cpu._kind[0] = kind
    ids = [6, 0, 3, 3, 7]
    hc, hg = cpu.store(0, kv, ids), gpu.store(0, kv, ids)
    gpu.wait(0)
    ref = ref_blocks(cpu, 0, kv, ids)
    for a, b, r in zip(hc, hg, ref):
        assert stored(cpu, a).tobytes() == stored(gpu, b).tobytes() == r.tobytes()
    assert cpu.used_bytes == gpu.used_bytes and cpu.ratio(0) == gpu.ratio(0)
    # Blocks written by the Python reference load through either path.
    for off in (cpu, gpu):
        hs = []
        for r in ref:
            h = off._next
            off._next += 1
            off._entries[h] = (0, kind, 0, off._segments[0].put(r))
            hs.append(h)
        cache = torch.zeros_like(kv)
        off.load(0, hs[:4], cache, [1, 2, 4, 5])
        off.wait(0)
        assert torch.equal(cache[:, [1, 2, 4, 5]].view(torch.int16), kv[:, ids[:4]].view(torch.int16))


def test_stream_reused_and_grown(kv_layers):
    off = dev()
    kv = kv_layers[0]
    off.calibrate(0, kv)
    off._kind[0] = "ibp"
    off.store(0, kv, [0])
    s1 = off._kvs[0]
    off.store(0, kv, [1, 2])
    assert off._kvs[0] is s1 and s1[1] is off._codec[0]  # one libibp stream per layer, not per call
    big = torch.cat([kv] * 40, dim=1)
    off._kind[0] = "raw"
    hs = off.store(0, big, list(range(big.shape[1])))  # raw: made again, without the codec
    assert off._kvs[0] is not s1 and off._kvs[0][1] is None
    cache = torch.zeros_like(big)
    off.load(0, hs, cache, list(range(big.shape[1])))
    off.wait(0)
    assert torch.equal(cache.view(torch.int16), big.view(torch.int16))


def test_slots_pinned_until_wait(kv_layers):
    kv = kv_layers[4]
    off = dev()
    off.calibrate(0, kv)
    off._kind[0] = "ibp"
    hs = off.store(0, kv, list(range(8)))
    assert off.pool_stats()["pinned_blocks"] == 8  # the queued copies write them
    off.wait(0)
    assert off.pool_stats()["pinned_blocks"] == 0
    cache = torch.zeros_like(kv)
    off.load(0, hs[:3], cache, [7, 6, 5])
    assert off.pool_stats()["pinned_blocks"] == 3
    off.free(hs[:1])  # freed at the last unpin
    off.wait(0)
    st = off.pool_stats()
    assert st["pinned_blocks"] == 0 and st["blocks"] == 7
    assert torch.equal(cache[:, [7, 6, 5]].view(torch.int16), kv[:, :3].view(torch.int16))


def test_corrupt_row_reported_by_wait(kv_layers):
    kv = kv_layers[5]
    off = dev()
    off.calibrate(0, kv)
    off._kind[0] = "ibp"
    hs = off.store(0, kv, [0, 1, 2])
    off.wait(0)
    _, _, seg, ph = off._entries[hs[1]]
    pool = off._segments[seg]
    blk = pool.get(ph).copy()
    blk[8] = 0x7F  # K's mode byte: the header parses, the row does not decode
    pool.remove(ph)
    off._entries[hs[1]] = (0, "ibp", seg, pool.put(blk))
    cache = torch.zeros_like(kv)
    off.load(0, hs, cache, [3, 4, 5])
    with pytest.raises(ibp.CorruptError, match="1 K/V rows"):
        off.wait(0)
    off.wait(0)  # reported once
    assert not cache[0, 4].view(torch.int16).any()  # the bad K row is zero
    assert torch.equal(cache[1, 4].view(torch.int16), kv[1, 1].view(torch.int16))
    assert torch.equal(cache[:, [3, 5]].view(torch.int16), kv[:, [0, 2]].view(torch.int16))
    blk[0] ^= 1  # a length that does not add up: refused before anything runs
    off._entries[hs[1]] = (0, "ibp", seg, pool.put(blk))
    cache.zero_()
    with pytest.raises(ibp.CorruptError):
        off.load(0, hs, cache, [3, 4, 5])
    assert not cache.view(torch.int16).any()


def test_capacity_eviction(kv_layers):
    kv = kv_layers[1]
    evicted = []
    off = dev(on_evict=evicted.append)
    off.calibrate(0, kv)
    first = off.store(0, kv, list(range(8)))
    per_block = max(len(stored(off, h)) for h in first)
    off.capacity_bytes = int(per_block * 24.5)  # the pool's slabs: 16 blocks fit at once
    off.free(first)
    evicted.clear()
    ids = [i % 8 for i in range(40)]
    with pytest.raises(ibp.CapacityError):  # cannot fit: nothing stored, nothing of its own evicted
        off.store(0, kv, ids)
    assert off.used_bytes == 0 and evicted == []
    old = off.store(0, kv, ids[:16])
    hs = off.store(0, kv, ids[:12])  # fits by evicting older blocks, never its own
    assert off.used_bytes <= off.capacity_bytes and evicted and set(evicted) <= set(old)
    with pytest.raises(KeyError):
        off.load(0, [evicted[0]], torch.zeros_like(kv), [0])
    cache = torch.zeros_like(kv)
    off.load(0, hs[:8], cache, list(range(8)))
    off.wait(0)
    assert torch.equal(cache.view(torch.int16), kv.view(torch.int16))


def test_errors(kv_layers):
    kv = kv_layers[2]
    off = dev(2)
    hs = off.store(0, kv, [0, 1])
    for bad in ([8], [-1]):
        with pytest.raises(ValueError):
            off.store(0, kv, bad)
        with pytest.raises(ValueError):
            off.load(0, hs[:1], torch.zeros_like(kv), bad)
    with pytest.raises(ValueError):
        off.store(0, kv.float(), [0])
    with pytest.raises(ValueError):
        off.store(0, kv[:, :, :8].contiguous(), [0])
    with pytest.raises(ValueError):
        off.load(1, hs, torch.zeros_like(kv), [0, 1])  # handles of layer 0
    cache = torch.zeros_like(kv)
    off.free(hs[1:])
    with pytest.raises(KeyError):
        off.load(0, hs, cache, [0, 1])
    assert not cache.view(torch.int16).any()  # checked before anything is written
    with pytest.raises(ibp.OutOfRangeError):
        off.wait(2)
    off.wait(1)
    off.calibrate(1, kv)
    off._kind[1] = "ibp"
    h = off.store(1, kv, [0])[0]
    blk = stored(off, h).copy()
    blk[0:4] = np.frombuffer(np.uint32(1 << 30).tobytes(), np.uint8)  # a length past the block
    _, _, seg, ph = off._entries[h]
    off._segments[seg].remove(ph)
    off._entries[h] = (1, "ibp", seg, off._segments[seg].put(blk))
    cache = torch.zeros_like(kv)
    with pytest.raises(ibp.CorruptError):
        off.load(1, [h], cache, [0])
    assert not cache.view(torch.int16).any()


def test_no_gpu_raises_no_device_error():
    if _cuda.device_count() > 0:
        pytest.skip("a GPU is present: see test_real_gpu")
    with pytest.raises(ibp.NoDeviceError) as e:
        it.KVOffloader(1, BLOCK, torch.bfloat16, device="cuda")
    assert str(e.value)
    with pytest.raises(ValueError):
        it.KVOffloader(1, BLOCK, torch.bfloat16, device="meta")


def test_real_gpu(kv_layers):
    if _cuda.device_count() == 0 or not torch.cuda.is_available():
        pytest.skip("no GPU: the device path ran only as its host-fallback twin")
    kv = kv_layers[3]
    cpu = it.KVOffloader(1, BLOCK, torch.bfloat16)
    gpu = it.KVOffloader(1, BLOCK, torch.bfloat16, device="cuda")
    cpu.calibrate(0, kv)
    for kind in ("ibp", "raw", "exp"):
        gpu._codec[0], gpu._kind[0], cpu._kind[0] = cpu._codec[0], kind, kind
        ids = [6, 0, 3, 7]
        hc, hg = cpu.store(0, kv, ids), gpu.store(0, kv.cuda(), ids)
        gpu.wait(0)
        for a, b in zip(hc, hg):
            assert stored(cpu, a).tobytes() == stored(gpu, b).tobytes()
        cache = torch.zeros_like(kv).cuda()
        gpu.load(0, hg, cache, [1, 2, 4, 5])
        gpu.wait(0)
        assert torch.equal(cache[:, [1, 2, 4, 5]].cpu().view(torch.int16), kv[:, ids].view(torch.int16))
