#!/usr/bin/env python3
"""embedding_bag.py - DLRM-style embedding bags from a compressed table:
ibp.torch.EmbeddingBag beside torch.nn.EmbeddingBag, measured in one run.

    python3 examples/embedding_bag.py [--table FILE.npy] [--bags N] [--pooling L]
                                      [--dtype float32|bfloat16|float16] [--codec ibp|exp]
                                      [--seconds S] [--threads T]

The table is the all-MiniLM-L6-v2 token-embedding matrix (30522 x 384
float32, 45 MiB: larger than this machine's 32 MiB L3) from
datasets/cache/ (python3 datasets/make_datasets.py --only embedding), or the
committed 1024-row sample when the cache is absent (then it fits in cache:
say so). Bags are `--bags` random bags of `--pooling` token ids each
(uniform ids: the worst case for caches). For each mode the script checks
that the outputs are bitwise equal (float32/float16; bfloat16 within 1-2
ulp, see python/tests/test_torch_bag.py), then prints bags per second of
both paths and the bytes each holds for the table.

Needs: pip install ./python torch (the tests' virtual environment has both:
tools/test-python.sh).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import ibp
import ibp.torch as it

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL = os.path.join(REPO, "datasets", "cache", "minilm_tok_emb_f32.npy")
SAMPLE = os.path.join(REPO, "datasets", "sample", "minilm_tok_emb_f32.npy")


def rate(fn, seconds):
    fn()  # warm up
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n / dt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", help="a 2-D float .npy (default: MiniLM token embeddings)")
    ap.add_argument("--bags", type=int, default=2048)
    ap.add_argument("--pooling", type=int, default=20)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--codec", default="ibp", choices=["ibp", "exp"])
    ap.add_argument("--seconds", type=float, default=2.0, help="timing per path and mode")
    ap.add_argument("--threads", type=int, default=0, help="0: all CPUs (torch and ibp alike)")
    a = ap.parse_args(argv)

    path = a.table or (FULL if os.path.exists(FULL) else SAMPLE)
    weight = torch.from_numpy(np.load(path)).to(getattr(torch, a.dtype))
    if a.threads:
        torch.set_num_threads(a.threads)
    print("table: %s, %d x %d %s (%.1f MiB)%s" % (
        os.path.relpath(path, REPO), *weight.shape, a.dtype, weight.numel() * weight.element_size() / 2**20,
        "" if path != SAMPLE else "  [the committed sample: it fits in cache; make the full table with "
        "python3 datasets/make_datasets.py --only embedding]"))
    t0 = time.perf_counter()
    opts = {"block_rows": 16} if a.codec == "exp" else {}
    store = ibp.Store.from_array(weight, codec=a.codec, **opts)
    print("compressed with codec %s in %.2f s" % (a.codec, time.perf_counter() - t0))
    plain_bytes = weight.numel() * weight.element_size()
    print("table bytes held: nn.EmbeddingBag %d, ibp %d (%.1f%% saved, ratio %.3f)" % (
        plain_bytes, store.file_bytes, 100.0 * (1 - store.file_bytes / plain_bytes), store.ratio))

    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, weight.shape[0], (a.bags * a.pooling,), generator=g)
    offsets = torch.arange(0, idx.numel(), a.pooling)
    w = torch.rand(idx.shape, generator=g).to(weight.dtype)
    print("%d bags of %d ids, %d threads" % (a.bags, a.pooling, a.threads or os.cpu_count()))
    print("%-14s %14s %14s %8s  %s" % ("mode", "torch bags/s", "ibp bags/s", "ibp/torch", "outputs"))
    for mode, psw in (("sum", None), ("sum+weights", w), ("mean", None), ("max", None)):
        m = mode.split("+")[0]
        ref = torch.nn.EmbeddingBag.from_pretrained(weight, mode=m)
        ours = it.EmbeddingBag.from_pretrained(store, mode=m, nthreads=a.threads)
        with torch.no_grad():
            r, o = ref(idx, offsets, psw), ours(idx, offsets, psw)
        if a.dtype == "bfloat16":
            same = "max |diff| %.2g" % (r.float() - o.float()).abs().max()
        else:
            same = "bitwise equal" if torch.equal(r, o) else "DIFFERENT"
        with torch.no_grad():
            tr = rate(lambda: ref(idx, offsets, psw), a.seconds)
            ti = rate(lambda: ours(idx, offsets, psw), a.seconds)
        print("%-14s %14.0f %14.0f %8.2f  %s" % (mode, tr * a.bags, ti * a.bags, ti / tr, same))
        if same == "DIFFERENT":
            return 1
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
