"""vLLM KV-cache offloading into a compressed host pool: an out-of-tree
OffloadingSpec for vLLM 0.33.x and 0.34.x (vllm/v1/kv_offload/base.py, "experimental
and subject to change" in vLLM) whose worker keeps the offloaded blocks
compressed by ibp.torch.KVOffloader (lossless: IBP or exponent codec, per
layer, whichever stores the first blocks in fewer bytes).

Plug-in, vLLM's documented path (no vLLM patch):

    from vllm.config import KVTransferConfig
    llm = LLM(model, kv_transfer_config=KVTransferConfig(
        kv_connector="OffloadingConnector", kv_role="kv_both",
        kv_connector_extra_config={"spec_name": "IBPOffloadingSpec",
                                   "spec_module_path": "ibp.torch.vllm",
                                   "cpu_bytes_to_use": 32 << 30}))

or ibp.torch.vllm.register() (OffloadingSpecFactory.register_spec) and
only "spec_name". Capacity: "num_cpu_chunks" (offloaded chunks), or
"cpu_bytes_to_use" as for vLLM's CPUOffloadingSpec: that many bytes of raw
chunks, times "ibp_assumed_ratio" (default 1.0: never over-commits).
"blocks_per_chunk" / "block_size", "store_threshold",
"max_tracker_size" and "eviction_policy" ("lru" only) mean what they mean
to vLLM's CPU offloading.

Versions: vLLM 0.33.x and 0.34.x (0.34 hands the worker DevicePointers,
the pages' addresses, where 0.33 handed it block ids; it counts a key
toward store_threshold once per request and drops the manager's touch).
With another vLLM installed, importing this module raises
ibp.UnsupportedError naming both versions. Without vLLM the module
imports: IBPOffloadingManager and IBPOffloadingWorker run against local
stand-ins of vLLM 0.34's types with the same fields (ReqContext,
GPULoadStoreSpec, DevicePointers, CanonicalKVCaches, ...), which is how
they are tested and measured where vLLM is not installed;
IBPOffloadingSpec and register() raise ImportError ("pip install
'vllm==0.34.*'").

Scheduler side, IBPOffloadingManager keeps vLLM's OffloadingManager
contract exactly as vLLM's CPUOffloadingManager with its "lru" policy does
(python/tests/clients/test_vllm_manager.py compares the two on thousands
of random operations): chunk slots handed out fresh first, then the most
recently freed; a chunk is loadable after complete_store; prepare_load
pins it until complete_load; prepare_store evicts the least recently used
unpinned chunks not offered in the same call, or returns None and changes
nothing; recency ranks follow the request (a request's chunks rank by
token position, its head most recent, committed in on_request_finished);
failed stores free their chunks (a metadata-only removal event). The
scheduler cannot see compressed sizes, so capacity is counted in chunks.

Worker side, IBPOffloadingWorker takes vLLM's CanonicalKVCaches: per
tensor (num_blocks, page_size_bytes) int8 rows, each group's refs naming
the tensor and the bytes of a page to move (from its start). A page
holding several layers (a packed layout: fewer refs than the group has
layers) is split evenly into the config's layers; each layer's bytes
are two rows of the KV dtype (config.model.dtype: bfloat16, float16 or
float32; other dtypes raise ibp.UnsupportedError), the "K" and "V" rows of
a KVOffloader block. One GPU block is one pool entry per layer; a chunk
is `blocks_per_chunk` of them. submit_store / submit_load queue the job
on one background thread (expedited loads first) and return True;
get_finished() reports each finished job, a failed one with
success=False (nothing raised; the cause is logged); wait(job_ids) blocks
until they finished. Caches on a GPU are gathered into a stage on a side
stream that waits for the caller's stream at submission, and encoded and
decoded on the GPU by KVOffloader(device=...) (staged through the host
with a libibp without CUDA); the GPU path never ran on a GPU.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import heapq
import importlib.metadata
import importlib.util
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from .. import _errors
from .._errors import NoDeviceError
from ._kv import KVOffloader

__all__ = ["IBPOffloadingManager", "IBPOffloadingWorker", "HAVE_VLLM", "VLLM_VERSION", "SUPPORTED_VLLM",
           "register", "SPEC_NAME"]

SPEC_NAME = "IBPOffloadingSpec"
SUPPORTED_VLLM = "0.33.x and 0.34.x"
_PIP = "pip install 'vllm==0.34.*' (or 'vllm==0.33.*')"
_log = logging.getLogger(__name__)


def _installed_vllm() -> Optional[str]:
    """The installed vLLM's version, None when there is none."""
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path
        import vllm
        return str(getattr(vllm, "__version__", "unknown"))


def _minor(version: str) -> Optional[tuple]:
    m = re.match(r"(\d+)\.(\d+)(\D|$)", version)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _supported(version: str) -> bool:
    return _minor(version) in ((0, 33), (0, 34))


VLLM_VERSION = _installed_vllm()
HAVE_VLLM = VLLM_VERSION is not None
# vLLM 0.34's interface (also the stand-ins' without vLLM): the worker gets
# DevicePointers, store_threshold counts a key once per request, a stored
# chunk's event says removal_expected and names its request.
_V034 = not HAVE_VLLM or (_supported(VLLM_VERSION) and _minor(VLLM_VERSION) >= (0, 34))

if HAVE_VLLM and not _supported(VLLM_VERSION):
    raise _errors.UnsupportedError(
        "ibp.torch.vllm supports vLLM %s; vLLM %s is installed (%s)" % (SUPPORTED_VLLM, VLLM_VERSION, _PIP),
        func="ibp.torch.vllm")

if HAVE_VLLM:
    try:
        from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,  # noqa: F401
                                             CanonicalKVCacheTensor, GPULoadStoreSpec, LookupResult, Medium,
                                             OffloadingEvent, OffloadingManager, OffloadingSpec, OffloadingWorker,
                                             PrepareStoreOutput, ReqContext, RequestOffloadingContext,
                                             TransferResult)
        from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec
        from vllm.v1.metrics.cache_hit_source import CacheHitSource
        if _V034:
            from vllm.v1.kv_offload.base import DevicePointers
        else:
            DevicePointers = None
        _HOST_SOURCE = CacheHitSource.HOST
    except ImportError as e:  # an install this module cannot use: say so, never "not installed"
        raise _errors.UnsupportedError(
            "ibp.torch.vllm: vLLM %s is installed but its kv_offload interface does not import (%s: %s); "
            "supported: vLLM %s (%s)" % (VLLM_VERSION, type(e).__name__, e, SUPPORTED_VLLM, _PIP),
            func="ibp.torch.vllm") from e
else:
    # Stand-ins with the fields of vLLM 0.34's types (vllm/v1/kv_offload/base.py).
    class Medium(Enum):
        CPU = "CPU"
        STORAGE = "STORAGE"

    class LookupResult(Enum):
        MISS = 1
        HIT = 2
        HIT_PENDING = 3
        RETRY = 4

    @dataclass
    class PrepareStoreOutput:
        keys_to_store: list
        store_spec: Any
        evicted_keys: list

    @dataclass
    class OffloadingEvent:
        keys: list
        medium: Medium
        removed: bool
        locality: Any = None
        ownership: Optional[str] = None
        removal_expected: bool = False
        metadata_only: bool = False
        req_context: Any = field(default=None, repr=False, compare=False)

    @dataclass
    class RequestOffloadingContext:
        policy: str = "chunk_level"

    @dataclass
    class TransferResult:
        job_id: int
        success: bool
        transfer_size: Optional[int] = None
        transfer_time: Optional[float] = None

    class _BlockIDs:
        def __init__(self, block_ids):
            self.block_ids = np.array(block_ids, dtype=np.int32)

        def __repr__(self):
            return repr(self.block_ids)

    class CPULoadStoreSpec(_BlockIDs):
        pass

    class GPULoadStoreSpec(_BlockIDs):
        def __init__(self, block_ids, group_sizes, block_indices):
            super().__init__(block_ids)
            if sum(group_sizes) != len(self.block_ids) or len(block_indices) != len(group_sizes):
                raise _errors.invalid("GPULoadStoreSpec", "group_sizes must sum to the block count, "
                                      "one block index per group")
            self.group_sizes, self.block_indices = group_sizes, block_indices

    @dataclass
    class DevicePointers:
        """Per group, per ref of the group, per block: the block's page address and bytes."""
        ptrs: np.ndarray
        sizes: np.ndarray
        group_block_counts: tuple
        group_data_ref_counts: tuple
        block_indices: tuple

    @dataclass
    class CanonicalKVCacheTensor:
        tensor: torch.Tensor
        page_size_bytes: int

    @dataclass
    class CanonicalKVCacheRef:
        tensor_idx: int
        page_size_bytes: int
        mapping: Any = None

    @dataclass
    class CanonicalKVCaches:
        tensors: list
        group_data_refs: list

    @dataclass
    class ReqContext:
        req_id: str
        kv_transfer_params: Optional[dict] = None
        _state: dict = field(default_factory=dict, repr=False, init=False)
        _offload_key_positions: dict = field(default_factory=dict, repr=False, init=False)

        def set_state(self, val) -> None:
            self._state[type(val)] = val

        def get_state(self, cls):
            return self._state.get(cls)

        def set_offload_key_position(self, key, end_token: int) -> None:
            self._offload_key_positions[key] = end_token

        def get_offload_key_position(self, key):
            return self._offload_key_positions.get(key)

    OffloadingManager = object
    OffloadingWorker = object
    _HOST_SOURCE = "HOST"

__all__ += ["LookupResult", "Medium", "OffloadingEvent", "PrepareStoreOutput", "TransferResult", "ReqContext",
            "CPULoadStoreSpec", "GPULoadStoreSpec", "CanonicalKVCaches", "CanonicalKVCacheTensor",
            "CanonicalKVCacheRef", "DevicePointers"]


# ---- scheduler side ----------------------------------------------------------

class _Chunk:
    __slots__ = ("chunk_id", "ref_cnt", "rank")

    def __init__(self, chunk_id: int, rank):
        self.chunk_id = chunk_id
        self.ref_cnt = -1  # -1: being stored; >= 0: loadable, pinned by that many loads
        self.rank = rank  # (order, -token position): smaller is evicted first


class _Request:
    """What the manager keeps per request (in its ReqContext)."""
    __slots__ = ("owner", "generation", "rank", "groups", "seen", "finished", "counted")

    def __init__(self, owner, generation):
        self.owner, self.generation = owner, generation
        self.rank = None  # the request's shared recency order, given on first need
        self.groups: Dict[int, list] = {}  # group index -> keys, first seen first
        self.seen: set = set()
        self.finished = False
        self.counted: set = set()  # keys counted toward store_threshold (vLLM 0.34: once a request)


class IBPOffloadingManager(OffloadingManager):
    """Scheduler-side bookkeeping of `num_chunks` offloaded chunks with LRU
    eviction, operation for operation as the installed vLLM's (0.33 or 0.34;
    0.34's without vLLM) CPUOffloadingManager with cache_policy="lru" (see
    the module docstring)."""

    def __init__(self, num_chunks: int, enable_events: bool = False, store_threshold: int = 0,
                 max_tracker_size: int = 64_000):
        if num_chunks < 0:
            raise _errors.invalid("IBPOffloadingManager", "num_chunks must be >= 0, not %d" % num_chunks)
        self.medium = Medium.CPU
        self.num_chunks = int(num_chunks)
        self.events: Optional[List[OffloadingEvent]] = [] if enable_events else None
        self.store_threshold = int(store_threshold)
        self.max_tracker_size = int(max_tracker_size)
        # keys offered for storing, oldest first, with how often (store_threshold >= 2)
        self.counts: Optional[collections.OrderedDict] = \
            collections.OrderedDict() if self.store_threshold >= 2 else None
        self.stores_skipped = 0
        self._chunks: Dict[bytes, _Chunk] = {}
        self._generation = 0
        self._reset_slots()

    def _reset_slots(self):
        self._next_fresh = 0  # chunks [0, _next_fresh) were handed out at least once
        self._free: List[int] = []  # freed chunk ids; the last freed is reused first
        self._next_rank = 0
        self._evictable: set = set()  # keys with ref_cnt 0
        self._heap: list = []  # (rank, key), stale entries skipped when popped
        self._pending = 0  # chunks being stored

    # -- recency --

    def _new_rank(self):
        self._next_rank += 1
        return (self._next_rank, 0)

    def _request(self, req_context) -> _Request:
        st = req_context.get_state(_Request)
        if st is None or st.owner is not self or st.generation != self._generation:
            st = _Request(self, self._generation)
            req_context.set_state(st)
        return st

    def _request_rank(self, req_context) -> int:
        st = self._request(req_context)
        if st.rank is None:
            self._next_rank += 1
            st.rank = self._next_rank
        return st.rank

    def _set_rank(self, key, rank) -> None:
        self._chunks[key].rank = rank
        if key in self._evictable:
            heapq.heappush(self._heap, (rank, key))

    def _refresh(self, keys) -> None:
        """Newer ranks, in this order, for the keys present."""
        for key in keys:
            if key in self._chunks:
                self._set_rank(key, self._new_rank())
        self._compact()

    def _compact(self) -> None:
        if len(self._heap) > max(64, 2 * len(self._evictable)):
            self._heap = [(self._chunks[k].rank, k) for k in self._evictable]
            heapq.heapify(self._heap)

    def _set_evictable(self, key, chunk) -> None:
        self._evictable.add(key)
        heapq.heappush(self._heap, (chunk.rank, key))
        self._compact()

    def _observe(self, keys, req_context) -> None:
        """A request's accesses: keys first seen by it take the request's
        rank by token position (never an older rank than they have)."""
        st = self._request(req_context)
        new = []
        for key in keys:
            if key in st.seen:
                continue
            if st.finished:
                raise _errors.invalid("IBPOffloadingManager", "new keys after on_request_finished")
            st.groups.setdefault(int.from_bytes(key[-4:], "big"), []).append(key)
            st.seen.add(key)
            new.append(key)
        if not new:
            return
        rank = self._request_rank(req_context)
        for key in new:
            pos = req_context.get_offload_key_position(key)
            c = self._chunks.get(key)
            if pos is None or c is None or c.rank >= (rank, -pos):
                continue
            self._set_rank(key, (rank, -pos))
        self._compact()

    def _evict(self, n: int, protected) -> Optional[list]:
        """The n least recently used evictable keys outside `protected`,
        removed; None (and nothing removed) when there are fewer."""
        chosen, keep, picked = [], [], set()
        while self._heap and len(chosen) < n:
            rank, key = heapq.heappop(self._heap)
            c = self._chunks.get(key)
            if key not in self._evictable or c.rank != rank or key in picked:
                continue  # stale, or a duplicate entry
            if key in protected:
                keep.append((rank, key))
                continue
            chosen.append((rank, key))
            picked.add(key)
        for e in keep + (chosen if len(chosen) < n else []):
            heapq.heappush(self._heap, e)
        if len(chosen) < n:
            return None
        out = []
        for _, key in chosen:
            self._evictable.discard(key)
            out.append((key, self._chunks.pop(key)))
        self._compact()
        return out

    # -- chunk slots --

    def _num_free(self) -> int:
        return len(self._free) + self.num_chunks - self._next_fresh

    def _allocate(self, n: int) -> List[int]:
        fresh = min(n, self.num_chunks - self._next_fresh)
        ids = list(range(self._next_fresh, self._next_fresh + fresh))
        self._next_fresh += fresh
        ids += [self._free.pop() for _ in range(n - fresh)]
        return ids

    def _offer(self, keys, counted) -> None:
        """store_threshold: counts how often each key was offered, in a
        table of at most max_tracker_size keys (oldest dropped first, never
        one of this offer's); keys in `counted` move up without counting."""
        again = [k for k in keys if k in self.counts]
        for k in again:
            self.counts.move_to_end(k)
            if k not in counted:
                self.counts[k] += 1
        droppable = len(self.counts) - len(set(again))
        for k in keys:
            if k in self.counts:
                continue
            if len(self.counts) >= self.max_tracker_size:
                if droppable == 0:
                    continue
                self.counts.popitem(last=False)
                droppable -= 1
            self.counts[k] = 1

    # -- OffloadingManager --

    def on_new_request(self, req_context) -> RequestOffloadingContext:
        self._request(req_context)
        return RequestOffloadingContext()

    def lookup(self, key, req_context) -> LookupResult:
        c = self._chunks.get(key)
        if c is None:
            return LookupResult.MISS
        return LookupResult.HIT if c.ref_cnt >= 0 else LookupResult.HIT_PENDING

    def prepare_load(self, keys, req_context) -> CPULoadStoreSpec:
        keys = list(keys)
        ids = []
        for key in keys:
            c = self._chunks.get(key)
            if c is None or c.ref_cnt < 0:
                raise _errors.invalid("IBPOffloadingManager.prepare_load", "chunk %r is not stored" % (key,))
            if c.ref_cnt == 0:
                self._evictable.discard(key)
            c.ref_cnt += 1
            ids.append(c.chunk_id)
        self._observe(keys, req_context)
        return CPULoadStoreSpec(ids)

    def touch(self, keys, req_context) -> None:
        """vLLM 0.33 (0.34 no longer calls it)."""
        self._refresh(reversed(list(keys)))

    def complete_load(self, keys, req_context) -> None:
        for key in keys:
            c = self._chunks.get(key)
            if c is None or c.ref_cnt <= 0:
                raise _errors.invalid("IBPOffloadingManager.complete_load", "chunk %r was not being loaded"
                                      % (key,))
            c.ref_cnt -= 1
            if c.ref_cnt == 0:
                self._set_evictable(key, c)

    def prepare_store(self, keys, req_context) -> Optional[PrepareStoreOutput]:
        keys = list(dict.fromkeys(keys))  # a key offered twice is stored once
        counted = self._request(req_context).counted if _V034 else set()
        if self.counts is not None:
            self._offer(keys, counted)
        new = [k for k in keys if k not in self._chunks]
        held = {k for k in keys if k in self._chunks and self._chunks[k].ref_cnt >= 0}
        if self.counts is not None:
            below = [k for k in new if self.counts.get(k, 0) < self.store_threshold]
            new = [k for k in new if self.counts.get(k, 0) >= self.store_threshold]
            self.stores_skipped += sum(1 for k in below if k not in counted)
            if _V034:
                counted.update(keys)
        wanted = held.union(new)
        self._observe([k for k in keys if k in wanted], req_context)
        if not new:
            return PrepareStoreOutput(keys_to_store=[], store_spec=CPULoadStoreSpec([]), evicted_keys=[])
        evicted = []
        short = len(new) - self._num_free()
        if short > 0:
            got = self._evict(short, set(keys)) if short <= len(self._evictable) else None
            if got is None:
                return None
            for key, c in got:
                self._free.append(c.chunk_id)
                evicted.append(key)
            if self.events is not None:
                self.events.append(OffloadingEvent(keys=evicted, medium=self.medium, removed=True))
        ids = self._allocate(len(new))
        for key, cid in zip(new, ids):
            pos = req_context.get_offload_key_position(key)
            rank = self._new_rank() if pos is None else (self._request_rank(req_context), -pos)
            self._chunks[key] = _Chunk(cid, rank)
        self._pending += len(new)
        return PrepareStoreOutput(keys_to_store=new, store_spec=CPULoadStoreSpec(ids), evicted_keys=evicted)

    def complete_store(self, keys, req_context, success: bool = True) -> None:
        done = []
        for key in keys:
            c = self._chunks.get(key)
            if c is None or c.ref_cnt >= 0:
                continue
            self._pending -= 1
            if success:
                c.ref_cnt = 0
                self._set_evictable(key, c)
            else:
                del self._chunks[key]
                self._free.append(c.chunk_id)
            done.append(key)
        if done and self.events is not None:
            # a failed store frees its chunk without announcing an eviction
            if success and _V034:
                ev = OffloadingEvent(keys=done, medium=self.medium, removed=False, removal_expected=True,
                                     req_context=req_context)
            else:
                ev = OffloadingEvent(keys=done, medium=self.medium, removed=not success, metadata_only=not success)
            self.events.append(ev)

    def on_request_finished(self, req_context) -> None:
        st = req_context.get_state(_Request)
        if st is None or st.owner is not self or st.generation != self._generation or st.finished:
            return
        st.finished = True
        pos = req_context.get_offload_key_position
        order = []
        for g in sorted(st.groups):
            keys = st.groups[g]
            if all(pos(k) is not None for k in keys):
                keys = sorted(keys, key=pos)
            order += keys
        if all(pos(k) is not None for k in order):
            order.sort(key=pos)
        # the request's head ends up most recent, its tail least
        self._refresh(reversed(order))

    def take_events(self):
        if self.events is None:
            return
        events, self.events = self.events, []
        for ev in events:
            if ev.metadata_only:  # a key stored again meanwhile is not reported freed
                keys = [k for k in ev.keys if k not in self._chunks]
                if not keys:
                    continue
                ev = dataclasses.replace(ev, keys=keys)
            yield ev

    def reset_cache(self) -> None:
        self._chunks.clear()
        self._generation += 1
        self._reset_slots()

    # vLLM's defaults, spelled out so the manager works without vLLM too
    @property
    def lock(self):
        return contextlib.nullcontext()

    def get_load_source(self, key, req_context):
        return _HOST_SOURCE

    def on_schedule_end(self, context) -> None:
        return

    def has_pending_work(self) -> bool:
        return False

    def on_reset_flushed(self) -> None:
        return

    def get_stats(self):
        return None

    def config_info(self):
        return [{}]

    def shutdown(self) -> None:
        return


# ---- worker side -------------------------------------------------------------

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "half": torch.float16,
           "float32": torch.float32, "float": torch.float32}


def kv_dtype(name) -> torch.dtype:
    """The torch dtype of vLLM's OffloadingConfig.model.dtype (its KV cache
    dtype); ibp.UnsupportedError for what KVOffloader cannot compress."""
    if isinstance(name, torch.dtype) and name in _DTYPES.values():
        return name
    d = _DTYPES.get(str(name).removeprefix("torch."))
    if d is None:
        raise _errors.UnsupportedError(
            "ibp.torch.vllm compresses bfloat16, float16 and float32 KV caches, not %r (for fp8 and other "
            "caches use vLLM's CPUOffloadingSpec)" % (name,), func="ibp.torch.vllm")
    return d


class _Unit:
    """Bytes [offset, offset + nbytes) of every page of one canonical
    tensor: one layer, compressed as one KVOffloader layer."""
    __slots__ = ("tensor", "offset", "nbytes", "off", "layer")


class _Job:
    __slots__ = ("job_id", "store", "src", "dst", "event", "t0")


class IBPOffloadingWorker(OffloadingWorker):
    """Worker side: stores GPU blocks of vLLM's canonical KV caches into
    compressed offload chunks and loads them back (see the module docstring).

    layers_per_group: the number of layers of each KV cache group (vLLM's
    config.groups[g].layer_names), to split pages that hold several layers;
    None keeps each page whole."""

    def __init__(self, kv_caches, dtype, blocks_per_chunk: int = 1,
                 layers_per_group: Optional[Sequence[int]] = None, _host_fallback: bool = False):
        func = "IBPOffloadingWorker"
        self.dtype = kv_dtype(dtype)
        self.bpc = int(blocks_per_chunk)
        if self.bpc < 1:
            raise _errors.invalid(func, "blocks_per_chunk must be >= 1")
        self._isz = isz = torch.empty((), dtype=self.dtype).element_size()
        self._rows = []
        for t in kv_caches.tensors:
            x = t.tensor
            if x.dtype != torch.int8 or x.dim() != 2:
                x = x.view(torch.int8).view(-1, int(t.page_size_bytes))
            self._rows.append(x)
        if not self._rows:
            raise _errors.invalid(func, "no KV cache tensors")
        self.device = self._rows[0].device
        if any(x.device != self.device for x in self._rows):
            raise _errors.invalid(func, "the KV cache tensors are on different devices")
        refs = list(kv_caches.group_data_refs)
        self._refs = [list(g) for g in refs]
        if layers_per_group is not None and len(layers_per_group) != len(refs):
            raise _errors.invalid(func, "%d groups of refs, %d layer counts" % (len(refs), len(layers_per_group)))
        total_layers = sum(layers_per_group) if layers_per_group is not None else 0
        self.units: List[_Unit] = []
        by_key: Dict[tuple, int] = {}
        self._group_units: List[List[int]] = []
        for g, grefs in enumerate(refs):
            span: Dict[int, int] = {}  # tensor -> bytes moved per page (refs start at the page's start)
            for r in grefs:
                span[r.tensor_idx] = max(span.get(r.tensor_idx, 0), int(r.page_size_bytes))
            packed = layers_per_group is not None and len(grefs) < layers_per_group[g]
            units = []
            for ti, nbytes in span.items():
                if not 0 <= ti < len(self._rows) or nbytes > self._rows[ti].shape[1]:
                    raise _errors.invalid(func, "ref to tensor %d, %d bytes, outside the caches" % (ti, nbytes))
                k = total_layers if packed and total_layers > 1 and nbytes % (total_layers * 2 * isz) == 0 else 1
                if nbytes % (2 * isz):
                    raise _errors.UnsupportedError(
                        "%s: a page of %d bytes is not two rows of %s" % (func, nbytes, self.dtype), func=func)
                for j in range(k):
                    key = (ti, j * nbytes // k, nbytes // k)
                    if key not in by_key:
                        u = _Unit()
                        u.tensor, u.offset, u.nbytes = key
                        by_key[key] = len(self.units)
                        self.units.append(u)
                    units.append(by_key[key])
            self._group_units.append(units)
        # one KVOffloader per row length (its block shape), a layer per unit
        self._offloaders: Dict[int, KVOffloader] = {}
        per_len: Dict[int, List[_Unit]] = collections.defaultdict(list)
        for u in self.units:
            per_len[u.nbytes // (2 * isz)].append(u)
        for elems, us in per_len.items():
            off = self._make_offloader(len(us), elems, _host_fallback)
            self._offloaders[elems] = off
            for i, u in enumerate(us):
                u.off, u.layer = off, i
        self._on_device = next(iter(self._offloaders.values())).device.type == "cuda"
        self._stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None
        self.slots: Dict[int, Dict[int, list]] = {}  # chunk -> unit -> a handle per block of the chunk
        self._slots_lock = threading.Lock()  # the job thread changes slots; raw_bytes reads them
        self._queue: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._busy: set = set()  # job ids submitted, not finished
        self._done: List[TransferResult] = []
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.last_error: Optional[BaseException] = None

    def _make_offloader(self, n, elems, host_fallback):
        shape = (1, 1, elems)
        if host_fallback:  # TEST HOOK: the device path's C orchestration on host tensors
            return KVOffloader(n, shape, self.dtype, device="cuda", _host_fallback=True)
        if self.device.type == "cuda":
            try:
                return KVOffloader(n, shape, self.dtype, device=self.device)
            except NoDeviceError:  # libibp without CUDA: staged through host tensors
                pass
        return KVOffloader(n, shape, self.dtype)

    # -- the transfers, on the worker thread --

    def _from_pointers(self, dp, func):
        """vLLM 0.34's DevicePointers (per group, per ref, per block: the
        page's address) back to block ids, group sizes and block indices.
        Every address must be a block's start in its ref's tensor, every
        size the ref's page size, and a group's refs must name the same
        blocks: else the job fails."""
        counts = [int(n) for n in dp.group_block_counts]
        nrefs = [int(n) for n in dp.group_data_ref_counts]
        starts = [int(b) for b in dp.block_indices]
        if not len(counts) == len(nrefs) == len(starts) == len(self._refs):
            raise _errors.invalid(func, "device pointers of %d groups for %d KV cache groups"
                                  % (len(counts), len(self._refs)))
        ptrs = np.asarray(dp.ptrs).astype(np.uint64, copy=False).reshape(-1)
        sizes = np.asarray(dp.sizes).astype(np.uint64, copy=False).reshape(-1)
        if len(ptrs) != len(sizes) or len(ptrs) != sum(n * k for n, k in zip(counts, nrefs)):
            raise _errors.invalid(func, "%d device pointers and %d sizes for %d copies" % (
                len(ptrs), len(sizes), sum(n * k for n, k in zip(counts, nrefs))))
        ids, off = [], 0
        for g, (n, k) in enumerate(zip(counts, nrefs)):
            if n == 0:
                continue
            if k != len(self._refs[g]):
                raise _errors.invalid(func, "group %d: %d refs, the KV caches have %d" % (g, k, len(self._refs[g])))
            first = None
            for d, r in enumerate(self._refs[g]):
                rows = self._rows[r.tensor_idx]
                at = slice(off + d * n, off + (d + 1) * n)
                rel = ptrs[at] - np.uint64(rows.data_ptr())  # wraps (huge) below the tensor
                stride = np.uint64(rows.stride(0))  # int8 rows: bytes
                blk = rel // stride
                if np.any(rel % stride != 0) or np.any(blk >= np.uint64(rows.shape[0])) or \
                        np.any(sizes[at] != np.uint64(r.page_size_bytes)):
                    raise _errors.invalid(func, "group %d ref %d: a device pointer is not a block's page of its "
                                          "tensor (or its size not the page's)" % (g, d))
                if first is None:
                    first = blk
                elif not np.array_equal(blk, first):
                    raise _errors.invalid(func, "group %d: its refs point at different blocks" % g)
            ids.append(first.astype(np.int64))
            off += n * k
        gpu = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        return gpu, counts, starts

    def _plan(self, gpu_spec, chunk_spec, func):
        """Per group: its GPU block ids and, for each, the chunk and the
        position in it (a group may start inside its first chunk).
        gpu_spec: a GPULoadStoreSpec (vLLM 0.33) or DevicePointers (0.34)."""
        chunks = np.asarray(chunk_spec.block_ids, dtype=np.int64)
        if hasattr(gpu_spec, "ptrs"):
            gpu, sizes, starts = self._from_pointers(gpu_spec, func)
        else:
            gpu = np.asarray(gpu_spec.block_ids, dtype=np.int64)
            sizes = list(getattr(gpu_spec, "group_sizes", None) or [len(gpu)])
            starts = list(getattr(gpu_spec, "block_indices", None) or [0] * len(sizes))
        if len(sizes) != len(self._group_units) or len(starts) != len(sizes):
            raise _errors.invalid(func, "%d group sizes for %d KV cache groups" % (len(sizes), len(self._group_units)))
        plan, go, co = [], 0, 0
        for g, (n, start) in enumerate(zip(sizes, starts)):
            n = int(n)
            if n == 0:
                continue
            skip = int(start) % self.bpc
            nch = -(-(n + skip) // self.bpc)
            pos = skip + np.arange(n)
            if go + n > len(gpu) or co + nch > len(chunks):
                raise _errors.invalid(func, "the GPU blocks and chunks of the spec do not match its groups")
            plan.append((g, gpu[go:go + n], chunks[co:co + nch][pos // self.bpc], pos % self.bpc))
            go, co = go + n, co + nch
        if go != len(gpu) or co != len(chunks):
            raise _errors.invalid(func, "the GPU blocks and chunks of the spec do not match its groups")
        for _, ids, _, _ in plan:
            if len(ids) and (ids.min() < 0 or ids.max() >= self._rows[0].shape[0]):
                raise _errors.invalid(func, "GPU block ids out of range")
        return plan

    def _gather(self, u, ids):
        """[2, n, 1, 1, E] stage of the unit's bytes of GPU blocks `ids`
        (first half of each page's bytes as K, second as V)."""
        rows = self._rows[u.tensor]
        idx = torch.from_numpy(ids).to(rows.device)
        x = rows[idx, u.offset:u.offset + u.nbytes].contiguous().view(self.dtype)
        x = x.view(len(ids), 2, 1, 1, -1).transpose(0, 1).contiguous()
        return x if self._on_device else x.cpu()

    def _scatter(self, u, ids, stage):
        rows = self._rows[u.tensor]
        x = stage.transpose(0, 1).reshape(len(ids), -1).view(torch.int8).to(rows.device)
        rows[torch.from_numpy(ids).to(rows.device), u.offset:u.offset + u.nbytes] = x

    def _store(self, job) -> int:
        plan = self._plan(job.src, job.dst, "IBPOffloadingWorker.submit_store")
        new = []  # (chunk, block in it, unit, handle), installed once every unit stored
        issued, err, size = [], None, 0
        try:
            for g, ids, chunks, subs in plan:
                for ui in self._group_units[g]:
                    u = self.units[ui]
                    stage = self._gather(u, ids)
                    hs = u.off.store(u.layer, stage, range(len(ids)))
                    issued.append((u, stage))  # the stage lives until the layer's wait
                    new += [(int(c), int(s), ui, h) for c, s, h in zip(chunks, subs, hs)]
                    size += u.nbytes * len(ids)
        except BaseException as e:  # noqa: BLE001 -- the queued layers are finished first
            err = e
        err = self._wait(issued, err)
        if err is not None:
            for _, _, ui, h in new:
                self.units[ui].off.free([h])
            raise err
        with self._slots_lock:
            for c, s, ui, h in new:
                per = self.slots.setdefault(c, {}).setdefault(ui, [None] * self.bpc)
                if per[s] is not None:  # the chunk was freed and handed out again
                    self.units[ui].off.free([per[s]])
                per[s] = h
        return size

    def _load(self, job) -> int:
        plan = self._plan(job.dst, job.src, "IBPOffloadingWorker.submit_load")
        todo = []
        for g, ids, chunks, subs in plan:  # every handle is checked before anything is written
            for ui in self._group_units[g]:
                hs = []
                for c, s in zip(chunks, subs):
                    per = self.slots.get(int(c), {}).get(ui)
                    if per is None or per[s] is None:
                        raise _errors.invalid("IBPOffloadingWorker.submit_load",
                                              "chunk %d block %d was never stored" % (c, s))
                    hs.append(per[s])
                todo.append((self.units[ui], ids, hs))
        issued, err, size = [], None, 0
        dev = self.device if self._on_device else torch.device("cpu")
        try:
            for u, ids, hs in todo:
                stage = torch.empty((2, len(ids), 1, 1, u.nbytes // (2 * self._isz)), dtype=self.dtype, device=dev)
                u.off.load(u.layer, hs, stage, range(len(ids)))
                issued.append((u, stage))
        except BaseException as e:  # noqa: BLE001
            err = e
        err = self._wait(issued, err)
        if err is not None:
            raise err
        for (u, ids, _), (_, stage) in zip(todo, issued):
            self._scatter(u, ids, stage)
            size += u.nbytes * len(ids)
        return size

    @staticmethod
    def _wait(issued, err):
        """Finishes every issued layer (on a GPU they overlap); the first error."""
        for u, _ in issued:
            try:
                u.off.wait(u.layer)
            except Exception as e:  # noqa: BLE001
                err = err or e
        return err

    def _run(self, job) -> TransferResult:
        t0 = time.perf_counter()
        try:
            if self._stream is not None:  # after the caller's stream as it was at submission
                with torch.cuda.stream(self._stream):
                    self._stream.wait_event(job.event)
                    size = self._store(job) if job.store else self._load(job)
                self._stream.synchronize()
            else:
                size = self._store(job) if job.store else self._load(job)
            return TransferResult(job_id=job.job_id, success=True, transfer_size=size,
                                  transfer_time=time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 -- vLLM takes a failed result, not a raise
            self.last_error = e
            _log.error("ibp.torch.vllm: %s job %d failed: %s", "store" if job.store else "load", job.job_id, e,
                       exc_info=True)
            return TransferResult(job_id=job.job_id, success=False, transfer_size=0,
                                  transfer_time=time.perf_counter() - t0)

    def _loop(self):
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                job = self._queue.popleft()
            if job is None:
                return
            res = self._run(job)
            with self._cv:
                self._done.append(res)
                self._busy.discard(job.job_id)
                self._cv.notify_all()

    def _submit(self, job_id, store, src, dst, expedited=False) -> bool:
        job = _Job()
        job.job_id, job.store, job.src, job.dst = int(job_id), store, src, dst
        job.event = None
        if self._stream is not None:
            job.event = torch.cuda.Event()
            job.event.record(torch.cuda.current_stream(self.device))
        with self._cv:
            if self._closed:
                raise _errors.invalid("IBPOffloadingWorker", "the worker was shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ibp-kv-offload", daemon=True)
                self._thread.start()
            self._busy.add(job.job_id)
            if expedited:  # waited on within the step: ahead of the queued jobs
                self._queue.appendleft(job)
            else:
                self._queue.append(job)
            self._cv.notify_all()
        return True

    # -- OffloadingWorker --

    def submit_store(self, job_id: int, src_spec, dst_spec) -> bool:
        """Queues GPU blocks -> offload chunks; True (a failure is reported by get_finished).
        src_spec: DevicePointers (vLLM 0.34) or a GPULoadStoreSpec (0.33)."""
        return self._submit(job_id, True, src_spec, dst_spec)

    def submit_load(self, job_id: int, src_spec, dst_spec, expedited: bool = False) -> bool:
        """Queues offload chunks -> GPU blocks; True (a failure is reported by get_finished).
        dst_spec: DevicePointers (vLLM 0.34) or a GPULoadStoreSpec (0.33)."""
        return self._submit(job_id, False, src_spec, dst_spec, expedited)

    def get_finished(self) -> List[TransferResult]:
        with self._cv:
            done, self._done = self._done, []
        return done

    def wait(self, job_ids) -> None:
        ids = set(job_ids)
        with self._cv:
            self._cv.wait_for(lambda: not (ids & self._busy))

    def shutdown(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            t = self._thread
            if t is not None:
                self._queue.append(None)  # after the queued jobs
                self._cv.notify_all()
        if t is not None:
            t.join()
        with self._slots_lock:
            self.slots = {}
        for off in self._offloaders.values():
            off.close()

    @property
    def host_bytes(self) -> int:
        """Compressed bytes held for every chunk."""
        return sum(off.used_bytes for off in self._offloaders.values())

    @property
    def raw_bytes(self) -> int:
        """What those blocks take uncompressed (the units' bytes per block held)."""
        n = 0
        with self._slots_lock:
            for per in self.slots.values():
                for ui, hs in per.items():
                    n += self.units[ui].nbytes * sum(h is not None for h in hs)
        return n

    def codecs(self) -> List[Optional[str]]:
        """The codec KVOffloader picked for each layer unit (None: nothing stored yet)."""
        return [u.off.codec(u.layer) for u in self.units]


def chunk_count(extra_config, worker_kv_bytes_per_block: int, world_size: int, blocks_per_chunk: int) -> int:
    """Offloaded chunks for kv_connector_extra_config: "num_cpu_chunks", or
    "cpu_bytes_to_use" of raw chunks (as vLLM's CPUOffloadingSpec, without
    its page alignment) times "ibp_assumed_ratio" (default 1.0)."""
    func = "IBPOffloadingSpec"
    if extra_config.get("num_cpu_chunks") is not None:
        n = int(extra_config["num_cpu_chunks"])
        if n < 1:
            raise _errors.invalid(func, "num_cpu_chunks must be >= 1")
        return n
    cpu_bytes = extra_config.get("cpu_bytes_to_use")
    if not cpu_bytes:
        raise _errors.invalid(func, "kv_connector_extra_config needs 'cpu_bytes_to_use' (host bytes, as for vLLM's "
                              "CPUOffloadingSpec) or 'num_cpu_chunks'")
    ratio = float(extra_config.get("ibp_assumed_ratio", 1.0))
    if not ratio > 0 or ratio == float("inf"):
        raise _errors.invalid(func, "ibp_assumed_ratio must be a positive number")
    raw = int(worker_kv_bytes_per_block) * int(world_size) * int(blocks_per_chunk)
    if raw <= 0:  # vLLM's scheduler may know no block size: no chunks, as its CPU spec
        return 0
    return int(int(cpu_bytes) * ratio) // raw


if HAVE_VLLM:

    class IBPOffloadingSpec(OffloadingSpec):
        """vLLM 0.33/0.34 OffloadingSpec: IBPOffloadingManager on the scheduler,
        IBPOffloadingWorker on each worker (see the module docstring)."""

        def __init__(self, config):
            super().__init__(config)
            extra = self.extra_config
            policy = extra.get("eviction_policy", "lru")
            if policy != "lru" or extra.get("cache_policy_module_path"):
                raise _errors.UnsupportedError("IBPOffloadingSpec: eviction_policy %r; only 'lru' is supported"
                                               % (policy,), func="IBPOffloadingSpec")
            if config.canonical_layout:
                raise _errors.UnsupportedError("IBPOffloadingSpec: canonical_layout (vLLM's portable host layout) "
                                               "is not supported; the compressed pool is private to each worker",
                                               func="IBPOffloadingSpec")
            self.dtype = kv_dtype(config.model.dtype)
            self.num_chunks = chunk_count(extra, config.worker_kv_bytes_per_block, config.parallel.world_size,
                                          self.blocks_per_chunk)
            self._manager = None
            self._worker = None

        def get_manager(self):
            if self._manager is None:
                self._manager = IBPOffloadingManager(
                    self.num_chunks, enable_events=self.kv_events_config.enable_kv_cache_events,
                    store_threshold=int(self.extra_config.get("store_threshold", 0)),
                    max_tracker_size=int(self.extra_config.get("max_tracker_size", 64_000)))
            return self._manager

        def get_worker(self, kv_caches):
            if self._worker is None:
                self._worker = IBPOffloadingWorker(kv_caches, self.dtype, self.blocks_per_chunk,
                                                   [len(g.layer_names) for g in self.config.groups])
            return self._worker

    __all__.append("IBPOffloadingSpec")


def __getattr__(name):
    if name == "IBPOffloadingSpec":  # only without vLLM (with it, the class above)
        raise ImportError("ibp.torch.vllm.IBPOffloadingSpec needs vLLM %s, which is not installed: %s"
                          % (SUPPORTED_VLLM, _PIP))
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def register(name: str = SPEC_NAME) -> None:
    """Registers IBPOffloadingSpec with vLLM's OffloadingSpecFactory, so
    kv_connector_extra_config needs only {"spec_name": name}. Needs vLLM
    0.33.x or 0.34.x; registering a name twice raises vLLM's ValueError."""
    if not HAVE_VLLM:
        raise ImportError("ibp.torch.vllm.register needs vLLM %s, which is not installed: %s" % (SUPPORTED_VLLM, _PIP))
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    OffloadingSpecFactory.register_spec(name, __name__, "IBPOffloadingSpec")
