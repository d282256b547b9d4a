"""ibp.torch: compressed feature and embedding tables as drop-ins for PyTorch users.

GNN feature loading (rows gathered by node id):

    fs = ibp.torch.FeatureStore()                  # PyG's torch_geometric.data.FeatureStore
    fs["paper", "x", None] = x                     # compressed once (lossless by default)
    rows = fs["paper", "x", node_ids]              # decoded rows, request order
    feat = ibp.torch.Feature(x)                    # GraphBolt-style: read(ids), size(), count()
    rows = ibp.torch.gather_pinned_tensor_rows(feat, ids)   # DGL's contract

DLRM embedding bags (gather and pooling fused in libibp, inference only):

    bag = ibp.torch.EmbeddingBag.from_pretrained(weight, mode="sum")
    out = bag(input, offsets)                      # as nn.EmbeddingBag
    ebc = ibp.torch.EmbeddingBagCollection({"user": w1, "item": w2})

Compressed gradient collectives (libibp's ring algorithms with
torch.distributed as the transport): ibp.torch.ddp_hook(codec="exp") for
DistributedDataParallel.register_comm_hook, ibp.torch.fsdp's
CompressedAllGather / CompressedReduceScatter for FSDP2, and
ibp.torch.moe's all_to_all_single / all_to_all (differentiable) for
expert-parallel MoE dispatch and combine.

LLM KV-cache offload: ibp.torch.KVOffloader (paged blocks compressed into a
host pool), and ibp.torch.vllm, an out-of-tree OffloadingSpec for vLLM 0.33.x/0.34.x
over it (kv_connector_extra_config={"spec_name": "IBPOffloadingSpec",
"spec_module_path": "ibp.torch.vllm", "cpu_bytes_to_use": N}; another vLLM
version raises ibp.UnsupportedError on import).

Everything here runs on the CPU; GPU paths go through ibp.CudaStore, which
needs a CUDA build of libibp and a GPU (ibp.NoDeviceError otherwise).
torch is imported by this subpackage (plain `import ibp` never does; without
torch, `import ibp.torch` raises an ImportError naming the `ibp[torch]` extra);
torch_geometric is used when installed (FeatureStore then subclasses its
FeatureStore) and is never required. See python/README.md, "ibp.torch".
"""

from __future__ import annotations

import importlib

try:
    import torch as _torch  # noqa: F401  (every module here needs it)
except ImportError as _e:
    raise ImportError(
        "ibp.torch needs PyTorch, which is not installed (%s): install it with "
        "`pip install \"ibp[torch]\"` (or `pip install torch`); plain `import ibp` works without it"
        % _e, name="torch") from _e

_LAZY = {
    "FeatureStore": "._features",
    "TensorAttr": "._features",
    "Feature": "._features",
    "gather_pinned_tensor_rows": "._features",
    "EmbeddingBag": "._bag",
    "EmbeddingBagCollection": "._bag",
    "embedding_bag": "._bag",
    "KVOffloader": "._kv",
    "ddp_hook": ".ddp",  # DDP comm hook over libibp's compressed collectives
    "all_to_all_single": ".moe",  # MoE all-to-all over libibp's AllToAll(v)
    "all_to_all": ".moe",  # its differentiable form
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    # Lazy: `ibp.torch.EmbeddingBag` does not import torch_geometric.
    if name == "vllm":  # the submodule (it imports vLLM 0.33/0.34 when installed)
        return importlib.import_module(".vllm", __name__)
    if name == "moe":  # the submodule: compressed all-to-all for MoE layers
        return importlib.import_module(".moe", __name__)
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError("module 'ibp.torch' has no attribute %r" % name)
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
