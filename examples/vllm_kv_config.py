#!/usr/bin/env python3
"""vllm_kv_config.py - vLLM's (0.34, 0.33) KV offloading with compressed host blocks
(ibp.torch.vllm.IBPOffloadingSpec): the configuration a user writes, and the
host bytes it takes beside vLLM's own, uncompressed CPU offloading of the
same blocks.

    python3 examples/vllm_kv_config.py [--blocks-per-chunk 1] [--cpu-gib 8]

The blocks are all-MiniLM-L6-v2's real K/V (datasets/README.md: 6 layers,
12 KV heads of 32, bf16, 16-token blocks) laid out as vLLM's worker hands
them to an offloading spec (one (num_blocks, page) int8 tensor per layer,
each page [heads, tokens, K|V]): datasets/cache/minilm_kv_bf16.npy (16
sequences of 256 tokens) when made by `python3 datasets/make_datasets.py
--only kv`, else the committed sample (128 tokens). Every block is stored
through IBPOffloadingWorker (what vLLM's connector calls on each worker) and
loaded back bit-exactly. vLLM itself is not needed: without it the worker
runs on ibp.torch.vllm's stand-ins of vLLM's types.

vLLM's CPUOffloadingSpec keeps `cpu_bytes_to_use // chunk` chunks, a chunk
being blocks_per_chunk blocks of every layer (its `worker_kv_bytes_per_block`,
rounded up to the page size), uncompressed; the IBP spec counts chunks the
same way (times "ibp_assumed_ratio", default 1.0), and holds each
compressed: the printed ratio is how far "ibp_assumed_ratio" could go for
this model's K/V while still fitting `cpu_bytes_to_use`.
"""
import argparse
import json
import mmap
import os

import numpy as np
import torch

import ibp.torch.vllm as iv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS, HEADS, HEAD, BLOCK = 6, 12, 32, 16


def load_kv():
    full = os.path.join(REPO, "datasets", "cache", "minilm_kv_bf16.npy")
    if os.path.exists(full):
        meta = json.load(open(os.path.join(REPO, "datasets", "cache", "minilm_kv_meta.json")))
        layers, two, seqs, seq_len, width = meta["shape5d"]
        bits = np.load(full).reshape(layers, 2, seqs * seq_len, width)
        src = "datasets/cache/minilm_kv_bf16.npy"
    else:
        bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy")).reshape(6, 2, 128, 384)
        src = "datasets/sample (make the full set: datasets/make_datasets.py --only kv)"
    return src, torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)


def canonical_pages(kv):
    """Per layer: (num_blocks, page) int8, each page [heads, tokens, K|V] (vLLM's LBHNC layout)."""
    tokens = kv.shape[2] // BLOCK * BLOCK
    nb = tokens // BLOCK
    out = []
    for layer in range(LAYERS):
        p = torch.empty(nb, HEADS, BLOCK, 2 * HEAD, dtype=torch.bfloat16)
        for i in range(2):
            p[..., i * HEAD:(i + 1) * HEAD] = kv[layer, i, :tokens].reshape(nb, BLOCK, HEADS, HEAD).permute(0, 2, 1, 3)
        out.append(p.view(torch.int8).reshape(nb, -1))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks-per-chunk", type=int, default=1)
    ap.add_argument("--cpu-gib", type=float, default=8.0, help="cpu_bytes_to_use, in GiB")
    a = ap.parse_args(argv)
    cpu_bytes = int(a.cpu_gib * (1 << 30))
    extra = {"spec_name": "IBPOffloadingSpec", "spec_module_path": "ibp.torch.vllm",
             "cpu_bytes_to_use": cpu_bytes, "blocks_per_chunk": a.blocks_per_chunk}
    print("vLLM %s; the configuration (vLLM's own CPU offloading: spec_name \"CPUOffloadingSpec\"):"
          % (iv.VLLM_VERSION or "not installed (ibp.torch.vllm's stand-ins)"))
    print("    KVTransferConfig(kv_connector=\"OffloadingConnector\", kv_role=\"kv_both\",")
    print("                     kv_connector_extra_config=%s)" % json.dumps(extra))

    src, kv = load_kv()
    pages = canonical_pages(kv)
    nb = pages[0].shape[0] // a.blocks_per_chunk * a.blocks_per_chunk
    page = pages[0].shape[1]
    caches = iv.CanonicalKVCaches([iv.CanonicalKVCacheTensor(p.clone(), page) for p in pages],
                                  [[iv.CanonicalKVCacheRef(i, page) for i in range(LAYERS)]])
    w = iv.IBPOffloadingWorker(caches, "bfloat16", a.blocks_per_chunk, layers_per_group=[LAYERS])
    chunks = nb // a.blocks_per_chunk
    w.submit_store(0, iv.GPULoadStoreSpec(list(range(nb)), [nb], [0]), iv.CPULoadStoreSpec(list(range(chunks))))
    w.wait({0})
    assert all(r.success for r in w.get_finished())
    for t in caches.tensors:
        t.tensor.zero_()
    w.submit_load(1, iv.CPULoadStoreSpec(list(range(chunks))), iv.GPULoadStoreSpec(list(range(nb)), [nb], [0]))
    w.wait({1})
    assert all(r.success for r in w.get_finished())
    exact = all(torch.equal(t.tensor[:nb], p[:nb]) for t, p in zip(caches.tensors, pages))

    # vLLM's CPUOffloadingSpec: one chunk = blocks_per_chunk blocks of every layer, page-aligned
    worker_kv_bytes_per_block = LAYERS * page
    chunk_raw = worker_kv_bytes_per_block * a.blocks_per_chunk
    chunk_vllm = -(-chunk_raw // mmap.PAGESIZE) * mmap.PAGESIZE
    vllm_bytes = chunks * chunk_vllm
    ibp_bytes = w.host_bytes
    ratio = vllm_bytes / ibp_bytes
    print("\n%s: %d blocks of %d tokens, %d chunks of %d block(s), %d layers" % (src, nb, BLOCK, chunks,
                                                                          a.blocks_per_chunk, LAYERS))
    print("codecs per layer: %s" % ", ".join(w.codecs()))
    print("host bytes, vLLM CPUOffloadingSpec (uncompressed): %12d  (%d B a chunk)" % (vllm_bytes, chunk_vllm))
    print("host bytes, IBPOffloadingSpec (compressed):        %12d  (%.0f B a chunk)" % (ibp_bytes,
                                                                                       ibp_bytes / chunks))
    print("ratio %.3f; loaded back bit-exact: %s" % (ratio, exact))
    print("chunks in cpu_bytes_to_use = %.1f GiB: vLLM %d; IBP %d at ibp_assumed_ratio 1.0, about %d at %.2f"
          % (a.cpu_gib, cpu_bytes // chunk_vllm, iv.chunk_count(extra, worker_kv_bytes_per_block, 1,
                                                                  a.blocks_per_chunk),
             iv.chunk_count(dict(extra, ibp_assumed_ratio=ratio), worker_kv_bytes_per_block, 1,
                            a.blocks_per_chunk), ratio))
    w.shutdown()
    if not exact:
        raise SystemExit("round trip was not bit-exact")


if __name__ == "__main__":
    main()
