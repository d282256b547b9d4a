"""What vLLM's (0.34, 0.33) OffloadingConnector hands an offloading spec, made by
vLLM's own code: its OffloadingConfig (build_offloading_config), the
per-layer cache views of a raw KV buffer in a given layout
(create_kv_cache_views) and, in the tests, the CanonicalKVCaches its
worker-side connector derives from them (register_kv_caches). The model is
all-MiniLM-L6-v2 (6 layers, 12 KV heads of 32, bf16) with its real K/V from
datasets/sample; CPU tensors stand in for the GPU cache. Only the model
config is a stand-in (vLLM's ModelConfig needs the model's Hugging Face
files): the few fields the translation reads."""

import os
from types import SimpleNamespace as NS

import numpy as np
import torch
from vllm.config import CacheConfig, KVTransferConfig, ParallelConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor,
                                        create_kv_cache_views)

LAYERS, HEADS, HEAD, BLOCK = 6, 12, 32, 16
NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]


def minilm_kv(repo):
    """[layer][K or V] -> (128 tokens, 12 * 32) bf16."""
    bits = np.load(os.path.join(repo, "datasets", "sample", "minilm_kv_bf16.npy"))
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).view(LAYERS, 2, 128, HEADS * HEAD)


def vllm_config(extra, cache_dtype="auto"):
    return NS(kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                                  kv_connector_extra_config=dict(extra), engine_id="ibp-test"),
              parallel_config=ParallelConfig(), cache_config=CacheConfig(block_size=BLOCK, cache_dtype=cache_dtype),
              model_config=NS(use_mla=False, dtype=torch.bfloat16, model="sentence-transformers/all-MiniLM-L6-v2",
                              max_model_len=512, get_total_num_kv_heads=lambda: HEADS),
              kv_events_config=None, use_v2_model_runner=False)


def kv_cache(layout, num_blocks, kv=None):
    """(raw int8 buffer, {layer name: vLLM's [B, H, N, K|V] view}, KVCacheConfig)
    for the layout (a vllm.v1.kv_cache_layout.KVCacheLayout); the first
    128 tokens' K/V of kv (minilm_kv) fill blocks 0..7 when given."""
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=torch.bfloat16)
    page = spec.page_size_bytes
    size = LAYERS * num_blocks * page
    if layout.is_layer_compact:
        kt = KVCacheTensor(size=size, layers=NAMES, layer_stride=num_blocks * page, block_stride=page)
    else:  # every block holds all layers' pages: the cross-layer (packed) layout
        kt = KVCacheTensor(size=size, layers=NAMES, layer_stride=page, block_stride=LAYERS * page)
    raw = torch.zeros(size, dtype=torch.int8)
    views = create_kv_cache_views(raw, spec, num_blocks, layout, kt)
    if kv is not None:
        nb = 128 // BLOCK
        for layer, v in enumerate(views):
            for i in range(2):  # K then V within each head's cell
                x = kv[layer, i].reshape(nb, BLOCK, HEADS, HEAD).permute(0, 2, 1, 3)
                v[:nb, :, :, i * HEAD:(i + 1) * HEAD] = x
    kcc = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[kt],
                        kv_cache_groups=[KVCacheGroupSpec(list(NAMES), spec)])
    return raw, dict(zip(NAMES, views)), kcc


def offloading_config(extra, kcc, cache_dtype="auto"):
    return build_offloading_config(vllm_config(extra, cache_dtype), kcc)
