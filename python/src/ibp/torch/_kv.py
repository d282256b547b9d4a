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

Device path (device="cuda[:N]"): store() packs the chosen blocks, in the
byte format above, into a per-layer staging buffer (preallocated and grown,
never per call), then copies each block's bytes into its pool slot; load()
copies the slots into a per-layer load stage and decodes from it into the
destination blocks (a stage rather than zero-copy decode from the pinned
slots: one contiguous buffer with per-block lengths is what the staged
decode takes). A block stored by either path loads on the other. The
block format is C's (cache/kv_block.c): ibp_kv_pack_blocks packs an IBP
batch into the stage, ibp_kv_block_parse validates every IBP block loaded.
Not here yet (see the issue): the CUDA side (encode with
ibp_cuda_codec_create + ibp_encode_batch_cuda / ibp_exp_encode_cuda into a
device stage, async copies into the pinned slots, decode through the staged
gather kernel, a stream per layer). On a machine without a
GPU device="cuda" raises ibp.NoDeviceError; with one, UnsupportedError (the
CUDA encode/decode orchestration in C is not written). Only the
host-fallback twin of the orchestration runs: the TEST HOOK
KVOffloader(..., device="cuda", _host_fallback=True) runs the same staging
with the CPU codecs on host tensors. It never ran on a GPU. wait(layer) is
a no-op: every call finishes before returning.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from .. import _errors, _lib, exp as _exp
from .._cache import SlabPool
from .._codec import Encoded, train

__all__ = ["KVOffloader"]

_c = ctypes.c_void_p
_lib.lib.ibp_kv_pack_blocks.restype = ctypes.c_int
_lib.lib.ibp_kv_pack_blocks.argtypes = [_c, _c, _c, _c, ctypes.c_uint64, _c, ctypes.c_uint64, _c]
_lib.lib.ibp_kv_block_parse.restype = ctypes.c_int
_lib.lib.ibp_kv_block_parse.argtypes = [_c, ctypes.c_uint64, _c, _c, _c]

_DTYPES = {torch.bfloat16: np.uint16, torch.float16: np.float16, torch.float32: np.float32}
_KINDS = ("ibp", "exp", "raw")
_HDR = 12  # ibp blocks: u32 len0, u32 len1, u8 flag0, u8 flag1, u8 cluster0, u8 cluster1
_SEGMENT = 64 << 20  # pool segments when capacity_bytes is None


class KVOffloader:
    def __init__(self, num_layers: int, block_shape: Sequence[int], dtype, capacity_bytes: Optional[int] = None,
                 device=None, on_evict: Optional[Callable[[int], None]] = None, _host_fallback: bool = False):
        func = "KVOffloader"
        dev = torch.device("cpu" if device is None else device)
        if dev.type not in ("cpu", "cuda"):
            raise _errors.invalid(func, "device must be None, 'cpu' or 'cuda[:N]', not %r" % (device,))
        # _host_fallback is a test hook (IBP_CUDA_HOST_FALLBACK's twin): the
        # device path's staging, run on host tensors with the CPU codecs.
        self._dev_path = dev.type == "cuda"
        self._host_fallback = bool(_host_fallback) and self._dev_path
        if self._dev_path and not self._host_fallback:
            from .. import _cuda
            _cuda.require_device(func)  # ibp.NoDeviceError without a GPU
            raise _errors.UnsupportedError(
                "%s: device %s: the GPU encode/decode orchestration is not written yet (only its "
                "host-fallback twin exists); use device=None" % (func, device), func=func, status=6)
        self.device = dev
        self._stage = {}  # (layer, "store" | "load") -> uint8 buffer, grown by doubling
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
        want = "cuda" if self.device.type == "cuda" and not self._host_fallback else "cpu"
        if not isinstance(kv, torch.Tensor) or kv.dtype != self.dtype or kv.device.type != want:
            raise _errors.invalid("KVOffloader", "expected a %s %s tensor" % (want.upper(), self.dtype))
        if kv.dim() != 5 or kv.shape[0] != 2 or tuple(kv.shape[2:]) != self.block_shape:
            raise _errors.invalid("KVOffloader", "expected [2, num_blocks, %d, %d, %d], got %s"
                                  % (*self.block_shape, tuple(kv.shape)))
        if block_ids is not None:
            kv = kv[:, _block_ids(block_ids, kv.shape[1], "KVOffloader.store")]
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

    def _encode_blocks(self, layer, rows):
        """(2n, block_elems) rows -> [(kind, uint8 bytes)] per block: THE block format."""
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
        for i, (k, data) in enumerate(entries):
            if data.nbytes > self.max_block_bytes:  # never for IBP; exp headers on tiny blocks
                entries[i] = ("raw", np.ascontiguousarray(rows[2 * i:2 * i + 2]).reshape(-1).view(np.uint8))
        return entries

    def _stage_buf(self, layer, which, nbytes):
        """The layer's staging buffer of at least nbytes (grown by doubling,
        kept across calls)."""
        buf = self._stage.get((layer, which))
        if buf is None or buf.nbytes < nbytes:
            cap = max(nbytes, 2 * (0 if buf is None else buf.nbytes), 1 << 16)
            buf = self._stage[(layer, which)] = np.empty(cap, np.uint8)
        return buf

    def _through_stage(self, layer, entries):
        """Device path, store side: the encoded blocks packed back to back into
        the layer's stage (on a GPU: the encode kernels' output buffer); each
        block's slice is then what is copied into its pool slot."""
        total = sum(d.nbytes for _, d in entries)
        stage = self._stage_buf(layer, "store", total)
        out, pos = [], 0
        for k, d in entries:
            stage[pos:pos + d.nbytes] = d
            out.append((k, stage[pos:pos + d.nbytes]))
            pos += d.nbytes
        return out

    def _pack_ibp(self, layer, rows):
        """Device path, IBP: the batch encoded at once and packed into the
        layer's stage by ibp_kv_pack_blocks (the C side of the block format;
        GIL released); each block's slice is copied into its pool slot."""
        enc = self._codec[layer].encode(rows)
        nb = rows.shape[0] // 2
        offs = np.ascontiguousarray(enc.offsets, dtype=np.uint64)
        flags = np.ascontiguousarray(enc.flags, dtype=np.uint8)
        cl = None if enc.clusters is None else np.ascontiguousarray(enc.clusters, dtype=np.uint8)
        pay = np.ascontiguousarray(enc.payload, dtype=np.uint8)
        stage = self._stage_buf(layer, "store", int(offs[-1]) + nb * _HDR)
        bo = np.empty(nb + 1, np.uint64)
        _lib.check(_lib.lib.ibp_kv_pack_blocks(pay.ctypes.data if pay.size else None, offs.ctypes.data,
                                                flags.ctypes.data, None if cl is None else cl.ctypes.data,
                                                nb, stage.ctypes.data, stage.nbytes, bo.ctypes.data),
                   "ibp_kv_pack_blocks")
        return [("ibp", stage[int(bo[i]):int(bo[i + 1])]) for i in range(nb)]

    # ---- store / load --------------------------------------------------------

    def store(self, layer: int, kv_cache, block_ids) -> List[int]:
        """Compresses blocks `block_ids` of `kv_cache` (the layer's
        [2, num_blocks, *block_shape] cache) into the pool; one handle per
        block. Calibrates on these blocks first if the layer never was."""
        if self._kind[layer] is None:
            self._rows(kv_cache[:, :0])
            self.calibrate(layer, kv_cache[:, _block_ids(block_ids, kv_cache.shape[1], "KVOffloader.store")])
        rows = self._rows(kv_cache, block_ids)
        raw_block = 2 * self.block_elems * rows.itemsize
        handles = []
        packed = self._kind[layer] == "ibp" and self._dev_path
        entries = None if packed else self._encode_blocks(layer, rows)
        with self._lock:  # the stage is the layer's, shared between calls
            if packed:
                entries = self._pack_ibp(layer, rows)
            elif self._dev_path:
                entries = self._through_stage(layer, entries)
            for k, data in entries:
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
        self._rows(kv_cache[:, :0])  # checks the cache's dtype and shape
        dst = _block_ids(dst_block_ids, kv_cache.shape[1], "KVOffloader.load")
        if len(handles) != dst.numel():
            raise _errors.invalid("KVOffloader.load", "%d handles for %d destination blocks"
                                  % (len(handles), dst.numel()))
        if self._dev_path:
            return self._load_staged(layer, handles, kv_cache, dst.tolist())
        for h, d in zip(handles, dst.tolist()):
            with self._lock:
                kind, seg, ph = self._entry(layer, h)
                data = self._segments[seg].get(ph)  # a use: the pool's LRU keeps it longer
            kv_cache[:, d] = self._decode_block(layer, kind, data)

    def _entry(self, layer, h):
        """(kind, segment, pool handle) of handle h (under the lock)."""
        if h not in self._entries:
            raise KeyError("KVOffloader: handle %d was evicted or freed" % h)
        lay, kind, seg, ph = self._entries[h]
        if lay != layer:
            raise _errors.invalid("KVOffloader.load", "handle %d belongs to layer %d, not %d" % (h, lay, layer))
        return kind, seg, ph

    def _load_staged(self, layer, handles, kv_cache, dst):
        """Device path, load side: every slot copied into the layer's load stage
        (back to back, per-block lengths), then each block decoded from it.
        All handles are checked before anything is written."""
        with self._lock:
            ents = [self._entry(layer, h) for h in handles]
            lens = [self._segments[seg].size(ph) for _, seg, ph in ents]
            stage = self._stage_buf(layer, "load", sum(lens))
            pos = np.concatenate([[0], np.cumsum(lens, dtype=np.int64)]).tolist()
            for (kind, seg, ph), a in zip(ents, pos):
                self._segments[seg].get(ph, out=stage[a:])
            blocks = [self._decode_block(layer, kind, stage[pos[i]:pos[i + 1]])
                      for i, (kind, _, _) in enumerate(ents)]
        for d, t in zip(dst, blocks):
            kv_cache[:, d] = t

    def _decode_block(self, layer, kind, data):
        """One stored block's bytes -> its [2, *block_shape] tensor (bit-exact)."""
        np_dtype = _DTYPES[self.dtype]
        if kind == "ibp":
            data = np.ascontiguousarray(data, dtype=np.uint8)
            ln, fl, cl = np.zeros(2, np.uint64), np.zeros(2, np.uint8), np.zeros(2, np.uint8)
            _lib.check(_lib.lib.ibp_kv_block_parse(data.ctypes.data, data.nbytes, ln.ctypes.data,
                                                   fl.ctypes.data, cl.ctypes.data), "ibp_kv_block_parse")
            n0, n1 = int(ln[0]), int(ln[1])
            cl = cl if self._codec[layer].nclusters > 1 else None
            rows = self._codec[layer].decode(Encoded(data[_HDR:_HDR + n0 + n1].copy(),
                                                     np.array([0, n0, n0 + n1], np.uint64),
                                                     fl, cl,
                                                     (2, self.block_elems), _code_of(np_dtype)))
        elif kind == "exp":
            rows = _exp.decompress(data.copy())
            rows = rows.view(torch.int16).numpy() if isinstance(rows, torch.Tensor) else rows
        else:
            rows = data
        t = torch.from_numpy(np.ascontiguousarray(rows).view(np_dtype).copy())
        if self.dtype == torch.bfloat16:
            t = t.view(torch.int16).view(torch.bfloat16)
        return t.view(2, *self.block_shape)

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
        """Waits for layer `layer`'s stores and loads. Every path (CPU, and the
        device path's host-fallback twin) finishes before returning."""
        if not 0 <= int(layer) < self.num_layers:
            raise _errors.invalid("KVOffloader.wait", "layer %d out of [0, %d)" % (layer, self.num_layers))


def _block_ids(ids, n, func):
    """Block ids as an int64 tensor, each in [0, n) (no negative wrap-around)."""
    t = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        raise _errors.invalid(func, "block ids must lie in [0, %d)" % n)
    return t


def _code_of(np_dtype):
    return {np.uint16: 6, np.float16: 9, np.float32: 11}[np_dtype]
