"""Chunked exp / fp8 encoding: ibp.exp.compress_chunks, ibp.fp8.compress_chunks.

A tensor's elements (in C order) are cut into chunks of chunk_elems
elements, the last one possibly shorter; each chunk becomes its own libibp
exp block or FP8 stream, and the blocks are packed back to back with an
offset table. Any chunk decodes alone, so chunks of one row each give random
access by row (what a gather needs) at the price of a header per chunk.

exp uses libibp's batch calls (ibp_exp_encode_batch / ibp_exp_decode_batch:
one call, threads work on different chunks). FP8 has no CPU batch call: the
chunks are encoded and decoded by one ibp_fp8_encode / ibp_fp8_decode call
each, from a loop here (the GIL is released inside every call).
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from . import _arrays, _errors, _lib

lib = _lib.lib
check = _lib.check

_FLOAT_CODES = (9, 10, 11)
_ESIZE = {9: 2, 10: 2, 11: 4}
_U64 = np.dtype(np.uint64)
_U8 = np.dtype(np.uint8)


def _count(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


class Chunks:
    """A tensor encoded in independent chunks by ibp.exp.compress_chunks or
    ibp.fp8.compress_chunks.

    Chunk i holds elements [i * chunk_elems, min(n, (i + 1) * chunk_elems))
    of the tensor in C order, encoded as payload[offsets[i]:offsets[i + 1]]:
    one libibp exp block (codec "exp") or FP8 stream (codec "fp8").
    ``shape`` and ``dtype`` are those of the encoded tensor.

    Chunks(codec, payload, offsets, shape, dtype, chunk_elems) rebuilds one
    from stored parts; decompress_chunks treats every byte and offset of it
    as untrusted (damage raises ibp.CorruptError).
    """

    __slots__ = ("codec", "payload", "offsets", "shape", "dtype", "chunk_elems", "_code", "_kind",
                 "_buf")

    def __init__(self, codec: str, payload, offsets, shape, dtype, chunk_elems: int):
        func = "ibp.Chunks"
        if codec not in ("exp", "fp8"):
            raise _errors.invalid(func, "codec must be 'exp' or 'fp8', not %r" % (codec,))
        code = _arrays.dtype_code(dtype)
        if code not in _FLOAT_CODES:
            raise _errors.invalid(func, "dtype must be bfloat16, float16 or float32, not %s"
                                  % _arrays.DTYPE_NAMES[code])
        if isinstance(chunk_elems, bool) or not isinstance(chunk_elems, (int, np.integer)) \
                or int(chunk_elems) < 1:
            raise _errors.invalid(func, "chunk_elems must be a positive integer, not %r"
                                  % (chunk_elems,))
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise _errors.invalid(func, "negative dimension in shape %s" % (shape,))
        self.codec = codec
        self._code = code
        self.dtype = _arrays.DTYPE_NAMES[code]
        self.shape = shape
        self.chunk_elems = int(chunk_elems)
        if isinstance(payload, (bytes, bytearray, memoryview)):
            payload = np.frombuffer(payload, dtype=np.uint8)
        else:
            h = _arrays.as_host(payload, func)
            if h.code not in (0, 1, 5):
                raise _errors.invalid(func, "payload is uint8, not %s" % _arrays.DTYPE_NAMES[h.code])
            payload = h.np.reshape(-1).view(np.uint8)
        self.payload = payload
        offs = np.asarray(offsets)
        if offs.dtype.kind not in "iu":
            raise _errors.invalid(func, "offsets must be integers, not %s" % offs.dtype)
        if offs.size and offs.dtype.kind == "i" and int(offs.min()) < 0:
            raise _errors.CorruptError("%s: corrupt: negative offset" % func, func=func, status=3)
        self.offsets = np.ascontiguousarray(offs.reshape(-1), dtype=np.uint64)
        if self.offsets.size != self.nchunks + 1:
            raise _errors.invalid(func, "%d offsets for %d chunks (need nchunks + 1)"
                                  % (self.offsets.size, self.nchunks))
        self._kind = "numpy"
        self._buf = None

    @classmethod
    def _make(cls, codec, code, shape, chunk_elems, kind):
        self = object.__new__(cls)
        self.codec, self._code, self.dtype = codec, code, _arrays.DTYPE_NAMES[code]
        self.shape, self.chunk_elems, self._kind = tuple(shape), int(chunk_elems), kind
        self.payload = self.offsets = self._buf = None
        return self

    @property
    def n(self) -> int:
        """Elements of the encoded tensor."""
        return _count(self.shape)

    @property
    def nchunks(self) -> int:
        """Number of chunks: ceil(n / chunk_elems)."""
        return -(-self.n // self.chunk_elems)

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded chunks (offsets[-1]; the offset table not counted)."""
        return int(self.offsets[-1]) if self.offsets.size else 0

    def chunk(self, i: int) -> np.ndarray:
        """The encoded bytes of chunk i (a view of payload)."""
        if not -self.nchunks <= i < self.nchunks:
            raise _errors.OutOfRangeError("Chunks.chunk: chunk %d of %d" % (i, self.nchunks),
                                          func="Chunks.chunk", status=8)
        i %= self.nchunks
        return self.payload[int(self.offsets[i]):int(self.offsets[i + 1])]

    def __len__(self) -> int:
        return self.nchunks

    def __repr__(self):
        return "<ibp.Chunks %s %s %s, %d chunks of %d elements, %d bytes>" % (
            self.codec, self.dtype, list(self.shape), self.nchunks, self.chunk_elems, self.nbytes)


def _input(tensor, func, dtype):
    h = _arrays.as_host(tensor, func, dtype=dtype)
    if h.code not in _FLOAT_CODES:
        raise _errors.invalid(func, "needs bfloat16, float16 or float32 data, not %s"
                              % _arrays.DTYPE_NAMES[h.code])
    return h


def _chunk_arg(func, chunk_elems, h=None):
    if chunk_elems is None and h is not None:  # codec objects' encode: one chunk for the whole tensor
        return min(max(int(h.np.size), 1), 1 << 56)
    if isinstance(chunk_elems, bool) or not isinstance(chunk_elems, (int, np.integer)) \
            or not 1 <= int(chunk_elems) <= (1 << 56):
        raise _errors.invalid(func, "chunk_elems must be an integer in [1, 2^56], not %r"
                              % (chunk_elems,))
    return int(chunk_elems)


def _target(out, codec, h, chunk, func):
    """The Chunks to fill: a new one, or out= (checked) to be refilled."""
    if out is None:
        return Chunks._make(codec, h.code, h.shape, chunk, h.kind)
    if not isinstance(out, Chunks):
        raise _errors.invalid(func, "out= must be an ibp.Chunks, not %s" % type(out).__name__)
    out.codec, out._code, out.dtype = codec, h.code, _arrays.DTYPE_NAMES[h.code]
    out.shape, out.chunk_elems, out._kind = h.shape, chunk, h.kind
    return out


def _buffers(res, cap, nchunks):
    """(payload buffer of at least cap bytes, offsets of nchunks + 1), reusing res's."""
    buf = res._buf
    if buf is None or buf.size < max(cap, 1):
        buf = np.empty(max(cap, 1), dtype=np.uint8)
    offs = res.offsets
    if offs is None or offs.size != nchunks + 1 or offs.dtype != _U64 or not offs.flags.writeable:
        offs = np.zeros(nchunks + 1, dtype=np.uint64)
    return buf, offs


def _finish(res, buf, offs, keep_buffer):
    total = int(offs[-1])
    if keep_buffer:
        res._buf, res.payload = buf, buf[:total]
    else:  # a new buffer: trimmed (exp's bound is larger than what it writes)
        res._buf, res.payload = None, buf if buf.size == total else buf[:total].copy()
    res.offsets = offs
    return res


def compress_exp_chunks(tensor, chunk_elems, table="sigma", sigma=0.0, nthreads=0, dtype=None,
                        out=None, whole=False):
    from ._store import exp_opts
    func = "ibp.exp.compress_chunks"
    h = _input(tensor, func, dtype)
    chunk = _chunk_arg(func, chunk_elems, h if whole else None)
    o = exp_opts(func, table, nthreads, sigma)
    res = _target(out, "exp", h, chunk, func)
    n = h.np.size
    nchunks = -(-n // chunk)
    if n == 0:
        return _finish(res, np.empty(1, np.uint8), np.zeros(1, np.uint64), out is not None)
    cap = _lib.c_u64()
    check(lib.ibp_exp_batch_bound(h.code, n, chunk, C.byref(cap)), "ibp_exp_batch_bound")
    buf, offs = _buffers(res, cap.value, nchunks)
    check(lib.ibp_exp_encode_batch(h.ptr, h.code, n, chunk, C.byref(o), buf.ctypes.data,
                                   cap.value, offs.ctypes.data), "ibp_exp_encode_batch")
    return _finish(res, buf, offs, out is not None)


def compress_fp8_chunks(tensor, chunk_elems, fmt="e4m3", block=256, hadamard=True, adaptive=True,
                        nthreads=0, dtype=None, out=None, whole=False):
    from ._store import fp8_opts
    func = "ibp.fp8.compress_chunks"
    h = _input(tensor, func, dtype)
    chunk = _chunk_arg(func, chunk_elems, h if whole else None)
    o = fp8_opts(func, fmt, block, hadamard, adaptive, nthreads)
    res = _target(out, "fp8", h, chunk, func)
    n = h.np.size
    nchunks = -(-n // chunk)
    if n == 0:
        return _finish(res, np.empty(1, np.uint8), np.zeros(1, np.uint64), out is not None)
    # stream sizes depend only on the element count: every chunk but the last has the same
    v = _lib.c_u64()
    check(lib.ibp_fp8_encoded_size(C.byref(o), chunk, C.byref(v)), "ibp_fp8_encoded_size")
    full = v.value
    last_n = n - (nchunks - 1) * chunk
    check(lib.ibp_fp8_encoded_size(C.byref(o), last_n, C.byref(v)), "ibp_fp8_encoded_size")
    last = v.value
    cap = full * (nchunks - 1) + last
    buf, offs = _buffers(res, cap, nchunks)
    offs[:nchunks] = np.arange(nchunks, dtype=np.uint64) * np.uint64(full)
    offs[nchunks] = cap
    enc, ob, got = lib.ibp_fp8_encode, C.byref(o), C.byref(v)
    code, esz = h.code, _ESIZE[h.code]
    src, dst = h.ptr, buf.ctypes.data
    step_src, step_dst = chunk * esz, full
    for i in range(nchunks - 1):
        st = enc(src + i * step_src, code, chunk, ob, dst + i * step_dst, full, got)
        if st:
            check(st, "ibp_fp8_encode")
    st = enc(src + (nchunks - 1) * step_src, code, last_n, ob, dst + (nchunks - 1) * step_dst,
             last, got)
    if st:
        check(st, "ibp_fp8_encode")
    return _finish(res, buf, offs, out is not None)


def _check_chunks(chunks, codec, func):
    if not isinstance(chunks, Chunks):
        raise _errors.invalid(func, "expected an ibp.Chunks, not %s" % type(chunks).__name__)
    if chunks.codec != codec:
        raise _errors.invalid(func, "the chunks were made by ibp.%s.compress_chunks"
                              % chunks.codec)
    payload = chunks.payload
    if not (type(payload) is np.ndarray and payload.dtype == _U8 and payload.ndim == 1
            and payload.flags.c_contiguous):
        payload = np.ascontiguousarray(payload, dtype=np.uint8).reshape(-1)
    offs = chunks.offsets
    if not (type(offs) is np.ndarray and offs.dtype == _U64 and offs.flags.c_contiguous):
        offs = np.ascontiguousarray(offs, dtype=np.uint64)
    offs = offs.reshape(-1)
    n = chunks.n
    if offs.size != chunks.nchunks + 1:
        raise _errors.CorruptError("%s: corrupt: %d offsets for %d chunks" % (
            func, offs.size, chunks.nchunks), func=func, status=3)
    return payload, offs, n


def _output(chunks, out, func):
    if out is None:
        arr = np.empty(chunks.shape, dtype=_arrays._NP_STORAGE[chunks._code])
        return arr, arr.ctypes.data
    return None, _arrays.check_out(out, chunks.shape, chunks._code, func).ptr


def decompress_exp_chunks(chunks, out=None, nthreads=0, trusted=False):
    func = "ibp.exp.decompress_chunks"
    payload, offs, n = _check_chunks(chunks, "exp", func)
    arr, ptr = _output(chunks, out, func)
    if n:
        check(lib.ibp_exp_decode_batch_ext(payload.ctypes.data, payload.size, offs.ctypes.data,
                                           chunks._code, n, chunks.chunk_elems, ptr, nthreads,
                                           1 if trusted else 0),
              "ibp_exp_decode_batch")
    return out if arr is None else _arrays.wrap(arr, chunks._code, chunks._kind)


def decompress_fp8_chunks(chunks, out=None, nthreads=0, trusted=False):
    func = "ibp.fp8.decompress_chunks"
    payload, offs, n = _check_chunks(chunks, "fp8", func)
    nchunks, chunk = chunks.nchunks, chunks.chunk_elems
    if nchunks and (int(offs[-1]) > payload.size or bool(np.any(offs[1:] < offs[:-1]))):
        raise _errors.CorruptError("%s: corrupt: offsets are not non-decreasing within the %d-byte "
                                   "payload" % (func, payload.size), func=func, status=3)
    arr, ptr = _output(chunks, out, func)
    dec, code, esz = lib.ibp_fp8_decode_ext, chunks._code, _ESIZE[chunks._code]
    src = payload.ctypes.data
    o = offs.tolist()
    step = chunk * esz
    flags = 1 if trusted else 0
    for i in range(nchunks):
        a = o[i]
        cnt = chunk if i < nchunks - 1 else n - i * chunk
        st = dec(src + a, o[i + 1] - a, code, cnt, ptr + i * step, nthreads, flags)
        if st:
            check(st, "ibp_fp8_decode")
    return out if arr is None else _arrays.wrap(arr, chunks._code, chunks._kind)
