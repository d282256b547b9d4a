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
    off.capacity_bytes = int(per_block * 24.5)  # the pool's slabs: 16 blocks fit at once
    # a store that cannot fit raises and stores nothing (no block of its own evicted)
    ids = [i % 8 for i in range(40)]
    with pytest.raises(ibp.CapacityError, match="stored nothing"):
        off.store(0, kv, ids)
    assert off.used_bytes == 0 and evicted == []
    old = off.store(0, kv, ids[:16])
    assert evicted == []
    hs = off.store(0, kv, ids[:12])  # fits by evicting older blocks, never its own
    assert off.used_bytes <= off.capacity_bytes and evicted and set(evicted) <= set(old)
    with pytest.raises(KeyError):
        off.load(0, [evicted[0]], torch.zeros_like(kv), [0])
    cache = torch.zeros_like(kv)
    off.load(0, hs[:8], cache, list(range(8)))
    assert torch.equal(cache.view(torch.int16), kv.view(torch.int16))
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
    for rep in range(10):  # batches that fit (8 at once do not: CapacityError, test above)
        handles += off.store(0, kv, list(range(4)))
        st = off.pool_stats()
        assert st["slot_bytes_used"] <= 200_000 and off.used_bytes <= st["slot_bytes_used"]
    st = off.pool_stats()
    # the pool's evictions, and those a batch made room with beforehand
    assert len(evicted) >= st["evictions"] and len(evicted) > 0 and len(set(evicted)) == len(evicted)
    assert st["blocks"] == len(handles) - len(evicted)
    live = [h for h in handles if h not in set(evicted)]
    cache = torch.zeros_like(kv)
    for h in live:
        off.load(0, [h], cache, [0])
        assert torch.equal(cache[:, 0].view(torch.int16), kv[:, h % 4].view(torch.int16))
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
    hs, src = [], []
    for rep in range(5):  # rotated, so that no two segments hold the same blocks at the same places
        ids = [(i + 3 * rep) % 8 for i in range(8)]
        hs += off.store(0, kv, ids)
        src += ids
    want = dict(zip(hs, src))
    assert evicted == [] and len(off._segments) >= 2
    cache = torch.zeros_like(kv)
    for h in hs[::7]:
        off.load(0, [h], cache, [1])
        assert torch.equal(cache[:, 1].view(torch.int16), kv[:, want[h]].view(torch.int16))
    many = hs[::5]  # one call over every segment
    assert len({off._entries[h][2] for h in many}) >= 2
    off.load(0, many, cache, list(range(8)))
    for d, h in enumerate(many):
        assert torch.equal(cache[:, d].view(torch.int16), kv[:, want[h]].view(torch.int16))
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
            assert torch.equal(cache[:, 1].view(torch.int16), kv[:, want[h]].view(torch.int16))
    off.close()


def test_unbounded_reuses_freed_segments(kv_layers, monkeypatch):
    """Blocks freed in older segments are reused: a cycle of free and store
    keeps the segment count (it grew by one a pass when only the newest
    segment was tried), and every block still round-trips."""
    from ibp.torch import _kv
    monkeypatch.setattr(_kv, "_SEGMENT", 1)  # segments of 16 largest blocks
    off = it.KVOffloader(2, BLOCK, torch.bfloat16)
    counts = []
    hs = [[], []]
    for rep in range(6):
        for layer in range(2):
            off.free(hs[layer])
            hs[layer] = []
            for k in range(3):  # 24 blocks a layer: more than a segment holds
                hs[layer] += off.store(layer, kv_layers[layer], list(range(8)))
        counts.append(len(off._segments))
    assert counts[-1] == counts[1] and counts[1] >= 3, counts
    cache = torch.zeros_like(kv_layers[0])
    for layer in range(2):
        for i, h in enumerate(hs[layer]):
            off.load(layer, [h], cache, [0])
            assert torch.equal(cache[:, 0].view(torch.int16), kv_layers[layer][:, i % 8].view(torch.int16))
    off.close()


def test_layers_validated_and_closed(kv_layers):
    """A layer outside [0, num_layers) is refused (no negative alias) by
    every call taking one; after close every method raises ClosedError."""
    kv = kv_layers[0]
    off = it.KVOffloader(2, BLOCK, torch.bfloat16)
    for bad in (-1, 2, 99):
        with pytest.raises(ibp.OutOfRangeError, match="layer"):
            off.store(bad, kv, [0])
        with pytest.raises(ibp.OutOfRangeError):
            off.calibrate(bad, kv)
        with pytest.raises(ibp.OutOfRangeError):
            off.load(bad, [], kv, [])
        with pytest.raises(ibp.OutOfRangeError):
            off.wait(bad)
        with pytest.raises(ibp.OutOfRangeError):
            off.codec(bad)
    with pytest.raises(ibp.OutOfRangeError):
        off.ratio(-1)
    assert off.codec(1) is None  # not calibrated: nothing stored under layer 1 by the -1 calls
    hs = off.store(1, kv, [0])
    off.close()
    for call in (lambda: off.store(1, kv, [0]), lambda: off.load(1, hs, kv, [0]), lambda: off.calibrate(0, kv),
                 lambda: off.free(hs), lambda: off.wait(0), lambda: off.pool_stats()):
        with pytest.raises(ibp.ClosedError, match="KVOffloader"):
            call()


def test_cpu_path_keeps_one_small_workspace_between_calls(kv_layers):
    """The CPU path's calls are synchronous: no layer keeps its libibp stream
    after a store or a load; one codec-less stream (EXP and RAW blocks) is
    kept as the spare any layer takes next (its pages stay faulted in:
    three times faster warm, issue 33; its workspace is bounded by the C
    host path's batches, bench/kv_offload_case.py measures the memory); an
    IBP layer's stream (its own codec) is freed."""
    off = it.KVOffloader(6, BLOCK, torch.bfloat16)
    for layer in range(6):
        off.calibrate(layer, kv_layers[layer])
        off._kind[layer] = "exp" if layer < 5 else "ibp"
    spares = []
    for layer, kv in enumerate(kv_layers):
        hs = off.store(layer, kv, list(range(8)))
        assert off._kvs == {}
        spares.append(off._spare)
        back = torch.zeros_like(kv)
        off.load(layer, hs, back, list(range(8)))
        assert off._kvs == {}
        assert torch.equal(back.view(torch.int16), kv.view(torch.int16))
        assert off._spare == spares[-1]  # the load took the spare and gave it back
    assert spares[0] is not None and len(set(spares)) == 1  # one stream for every EXP layer, kept past the IBP one
    off.close()
    assert off._spare is None


def test_calibration_on_a_sample_keeps_the_ratio(kv_layers):
    """calibrate() trains on at most 64 evenly spaced blocks: on 96 blocks
    the ratio stays within 1% of a codec trained on all of them."""
    kv = torch.cat([kv_layers[3]] * 12, dim=1)[:, :96].contiguous()  # 96 blocks (repeats are fine here)
    off = it.KVOffloader(1, BLOCK, torch.bfloat16)
    sizes = off.calibrate(0, kv)
    assert sizes["raw"] == 64 * 2 * 16 * 12 * 32 * 2  # the sample's bytes
    off._kind[0] = "ibp"
    off.store(0, kv, list(range(96)))
    rows = off._rows(kv)
    full = ibp.train(rows)
    enc = full.encode(rows)
    full_ratio = rows.nbytes / (int(enc.offsets[-1]) + 12 * 96)
    assert off.ratio(0) >= 0.99 * full_ratio, (off.ratio(0), full_ratio)


def test_exp_layer_sigma_from_calibration_and_drift(kv_layers):
    """An exponent-codec layer stores with the calibration's sigma (the
    RMS of the calibration blocks; each block the bytes of ibp.exp.compress
    with that sigma, the mean-square pass skipped); blocks that drift far
    from it (here 2^20 times larger) send the layer back to measuring each
    block, and every block still round-trips bit-exactly."""
    import pickle
    kv = kv_layers[2]
    off = it.KVOffloader(1, BLOCK, torch.bfloat16)
    sizes = off.calibrate(0, kv)
    x = kv.float()
    want = float(torch.sqrt((x * x).mean()))
    if sizes["codec"] == "exp":
        assert abs(sizes["sigma"] - want) <= 1e-3 * want, (sizes["sigma"], want)
    off._kind[0] = "exp"  # this test is about exp stores, whatever the choice
    off._sigma[0] = sigma = 8 * want  # far enough from each block's own to change the window
    off._exp_block[0] = 1e9  # no drift check here
    hs = off.store(0, kv, list(range(8)))
    for b, h in enumerate(hs):
        got = bytes(off._segments[0].get(off._entries[h][3]))
        flat = torch.cat([kv[0, b].reshape(-1), kv[1, b].reshape(-1)])
        assert got in ibp.exp.compress(flat, sigma=sigma).numpy().tobytes(), b
        assert got not in ibp.exp.compress(flat).numpy().tobytes(), b
    copy = pickle.loads(pickle.dumps(off))
    assert copy._sigma == off._sigma and copy._exp_block == off._exp_block
    copy.close()
    off.calibrate(0, kv)
    off._kind[0], off._sigma[0] = "exp", want
    big = (kv.float() * 2.0 ** 20).to(torch.bfloat16)
    hb = off.store(0, big, list(range(8)))
    assert off._sigma[0] == 0.0, "drifted blocks: back to a measured sigma per block"
    out = torch.zeros(2, 16, *BLOCK, dtype=torch.bfloat16)
    off.load(0, hs + hb, out, list(range(16)))
    assert torch.equal(out[:, :8].view(torch.int16), kv.view(torch.int16))
    assert torch.equal(out[:, 8:].view(torch.int16), big.view(torch.int16))
    off.close()


def test_handle_table_pop_many():
    """The handle table's batch removal: one store's run (one shared entry),
    runs of two segments mixed, and unknown or already removed handles
    (ignored) give the same pool handles per segment and leave the same
    tables as removing each handle alone."""
    from ibp.torch._kv import _Blocks

    def table():
        b = _Blocks()
        b.put_run(range(0, 5), (0, "exp", 0), [10, 11, 12, 13, 14])
        b.put_run(range(5, 8), (1, "raw", 1), [20, 21, 22])
        b.put_run(range(8, 10), (0, "exp", 0), [15, 16])  # another store, equal entry
        return b

    cases = [[1, 2, 3], [0, 1, 2, 3, 4, 8, 9], [4, 5, 0, 6], [2, 99, 3], [99], [], [6, 6, 7]]
    for hs in cases:
        b, ref = table(), table()
        want = {}
        for h in hs:
            e = ref.pop(h)
            if e is not None:
                want.setdefault(e[2], []).append(e[3])
        got = b.pop_many(hs)
        assert {seg: [int(x) for x in phs] for seg, phs in got.items()} == want, hs
        assert b.items() == ref.items() and len(b) == len(ref), hs
        for seg, ph in [(0, p) for p in range(9, 18)] + [(1, p) for p in range(19, 24)] + [(2, 0)]:
            assert b.pop_pool(seg, ph) == ref.pop_pool(seg, ph), (hs, seg, ph)
        assert b.items() == ref.items() == [], hs


def test_handle_table_runs_against_a_dict():
    """The handle table keeps a store's blocks as one run (consecutive
    handles and pool handles): random stores (runs of consecutive pool
    handles, and some not consecutive, as lists and as int64 arrays),
    single puts over old handles,
    removals one by one, in batches and by pool handle (evictions), and
    enough churn to compact the runs, give the same entries and pool
    handle lookups as a plain dict."""
    import random

    from ibp.torch._kv import _Blocks

    rng = random.Random(7)
    b, ref = _Blocks(), {}  # ref: handle -> (layer, kind, seg, ph)
    nxt, nph = 0, [0, 0, 0]
    for step in range(4000):
        op = rng.random()
        if op < 0.3:
            seg, n = rng.randrange(3), rng.choice([1, 2, 3, 5, 16])
            if rng.random() < 0.2:  # not consecutive pool handles
                phs = rng.sample(range(nph[seg], nph[seg] + 3 * n), n)
                nph[seg] += 3 * n
            else:
                phs = list(range(nph[seg], nph[seg] + n))
                nph[seg] += n
            meta = (rng.randrange(4), rng.choice(["exp", "raw", "ibp"]), seg)
            # a list, or the int64 array a store's C call fills
            b.put_run(range(nxt, nxt + n), meta, np.array(phs, np.int64) if rng.random() < 0.5 else phs)
            ref.update((nxt + i, meta + (ph,)) for i, ph in enumerate(phs))
            nxt += n
        elif op < 0.35 and ref:  # a block put again under an old handle (capacity change, unpickle)
            h, seg = rng.choice(sorted(ref)), rng.randrange(3)
            e = (1, "raw", seg, nph[seg])
            nph[seg] += 1
            b[h] = e
            ref[h] = e
        elif op < 0.55 and ref:
            h = rng.choice(sorted(ref) + [nxt + 5])
            assert b.pop(h) == ref.pop(h, None)
        elif op < 0.8:
            hs = sorted(ref)
            lo = rng.randrange(len(hs) + 1)
            pick = hs[lo:lo + rng.choice([1, 3, 16, 40])] + ([nxt + 9] if rng.random() < 0.2 else [])
            want = {}
            for h in pick:
                e = ref.pop(h, None)
                if e is not None:
                    want.setdefault(e[2], []).append(e[3])
            got = b.pop_many(pick)
            assert {s: [int(x) for x in p] for s, p in got.items()} == want
        elif op < 0.85 and ref:  # lookups as a load makes them (a run, a few, any)
            hs = sorted(ref)
            lo = rng.randrange(len(hs))
            pick = hs[lo:lo + rng.choice([1, 8, 30])] + rng.sample(hs, min(3, len(hs))) * (rng.random() < 0.5)
            if rng.random() < 0.1:
                pick = [np.int64(pick[0]), float(pick[-1])]
            assert [r[:3] + (int(h) + r[3],) for h, r in zip(pick, b.runs_of(pick))] == [ref[h] for h in pick]
            with pytest.raises(KeyError):
                b.runs_of(pick + [nxt + 3])
        else:
            seg = rng.randrange(4)
            ph = rng.randrange(nph[seg] + 2) if seg < 3 else 0
            want = next((h for h, e in ref.items() if e[2] == seg and e[3] == ph), None)
            assert b.pop_pool(seg, ph) == want
            ref.pop(want, None)
        if step % 100 == 0:
            assert b.items() == sorted(ref.items()) and len(b) == len(ref)
            assert all(type(x) is int for h, e in b.items()[:50] for x in (h, e[0], e[2], e[3]))
            assert all((h in b) for h in ref) and (nxt + 1) not in b
    assert b.items() == sorted(ref.items())
    assert b._nruns <= 2 * len(b) + 64 + 1  # compacted along the way
    # what is not a handle of the table is ignored by removals and missing for lookups, as a dict's keys were
    odd = [2 ** 70] * 9 + [-5, "x", None, 1.5, (1,)]
    assert b.pop_many(odd) == {} and b.pop_many(odd[:9]) == {} and b.items() == sorted(ref.items())
    for h in odd:
        assert h not in b and b.pop(h) is None
        with pytest.raises(KeyError):
            b.runs_of([h])
    if ref:
        h = min(ref)
        assert b[float(h)] == b[np.int64(h)] == ref[h] and b.pop(float(h)) == ref.pop(h)
