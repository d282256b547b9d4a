#!/usr/bin/env python3
"""embedding_bag.py - DLRM-style embedding bags from a compressed table:
ibp.torch.EmbeddingBag beside torch.nn.EmbeddingBag, measured in one run.

    python3 examples/embedding_bag.py [--table FILE.npy] [--bags N] [--pooling L]
                                      [--dtype float32|bfloat16|float16] [--codec ibp|exp]
                                      [--seconds S] [--threads T] [--pf D,D,...]

The table is the all-MiniLM-L6-v2 token-embedding matrix (30522 x 384
float32, 45 MiB: larger than this machine's 32 MiB L3) from
datasets/cache/ (python3 datasets/make_datasets.py --only embedding), or the
committed 1024-row sample when the cache is absent (then it fits in cache:
say so). Bags are `--bags` random bags of `--pooling` token ids each
(uniform ids: the worst case for caches). For each mode the script checks
that the outputs are bitwise equal (float32/float16; bfloat16 within 1-2
ulp, see python/tests/test_torch_bag.py), then prints bags per second of
both paths and the bytes each holds for the table. --pf times ibp at each
listed look-ahead distance (IBP_GATHER_PREFETCH, read per call: rows whose
index entry and first payload lines are fetched while the current row
decodes; 0 = none, the bag as it was before the look-ahead; default 8).

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


def rate(fn, seconds, cpu=False):
    """Calls per second of wall time, or with cpu=True per second of this
    thread's CPU time (with --threads 1 both paths run on the calling
    thread; on a loaded machine the CPU time leaves out waiting for a core)."""
    clock = time.thread_time if cpu else time.perf_counter
    fn()  # warm up
    n, t0, w0 = 0, clock(), time.perf_counter()
    while True:
        fn()
        n += 1
        if time.perf_counter() - w0 >= seconds:
            return n / (clock() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", help="a 2-D float .npy (default: MiniLM token embeddings)")
    ap.add_argument("--bags", type=int, default=2048)
    ap.add_argument("--pooling", type=int, default=20)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--codec", default="ibp", choices=["ibp", "exp"])
    ap.add_argument("--seconds", type=float, default=2.0, help="timing per path and mode")
    ap.add_argument("--threads", type=int, default=0, help="0: all CPUs (torch and ibp alike)")
    ap.add_argument("--pf", default="8", help="look-ahead distances to time ibp at, e.g. 0,8")
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
    cpu = a.threads == 1
    print("%d bags of %d ids, %d threads; %s" % (a.bags, a.pooling, a.threads or os.cpu_count(),
                                               "bags per second of CPU time" if cpu else "bags per wall second"))
    pfs = [int(x) for x in a.pf.split(",")]
    print("%-14s %14s %s %8s  %s" % ("mode", "torch bags/s", " ".join("%14s" % ("ibp pf=%d" % d) for d in pfs),
                                     "ibp/torch", "outputs"))
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
            tr = rate(lambda: ref(idx, offsets, psw), a.seconds, cpu)
            ti = []
            for d in pfs:
                os.environ["IBP_GATHER_PREFETCH"] = str(d)
                ti.append(rate(lambda: ours(idx, offsets, psw), a.seconds, cpu))
            os.environ.pop("IBP_GATHER_PREFETCH")
        print("%-14s %14.0f %s %8.2f  %s" % (mode, tr * a.bags, " ".join("%14.0f" % (t * a.bags) for t in ti),
                                           ti[-1] / tr, same))
        if same == "DIFFERENT":
            return 1
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
