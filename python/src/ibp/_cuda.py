"""ibp.CudaStore: gathers of compressed rows decoded on a GPU.

Needs a libibp built with CUDA (pip install ./python -Ccmake.define.IBP_CUDA=AUTO),
a usable GPU and PyTorch (its CUDA tensors carry ids and outputs). Without a
GPU every entry point raises ibp.NoDeviceError with libibp's detail message.
Streams: an int (cudaStream_t), a torch.cuda.Stream / ExternalStream, or any
object with __cuda_stream__; by default torch's current stream. Work is only
enqueued on that stream; nothing synchronises the device.
"""

from __future__ import annotations

import ctypes as C
import sys

from . import _arrays, _errors, _lib
from ._handle import Handle

lib = _lib.lib
check = _lib.check

PAYLOAD_COPY_PINNED = 2
PAYLOAD_COPY_DEVICE = 3


def cuda_built() -> bool:
    """True if this libibp was built with the CUDA kernels."""
    return bool(lib.ibp_cuda_built())


def device_count() -> int:
    """Number of usable CUDA devices (0 when none; never raises)."""
    n = C.c_int(0)
    return n.value if lib.ibp_cuda_device_count(C.byref(n)) == 0 else 0


def require_device(func: str) -> None:
    """Raises ibp.NoDeviceError (libibp's detail: no device, no driver, or
    a build without CUDA) unless a GPU is usable."""
    n = C.c_int(0)
    check(lib.ibp_cuda_device_count(C.byref(n)), func)


def stream_handle(stream) -> int:
    """The cudaStream_t value of `stream` as an int."""
    if stream is None:
        t = sys.modules.get("torch")
        if t is None:
            return 0
        return int(t.cuda.current_stream().cuda_stream)
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        v = stream.__cuda_stream__()
        return int(v[1] if isinstance(v, tuple) else v)
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    raise _errors.invalid("stream", "expected an int, a torch.cuda.Stream or an object with "
                          "__cuda_stream__, not %s" % type(stream).__name__)


class CudaStore:
    """Compressed rows on a GPU (or in pinned host memory read by the GPU),
    gathered and decoded by CUDA kernels."""

    __slots__ = ("_handle", "_host", "nrows", "row_bytes", "shape", "dtype", "_code", "device")

    def __init__(self, *a, **k):
        raise TypeError("use Store.to_cuda()")

    @classmethod
    def _create(cls, store, device, pinned):
        require_device("Store.to_cuda")
        t = sys.modules.get("torch")
        if t is None:
            raise _errors.UnsupportedError("Store.to_cuda: CUDA gathers need PyTorch (import torch)",
                                           func="Store.to_cuda", status=6)
        dev = t.device("cuda", t.cuda.current_device()) if device is None else t.device(device)
        if dev.type != "cuda":
            raise _errors.invalid("Store.to_cuda", "device %s is not a CUDA device" % dev)
        out = _lib.c_vp()
        with t.cuda.device(dev):
            s = stream_handle(None)
            h = store._acquire()
            try:
                check(lib.ibp_cuda_store_from_store(
                    h, PAYLOAD_COPY_PINNED if pinned else PAYLOAD_COPY_DEVICE, 0, s or None,
                    C.byref(out)), "ibp_cuda_store_from_store")
            finally:
                store._release()
        self = object.__new__(cls)
        self._host = store  # keeps the CPU store alive for the device store's life
        self.nrows = store.nrows
        self.row_bytes = store.row_bytes
        self.shape = store.shape
        self.dtype = store.dtype
        self._code = store._code
        self.device = dev
        self._handle = Handle(out.value, lib.ibp_cuda_store_free, "CUDA store")
        return self

    def __len__(self):
        return self.nrows

    def gather(self, ids, out=None, stream=None, check_errors: bool = True):
        """Rows `ids` (a CUDA or host integer tensor, any shape) decoded on
        the GPU into a CUDA tensor of shape ids.shape + shape[1:] (or out=,
        a contiguous CUDA tensor, in place). Enqueued on `stream` (default:
        torch's current stream). With check_errors (default) that stream is
        synchronised and a bad id raises ibp.OutOfRangeError, a corrupt row
        ibp.CorruptError; check_errors=False keeps the call asynchronous
        (bad rows come back zero-filled)."""
        t = sys.modules["torch"]
        func = "CudaStore.gather"
        with t.cuda.device(self.device):
            if not isinstance(ids, t.Tensor):
                ids = t.as_tensor(ids)
            if ids.dtype == t.bool or ids.is_floating_point():
                raise _errors.invalid(func, "ids must be integers, not %s" % ids.dtype)
            ids = ids.to(device=self.device, dtype=t.int64).contiguous()
            shape = tuple(ids.shape) + tuple(self.shape[1:])
            if out is None:
                out = t.empty(shape, dtype=_arrays.torch_dtype(self._code), device=self.device)
            else:
                if not isinstance(out, t.Tensor) or out.device != self.device or not out.is_contiguous():
                    raise _errors.invalid(func, "out= must be a contiguous tensor on %s" % self.device)
                if tuple(out.shape) != shape or out.element_size() * out.numel() != ids.numel() * self.row_bytes:
                    raise _errors.invalid(func, "out= has shape %s, expected %s" % (tuple(out.shape), shape))
            s = stream_handle(stream)
            status = t.empty(ids.numel(), dtype=t.int32, device=self.device) if check_errors else None
            h = self._handle.acquire()
            try:
                check(lib.ibp_gather_cuda(h, ids.data_ptr(), ids.numel(), out.data_ptr(), None,
                                          status.data_ptr() if status is not None else None,
                                          s or None), "ibp_gather_cuda")
            finally:
                self._handle.release()
            if check_errors and ids.numel():
                check(lib.ibp_cuda_sync(s or None), "ibp_cuda_sync")
                bad = t.nonzero(status).flatten()
                if bad.numel():
                    k = int(bad[0])
                    st = int(status[k])
                    raise _errors.from_status(st, func, _lib.status_string(st),
                                              "request %d (id %d) failed; %d request(s) failed"
                                              % (k, int(ids.flatten()[k]), bad.numel()))
        return out

    def close(self):
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
