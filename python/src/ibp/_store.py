"""ibp.pack, ibp.open and ibp.Store: `.ibp` containers from Python."""

from __future__ import annotations

import builtins
import contextlib
import ctypes as C
import mmap as _mmap
import os
import sys
import tempfile

import numpy as np

from . import _arrays, _errors, _lib
from ._handle import Handle, Owner
from ._impl import ImplMixin

lib = _lib.lib
check = _lib.check
builtins_open = builtins.open  # `open` below is ibp.open

_I64 = np.dtype(np.int64)
_ndarray = np.ndarray
_np_empty = np.empty
_gather = lib.ibp_store_gather
_T_I64 = object()  # torch.int64 once torch is seen (a sentinel no dtype is, until then)
_TENSOR = None


def _torch():
    return _arrays._torch()


def _torch_tensor_type():
    """torch.Tensor once a program has imported torch, else a type nothing is
    (this package never imports torch itself)."""
    global _TENSOR, _T_I64
    if _TENSOR is None:
        t = _arrays._torch()
        if t is None:
            return _NoTensor
        _TENSOR, _T_I64 = t.Tensor, t.int64
    return _TENSOR


class _NoTensor:
    pass
_addressof = C.addressof
_byte_from_buffer = C.c_byte.from_buffer


def _ptr(a: np.ndarray) -> int:
    """Data address of a C-contiguous array; 4x cheaper than a.ctypes.data
    for writable, non-empty arrays (the common case of a gather)."""
    try:
        return _addressof(_byte_from_buffer(a))
    except (TypeError, ValueError, BufferError):  # read-only or empty
        return a.ctypes.data


def _raise_gather(st):
    check(st, "ibp_store_gather")


IBP_OPEN_READ = 0
IBP_OPEN_MMAP = 1
IBP_OPEN_VERIFY = 2
IBP_OPEN_TRUSTED = 4

CODEC_NAMES = {1: "ibp", 2: "exp", 3: "fp8", 4: "exp-rows"}
LAYOUTS = {"packed": 0, "inplace": 1}
_EXP_TABLES = {"sigma": 0, "hist": 1, "histogram": 1, "rans": 3}
_FP8_FORMATS = {"e4m3": 0, "e5m2": 1}

_IBP_OPTS = {"chunk", "threshold", "sample", "clusters", "seed", "layout", "xval"}
_EXP_OPTS = {"exp_table", "exp_sigma", "block_rows"}
_FP8_OPTS = {"fp8_format", "fp8_block", "hadamard", "adaptive", "block_rows"}
_EXP_ROWS_OPTS = frozenset()  # one table for the tensor, rows on their own: nothing to choose
_CODEC_OPTS = {"ibp": _IBP_OPTS, "exp": _EXP_OPTS, "fp8": _FP8_OPTS, "exp-rows": _EXP_ROWS_OPTS}
_COMMON = {"dtype", "nthreads", "lossy"}


def _int_opt(func, name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _errors.invalid(func, "%s must be an integer, not %r" % (name, v))
    v = int(v)
    if not lo <= v <= hi:
        raise _errors.invalid(func, "%s=%d is outside [%d, %d]" % (name, v, lo, hi))
    return v


def train_opts(func, chunk="auto", threshold="auto", sample=None, clusters=1, seed=None,
               nthreads=0, xval=None):
    """An ibp_train_opts_t from the Python options (the CLI's names)."""
    o = _lib.TrainOpts()
    lib.ibp_train_opts_default(C.byref(o))
    if chunk not in ("auto", None):
        if chunk not in (1, 2, 4, 8) or isinstance(chunk, bool):
            raise _errors.invalid(func, "chunk must be 1, 2, 4, 8 or 'auto', not %r" % (chunk,))
        o.chunk_bytes = int(chunk)
    if threshold not in ("auto", None):
        try:
            t = float(threshold)
        except (TypeError, ValueError):
            raise _errors.invalid(func, "threshold must be a number or 'auto'") from None
        if not 0.5 <= t <= 1.0:
            raise _errors.invalid(func, "threshold=%r is outside [0.5, 1]" % (threshold,))
        o.threshold = t
    if sample not in ("auto", None):
        try:
            f = float(sample)
        except (TypeError, ValueError):
            raise _errors.invalid(func, "sample must be a fraction in (0, 1] or 'auto'") from None
        if not 0.0 < f <= 1.0:
            raise _errors.invalid(func, "sample=%r is outside (0, 1]" % (sample,))
        o.sample = f
    if clusters == "auto":
        o.clusters = 0
    else:
        o.clusters = _int_opt(func, "clusters", clusters, 1, 64)
    if seed is not None:
        o.seed = _int_opt(func, "seed", seed, 0, (1 << 64) - 1)
    o.nthreads = _int_opt(func, "nthreads", nthreads, 0, 1 << 20)
    if xval is not None:
        o.xval = _int_opt(func, "xval", int(xval) if isinstance(xval, bool) else xval, 0, 2)
    return o


def _shape_arg(h):
    shape = (_lib.c_u64 * max(len(h.shape), 1))(*h.shape)
    return shape


def _pack_object(path, h, codec, opts, func):
    """pack(codec=<a codec object>): ibp.Codec (trained: its tables, no
    training here), or ibp.codec("exp"/"fp8") (their options)."""
    from ._codec import Codec
    from ._codecs import ExpCodec, Fp8Codec
    if isinstance(codec, Codec):
        bad = sorted(set(opts) - {"layout", "nthreads", "dtype"})
        if bad:
            raise _errors.invalid(func, "option(s) %s do not apply to a trained ibp.Codec" % ", ".join(bad))
        layout = opts.get("layout", "packed")
        if layout not in LAYOUTS:
            raise _errors.invalid(func, "layout must be 'packed' or 'inplace', not %r" % (layout,))
        if len(h.shape) == 0:
            raise _errors.invalid(func, "a 0-dimensional array has no rows")
        nthreads = _int_opt(func, "nthreads", opts.get("nthreads", 0), 0, 1 << 20)
        with codec._handle as c:
            check(lib.ibp_pack_with_codec(os.fsencode(path), c, h.ptr, h.code, len(h.shape), _shape_arg(h),
                                          LAYOUTS[layout], nthreads), "ibp_pack_with_codec")
        return
    if isinstance(codec, (ExpCodec, Fp8Codec)):
        bad = sorted(set(opts) - {"block_rows", "nthreads", "dtype"})
        if bad:
            raise _errors.invalid(func, "option(s) %s do not apply to a codec object (give them to "
                                  "ibp.codec)" % ", ".join(bad))
        o = codec.options
        more = dict(opts)
        if isinstance(codec, ExpCodec):
            more.update(exp_table=o["table"], exp_sigma=o["sigma"])
            _pack_to(path, h, "exp", more, func)
        else:
            more.update(fp8_format=o["format"], fp8_block=o["block"], hadamard=o["hadamard"],
                        adaptive=o["adaptive"], lossy=True)
            _pack_to(path, h, "fp8", more, func)
        return
    raise _errors.invalid(func, "codec must be 'ibp', 'exp', 'exp-rows', 'fp8' or a codec object (ibp.codec), "
                          "not %s" % type(codec).__name__)


def _pack_to(path: str, h: _arrays.HostArray, codec, opts: dict, func: str) -> None:
    if not isinstance(codec, str):
        return _pack_object(path, h, codec, opts, func)
    if codec not in _CODEC_OPTS:
        raise _errors.invalid(func, "codec must be 'ibp', 'exp', 'exp-rows' or 'fp8', not %r" % (codec,))
    allowed = _COMMON | _CODEC_OPTS[codec]
    bad = sorted(set(opts) - allowed)
    if bad:
        raise _errors.invalid(func, "option(s) %s do not apply to codec %r" % (", ".join(bad), codec))
    if codec == "fp8" and opts.get("lossy") is not True:
        raise _errors.invalid(func, "codec 'fp8' is lossy: pass lossy=True to accept it")
    if len(h.shape) == 0:
        raise _errors.invalid(func, "a 0-dimensional array has no rows")
    nthreads = opts.get("nthreads", 0)
    bpath = os.fsencode(path)
    ndim = len(h.shape)
    shape = _shape_arg(h)
    if codec == "ibp":
        o = train_opts(func, opts.get("chunk", "auto"), opts.get("threshold", "auto"),
                       opts.get("sample"), opts.get("clusters", 1), opts.get("seed"), nthreads,
                       opts.get("xval"))
        layout = opts.get("layout", "packed")
        if layout not in LAYOUTS:
            raise _errors.invalid(func, "layout must be 'packed' or 'inplace', not %r" % (layout,))
        check(lib.ibp_pack(bpath, h.ptr, h.code, ndim, shape, C.byref(o), LAYOUTS[layout]), "ibp_pack")
        return
    if codec == "exp-rows":
        nthreads = _int_opt(func, "nthreads", nthreads, 0, 1 << 20)
        check(lib.ibp_pack_exp_rows(bpath, h.ptr, h.code, ndim, shape, nthreads), "ibp_pack_exp_rows")
        return
    block_rows = _int_opt(func, "block_rows", opts.get("block_rows", 0), 0, (1 << 63) - 1)
    if codec == "exp":
        o = exp_opts(func, opts.get("exp_table", "sigma"), nthreads, opts.get("exp_sigma", 0.0))
        check(lib.ibp_pack_exp(bpath, h.ptr, h.code, ndim, shape, C.byref(o), block_rows),
              "ibp_pack_exp")
    else:
        o = fp8_opts(func, opts.get("fp8_format", "e4m3"), opts.get("fp8_block", 256),
                     opts.get("hadamard", True), opts.get("adaptive", True), nthreads)
        check(lib.ibp_pack_fp8(bpath, h.ptr, h.code, ndim, shape, C.byref(o), block_rows),
              "ibp_pack_fp8")


def exp_opts(func, table="sigma", nthreads=0, sigma=0.0):
    o = _lib.ExpOpts()
    lib.ibp_exp_opts_default(C.byref(o))
    if table not in _EXP_TABLES:
        raise _errors.invalid(func, "exp table must be 'sigma', 'hist' or 'rans', not %r" % (table,))
    o.table_mode = _EXP_TABLES[table]
    o.sigma = float(sigma)
    o.nthreads = _int_opt(func, "nthreads", nthreads, 0, 1 << 20)
    return o


def fp8_opts(func, fmt="e4m3", block=256, hadamard=True, adaptive=True, nthreads=0):
    o = _lib.Fp8Opts()
    lib.ibp_fp8_opts_default(C.byref(o))
    if fmt not in _FP8_FORMATS:
        raise _errors.invalid(func, "fp8 format must be 'e4m3' or 'e5m2', not %r" % (fmt,))
    o.format = _FP8_FORMATS[fmt]
    o.block = _int_opt(func, "fp8 block", block, 0, 1 << 31)
    o.hadamard = 1 if hadamard else 0
    o.adaptive = 1 if adaptive else 0
    o.nthreads = _int_opt(func, "nthreads", nthreads, 0, 1 << 20)
    return o


def pack(array, path, codec="ibp", **opts) -> str:
    """Writes `array` (rows = dimension 0) to the container file `path`.

    codec "ibp" (default; lossless, any dtype), "exp" (lossless exponent
    codec in blocks of rows; bfloat16/float16/float32), "exp-rows" (the
    exponent codec row by row: lossless, bfloat16/float16/float32, one
    exponent table for the tensor and every row decoded on its own in a few
    ns; the codec for random gathers and embedding bags) or "fp8" (LOSSY:
    needs lossy=True). Options, as the CLI's `ibp pack`: ibp: chunk (1, 2,
    4, 8, "auto"), threshold ([0.5, 1] or "auto"), sample ((0, 1] or
    "auto"), clusters (1..64 or "auto"), seed, layout ("packed" or
    "inplace"), xval (0, 1, 2); exp: exp_table ("sigma", "hist" or "rans"),
    block_rows; exp-rows: none of its own; fp8: fp8_format ("e4m3" or
    "e5m2"), fp8_block (16..4096, power of two), hadamard, adaptive,
    block_rows; all: dtype="bf16" (read 16-bit integers as bfloat16 bit
    patterns), nthreads (0 = all CPUs). An option of another codec raises
    ibp.InvalidArgumentError. Returns `path`.

    codec may also be a codec object (ibp.codec): a trained ibp.Codec is
    used as it is (no training; options layout, nthreads), an "exp" or
    "fp8" codec brings its own options (here only block_rows, nthreads).
    """
    dtype = opts.get("dtype")
    if dtype is None and not isinstance(codec, str) and hasattr(codec, "options"):
        dtype = codec.options.get("dtype")
    h = _arrays.as_host(array, "ibp.pack", dtype=dtype)
    _pack_to(os.fspath(path), h, codec, opts, "ibp.pack")
    return path


def open(path, verify=True, *, mmap: bool = False) -> "Store":  # noqa: A001
    """Opens the container at `path` as a Store.

    The header, section table, metadata and row index are always validated.
    verify=True (the default) also checks every payload checksum, so that
    every later read returns the bytes the writer wrote or raises
    ibp.CorruptError, never wrong data (libibp's "verified reads");
    verify="full" also decodes every row or block once before returning
    (ibp_container_verify); verify=False skips the payload checksums, for
    files already verified once: reads then still never leave the file, but
    a damaged payload may decode to wrong values. mmap=True maps the file
    instead of reading it into memory (the file must not change while open).
    """
    if verify == "full":
        vflags = IBP_OPEN_VERIFY
    elif verify is True:
        vflags = 0
    elif verify is False:
        vflags = IBP_OPEN_TRUSTED
    else:
        raise _errors.invalid("ibp.open", "verify must be True, False or 'full', not %r" % (verify,))
    flags = (IBP_OPEN_MMAP if mmap else IBP_OPEN_READ) | vflags
    path = os.fspath(path)
    out = _lib.c_vp()
    check(lib.ibp_store_open(os.fsencode(path), flags, C.byref(out)), "ibp_store_open")
    return Store._wrap(out.value, path, flags=flags)


def _reopen(path, flags):
    """Unpickles a store backed by a file: opened again with the same flags,
    so its checksums are verified again unless it was opened trusted."""
    out = _lib.c_vp()
    check(lib.ibp_store_open(os.fsencode(path), flags, C.byref(out)), "ibp_store_open")
    return Store._wrap(out.value, path, flags=flags)


def _image_buffer(size: int):
    """Page-aligned anonymous memory for a container image, with huge pages
    advised as libibp does for files it reads (IBP_NO_HUGEPAGES=1: none)."""
    m = _mmap.mmap(-1, max(size, 1), flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
    no = os.environ.get("IBP_NO_HUGEPAGES", "")
    if size >= (2 << 20) and (not no or no == "0") and hasattr(m, "madvise") \
            and hasattr(_mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(_mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # advice only
    return m


def _from_image(m, size: int, flags: int = IBP_OPEN_READ) -> "Store":
    """A store over the container image in `m` (an _image_buffer), which it
    keeps alive until closed. Its errors name "<memory>"."""
    addr = C.addressof(C.c_char.from_buffer(m))
    c = _lib.c_vp()
    check(lib.ibp_container_open_memory(addr, size, flags, C.byref(c)), "ibp_container_open_memory")
    out = _lib.c_vp()
    st = lib.ibp_store_from_container(c.value, C.byref(out))
    if st:
        lib.ibp_container_close(c.value)
        check(st, "ibp_store_from_container")
    return Store._wrap(out.value, None, image=m)


def _store_from_image(data) -> "Store":
    """Unpickles a store built from an array: its compressed bytes, checked
    again (header, tables, payload checksums) as any container image."""
    return Store.from_bytes(data)


def pickled_bytes(arr: np.ndarray, protocol: int):
    """`arr` (uint8) as pickled bytes travel best: pickle protocol 2 (what
    torch.save uses) writes a NumPy array's bytes as text, half again as
    large, but a torch tensor as raw bytes, so there a tensor when torch is
    loaded."""
    t = sys.modules.get("torch") if protocol < 3 else None
    return t.from_numpy(arr) if t is not None else arr


class Store(Owner, ImplMixin):
    """A read-only store of compressed rows (a `.ibp` container) with gathers.

    Made by ibp.open(path) or Store.from_array(array). Thread-safe: any
    number of threads may gather at once (the GIL is released inside
    libibp); close() waits for running gathers.
    """

    __slots__ = ("_handle", "path", "shape", "dtype", "nrows", "row_bytes", "codec", "lossy",
                 "layout", "file_bytes", "chunk", "threshold", "nblocks", "block_rows",
                 "version", "_code", "_np_dtype", "_out_dtype", "_tdtype", "_row_shape", "_op_id",
                 "_flags", "_abspath", "__weakref__")

    def __init__(self, *a, **k):
        raise TypeError("use ibp.open(path) or ibp.Store.from_array(array)")

    @classmethod
    def _wrap(cls, h, path, flags=IBP_OPEN_READ, image=None):
        self = object.__new__(cls)
        try:
            c = lib.ibp_store_container(h)
            ndim = lib.ibp_store_ndim(h)
            sp = lib.ibp_store_shape(h)
            self.shape = tuple(int(sp[i]) for i in range(ndim))
            self._code = int(lib.ibp_store_dtype(h))
            self.dtype = _arrays.DTYPE_NAMES.get(self._code, "unknown")
            self.nrows = int(lib.ibp_store_nrows(h))
            self.row_bytes = int(lib.ibp_store_row_bytes(h))
            self.codec = CODEC_NAMES.get(int(lib.ibp_container_codec_id(c)), "unknown")
            self.lossy = bool(lib.ibp_container_lossy(c))
            self.layout = {0: "packed", 1: "inplace"}.get(int(lib.ibp_container_layout(c)), "unknown")
            self.file_bytes = int(lib.ibp_container_file_bytes(c))
            self.chunk = int(lib.ibp_container_chunk_bytes(c)) or None
            t = float(lib.ibp_container_threshold(c))
            self.threshold = t if t >= 0 else None
            self.nblocks = int(lib.ibp_container_nblocks(c)) or None
            self.block_rows = int(lib.ibp_container_block_rows(c)) or None
            self.version = (int(lib.ibp_container_version_major(c)),
                            int(lib.ibp_container_version_minor(c)))
        except BaseException:
            lib.ibp_store_close(h)
            raise
        self._row_shape = self.shape[1:]
        self._np_dtype = np.dtype(_arrays._NP_STORAGE.get(self._code, np.uint8))
        # dtype of new NumPy results (bfloat16: ml_dtypes' when installed)
        self._out_dtype = _arrays.numpy_dtype(self._code) if self._code in _arrays.DTYPE_NAMES \
            else self._np_dtype
        self._tdtype = None
        self.path = path
        self._flags = flags
        self._abspath = os.path.abspath(path) if path is not None else None
        self._op_id = None
        if image is None:
            free = lib.ibp_store_close
        else:
            def free(h, _image=image):  # the image outlives the store that reads it
                lib.ibp_store_close(h)
        self._handle = Handle(h, free, "ibp.Store %s" % (path or "<memory>"))
        return self

    @classmethod
    def from_array(cls, array, codec: str = "ibp", **opts) -> "Store":
        """Builds a store in memory from `array` (options as ibp.pack). The
        container image is written to a private temporary file, read into
        memory the store keeps and the file removed at once (errors name
        "<memory>"). Such a store pickles as its compressed bytes."""
        h = _arrays.as_host(array, "Store.from_array", dtype=opts.get("dtype"))
        with tempfile.TemporaryDirectory(prefix="ibp-") as d:
            p = os.path.join(d, "array.ibp")
            _pack_to(p, h, codec, opts, "Store.from_array")
            with builtins_open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                m = _image_buffer(size)
                if f.readinto(memoryview(m)[:size]) != size:
                    raise _errors.FileError("Store.from_array: short read of the packed image",
                                            func="Store.from_array", status=5)
        return _from_image(m, size)

    # ---- properties -------------------------------------------------------

    @property
    def ratio(self) -> float:
        """Decoded bytes / file bytes."""
        return self.nrows * self.row_bytes / self.file_bytes if self.file_bytes else float("nan")

    @property
    def max_threads(self) -> int:
        h = self._handle.acquire("Store.max_threads")
        try:
            return int(lib.ibp_store_max_threads(h))
        finally:
            self._handle.release()

    def __len__(self) -> int:
        return self.nrows

    def __repr__(self):
        state = "closed" if self.closed else "ratio %.3f" % self.ratio
        return "<ibp.Store %s %s %s codec=%s%s, %s>" % (
            self.path or "<memory>", self.dtype, list(self.shape), self.codec,
            " (lossy)" if self.lossy else "", state)

    # ---- reading ----------------------------------------------------------

    def gather(self, ids, out=None, nthreads: int = 0):
        """Decodes the rows named by `ids` (any integer array, tensor or
        list; any shape), in order, duplicates allowed, into an array of
        shape ids.shape + shape[1:]. torch ids give a torch tensor, others a
        NumPy array; out= (C-contiguous, that shape and dtype) is written in
        place and returned. An id < 0 or >= nrows raises ibp.OutOfRangeError
        (also an IndexError) before anything is written: no wrap-around.
        nthreads: 0 = libibp's pool (all CPUs), 1 = this thread only.

        The common cases (C-contiguous int64 ids, NumPy or CPU torch, with
        or without a matching out=) take a fast path that adds about a
        microsecond to the C call (bench/py_overhead.py)."""
        # ---- ids: fast paths for C-contiguous int64 NumPy arrays and CPU tensors
        tp = type(ids)
        if tp is _ndarray and (ids.dtype is _I64 or ids.dtype == _I64) and ids.flags.c_contiguous:
            kind, shape, n = 0, ids.shape + self._row_shape, ids.size
            iptr = _ptr(ids)
        elif tp is _torch_tensor_type() and ids.dtype is _T_I64 and ids.is_cpu \
                and ids.is_contiguous() and not ids.is_neg():
            kind, shape, n = 1, tuple(ids.shape) + self._row_shape, ids.numel()
            iptr = ids.data_ptr()
        else:
            ids, k = _arrays.as_ids(ids, "Store.gather")  # ids stays alive for the call
            kind, shape, n = (1 if k == "torch" else 0), ids.shape + self._row_shape, ids.size
            iptr = _ptr(ids)
        # ---- out: fast paths for an exact NumPy array or CPU tensor
        if out is None:
            if kind:
                res = _torch().empty(shape, dtype=self._torch_dtype())
                ptr = res.data_ptr()
            else:
                res = _np_empty(shape, self._out_dtype)
                ptr = _ptr(res)
        elif type(out) is _ndarray and out.dtype is self._np_dtype and out.shape == shape \
                and out.flags.c_contiguous and out.flags.writeable:
            ptr, res = _ptr(out), out
        elif type(out) is _torch_tensor_type() and out.dtype is self._torch_dtype() and out.is_cpu \
                and out.is_contiguous() and out.shape == shape and not out.is_neg():
            ptr, res = out.data_ptr(), out
        else:
            ptr = _arrays.check_out(out, shape, self._code, "Store.gather").ptr
            res = out
        # ---- the call; Handle.acquire/release inlined (they were a third of the fixed cost)
        hd = self._handle
        lock = hd._lock
        lock.acquire()
        h = hd._h
        if h is None:
            lock.release()
            raise _errors.closed("Store.gather", hd._what)
        hd._active += 1
        lock.release()
        try:
            st = _gather(h, iptr, n, ptr, nthreads)
        finally:
            lock.acquire()
            hd._active -= 1
            if not hd._active and hd._idle is not None:
                hd._idle.set()
            lock.release()
        if st:
            _raise_gather(st)
        return res

    def _torch_dtype(self):
        """torch dtype of this store's rows (cached)."""
        if self._tdtype is None:
            self._tdtype = _arrays.torch_dtype(self._code)
        return self._tdtype

    def __getitem__(self, key):
        """store[i] is row i (Python rules: -1 is the last row); store[a:b:c]
        the rows of the slice; store[ids] is store.gather(ids)."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            i = int(key)
            if i < 0:
                i += self.nrows
            if not 0 <= i < self.nrows:
                raise _errors.OutOfRangeError("Store[%d]: row out of range (%d rows)" % (int(key), self.nrows),
                                              func="Store.__getitem__", status=8)
            return self.gather(np.array([i], dtype=np.int64))[0]
        if isinstance(key, slice):
            return self.gather(range(*key.indices(self.nrows)))
        return self.gather(key)

    def read(self, out=None, nthreads: int = 0):
        """Every row, in order: an array of the stored shape and dtype (NumPy,
        or a torch tensor passed as out=)."""
        if out is None:
            res, ptr = _arrays.empty(self.shape, self._code, "numpy")
        else:
            ptr = _arrays.check_out(out, self.shape, self._code, "Store.read").ptr
            res = out
        h = self._handle.acquire("Store.read")
        try:
            check(lib.ibp_store_decode_all(h, ptr, nthreads), "ibp_store_decode_all")
        finally:
            self._handle.release()
        if out is None and self._code == 10:
            return _arrays.wrap(res, 10, "numpy")
        return res

    def verify(self, nthreads: int = 0) -> None:
        """Checks every payload checksum and decodes every row or block;
        raises ibp.CorruptError (ibp.ChecksumError) naming the first bad one."""
        h = self._handle.acquire("Store.verify")
        try:
            check(lib.ibp_store_verify(h, nthreads), "ibp_store_verify")
        finally:
            self._handle.release()

    # ---- bytes, pickling ------------------------------------------------------

    def container_bytes(self) -> np.ndarray:
        """The whole compressed container (the `.ibp` file's bytes) as a new
        NumPy uint8 array; Store.from_bytes opens it again."""
        h = self._handle.acquire("Store.container_bytes")
        try:
            n = _lib.c_u64()
            p = lib.ibp_container_image(lib.ibp_store_container(h), C.byref(n))
            out = np.empty(n.value, np.uint8)
            if n.value:
                C.memmove(out.ctypes.data, p, n.value)
            return out
        finally:
            self._handle.release()

    @classmethod
    def from_bytes(cls, data, verify=True) -> "Store":
        """A store over a container image (bytes, a uint8 array or tensor, any
        buffer), copied into memory the store keeps. verify as ibp.open:
        True checks the payload checksums, "full" also decodes every row,
        False skips the checksums (the structure is always checked)."""
        flags = {True: IBP_OPEN_READ, "full": IBP_OPEN_VERIFY, False: IBP_OPEN_TRUSTED}.get(
            verify if isinstance(verify, (bool, str)) else None)
        if flags is None:
            raise _errors.invalid("Store.from_bytes", "verify must be True, False or 'full', not %r" % (verify,))
        h = _arrays.as_host(data, "Store.from_bytes")
        src = h.np.reshape(-1).view(np.uint8)
        m = _image_buffer(src.nbytes)
        if src.nbytes:
            C.memmove(C.addressof(C.c_char.from_buffer(m)), src.ctypes.data, src.nbytes)
        return _from_image(m, src.nbytes, flags)

    def __reduce_ex__(self, protocol):
        # a file-backed store pickles as its path and open flags (opened, and
        # so verified, again on load); one built in memory as its bytes
        if self._handle.closed:
            raise _errors.closed("pickle", self._handle._what)
        if self._abspath is not None:
            return (_reopen, (self._abspath, self._flags))
        return (_store_from_image, (pickled_bytes(self.container_bytes(), protocol),))

    # ---- CPU implementation (IBP stores) ------------------------------------

    _impl_name = "Store"

    @contextlib.contextmanager
    def _impl_codec(self, exclusive):
        # the store's codec is owned by the store; set_impl changes it only
        # while no gather runs (Handle.exclusive), as libibp requires
        if exclusive:
            with self._handle.exclusive("Store.set_impl") as h:
                yield lib.ibp_store_codec(h)
        else:
            with self._handle as h:
                yield lib.ibp_store_codec(h)

    # ---- GPU --------------------------------------------------------------

    def to_cuda(self, device=None, pinned: bool = True):
        """A GPU store of this store's rows (ibp.CudaStore). Raises
        ibp.NoDeviceError without a usable GPU, CUDA driver or a libibp built
        with CUDA, with libibp's detail message."""
        from ._cuda import CudaStore
        if self._handle.closed:
            raise _errors.closed("Store.to_cuda", self._handle._what)
        return CudaStore._create(self, device, pinned)

    # ---- lifetime ---------------------------------------------------------

    def close(self) -> None:
        """Closes the store (waits for running gathers). Idempotent."""
        if self._op_id is not None:
            from . import _registry
            _registry.drop(self._op_id)
            self._op_id = None
        self._handle.close()


    @property
    def op_handle(self) -> int:
        """An integer naming this store for the torch custom ops
        (torch.ops.ibp.gather(store.op_handle, ids); see ibp.ops)."""
        if self._handle.closed:
            raise _errors.closed("Store.op_handle", self._handle._what)
        if self._op_id is None:
            from . import _registry
            self._op_id = _registry.add(self)
        return self._op_id

    def _acquire(self, func: str = ""):
        return self._handle.acquire(func)

    def _release(self):
        self._handle.release()
