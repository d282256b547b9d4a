"""LLM KV-cache offload, CPU path: compress paged KV blocks into a host pool
and restore them, losslessly (issue 13, section 3; the first part).

    off = ibp.torch.KVOffloader(num_layers, (block_size, num_kv_heads, head_size), torch.bfloat16,
                                capacity_bytes=1 << 30, on_evict=print)
    off.calibrate(layer, kv)                    # kv: [2, n, block_size, heads, head_size]
    handles = off.store(layer, kv_cache, block_ids)
    off.load(layer, handles, kv_cache, dst_block_ids)   # bit-exact

Layout as vLLM's per-layer cache: [2 (K, V), num_blocks, block_size,
num_kv_heads, head_size]. A block (its K and V) is one entry of the pool.
calibrate() trains the layer's IBP codec on the given blocks and keeps
whichever of IBP, the exponent codec and no codec gives the fewest bytes
on them (bf16 KV often compresses better by exponent). Entries are kept in
a Python-managed pool of NumPy buffers with a byte capacity: when a store
would exceed it, the least recently stored or loaded entries are evicted
(on_evict(handle) is called for each) and their handles become invalid.

Not here yet (see the issue): the GPU path (encode on swap-out, decode on
swap-in, a stream per layer; `device` must be None or "cpu"), the slab
cache's pinned size-class allocator as the pool, and the vLLM
OffloadingSpec. wait(layer) is a no-op: CPU calls finish before returning.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from .. import _errors, exp as _exp
from .._codec import Encoded, train

__all__ = ["KVOffloader"]

_DTYPES = {torch.bfloat16: np.uint16, torch.float16: np.float16, torch.float32: np.float32}


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
        self.capacity_bytes = capacity_bytes
        self.on_evict = on_evict
        self._codec = [None] * self.num_layers
        self._kind = [None] * self.num_layers
        self._pool = collections.OrderedDict()  # handle -> (layer, kind, parts, nbytes)
        self._next = 0
        self.used_bytes = 0
        self._raw = [0] * self.num_layers
        self._packed = [0] * self.num_layers
        self._lock = threading.Lock()

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
        entries = []
        if kind == "ibp":
            enc = codec.encode(rows)
            off = enc.offsets.astype(np.int64)
            for i in range(0, rows.shape[0], 2):
                cl = enc.clusters[i:i + 2].copy() if enc.clusters is not None else None
                parts = (enc.payload[off[i]:off[i + 2]].copy(), (off[i:i + 3] - off[i]).astype(np.uint64),
                         enc.flags[i:i + 2].copy(), cl)
                entries.append((parts, sum(p.nbytes for p in parts if p is not None)))
        else:
            for i in range(0, rows.shape[0], 2):
                p = self._exp_pack(rows[i:i + 2]) if kind == "exp" else rows[i:i + 2].copy()
                p = p.numpy() if isinstance(p, torch.Tensor) else p
                entries.append((p, p.nbytes))
        handles = []
        with self._lock:
            for parts, nbytes in entries:
                self._evict_for(nbytes)
                h = self._next
                self._next += 1
                self._pool[h] = (layer, kind, parts, nbytes)
                self.used_bytes += nbytes
                self._raw[layer] += 2 * self.block_elems * rows.itemsize
                self._packed[layer] += nbytes
                handles.append(h)
        return handles

    def _evict_for(self, nbytes):
        if self.capacity_bytes is None:
            return
        if nbytes > self.capacity_bytes:
            raise _errors.NoMemoryError("KVOffloader: a block of %d bytes exceeds the capacity %d"
                                        % (nbytes, self.capacity_bytes), func="KVOffloader.store", status=2)
        while self.used_bytes + nbytes > self.capacity_bytes:
            h, (_, _, _, n) = self._pool.popitem(last=False)
            self.used_bytes -= n
            if self.on_evict is not None:
                self.on_evict(h)

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
                if h not in self._pool:
                    raise KeyError("KVOffloader: handle %d was evicted or freed" % h)
                lay, kind, parts, _ = self._pool[h]
                self._pool.move_to_end(h)
            if lay != layer:
                raise _errors.invalid("KVOffloader.load", "handle %d belongs to layer %d, not %d" % (h, lay, layer))
            if kind == "ibp":
                rows = self._codec[layer].decode(Encoded(parts[0], parts[1], parts[2], parts[3],
                                                         (2, self.block_elems), _code_of(np_dtype)))
            elif kind == "exp":
                rows = _exp.decompress(parts)
                rows = rows.view(torch.int16).numpy() if isinstance(rows, torch.Tensor) else rows
            else:
                rows = parts
            t = torch.from_numpy(np.ascontiguousarray(rows).view(np_dtype).copy())
            if self.dtype == torch.bfloat16:
                t = t.view(torch.int16).view(torch.bfloat16)
            kv_cache[:, d] = t.view(2, *self.block_shape)

    def free(self, handles: Sequence[int]) -> None:
        with self._lock:
            for h in handles:
                e = self._pool.pop(h, None)
                if e is not None:
                    self.used_bytes -= e[3]

    def wait(self, layer: int) -> None:
        """CPU stores and loads finish before returning: nothing to wait for."""


def _code_of(np_dtype):
    return {np.uint16: 6, np.float16: 9, np.float32: 11}[np_dtype]
