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
from ._handle import Handle, Owner

lib = _lib.lib
check = _lib.check

PAYLOAD_COPY_PINNED = 2
PAYLOAD_COPY_DEVICE = 3
_ROW_STATUSES = (0, 3, 8)  # IBP_OK, IBP_ERR_CORRUPT, IBP_ERR_OUT_OF_RANGE


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


class CudaStore(Owner):
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
        if store.codec != "ibp":  # libibp says "codec N"; name it and say what does work
            raise _errors.UnsupportedError(
                "Store.to_cuda: the store holds codec %r; only codec 'ibp' stores have a GPU form "
                "(ibp.CudaStore): pack the rows with codec='ibp' for GPU gathers and bags, or read this "
                "one on the CPU" % (store.codec,), func="Store.to_cuda", status=6)
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
        # a CUDA context does not survive fork(): the child must not touch it
        self._handle = Handle(out.value, lib.ibp_cuda_store_free, "ibp.CudaStore (%s)" % dev, process_bound=True)
        return self

    def __len__(self):
        return self.nrows

    def gather(self, ids, out=None, stream=None, check_errors: bool = True, cache=None):
        """Rows `ids` (a CUDA or host integer tensor, any shape) decoded on
        the GPU into a CUDA tensor of shape ids.shape + shape[1:] (or out=,
        a contiguous CUDA tensor, in place). Enqueued on `stream` (default:
        torch's current stream). With check_errors (default) that stream is
        synchronised and a bad id raises ibp.OutOfRangeError, a corrupt row
        ibp.CorruptError; check_errors=False keeps the call asynchronous
        (bad rows come back zero-filled).

        cache= (an ibp.Cache made with device=): rows are served from its
        device slabs or from this store and admitted (ibp_cache_gather_cuda;
        the call synchronises the stream)."""
        t = sys.modules["torch"]
        func = "CudaStore.gather"
        with t.cuda.device(self.device):
            if not isinstance(ids, t.Tensor):
                ids = t.as_tensor(ids)
            if ids.dtype == t.bool or ids.is_floating_point():
                raise _errors.invalid(func, "ids must be integers, not %s" % ids.dtype)
            ids = ids.to(device=self.device, dtype=t.int64).resolve_neg().contiguous()
            shape = tuple(ids.shape) + tuple(self.shape[1:])
            if out is None:
                out = t.empty(shape, dtype=_arrays.torch_dtype(self._code), device=self.device)
            else:
                if not isinstance(out, t.Tensor) or out.device != self.device or not out.is_contiguous() \
                        or out.is_neg() or out.is_conj():
                    raise _errors.invalid(func, "out= must be a contiguous tensor on %s (not a negative or "
                                          "conjugate view)" % self.device)
                if tuple(out.shape) != shape or out.element_size() * out.numel() != ids.numel() * self.row_bytes:
                    raise _errors.invalid(func, "out= has shape %s, expected %s" % (tuple(out.shape), shape))
            s = stream_handle(stream)
            status = t.empty(ids.numel(), dtype=t.int32, device=self.device) if check_errors else None
            if cache is not None and getattr(cache, "device", None) is None:
                raise _errors.invalid(func, "cache= must be an ibp.Cache made with device=")
            h = self._handle.acquire(func)
            try:
                if cache is None:
                    check(lib.ibp_gather_cuda(h, ids.data_ptr(), ids.numel(), out.data_ptr(), None,
                                              status.data_ptr() if status is not None else None,
                                              s or None), "ibp_gather_cuda")
                else:
                    ch = cache._handle.acquire()
                    try:
                        st = lib.ibp_cache_gather_cuda(ch, h, ids.data_ptr(), ids.numel(), out.data_ptr(),
                                                       None, status.data_ptr() if status is not None else None,
                                                       0, s or None)
                        if st not in _ROW_STATUSES:  # per-row failures: checked below from status
                            check(st, "ibp_cache_gather_cuda")
                    finally:
                        cache._handle.release()
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

    def embedding_bag(self, ids, offsets=None, mode: str = "sum", per_sample_weights=None, padding_idx=None,
                      include_last_offset: bool = False, out=None, stream=None, check_errors: bool = True):
        """nn.EmbeddingBag's forward over these rows on the GPU
        (ibp_store_embedding_bag_cuda): gather and pooling fused, one warp
        per bag, no [ids, dim] array. `ids` (int32/int64, CUDA or host)
        is 1-D with `offsets` (bag starts; with include_last_offset the
        last entry is len(ids) and ends the last bag), or 2-D with offsets
        None (one bag per row). mode "sum", "mean" or "max";
        per_sample_weights (as ids, mode "sum"); padding_idx occurrences
        are left out (and not counted by "mean"); empty bags give zeros.
        Results equal ibp.torch.embedding_bag on the CPU (and so the CPU
        nn.EmbeddingBag) bit for bit. Returns a (bags, dim) CUDA tensor of
        the table's dtype, or fills out= (contiguous, on this device).
        Enqueued on `stream` (default: torch's current stream). With
        check_errors (default) the stream is synchronised and a bad id
        raises ibp.OutOfRangeError, bad offsets ibp.InvalidArgumentError, a
        corrupt row ibp.CorruptError; check_errors=False keeps the call
        asynchronous (failed bags come back zero-filled)."""
        t = sys.modules["torch"]
        func = "CudaStore.embedding_bag"
        modes = {"sum": 0, "mean": 1, "max": 2}
        if mode not in modes:
            raise _errors.invalid(func, "mode must be 'sum', 'mean' or 'max', not %r" % (mode,))
        if len(self.shape) != 2:
            raise _errors.invalid(func, "the table must be 2-D, not %s" % (self.shape,))
        with t.cuda.device(self.device):
            if not isinstance(ids, t.Tensor):
                ids = t.as_tensor(ids)
            if ids.dtype not in (t.int32, t.int64):
                raise _errors.invalid(func, "ids must be int32 or int64, not %s" % ids.dtype)
            ids = ids.resolve_neg()  # a negative view's memory is not negated
            w = per_sample_weights
            if isinstance(w, t.Tensor):
                w = w.resolve_neg()
            if isinstance(offsets, t.Tensor):
                offsets = offsets.resolve_neg()
            if w is not None:
                if mode != "sum":
                    raise _errors.invalid(func, "per_sample_weights need mode 'sum', not %r" % mode)
                if not isinstance(w, t.Tensor) or tuple(w.shape) != tuple(ids.shape):
                    raise _errors.invalid(func, "per_sample_weights must be a tensor shaped as ids %s"
                                          % (tuple(ids.shape),))
            n = ids.numel()
            if ids.dim() == 2:
                if offsets is not None:
                    raise _errors.invalid(func, "2-D ids are bags of equal length: offsets must be None")
                bounds = t.arange(0, n + 1, max(ids.size(1), 1), dtype=t.int64, device=self.device)
                if ids.size(1) == 0:
                    bounds = t.zeros(ids.size(0) + 1, dtype=t.int64, device=self.device)
            elif ids.dim() == 1:
                if offsets is None:
                    raise _errors.invalid(func, "1-D ids need offsets")
                if not isinstance(offsets, t.Tensor):
                    offsets = t.as_tensor(offsets)
                if offsets.dim() != 1 or offsets.dtype not in (t.int32, t.int64):
                    raise _errors.invalid(func, "offsets must be a 1-D int32 or int64 tensor")
                bounds = offsets.to(device=self.device, dtype=t.int64)
                if not include_last_offset:
                    bounds = t.cat([bounds, t.tensor([n], dtype=t.int64, device=self.device)])
                elif bounds.numel() == 0:
                    raise _errors.invalid(func, "include_last_offset=True needs at least one offset")
            else:
                raise _errors.invalid(func, "ids must be 1-D or 2-D, not %d-D" % ids.dim())
            bounds = bounds.contiguous()
            ids = ids.to(device=self.device).contiguous().reshape(-1)
            if w is not None:
                w = w.detach().to(device=self.device, dtype=t.float32).contiguous().reshape(-1)
            nrows, dim = self.shape
            pad = -1
            if padding_idx is not None:
                pad = int(padding_idx)
                if not -nrows <= pad < nrows:
                    raise _errors.invalid(func, "padding_idx %d is outside [-%d, %d)" % (pad, nrows, nrows))
                pad = pad + nrows if pad < 0 else pad
            n_bags = bounds.numel() - 1
            dtype = _arrays.torch_dtype(self._code)
            if out is None:
                out = t.empty(n_bags, dim, dtype=dtype, device=self.device)
            elif (not isinstance(out, t.Tensor) or out.device != self.device or not out.is_contiguous()
                  or tuple(out.shape) != (n_bags, dim) or out.dtype != dtype or out.is_neg()):
                raise _errors.invalid(func, "out= must be a contiguous %s tensor of shape (%d, %d) on %s"
                                      % (dtype, n_bags, dim, self.device))
            s = stream_handle(stream)
            status = t.empty(max(n_bags, 1), dtype=t.int32, device=self.device) if check_errors else None
            h = self._handle.acquire(func)
            try:
                # the CPU bag's flags: PyTorch's CPU kernel rounds w * row apart
                # from the sum in bags with a padding_idx (ibp/bag.h)
                check(lib.ibp_store_embedding_bag_cuda(
                    h, modes[mode], 1 if (w is not None and pad >= 0) else 0, ids.data_ptr() if n else None,
                    4 if ids.dtype == t.int64 else 3, n, bounds.data_ptr(), n_bags,
                    w.data_ptr() if w is not None and n else None, pad, self._code,
                    out.data_ptr() if n_bags else None, status.data_ptr() if status is not None else None,
                    s or None), "ibp_store_embedding_bag_cuda")
            finally:
                self._handle.release()
            if check_errors and n_bags:
                check(lib.ibp_cuda_sync(s or None), "ibp_cuda_sync")
                bad = t.nonzero(status[:n_bags]).flatten()
                if bad.numel():
                    b = int(bad[0])
                    st = int(status[b])
                    raise _errors.from_status(st, func, _lib.status_string(st),
                                              "bag %d failed; %d bag(s) failed" % (b, bad.numel()))
        return out
