#!/usr/bin/env python3
"""kv_offload.py - swap paged KV-cache blocks out to a compressed host pool and
back (ibp.torch.KVOffloader, CPU path) beside plain copies, in one run.

    python3 examples/kv_offload.py [--block-size 16]

The K/V are all-MiniLM-L6-v2's, computed over real text (datasets/README.md:
6 layers, 12 heads of 32, bf16): datasets/cache/minilm_kv_bf16.npy (16
sequences of 256 tokens) when made by `python3 datasets/make_datasets.py
--only kv`, else the committed sample (one sequence of 128 tokens). Each
layer becomes a vLLM-layout cache [2, blocks, block_size, 12, 32]; every
block is swapped out and back into other slots. Prints, per run, host bytes
held and swap-out / swap-in throughput of the plain copy (index_select into
a host buffer, index_copy_ back) and of the offloader, and checks that the
restored cache is bit-identical.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import ibp.torch as it

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(REPO, "datasets", "cache")


def load_kv(block_size):
    full = os.path.join(CACHE, "minilm_kv_bf16.npy")
    if os.path.exists(full):
        meta = json.load(open(os.path.join(CACHE, "minilm_kv_meta.json")))
        layers, two, seqs, seq_len, width = meta["shape5d"]
        src = "datasets/cache/minilm_kv_bf16.npy"
        bits = np.load(full).reshape(layers, 2, seqs * seq_len, width)
    else:
        src = "datasets/sample/minilm_kv_bf16.npy (make the full set: datasets/make_datasets.py --only kv)"
        bits = np.load(os.path.join(REPO, "datasets", "sample", "minilm_kv_bf16.npy")).reshape(6, 2, 128, 384)
    tokens = bits.shape[2] // block_size * block_size
    t = torch.from_numpy(bits[:, :, :tokens].view(np.int16).copy()).view(torch.bfloat16)
    return src, [t[layer].reshape(2, tokens // block_size, block_size, 12, 32).contiguous()
                 for layer in range(t.shape[0])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--device", default=None,
                    help="cuda[:N]: the caches live on that GPU and the offloader takes its device path "
                         "(needs a GPU; raises ibp.NoDeviceError without one)")
    a = ap.parse_args(argv)
    src, layers = load_kv(a.block_size)
    if a.device is not None:
        it.KVOffloader(1, (a.block_size, 12, 32), torch.bfloat16, device=a.device)  # ibp's error first
        layers = [kv.to(a.device) for kv in layers]
    nb = layers[0].shape[1]
    shape = (a.block_size, 12, 32)
    raw = sum(kv.numel() * 2 for kv in layers)
    print("K/V: %s; %d layers x %d blocks of %s bf16 (%.1f MiB)" % (src, len(layers), nb, shape, raw / 2**20))
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(0))

    # plain: copy the blocks to a host buffer and back
    t = time.perf_counter()
    saved = [kv.index_select(1, perm.to(kv.device)).to("cpu") for kv in layers]  # to host memory
    t_out_plain = time.perf_counter() - t
    restored = [torch.empty_like(kv) for kv in layers]
    t = time.perf_counter()
    for r, s in zip(restored, saved):
        r.index_copy_(1, perm.to(r.device), s.to(r.device))
    if a.device is not None:
        torch.cuda.synchronize(a.device)
    t_in_plain = time.perf_counter() - t

    off = it.KVOffloader(len(layers), shape, torch.bfloat16, device=a.device)
    t = time.perf_counter()
    for layer, kv in enumerate(layers):
        off.calibrate(layer, kv[:, : max(1, nb // 8)])  # prefill: calibrate on the first blocks
    t_cal = time.perf_counter() - t
    t = time.perf_counter()
    handles = [off.store(layer, kv, perm.tolist()) for layer, kv in enumerate(layers)]
    for layer in range(len(layers)):
        off.wait(layer)  # the device path queues the copies into the pool
    t_out = time.perf_counter() - t
    back = [torch.zeros_like(kv) for kv in layers]
    t = time.perf_counter()
    for layer in range(len(layers)):
        off.load(layer, handles[layer], back[layer], perm.tolist())
    for layer in range(len(layers)):
        off.wait(layer)
    t_in = time.perf_counter() - t
    same = all(torch.equal(b.view(torch.int16), kv.view(torch.int16)) for b, kv in zip(back, layers))
    print("codec per layer: %s (calibrated in %.2f s)" % (
        ", ".join("%s %.2fx" % (off.codec(i), off.ratio(i)) for i in range(len(layers))), t_cal))
    print("%-12s %14s %14s %14s" % ("path", "host bytes", "out MB/s", "in MB/s"))
    print("%-12s %14d %14.0f %14.0f" % ("plain copy", raw, raw / t_out_plain / 1e6, raw / t_in_plain / 1e6))
    print("%-12s %14d %14.0f %14.0f" % ("ibp", off.used_bytes, raw / t_out / 1e6, raw / t_in / 1e6))
    print("host bytes saved: %.1f%%; restored cache bit-identical: %s" % (100 * (1 - off.used_bytes / raw), same))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
