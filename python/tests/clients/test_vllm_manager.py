"""IBPOffloadingManager against the installed vLLM's (0.34, or 0.33) own
CPUOffloadingManager (its "lru" policy), operation for operation: thousands
of random scheduler calls (requests sharing prefixes in two KV cache groups,
token positions, lookups, prepare/complete of loads and stores, failed
stores, touches where vLLM still has them (0.33), request ends, resets)
under a small capacity, so that evictions are frequent. Every result is compared: lookup results, the chunk ids of load
and store specs, the keys stored and evicted (or None), and the events."""

import random

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: tools/test-clients.sh runs this file in its "
                    "environment (~/.cache/ibp/clients/vllm)")
from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key  # noqa: E402
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager  # noqa: E402

import ibp  # noqa: E402
import ibp.torch.vllm as iv  # noqa: E402


def spec_ids(spec):
    return [int(x) for x in spec.block_ids]


def store_out(out):
    if out is None:
        return None
    return (list(out.keys_to_store), spec_ids(out.store_spec), list(out.evicted_keys))


def events(m):
    """Every field; the request a stored chunk's event names (vLLM 0.34) by its id."""
    return [(list(e.keys), e.medium.value, e.removed, e.metadata_only, e.removal_expected,
             getattr(getattr(e, "req_context", None), "req_id", None)) for e in m.take_events()]


TOUCH = 4 if hasattr(CPUOffloadingManager, "touch") else 0  # vLLM 0.34 has none


class Driver:
    """Random scheduler traffic, applied to both managers."""

    def __init__(self, seed, num_chunks, **kw):
        self.rng = random.Random(seed)
        self.ref = CPUOffloadingManager(num_chunks=num_chunks, cache_policy="lru", enable_events=True, **kw)
        self.ibp = iv.IBPOffloadingManager(num_chunks, enable_events=True, **kw)
        self.prompts = [[]]  # block hashes; later prompts extend earlier ones (shared prefixes)
        self.active = []  # (ReqContext, prompt)
        self.stores = []  # (keys, ReqContext) prepared, not completed
        self.loads = []
        self.n = 0
        self.counts = {}

    def both(self, name, *args, **kw):
        a = getattr(self.ref, name)(*args, **kw)
        b = getattr(self.ibp, name)(*args, **kw)
        return a, b

    def keys(self, prompt, group):
        return [make_offload_key(h, group) for h in prompt]

    def new_request(self):
        r = self.rng
        base = r.choice(self.prompts)
        prompt = base[:r.randint(0, len(base))] + [r.randbytes(8) for _ in range(r.randint(0, 6))]
        if not prompt:
            prompt = [r.randbytes(8)]
        self.prompts.append(prompt)
        req = ReqContext("req%d" % self.n)
        for g in (0, 1):  # the scheduler records positions; here sometimes not, per group
            with_pos = r.random() < 0.8
            for i, k in enumerate(self.keys(prompt, g)):
                if with_pos:
                    req.set_offload_key_position(k, (i + 1) * 16)
        a, b = self.both("on_new_request", req)
        assert a.policy.value == "chunk_level"
        self.active.append((req, prompt))

    def step(self):
        r = self.rng
        self.n += 1
        if not self.active or r.random() < 0.08:
            self.new_request()
            return "new"
        req, prompt = r.choice(self.active)
        g = r.randint(0, 1)
        ks = self.keys(prompt, g)
        op = r.choices(["lookup", "store", "cstore", "load", "cload", "touch", "finish", "events", "reset"],
                       [25, 25, 20, 10, 10, TOUCH, 4, 3, 0.15])[0]
        self.counts[op] = self.counts.get(op, 0) + 1
        if op == "lookup":
            for k in ks + [make_offload_key(r.choice(self.prompts[-1] or [b"x" * 8]), 1 - g)]:
                a, b = self.both("lookup", k, req)
                assert a == b, (self.n, op)
                if a != LookupResult.HIT:
                    break  # the scheduler looks up a prefix
        elif op == "store":
            lo = r.randint(0, len(ks) - 1)
            sub = ks[lo:lo + r.randint(1, 4)]
            a, b = self.both("prepare_store", sub, req)
            assert store_out(a) == store_out(b), (self.n, op, store_out(a), store_out(b))
            if a is not None and a.keys_to_store:
                self.stores.append((list(a.keys_to_store), req))
        elif op == "cstore" and self.stores:
            keys, sreq = self.stores.pop(r.randrange(len(self.stores)))
            self.both("complete_store", keys, sreq, success=r.random() < 0.85)
        elif op == "load":
            hit = []
            for k in ks:
                if self.ref.lookup(k, req) != LookupResult.HIT:
                    break
                hit.append(k)
            if hit:
                a, b = self.both("prepare_load", hit, req)
                assert spec_ids(a) == spec_ids(b), (self.n, op)
                self.loads.append((hit, req))
        elif op == "cload" and self.loads:
            keys, lreq = self.loads.pop(r.randrange(len(self.loads)))
            self.both("complete_load", keys, lreq)
        elif op == "touch":
            self.both("touch", r.sample(ks, r.randint(1, len(ks))), req)
        elif op == "finish":
            self.both("on_request_finished", req)
            self.active.remove((req, prompt))
        elif op == "events":
            assert events(self.ref) == events(self.ibp), self.n
        elif op == "reset":
            # the scheduler completes no job prepared before a reset
            self.both("reset_cache")
            self.stores, self.loads = [], []
            self.active = [(q, p) for q, p in self.active]
        return op

    def check_all(self):
        req = ReqContext("probe")
        for p in self.prompts:
            for g in (0, 1):
                for k in self.keys(p, g):
                    assert self.ref.lookup(k, req) == self.ibp.lookup(k, req), self.n
        assert events(self.ref) == events(self.ibp), self.n


@pytest.mark.parametrize("seed,num_chunks,kw", [
    (1, 8, {}), (2, 12, {}), (3, 5, {}), (4, 24, {}),
    (5, 10, {"store_threshold": 2, "max_tracker_size": 12}),
    (6, 16, {"store_threshold": 3, "max_tracker_size": 64}),
])
def test_manager_agrees_with_vllm_lru(seed, num_chunks, kw):
    d = Driver(seed, num_chunks, **kw)
    for i in range(4000):
        d.step()
        if i % 200 == 0:
            d.check_all()
    d.check_all()
    # the traffic did what it is for: full caches, evictions, failures, pins
    assert d.counts.get("store", 0) > 500 and d.counts.get("load", 0) > 100 and d.counts.get("reset", 0) >= 1, d.counts
    assert len(d.prompts) > 100
    assert d.ref._num_evictable_cache_chunks == len(d.ibp._evictable)
    assert d.ref._get_num_free_chunks() == d.ibp._num_free()


def test_evictions_happened_and_agree():
    """One run whose evictions and store refusals are counted, so the
    comparison above is known to cover them."""
    d = Driver(7, 6)
    evicted = refused = 0
    orig = d.both

    def both(name, *a, **kw):
        nonlocal evicted, refused
        x, y = orig(name, *a, **kw)
        if name == "prepare_store":
            if x is None:
                refused += 1
            else:
                evicted += len(x.evicted_keys)
        return x, y
    d.both = both
    for _ in range(3000):
        d.step()
    d.check_all()
    assert evicted > 100 and refused > 5, (evicted, refused)


def test_invalid_calls_raise_ibp_errors():
    m = iv.IBPOffloadingManager(2)
    req = ReqContext("r")
    k = make_offload_key(b"12345678", 0)
    with pytest.raises(ibp.InvalidArgumentError):
        m.prepare_load([k], req)  # never stored
    m.prepare_store([k], req)
    with pytest.raises(ibp.InvalidArgumentError):
        m.prepare_load([k], req)  # not complete yet
    m.complete_store([k], req)
    with pytest.raises(ibp.InvalidArgumentError):
        m.complete_load([k], req)  # not being loaded
