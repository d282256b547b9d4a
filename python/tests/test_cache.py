"""ibp.Cache and ibp.SlabPool: the slab cache's rows equal the store's on
every policy, hits and evictions counted, the evicted ids exactly the rows
that left; the pool's blocks round-trip, capacity holds, victims are
reported through on_evict, freed slots are reused, errors raise."""

import numpy as np
import pytest

import ibp
from conftest import make_rows


@pytest.fixture(scope="module")
def store():
    rng = np.random.default_rng(7)
    rows = make_rows(rng, 250, (96,), "float32")
    s = ibp.Store.from_array(rows)
    yield s, rows
    s.close()


@pytest.mark.parametrize("policy", ["clock", "s3fifo", "lru"])
def test_cache_rows_hits_evicted(store, policy):
    s, rows = store
    c = ibp.Cache(25 * s.row_bytes, store=s, policy=policy)
    rng = np.random.default_rng(1)
    reported = 0
    for b in range(30):
        ids = rng.integers(0, 40 if b % 2 else 250, size=int(rng.integers(1, 120)))
        before = _resident(c, s)
        got, ev = c.gather(s, ids, return_evicted=True)
        assert np.array_equal(got, rows[ids])
        after = _resident(c, s)
        assert len(set(ev.tolist())) == len(ev)
        assert set(ev.tolist()) <= before and not (set(ev.tolist()) & after)
        assert before - set(ev.tolist()) <= after  # nothing left unreported
        reported += len(ev)
    st = c.stats()
    assert st["hits"] > 0 and st["evictions"] == reported > 0
    assert st["slot_bytes_used"] <= st["capacity_bytes"]
    assert sum(k["used"] for k in c.class_stats()) == st["rows_resident"]
    c.close()
    assert c.closed


def _resident(c, s):
    """Ids resident now (NO_ADMIT gathers of one id, counted by hits)."""
    res = set()
    for i in range(s.nrows):
        h0 = c.stats()["hits"]
        c.gather(s, [i], admit=False)
        if c.stats()["hits"] > h0:
            res.add(i)
    return res


def test_cache_torch_ids_and_limits(store):
    torch = pytest.importorskip("torch")
    s, rows = store
    c = ibp.Cache(30 * s.row_bytes, store=s, policy="clock", uncompressed=True)
    ids = torch.arange(0, 30)
    out, ev = c.gather(s, ids, return_evicted=True)
    assert isinstance(out, torch.Tensor) and torch.equal(out, torch.from_numpy(rows[:30]))
    assert isinstance(ev, torch.Tensor) and ev.numel() == 0
    _, ev = c.gather(s, np.arange(100, 180), return_evicted=True, max_evict=5)
    assert len(ev) == 5 and all(0 <= e < 30 for e in ev.tolist())
    assert c.prefetch(s, np.arange(210, 220), return_evicted=True, max_evict=0).size == 0
    c.invalidate([10, 11, 12])
    c.invalidate([])  # nothing (not everything)
    st = c.stats()
    assert st["invalidations"] >= 1
    c.invalidate()
    assert c.stats()["rows_resident"] == 0
    scores = np.zeros(s.nrows, np.float32)
    scores[200:210] = 1
    c2 = ibp.Cache(10 * s.row_bytes, store=s, policy="static", uncompressed=True)
    c2.preload(s, scores)
    assert c2.stats()["rows_resident"] == 10
    c2.gather(s, np.arange(200, 210), admit=False)
    assert c2.stats()["hits"] == 10
    with pytest.raises(ibp.OutOfRangeError):
        c.gather(s, [s.nrows])
    with pytest.raises(ValueError):
        ibp.Cache(1000, store=s, policy="fifo")
    with pytest.raises(ValueError):
        ibp.Cache(0, 100)
    with pytest.raises(ValueError):
        c.gather(s, [1], max_evict=3)  # needs return_evicted
    other = ibp.Store.from_array(rows[:10])
    with pytest.raises(ibp.InvalidArgumentError):
        c.gather(other, [1])  # bound to `s` (the out-of-range gather bound it) until emptied
    other.close()


def test_pool_round_trip_capacity_eviction():
    evicted = []
    p = ibp.SlabPool(64 * 1024, 4096, policy="clock", on_evict=evicted.append)
    assert p.stats()["pinned_memory"] in (0, 1) and isinstance(p.pinned, bool)
    rng = np.random.default_rng(3)
    blocks = {}
    for i in range(300):
        data = rng.integers(0, 256, size=int(rng.integers(0, 4097)), dtype=np.uint8)
        h = p.put(data)
        assert h == i
        blocks[h] = data
        for e in evicted:
            blocks.pop(e, None)
        st = p.stats()
        assert st["slot_bytes_used"] <= 64 * 1024 and st["bytes"] <= st["slot_bytes_used"]
    assert len(evicted) == p.stats()["evictions"] > 0 and len(set(evicted)) == len(evicted)
    assert len(p) == len(blocks)
    for h, data in blocks.items():
        assert np.array_equal(p.get(h), data) and p.size(h) == len(data) and h in p
    for h in evicted:
        assert h not in p
        with pytest.raises(KeyError):
            p.get(h)
    with pytest.raises(ibp.OutOfRangeError):
        p.remove(evicted[0])
    # bytes-like and arrays of other dtypes are stored as their bytes
    h = p.put(b"hello")
    assert bytes(p.get(h)) == b"hello"
    a = np.arange(10, dtype=np.float32)
    h = p.put(a)
    assert np.array_equal(p.get(h).view(np.float32), a)
    out = np.zeros(100, np.uint8)
    assert p.get(h, out=out).size == 40
    with pytest.raises(ValueError):
        p.put(np.zeros(4097, np.uint8))
    p.close()


def test_pool_freed_slots_reused_and_callback_may_use_pool():
    p = ibp.SlabPool(16 * 1024, 1024, policy="s3fifo", pinned=False)
    assert not p.pinned
    hs = [p.put(np.full(1000, i, np.uint8)) for i in range(16)]
    assert p.stats()["evictions"] == 0 and len(p) == 16
    p.remove(hs[3])
    p.put(np.full(1000, 99, np.uint8))
    assert p.stats()["evictions"] == 0  # the freed slot took it
    seen = []

    def on_evict(h):
        seen.append(h)
        assert h not in p  # called after the pool's lock is released: the pool may be used

    p.on_evict = on_evict
    for i in range(5):
        p.put(np.full(1000, 200 + i, np.uint8))
    assert len(seen) == 5 == p.stats()["evictions"]
    p.close()
    with pytest.raises(ValueError):
        ibp.SlabPool(100, 1024)  # below one slot of the largest block
    with pytest.raises(ValueError):
        ibp.SlabPool(1 << 16, 0)


def test_pool_remove_many():
    p = ibp.SlabPool(16 * 1024, 1024, policy="lru", pinned=False)
    hs = [p.put(np.full(900, i, np.uint8)) for i in range(8)]
    p.remove_many(np.array(hs[1:4]))
    assert len(p) == 5 and all(h not in p for h in hs[1:4]) and p.stats()["frees"] == 3
    with pytest.raises(KeyError, match="no block 77"):
        p.remove_many([hs[0], 77, hs[5]])  # the others are freed all the same
    assert len(p) == 3 and hs[0] not in p and hs[5] not in p
    assert p.get(hs[4])[0] == 4
    p.remove_many([])
    p.close()


def test_pool_free_bytes_is_the_stats():
    """SlabPool._free_bytes (what a KVOffloader store asks of every
    segment) is capacity_bytes - slot_bytes_used of stats(), as blocks of
    several size classes come and go."""
    p = ibp.SlabPool(1 << 20, 4096, policy="static", class_step=256, pinned=False)

    def free_bytes():
        st = p.stats()
        return st["capacity_bytes"] - st["slot_bytes_used"]

    assert p._free_bytes() == free_bytes() == 1 << 20
    hs = [p.put(np.zeros(n, np.uint8)) for n in (100, 4096, 700, 2000, 300)]
    assert p._free_bytes() == free_bytes() <= (1 << 20) - 7196
    p.remove_many(hs[1:3])
    assert p._free_bytes() == free_bytes()
    p.close()
    with pytest.raises(ibp.ClosedError):
        p._free_bytes()


def test_pool_static_full_raises():
    p = ibp.SlabPool(4096, 1024, policy="static")
    for i in range(4):
        p.put(np.zeros(1024, np.uint8))
    with pytest.raises(ibp.NoMemoryError):
        p.put(np.zeros(1024, np.uint8))
    assert p.stats()["failed"] == 1
    p.close()


def test_device_cache_without_gpu(store):
    """ibp.Cache(device=...) is a GPU cache: without a GPU it raises
    ibp.NoDeviceError naming the cause; a bad device is refused."""
    s, _ = store
    if ibp.device_count():
        pytest.skip("a usable CUDA device is present")
    with pytest.raises(ibp.NoDeviceError, match="no usable GPU"):
        ibp.Cache(64 * s.row_bytes, store=s, device=0)
    for bad in (-1, "cuda", 1.5, True):
        with pytest.raises(ibp.InvalidArgumentError):
            ibp.Cache(64 * s.row_bytes, store=s, device=bad)


def test_device_cache_gather_gpu(store):
    """CudaStore.gather(ids, cache=...) equals Store.gather, hits counted."""
    if not ibp.device_count():
        pytest.skip("no usable CUDA device (or a CPU-only libibp): the GPU cache is tested on a GPU only")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    s, rows = store
    rng = np.random.default_rng(3)
    with s.to_cuda() as cs:
        c = ibp.Cache(40 * s.row_bytes, store=s, device=0)
        for _ in range(6):
            ids = rng.integers(0, 60, size=100)
            got = cs.gather(torch.as_tensor(ids), cache=c).cpu().numpy()
            assert np.array_equal(got.view(np.uint8), s.gather(ids).view(np.uint8))
        st = c.stats()
        assert st["hits"] > 0 and st["insertions"] > 0
        with pytest.raises(ibp.OutOfRangeError):
            cs.gather(torch.as_tensor([0, 250]), cache=c)
        c.close()
