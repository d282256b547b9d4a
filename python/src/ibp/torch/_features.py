"""GNN feature loading from compressed stores: PyG's FeatureStore, a
GraphBolt-style Feature and DGL's gather_pinned_tensor_rows.

Node (or edge) features are written once, compressed into one ibp.Store per
(group, attribute), and read back as rows by id. The codec is lossless unless
asked otherwise (codec="fp8", lossy=True), so every read returns exactly the
rows that were put: a model trained on features served from here sees the
same numbers as one trained on the plain tensor.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import weakref
from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from .. import _errors
from .._store import Store

try:  # PyG is optional: with it, FeatureStore *is* a torch_geometric FeatureStore
    from torch_geometric.data import FeatureStore as _BaseFeatureStore
    from torch_geometric.data import TensorAttr
    HAVE_PYG = True
except ImportError:  # pragma: no cover - exercised where PyG is absent
    HAVE_PYG = False
    _BaseFeatureStore = None
    TensorAttr = None

__all__ = ["FeatureStore", "TensorAttr", "Feature", "gather_pinned_tensor_rows", "HAVE_PYG"]


# ---------------------------------------------------------------------------
# Without PyG: the same public surface on a plain class.

if not HAVE_PYG:
    class _Unset:
        def __repr__(self):
            return "UNSET"

    _UNSET = _Unset()

    @dataclasses.dataclass
    class TensorAttr:  # noqa: F811 - the PyG class when installed
        """(group_name, attr_name, index), as torch_geometric.data.TensorAttr."""
        group_name: Any = _UNSET
        attr_name: Any = _UNSET
        index: Any = _UNSET

        def is_set(self, key: str) -> bool:
            return getattr(self, key) is not _UNSET

        def is_fully_specified(self) -> bool:
            return all(self.is_set(k) for k in ("group_name", "attr_name", "index"))

        @classmethod
        def cast(cls, *args, **kwargs):
            if len(args) == 1 and not kwargs:
                a = args[0]
                if isinstance(a, cls):
                    return a
                if isinstance(a, (tuple, list)):
                    return cls(*a)
                if isinstance(a, dict):
                    return cls(**a)
            return cls(*args, **kwargs)

    class _BaseFeatureStore:  # noqa: F811
        """The public methods of torch_geometric.data.FeatureStore over the
        subclass's _put_tensor/_get_tensor/... (used when PyG is absent)."""

        def __init__(self, tensor_attr_cls=None):
            self.__dict__["_tensor_attr_cls"] = tensor_attr_cls or TensorAttr

        def _full(self, *args, **kwargs):
            attr = self._tensor_attr_cls.cast(*args, **kwargs)
            if not attr.is_fully_specified():
                raise ValueError("The input TensorAttr '%s' is not fully specified" % (attr,))
            return attr

        def put_tensor(self, tensor, *args, **kwargs) -> bool:
            return self._put_tensor(tensor, self._full(*args, **kwargs))

        def get_tensor(self, *args, convert_type: bool = False, **kwargs):
            return self._get_tensor(self._full(*args, **kwargs))

        def multi_get_tensor(self, attrs, convert_type: bool = False):
            return self._multi_get_tensor([self._full(a) for a in attrs])

        def _multi_get_tensor(self, attrs):
            return [self._get_tensor(a) for a in attrs]

        def remove_tensor(self, *args, **kwargs) -> bool:
            return self._remove_tensor(self._full(*args, **kwargs))

        def update_tensor(self, tensor, *args, **kwargs) -> bool:
            attr = self._tensor_attr_cls.cast(*args, **kwargs)
            self.remove_tensor(attr)
            return self.put_tensor(tensor, attr)

        def get_tensor_size(self, *args, **kwargs):
            attr = self._tensor_attr_cls.cast(*args, **kwargs)
            if not attr.is_set("index"):
                attr.index = None
            return self._get_tensor_size(attr)

        def __setitem__(self, key, value):
            self.put_tensor(value, self._tensor_attr_cls.cast(key))

        def __getitem__(self, key):
            return self.get_tensor(self._tensor_attr_cls.cast(key))

        def __delitem__(self, key):
            attr = self._tensor_attr_cls.cast(key)
            for k in ("group_name", "attr_name", "index"):
                if not attr.is_set(k):
                    setattr(attr, k, None)
            self.remove_tensor(attr)


# ---------------------------------------------------------------------------
# Shared: turning an index into int64 ids, gathering on the ids' device.

_cuda_stores: "weakref.WeakKeyDictionary[Store, Any]" = weakref.WeakKeyDictionary()
_cuda_lock = threading.Lock()


def _cuda_store(store: Store):
    """The GPU copy of `store` (made once, kept while the store lives)."""
    with _cuda_lock:
        cs = _cuda_stores.get(store)
        if cs is None:
            cs = store.to_cuda()  # ibp.NoDeviceError without a GPU build and a GPU
            _cuda_stores[store] = cs
        return cs


def _as_index(index, nrows: int):
    """None (all rows), an int (one row, dimension dropped) or an integer
    torch tensor of ids, from the index forms PyG allows: None, slice, int,
    NumPy array, torch tensor (integer or bool mask), sequence."""
    if index is None:
        return None
    if isinstance(index, slice):
        if index == slice(None):
            return None
        return torch.arange(*index.indices(nrows), dtype=torch.int64)
    if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
        i = int(index)
        return i + nrows if i < 0 else i
    if isinstance(index, np.ndarray):
        index = torch.from_numpy(np.ascontiguousarray(index))
    elif not isinstance(index, torch.Tensor):
        index = torch.as_tensor(index)
    if index.dtype == torch.bool:
        if index.shape != (nrows,):
            raise _errors.invalid("FeatureStore", "a boolean index must have shape (%d,), not %s"
                                  % (nrows, tuple(index.shape)))
        return index.nonzero().view(-1)
    if index.is_floating_point() or index.is_complex():
        raise _errors.invalid("FeatureStore", "index must hold integers, not %s" % index.dtype)
    return index


def _gather(store: Store, ids, nthreads: int = 0):
    """Rows `ids` (a torch integer tensor, any shape) of `store`, decoded on
    ids' device: libibp's CPU gather, or ibp.CudaStore for CUDA ids."""
    if ids.device.type == "cuda":
        return _cuda_store(store).gather(ids)
    return store.gather(ids, nthreads=nthreads)


def _read_all(store: Store, nthreads: int = 0):
    out = torch.empty(store.shape, dtype=_torch_dtype(store))
    return store.read(out=out, nthreads=nthreads)


def _torch_dtype(store: Store):
    return getattr(torch, store.dtype) if store.dtype != "bytes" else torch.uint8


def _compress(tensor, codec: str, opts: dict, func: str) -> Store:
    if isinstance(tensor, np.ndarray):
        tensor = torch.from_numpy(tensor)
    if not isinstance(tensor, torch.Tensor):
        raise _errors.invalid(func, "expected a torch tensor or NumPy array, not %s" % type(tensor).__name__)
    if tensor.dim() == 0:
        raise _errors.invalid(func, "a 0-dimensional tensor has no rows")
    if tensor.requires_grad:
        tensor = tensor.detach()
    return Store.from_array(tensor.cpu().contiguous(), codec=codec, **opts)


def _is_all_rows(index, n: int) -> bool:
    if index is None:
        return True
    if isinstance(index, slice):
        return range(*index.indices(n)) == range(n)
    t = torch.as_tensor(index)
    return t.dim() == 1 and t.numel() == n and not t.is_floating_point() and t.dtype != torch.bool \
        and bool((t.cpu() == torch.arange(n, dtype=t.dtype)).all())


# ---------------------------------------------------------------------------


class FeatureStore(_BaseFeatureStore):
    """PyG's torch_geometric.data.FeatureStore over compressed ibp stores,
    one per (group_name, attr_name).

        fs = ibp.torch.FeatureStore()              # codec="ibp": lossless
        fs["paper", "x", None] = x                 # or fs.put_tensor(x, group_name=..., ...)
        rows = fs["paper", "x", node_ids]          # == x[node_ids]
        bow, pca = fs.multi_get_tensor([("pkg", "bow", ids), ("pkg", "pca", ids)])

    Tensors are put whole (index None, a full slice or arange(N)) and are
    then read-only: a put on an existing key replaces the whole tensor, and a
    put of part of the rows raises (update_tensor, which PyG implements as
    remove + put, works for whole tensors). Reads accept every index PyG
    allows: None (all rows), a slice, an int (one row), a NumPy array or a
    torch tensor of int ids (any shape, duplicates and any order) or a bool
    mask. Ids must lie in [0, N): ids out of range raise ibp.OutOfRangeError
    (an IndexError) before anything is read; negative ids are not wrapped.
    CUDA ids read on the GPU through ibp.CudaStore (needs a CUDA build of
    libibp and a GPU; ibp.NoDeviceError otherwise). _multi_get_tensor
    batches: requests for the same tensor are served by one gather.

    codec and the other keyword arguments are those of ibp.Store.from_array
    (codec "ibp" default, "exp", "exp-rows" (float rows read at random: a
    row decodes on its own, on the CPU only), or "fp8" with lossy=True);
    nthreads is the number of threads of each gather (0: all CPUs).
    Thread-safe for reads.
    When torch_geometric is not installed this class has the same methods on
    a plain base class (ibp.torch._features.HAVE_PYG says which).
    """

    def __init__(self, codec: str = "ibp", nthreads: int = 0, tensor_attr_cls=None, **opts):
        super().__init__(tensor_attr_cls=tensor_attr_cls)
        self.__dict__.update(_codec=codec, _opts=dict(opts), _nthreads=int(nthreads), _stores={},
                             _lock=threading.Lock(), _closed=False)

    def _check_open(self, func: str):
        if self._closed:
            raise _errors.closed(func, "ibp.torch.FeatureStore")

    # Pickling (spawned DataLoader workers, deepcopy, torch.save): the
    # settings and one ibp.Store per tensor, each pickled as its compressed
    # bytes (never the decoded rows).
    def __getstate__(self):
        self._check_open("FeatureStore: pickle")
        with self._lock:
            state = dict(self.__dict__)
            state["_stores"] = dict(self._stores)
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__["_lock"] = threading.Lock()

    @staticmethod
    def key(attr) -> Tuple[Any, Any]:
        return (attr.group_name, attr.attr_name)

    # ---- PyG's abstract methods ------------------------------------------

    def _put_tensor(self, tensor, attr) -> bool:
        self._check_open("FeatureStore.put_tensor")
        n = tensor.shape[0] if getattr(tensor, "ndim", 0) else 0
        old = self._stores.get(self.key(attr))
        # index None replaces the whole tensor; an explicit index must name
        # every row of it, and of the tensor already there (else it is a
        # partial update)
        if not _is_all_rows(attr.index, n) or (attr.index is not None and old is not None
                                                and old.nrows != n):
            raise _errors.invalid(
                "FeatureStore.put_tensor",
                "%s: ibp.torch.FeatureStore is read-only once written: put whole tensors "
                "(index None, a full slice or arange(N)), not a part of the rows" % (self.key(attr),))
        store = _compress(tensor, self._codec, self._opts, "FeatureStore.put_tensor")
        with self._lock:
            old = self._stores.pop(self.key(attr), None)
            self._stores[self.key(attr)] = store
        if old is not None:
            old.close()
        return True

    def _store_of(self, attr) -> Store:
        self._check_open("FeatureStore.get_tensor")
        store = self._stores.get(self.key(attr))
        if store is None:
            raise KeyError("ibp.torch.FeatureStore has no tensor for %r" % (self.key(attr),))
        return store

    def _get_tensor(self, attr):
        store = self._store_of(attr)
        ids = _as_index(attr.index, store.nrows)
        if ids is None:
            return _read_all(store, self._nthreads)
        if isinstance(ids, int):
            return _gather(store, torch.tensor([ids]), self._nthreads)[0]
        return _gather(store, ids, self._nthreads)

    def _multi_get_tensor(self, attrs) -> List[Any]:
        # Requests for the same tensor with 1-D CPU id tensors are merged
        # into one gather and split again; everything else goes one by one.
        out: List[Any] = [None] * len(attrs)
        groups = {}
        for i, attr in enumerate(attrs):
            store = self._store_of(attr)
            ids = _as_index(attr.index, store.nrows)
            if isinstance(ids, torch.Tensor) and ids.dim() == 1 and ids.device.type == "cpu":
                groups.setdefault(self.key(attr), (store, []))[1].append((i, ids))
            else:
                out[i] = self._get_tensor(attr)
        for store, items in groups.values():
            if len(items) == 1:
                i, ids = items[0]
                out[i] = _gather(store, ids, self._nthreads)
                continue
            rows = _gather(store, torch.cat([ids.to(torch.int64) for _, ids in items]), self._nthreads)
            for (i, _), part in zip(items, rows.split([ids.numel() for _, ids in items])):
                out[i] = part
        return out

    def _remove_tensor(self, attr) -> bool:
        self._check_open("FeatureStore.remove_tensor")
        with self._lock:
            store = self._stores.pop(self.key(attr), None)
        if store is None:
            return False
        store.close()
        return True

    def _get_tensor_size(self, attr) -> Optional[Tuple[int, ...]]:
        self._check_open("FeatureStore.get_tensor_size")
        store = self._stores.get(self.key(attr))
        if store is None:
            return None
        index = attr.index if attr.is_set("index") else None
        ids = _as_index(index, store.nrows)
        if ids is None:
            return torch.Size(store.shape)
        if isinstance(ids, int):
            return torch.Size(store.shape[1:])
        return torch.Size(tuple(ids.shape) + tuple(store.shape[1:]))

    def get_all_tensor_attrs(self) -> List[Any]:
        self._check_open("FeatureStore.get_all_tensor_attrs")
        return [self._tensor_attr_cls.cast(g, a) for g, a in list(self._stores)]

    # ---- ibp extras -------------------------------------------------------

    def store(self, group_name, attr_name) -> Store:
        """The ibp.Store holding (group_name, attr_name)."""
        return self._store_of(self._tensor_attr_cls.cast(group_name, attr_name))

    @property
    def nbytes(self) -> int:
        """Host bytes of the compressed tensors (their container images)."""
        self._check_open("FeatureStore.nbytes")
        return sum(s.file_bytes for s in list(self._stores.values()))

    @property
    def plain_nbytes(self) -> int:
        """Bytes the same tensors take uncompressed."""
        self._check_open("FeatureStore.plain_nbytes")
        return sum(s.nrows * s.row_bytes for s in list(self._stores.values()))

    def close(self) -> None:
        """Closes every store (waits for running reads); every later call but
        close() and len() raises ibp.ClosedError."""
        with self._lock:
            stores, self.__dict__["_stores"] = list(self._stores.values()), {}
            self.__dict__["_closed"] = True
        for s in stores:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __len__(self) -> int:
        return len(self._stores)

    def __repr__(self) -> str:
        if self._closed:
            return "ibp.torch.FeatureStore(closed)"
        return "ibp.torch.FeatureStore(%d tensors, codec=%s, %d -> %d bytes)" % (
            len(self._stores), self._codec, self.plain_nbytes, self.nbytes)


# ---------------------------------------------------------------------------


class _Future:
    """What Feature.read_async yields: .wait() returns the rows."""

    def __init__(self, fut):
        self._fut = fut

    def wait(self):
        return self._fut.result()


_executor = None
_executor_lock = threading.Lock()


def _forget_executor():
    # a fork() child has none of the parent's reader threads: start anew
    global _executor, _executor_lock
    _executor, _executor_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_executor)


def _pool():
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="ibp-read")
        return _executor


class Feature:
    """A GraphBolt-style feature (dgl.graphbolt.Feature's methods) over one
    compressed ibp.Store.

        feat = ibp.torch.Feature(x)          # x: tensor or NumPy array, or an ibp.Store
        feat.read()                          # all rows (a new tensor)
        feat.read(ids)                       # x[ids], on ids' device
        feat.size(), feat.count()            # x.shape[1:], x.shape[0]

    Read-only: update() raises NotImplementedError (rows are compressed once;
    build a new Feature instead). read_async(ids) follows GraphBolt's
    protocol: a generator whose read_async_num_stages(ids.device)-th step
    yields a future, and future.wait() gives the rows (the gather runs on a
    background thread; libibp releases the GIL). codec and opts: as
    ibp.Store.from_array; a Store passed in is used as is (not copied) and
    closed by close() only when owned (made here).
    """

    def __init__(self, data, codec: str = "ibp", nthreads: int = 0, **opts):
        if isinstance(data, Store):
            self._store, self._owned = data, False
        else:
            self._store, self._owned = _compress(data, codec, opts, "Feature"), True
        self._nthreads = int(nthreads)
        self._closed = False

    def _check_open(self, func: str):
        if self._closed:
            raise _errors.closed(func, "ibp.torch.Feature")

    def __getstate__(self):
        # the store pickles as its path or compressed bytes
        self._check_open("Feature: pickle")
        return dict(self.__dict__)

    @property
    def store(self) -> Store:
        self._check_open("Feature.store")
        return self._store

    def read(self, ids=None):
        """All rows (ids None) or rows ids (int32/int64 tensor, any shape), in
        request order, duplicates allowed; on ids' device."""
        self._check_open("Feature.read")
        if ids is None:
            return _read_all(self._store, self._nthreads)
        idx = _as_index(ids, self._store.nrows)
        if isinstance(idx, int):
            idx = torch.tensor([idx])
            return _gather(self._store, idx, self._nthreads)[0]
        return _gather(self._store, idx, self._nthreads)

    def read_async_num_stages(self, ids_device=None) -> int:
        return 1

    def read_async(self, ids):
        self._check_open("Feature.read_async")
        fut = _pool().submit(self.read, ids)
        yield _Future(fut)

    def size(self) -> torch.Size:
        """The shape of one row (GraphBolt: the feature size, rows excluded)."""
        self._check_open("Feature.size")
        return torch.Size(self._store.shape[1:])

    def count(self) -> int:
        """Number of rows."""
        self._check_open("Feature.count")
        return self._store.nrows

    def update(self, value, ids=None):
        raise NotImplementedError(
            "ibp.torch.Feature is read-only: its rows were compressed once and are not updated in "
            "place; build a new Feature from the updated tensor")

    def metadata(self) -> dict:
        self._check_open("Feature.metadata")
        s = self._store
        return {"codec": s.codec, "dtype": s.dtype, "ratio": s.ratio, "nbytes": s.file_bytes}

    @property
    def nbytes(self) -> int:
        self._check_open("Feature.nbytes")
        return self._store.file_bytes

    def close(self) -> None:
        """Closes the store when this Feature made it; every later call but
        close() raises ibp.ClosedError."""
        self._closed = True
        if self._owned:
            self._store.close()

    def __repr__(self) -> str:
        if self._closed:
            return "ibp.torch.Feature(closed)"
        s = self._store
        return "ibp.torch.Feature(%d x %s %s, codec=%s, ratio %.2f)" % (
            s.nrows, list(s.shape[1:]), s.dtype, s.codec, s.ratio)


def gather_pinned_tensor_rows(tensor, rows):
    """DGL's dgl.utils.gather_pinned_tensor_rows(tensor, rows): the rows
    `rows` (a 1-D int32 or int64 tensor) of `tensor`, returned on rows'
    device. `tensor` may be a plain torch tensor (the plain path: index_select,
    moved to rows' device), an ibp.Store or an ibp.torch.Feature (decoded by
    libibp; on the GPU through ibp.CudaStore when rows are CUDA ids). Ids out
    of [0, N) raise ibp.OutOfRangeError (an IndexError) on every path."""
    if not isinstance(rows, torch.Tensor) or rows.dim() != 1 or rows.dtype not in (torch.int32, torch.int64):
        raise _errors.invalid("gather_pinned_tensor_rows", "rows must be a 1-D int32 or int64 tensor")
    if isinstance(tensor, Feature):
        tensor = tensor.store
    if isinstance(tensor, Store):
        return _gather(tensor, rows)
    if not isinstance(tensor, torch.Tensor):
        raise _errors.invalid("gather_pinned_tensor_rows",
                              "tensor must be a torch tensor, ibp.Store or ibp.torch.Feature")
    n = tensor.shape[0]
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n):
        bad = int(rows.min()) if int(rows.min()) < 0 else int(rows.max())
        raise _errors.OutOfRangeError("gather_pinned_tensor_rows: id %d is outside the %d rows" % (bad, n),
                                      func="gather_pinned_tensor_rows", status=8)
    return tensor.index_select(0, rows.to(tensor.device)).to(rows.device)
