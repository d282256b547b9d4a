"""DLRM embedding bags over compressed tables: nn.EmbeddingBag's forward with
gather and pooling fused in libibp (ibp_store_embedding_bag, ibp/bag.h).

Inference only: the table is compressed once and never updated, like
nn.EmbeddingBag.from_pretrained(..., freeze=True). Options that only make
sense for training, or that change the table (max_norm renormalises rows in
place), raise at construction.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from .. import _errors, _lib
from .._cuda import CudaStore
from .._store import Store

_MODES = {"sum": 0, "mean": 1, "max": 2}
_POOLABLE = (torch.float32, torch.float16, torch.bfloat16)
_I32, _I64 = 3, 4  # libibp dtype codes of the ids
_UNFUSED = 1  # IBP_BAG_UNFUSED_WEIGHTS

__all__ = ["EmbeddingBag", "EmbeddingBagCollection", "KeyedTensor", "embedding_bag"]


def _store_from(weight, codec, codec_opts, func) -> Store:
    if isinstance(weight, Store):
        if codec_opts:
            raise _errors.invalid(func, "codec options apply when compressing a tensor, not to an ibp.Store")
        return weight
    if isinstance(weight, np.ndarray):
        weight = torch.from_numpy(weight)
    if not isinstance(weight, torch.Tensor):
        raise _errors.invalid(func, "weight must be a torch tensor, NumPy array or ibp.Store")
    if weight.dim() != 2:
        raise _errors.invalid(func, "weight must be 2-D (num_embeddings, embedding_dim), not %s"
                              % (tuple(weight.shape),))
    if weight.dtype not in _POOLABLE:
        raise _errors.invalid(func, "weight must be float32, float16 or bfloat16, not %s" % weight.dtype)
    if weight.device.type != "cpu":
        weight = weight.cpu()
    return Store.from_array(weight.detach().contiguous(), codec=codec, **codec_opts)


def _check_store(store: Store, func: str):
    if len(store.shape) != 2:
        raise _errors.invalid(func, "the table must be 2-D, not %s" % (store.shape,))
    if store.dtype not in ("float32", "float16", "bfloat16"):
        raise _errors.invalid(func, "the table must be float32, float16 or bfloat16, not %s" % store.dtype)


def _inference_only(func, what):
    raise _errors.UnsupportedError(
        "%s: %s: ibp.torch embedding bags are inference only (the table is compressed once and "
        "never updated); use torch.nn.EmbeddingBag to train" % (func, what),
        func=func, status=6)


def embedding_bag(input, store: Union[Store, CudaStore], offsets=None, mode: str = "mean", per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx: Optional[int] = None,
                  nthreads: int = 0, out=None):
    """torch.nn.functional.embedding_bag over the rows of `store` (a 2-D
    float32/float16/bfloat16 ibp.Store) instead of a weight tensor; same
    input, offsets, mode, per_sample_weights, include_last_offset and
    padding_idx rules. Returns a new (bags, dim) tensor, or fills `out`.
    With an ibp.CudaStore (Store.to_cuda()) the bags are pooled on its GPU
    (CudaStore.embedding_bag; the same bits as the CPU); a CPU store takes
    CPU tensors only."""
    func = "embedding_bag"
    if mode not in _MODES:
        raise _errors.invalid(func, "mode must be 'sum', 'mean' or 'max', not %r" % (mode,))
    if not isinstance(input, torch.Tensor):
        input = torch.as_tensor(input)
    # a negative view (t.neg()'s lazy form) would hand libibp the un-negated
    # memory: materialise it
    input = input.resolve_neg()
    if isinstance(offsets, torch.Tensor):
        offsets = offsets.resolve_neg()
    if isinstance(per_sample_weights, torch.Tensor):
        per_sample_weights = per_sample_weights.resolve_neg()
    if isinstance(store, CudaStore):
        if per_sample_weights is not None and torch.is_grad_enabled() and per_sample_weights.requires_grad:
            _inference_only(func, "per_sample_weights requires grad")
        return store.embedding_bag(input, offsets, mode, per_sample_weights, padding_idx, include_last_offset,
                                   out=out)
    if input.device.type != "cpu":
        raise _errors.invalid(func, "input is on %s but the table is a CPU ibp.Store: pass its CudaStore "
                              "(store.to_cuda()), or move the module with .cuda() / .to(device)" % input.device)
    if input.dtype not in (torch.int32, torch.int64):
        raise _errors.invalid(func, "input must be int32 or int64, not %s" % input.dtype)
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is "
                                      "only supported for mode='sum' (got mode='%s')" % mode)
        if torch.is_grad_enabled() and per_sample_weights.requires_grad:
            _inference_only(func, "per_sample_weights requires grad")
        if per_sample_weights.shape != input.shape:
            raise _errors.invalid(func, "per_sample_weights has shape %s, input %s"
                                  % (tuple(per_sample_weights.shape), tuple(input.shape)))
    # bags as PyTorch forms them (torch/nn/functional.py, embedding_bag)
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated as a mini-batch "
                             "of fixed length sequences.")
        offsets = torch.arange(0, input.numel(), input.size(1), dtype=torch.int64)
        include_last_offset = False  # as PyTorch: one bag per row
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.dim() == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if not isinstance(offsets, torch.Tensor):
            offsets = torch.as_tensor(offsets)
        if offsets.dim() != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        if offsets.dtype not in (torch.int32, torch.int64):
            raise _errors.invalid(func, "offsets must be int32 or int64, not %s" % offsets.dtype)
    else:
        raise ValueError("input has to be 1D or 2D Tensor, but got Tensor of dimension %d" % input.dim())
    offsets = offsets.to(torch.int64)
    n_ids = input.numel()
    if offsets.numel() and int(offsets[0]) != 0:
        raise _errors.invalid(func, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has "
                              "to start from position 0. However, got %d" % int(offsets[0]))
    if include_last_offset:
        # PyTorch's documented rule; its kernels disagree with each other
        # about the last bag when offsets[-1] is anything else
        if offsets.numel() == 0 or int(offsets[-1]) != n_ids:
            raise _errors.invalid(func, "with include_last_offset=True the last offset must be len(input) = %d"
                                  % n_ids)
        bounds = offsets.contiguous()
    else:
        bounds = torch.cat([offsets, torch.tensor([n_ids], dtype=torch.int64)])
    n_bags = bounds.numel() - 1
    nrows, dim = store.shape
    if padding_idx is None:
        pad = -1
    else:
        pad = int(padding_idx)
        if not -nrows <= pad < nrows:
            raise _errors.invalid(func, "padding_idx %d is outside [-%d, %d)" % (pad, nrows, nrows))
        pad = pad + nrows if pad < 0 else pad
    dtype = getattr(torch, store.dtype)
    if out is None:
        out = torch.empty(n_bags, dim, dtype=dtype)
    elif out.shape != (n_bags, dim) or out.dtype != dtype or not out.is_contiguous() or out.device.type != "cpu" \
            or out.is_neg():
        raise _errors.invalid(func, "out must be a contiguous CPU %s tensor of shape (%d, %d) (not a negative view)"
                              % (dtype, n_bags, dim))
    ids = input.contiguous()
    w = None
    if per_sample_weights is not None:
        w = per_sample_weights.detach().to(torch.float32).contiguous()
    h = store._acquire()
    try:
        # PyTorch's CPU kernel fuses w * row + acc (fbgemm) except for bags
        # with a padding_idx, whose generic kernel rounds the product first
        st = _lib.lib.ibp_store_embedding_bag(
            h, _MODES[mode], _UNFUSED if pad >= 0 else 0, ids.data_ptr() if n_ids else None, _I64 if ids.dtype == torch.int64 else _I32,
            n_ids, bounds.data_ptr(), n_bags, w.data_ptr() if w is not None and n_ids else None, pad,
            out.data_ptr() if n_bags else None, int(nthreads))
    finally:
        store._release()
    _lib.check(st, "ibp_store_embedding_bag")
    return out


class EmbeddingBag(torch.nn.Module):
    """nn.EmbeddingBag over a compressed table, for inference.

        bag = ibp.torch.EmbeddingBag.from_pretrained(weight, mode="sum")   # compresses weight
        out = bag(input, offsets)                 # == nn.EmbeddingBag(...)(input, offsets)
        out = bag(input2d)                        # fixed-length bags
        out = bag(input, offsets, per_sample_weights=w)                  # mode="sum"

    forward(input, offsets=None, per_sample_weights=None) follows
    nn.EmbeddingBag: 1-D input with offsets (include_last_offset as set at
    construction), 2-D input (one bag per row), empty bags give zeros,
    per_sample_weights with mode "sum" only, padding_idx occurrences left out
    (and not counted by "mean"), int32 or int64 input and offsets. Pooling
    runs in libibp on `nthreads` threads (0: all CPUs), rows decoded straight
    into the bag's accumulator: float32 outputs are bitwise those of
    nn.EmbeddingBag on the CPU (sum, weighted sum, mean, max); float16 too;
    bfloat16 can differ by a few units in the last place (PyTorch rounds its
    bfloat16 sums differently).

    On a GPU: EmbeddingBag.from_pretrained(...).cuda() (or .to("cuda:N"),
    or a CudaStore as the store, or simply CUDA input) pools on the GPU
    through an ibp.CudaStore made from the compressed table
    (CudaStore.embedding_bag: the same bits as the CPU path); without a
    usable GPU that raises ibp.NoDeviceError. Only codec "ibp" tables have a
    GPU form: others raise ibp.UnsupportedError there. .cpu() goes back.

    The module has no parameters: the table is compressed, read-only, and
    never gets a gradient (as from_pretrained(..., freeze=True)).
    freeze=False, max_norm, scale_grad_by_freq and sparse=True raise
    ibp.UnsupportedError at construction; per_sample_weights that require
    grad raise at forward, as does requires_grad_(True).
    """

    def __init__(self, store: Union[Store, CudaStore], mode: str = "mean", include_last_offset: bool = False,
                 padding_idx: Optional[int] = None, nthreads: int = 0):
        super().__init__()
        func = "EmbeddingBag"
        self.cuda_store = None  # the table on a GPU, once the module is moved there
        if isinstance(store, CudaStore):
            self.cuda_store, store = store, store._host
        if not isinstance(store, Store):
            raise _errors.invalid(func, "use EmbeddingBag.from_pretrained(weight) or pass an ibp.Store")
        _check_store(store, func)
        if mode not in _MODES:
            raise _errors.invalid(func, "mode must be 'sum', 'mean' or 'max', not %r" % (mode,))
        n = store.shape[0]
        if padding_idx is not None:
            if not -n <= int(padding_idx) < n:
                raise _errors.invalid(func, "padding_idx must be within num_embeddings")
            padding_idx = int(padding_idx) % n
        self.store = store
        self.num_embeddings, self.embedding_dim = store.shape
        self.mode = mode
        self.include_last_offset = bool(include_last_offset)
        self.padding_idx = padding_idx
        self.nthreads = int(nthreads)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm: Optional[float] = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: Optional[int] = None, codec: str = "ibp", nthreads: int = 0,
                        **codec_opts) -> "EmbeddingBag":
        """nn.EmbeddingBag.from_pretrained's arguments, plus the codec
        (ibp.Store.from_array's) and its options. `embeddings` may also be
        an ibp.Store.

        codec "exp-rows" is the one for embedding bags (and random gathers)
        on the CPU: lossless, one exponent table for the whole table and
        every row decoded on its own in a few ns; about 0.85 of the raw size
        for float32 weights, 0.89 for float16, 0.70 for bfloat16, plus 8
        bytes a row. It takes no codec options (others raise). "ibp"
        (the default) is lossless too and the only one with a GPU form
        (.cuda()); "exp" (lossless) decodes whole blocks of rows, so a bag
        over random rows pays for their blocks; "fp8" (LOSSY, lossy=True)
        about 1 byte an element."""
        func = "EmbeddingBag.from_pretrained"
        if not freeze:
            _inference_only(func, "freeze=False")
        if max_norm is not None:
            _inference_only(func, "max_norm renormalises rows of the table in place")
        if scale_grad_by_freq:
            _inference_only(func, "scale_grad_by_freq")
        if sparse:
            _inference_only(func, "sparse gradients")
        if mode not in _MODES:
            raise _errors.invalid(func, "mode must be 'sum', 'mean' or 'max', not %r" % (mode,))
        return cls(_store_from(embeddings, codec, codec_opts, func), mode=mode,
                   include_last_offset=include_last_offset, padding_idx=padding_idx, nthreads=nthreads)

    def forward(self, input, offsets=None, per_sample_weights=None):
        store = self.store
        if isinstance(input, torch.Tensor) and input.device.type == "cuda":
            if self.cuda_store is None or self.cuda_store.device != input.device:
                self._to_device(input.device)
            store = self.cuda_store
        elif self.cuda_store is not None:
            raise _errors.invalid("EmbeddingBag", "the module is on %s: input must be a tensor there, not on %s"
                                  % (self.cuda_store.device, getattr(input, "device", "cpu")))
        return embedding_bag(input, store, offsets, self.mode, per_sample_weights,
                             self.include_last_offset, self.padding_idx, self.nthreads)

    def _to_device(self, device):
        device = torch.device(device)
        if device.type == "cpu":
            cs, self.cuda_store = self.cuda_store, None
            if cs is not None:
                cs.close()
            return
        if device.type != "cuda":
            raise _errors.invalid("EmbeddingBag.to", "device %s: only cpu and cuda" % device)
        if self.cuda_store is not None and (device.index is None or self.cuda_store.device == device):
            return
        # the compressed table copied to the GPU; ibp.NoDeviceError without one
        cs = self.store.to_cuda(device=device if device.index is not None else None)
        if self.cuda_store is not None:
            self.cuda_store.close()
        self.cuda_store = cs

    def cuda(self, device=None):
        """Pools on a GPU from now on (the compressed table copied there as
        an ibp.CudaStore). ibp.NoDeviceError without a usable GPU."""
        if device is None:
            device = torch.device("cuda")
        elif isinstance(device, int):
            device = torch.device("cuda", device)
        self._to_device(device)
        return self

    def cpu(self):
        self._to_device("cpu")
        return self

    def to(self, *args, **kwargs):
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None and dtype != getattr(torch, self.store.dtype):
            raise _errors.invalid("EmbeddingBag.to", "the compressed table is %s; it cannot be cast to %s"
                                  % (self.store.dtype, dtype))
        if device is not None:
            self._to_device(device)
        return self

    @property
    def device(self) -> torch.device:
        """Where the module pools: cpu, or the device of its CudaStore."""
        return self.cuda_store.device if self.cuda_store is not None else torch.device("cpu")

    def requires_grad_(self, requires_grad: bool = True):
        if requires_grad:
            _inference_only("EmbeddingBag.requires_grad_", "the compressed table has no gradient")
        return self

    @property
    def nbytes(self) -> int:
        """Host bytes of the compressed table."""
        return self.store.file_bytes

    # ---- state_dict, pickling ---------------------------------------------
    # The compressed table is the module's state: state_dict() holds it as
    # one uint8 tensor, the container's bytes ("<prefix>table"), so
    # torch.save(m.state_dict()) writes the compressed table, never decoded
    # rows, and load_state_dict opens it again (checksums verified).

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "table"] = torch.from_numpy(self.store.container_bytes())

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "table"
        rest = {k: v for k, v in state_dict.items() if k != key}
        super()._load_from_state_dict(rest, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            return
        data = state_dict[key]
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
            error_msgs.append('%s: expected a 1-D uint8 tensor (an ibp container), got %s'
                              % (key, type(data).__name__ if not isinstance(data, torch.Tensor)
                                 else "%s %s" % (data.dtype, tuple(data.shape))))
            return
        store = Store.from_bytes(data.detach().cpu().contiguous())  # ibp.CorruptError if damaged
        want = (self.num_embeddings, self.embedding_dim)
        if tuple(store.shape) != want or store.dtype != self.store.dtype:
            error_msgs.append("size mismatch for %s: the table in the checkpoint is %s %s, the module's %s %s"
                              % (key, store.dtype, tuple(store.shape), self.store.dtype, want))
            store.close()
            return
        self.store = store
        if self.cuda_store is not None:  # the module is on a GPU: the new table goes there too
            device, self.cuda_store = self.cuda_store.device, None
            self._to_device(device)

    def __getstate__(self):
        # a CudaStore is device state of this process: pickled as its device
        # and made again from the host table on load
        state = super().__getstate__()
        cs = state.get("cuda_store")
        state["cuda_store"] = None
        state["_cuda_device"] = str(cs.device) if cs is not None else None
        return state

    def __setstate__(self, state):
        device = state.pop("_cuda_device", None)
        super().__setstate__(state)
        if device is not None:
            self._to_device(device)  # ibp.NoDeviceError where there is no GPU

    def extra_repr(self) -> str:
        s = "%d, %d, mode=%s, codec=%s, ratio=%.2f" % (self.num_embeddings, self.embedding_dim, self.mode,
                                                      self.store.codec, self.store.ratio)
        if self.padding_idx is not None:
            s += ", padding_idx=%d" % self.padding_idx
        if self.include_last_offset:
            s += ", include_last_offset=True"
        return s


class KeyedTensor:
    """What EmbeddingBagCollection returns, shaped like torchrec's KeyedTensor:
    keys() (feature names), values() ([B, sum of dims]), length_per_key(),
    offset_per_key(), to_dict() and kt[key]. (With torchrec installed the
    collection returns torchrec's own KeyedTensor instead.)"""

    def __init__(self, keys: List[str], length_per_key: List[int], values: torch.Tensor, key_dim: int = 1):
        self._keys, self._lengths, self._values, self._key_dim = list(keys), list(length_per_key), values, key_dim

    def keys(self) -> List[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def length_per_key(self) -> List[int]:
        return self._lengths

    def offset_per_key(self) -> List[int]:
        o = [0]
        for n in self._lengths:
            o.append(o[-1] + n)
        return o

    def key_dim(self) -> int:
        return self._key_dim

    def to_dict(self) -> Dict[str, torch.Tensor]:
        return dict(zip(self._keys, self._values.split(self._lengths, dim=self._key_dim)))

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.to_dict()[key]


def _jagged(features):
    """{feature: (values, lengths, weights or None)} of a KeyedJaggedTensor
    (torchrec's, or anything with keys(), values(), lengths() and optionally
    weights_or_none() and stride_per_key()) or of a dict {key: (values,
    lengths[, weights])}. Each feature keeps its own batch size: a KJT with a
    variable batch per feature (stride_per_key_per_rank) has one per key."""
    if isinstance(features, Mapping):
        return {k: (v[0], v[1], v[2] if len(v) > 2 else None) for k, v in features.items()}
    keys = list(features.keys())
    values, lengths = features.values(), features.lengths()
    weights = features.weights_or_none() if hasattr(features, "weights_or_none") else None
    if hasattr(features, "stride_per_key"):
        strides = [int(s) for s in features.stride_per_key()]
    else:  # one batch size for all keys
        strides = [lengths.numel() // len(keys)] * len(keys) if keys else []
    if sum(strides) != lengths.numel():
        raise _errors.invalid("EmbeddingBagCollection", "%d lengths do not split into the batch sizes %s of "
                              "the %d keys" % (lengths.numel(), strides, len(keys)))
    out, at, start = {}, 0, 0
    for k, s in zip(keys, strides):
        lens = lengths[at:at + s]
        end = start + int(lens.sum()) if s else start
        out[k] = (values[start:end], lens, weights[start:end] if weights is not None else None)
        at, start = at + s, end
    if start != values.numel():
        raise _errors.invalid("EmbeddingBagCollection", "the lengths sum to %d, the KJT has %d values"
                              % (start, values.numel()))
    return out


def _inverse_indices(features):
    """(keys, [keys, B] int tensor) of a variable-batch KJT, which maps each
    feature's deduplicated batch back to the full batch, or None."""
    get = getattr(features, "inverse_indices_or_none", None)
    return get() if get is not None else None


class EmbeddingBagCollection(torch.nn.Module):
    """Several compressed tables, torchrec.EmbeddingBagCollection-shaped.

        ebc = ibp.torch.EmbeddingBagCollection.from_pretrained(
            {"user": user_w, "item": item_w},               # table name -> weight
            feature_names={"item": ["item_id", "item_hist"]},   # default: the table's own name
            mode="sum", codec={"user": "ibp", "item": "exp"})   # per table, or one for all
        kt = ebc(kjt)             # kjt: torchrec KeyedJaggedTensor, or {feature: (values, lengths)}
        kt.values()               # [B, sum of dims], features in table order

    Each feature is pooled over its table (an ibp.torch.EmbeddingBag, in
    self.bags[table]) from the feature's values and per-sample lengths;
    is_weighted=True uses the KJT's weights as per_sample_weights (mode
    "sum"). Tables differ, so each gets its own codec and options (codec and
    codec_opts may be dicts by table name; codecs as
    EmbeddingBag.from_pretrained, "exp-rows" being the usual choice for
    bags). Inference only, CPU only.
    """

    def __init__(self, bags: Mapping[str, EmbeddingBag], feature_names: Mapping[str, Sequence[str]] = None,
                 is_weighted: bool = False):
        super().__init__()
        self.bags = torch.nn.ModuleDict(dict(bags))
        feature_names = dict(feature_names or {})
        self._features = {t: list(feature_names.get(t, [t])) for t in self.bags}
        self.is_weighted = bool(is_weighted)

    @classmethod
    def from_pretrained(cls, tables: Mapping[str, object], feature_names: Mapping[str, Sequence[str]] = None,
                        mode: Union[str, Mapping[str, str]] = "sum",
                        codec: Union[str, Mapping[str, str]] = "ibp",
                        codec_opts: Mapping[str, dict] = None, is_weighted: bool = False,
                        nthreads: int = 0) -> "EmbeddingBagCollection":
        def per(v, t, default=None):
            return v.get(t, default) if isinstance(v, Mapping) else v
        bags = {}
        for name, w in tables.items():
            bags[name] = EmbeddingBag.from_pretrained(w, mode=per(mode, name, "sum"),
                                                      codec=per(codec, name, "ibp"), nthreads=nthreads,
                                                      **(dict(codec_opts or {}).get(name, {})))
        return cls(bags, feature_names, is_weighted)

    def feature_names(self) -> List[str]:
        return [f for t in self.bags for f in self._features[t]]

    def forward(self, features):
        func = "EmbeddingBagCollection"
        by_key = _jagged(features)
        keys, lengths, outs = [], [], []
        for t, bag in self.bags.items():
            for f in self._features[t]:
                if f not in by_key:
                    raise KeyError("EmbeddingBagCollection: the input has no feature %r (it has %s)"
                                   % (f, sorted(by_key)))
                values, lens, weights = by_key[f]
                offsets = torch.zeros(lens.numel(), dtype=torch.int64)
                if lens.numel() > 1:
                    offsets[1:] = torch.cumsum(lens[:-1].to(torch.int64), 0)
                outs.append(bag(values, offsets, weights if self.is_weighted else None))
                keys.append(f)
                lengths.append(bag.embedding_dim)
        inv = _inverse_indices(features)
        if inv is not None and outs:
            # variable batch: each feature's bags expanded to the full batch,
            # as torchrec's EmbeddingBagCollection does
            names, idx = inv
            row = {n: i for i, n in enumerate(names)}
            for i, f in enumerate(keys):
                if f.split("@")[0] not in row:
                    raise _errors.invalid(func, "inverse_indices has no row for feature %r" % f)
                ix = idx[row[f.split("@")[0]]].to(torch.int64)
                if ix.numel() and (int(ix.min()) < 0 or int(ix.max()) >= outs[i].shape[0]):
                    raise _errors.invalid(func, "inverse_indices of %r point outside its %d bags"
                                          % (f, outs[i].shape[0]))
                outs[i] = outs[i].index_select(0, ix)
        batch = {f: o.shape[0] for f, o in zip(keys, outs)}
        if len(set(batch.values())) > 1:
            raise _errors.invalid(func, "the features have different batch sizes %s (a variable-batch "
                                  "KeyedJaggedTensor without inverse_indices): the pooled rows cannot "
                                  "be put side by side" % batch)
        values = torch.cat(outs, 1) if outs else torch.empty(0, 0)
        try:
            from torchrec.sparse.jagged_tensor import KeyedTensor as TrecKeyedTensor
        except ImportError:
            return KeyedTensor(keys, lengths, values)
        return TrecKeyedTensor(keys=keys, length_per_key=lengths, values=values)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.bags.values())
