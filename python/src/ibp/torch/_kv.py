"""LLM KV-cache offload, CPU path: compress paged KV blocks into a host pool
and restore them, losslessly (issue 13, section 3).

    off = ibp.torch.KVOffloader(num_layers, (block_size, num_kv_heads, head_size), torch.bfloat16,
                                capacity_bytes=1 << 30, on_evict=print)
    off.calibrate(layer, kv)                    # kv: [2, n, block_size, heads, head_size]
    handles = off.store(layer, kv_cache, block_ids)
    off.load(layer, handles, kv_cache, dst_block_ids)   # bit-exact

Layout as vLLM's per-layer cache: [2 (K, V), num_blocks, block_size,
num_kv_heads, head_size]. A block (its K and V) is one entry of the pool.
calibrate() trains the layer's IBP codec on the given blocks and keeps
whichever of IBP, the exponent codec and no codec gives the fewest bytes
on them (bf16 KV often compresses better by exponent).

The compressed blocks live in an ibp.SlabPool: the slab cache's size-class
allocator over pinned host memory (ordinary host memory without CUDA), so
variable-size blocks share one byte budget with little waste, freed slots
are reused, and when a store does not fit, the pool's LRU policy evicts
victims of the block's size class (or a whole slab of another class,
least recently used first): on_evict(handle) is called for each, and its
handle becomes invalid (load raises KeyError). capacity_bytes=None keeps
everything: the offloader adds pool segments as they fill. Setting
capacity_bytes later moves the blocks into a pool of the new size (oldest
first; the policy evicts what no longer fits).

Not here yet (see the issue): the GPU path (encode on swap-out, decode on
swap-in, a stream per layer; `device` must be None or "cpu") and the vLLM
OffloadingSpec. wait(layer) is a no-op: CPU calls finish before returning.
"""

from __future__ import annotations

import threading
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from .. import _errors, exp as _exp
from .._cache import SlabPool
from .._codec import Encoded, train

__all__ = ["KVOffloader"]

_DTYPES = {torch.bfloat16: np.uint16, torch.float16: np.float16, torch.float32: np.float32}
_KINDS = ("ibp", "exp", "raw")
_HDR = 12  # ibp blocks: u32 len0, u32 len1, u8 flag0, u8 flag1, u8 cluster0, u8 cluster1
_SEGMENT = 64 << 20  # pool segments when capacity_bytes is None


class KVOffloader:
    def __init__(self, num_layers: int, block_shape: Sequence[int], dtype, capacity_bytes: Optional[int] = None,
                 device=None, on_evict: Optional[Callable[[int], None]] = None):
        func = "KVOffloader"
        if device is not None and torch.device(device).type != "cpu":
            raise _errors.UnsupportedError(
                "%s: device %s: only the CPU path exists so far (GPU encode/decode through ibp.CudaStore "
                "kernels is not written)" % (func, device), func=func, status=6)
        if dtype not in _DTYPES:
            raise _errors.invalid(func, "dtype must be bfloat16, float16 or float32, not %s" % (dtype,))
        if len(block_shape) != 3 or min(block_shape) < 1:
            raise _errors.invalid(func, "block_shape is (block_size, num_kv_heads, head_size)")
        self.num_layers, self.block_shape, self.dtype = int(num_layers), tuple(int(x) for x in block_shape), dtype
        self.block_elems = int(np.prod(self.block_shape))
        self.on_evict = on_evict
        self._codec = [None] * self.num_layers
        self._kind = [None] * self.num_layers
        # Largest block: K and V raw (an encoded row is at most its raw size) plus
        # the exponent codec's headers; anything larger is stored raw.
        self._row_bytes = self.block_elems * np.dtype(_DTYPES[dtype]).itemsize
        self.max_block_bytes = 2 * self._row_bytes + 4096
        self._entries = {}  # handle -> (layer, kind, segment, pool handle)
        self._by_pool = {}  # (segment, pool handle) -> handle
        self._segments = []  # SlabPool, one unless capacity_bytes is None
        self._next = 0
        self._raw = [0] * self.num_layers
        self._packed = [0] * self.num_layers
        self._lock = threading.RLock()
        self._capacity = None
        self.capacity_bytes = capacity_bytes

    # ---- the pool ------------------------------------------------------------

    @property
    def capacity_bytes(self) -> Optional[int]:
        """Byte budget of the compressed blocks (None: unbounded)."""
        return self._capacity

    @capacity_bytes.setter
    def capacity_bytes(self, cap) -> None:
        if cap is not None and (isinstance(cap, bool) or int(cap) < 1):
            raise _errors.invalid("KVOffloader", "capacity_bytes must be a positive integer or None")
        with self._lock:
            old, old_cap = self._segments, self._capacity
            self._capacity = None if cap is None else int(cap)
            self._segments = []
            try:
                if self._capacity is not None:
                    self._segments.append(self._new_pool(self._capacity))
            except BaseException:
                self._segments, self._capacity = old, old_cap
                raise
            self._by_pool = {}
            # Move the blocks over, oldest first; what no longer fits is evicted.
            moved = sorted(self._entries.items())
            self._entries = {}
            for h, (layer, kind, seg, ph) in moved:
                data = old[seg].get(ph)
                try:
                    self._put(h, layer, kind, data)
                except _errors.NoMemoryError:
                    if self.on_evict is not None:
                        self.on_evict(h)
            for p in old:
                p.close()

    def _new_pool(self, cap):
        maxb = min(self.max_block_bytes, cap // 16 * 16)
        if maxb < 16:
            raise _errors.invalid("KVOffloader", "capacity_bytes %d is below one block" % cap)
        seg = len(self._segments)
        return SlabPool(cap, maxb, policy="lru" if self._capacity is not None else "static",
                        on_evict=lambda ph, seg=seg: self._pool_evicted(seg, ph))

    def _pool_evicted(self, seg, ph):
        h = self._by_pool.pop((seg, ph), None)
        if h is not None:
            del self._entries[h]
            if self.on_evict is not None:
                self.on_evict(h)

    def _put(self, h, layer, kind, data):
        """Stores one block's bytes under handle h (under the lock)."""
        if self._capacity is not None:
            pool = self._segments[0]
            if data.nbytes > pool.max_block_bytes:
                raise _errors.NoMemoryError("KVOffloader: a block of %d bytes exceeds the capacity %d"
                                            % (data.nbytes, self._capacity), func="KVOffloader.store", status=2)
            seg, ph = 0, pool.put(data)
        else:
            ph = None
            if self._segments:
                try:
                    seg, ph = len(self._segments) - 1, self._segments[-1].put(data)
                except _errors.NoMemoryError:
                    ph = None
            if ph is None:  # full (or none yet): a new segment
                self._segments.append(self._new_pool(max(_SEGMENT, 16 * self.max_block_bytes)))
                seg, ph = len(self._segments) - 1, self._segments[-1].put(data)
        self._entries[h] = (layer, kind, seg, ph)
        self._by_pool[(seg, ph)] = h

    @property
    def used_bytes(self) -> int:
        """Bytes of the compressed blocks held now (their exact lengths)."""
        with self._lock:
            return sum(p.stats()["bytes"] for p in self._segments)

    def pool_stats(self) -> dict:
        """The pool's counters (ibp.SlabPool.stats), summed over segments."""
        with self._lock:
            tot = {}
            for p in self._segments:
                for k, v in p.stats().items():
                    tot[k] = tot.get(k, 0) + v
            return tot

    # ---- per layer ---------------------------------------------------------

    def _rows(self, kv, block_ids=None):
        """[2, n, *block_shape] tensor -> (n * 2, block_elems) rows, block-major
        (block i's K then V), as NumPy (bf16 as uint16 bit patterns)."""
        if not isinstance(kv, torch.Tensor) or kv.dtype != self.dtype or kv.device.type != "cpu":
            raise _errors.invalid("KVOffloader", "expected a CPU %s tensor" % self.dtype)
        if kv.dim() != 5 or kv.shape[0] != 2 or tuple(kv.shape[2:]) != self.block_shape:
            raise _errors.invalid("KVOffloader", "expected [2, num_blocks, %d, %d, %d], got %s"
                                  % (*self.block_shape, tuple(kv.shape)))
        if block_ids is not None:
            kv = kv[:, torch.as_tensor(block_ids, dtype=torch.int64)]
        t = kv.transpose(0, 1).contiguous().reshape(-1, self.block_elems)
        if self.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return t.numpy().view(_DTYPES[self.dtype])

    def calibrate(self, layer: int, kv) -> dict:
        """Trains layer `layer`'s IBP codec on the blocks of `kv` ([2, n,
        *block_shape]) and picks the codec (ibp, exp or raw) that stores
        these blocks in the fewest bytes. Returns the measured sizes."""
        rows = self._rows(kv)
        codec = train(rows)
        sizes = {"raw": rows.nbytes, "ibp": 0, "exp": 0}
        for i in range(0, rows.shape[0], 2):
            sizes["ibp"] += codec.encode(rows[i:i + 2]).nbytes
            sizes["exp"] += self._exp_pack(rows[i:i + 2]).nbytes
        kind = min(sizes, key=lambda k: (sizes[k], k != "raw"))
        self._codec[layer], self._kind[layer] = codec, kind
        return dict(sizes, codec=kind)

    def codec(self, layer: int) -> Optional[str]:
        return self._kind[layer]

    def ratio(self, layer: int) -> float:
        """Raw bytes / stored bytes of everything this layer stored so far."""
        return self._raw[layer] / self._packed[layer] if self._packed[layer] else float("nan")

    def _exp_pack(self, rows):
        if self.dtype == torch.bfloat16:
            return _exp.compress(torch.from_numpy(rows.view(np.int16)).view(torch.bfloat16))
        return _exp.compress(rows)

    # ---- store / load --------------------------------------------------------

    def store(self, layer: int, kv_cache, block_ids) -> List[int]:
        """Compresses blocks `block_ids` of `kv_cache` (the layer's
        [2, num_blocks, *block_shape] cache) into the pool; one handle per
        block. Calibrates on these blocks first if the layer never was."""
        if self._kind[layer] is None:
            idx = torch.as_tensor(block_ids, dtype=torch.int64)
            self.calibrate(layer, kv_cache[:, idx])
        rows = self._rows(kv_cache, block_ids)
        kind, codec = self._kind[layer], self._codec[layer]
        if kind not in _KINDS:
            raise _errors.invalid("KVOffloader.store", "unknown codec %r" % (kind,))
        entries = []  # (kind, bytes) per block
        if kind == "ibp":
            enc = codec.encode(rows)
            off = enc.offsets.astype(np.int64)
            for i in range(0, rows.shape[0], 2):
                hdr = np.zeros(_HDR, np.uint8)
                hdr[0:8].view(np.uint32)[:] = (off[i + 1] - off[i], off[i + 2] - off[i + 1])
                hdr[8:10] = enc.flags[i:i + 2]
                if enc.clusters is not None:
                    hdr[10:12] = enc.clusters[i:i + 2]
                entries.append(("ibp", np.concatenate([hdr, enc.payload[off[i]:off[i + 2]]])))
        else:
            for i in range(0, rows.shape[0], 2):
                p = self._exp_pack(rows[i:i + 2]) if kind == "exp" else rows[i:i + 2]
                p = p.numpy() if isinstance(p, torch.Tensor) else p
                entries.append((kind, np.ascontiguousarray(p).reshape(-1).view(np.uint8)))
        raw_block = 2 * self.block_elems * rows.itemsize
        handles = []
        with self._lock:
            for k, data in entries:
                if data.nbytes > self.max_block_bytes:  # never for IBP; exp headers on tiny blocks
                    i = len(handles)
                    k, data = "raw", np.ascontiguousarray(rows[2 * i:2 * i + 2]).reshape(-1).view(np.uint8)
                h = self._next
                self._put(h, layer, k, data)
                self._next += 1
                self._raw[layer] += raw_block
                self._packed[layer] += data.nbytes
                handles.append(h)
        return handles

    def load(self, layer: int, handles: Sequence[int], kv_cache, dst_block_ids) -> None:
        """Decompresses the blocks `handles` into blocks `dst_block_ids` of
        `kv_cache` (bit-exact). Raises KeyError for an evicted or freed handle."""
        dst = torch.as_tensor(dst_block_ids, dtype=torch.int64)
        if len(handles) != dst.numel():
            raise _errors.invalid("KVOffloader.load", "%d handles for %d destination blocks"
                                  % (len(handles), dst.numel()))
        self._rows(kv_cache[:, :0])  # checks the cache's dtype and shape
        np_dtype = _DTYPES[self.dtype]
        for h, d in zip(handles, dst.tolist()):
            with self._lock:
                if h not in self._entries:
                    raise KeyError("KVOffloader: handle %d was evicted or freed" % h)
                lay, kind, seg, ph = self._entries[h]
                if lay != layer:
                    raise _errors.invalid("KVOffloader.load", "handle %d belongs to layer %d, not %d"
                                          % (h, lay, layer))
                data = self._segments[seg].get(ph)  # a use: the pool's LRU keeps it longer
            if kind == "ibp":
                n0, n1 = (int(x) for x in data[0:8].view(np.uint32))
                cl = data[10:12].copy() if self._codec[layer].nclusters > 1 else None
                rows = self._codec[layer].decode(Encoded(data[_HDR:_HDR + n0 + n1],
                                                         np.array([0, n0, n0 + n1], np.uint64),
                                                         data[8:10].copy(), cl,
                                                         (2, self.block_elems), _code_of(np_dtype)))
            elif kind == "exp":
                rows = _exp.decompress(data)
                rows = rows.view(torch.int16).numpy() if isinstance(rows, torch.Tensor) else rows
            else:
                rows = data
            t = torch.from_numpy(np.ascontiguousarray(rows).view(np_dtype).copy())
            if self.dtype == torch.bfloat16:
                t = t.view(torch.int16).view(torch.bfloat16)
            kv_cache[:, d] = t.view(2, *self.block_shape)

    def free(self, handles: Sequence[int]) -> None:
        """Drops blocks (their pool slots are reused); unknown handles are ignored."""
        with self._lock:
            for h in handles:
                e = self._entries.pop(h, None)
                if e is not None:
                    del self._by_pool[(e[2], e[3])]
                    self._segments[e[2]].remove(e[3])

    def close(self) -> None:
        """Frees the pool (every handle becomes invalid)."""
        with self._lock:
            for p in self._segments:
                p.close()
            self._segments, self._entries, self._by_pool = [], {}, {}

    def wait(self, layer: int) -> None:
        """CPU stores and loads finish before returning: nothing to wait for."""


def _code_of(np_dtype):
    return {np.uint16: 6, np.float16: 9, np.float32: 11}[np_dtype]
