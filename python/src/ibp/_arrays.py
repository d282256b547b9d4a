"""Arrays in and out: NumPy arrays, PyTorch tensors, anything with __dlpack__
or the buffer protocol.

Inputs are turned into a C-contiguous NumPy view of host memory (no copy when
they already are one) plus a note of the caller's framework, so that outputs
go back as the caller's type: torch in, torch out (dtype and shape restored,
torch.bfloat16 included); NumPy (or anything else) in, NumPy out.

torch is never imported by this package: a tensor can only be passed in by a
program that has imported torch already, and then sys.modules has it.
"""

from __future__ import annotations

import sys

import numpy as np

from . import _errors

# libibp dtype codes (include/ibp/types.h) <-> names. The names are NumPy's
# (and torch's, less the "torch." prefix); "bytes" is libibp's opaque dtype.
DTYPE_NAMES = {
    0: "bytes", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "uint8", 6: "uint16",
    7: "uint32", 8: "uint64", 9: "float16", 10: "bfloat16", 11: "float32", 12: "float64",
    13: "bool",
}
DTYPE_CODES = {v: k for k, v in DTYPE_NAMES.items()}
# NumPy storage dtype of each libibp dtype (bf16 is stored as its uint16 bit patterns).
_NP_STORAGE = {
    0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.uint8, 6: np.uint16,
    7: np.uint32, 8: np.uint64, 9: np.float16, 10: np.uint16, 11: np.float32, 12: np.float64,
    13: np.bool_,
}
_NP_KIND_TO_CODE = {
    np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3, np.dtype(np.int64): 4,
    np.dtype(np.uint8): 5, np.dtype(np.uint16): 6, np.dtype(np.uint32): 7, np.dtype(np.uint64): 8,
    np.dtype(np.float16): 9, np.dtype(np.float32): 11, np.dtype(np.float64): 12,
    np.dtype(np.bool_): 13,
}
_DTYPE_ALIASES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
                  "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                  "u16": "uint16", "u32": "uint32", "u64": "uint64", "half": "float16",
                  "float": "float32", "double": "float64"}


def dtype_code(name) -> int:
    """libibp dtype code of a dtype given as a name ("bf16", "bfloat16",
    "float32", ...), a NumPy dtype or a torch dtype."""
    if isinstance(name, int) and not isinstance(name, bool):
        if name in DTYPE_NAMES:
            return name
        raise _errors.invalid("dtype", "unknown dtype code %d" % name)
    s = str(name)
    if s.startswith("torch."):
        s = s[6:]
    s = _DTYPE_ALIASES.get(s, s)
    if s in DTYPE_CODES:
        return DTYPE_CODES[s]
    try:
        d = np.dtype(name)
    except TypeError:
        raise _errors.invalid("dtype", "unknown dtype %r" % (name,)) from None
    if d.name == "bfloat16":
        return 10
    code = _NP_KIND_TO_CODE.get(d.newbyteorder("=") if d.byteorder == "<" else d)
    if code is None:
        raise _errors.invalid("dtype", "dtype %s is not supported" % d)
    return code


def _torch():
    return sys.modules.get("torch")


def is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


_TORCH_CODES = None


def _torch_codes():
    global _TORCH_CODES
    if _TORCH_CODES is None:
        t = _torch()
        _TORCH_CODES = {
            t.int8: 1, t.int16: 2, t.int32: 3, t.int64: 4, t.uint8: 5, t.float16: 9,
            t.bfloat16: 10, t.float32: 11, t.float64: 12, t.bool: 13,
        }
        for name, code in (("uint16", 6), ("uint32", 7), ("uint64", 8)):
            if hasattr(t, name):
                _TORCH_CODES[getattr(t, name)] = code
    return _TORCH_CODES


def torch_dtype(code: int):
    t = _torch()
    for k, v in _torch_codes().items():
        if v == code:
            return k
    if code == 0:
        return t.uint8
    raise _errors.invalid("dtype", "%s has no torch dtype" % DTYPE_NAMES[code])


class HostArray:
    """A C-contiguous NumPy view of an input's host memory.

    ``np`` is the view (bf16 as uint16 bit patterns), ``code`` the libibp
    dtype code, ``shape`` the logical shape, ``kind`` "torch" or "numpy",
    ``ptr`` the data address; ``keep`` holds the source alive.
    """

    __slots__ = ("np", "code", "shape", "kind", "ptr", "keep")

    def __init__(self, arr, code, shape, kind, keep):
        self.np = arr
        self.code = code
        self.shape = tuple(int(s) for s in shape)
        self.kind = kind
        self.ptr = arr.ctypes.data
        self.keep = keep

    @property
    def nbytes(self) -> int:
        return self.np.nbytes


def as_host(x, func: str, *, dtype=None, writable: bool = False, copy_ok: bool = True) -> HostArray:
    """Turns a NumPy array, torch tensor, __dlpack__ object or buffer into a
    C-contiguous host view. ``dtype="bf16"`` reinterprets 16-bit integer data
    as bfloat16 bit patterns. With copy_ok False (out= arrays) the input must
    already be C-contiguous host memory (it is written in place)."""
    kind = "numpy"
    if is_torch(x):
        t = _torch()
        kind = "torch"
        if x.device.type != "cpu":
            raise _errors.invalid(func, "tensor is on %s; the CPU API takes host tensors "
                                  "(use Store.to_cuda for GPU gathers)" % x.device)
        if x.is_sparse or getattr(x, "is_quantized", False):
            raise _errors.invalid(func, "sparse and quantized tensors are not supported")
        x = x.detach()
        if not x.is_contiguous():
            if not copy_ok:
                raise _errors.invalid(func, "out= must be a contiguous tensor")
            x = x.contiguous()
        if x.is_conj() or x.is_neg():
            if not copy_ok:  # resolving would copy: out= would not be written in place
                raise _errors.invalid(func, "out= must not be a negative or conjugate view")
            x = x.resolve_conj().resolve_neg()
        code = _torch_codes().get(x.dtype)
        if code is None:
            raise _errors.invalid(func, "torch dtype %s is not supported" % x.dtype)
        shape = tuple(x.shape)
        if code == 10:
            view = x.view(t.int16).numpy().view(np.uint16)
        elif code in (6, 7, 8):
            # torch.uint16/32/64 have limited .numpy() support: go through the signed twin
            signed = {6: t.int16, 7: t.int32, 8: t.int64}[code]
            view = x.view(signed).numpy().view(_NP_STORAGE[code])
        else:
            view = x.numpy()
        keep = x
    else:
        if isinstance(x, np.ndarray):
            arr = x
        elif hasattr(x, "__dlpack__") and not isinstance(x, (bytes, bytearray, memoryview)):
            try:
                arr = np.from_dlpack(x)
            except (TypeError, BufferError, RuntimeError) as e:
                raise _errors.invalid(func, "cannot import %s through DLPack as a host array: %s"
                                      % (type(x).__name__, e)) from None
        elif isinstance(x, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(x, dtype=np.uint8)
            if writable and isinstance(x, bytes):
                raise _errors.invalid(func, "out= must be writable")
        else:
            if not copy_ok:
                raise _errors.invalid(func, "out= must be a NumPy array or a torch tensor, not %s"
                                      % type(x).__name__)
            arr = np.asarray(x)
        if arr.dtype.byteorder == ">":
            raise _errors.invalid(func, "big-endian arrays are not supported; use .astype('<%s')"
                                  % arr.dtype.str[1:])
        if arr.dtype.name == "bfloat16":  # ml_dtypes
            code = 10
        else:
            code = _NP_KIND_TO_CODE.get(arr.dtype.newbyteorder("=") if arr.dtype.byteorder == "<"
                                        else arr.dtype)
            if code is None:
                raise _errors.invalid(func, "dtype %s is not supported" % arr.dtype)
        if not arr.flags.c_contiguous:
            if not copy_ok:
                raise _errors.invalid(func, "out= must be C-contiguous")
            arr = np.ascontiguousarray(arr)
        shape = arr.shape
        keep = x
        view = arr.view(np.uint16) if code == 10 else arr
    if writable and not view.flags.writeable:
        raise _errors.invalid(func, "out= is read-only")
    if dtype is not None:
        want = dtype_code(dtype)
        if want != code:
            if np.dtype(_NP_STORAGE[want]).itemsize != view.dtype.itemsize or want == 13:
                raise _errors.invalid(func, "dtype=%s needs %d-byte elements, the array has %s"
                                      % (dtype, np.dtype(_NP_STORAGE[want]).itemsize,
                                         DTYPE_NAMES[code]))
            view = view.view(_NP_STORAGE[want])
            code = want
    return HostArray(view, code, shape, kind, keep)


def empty(shape, code: int, kind: str):
    """A new C-contiguous array for libibp to fill: returns (result, ptr)
    where result is what the caller gets (numpy or torch)."""
    if kind == "torch":
        t = _torch()
        out = t.empty(tuple(shape), dtype=torch_dtype(code))
        return out, out.data_ptr()
    arr = np.empty(tuple(shape), dtype=numpy_dtype(code))
    return arr, arr.ctypes.data


def numpy_dtype(code: int):
    """NumPy dtype used for outputs of libibp dtype `code`: bf16 is
    ml_dtypes.bfloat16 when ml_dtypes is importable, else uint16 bit patterns."""
    if code == 10:
        ml = sys.modules.get("ml_dtypes")
        if ml is None:
            try:
                import ml_dtypes as ml  # noqa: F401  (optional)
            except ImportError:
                ml = None
        if ml is not None:
            return np.dtype(ml.bfloat16)
        return np.dtype(np.uint16)
    return np.dtype(_NP_STORAGE[code])


def check_out(out, shape, code: int, func: str) -> HostArray:
    """Validates a caller's out= array: host, C-contiguous, writable, the
    exact shape and the dtype (bf16: bfloat16, or 16-bit integer bit patterns)."""
    h = as_host(out, func, writable=True, copy_ok=False)
    if h.shape != tuple(shape):
        raise _errors.invalid(func, "out= has shape %s, expected %s" % (h.shape, tuple(shape)))
    ok = h.code == code or (code == 10 and h.code in (2, 6)) or (code == 0 and h.code in (1, 5))
    if not ok:
        raise _errors.invalid(func, "out= has dtype %s, expected %s"
                              % (DTYPE_NAMES[h.code], DTYPE_NAMES[code]))
    return h


def as_ids(ids, func: str):
    """Row ids as a C-contiguous int64 NumPy array (any shape), plus the
    caller's kind. int32/int64 (and other integer) arrays and tensors, lists
    and ranges are accepted; floats and bools are refused."""
    kind = "numpy"
    if is_torch(ids):
        kind = "torch"
        if ids.device.type != "cpu":
            raise _errors.invalid(func, "ids are on %s; the CPU store takes host ids" % ids.device)
        t = _torch()
        if ids.dtype == t.bool or ids.is_floating_point() or ids.is_complex():
            raise _errors.invalid(func, "ids must be integers, not %s" % ids.dtype)
        if ids.dtype != t.int64:
            ids = ids.to(t.int64)
        # a negative view (is_neg) keeps its memory un-negated: materialise it
        arr = ids.detach().resolve_neg().contiguous().numpy()
        return arr, kind
    if isinstance(ids, range):
        arr = np.arange(ids.start, ids.stop, ids.step, dtype=np.int64)
        return arr, kind
    if isinstance(ids, np.ndarray):
        arr = ids
    elif hasattr(ids, "__dlpack__"):
        arr = np.from_dlpack(ids)
    else:
        arr = np.asarray(ids)
        if arr.size == 0:
            arr = arr.astype(np.int64)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise _errors.invalid(func, "ids must be integers, not %s" % arr.dtype)
    if arr.dtype.kind == "u" and arr.size and arr.dtype.itemsize == 8 and int(arr.max()) > (1 << 63) - 1:
        from ._errors import OutOfRangeError
        pos = int(np.argmax(arr > (1 << 63) - 1))
        raise OutOfRangeError("%s: id %d at position %d is out of range" % (func, int(arr.flat[pos]), pos),
                              func=func, detail="id out of range")
    if arr.dtype != np.int64 or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=np.int64)
    return arr, kind


def wrap(arr: np.ndarray, code: int, kind: str):
    """Returns a NumPy result in the caller's framework (torch shares memory)."""
    if kind == "torch":
        t = _torch()
        if code == 10:
            return t.from_numpy(arr.view(np.int16)).view(t.bfloat16)
        if code in (6, 7, 8) and torch_dtype(code) != t.uint8:
            signed = {6: np.int16, 7: np.int32, 8: np.int64}[code]
            return t.from_numpy(arr.view(signed)).view(torch_dtype(code))
        return t.from_numpy(arr)
    if code == 10:
        return arr.view(numpy_dtype(10))
    return arr
