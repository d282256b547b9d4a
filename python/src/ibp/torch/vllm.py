"""vLLM KV-cache offloading into a compressed host pool: an out-of-tree
OffloadingSpec (vllm/v1/kv_offload, "experimental and subject to change" in
vLLM) whose worker-side handler swaps paged blocks through
ibp.torch.KVOffloader (lossless: IBP or exponent codec per layer).

Plug-in, vLLM's documented path (no vLLM patch):

    from vllm.config import KVTransferConfig
    llm = LLM(model, kv_transfer_config=KVTransferConfig(
        kv_connector="OffloadingConnector", kv_role="kv_both",
        kv_connector_extra_config={"spec_name": "IBPOffloadingSpec",
                                   "spec_module_path": "ibp.torch.vllm",
                                   "num_cpu_blocks": 8192}))

or ibp.torch.vllm.register() (OffloadingSpecFactory.register_spec) and
only "spec_name". vLLM is imported only when it is installed: without it
this module still imports, and the manager and handler (IBPOffloadingManager,
IBPOffloadingHandler) run against local stand-ins of vLLM's LoadStoreSpec,
PrepareStoreOutput, OffloadingEvent and TransferResult with the same fields
(that is how python/tests/test_torch_vllm.py tests the protocol);
IBPOffloadingSpec itself exists only with vLLM.

Scheduler side, IBPOffloadingManager follows vLLM's OffloadingManager
contract (as its LRU manager): `num_cpu_blocks` slots; lookup() counts the
leading blocks stored and complete; prepare_load() pins blocks (ref count)
until complete_load(); touch() refreshes recency; prepare_store() skips
blocks already held, evicts least recently used unpinned complete blocks to
make room (None when it cannot), and hands out slots; complete_store()
makes them loadable (or drops them on failure); take_events() yields
stored/removed OffloadingEvents. Compressed blocks vary in size, but the
scheduler cannot see sizes (it runs apart from the workers), so capacity is
counted in slots: a slot is one offloaded block however well it
compressed, and the host bytes are what the compression saves
(`cpu_bytes_to_use` / raw block bytes * `ibp_assumed_ratio` slots, when
"num_cpu_blocks" is not given; the ratio defaults to 1, never over-commits).

Worker side, IBPOffloadingHandler serves GPU->CPU (KVOffloader.store of the
source blocks; a slot's previous blocks are freed when it is reused) and
CPU->GPU (KVOffloader.load into the destination blocks): transfer_async()
queues every layer's store or load and then waits for them all (on a GPU
the layers run on their own streams, overlapping), get_finished() reports
it. Caches on a GPU use KVOffloader(device=...) (GPU encode and decode);
with a libibp without CUDA they are staged through host tensors. The caches are per layer in
vLLM's FlashAttention layout [2, num_blocks, block_size, num_kv_heads,
head_size] (a dict name -> tensor as older vLLM passes them, or a list);
layouts with num_blocks first and the newer CanonicalKVCaches (int8 page
views) are refused with an error. One offloaded block is
`block_size_factor` GPU blocks. Checked here only against the protocol and
a stand-in vllm package (python/tests/test_torch_vllm.py), never against a
running vLLM.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch

from .._errors import NoDeviceError
from ._kv import KVOffloader

__all__ = ["IBPOffloadingManager", "IBPOffloadingHandler", "HAVE_VLLM", "register",
           "CPULoadStoreSpec", "GPULoadStoreSpec", "PrepareStoreOutput", "OffloadingEvent", "TransferResult"]

SPEC_NAME = "IBPOffloadingSpec"

try:  # vLLM's own types when it is installed, so its connector accepts ours
    from vllm.v1.kv_offload.abstract import (LoadStoreSpec, OffloadingEvent, OffloadingManager,  # noqa: F401
                                             PrepareStoreOutput)
    from vllm.v1.kv_offload.mediums import CPULoadStoreSpec, GPULoadStoreSpec
    from vllm.v1.kv_offload.spec import OffloadingSpec
    from vllm.v1.kv_offload.worker.worker import OffloadingHandler, TransferResult
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

    class LoadStoreSpec:  # vllm.v1.kv_offload.abstract.LoadStoreSpec
        @staticmethod
        def medium() -> str:
            raise NotImplementedError

    class _BlockIDs(LoadStoreSpec):
        def __init__(self, block_ids):
            self.block_ids = np.array(block_ids, dtype=np.int64)

        def __repr__(self):
            return repr(self.block_ids)

    class CPULoadStoreSpec(_BlockIDs):  # vllm.v1.kv_offload.mediums
        @staticmethod
        def medium() -> str:
            return "CPU"

    class GPULoadStoreSpec(_BlockIDs):
        def __init__(self, block_ids, group_sizes=None, block_indices=None):
            super().__init__(block_ids)
            self.group_sizes = list(group_sizes) if group_sizes is not None else [len(self.block_ids)]
            assert sum(self.group_sizes) == len(self.block_ids)
            self.block_indices = block_indices

        @staticmethod
        def medium() -> str:
            return "GPU"

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
        removed: bool  # True if blocks are removed, False if stored

    @dataclass
    class TransferResult:
        job_id: int
        success: bool
        transfer_size: Optional[int] = None
        transfer_time: Optional[float] = None
        transfer_type: Optional[tuple] = None

    OffloadingManager = object
    OffloadingHandler = object


@dataclass
class _Block:
    slot: int
    ref_cnt: int = -1  # -1: being stored; >= 0: complete, pinned by that many loads

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0


class IBPOffloadingManager(OffloadingManager):
    """Scheduler-side bookkeeping of `num_blocks` offload slots, LRU eviction
    (see the module docstring for the protocol)."""

    def __init__(self, num_blocks: int, block_size: int, enable_events: bool = False, medium: str = "CPU"):
        if num_blocks < 1:
            raise ValueError("IBPOffloadingManager: num_blocks must be >= 1, not %d" % num_blocks)
        self.num_blocks, self.block_size, self.medium = int(num_blocks), int(block_size), medium
        self.blocks: "collections.OrderedDict[object, _Block]" = collections.OrderedDict()
        self._free = list(range(self.num_blocks - 1, -1, -1))  # pop() hands out slot 0 first
        self.events: Optional[List[OffloadingEvent]] = [] if enable_events else None

    def _spec(self, blocks: Sequence[_Block]) -> CPULoadStoreSpec:
        return CPULoadStoreSpec([b.slot for b in blocks])

    def lookup(self, block_hashes: Iterable) -> int:
        hits = 0
        for h in block_hashes:
            b = self.blocks.get(h)
            if b is None or not b.is_ready:
                break
            hits += 1
        return hits

    def prepare_load(self, block_hashes: Iterable) -> CPULoadStoreSpec:
        blocks = []
        for h in block_hashes:
            b = self.blocks[h]
            if not b.is_ready:
                raise ValueError("IBPOffloadingManager.prepare_load: block %r is not stored yet" % (h,))
            b.ref_cnt += 1
            blocks.append(b)
        return self._spec(blocks)

    def touch(self, block_hashes: Iterable) -> None:
        for h in reversed(list(block_hashes)):
            if h in self.blocks:
                self.blocks.move_to_end(h)

    def complete_load(self, block_hashes: Iterable) -> None:
        for h in block_hashes:
            b = self.blocks[h]
            if b.ref_cnt <= 0:
                raise ValueError("IBPOffloadingManager.complete_load: block %r was not being loaded" % (h,))
            b.ref_cnt -= 1

    def prepare_store(self, block_hashes: Iterable) -> Optional[PrepareStoreOutput]:
        to_store = []
        for h in block_hashes:
            if h not in self.blocks and h not in to_store:
                to_store.append(h)
        need = len(to_store) - len(self._free)
        to_evict = []
        if need > 0:
            for h, b in self.blocks.items():  # least recently used first
                if b.ref_cnt == 0:
                    to_evict.append(h)
                    if len(to_evict) == need:
                        break
            else:
                return None  # not enough unpinned complete blocks: nothing changes
        for h in to_evict:
            self._free.append(self.blocks.pop(h).slot)
        if to_evict and self.events is not None:
            self.events.append(OffloadingEvent(block_hashes=to_evict, block_size=self.block_size,
                                               medium=self.medium, removed=True))
        blocks = []
        for h in to_store:
            b = _Block(self._free.pop())
            self.blocks[h] = b
            blocks.append(b)
        return PrepareStoreOutput(block_hashes_to_store=to_store, store_spec=self._spec(blocks),
                                  block_hashes_evicted=to_evict)

    def complete_store(self, block_hashes: Iterable, success: bool = True) -> None:
        stored = []
        for h in block_hashes:
            b = self.blocks.get(h)
            if b is None or b.is_ready:
                continue
            if success:
                b.ref_cnt = 0
                stored.append(h)
            else:
                self._free.append(b.slot)
                del self.blocks[h]
        if stored and self.events is not None:
            self.events.append(OffloadingEvent(block_hashes=stored, block_size=self.block_size,
                                               medium=self.medium, removed=False))

    def take_events(self) -> Iterable[OffloadingEvent]:
        if self.events is not None:
            events, self.events = self.events, []
            yield from events


def _caches_list(kv_caches) -> List[torch.Tensor]:
    """Per-layer caches from vLLM's dict (layer name -> tensor) or a list."""
    if isinstance(kv_caches, dict):
        return list(kv_caches.values())
    if hasattr(kv_caches, "tensors") and hasattr(kv_caches, "group_data_refs"):
        raise NotImplementedError(
            "IBPOffloadingHandler: vLLM's CanonicalKVCaches (int8 pages per block) are not supported yet; "
            "pass the per-layer [2, num_blocks, block_size, num_kv_heads, head_size] caches")
    return list(kv_caches)


class IBPOffloadingHandler(OffloadingHandler):
    """Worker side: GPU->CPU stores and CPU->GPU loads of offload slots
    through a KVOffloader (synchronous; see the module docstring)."""

    def __init__(self, kv_caches, block_size_factor: int = 1, offloader: Optional[KVOffloader] = None):
        self.caches = _caches_list(kv_caches)
        if not self.caches:
            raise ValueError("IBPOffloadingHandler: no KV caches")
        c0 = self.caches[0]
        for c in self.caches:
            if c.dim() != 5 or c.shape[0] != 2 or c.shape[2:] != c0.shape[2:] or c.dtype != c0.dtype:
                raise ValueError("IBPOffloadingHandler: every layer's cache must be [2, num_blocks, block_size, "
                                 "num_kv_heads, head_size] of one shape and dtype, got %s %s"
                                 % (tuple(c.shape), c.dtype))
        self.k = int(block_size_factor)
        # the pool never evicts by itself: the manager's slot count bounds it
        self._own = offloader is None
        if offloader is None and c0.device.type == "cuda":
            try:  # the device path: encode/decode on the GPU, a stream per layer
                offloader = KVOffloader(len(self.caches), tuple(c0.shape[2:]), c0.dtype, device=c0.device)
            except NoDeviceError:  # libibp without CUDA: staged through host tensors
                offloader = None
        self.offloader = offloader or KVOffloader(len(self.caches), tuple(c0.shape[2:]), c0.dtype)
        self.slots: Dict[int, List[List[int]]] = {}  # slot -> per layer, its k handles
        self._finished: List[TransferResult] = []

    def _free_slots(self, slots) -> None:
        for s in slots:
            old = self.slots.pop(int(s), None)
            if old is not None:
                for hs in old:
                    self.offloader.free(hs)

    def _store(self, gpu_ids: np.ndarray, slots: np.ndarray) -> int:
        if len(gpu_ids) != len(slots) * self.k:
            raise ValueError("IBPOffloadingHandler: %d GPU blocks for %d slots of %d blocks"
                             % (len(gpu_ids), len(slots), self.k))
        self._free_slots(slots)  # a reused slot's blocks were evicted by the manager
        ids = torch.from_numpy(np.asarray(gpu_ids, dtype=np.int64))
        per_layer = []
        raw = 0
        for layer, cache in enumerate(self.caches):
            if cache.device.type == self.offloader.device.type:  # queued on the layer's stream
                hs = self.offloader.store(layer, cache, ids)
            else:  # staged through the host
                hs = self.offloader.store(layer, cache[:, ids.to(cache.device)].cpu(), range(len(ids)))
            per_layer.append(hs)
            raw += cache[:, :1].numel() * cache.element_size() * len(ids)
        self._wait_all()
        for j, s in enumerate(slots):
            self.slots[int(s)] = [hs[j * self.k:(j + 1) * self.k] for hs in per_layer]
        return raw

    def _load(self, slots: np.ndarray, dst) -> int:
        gpu_ids = np.asarray(dst.block_ids, dtype=np.int64)
        skip = 0
        indices = getattr(dst, "block_indices", None)
        if indices is not None and self.k > 1:
            skip = int(indices[0]) % self.k  # the first GPU block may start inside an offloaded block
        raw = 0
        for layer, cache in enumerate(self.caches):
            hs = [h for s in slots for h in self.slots[int(s)][layer]][skip:skip + len(gpu_ids)]
            if len(hs) != len(gpu_ids):
                raise ValueError("IBPOffloadingHandler: %d slots hold %d blocks, %d GPU blocks asked"
                                 % (len(slots), len(hs) + skip, len(gpu_ids)))
            if cache.device.type == self.offloader.device.type:
                self.offloader.load(layer, hs, cache, gpu_ids.tolist())
            else:
                stage = torch.empty((2, len(hs)) + tuple(cache.shape[2:]), dtype=cache.dtype)
                self.offloader.load(layer, hs, stage, list(range(len(hs))))
                cache[:, torch.from_numpy(gpu_ids).to(cache.device)] = stage.to(cache.device)
            raw += cache[:, :1].numel() * cache.element_size() * len(gpu_ids)
        self._wait_all()
        return raw

    def _wait_all(self) -> None:
        """Every layer's queued work finished (the layers overlap on the
        device path); the first error is raised after all were waited for."""
        err = None
        for layer in range(len(self.caches)):
            try:
                self.offloader.wait(layer)
            except Exception as e:  # noqa: BLE001 -- finish the other layers first
                err = err or e
        if err is not None:
            raise err

    def transfer_async(self, job_id: int, spec) -> bool:
        src, dst = spec
        kind = (src.medium(), dst.medium())
        t0 = time.perf_counter()
        try:
            if kind == ("GPU", "CPU"):
                size = self._store(src.block_ids, dst.block_ids)
            elif kind == ("CPU", "GPU"):
                size = self._load(src.block_ids, dst)
            else:
                raise ValueError("IBPOffloadingHandler: no %s -> %s transfers" % kind)
            ok = True
        except Exception:  # noqa: BLE001 -- vLLM expects a failed result, not a raise
            ok, size = False, 0
        self._finished.append(TransferResult(job_id=job_id, success=ok, transfer_size=size,
                                             transfer_time=time.perf_counter() - t0, transfer_type=kind))
        return ok

    def get_finished(self) -> List[TransferResult]:
        done, self._finished = self._finished, []
        return done

    def wait(self, job_ids) -> None:
        """Transfers finish inside transfer_async: nothing to wait for."""

    def shutdown(self) -> None:
        self._free_slots(list(self.slots))
        close = getattr(self.offloader, "close", None)
        if self._own and close is not None:  # releases the host pool
            close()

    @property
    def host_bytes(self) -> int:
        """Compressed bytes held for all slots."""
        return self.offloader.used_bytes


def _block_size_factor(spec) -> int:
    g = spec.gpu_block_size
    g = g[0] if isinstance(g, (tuple, list)) else g
    return int(spec.offloaded_block_size) // int(g)


if HAVE_VLLM:

    class IBPOffloadingSpec(OffloadingSpec):
        """kv_connector_extra_config: spec_name "IBPOffloadingSpec",
        spec_module_path "ibp.torch.vllm", and "num_cpu_blocks" (slots), or
        "cpu_bytes_to_use" with "ibp_raw_block_bytes" and optionally
        "ibp_assumed_ratio" (default 1.0)."""

        def __init__(self, vllm_config, kv_cache_config=None):
            if kv_cache_config is None:  # vLLM versions whose factory passes the config alone
                super().__init__(vllm_config)
            else:
                super().__init__(vllm_config, kv_cache_config)
            extra = self.extra_config
            if "num_cpu_blocks" in extra:
                self.num_blocks = int(extra["num_cpu_blocks"])
            elif "cpu_bytes_to_use" in extra and "ibp_raw_block_bytes" in extra:
                ratio = float(extra.get("ibp_assumed_ratio", 1.0))
                self.num_blocks = int(int(extra["cpu_bytes_to_use"]) * ratio // int(extra["ibp_raw_block_bytes"]))
            else:
                raise ValueError("IBPOffloadingSpec: kv_connector_extra_config needs 'num_cpu_blocks' (or "
                                 "'cpu_bytes_to_use' and 'ibp_raw_block_bytes')")
            self._manager = None

        def get_manager(self):
            if self._manager is None:
                events = bool(getattr(self.vllm_config.kv_events_config, "enable_kv_cache_events", False)) \
                    if getattr(self.vllm_config, "kv_events_config", None) is not None else False
                self._manager = IBPOffloadingManager(self.num_blocks, self.offloaded_block_size, events)
            return self._manager

        def get_handlers(self, kv_caches, attn_backends=None):
            h = IBPOffloadingHandler(kv_caches, _block_size_factor(self))
            yield GPULoadStoreSpec, CPULoadStoreSpec, h
            yield CPULoadStoreSpec, GPULoadStoreSpec, h

    __all__.append("IBPOffloadingSpec")


def register(name: str = SPEC_NAME) -> None:
    """Registers IBPOffloadingSpec with vLLM's OffloadingSpecFactory, so
    kv_connector_extra_config needs only {"spec_name": name}. Needs vLLM."""
    if not HAVE_VLLM:
        raise ImportError("ibp.torch.vllm.register: vLLM is not installed")
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    OffloadingSpecFactory.register_spec(name, __name__, "IBPOffloadingSpec")
