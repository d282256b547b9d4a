"""LLM KV-cache offload: compress paged KV blocks into a host pool and
restore them, losslessly (issue 13, section 3), on the CPU or a GPU.

    off = ibp.torch.KVOffloader(num_layers, (block_size, num_kv_heads, head_size), torch.bfloat16,
                                capacity_bytes=1 << 30, on_evict=print)
    off.calibrate(layer, kv)                    # kv: [2, n, block_size, heads, head_size]
    handles = off.store(layer, kv_cache, block_ids)
    off.load(layer, handles, kv_cache, dst_block_ids)   # bit-exact

Layout as vLLM's per-layer cache: [2 (K, V), num_blocks, block_size,
num_kv_heads, head_size]. A block (its K and V) is one entry of the pool.
calibrate() trains the layer's IBP codec on the given blocks and keeps
whichever of IBP, the exponent codec and no codec gives the fewest bytes
on them (bf16 KV often compresses better by exponent). For the exponent
codec it also keeps the layer's sigma (the RMS of those blocks) when its
window stores them within 1% of each block's own: stores then skip the
per-block mean-square pass (about 40% of an encode); a store whose blocks
come out more than 10% above the calibrated size per block goes back to
measuring every block for that layer. A stored block is,
by codec: ibp, a 12-byte header (u32 K and V payload lengths, their mode
and cluster bytes) then the two IBP rows; exp, one exponent-codec block of
the K then V elements (ibp_exp_encode, without a checksum: in-memory
blocks, docs/CODECS.md); raw, the K row
then the V row (include/ibp/kv.h).

Every path runs one C orchestration per layer (ibp_kv_stream_t,
cache/kv_cuda.c: ibp_kv_encode_cuda / ibp_kv_decode_cuda): rows gathered,
encoded in one batch, slots allocated (all or nothing), blocks copied in;
loads check every slot's header before anything is written. On the CPU
(device=None) it runs on host memory (IBP_KV_HOST) and each call finishes
before returning; errors raise there.

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

Device path (device="cuda[:N]"): each layer has a torch.cuda.Stream and
a libibp KV stream (ibp_kv_stream_t, cache/kv_cuda.c). store() gathers
the blocks' K and V rows on the GPU, encodes them there
(ibp_encode_batch_cuda), synchronises once to learn the sizes, allocates
the pool slots (pinned host memory) and queues asynchronous copies of the
blocks, in the formats above, into them; load() checks every slot's
header on the host, queues copies of the payloads into a device stage and
decodes them straight into the destination blocks (the staged gather
kernel). Both return with the work queued on the layer's stream (which
first waits for the current stream); wait(layer) finishes it and raises
ibp.CorruptError if a stored row failed to decode (that row is left
zero). One call per layer is in flight: the next call on a layer first
finishes the previous one. The caches must be contiguous and must not be
changed (store) or read (load) before wait(layer). Layers on the exponent
codec run on the GPU too (ibp_exp_encode_cuda / ibp_exp_decode_cuda, one
exponent block per K/V block). Blocks stored by either path load on the
other (same bytes). Without a GPU device="cuda" raises
ibp.NoDeviceError; the TEST HOOK _host_fallback=True runs the same C
orchestration with the CPU twins on host tensors (IBP_CUDA_HOST_FALLBACK;
IBP_KV_HOST where a GPU is present). On a GPU (an H200, 2026-11-28) the
Python tests passed, including the device round trip of test_real_gpu;
the host-fallback twin and the emulator cover the rest in CI.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import operator
import threading
from itertools import compress, repeat
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from .. import _cuda, _errors, _lib
from .._cache import SlabPool
from .._codec import train
from .._handle import fork_generation, not_here
from .._store import pickled_bytes

__all__ = ["KVOffloader"]

_c = ctypes.c_void_p
_u64 = ctypes.c_uint64
_lib.lib.ibp_kv_stream_create.restype = ctypes.c_int
_lib.lib.ibp_kv_stream_create.argtypes = [_c, _u64, ctypes.c_int, ctypes.c_uint, _c, ctypes.POINTER(_c)]
_lib.lib.ibp_kv_stream_free.restype = None
_lib.lib.ibp_kv_stream_free.argtypes = [_c]
_lib.lib.ibp_kv_stream_on_device.restype = ctypes.c_int
_lib.lib.ibp_kv_stream_on_device.argtypes = [_c]
_lib.lib.ibp_kv_encode_cuda.restype = ctypes.c_int
_lib.lib.ibp_kv_encode_cuda.argtypes = [_c, _c, _c, _u64, _c, _u64, ctypes.c_uint, _c, _c]
_lib.lib.ibp_kv_decode_cuda.restype = ctypes.c_int
_lib.lib.ibp_kv_decode_cuda.argtypes = [_c, _c, _c, _c, _u64, _c, _u64, _c]
_lib.lib.ibp_kv_stream_wait.restype = ctypes.c_int
_lib.lib.ibp_kv_stream_wait.argtypes = [_c]
_lib.lib.ibp_kv_stream_set_exp_sigma.restype = ctypes.c_int
_lib.lib.ibp_kv_stream_set_exp_sigma.argtypes = [_c, ctypes.c_double]
_SIGMA_SLACK, _DRIFT = 1.01, 1.10  # layer sigma kept within 1% of per-block; dropped past 10% growth
_HOST_FALLBACK, _KV_HOST, _NO_DEVICE, _NOMEM = 1, 2, 10, 2
_KIND_CODE = {"ibp": 0, "raw": 1, "exp": 2}  # IBP_KV_IBP, IBP_KV_RAW, IBP_KV_EXP
_EXP_DTYPE = {torch.bfloat16: 10, torch.float16: 9, torch.float32: 11}  # ibp_dtype_t

_DTYPES = {torch.bfloat16: np.uint16, torch.float16: np.float16, torch.float32: np.float32}
_SEGMENT = 64 << 20  # pool segments when capacity_bytes is None
_LAYER, _OFFSET = operator.itemgetter(0), operator.itemgetter(3)  # a run's layer, its pool handle - handle


def _handle_key(h):
    """A handle as an int (what a dict's lookup matched before: ints, NumPy
    integers, integral floats), or None for anything else."""
    if type(h) is int:
        return h
    try:
        return operator.index(h)
    except TypeError:
        pass
    if isinstance(h, float) and h.is_integer():
        return int(h)
    return None


def _consecutive(phs, p0, n):
    """Whether phs (a list or an array of ints, n of them) is p0, p0 + 1, ...,
    p0 + n - 1."""
    if int(phs[-1]) - p0 != n - 1:
        return False
    if isinstance(phs, np.ndarray):
        return phs.astype(np.int64, copy=False).tobytes() == np.arange(p0, p0 + n, dtype=np.int64).tobytes()
    return n <= 2 or list(phs) == list(range(p0, p0 + n))


class _Blocks:
    """The offloader's handle table: handle -> (layer, kind, segment, pool
    handle), and (segment, pool handle) -> handle, with no Python object
    and no hashing per block for a store's blocks (after a store's C call
    has streamed megabytes through the cache, each was a cache miss).

    A store's blocks take consecutive handles and, from one C call,
    consecutive pool handles: a run, one shared tuple (layer, kind,
    segment, pool handle - handle, first pool handle, blocks). Handles
    (0, 1, 2, ... never reused) index a list of runs from `base` on (the
    window: a store appends its run n times, a free of its blocks is one
    slice assignment); handles below it are in a dict (`old`), where the
    window's survivors go when most of it was freed. Each segment keeps
    its runs by first pool handle, so an eviction's pool handle finds its
    run (a handle whose entry is another run, or none, is no longer the
    run's); runs no handle has any more are dropped from those lists when
    they hold more than twice as many runs as there are handles."""

    __slots__ = ("base", "win", "dead", "old", "count", "by_pool", "_nruns")

    def __init__(self):
        self.base, self.win, self.dead = 0, [], 0  # win[h - base]: h's run or None (dead: how many None)
        self.old = {}  # handle below base -> its run
        self.count = 0  # handles present
        self.by_pool = []  # by_pool[seg]: ([first pool handle of each run, ascending], [run])
        self._nruns = 0

    def __len__(self):
        return self.count

    def _run(self, h):
        """The run of handle h (an int), or None."""
        i = h - self.base
        if i >= 0:
            return self.win[i] if i < len(self.win) else None
        return self.old.get(h)

    def _run_any(self, h):
        k = _handle_key(h)
        return None if k is None else self._run(k)

    def __contains__(self, h):
        return self._run_any(h) is not None

    def __getitem__(self, h):
        r = self._run_any(h)
        if r is None:
            raise KeyError(h)
        return r[0], r[1], r[2], _handle_key(h) + r[3]

    def __setitem__(self, h, entry):
        layer, kind, seg, ph = entry
        self.pop(h)
        self.put_run(range(h, h + 1), (layer, kind, seg), [ph])

    def _seg(self, seg):
        while len(self.by_pool) <= seg:
            self.by_pool.append(([], []))
        return self.by_pool[seg]

    def put_run(self, hs, meta, phs):
        """Handles hs (a range of ints, none present) of one layer, kind
        and segment (meta), pool handles phs (a list, or the int64 array
        the C call filled: no Python int per block)."""
        n = len(phs)
        if not n:
            return
        p0 = int(phs[0])
        if n > 1 and not _consecutive(phs, p0, n):
            for h, ph in zip(hs, phs):  # not consecutive (not from one C call): a run each
                self.put_run(range(h, h + 1), meta, [int(ph)])
            return
        h0 = hs[0]
        run = (meta[0], meta[1], meta[2], p0 - h0, p0, n)
        win = self.win
        gap = h0 - self.base - len(win)
        if gap >= 0:  # at or after the window's end (a store's new handles)
            if gap > max(1024, len(win)):  # far after it: a new window there
                self._flush()
                self.base, gap = h0, 0
            if gap:
                win.extend(repeat(None, gap))
                self.dead += gap
            win.extend(repeat(run, n))
        else:  # below the end: a block put again under its handle
            for h in hs:
                i = h - self.base
                if i < 0:
                    self.old[h] = run
                elif i < len(win):
                    self.dead -= win[i] is None
                    win[i] = run
                else:
                    self.dead += i - len(win)
                    win.extend(repeat(None, i - len(win)))
                    win.append(run)
        self.count += n
        firsts, runs = self._seg(meta[2])
        if not firsts or firsts[-1] < p0:
            firsts.append(p0)
            runs.append(run)
        else:
            i = bisect.bisect_left(firsts, p0)
            firsts.insert(i, p0)
            runs.insert(i, run)
        self._nruns += 1
        if self._nruns > 2 * self.count + 64:
            self._compact()

    def _flush(self):
        """The window's handles into old; the window starts empty at its end."""
        win = self.win
        if len(win) > self.dead:
            self.old.update(compress(zip(range(self.base, self.base + len(win)), win),
                                     map(operator.is_not, win, repeat(None))))
        self.base += len(win)
        self.win, self.dead = [], 0

    def _tidy(self):
        """After removals, when most of the window is free: its free front
        dropped, and the survivors moved to old when a quarter of it is still
        free (each step paid for by as many removals)."""
        win = self.win
        if self.dead == len(win):
            self.base += len(win)
            self.win, self.dead = [], 0
            return
        k = list(map(type, win)).index(tuple)  # the first handle present
        if k:
            del win[:k]
            self.base += k
            self.dead -= k
        if self.dead > len(win) >> 2:
            self._flush()

    def _compact(self):
        """Drops the runs no handle maps to any more."""
        live = set(map(id, self.old.values()))
        live.update(map(id, self.win))
        self._nruns = 0
        for firsts, runs in self.by_pool:
            keep = [r for r in runs if id(r) in live]
            runs[:] = keep
            firsts[:] = [r[4] for r in keep]
            self._nruns += len(keep)

    def pop(self, h):
        """The entry of h, removed; None when there is none."""
        k = _handle_key(h)
        if k is None:
            return None
        i = k - self.base
        if i >= 0:
            win = self.win
            r = win[i] if i < len(win) else None
            if r is None:
                return None
            win[i] = None
            self.dead += 1
            if self.dead > (len(win) >> 1) + 256:
                self._tidy()
        else:
            r = self.old.pop(k, None)
            if r is None:
                return None
        self.count -= 1
        return r[0], r[1], r[2], k + r[3]

    def _slice(self, handles):
        """(position in the window, the run) when handles is a list of
        consecutive ints all in the window and all of one run (one store's
        blocks), else None."""
        n = len(handles) if type(handles) is list else 0
        if not n:
            return None
        h0 = handles[0]
        i = h0 - self.base if type(h0) is int else -1
        if i < 0 or i + n > len(self.win) or handles[-1] != h0 + n - 1:
            return None
        if n > 2 and handles != list(range(h0, h0 + n)):
            return None
        seg = self.win[i:i + n]
        r = seg[0]
        return (i, r) if r is not None and seg.count(r) == n else None

    def _chunks(self, handles):
        """handles (a list of ints) cut where they stop being consecutive:
        [(lo, hi)], or None when that is not a list of 256 ints or more or
        the chunks would be short (then each handle goes alone)."""
        if type(handles) is not list or len(handles) < 256 or set(map(type, handles)) != {int}:
            return None
        try:
            cuts = (np.flatnonzero(np.diff(np.array(handles, dtype=np.int64)) != 1) + 1).tolist()
        except OverflowError:  # beyond int64: not handles of ours
            return None
        if len(cuts) > len(handles) // 8:
            return None
        return list(zip([0] + cuts, cuts + [len(handles)]))

    def runs_of(self, handles):
        """The runs of the handles (KeyError for one not present)."""
        got = self._slice(handles)
        if got is not None:
            return [got[1]] * len(handles)
        chunks = self._chunks(handles)
        if chunks is not None:  # the blocks of a few stores: no Python per block in each
            runs = []
            for lo, hi in chunks:
                part = handles[lo:hi]
                got = self._slice(part)
                runs.extend([got[1]] * (hi - lo) if got is not None else self._runs_each(part))
        else:
            runs = self._runs_each(handles)
        if None in runs:
            raise KeyError(next(h for h, r in zip(handles, runs) if r is None))
        return runs

    def _runs_each(self, handles):
        """The run (or None) of each handle, looked up one by one (C-level
        maps over the window for a list of ints inside it)."""
        win, base = self.win, self.base
        try:  # ints, NumPy integers (floats and others: a TypeError, then one by one)
            if min(handles) >= base and max(handles) < base + len(win):
                return list(map(win.__getitem__, map(operator.sub, handles, repeat(base))))
        except (TypeError, ValueError):
            pass
        return list(map(self._run_any, handles))

    def pop_many(self, handles):
        """Removes the handles present: {segment: pool handles (a list, or
        an int64 array)}, in the order of handles."""
        got = self._slice(handles)
        if got is not None:  # one store's blocks: no Python per block
            return self._pop_slice(handles, *got)
        chunks = self._chunks(handles)
        if chunks is None:
            return self._pop_each(handles)
        out = {}
        for lo, hi in chunks:  # the blocks of a few stores
            part = handles[lo:hi]
            got = self._slice(part)
            for seg, phs in (self._pop_slice(part, *got) if got is not None else self._pop_each(part)).items():
                out.setdefault(seg, []).append(phs)
        return {seg: parts[0] if len(parts) == 1 else np.concatenate(parts).astype(np.int64, copy=False)
                for seg, parts in out.items()}

    def _pop_slice(self, handles, i, r):
        n = len(handles)
        self.win[i:i + n] = [None] * n
        self.dead += n
        self.count -= n
        if self.dead > (len(self.win) >> 1) + 256:
            self._tidy()
        p = handles[0] + r[3]
        return {r[2]: np.arange(p, p + n, dtype=np.int64)}

    def _pop_each(self, handles):
        out = {}
        for h in handles:
            e = self.pop(h)
            if e is not None:
                out.setdefault(e[2], []).append(e[3])
        return out

    def pop_pool(self, seg, ph):
        """The handle of (segment, pool handle), removed; None when none."""
        if seg >= len(self.by_pool):
            return None
        firsts, runs = self.by_pool[seg]
        i = bisect.bisect_right(firsts, ph) - 1
        if i < 0:
            return None
        r = runs[i]
        if ph >= r[4] + r[5]:
            return None
        h = ph - r[3]
        if self._run(h) is not r:
            return None
        self.pop(h)
        return h

    def handles(self):
        """Every handle, oldest first."""
        win = self.win
        return sorted(self.old) + list(compress(range(self.base, self.base + len(win)),
                                                map(operator.is_not, win, repeat(None))))

    def items(self):
        """[(handle, (layer, kind, segment, pool handle))], oldest first."""
        return [(h, self[h]) for h in self.handles()]


class _Scratch:
    """A store's arrays for the C call: block ids, pool handles and block
    sizes of up to `cap` blocks, and their addresses."""

    __slots__ = ("cap", "arrays", "ids", "hnd", "nbytes")

    def __init__(self, n):
        self.cap = max(int(n), 64)
        self.arrays = (np.zeros(self.cap, np.int64), np.full(self.cap, -1, np.int64), np.zeros(self.cap, np.uint64))
        self.ids, self.hnd, self.nbytes = (a.ctypes.data for a in self.arrays)


class KVOffloader:
    def __init__(self, num_layers: int, block_shape: Sequence[int], dtype, capacity_bytes: Optional[int] = None,
                 device=None, on_evict: Optional[Callable[[int], None]] = None, _host_fallback: bool = False):
        func = "KVOffloader"
        self._closed = False
        self._gen = None
        dev = torch.device("cpu" if device is None else device)
        if dev.type not in ("cpu", "cuda"):
            raise _errors.invalid(func, "device must be None, 'cpu' or 'cuda[:N]', not %r" % (device,))
        # _host_fallback is a test hook (IBP_CUDA_HOST_FALLBACK's twin): the
        # device path's staging, run on host tensors with the CPU codecs.
        self._host_fallback = bool(_host_fallback) and dev.type == "cuda"
        # The CPU path finishes every call before returning (errors raised
        # there); the device path (and its twin) leaves it queued until wait.
        self._sync = dev.type == "cpu"
        self._cache_device = "cuda" if dev.type == "cuda" and not self._host_fallback else "cpu"  # the caches'
        if dev.type == "cuda" and not self._host_fallback:
            from .. import _cuda
            _cuda.require_device(func)  # ibp.NoDeviceError without a GPU
            self._gen = fork_generation()  # its streams and CUDA context stay with this process
        self.device = dev
        self._kvs = {}  # layer -> (ibp_kv_stream_t, codec it was made with)
        self._spare = None  # CPU path: a codec-less stream kept between calls (its workspace stays faulted in)
        self._scratch = None  # the arrays of the last store (_Scratch), for the next
        self._streams = {}  # layer -> torch.cuda.Stream (GPU only)
        self._pending = {}  # layer -> tensors a queued call still reads or writes
        self._deferred = {}  # layer -> the error its wait() raises
        if dtype not in _DTYPES:
            raise _errors.invalid(func, "dtype must be bfloat16, float16 or float32, not %s" % (dtype,))
        if len(block_shape) != 3 or min(block_shape) < 1:
            raise _errors.invalid(func, "block_shape is (block_size, num_kv_heads, head_size)")
        self.num_layers, self.block_shape, self.dtype = int(num_layers), tuple(int(x) for x in block_shape), dtype
        self.block_elems = int(np.prod(self.block_shape))
        self.on_evict = on_evict
        self._codec = [None] * self.num_layers
        self._kind = [None] * self.num_layers
        self._sigma = [0.0] * self.num_layers  # exp layers: the sigma stores use (0: per block)
        self._exp_block = [0.0] * self.num_layers  # exp layers: calibrated bytes per block at that sigma
        # Largest block: K and V raw (an encoded row is at most its raw size) plus
        # the exponent codec's headers; anything larger is stored raw.
        self._row_bytes = self.block_elems * np.dtype(_DTYPES[dtype]).itemsize
        self.max_block_bytes = 2 * self._row_bytes + 4096
        self._entries = _Blocks()  # handle <-> (layer, kind, segment, pool handle)
        self._segments = []  # SlabPool, one unless capacity_bytes is None
        self._next = 0
        self._raw = [0] * self.num_layers
        self._packed = [0] * self.num_layers
        self._lock = threading.RLock()
        # the store in progress owns the handles from _own_from up (None: no store)
        self._own_from, self._own_evicted = None, False
        self._capacity = None
        self.capacity_bytes = capacity_bytes

    def _check(self, func: str, layer=None) -> int:
        """Refuses a closed offloader, one of another process, and a layer
        outside [0, num_layers) (no negative aliases); the layer as int."""
        if self._closed:
            raise _errors.closed(func, "ibp.torch.KVOffloader")
        if self._gen is not None and self._gen != fork_generation():
            raise not_here(func, "ibp.torch.KVOffloader on %s" % self.device)
        return -1 if layer is None else self._layer_arg(layer, func)

    # ---- pickling ------------------------------------------------------------
    # The settings, each layer's codec choice (and IBP codec tables) and every
    # stored block's compressed bytes under its handle; load() works on the
    # copy with the same handles. on_evict must be picklable itself.

    def __reduce_ex__(self, protocol):
        self._check("KVOffloader: pickle")
        with self._lock:
            self._quiesce()
            blocks = [(h, layer, kind, pickled_bytes(self._segments[seg].get(ph), protocol))
                      for h, (layer, kind, seg, ph) in self._entries.items()]
            config = dict(num_layers=self.num_layers, block_shape=self.block_shape, dtype=self.dtype,
                          capacity_bytes=self._capacity, device=str(self.device), on_evict=self.on_evict,
                          _host_fallback=self._host_fallback)
            layers = (list(self._codec), list(self._kind), list(self._raw), list(self._packed), self._next,
                      list(self._sigma), list(self._exp_block))
        return (_restore_offloader, (config, layers, blocks))

    # ---- the pool ------------------------------------------------------------

    @property
    def capacity_bytes(self) -> Optional[int]:
        """Byte budget of the compressed blocks (None: unbounded)."""
        return self._capacity

    @capacity_bytes.setter
    def capacity_bytes(self, cap) -> None:
        if cap is not None and (isinstance(cap, bool) or int(cap) < 1):
            raise _errors.invalid("KVOffloader", "capacity_bytes must be a positive integer or None")
        self._check("KVOffloader.capacity_bytes")
        with self._lock:
            self._quiesce()  # no slot may be pinned by queued copies
            old, old_cap = self._segments, self._capacity
            self._capacity = None if cap is None else int(cap)
            self._segments = []
            try:
                if self._capacity is not None:
                    self._segments.append(self._new_pool(self._capacity))
            except BaseException:
                self._segments, self._capacity = old, old_cap
                raise
            # Move the blocks over, oldest first; what no longer fits is evicted.
            moved = self._entries.items()
            self._entries = _Blocks()
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
        # Size classes a 16th of the largest block apart: a block wastes at
        # most that in its slot (about 3% on average), and the pool's
        # per-slot metadata, sized for its smallest slots, stays a few
        # percent of the capacity (32-byte classes would cost about 25%).
        step = 1 << max(8, min(16, (maxb // 16).bit_length() - 1))
        return SlabPool(cap, maxb, policy="lru" if self._capacity is not None else "static", class_step=step,
                        on_evict=lambda ph, seg=seg: self._pool_evicted(seg, ph))

    def _make_room(self, need):
        """Evicts the oldest blocks (not the store's own) until `need` bytes
        of slots are free, or none is left: the pool's size classes may need
        more room than a batch's bytes. Whether any was evicted."""
        pool = self._segments[0]
        done = False
        for h in self._entries.handles():
            st = pool.stats()
            if self._capacity - st["slot_bytes_used"] >= need:
                break
            if self._owned(h):
                continue
            _, _, seg, ph = self._entries.pop(h)
            pool.remove(ph)
            done = True
            if self.on_evict is not None:
                self.on_evict(h)
        return done

    def _owned(self, h):
        """Whether handle h belongs to the store in progress."""
        return self._own_from is not None and h >= self._own_from

    def _pool_evicted(self, seg, ph):
        h = self._entries.pop_pool(seg, ph)
        if h is not None:
            if self._owned(h):  # a block of the store in progress: it cannot fit (not reported)
                self._own_evicted = True
            elif self.on_evict is not None:
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
            for seg in self._roomy_segments(data.nbytes):
                try:
                    ph = self._segments[seg].put(data)
                    break
                except _errors.NoMemoryError:
                    ph = None
            if ph is None:  # full (or none yet): a new segment
                self._segments.append(self._new_pool(max(_SEGMENT, 16 * self.max_block_bytes)))
                seg, ph = len(self._segments) - 1, self._segments[-1].put(data)
        self._entries[h] = (layer, kind, seg, ph)

    def _roomy_segments(self, need):
        """Segments (unbounded pool) a store of at most `need` bytes may
        try, best first: those with that much free, most free first, else
        the newest; at most 2 (a failed try costs its encode). Without the
        older ones, blocks freed there were never reused: a cycle of free
        and store grew by a segment every pass."""
        if len(self._segments) <= 1:  # the only one, or none (no stats to read)
            return [0] if self._segments else []
        rooms = [(pool._free_bytes(), seg) for seg, pool in enumerate(self._segments)]
        best = [seg for room, seg in sorted(rooms, reverse=True) if room >= need][:2]
        return best or ([len(self._segments) - 1] if self._segments else [])

    @property
    def used_bytes(self) -> int:
        """Bytes of the compressed blocks held now (their exact lengths); 0
        once closed (it holds none)."""
        if self._closed:
            return 0
        self._check("KVOffloader.used_bytes")
        with self._lock:
            return sum(p.stats()["bytes"] for p in self._segments)

    def pool_stats(self) -> dict:
        """The pool's counters (ibp.SlabPool.stats), summed over segments."""
        self._check("KVOffloader.pool_stats")
        with self._lock:
            tot = {}
            for p in self._segments:
                for k, v in p.stats().items():
                    tot[k] = tot.get(k, 0) + v
            return tot

    # ---- per layer ---------------------------------------------------------

    def _check_cache(self, kv):
        """Refuses a cache that is not a [2, num_blocks, *block_shape] tensor
        of the offloader's dtype on its device."""
        want = self._cache_device
        if not isinstance(kv, torch.Tensor) or kv.dtype != self.dtype or kv.device.type != want:
            raise _errors.invalid("KVOffloader", "expected a %s %s tensor" % (want.upper(), self.dtype))
        shape = kv.shape
        if len(shape) != 5 or shape[0] != 2 or shape[2:] != self.block_shape:
            raise _errors.invalid("KVOffloader", "expected [2, num_blocks, %d, %d, %d], got %s"
                                  % (*self.block_shape, tuple(kv.shape)))

    def _rows(self, kv, block_ids=None):
        """[2, n, *block_shape] tensor -> (n * 2, block_elems) rows, block-major
        (block i's K then V), as NumPy (bf16 as uint16 bit patterns)."""
        self._check_cache(kv)
        if block_ids is not None:
            kv = kv[:, _block_ids(block_ids, kv.shape[1], "KVOffloader.store")]
        t = kv.transpose(0, 1).contiguous().reshape(-1, self.block_elems).cpu().resolve_neg()
        if self.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return t.numpy().view(_DTYPES[self.dtype])

    _CALIB_BLOCKS = 64  # blocks a calibration trains on and measures (evenly spaced)

    def calibrate(self, layer: int, kv) -> dict:
        """Trains layer `layer`'s IBP codec on the blocks of `kv` ([2, n,
        *block_shape]; at most 64 of them, evenly spaced, when there are
        more) and picks the codec (ibp, exp or raw) that stores those blocks
        in the fewest bytes. Returns the measured sizes (of those blocks)."""
        layer = self._check("KVOffloader.calibrate", layer)
        n = kv.shape[1] if isinstance(kv, torch.Tensor) and kv.dim() == 5 else 0
        if n > self._CALIB_BLOCKS:
            kv = kv[:, torch.as_tensor(np.linspace(0, n - 1, self._CALIB_BLOCKS).round().astype(np.int64))]
        rows = self._rows(kv)
        # chunks of one element: K/V values vary per element, and the chunk
        # sweep would cost 4x the training time for the same ratio
        codec = train(rows, chunk=np.dtype(_DTYPES[self.dtype]).itemsize)
        # one C call per codec: the IBP batch (a block's two rows plus its
        # 12-byte header) and the exponent blocks (one per K/V pair)
        enc = codec.encode(rows)
        sizes = {"raw": rows.nbytes, "ibp": int(enc.offsets[-1]) + 12 * (rows.shape[0] // 2), "exp": 0}
        sigma, nblk = 0.0, rows.shape[0] // 2
        if rows.shape[0]:
            from ..exp import compress_chunks
            flat = rows.reshape(-1)
            if self.dtype == torch.bfloat16:
                flat = torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16)
            sizes["exp"] = int(compress_chunks(flat, 2 * self.block_elems, nthreads=1).offsets[-1])
            ms = ctypes.c_double(0.0)
            _lib.check(_lib.lib.ibp_exp_mean_square(rows.ctypes.data, _EXP_DTYPE[self.dtype], rows.size,
                                                    ctypes.byref(ms)), "ibp_exp_mean_square")
            if ms.value > 0.0:
                sigma = float(np.sqrt(ms.value))
                given = int(compress_chunks(flat, 2 * self.block_elems, sigma=sigma, nthreads=1).offsets[-1])
                if given <= sizes["exp"] * _SIGMA_SLACK:
                    sizes["exp"] = given
                else:
                    sigma = 0.0
        kind = min(sizes, key=lambda k: (sizes[k], k != "raw"))
        self._codec[layer], self._kind[layer] = codec, kind
        self._sigma[layer] = sigma if kind == "exp" else 0.0
        self._exp_block[layer] = sizes["exp"] / nblk if nblk else 0.0
        return dict(sizes, codec=kind, sigma=self._sigma[layer])

    def _layer_arg(self, layer, func) -> int:
        """layer as an int in [0, num_layers) (no negative aliases)."""
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
            raise _errors.invalid(func, "layer must be an integer, not %r" % (layer,))
        if not 0 <= int(layer) < self.num_layers:
            raise _errors.OutOfRangeError("%s: layer %d out of [0, %d)" % (func, int(layer), self.num_layers),
                                          func=func, status=8)
        return int(layer)

    def codec(self, layer: int) -> Optional[str]:
        """The codec layer `layer` stores with (after close too: what it used)."""
        return self._kind[self._layer_arg(layer, "KVOffloader.codec")]

    def ratio(self, layer: int) -> float:
        """Raw bytes / stored bytes of everything this layer stored so far
        (after close too)."""
        layer = self._layer_arg(layer, "KVOffloader.ratio")
        return self._raw[layer] / self._packed[layer] if self._packed[layer] else float("nan")

    # ---- the C orchestration (ibp_kv_stream_t): GPU, host fallback, CPU -----

    def _kv_stream(self, layer):
        """The layer's libibp KV stream (made again when its codec changed)."""
        codec = self._codec[layer] if self._kind[layer] == "ibp" else None
        got = self._kvs.get(layer)
        if got is not None and got[1] is codec:
            return got[0]
        if got is not None:
            self._finish(layer)
            _lib.lib.ibp_kv_stream_free(got[0])
            del self._kvs[layer]
        if codec is None and self._spare is not None:  # CPU path: any layer without a codec takes it
            self._kvs[layer], self._spare = (self._spare, None), None
            return self._kvs[layer][0]
        gpu = self._gpu
        stream = self._torch_stream(layer).cuda_stream if gpu else 0
        out = ctypes.c_void_p()
        flags = 0 if gpu else _HOST_FALLBACK if self._host_fallback else _KV_HOST
        if flags == _HOST_FALLBACK and _cuda.device_count() > 0:
            flags |= _KV_HOST  # a GPU is here: the hook's twin takes the same C calls' CPU path
        with contextlib.ExitStack() as ctx:
            if gpu:
                ctx.enter_context(torch.cuda.device(self.device))  # the codec goes to this device
            c = ctx.enter_context(codec._handle) if codec is not None else None
            st = _lib.lib.ibp_kv_stream_create(c, self._row_bytes, _EXP_DTYPE[self.dtype], flags, stream,
                                               ctypes.byref(out))
        if st == _NO_DEVICE and out.value and flags == _HOST_FALLBACK:
            st = 0  # the fallback was asked for
        _lib.check(st, "ibp_kv_stream_create")
        if not gpu and _lib.lib.ibp_kv_stream_on_device(out.value):
            _lib.lib.ibp_kv_stream_free(out.value)
            raise _errors.invalid("KVOffloader", "_host_fallback is a test hook for machines without a GPU")
        self._kvs[layer] = (out.value, codec)
        return out.value

    def _finish(self, layer):
        """ibp_kv_stream_wait on the layer's stream; a failure is kept for
        wait(layer) to raise (pools may need the pins released first)."""
        got = self._kvs.get(layer)
        if got is None:
            return
        st = _lib.lib.ibp_kv_stream_wait(got[0])
        self._pending.pop(layer, None)
        if st:
            try:
                _lib.check(st, "KVOffloader.wait")
            except _errors.Error as e:
                self._deferred.setdefault(layer, e)

    def _release_workspace(self, layer):
        """The CPU path's calls are synchronous: the layer's libibp stream
        (its workspaces) goes after each call, so memory is one call's
        workspace, not one per layer kept until close. One codec-less
        stream (EXP and RAW blocks) is kept for the next call of any layer
        instead: freeing and faulting in its pages again cost three times
        the codec work (issue 33). Its workspace stays small whatever the
        call: the host path loads straight from the slots, stores EXP
        blocks through a stage per thread, and other blocks in batches of
        about 4 MiB of rows (about 12 MiB at most, all told)."""
        if not self._sync:
            return
        got = self._kvs.pop(layer, None)
        if got is not None:
            if got[1] is None and self._spare is None:
                self._spare = got[0]
            else:
                _lib.lib.ibp_kv_stream_free(got[0])
        self._pending.pop(layer, None)

    def _quiesce(self):
        """Finishes every layer's queued work (before pools are closed)."""
        for layer in list(self._kvs):
            self._finish(layer)

    def _cuda_ctx(self, layer):
        """The layer's torch stream, after the current stream (whose work
        produced or will read the cache), as a context; none on the host."""
        if not self._gpu:
            return contextlib.nullcontext()
        cs = self._torch_stream(layer)
        cs.wait_stream(torch.cuda.current_stream(self.device))
        ctx = contextlib.ExitStack()
        ctx.enter_context(torch.cuda.device(self.device))  # libibp allocates on the current device
        ctx.enter_context(torch.cuda.stream(cs))
        return ctx

    def _torch_stream(self, layer):
        cs = self._streams.get(layer)
        if cs is None:
            cs = self._streams[layer] = torch.cuda.Stream(device=self.device)
        return cs

    @property
    def _gpu(self):
        return self.device.type == "cuda" and not self._host_fallback

    def _contiguous(self, kv_cache, func):
        # a negative view's memory is not negated: the C code gets a copy
        if not kv_cache.is_contiguous() or kv_cache.is_neg():
            if self._sync:  # a copy (load writes its blocks back)
                return kv_cache.resolve_neg().contiguous()
            raise _errors.invalid(func, "the device path needs a contiguous layer cache (not a negative view)")
        if (self._gpu and self.device.index is not None
                and kv_cache.device.index != self.device.index):
            raise _errors.invalid(func, "the cache is on %s, the offloader on %s" % (kv_cache.device, self.device))
        return kv_cache

    def _store_device(self, layer, kv_cache, ids, register):
        """The blocks through the C orchestration; register(kind, seg,
        pool handles, their bytes in all) is called for each run of blocks
        stored."""
        kind = self._kind[layer]
        kv_cache = self._contiguous(kv_cache, "KVOffloader.store")
        s = self._kv_stream(layer)
        if kind == "exp":
            _lib.check(_lib.lib.ibp_kv_stream_set_exp_sigma(s, self._sigma[layer]), "ibp_kv_stream_set_exp_sigma")
        n = len(ids)
        # The block ids, pool handles and sizes go through arrays kept
        # between calls (their addresses too): a store made from on_evict
        # inside this one finds none and makes its own.
        scr, self._scratch = self._scratch, None
        if scr is None or scr.cap < n:
            scr = _Scratch(n)
        bids, hnd, nbytes = scr.arrays
        bids[:n] = ids
        func, nblk, ptr = _lib.lib.ibp_kv_encode_cuda, kv_cache.shape[1], kv_cache.data_ptr()
        code, a_ids, a_hnd, a_nb = _KIND_CODE[kind], scr.ids, scr.hnd, scr.nbytes
        gpu = self._gpu

        def encode(seg, lo, hi):
            pool = self._segments[seg]
            with pool._handle as ph:
                if gpu:
                    with self._cuda_ctx(layer):
                        st = func(s, ph, ptr, nblk, a_ids + 8 * lo, hi - lo, code, a_hnd + 8 * lo, a_nb + 8 * lo)
                else:
                    st = func(s, ph, ptr, nblk, a_ids + 8 * lo, hi - lo, code, a_hnd + 8 * lo, a_nb + 8 * lo)
                err = _lib.last_error() if st else ""
            if not st:
                self._pending[layer] = kv_cache  # read by the queued copies until wait
                register(kind, seg, hnd[lo:hi], int(nbytes[lo:hi].sum()))
            pool._drain()  # on_evict for the victims (registered blocks included)
            return st, err

        try:
            self._encode_runs(n, encode)
        finally:
            self._scratch = scr

    def _encode_runs(self, n, encode):
        """encode(segment, lo, hi) of the store's n blocks: all at once into
        a segment with room (a new one if none has), or under a capacity
        all at once, then after making room, then block by block."""
        if self._capacity is None:
            st, err = _NOMEM, ""
            for seg in self._roomy_segments(n * (self.max_block_bytes + 64)):
                st, err = encode(seg, 0, n)
                if st != _NOMEM:
                    break
            if st == _NOMEM:  # no segment has room (all or nothing): a new one
                need = n * (self.max_block_bytes + 64)
                self._segments.append(self._new_pool(max(_SEGMENT, 16 * self.max_block_bytes, 2 * need)))
                st, err = encode(len(self._segments) - 1, 0, n)
        else:
            # The C call allocates every slot of the batch (its own slots
            # pinned, older blocks evicted as needed) or none; when the pool
            # cannot make room for all at once, block by block, where a block
            # of this store evicted by a later one means it cannot fit.
            st, err = encode(0, 0, n)
            if st == _NOMEM and self._make_room(n * self.max_block_bytes):
                st, err = encode(0, 0, n)  # room made: all at once again
            if st == _NOMEM and n > 1:
                for b in range(n):  # the pool's policy evicts as each block needs
                    st, err = encode(0, b, b + 1)
                    if st or self._own_evicted:
                        break
            if st == _NOMEM or self._own_evicted:
                raise _errors.CapacityError(
                    "KVOffloader.store: %d blocks do not fit capacity_bytes %d (stored nothing)%s"
                    % (n, self._capacity, ": " + err if err else ""), func="KVOffloader.store", detail=err)
        if st:
            raise _errors.from_status(st, "KVOffloader.store", _lib.status_string(st), err)

    def _load_device(self, layer, metas, phs, kv_cache, dst):
        """The blocks through the C orchestration (every one checked first)."""
        user, kv_cache = kv_cache, self._contiguous(kv_cache, "KVOffloader.load")
        s = self._kv_stream(layer)
        n = len(phs)
        hnd = np.array(phs, dtype=np.int64)
        dsts = np.array(dst, dtype=np.int64)
        # blocks of one kind and segment (one store's, or several's): no Python per block
        one = n > 0 and len({(m[1], m[2]) for m in dict(zip(map(id, metas), metas)).values()}) == 1
        if one:
            kinds = np.full(n, _KIND_CODE[metas[0][1]], np.uint8)
            segs = None
            uniq = {metas[0][2]: self._segments[metas[0][2]]}
        else:
            kinds = np.fromiter((_KIND_CODE[m[1]] for m in metas), np.uint8, n)
            segs = [m[2] for m in metas]
            uniq = {seg: self._segments[seg] for seg in set(segs)}
        with contextlib.ExitStack() as stack:
            ptr = {seg: stack.enter_context(p._handle) for seg, p in uniq.items()}
            if one:
                parr = np.full(n, ptr[metas[0][2]], np.uintp)
            else:
                parr = np.array([ptr[g] for g in segs] or [0], np.uintp)
            with self._cuda_ctx(layer):
                st = _lib.lib.ibp_kv_decode_cuda(s, parr.ctypes.data, hnd.ctypes.data, kinds.ctypes.data, n,
                                                 kv_cache.data_ptr(), kv_cache.shape[1], dsts.ctypes.data)
            err = _lib.last_error() if st else ""
        if st == 8:  # IBP_ERR_OUT_OF_RANGE: evicted between our check and the pin
            raise KeyError("KVOffloader: %s" % err)
        if st:
            raise _errors.from_status(st, "KVOffloader.load", _lib.status_string(st), err)
        self._pending[layer] = kv_cache
        if kv_cache is not user:  # the CPU path's copy of a non-contiguous cache
            self._finish(layer)
            idx = torch.as_tensor(dst, dtype=torch.int64)
            user[:, idx] = kv_cache[:, idx]

    # ---- store / load --------------------------------------------------------

    def store(self, layer: int, kv_cache, block_ids) -> List[int]:
        """Compresses blocks `block_ids` of `kv_cache` (the layer's
        [2, num_blocks, *block_shape] cache) into the pool; one handle per
        block. Calibrates on these blocks first if the layer never was.
        With capacity_bytes, a store may evict older blocks (on_evict says
        which), never its own: one that cannot fit raises
        ibp.CapacityError and stores nothing. layer outside [0, num_layers):
        ibp.OutOfRangeError."""
        layer = self._check("KVOffloader.store", layer)
        self._check_cache(kv_cache)
        ids = _block_ids(block_ids, kv_cache.shape[1], "KVOffloader.store")
        if self._kind[layer] is None:
            self.calibrate(layer, kv_cache[:, ids])
        raw_block = 2 * self._row_bytes
        handles, added = [], [0, 0]

        def register(kind, seg, phs, nbytes):
            # whole runs at a time: per-block Python was a fifth of a warm store
            n = len(phs)
            hs = range(self._next, self._next + n)
            self._next += n
            self._entries.put_run(hs, (layer, kind, seg), phs)
            self._raw[layer] += raw_block * n
            self._packed[layer] += nbytes
            added[0] += raw_block * n
            added[1] += nbytes
            handles.extend(hs)

        with self._lock:  # the layer's stream and the pools are shared between calls
            self._own_from, self._own_evicted = self._next, False
            try:
                self._store_device(layer, kv_cache, ids, register)
                if self._sync:
                    self._raise_finished(layer)
                if (self._sigma[layer] and self._kind[layer] == "exp" and handles
                        and added[1] > _DRIFT * self._exp_block[layer] * len(handles)):
                    self._sigma[layer] = 0.0  # the blocks drifted from calibration: measure each again
            except BaseException:
                self.free(handles)  # a failed store keeps nothing
                self._raw[layer] -= added[0]  # nor counts it
                self._packed[layer] -= added[1]
                raise
            finally:
                self._own_from, self._own_evicted = None, False
                self._release_workspace(layer)
        return handles

    def load(self, layer: int, handles: Sequence[int], kv_cache, dst_block_ids) -> None:
        """Decompresses the blocks `handles` into blocks `dst_block_ids` of
        `kv_cache` (bit-exact). Raises KeyError for an evicted or freed handle."""
        layer = self._check("KVOffloader.load", layer)
        self._check_cache(kv_cache)
        dst = _block_ids(dst_block_ids, kv_cache.shape[1], "KVOffloader.load")
        if len(handles) != len(dst):
            raise _errors.invalid("KVOffloader.load", "%d handles for %d destination blocks"
                                  % (len(handles), len(dst)))
        with self._lock:
            metas, phs = self._entries_of(layer, handles)  # every handle checked first
            try:
                self._load_device(layer, metas, phs, kv_cache, dst)
                if self._sync:
                    self._raise_finished(layer)
            finally:
                self._release_workspace(layer)

    def _entries_of(self, layer, handles):
        """([their runs: (layer, kind, segment, ...)], [pool handle]) of the handles (under
        the lock): KeyError for one evicted or freed, InvalidArgumentError
        for one of another layer. Whole lists at a time: loads of many
        blocks are per-block Python at heart."""
        entries = self._entries
        try:
            got = entries._slice(handles)  # one store's blocks: no Python per block
            metas = [got[1]] * len(handles) if got is not None else entries.runs_of(handles)
        except KeyError as e:
            raise KeyError("KVOffloader: handle %s was evicted or freed" % (e.args[0],)) from None
        if (got[1][0] != layer) if got is not None else (set(map(_LAYER, metas)) != {layer} and metas):
            h, m = next((h, m) for h, m in zip(handles, metas) if m[0] != layer)
            raise _errors.invalid("KVOffloader.load", "handle %d belongs to layer %d, not %d" % (h, m[0], layer))
        if got is not None:  # pool handle = handle + the run's offset
            p = handles[0] + got[1][3]
            return metas, np.arange(p, p + len(handles), dtype=np.int64)
        return metas, list(map(operator.add, handles, map(_OFFSET, metas)))

    def free(self, handles: Sequence[int]) -> None:
        """Drops blocks (their pool slots are reused); unknown handles are ignored."""
        self._check("KVOffloader.free")
        with self._lock:
            for seg, phs in self._entries.pop_many(handles).items():  # one C call per segment
                self._segments[seg].remove_many(phs)

    def close(self) -> None:
        """Finishes queued work and frees the pool (every handle becomes
        invalid) and the layers' streams; later calls raise ibp.ClosedError
        but for the descriptions used_bytes (0), codec() and ratio().
        In a fork() child a GPU offloader only forgets them (they are the
        parent's)."""
        if self._closed:
            return
        self._closed = True
        if self._gen is not None and self._gen != fork_generation():
            self._kvs, self._pending, self._segments, self._entries = {}, {}, [], _Blocks()
            return
        with self._lock:
            self._quiesce()
            for s, _ in self._kvs.values():
                _lib.lib.ibp_kv_stream_free(s)
            if self._spare is not None:
                _lib.lib.ibp_kv_stream_free(self._spare)
            self._kvs, self._pending, self._spare = {}, {}, None
            for p in self._segments:
                p.close()
            self._segments, self._entries = [], _Blocks()

    def wait(self, layer: int) -> None:
        """Waits for layer `layer`'s queued stores and loads (device path:
        the layer's stream; the CPU path finishes every call before
        returning). Raises ibp.CorruptError if a loaded row failed to decode
        (that row was left zero)."""
        layer = self._check("KVOffloader.wait", layer)
        with self._lock:
            self._raise_finished(layer)

    def _raise_finished(self, layer):
        self._finish(layer)
        e = self._deferred.pop(layer, None)
        if e is not None:
            raise e

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _restore_offloader(config, layers, blocks):
    """Unpickles a KVOffloader: the same settings, codecs and blocks under
    the same handles (put back oldest first, as a capacity change does)."""
    off = KVOffloader(**config)
    codecs, kinds, raw, packed, nxt = layers[:5]
    off._codec, off._kind, off._raw, off._packed, off._next = list(codecs), list(kinds), list(raw), list(packed), nxt
    if len(layers) > 5:  # pickled before the layer sigma: every block measured
        off._sigma, off._exp_block = list(layers[5]), list(layers[6])
    with off._lock:
        for h, layer, kind, data in blocks:
            try:
                off._put(h, layer, kind, np.ascontiguousarray(data, dtype=np.uint8))
            except _errors.NoMemoryError:
                if off.on_evict is not None:
                    off.on_evict(h)
    return off


def _block_ids(ids, n, func):
    """Block ids as a list of ints, each in [0, n) (no negative wrap-around).
    A list of ints (what vLLM passes) is checked as it is: the tensor round
    trip was most of a one-block call."""
    if type(ids) is list and set(map(type, ids)) <= {int}:  # C-level: a genexpr was 0.3 us an id
        out = ids
    else:
        out = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).tolist()
    if out and (min(out) < 0 or max(out) >= n):
        raise _errors.invalid(func, "block ids must lie in [0, %d)" % n)
    return out

