"""ibp.train and ibp.Codec: the IBP row codec on arrays in memory."""

from __future__ import annotations

import ctypes as C

import numpy as np

from . import _arrays, _errors, _lib
from ._handle import Handle
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


class Encoded:
    """Rows encoded by Codec.encode, in the packed layout: row i is
    payload[offsets[i]:offsets[i+1]] with mode flags[i] and cluster
    clusters[i] (None with one cluster). shape and dtype are those of the
    encoded array."""

    __slots__ = ("payload", "offsets", "flags", "clusters", "shape", "dtype", "_code", "_kind")

    def __init__(self, payload, offsets, flags, clusters, shape, code, kind="numpy"):
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


class Codec:
    """A trained IBP codec (immutable; may be shared by threads)."""

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
        self._handle = Handle(h, lib.ibp_codec_free, "codec")
        return self

    def encode(self, rows, nthreads: int = 0) -> Encoded:
        """Encodes the rows of `rows` (row length must equal row_bytes)."""
        h = _arrays.as_host(rows, "Codec.encode")
        nrows, row_bytes = _rows_of(h, "Codec.encode")
        if nrows and row_bytes != self.row_bytes:
            raise _errors.invalid("Codec.encode", "rows of %d bytes, the codec's are %d bytes"
                                  % (row_bytes, self.row_bytes))
        offsets = np.zeros(nrows + 1, dtype=np.uint64)
        flags = np.zeros(nrows, dtype=np.uint8)
        clusters = np.zeros(nrows, dtype=np.uint8) if self.nclusters > 1 else None
        with self._handle as c:
            cap = int(lib.ibp_batch_bound(c, nrows))
            dst = np.empty(max(cap, 1), dtype=np.uint8)
            check(lib.ibp_encode_batch(c, h.ptr, nrows, dst.ctypes.data, cap, offsets.ctypes.data,
                                       flags.ctypes.data,
                                       clusters.ctypes.data if clusters is not None else None,
                                       nthreads), "ibp_encode_batch")
        total = int(offsets[-1])
        return Encoded(dst[:total].copy(), offsets, flags, clusters, h.shape, h.code, h.kind)

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

    def close(self) -> None:
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self._handle.close()
        except Exception:
            pass

    def __repr__(self):
        return "<ibp.Codec row_bytes=%d chunk=%d threshold=%s clusters=%d>" % (
            self.row_bytes, self.chunk, self.threshold, self.nclusters)
