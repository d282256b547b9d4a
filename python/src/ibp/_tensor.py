"""Whole-tensor compress/decompress for ibp.exp and ibp.fp8.

A compressed tensor is one uint8 buffer: a small self-describing header, so
that decompress restores dtype and shape, then one libibp block (exp) or
stream (fp8) of all the tensor's elements. Frame version 2:

    offset  size     field
    0       4        magic b"IBPT"
    4       1        frame version (2)
    5       1        codec: 2 = exp, 3 = fp8 (libibp's codec ids)
    6       1        dtype (libibp's ibp_dtype_t: 9 f16, 10 bf16, 11 f32)
    7       1        ndim (0..8)
    8       8        payload bytes (little-endian u64)
    16      8        checksum: XXH3-64 of bytes [24, end) seeded with the
                     XXH3-64 of bytes [0, 16) (ibp_checksum64), little-endian
    24      8*ndim   shape (little-endian u64 each)
    24+8*ndim        the block / stream (written without a checksum of its
                     own: the frame's covers it)

The checksum covers the whole buffer but itself and is verified before any
field after the version is believed (trusted=True skips it, for bytes the
caller verified). Frame version 1 (no checksum field: the shape at offset
16) still decodes. Everything in a buffer handed to decompress is
untrusted: the header is checked here and the block or stream by libibp,
so damage raises ibp.CorruptError (ibp.ChecksumError, a CorruptError, when
the checksum catches it) and never reads outside the buffer.
"""

from __future__ import annotations

import ctypes as C
import struct

import numpy as np

from . import _arrays, _errors, _lib

lib = _lib.lib
check = _lib.check

MAGIC = b"IBPT"
VERSION = 2
_HDR = struct.Struct("<4sBBBBQ")
_SUM = 16  # offset of the checksum (version 2)
_FLOAT_CODES = (9, 10, 11)
_MAX_ELEMS = 1 << 56


def header(codec: int, code: int, shape, payload: int) -> bytes:
    """A version-2 header with a zero checksum (seal() fills it in)."""
    return _HDR.pack(MAGIC, VERSION, codec, code, len(shape), payload) + bytes(8) + \
        struct.pack("<%dQ" % len(shape), *shape)


def _frame_sum(buf: np.ndarray) -> int:
    head = lib.ibp_checksum64(buf.ctypes.data, _SUM, 0)
    return lib.ibp_checksum64(buf.ctypes.data + _SUM + 8, buf.size - _SUM - 8, head)


def seal(frame: np.ndarray) -> np.ndarray:
    frame[_SUM:_SUM + 8] = np.frombuffer(struct.pack("<Q", _frame_sum(frame)), dtype=np.uint8)
    return frame


def _corrupt(func, why, status=3):
    err = _errors.ChecksumError if status == 4 else _errors.CorruptError
    return err("%s: corrupt: %s" % (func, why), func=func, status=status)


def parse(buf: np.ndarray, codec: int, func: str, trusted: bool = False):
    """(dtype code, shape, payload offset, payload bytes, elements) of a frame."""
    raw = buf.size
    if raw < _HDR.size:
        raise _corrupt(func, "%d bytes, shorter than the %d-byte header" % (raw, _HDR.size))
    magic, ver = bytes(buf[:4]), int(buf[4])
    if magic != MAGIC:
        raise _corrupt(func, "not a compressed tensor (bad magic)")
    if ver == VERSION:
        if raw < _SUM + 8:
            raise _corrupt(func, "%d bytes, shorter than the %d-byte header" % (raw, _SUM + 8))
        want = struct.unpack("<Q", buf[_SUM:_SUM + 8].tobytes())[0]
        if not trusted and _frame_sum(buf) != want:
            raise _corrupt(func, "checksum mismatch (%d bytes)" % raw, status=4)
        shape_at = _SUM + 8
    elif ver == 1:
        shape_at = _HDR.size
    else:  # damage, or a newer writer: either way not a buffer this reader can trust
        raise _corrupt(func, "frame version %d (this libibp reads 1 and 2)" % ver)
    _, _, cid, code, ndim, plen = _HDR.unpack(buf[:_HDR.size].tobytes())
    if cid != codec:
        names = {2: "ibp.exp", 3: "ibp.fp8"}
        raise _corrupt(func, "the buffer was made by %s" % names.get(cid, "codec %d" % cid))
    if code not in _FLOAT_CODES:
        raise _corrupt(func, "dtype code %d" % code)
    if ndim > 8:
        raise _corrupt(func, "ndim %d > 8" % ndim)
    off = shape_at + 8 * ndim
    if raw < off:
        raise _corrupt(func, "truncated header")
    shape = struct.unpack("<%dQ" % ndim, buf[shape_at:off].tobytes())
    n = 1
    for s in shape:
        n *= s
        if n > _MAX_ELEMS:
            raise _corrupt(func, "shape %s too large" % (shape,))
    if plen > raw - off:
        raise _corrupt(func, "payload of %d bytes, %d present" % (plen, raw - off))
    return code, tuple(int(s) for s in shape), off, int(plen), n


def as_bytes(buf, func: str):
    """The compressed buffer as a flat uint8 NumPy view, plus the caller's kind."""
    if isinstance(buf, (bytes, bytearray, memoryview)):
        return np.frombuffer(buf, dtype=np.uint8), "numpy"
    h = _arrays.as_host(buf, func)
    if h.code not in (0, 1, 5):
        raise _errors.invalid(func, "a compressed buffer is uint8, not %s" % _arrays.DTYPE_NAMES[h.code])
    return h.np.reshape(-1).view(np.uint8), h.kind


def _float_input(tensor, func, dtype=None):
    h = _arrays.as_host(tensor, func, dtype=dtype)
    if h.code not in _FLOAT_CODES:
        raise _errors.invalid(func, "needs bfloat16, float16 or float32 data, not %s"
                              % _arrays.DTYPE_NAMES[h.code])
    return h


def finish(frame: np.ndarray, kind: str):
    if kind == "torch":
        return _arrays.wrap(frame, 5, "torch")
    return frame


def output(code, shape, out, kind, func):
    if out is None:
        arr = np.empty(shape, dtype=_arrays._NP_STORAGE[code])
        return arr, arr.ctypes.data, None
    h = _arrays.check_out(out, shape, code, func)
    return None, h.ptr, out


def compress_exp(tensor, table="sigma", sigma=0.0, nthreads=0, dtype=None):
    from ._store import exp_opts
    func = "ibp.exp.compress"
    h = _float_input(tensor, func, dtype)
    n = h.np.size
    o = exp_opts(func, table, nthreads, sigma)
    o.checksum = 0  # the frame's checksum covers the block
    bound = _lib.c_u64()
    check(lib.ibp_exp_encode_bound(h.code, n, C.byref(bound)), "ibp_exp_encode_bound")
    hdr = header(2, h.code, h.shape, 0)
    frame = np.empty(len(hdr) + bound.value, dtype=np.uint8)
    size = _lib.c_u64()
    check(lib.ibp_exp_encode(h.ptr, h.code, n, C.byref(o), frame.ctypes.data + len(hdr), bound.value,
                             C.byref(size)), "ibp_exp_encode")
    frame[:len(hdr)] = np.frombuffer(header(2, h.code, h.shape, size.value), dtype=np.uint8)
    return finish(seal(frame[:len(hdr) + size.value].copy()), h.kind)


def _too_short(func, n, plen, need):
    if plen < need:
        raise _errors.CorruptError("%s: corrupt: %d elements need at least %d bytes, the block has %d"
                                   % (func, n, need, plen), func=func, status=3)


def decompress_exp(buf, out=None, nthreads=0, trusted=False):
    func = "ibp.exp.decompress"
    b, kind = as_bytes(buf, func)
    code, shape, off, plen, n = parse(b, 2, func, trusted)
    # before allocating n elements: a block is never shorter than the smallest
    # of its raw and coded static sizes and a rANS block's raw rest bytes
    st, raw = _lib.c_u64(), _lib.c_u64()
    check(lib.ibp_exp_static_size(code, n, C.byref(st)), "ibp_exp_static_size")
    check(lib.ibp_exp_raw_size(code, n, C.byref(raw)), "ibp_exp_raw_size")
    _too_short(func, n, plen, min(st.value, raw.value, n * (3 if code == 11 else 1)))  # 11: f32
    arr, ptr, user = output(code, shape, out, kind, func)
    check(lib.ibp_exp_decode_ext(b.ctypes.data + off, plen, code, n, ptr, nthreads, 1 if trusted else 0),
          "ibp_exp_decode")
    return user if user is not None else _arrays.wrap(arr, code, kind)


def compress_fp8(tensor, format="e4m3", block=256, hadamard=True, adaptive=True, nthreads=0,
                 dtype=None):
    from ._store import fp8_opts
    func = "ibp.fp8.compress"
    h = _float_input(tensor, func, dtype)
    n = h.np.size
    o = fp8_opts(func, format, block, hadamard, adaptive, nthreads)
    o.checksum = 0  # the frame's checksum covers the stream
    size = _lib.c_u64()
    check(lib.ibp_fp8_encoded_size(C.byref(o), n, C.byref(size)), "ibp_fp8_encoded_size")
    hdr = header(3, h.code, h.shape, size.value)
    frame = np.empty(len(hdr) + size.value, dtype=np.uint8)
    frame[:len(hdr)] = np.frombuffer(hdr, dtype=np.uint8)
    got = _lib.c_u64()
    check(lib.ibp_fp8_encode(h.ptr, h.code, n, C.byref(o), frame.ctypes.data + len(hdr), size.value,
                             C.byref(got)), "ibp_fp8_encode")
    if got.value != size.value:
        raise _errors.InternalError("ibp.fp8.compress: stream size %d, expected %d"
                                    % (got.value, size.value), status=11)
    return finish(seal(frame), h.kind)


def decompress_fp8(buf, out=None, nthreads=0, trusted=False):
    func = "ibp.fp8.decompress"
    b, kind = as_bytes(buf, func)
    code, shape, off, plen, n = parse(b, 3, func, trusted)
    _too_short(func, n, plen, n)  # an FP8 stream holds at least a byte per element
    arr, ptr, user = output(code, shape, out, kind, func)
    check(lib.ibp_fp8_decode_ext(b.ctypes.data + off, plen, code, n, ptr, nthreads, 1 if trusted else 0),
          "ibp_fp8_decode")
    return user if user is not None else _arrays.wrap(arr, code, kind)
