#!/usr/bin/env python3
"""Exponent codec 2 (issue 40): the rANS table mode against today's modes
and ZipNN, one core each, same data, same run.

Cases: BF16 N(0, 0.02), FP16 N(0, 0.02), FP32 N(0, 0.02), FP32 weights
(datasets/sample/minilm_tok_emb_f32.npy), BF16 KV rows
(datasets/sample/minilm_kv_bf16.npy), each as one tensor and in 64 KiB
element chunks (--chunk). Prints ratio (raw / compressed) and encode /
decode GB/s (raw bytes per second, best of --reps, one thread) per codec,
and rANS's ratio over ZipNN's. ZipNN is skipped (and said so) when it does
not import.

    IBP_LIBRARY=build/libibp.so PYTHONPATH=python/src \\
        ~/.cache/ibp/zipnn-venv/bin/python bench/exp2_vs_zipnn.py [--n N] [--reps R]
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python", "src"))

import ibp.exp  # noqa: E402


def bf16_of(f32):
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def cases(n):
    rng = np.random.default_rng(40)
    g = (rng.standard_normal(n) * 0.02).astype(np.float32)
    out = [("bf16 N(0,0.02)", bf16_of(g), "bf16", "bfloat16"),
           ("fp16 N(0,0.02)", g.astype(np.float16), None, "float16"),
           ("fp32 N(0,0.02)", g, None, "float32")]
    sample = os.path.join(ROOT, "datasets", "sample")
    w = os.path.join(sample, "minilm_tok_emb_f32.npy")
    if os.path.exists(w):
        out.append(("fp32 weights (minilm emb)", np.load(w).astype(np.float32).ravel(), None, "float32"))
    kv = os.path.join(sample, "minilm_kv_bf16.npy")
    if os.path.exists(kv):
        out.append(("bf16 KV rows (minilm)", np.load(kv).view(np.uint16).ravel(), "bf16", "bfloat16"))
    return out


def best(fn, reps, setup=None):
    t = float("inf")
    r = None
    for _ in range(reps):
        arg = setup() if setup else None
        t0 = time.perf_counter()
        r = fn(arg) if setup else fn()
        t = min(t, time.perf_counter() - t0)
    return t, r


def run_ibp(x, dt, table, chunk, reps):
    raw = x.nbytes
    if chunk:
        enc = lambda: ibp.exp.compress_chunks(x, chunk, table=table, nthreads=1, dtype=dt)  # noqa: E731
        dec = lambda b: ibp.exp.decompress_chunks(b, nthreads=1)  # noqa: E731
    else:
        enc = lambda: ibp.exp.compress(x, table=table, nthreads=1, dtype=dt)  # noqa: E731
        dec = lambda b: ibp.exp.decompress(b, nthreads=1)  # noqa: E731
    te, buf = best(enc, reps)
    size = buf.nbytes if hasattr(buf, "nbytes") else len(buf)
    td, y = best(lambda: dec(buf), reps)
    y = np.asarray(y)
    if y.view(np.uint8).tobytes() != x.view(np.uint8).tobytes():
        raise SystemExit("ibp %s: round trip differs" % table)
    return raw / size, raw / te / 1e9, raw / td / 1e9


def run_zipnn(x, zdt, chunk, reps):
    try:
        import zipnn
    except Exception as e:  # noqa: BLE001
        return None, "zipnn does not import: %s" % e
    raw = x.nbytes
    data = x.view(np.uint8).tobytes()
    z = zipnn.ZipNN(input_format="byte", bytearray_dtype=zdt, threads=1)
    # ZipNN reorders its input in place: each timed run gets fresh copies
    step = (chunk or len(data)) * (x.itemsize if chunk else 1)
    fresh = lambda: [bytearray(data[i:i + step]) for i in range(0, len(data), step)]  # noqa: E731
    te, cs = best(lambda parts: [bytes(z.compress(p)) for p in parts], reps, fresh)
    td, ds = best(lambda _: [bytes(z.decompress(c)) for c in cs], reps, lambda: None)
    size = sum(len(c) for c in cs)
    ok = b"".join(ds) == data
    if not ok:
        raise SystemExit("zipnn: round trip differs")
    return (raw / size, raw / te / 1e9, raw / td / 1e9), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1 << 24, help="elements of the synthetic cases")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=1 << 16, help="elements per chunk (0: whole tensors only)")
    a = ap.parse_args()
    print("%-28s %-8s %-12s %7s %9s %9s" % ("case", "layout", "codec", "ratio", "enc GB/s", "dec GB/s"))
    for name, x, dt, zdt in cases(a.n):
        for chunk in ([0, a.chunk] if a.chunk else [0]):
            layout = "whole" if not chunk else "chunk%dK" % (chunk >> 10)
            res = {}
            for table in ("rans", "hist", "sigma"):
                res[table] = run_ibp(x, dt, table, chunk, a.reps)
            zr, why = run_zipnn(x, zdt, chunk, a.reps)
            if zr:
                res["zipnn"] = zr
            for k, (r, e, d) in res.items():
                label = {"rans": "ibp rans", "hist": "ibp hist", "sigma": "ibp sigma", "zipnn": "ZipNN"}[k]
                print("%-28s %-8s %-12s %7.3f %9.2f %9.2f" % (name, layout, label, r, e, d))
            if zr:
                print("%-28s %-8s %-12s %7.3f" % (name, layout, "rans/ZipNN", res["rans"][0] / zr[0]))
            else:
                print("  (%s)" % why)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
