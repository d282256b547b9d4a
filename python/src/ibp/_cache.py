"""ibp.Cache (the slab cache of compressed rows) and ibp.SlabPool (its
size-class allocator as a pool of variable-size blocks): include/ibp/slab_pool.h.

    cache = ibp.Cache(64 << 20, store=store)           # 64 MiB of slabs
    rows = cache.gather(store, ids)                     # == store.gather(ids)
    rows, evicted = cache.gather(store, ids, return_evicted=True)
    cache.stats()["hits"]

    pool = ibp.SlabPool(1 << 30, max_block_bytes=65536, on_evict=print)
    h = pool.put(b"...")          # handle; evicts policy-chosen victims when full
    data = pool.get(h)            # NumPy uint8 copy; KeyError once evicted/removed
    pool.remove(h)

Both are thread-safe (libibp locks inside; the GIL is released during
calls). The cache lives in host memory, or with device= on a GPU (used by
CudaStore.gather(ids, cache=cache); without a GPU, ibp.NoDeviceError); the
pool's memory is
pinned when libibp has CUDA and a device, else ordinary host memory
(`pool.pinned` says which).
"""

from __future__ import annotations

import ctypes as C
import threading
from typing import Callable, Optional

import numpy as np

from . import _arrays, _errors, _lib
from ._handle import Handle, Owner
from ._structs import (CacheClassStats, CacheOpts, CacheStats, SlabPoolEvictFn, SlabPoolOpts,
                       SlabPoolStats)

lib = _lib.lib
check = _lib.check
P = C.POINTER
c_u64, c_i64, c_vp, c_int, c_uint = C.c_uint64, C.c_int64, C.c_void_p, C.c_int, C.c_uint

_FUNCS = {
    "ibp_cache_opts_default": (None, [P(CacheOpts)]),
    "ibp_cache_create": (c_int, [P(CacheOpts), P(c_vp)]),
    "ibp_cache_free": (None, [c_vp]),
    "ibp_cache_gather": (c_int, [c_vp, c_vp, c_vp, c_u64, c_vp, c_vp, c_vp, c_uint, c_vp]),
    "ibp_cache_gather_cuda": (c_int, [c_vp, c_vp, c_vp, c_u64, c_vp, c_vp, c_vp, c_uint, c_vp]),
    "ibp_cache_gather_evict": (c_int, [c_vp, c_vp, c_vp, c_u64, c_vp, c_vp, c_vp, c_uint, c_vp, c_u64,
                                       P(c_u64), c_vp]),
    "ibp_cache_prefetch_evict": (c_int, [c_vp, c_vp, c_vp, c_u64, c_vp, c_u64, P(c_u64), c_vp]),
    "ibp_cache_preload": (c_int, [c_vp, c_vp, c_vp, c_u64, c_vp]),
    "ibp_cache_invalidate": (c_int, [c_vp, c_vp, c_u64, c_vp]),
    "ibp_cache_stats": (c_int, [c_vp, P(CacheStats), c_int]),
    "ibp_cache_class_stats": (c_int, [c_vp, c_uint, P(CacheClassStats)]),
    "ibp_slab_pool_opts_default": (None, [P(SlabPoolOpts)]),
    "ibp_slab_pool_create": (c_int, [P(SlabPoolOpts), P(c_vp)]),
    "ibp_slab_pool_free": (None, [c_vp]),
    "ibp_slab_pool_put": (c_int, [c_vp, c_vp, c_u64, P(c_i64)]),
    "ibp_slab_pool_get": (c_int, [c_vp, c_i64, c_vp, c_u64, P(c_u64)]),
    "ibp_slab_pool_size": (c_int, [c_vp, c_i64, P(c_u64)]),
    "ibp_slab_pool_remove": (c_int, [c_vp, c_i64]),
    "ibp_slab_pool_remove_many": (c_int, [c_vp, c_vp, c_u64, c_vp]),
    "ibp_slab_pool_pin": (c_int, [c_vp, c_i64, P(c_vp), P(c_u64)]),
    "ibp_slab_pool_unpin": (c_int, [c_vp, c_vp]),
    "ibp_slab_pool_stats": (c_int, [c_vp, P(SlabPoolStats), c_int]),
    "ibp_slab_pool_class_stats": (c_int, [c_vp, c_uint, P(CacheClassStats)]),
}
for _name, (_res, _args) in _FUNCS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

POLICIES = {"default": 0, "static": 1, "clock": 2, "s3fifo": 3, "lru": 4}
_POLICY_NAMES = {v: k for k, v in POLICIES.items() if k != "default"}
_CACHE_UNCOMPRESSED, _CACHE_NO_RAW, _NO_ADMIT = 1, 2, 1
_POOL_HOST = 1
_OUT_OF_RANGE = 8


def _policy(func, policy):
    if policy not in POLICIES:
        raise _errors.invalid(func, "policy must be one of %s, not %r" % (", ".join(POLICIES), policy))
    return POLICIES[policy]


def _size(func, name, v, lo=0):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
        raise _errors.invalid(func, "%s must be an integer >= %d, not %r" % (name, lo, v))
    return int(v)


def _struct_dict(st) -> dict:
    return {name: int(getattr(st, name)) for name, _ in st._fields_}


def _stats(handle, fname, struct, reset) -> dict:
    """fname(h, &st, reset) (ibp_cache_stats, ibp_slab_pool_stats) as a dict."""
    st = struct()
    with handle as h:
        check(getattr(lib, fname)(h, C.byref(st), 1 if reset else 0), fname)
    return _struct_dict(st)


def _class_stats(handle, fname, n) -> list:
    """fname(h, i, &cs) for the n size classes, as dicts."""
    res = []
    with handle as h:
        for i in range(n):
            cs = CacheClassStats()
            check(getattr(lib, fname)(h, i, C.byref(cs)), fname)
            res.append(_struct_dict(cs))
    return res


class Cache(Owner):
    """A slab cache of compressed rows of one store (ibp_cache_*): hot rows
    kept compressed in size-classed slots, so the same bytes hold about
    `ratio` times more rows than a cache of decoded rows.

    Cache(capacity_bytes, row_bytes=None, *, store=None, policy="s3fifo",
    slab_bytes=0, class_step=0, raw_threshold=0.95, uncompressed=False,
    no_raw=False, max_batch=0, max_callers=0, device=None). row_bytes
    defaults to the store's. A cache binds to the first store it serves;
    another store is refused until invalidate() empties it.

    device (an int, or a torch CUDA device): a GPU cache on that device,
    used with CudaStore.gather(ids, cache=cache) (not with gather() here);
    without a usable GPU, ibp.NoDeviceError."""

    def __init__(self, capacity_bytes: int, row_bytes: Optional[int] = None, *, store=None,
                 policy: str = "s3fifo", slab_bytes: int = 0, class_step: int = 0,
                 raw_threshold: float = 0.95, uncompressed: bool = False, no_raw: bool = False,
                 max_batch: int = 0, max_callers: int = 0, device=None):
        func = "ibp.Cache"
        if row_bytes is None:
            if store is None:
                raise _errors.invalid(func, "give row_bytes or store")
            row_bytes = store.row_bytes
        o = CacheOpts()
        lib.ibp_cache_opts_default(C.byref(o))
        o.capacity_bytes = _size(func, "capacity_bytes", capacity_bytes, 1)
        o.row_bytes = _size(func, "row_bytes", row_bytes, 1)
        o.slab_bytes = _size(func, "slab_bytes", slab_bytes)
        o.class_step = _size(func, "class_step", class_step)
        o.raw_threshold = float(raw_threshold)
        o.max_batch = _size(func, "max_batch", max_batch)
        o.max_callers = _size(func, "max_callers", max_callers)
        o.policy = _policy(func, policy)
        o.flags = (_CACHE_UNCOMPRESSED if uncompressed else 0) | (_CACHE_NO_RAW if no_raw else 0)
        self.device = None
        if device is not None:
            index = getattr(device, "index", device)
            if getattr(device, "type", "cuda") != "cuda" or isinstance(index, bool) or not isinstance(index, int) \
                    or index < 0:
                raise _errors.invalid(func, "device must be a CUDA device index or torch.device('cuda', i), "
                                      "not %r" % (device,))
            o.device = index
            self.device = index
        out = c_vp()
        check(lib.ibp_cache_create(C.byref(o), C.byref(out)), "ibp_cache_create")
        self.capacity_bytes, self.row_bytes = int(o.capacity_bytes), int(o.row_bytes)
        self.policy = "s3fifo" if policy == "default" else policy
        self._handle = Handle(out.value, lib.ibp_cache_free, "ibp.Cache")

    def __repr__(self):
        return "<ibp.Cache %d bytes, policy %s%s>" % (self.capacity_bytes, self.policy,
                                                     ", closed" if self.closed else "")

    def gather(self, store, ids, out=None, *, admit: bool = True, return_evicted: bool = False,
               max_evict: Optional[int] = None):
        """Rows `ids` of `store` (as store.gather: shape ids.shape + row
        shape, torch ids give a torch tensor), served from the cache or the
        store; misses are admitted unless admit=False. return_evicted=True
        also returns the ids this call evicted (int64 array, in eviction
        order); max_evict bounds them (misses that would need more are not
        admitted). Raises ibp.OutOfRangeError for an id outside the store."""
        func = "Cache.gather"
        ids_arr, kind = _arrays.as_ids(ids, func)
        shape = ids_arr.shape + store._row_shape
        if out is None:
            res, ptr = _arrays.empty(shape, store._code, kind)
        else:
            ptr = _arrays.check_out(out, shape, store._code, func).ptr
            res = out
        n = ids_arr.size
        ev, cap, nev = self._evict_buf(return_evicted, max_evict, n, func)
        sh = store._acquire()
        try:
            with self._handle as h:
                st = lib.ibp_cache_gather_evict(h, sh, ids_arr.ctypes.data, n, ptr, None, None,
                                                0 if admit else _NO_ADMIT,
                                                ev.ctypes.data if ev is not None else None, cap,
                                                C.byref(nev), None)
        finally:
            store._release()
        check(st, "ibp_cache_gather")
        if out is None and kind != "torch" and store._code == 10:
            res = _arrays.wrap(res, 10, "numpy")
        if return_evicted:
            return res, self._evicted(ev, nev, kind)
        return res

    def _evict_buf(self, want, max_evict, n, func):
        nev = c_u64(0)
        if not want:
            if max_evict is not None:
                raise _errors.invalid(func, "max_evict needs return_evicted=True")
            return None, 0, nev
        if max_evict is None:
            # Evictions are bounded by what the cache can hold, not by the batch.
            st = self.stats()
            # (the automatic class ladder starts at 32-byte slots, below class_step)
            cap = st["nslabs"] * max(1, st["slab_bytes"] // max(1, min(st["class_step"], 32, self.row_bytes))) + n
        else:
            cap = _size(func, "max_evict", max_evict)
        return np.empty(max(cap, 1), dtype=np.int64), cap, nev

    @staticmethod
    def _evicted(ev, nev, kind):
        e = ev[:nev.value].copy()
        if kind == "torch":
            return _arrays._torch().from_numpy(e)
        return e

    def prefetch(self, store, ids, *, return_evicted: bool = False, max_evict: Optional[int] = None):
        """Admits rows `ids` without returning them; optionally returns the
        ids evicted (as gather)."""
        func = "Cache.prefetch"
        ids_arr, kind = _arrays.as_ids(ids, func)
        ev, cap, nev = self._evict_buf(return_evicted, max_evict, ids_arr.size, func)
        sh = store._acquire()
        try:
            with self._handle as h:
                st = lib.ibp_cache_prefetch_evict(h, sh, ids_arr.ctypes.data, ids_arr.size,
                                                  ev.ctypes.data if ev is not None else None, cap,
                                                  C.byref(nev), None)
        finally:
            store._release()
        check(st, "ibp_cache_prefetch")
        if return_evicted:
            return self._evicted(ev, nev, kind)
        return None

    def preload(self, store, score) -> None:
        """Static fill: rows in decreasing score (one float per row of the
        store) while they fit."""
        sc = np.ascontiguousarray(np.asarray(score, dtype=np.float32).reshape(-1))
        sh = store._acquire()
        try:
            with self._handle as h:
                st = lib.ibp_cache_preload(h, sh, sc.ctypes.data, sc.size, None)
        finally:
            store._release()
        check(st, "ibp_cache_preload")

    def invalidate(self, ids=None) -> None:
        """Drops rows `ids`; None drops everything and unbinds the store."""
        if ids is None:
            ptr, n = None, 0  # NULL ids: everything
        else:
            arr, _ = _arrays.as_ids(ids, "Cache.invalidate")
            if arr.size == 0:
                return  # (NULL with n = 0 would empty the cache)
            ptr, n = arr.ctypes.data, arr.size
        with self._handle as h:
            st = lib.ibp_cache_invalidate(h, ptr, n, None)
        check(st, "ibp_cache_invalidate")

    def stats(self, reset: bool = False) -> dict:
        """Counters and state (ibp_cache_stats_t) as a dict."""
        return _stats(self._handle, "ibp_cache_stats", CacheStats, reset)

    def class_stats(self) -> list:
        """One dict per size class (the last is the raw class)."""
        return _class_stats(self._handle, "ibp_cache_class_stats", self.stats()["nclasses"])



class SlabPool(Owner):
    """A pool of variable-size blocks on the cache's size-class allocator
    (ibp_slab_pool_*): capacity in bytes, handles 0, 1, 2, ... never reused,
    freed slots reused, and when a block does not fit the policy evicts
    unpinned victims of its size class; on_evict(handle) is called for each
    (after the call that evicted them returns, outside libibp's lock, so it
    may use the pool). The memory is pinned host memory when libibp has CUDA
    and a device (`pinned`), else ordinary host memory; pinned=False asks for
    host memory.

    SlabPool(capacity_bytes, max_block_bytes, *, policy="s3fifo",
    slab_bytes=0, class_step=0, on_evict=None, pinned=True)"""

    def __init__(self, capacity_bytes: int, max_block_bytes: int, *, policy: str = "s3fifo",
                 slab_bytes: int = 0, class_step: int = 0,
                 on_evict: Optional[Callable[[int], None]] = None, pinned: bool = True):
        func = "ibp.SlabPool"
        o = SlabPoolOpts()
        lib.ibp_slab_pool_opts_default(C.byref(o))
        o.capacity_bytes = _size(func, "capacity_bytes", capacity_bytes, 1)
        o.max_block_bytes = _size(func, "max_block_bytes", max_block_bytes, 1)
        o.slab_bytes = _size(func, "slab_bytes", slab_bytes)
        o.class_step = _size(func, "class_step", class_step)
        o.policy = _policy(func, policy)
        o.flags = 0 if pinned else _POOL_HOST
        # The C callback only records the victims (it runs under the pool's
        # lock); on_evict runs once per victim after a put returns, outside
        # the lock (with several threads putting, on any one of them).
        self._victims = []
        self._vlock = threading.Lock()
        victims, vlock = self._victims, self._vlock

        def _record(user, handle, data, length):
            with vlock:
                victims.append(int(handle))

        self._cb = SlabPoolEvictFn(_record)  # kept alive with the pool
        o.on_evict = self._cb
        out = c_vp()
        check(lib.ibp_slab_pool_create(C.byref(o), C.byref(out)), "ibp_slab_pool_create")
        self.on_evict = on_evict
        self.capacity_bytes, self.max_block_bytes = int(o.capacity_bytes), int(o.max_block_bytes)
        self.policy = "s3fifo" if policy == "default" else policy
        self._handle = Handle(out.value, lib.ibp_slab_pool_free, "ibp.SlabPool")
        self.pinned = bool(self.stats()["pinned_memory"])

    def __repr__(self):
        return "<ibp.SlabPool %d bytes, blocks up to %d, policy %s, %s>" % (
            self.capacity_bytes, self.max_block_bytes, self.policy, "pinned" if self.pinned else "host memory")

    def _drain(self) -> list:
        with self._vlock:
            got = self._victims[:]
            del self._victims[:]
        if self.on_evict is not None:
            for hnd in got:
                self.on_evict(hnd)
        return got

    def put(self, data) -> int:
        """Stores `data` (bytes, or any array: its raw bytes) as a new
        block; returns its handle. Evicts victims when full (on_evict is
        called for each). Raises ibp.NoMemoryError when nothing can make
        room (every candidate pinned), ValueError above max_block_bytes."""
        if type(data) is np.ndarray and data.flags.c_contiguous:
            buf = data.reshape(-1).view(np.uint8)
        elif isinstance(data, (bytes, bytearray, memoryview)):
            buf = np.frombuffer(data, dtype=np.uint8)
        else:
            host = _arrays.as_host(data, "SlabPool.put")
            buf = host.np.reshape(-1).view(np.uint8)
        hnd = c_i64(-1)
        with self._handle as h:
            st = lib.ibp_slab_pool_put(h, buf.ctypes.data if buf.size else None, buf.size, C.byref(hnd))
        if st:
            _lib.check(st, "ibp_slab_pool_put")
        self._drain()
        return int(hnd.value)

    def put_many(self, blocks) -> list:
        """put() of each block; returns the handles."""
        return [self.put(b) for b in blocks]

    def get(self, handle: int, out=None) -> np.ndarray:
        """A copy of block `handle` (NumPy uint8), or into `out` (a
        writable uint8 array of at least its length; the filled prefix is
        returned). Raises KeyError (ibp.MissingBlockError, also an
        ibp.OutOfRangeError) when the block was evicted or removed."""
        with self._handle as h:
            n = c_u64(0)
            st = lib.ibp_slab_pool_size(h, int(handle), C.byref(n))
            if st == _OUT_OF_RANGE:
                raise _missing(handle)
            dst = np.empty(n.value, dtype=np.uint8) if out is None else out
            if dst.dtype != np.uint8 or not dst.flags.c_contiguous or not dst.flags.writeable:
                raise _errors.invalid("SlabPool.get", "out= must be a writable C-contiguous uint8 array")
            st = lib.ibp_slab_pool_get(h, int(handle), dst.ctypes.data if dst.size else None, dst.size,
                                       C.byref(n))
        if st == _OUT_OF_RANGE:
            raise _missing(handle)  # evicted between the two calls
        check(st, "ibp_slab_pool_get")
        return dst[:n.value]

    def size(self, handle: int) -> int:
        """Length of block `handle`; KeyError when there is none."""
        n = c_u64(0)
        with self._handle as h:
            st = lib.ibp_slab_pool_size(h, int(handle), C.byref(n))
        if st == _OUT_OF_RANGE:
            raise _missing(handle)
        check(st, "ibp_slab_pool_size")
        return int(n.value)

    def __contains__(self, handle) -> bool:
        try:
            self.size(handle)
            return True
        except KeyError:
            return False

    def __len__(self) -> int:
        return self.stats()["blocks"]

    def _pin(self, handle: int):
        """Pins a block (it cannot be evicted until _unpin; a use for the
        policy); the pointer to give _unpin."""
        ptr, n = C.c_void_p(), _lib.c_u64()
        with self._handle as h:
            check(lib.ibp_slab_pool_pin(h, int(handle), C.byref(ptr), C.byref(n)), "ibp_slab_pool_pin")
        return ptr.value

    def _unpin(self, ptr) -> None:
        with self._handle as h:
            check(lib.ibp_slab_pool_unpin(h, ptr), "ibp_slab_pool_unpin")

    def remove(self, handle: int) -> None:
        """Frees block `handle` (its slot is reused); KeyError when there is none."""
        with self._handle as h:
            st = lib.ibp_slab_pool_remove(h, int(handle))
        if st == _OUT_OF_RANGE:
            raise _missing(handle)
        check(st, "ibp_slab_pool_remove")

    def remove_many(self, handles) -> None:
        """remove() of each block, in one call: those present are freed
        even when some are not, then KeyError names the first missing one."""
        arr = np.ascontiguousarray(handles, dtype=np.int64).reshape(-1)
        with self._handle as h:
            st = lib.ibp_slab_pool_remove_many(h, arr.ctypes.data if arr.size else None, arr.size, None)
        if st == _OUT_OF_RANGE:
            raise MissingBlockError("SlabPool.remove_many: %s" % _lib.last_error(), func="SlabPool.remove_many",
                                    status=_OUT_OF_RANGE)
        check(st, "ibp_slab_pool_remove_many")

    def stats(self, reset: bool = False) -> dict:
        """Counters and state (ibp_slab_pool_stats_t) as a dict."""
        return _stats(self._handle, "ibp_slab_pool_stats", SlabPoolStats, reset)

    def _free_bytes(self) -> int:
        """capacity_bytes - slot_bytes_used of stats(), without the dict
        (a store's choice of segment asks it of every segment)."""
        st = SlabPoolStats()
        with self._handle as h:
            check(lib.ibp_slab_pool_stats(h, C.byref(st), 0), "ibp_slab_pool_stats")
        return st.capacity_bytes - st.slot_bytes_used

    def class_stats(self) -> list:
        """One dict per size class (the last holds the largest blocks)."""
        return _class_stats(self._handle, "ibp_slab_pool_class_stats", self.stats()["nclasses"])



class MissingBlockError(_errors.OutOfRangeError, KeyError):
    """No such block in the pool (evicted, removed or never stored): an
    ibp.OutOfRangeError that is also a KeyError."""

    def __str__(self):
        return Exception.__str__(self)  # not KeyError's repr() of the message


MissingBlockError.__module__ = "ibp"


def _missing(handle):
    return MissingBlockError("SlabPool: no block %d (evicted, removed or never stored)" % int(handle),
                             func="SlabPool", status=_OUT_OF_RANGE)
