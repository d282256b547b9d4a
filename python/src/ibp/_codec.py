"""ibp.train and ibp.Codec: the IBP row codec on arrays in memory."""

from __future__ import annotations

import ctypes as C

import numpy as np

from . import _arrays, _errors, _lib
import contextlib

from ._handle import Handle, Owner
from ._impl import ImplMixin
from ._store import train_opts

lib = _lib.lib
check = _lib.check


def _rows_of(h: _arrays.HostArray, func: str):
    if len(h.shape) == 0:
        raise _errors.invalid(func, "a 0-dimensional array has no rows")
    nrows = h.shape[0]
    row_bytes = h.nbytes // nrows if nrows else int(np.prod(h.shape[1:], dtype=np.int64)) * h.np.itemsize
    return nrows, row_bytes


def train(array, chunk="auto", threshold="auto", sample=None, clusters=1, *, seed=None,
          nthreads: int = 0, xval=None) -> "Codec":
    """Trains an IBP codec on the rows of `array` (dimension 0 = rows; a row
    is all other dimensions). chunk: 1, 2, 4, 8 or "auto"; threshold: [0.5, 1]
    or "auto"; sample: fraction of rows in (0, 1] or None (auto); clusters:
    1..64 or "auto". The codec encodes and decodes arrays of the same row
    shape and dtype."""
    h = _arrays.as_host(array, "ibp.train")
    nrows, row_bytes = _rows_of(h, "ibp.train")
    o = train_opts("ibp.train", chunk, threshold, sample, clusters, seed, nthreads, xval)
    out = _lib.c_vp()
    check(lib.ibp_codec_train(h.ptr, nrows, row_bytes, C.byref(o), C.byref(out)), "ibp_codec_train")
    return Codec._wrap(out.value, h.shape[1:], h.code)


def _codec_from_tables(row_bytes, chunk, nclusters, masks, bitvals, xvals, threshold, row_shape, code):
    """Unpickles a Codec: made again from its tables (ibp_codec_create_ex
    validates them as it does a container's)."""
    tabs = [np.ascontiguousarray(t, dtype=np.uint8) if t is not None else None for t in (masks, bitvals, xvals)]
    out = _lib.c_vp()
    check(lib.ibp_codec_create_ex(int(row_bytes), int(chunk), int(nclusters), tabs[0].ctypes.data,
                                  tabs[1].ctypes.data, tabs[2].ctypes.data if tabs[2] is not None else None,
                                  C.byref(out)), "ibp_codec_create_ex")
    c = Codec._wrap(out.value, row_shape, code)
    c.threshold = threshold  # training's choice; a codec made from tables has none in C
    return c


class Encoded:
    """Rows encoded by Codec.encode, in the packed layout: row i is
    payload[offsets[i]:offsets[i+1]] with mode flags[i] and cluster
    clusters[i] (None with one cluster). shape and dtype are those of the
    encoded array."""

    __slots__ = ("payload", "offsets", "flags", "clusters", "shape", "dtype", "_code", "_kind", "_buf")

    def __init__(self, payload, offsets, flags, clusters, shape, code, kind="numpy"):
        self._buf = None  # Codec.encode(out=...): the full-capacity buffer payload is a view of
        self.payload = payload
        self.offsets = offsets
        self.flags = flags
        self.clusters = clusters
        self.shape = tuple(shape)
        self._code = code
        self.dtype = _arrays.DTYPE_NAMES[code]
        self._kind = kind

    @property
    def nrows(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """Encoded size: payload, offsets, flags and cluster ids."""
        n = self.payload.nbytes + self.offsets.nbytes + self.flags.nbytes
        return n + (self.clusters.nbytes if self.clusters is not None else 0)

    def __repr__(self):
        return "<ibp.Encoded %d rows, %d payload bytes>" % (self.nrows, self.payload.nbytes)


class Codec(Owner, ImplMixin):
    """A trained IBP codec (immutable but for set_impl; may be shared by threads).
    One of the three codec objects of ibp.codec (name "ibp")."""

    name = "ibp"
    lossless = True

    __slots__ = ("_handle", "row_bytes", "chunk", "threshold", "nclusters", "nchunks",
                 "has_xval", "masks", "bitvals", "xvals", "_row_shape", "_code")

    def __init__(self, *a, **k):
        raise TypeError("use ibp.train(array)")

    @classmethod
    def _wrap(cls, h, row_shape, code):
        self = object.__new__(cls)
        self.row_bytes = int(lib.ibp_codec_row_bytes(h))
        self.chunk = int(lib.ibp_codec_chunk_bytes(h))
        t = float(lib.ibp_codec_threshold(h))
        self.threshold = t if t >= 0 else None
        self.nclusters = int(lib.ibp_codec_nclusters(h))
        self.nchunks = int(lib.ibp_codec_nchunks(h))
        self.has_xval = bool(lib.ibp_codec_has_xval(h))
        width = self.nchunks * self.chunk

        def table(fn):
            a = np.empty((self.nclusters, width), dtype=np.uint8)
            for k in range(self.nclusters):
                p = fn(h, k)
                C.memmove(a[k].ctypes.data, p, width)
            a.flags.writeable = False
            return a

        self.masks = table(lib.ibp_codec_mask)
        self.bitvals = table(lib.ibp_codec_bitval)
        self.xvals = table(lib.ibp_codec_xval)
        self._row_shape = tuple(row_shape)
        self._code = code
        self._handle = Handle(h, lib.ibp_codec_free, "ibp.Codec")
        return self

    def encode(self, rows, nthreads: int = 0, out: Encoded = None) -> Encoded:
        """Encodes the rows of `rows` (row length must equal row_bytes).

        out= a previous Encoded, refilled in place and returned: its buffers
        are reused when large enough (after the first call into it, a timed
        loop allocates nothing), and its payload becomes a view of a
        worst-case-sized buffer that the next encode into it overwrites."""
        func = "Codec.encode"
        h = _arrays.as_host(rows, func)
        nrows, row_bytes = _rows_of(h, func)
        if nrows and row_bytes != self.row_bytes:
            raise _errors.invalid(func, "rows of %d bytes, the codec's are %d bytes"
                                  % (row_bytes, self.row_bytes))
        if out is not None and not isinstance(out, Encoded):
            raise _errors.invalid(func, "out= must be an ibp.Encoded, not %s" % type(out).__name__)

        def reuse(a, n, dt):
            return a if a is not None and a.size == n and a.dtype == dt and a.flags.writeable \
                and a.flags.c_contiguous else np.zeros(n, dtype=dt)

        with self._handle as c:
            cap = int(lib.ibp_batch_bound(c, nrows))
            if out is None:
                dst = np.empty(max(cap, 1), dtype=np.uint8)
                offsets = np.zeros(nrows + 1, dtype=np.uint64)
                flags = np.zeros(nrows, dtype=np.uint8)
                clusters = np.zeros(nrows, dtype=np.uint8) if self.nclusters > 1 else None
            else:
                buf = out._buf
                dst = buf if buf is not None and buf.size >= max(cap, 1) else \
                    np.empty(max(cap, 1), dtype=np.uint8)
                offsets = reuse(out.offsets, nrows + 1, np.uint64)
                flags = reuse(out.flags, nrows, np.uint8)
                clusters = reuse(out.clusters, nrows, np.uint8) if self.nclusters > 1 else None
            check(lib.ibp_encode_batch(c, h.ptr, nrows, dst.ctypes.data, cap, offsets.ctypes.data,
                                       flags.ctypes.data,
                                       clusters.ctypes.data if clusters is not None else None,
                                       nthreads), "ibp_encode_batch")
        total = int(offsets[-1])
        if out is None:
            return Encoded(dst[:total].copy(), offsets, flags, clusters, h.shape, h.code, h.kind)
        out._buf = dst
        out.payload, out.offsets, out.flags, out.clusters = dst[:total], offsets, flags, clusters
        out.shape, out._code, out.dtype, out._kind = h.shape, h.code, _arrays.DTYPE_NAMES[h.code], h.kind
        return out

    def paper_layout_size(self, rows) -> int:
        """Bytes the rows of `rows` would take in the IBP paper's original
        layout (a participation bitmap of D bits rounded up to a chunk word,
        then the payload rounded up to a chunk word; raw when not smaller;
        each row under its best cluster), without flags or masks: for
        comparing this library's layout with the paper's
        (ibp_paper_layout_size)."""
        func = "Codec.paper_layout_size"
        h = _arrays.as_host(rows, func)
        nrows, row_bytes = _rows_of(h, func)
        if nrows and row_bytes != self.row_bytes:
            raise _errors.invalid(func, "rows of %d bytes, the codec's are %d bytes"
                                  % (row_bytes, self.row_bytes))
        with self._handle as c:
            return int(lib.ibp_paper_layout_size(c, h.ptr, nrows))

    def static_bits(self, cluster: int = 0) -> int:
        """Size in bits of the static part of a non-raw row of `cluster`."""
        if isinstance(cluster, bool) or not isinstance(cluster, (int, np.integer)) \
                or not 0 <= int(cluster) < self.nclusters:
            raise _errors.invalid("Codec.static_bits", "cluster %r is outside [0, %d)"
                                  % (cluster, self.nclusters))
        with self._handle as c:
            return int(lib.ibp_codec_static_bits(c, int(cluster)))

    _impl_name = "Codec"

    @contextlib.contextmanager
    def _impl_codec(self, exclusive):
        if exclusive:
            with self._handle.exclusive("Codec.set_impl") as c:
                yield c
        else:
            with self._handle as c:
                yield c

    def decode(self, encoded: Encoded, out=None, nthreads: int = 0):
        """Decodes an Encoded back to an array of its shape and dtype (the
        caller's framework of encode), or into out= in place."""
        if not isinstance(encoded, Encoded):
            raise _errors.invalid("Codec.decode", "expected an ibp.Encoded, not %s"
                                  % type(encoded).__name__)
        n = encoded.nrows
        payload = np.ascontiguousarray(encoded.payload, dtype=np.uint8).reshape(-1)
        offsets = np.ascontiguousarray(encoded.offsets, dtype=np.uint64).reshape(-1)
        flags = np.ascontiguousarray(encoded.flags, dtype=np.uint8).reshape(-1)
        clusters = encoded.clusters
        if clusters is not None:
            clusters = np.ascontiguousarray(clusters, dtype=np.uint8).reshape(-1)
        if offsets.size != n + 1 or flags.size != n or (clusters is not None and clusters.size != n):
            raise _errors.invalid("Codec.decode", "offsets/flags/clusters do not match %d rows" % n)
        if n and int(np.prod(encoded.shape[1:], dtype=np.int64)) * \
                np.dtype(_arrays._NP_STORAGE[encoded._code]).itemsize != self.row_bytes:
            raise _errors.invalid("Codec.decode", "the encoded rows are not this codec's row size")
        if out is None:
            arr = np.empty(encoded.shape, dtype=_arrays._NP_STORAGE[encoded._code])
            ptr = arr.ctypes.data
        else:
            ptr = _arrays.check_out(out, encoded.shape, encoded._code, "Codec.decode").ptr
        with self._handle as c:
            check(lib.ibp_decode_batch(c, payload.ctypes.data, payload.size, offsets.ctypes.data,
                                       flags.ctypes.data,
                                       clusters.ctypes.data if clusters is not None else None, n,
                                       ptr, nthreads), "ibp_decode_batch")
        if out is not None:
            return out
        return _arrays.wrap(arr, encoded._code, encoded._kind)


    def __reduce__(self):
        if self._handle.closed:
            raise _errors.closed("pickle", self._handle._what)
        return (_codec_from_tables, (self.row_bytes, self.chunk, self.nclusters, self.masks, self.bitvals,
                                     self.xvals if self.has_xval else None, self.threshold, self._row_shape,
                                     self._code))

    def __repr__(self):
        return "<ibp.Codec row_bytes=%d chunk=%d threshold=%s clusters=%d>" % (
            self.row_bytes, self.chunk, self.threshold, self.nclusters)
