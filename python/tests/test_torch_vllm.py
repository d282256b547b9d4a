"""ibp.torch.vllm without vLLM: the scheduler-side manager against vLLM's
OffloadingManager protocol (as vllm/v1/kv_offload/lru_manager.py implements
it: lookup, prepare_load / complete_load pinning, touch, prepare_store with
LRU eviction or None, complete_store, take_events), and the worker-side
handler moving real MiniLM K/V blocks (datasets/sample) GPU->CPU->GPU
through KVOffloader bit-exactly, driven the way vLLM's OffloadingConnector
drives them."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import ibp.torch.vllm as iv  # noqa: E402
from conftest import REPO  # noqa: E402

BLOCK = (16, 12, 32)


def stored(ev):
    return [(list(e.block_hashes), e.removed) for e in ev]


def test_manager_lookup_store_load_protocol():
    m = iv.IBPOffloadingManager(4, block_size=16, enable_events=True)
    assert m.lookup([b"a", b"b"]) == 0
    out = m.prepare_store([b"a", b"b", b"a"])
    assert out.block_hashes_to_store == [b"a", b"b"] and out.block_hashes_evicted == []
    assert out.store_spec.medium() == "CPU" and list(out.store_spec.block_ids) == [0, 1]
    assert m.lookup([b"a", b"b"]) == 0  # not loadable before complete_store
    m.complete_store([b"a", b"b"])
    assert m.lookup([b"a", b"b", b"c"]) == 2 and m.lookup([b"b", b"a"]) == 2 and m.lookup([b"c", b"a"]) == 0
    assert stored(m.take_events()) == [([b"a", b"b"], False)]
    assert stored(m.take_events()) == []
    # already-held blocks are skipped
    out = m.prepare_store([b"a", b"c"])
    assert out.block_hashes_to_store == [b"c"] and list(out.store_spec.block_ids) == [2]
    m.complete_store([b"c"])
    spec = m.prepare_load([b"c", b"a"])
    assert list(spec.block_ids) == [2, 0]
    with pytest.raises(ValueError):
        m.complete_load([b"b"])  # b was never being loaded


def test_manager_eviction_lru_pinning_and_failure():
    m = iv.IBPOffloadingManager(3, block_size=16, enable_events=True)
    m.complete_store(m.prepare_store([1, 2, 3]).block_hashes_to_store)
    list(m.take_events())  # a generator, as vLLM's: consumed to clear
    m.touch([1])  # LRU order now 2, 3, 1
    m.prepare_load([2])  # pinned: not evictable
    out = m.prepare_store([4])
    assert out.block_hashes_evicted == [3] and list(out.store_spec.block_ids) == [2]  # 3's slot reused
    assert stored(m.take_events()) == [([3], True)]
    # 4 is being stored (not evictable), 2 pinned, only 1 can go: two new blocks do not fit
    before = dict((h, (b.slot, b.ref_cnt)) for h, b in m.blocks.items())
    assert m.prepare_store([5, 6]) is None
    assert dict((h, (b.slot, b.ref_cnt)) for h, b in m.blocks.items()) == before  # nothing changed
    m.complete_load([2])
    m.complete_store([4], success=False)  # failed store: its slot comes back, never loadable
    assert 4 not in m.blocks and m.lookup([4]) == 0
    out = m.prepare_store([5, 6])
    # one slot came back, one more is needed: 2 (unpinned now) is older than 1
    assert out.block_hashes_evicted == [2] and len(set(out.store_spec.block_ids)) == 2
    m.complete_store([5, 6])
    assert m.lookup([1]) == 1 and m.lookup([5, 6]) == 2 and m.lookup([2]) == 0
    assert stored(m.take_events()) == [([2], True), ([5, 6], False)]
    no_events = iv.IBPOffloadingManager(1, 16)
    no_events.complete_store(no_events.prepare_store([9]).block_hashes_to_store)
    assert list(no_events.take_events()) == []
    with pytest.raises(ValueError):
        iv.IBPOffloadingManager(0, 16)


@pytest.fixture(scope="module")
def kv_layers():
    bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy"))  # (6*2*128, 384)
    t = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return [t.view(6, 2, 128, 384)[layer].reshape(2, 8, *BLOCK).contiguous() for layer in range(6)]


def test_connector_round_trip_real_kv(kv_layers):
    """A request's 8 blocks offloaded in steps into 5 slots (evictions),
    then the longest stored prefix of another request loaded back into
    other GPU blocks: bit-exact, and the pool smaller than the raw blocks."""
    gpu = [kv.clone() for kv in kv_layers]  # the "GPU" cache (CPU tensors here)
    m = iv.IBPOffloadingManager(5, block_size=16, enable_events=True)
    h = iv.IBPOffloadingHandler({"layer.%d" % i: c for i, c in enumerate(gpu)})
    hashes = ["blk%d" % i for i in range(8)]
    job = 0
    for step in ((0, 1, 2), (3, 4), (5, 6, 7)):  # the connector stores as blocks fill
        out = m.prepare_store([hashes[i] for i in step])
        assert out is not None
        src = iv.GPULoadStoreSpec([int(hashes.index(x)) for x in out.block_hashes_to_store])
        assert h.transfer_async(job, (src, out.store_spec))
        res = h.get_finished()
        assert [(r.job_id, r.success, r.transfer_type) for r in res] == [(job, True, ("GPU", "CPU"))]
        assert res[0].transfer_size == len(step) * 6 * 2 * 16 * 12 * 32 * 2
        m.complete_store(out.block_hashes_to_store, success=res[0].success)
        job += 1
    ev = stored(m.take_events())
    assert ev[-2] == (["blk0", "blk1", "blk2"], True)  # LRU: the oldest three made room
    assert m.lookup(hashes) == 0 and m.lookup(hashes[3:]) == 5
    assert h.host_bytes < 5 * 6 * 2 * 16 * 12 * 32 * 2  # compressed: fewer bytes than 5 raw blocks
    # a new request sharing blocks 3..7: load the prefix into GPU blocks [7, 0, 5, 2, 4]
    dst_ids = [7, 0, 5, 2, 4]
    n = m.lookup(hashes[3:])
    spec = m.prepare_load(hashes[3:3 + n])
    for c in gpu:  # the GPU blocks were reused meanwhile
        c.zero_()
    assert h.transfer_async(job, (spec, iv.GPULoadStoreSpec(dst_ids)))
    assert h.get_finished()[0].success
    m.complete_load(hashes[3:3 + n])
    for layer, kv in enumerate(kv_layers):
        assert torch.equal(gpu[layer][:, dst_ids].view(torch.int16), kv[:, 3:8].view(torch.int16))
        assert torch.equal(gpu[layer][:, [1, 3, 6]], torch.zeros_like(gpu[layer][:, [1, 3, 6]]))
    # a slot re-stored frees its old blocks: the pool does not grow
    before = h.host_bytes
    out = m.prepare_store(["new"])
    for c, kv in zip(gpu, kv_layers):
        c.copy_(kv)
    h.transfer_async(job + 1, (iv.GPULoadStoreSpec([3]), out.store_spec))
    # blk3 (least recently used) gave its slot, refilled with the same block: same bytes, not more
    assert out.block_hashes_evicted == ["blk3"]
    assert h.get_finished()[0].success and h.host_bytes == before
    # a failed transfer reports success False instead of raising
    assert not h.transfer_async(job + 2, (iv.CPULoadStoreSpec([99]), iv.GPULoadStoreSpec([0])))
    assert h.get_finished()[0].success is False
    h._free_slots(list(h.slots))  # what shutdown() does first
    assert h.host_bytes == 0 and h.slots == {}
    h.shutdown()


def test_offloaded_blocks_of_two_gpu_blocks(kv_layers):
    """block_size_factor 2: a slot holds two GPU blocks; a load whose first
    GPU block starts inside an offloaded block skips its first half."""
    gpu = [kv.clone() for kv in kv_layers[:2]]
    m = iv.IBPOffloadingManager(4, block_size=32)
    h = iv.IBPOffloadingHandler(gpu, block_size_factor=2)
    out = m.prepare_store(["x", "y"])
    assert h.transfer_async(0, (iv.GPULoadStoreSpec([0, 1, 2, 3]), out.store_spec))
    m.complete_store(["x", "y"])
    for c in gpu:
        c.zero_()
    spec = m.prepare_load(["x", "y"])
    assert h.transfer_async(1, (spec, iv.GPULoadStoreSpec([5, 6, 7], block_indices=[1])))
    assert all(r.success for r in h.get_finished())
    for c, kv in zip(gpu, kv_layers[:2]):
        assert torch.equal(c[:, [5, 6, 7]].view(torch.int16), kv[:, [1, 2, 3]].view(torch.int16))
    with pytest.raises(ValueError):
        iv.IBPOffloadingHandler([torch.zeros(2, 4, 16, dtype=torch.bfloat16)])


@pytest.mark.skipif(iv.HAVE_VLLM, reason="vLLM is installed")
def test_without_vllm_the_spec_is_absent():
    assert not hasattr(iv, "IBPOffloadingSpec")
    with pytest.raises(ImportError):
        iv.register()


# ---- the plug-in path, against a stand-in vllm package ---------------------
# A minimal `vllm` package written here from vLLM's documented interfaces
# (vllm/v1/kv_offload: abstract.py, mediums.py, spec.py, worker/worker.py,
# factory.py), so that the module's vLLM branch (IBPOffloadingSpec, vLLM's
# base classes, the factory's spec_name/spec_module_path import) runs.

_STUB = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/kv_offload/__init__.py": "",
    "vllm/v1/kv_offload/worker/__init__.py": "",
    "vllm/v1/kv_offload/abstract.py": '''
from abc import ABC, abstractmethod
from dataclasses import dataclass
class LoadStoreSpec(ABC):
    @staticmethod
    @abstractmethod
    def medium() -> str: ...
@dataclass
class PrepareStoreOutput:
    block_hashes_to_store: list
    store_spec: LoadStoreSpec
    block_hashes_evicted: list
@dataclass
class OffloadingEvent:
    block_hashes: list
    block_size: int
    medium: str
    removed: bool
class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, block_hashes): ...
    @abstractmethod
    def prepare_load(self, block_hashes): ...
    def touch(self, block_hashes): return
    def complete_load(self, block_hashes): return
    @abstractmethod
    def prepare_store(self, block_hashes): ...
    def complete_store(self, block_hashes, success=True): return
    def take_events(self): return ()
''',
    "vllm/v1/kv_offload/mediums.py": '''
import numpy as np
from vllm.v1.kv_offload.abstract import LoadStoreSpec
class BlockIDsLoadStoreSpec(LoadStoreSpec):
    def __init__(self, block_ids):
        self.block_ids = np.array(block_ids, dtype=np.int64)
class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    def __init__(self, block_ids, group_sizes, block_indices=None):
        super().__init__(block_ids)
        assert sum(group_sizes) == len(block_ids)
        self.group_sizes, self.block_indices = group_sizes, block_indices
    @staticmethod
    def medium(): return "GPU"
class CPULoadStoreSpec(BlockIDsLoadStoreSpec):
    @staticmethod
    def medium(): return "CPU"
''',
    "vllm/v1/kv_offload/spec.py": '''
from abc import ABC, abstractmethod
from math import lcm
class OffloadingSpec(ABC):
    def __init__(self, vllm_config, kv_cache_config):
        self.vllm_config, self.kv_cache_config = vllm_config, kv_cache_config
        self.extra_config = vllm_config.kv_transfer_config.kv_connector_extra_config
        self.gpu_block_size = tuple(g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups)
        self.offloaded_block_size = int(self.extra_config.get("block_size", lcm(*self.gpu_block_size)))
    @abstractmethod
    def get_manager(self): ...
    @abstractmethod
    def get_handlers(self, kv_caches): ...
''',
    "vllm/v1/kv_offload/worker/worker.py": '''
from abc import ABC, abstractmethod
from dataclasses import dataclass
@dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: int = None
    transfer_time: float = None
    transfer_type: tuple = None
class OffloadingHandler(ABC):
    @abstractmethod
    def transfer_async(self, job_id, spec): ...
    @abstractmethod
    def get_finished(self): ...
    @abstractmethod
    def wait(self, job_ids): ...
    def shutdown(self): pass
class OffloadingWorker:
    def __init__(self):
        self.handlers, self.by_type = set(), {}
    def register_handler(self, src_cls, dst_cls, handler):
        t = (src_cls.medium(), dst_cls.medium())
        assert t not in self.by_type
        self.handlers.add(handler)
        self.by_type[t] = handler
    def transfer_async(self, job_id, spec):
        return self.by_type[(spec[0].medium(), spec[1].medium())].transfer_async(job_id, spec)
    def get_finished(self):
        return [r for h in self.handlers for r in h.get_finished()]
''',
    "vllm/v1/kv_offload/factory.py": '''
import importlib
from vllm.v1.kv_offload.spec import OffloadingSpec
class OffloadingSpecFactory:
    _registry = {}
    @classmethod
    def register_spec(cls, name, module_path, class_name):
        if name in cls._registry:
            raise ValueError(name)
        cls._registry[name] = lambda: getattr(importlib.import_module(module_path), class_name)
    @classmethod
    def create_spec(cls, config, kv_cache_config):
        extra = config.kv_transfer_config.kv_connector_extra_config
        name = extra.get("spec_name", "CPUOffloadingSpec")
        if name in cls._registry:
            spec_cls = cls._registry[name]()
        else:
            spec_cls = getattr(importlib.import_module(extra["spec_module_path"]), name)
        assert issubclass(spec_cls, OffloadingSpec)
        return spec_cls(config, kv_cache_config)
''',
}

_DRIVER = '''
import os, sys
from types import SimpleNamespace as NS
import numpy as np, torch
from vllm.v1.kv_offload.factory import OffloadingSpecFactory
from vllm.v1.kv_offload.mediums import CPULoadStoreSpec, GPULoadStoreSpec
from vllm.v1.kv_offload.worker.worker import OffloadingWorker
import ibp.torch.vllm as iv
assert iv.HAVE_VLLM
bits = np.load(sys.argv[1])
kv = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).view(6, 2, 128, 384)
caches = {"l%d" % i: kv[i].reshape(2, 8, 16, 12, 32).clone() for i in range(6)}
orig = {k: v.clone() for k, v in caches.items()}
for extra in ({"spec_name": "IBPOffloadingSpec", "spec_module_path": "ibp.torch.vllm", "num_cpu_blocks": 4},
              {"spec_name": "IBPOffloadingSpec", "cpu_bytes_to_use": 4 * 73728, "ibp_raw_block_bytes": 73728}):
    cfg = NS(kv_transfer_config=NS(kv_connector_extra_config=extra), kv_events_config=None)
    kvc = NS(kv_cache_groups=[NS(kv_cache_spec=NS(block_size=16))])
    if "spec_module_path" not in extra:
        iv.register()
    spec = OffloadingSpecFactory.create_spec(cfg, kvc)
    assert type(spec).__name__ == "IBPOffloadingSpec" and spec.num_blocks == 4
    m = spec.get_manager()
    w = OffloadingWorker()
    for src, dst, h in spec.get_handlers(caches):
        w.register_handler(src, dst, h)
    out = m.prepare_store(["a", "b", "c"])
    assert w.transfer_async(1, (GPULoadStoreSpec([2, 5, 7], group_sizes=[3]), out.store_spec))
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_store(out.block_hashes_to_store)
    assert m.lookup(["a", "b", "c", "d"]) == 3
    for c in caches.values():
        c.zero_()
    assert w.transfer_async(2, (m.prepare_load(["c", "a"]), GPULoadStoreSpec([0, 1], group_sizes=[2])))
    assert [r.success for r in w.get_finished()] == [True]
    for k in caches:
        assert torch.equal(caches[k][:, [0, 1]].view(torch.int16), orig[k][:, [7, 2]].view(torch.int16))
        caches[k].copy_(orig[k])
print("plug-in ok")
'''


def test_plugin_path_with_a_standin_vllm(tmp_path):
    import subprocess
    import sys
    for rel, text in _STUB.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "driver.py").write_text(_DRIVER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path)] + [x for x in sys.path if x])
    r = subprocess.run([sys.executable, str(tmp_path / "driver.py"),
                        os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "plug-in ok" in r.stdout, r.stdout + r.stderr
