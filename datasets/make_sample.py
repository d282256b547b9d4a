#!/usr/bin/env python3
"""Write the small committed sample (datasets/sample/) that CI benchmarks.

    python3 datasets/make_sample.py [--cache DIR] [--out DIR]

Three files of 1-1.5 MiB each (.npy v1.0, C order, little-endian), cut from
the default-size datasets of make_datasets.py (made first if not cached):

  minilm_tok_emb_f32.npy   dense float32 rows: token-embedding rows 1996..3019
                           (1996 is "the": frequent English word pieces)
  debian_bow_f32.npy       sparse binary rows (float32 0/1, ~1.2% ones):
                           256 evenly spaced nodes of the Debian graph
  minilm_kv_bf16.npy       bf16 KV-cache rows (uint16 bit patterns): K and V of
                           all 6 layers for the first 128 tokens of sequence 0,
                           rows ordered (layer, K|V, position)

It also writes SHA256SUMS and prints the table for datasets/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import make_datasets
from dsutil import DEFAULT_CACHE, SAMPLE_DIR, describe, save_npy, sha256_file

EMB_FIRST, EMB_ROWS = 1996, 1024
BOW_ROWS = 256
KV_TOKENS = 128


def ensure_cache(cache: Path) -> dict:
    """Make (or reuse) the default-size groups the sample is cut from."""
    params = dict(make_datasets.SIZES["default"])
    make_datasets.run(cache, params, ["embedding", "kv", "gnn"])
    return params


def cut_embedding(cache: Path) -> np.ndarray:
    table = np.load(cache / "minilm_tok_emb_f32.npy", mmap_mode="r")
    return np.array(table[EMB_FIRST:EMB_FIRST + EMB_ROWS])


def cut_bow(cache: Path) -> np.ndarray:
    bow = np.load(cache / "debian_bow_f32.npy", mmap_mode="r")
    idx = np.linspace(0, bow.shape[0] - 1, BOW_ROWS).round().astype(np.int64)
    return np.array(bow[idx])


def cut_kv(cache: Path) -> np.ndarray:
    meta = json.loads((cache / "minilm_kv_meta.json").read_text())
    layers, two, seqs, seq_len, width = meta["shape5d"]
    kv = np.load(cache / "minilm_kv_bf16.npy", mmap_mode="r")
    kv = kv.reshape(layers, two, seqs, seq_len, width)
    return np.array(kv[:, :, 0, :KV_TOKENS]).reshape(-1, width)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="where the default-size datasets are (made if missing)")
    ap.add_argument("--out", type=Path, default=SAMPLE_DIR, help="sample directory")
    args = ap.parse_args(argv)
    ensure_cache(args.cache)
    print(f"[sample] writing {args.out}", flush=True)
    files = {"minilm_tok_emb_f32.npy": cut_embedding(args.cache),
             "debian_bow_f32.npy": cut_bow(args.cache),
             "minilm_kv_bf16.npy": cut_kv(args.cache)}
    rows, total = [], 0
    for name, arr in files.items():
        path = save_npy(args.out / name, arr)
        describe(name[:-4], arr, path)
        size = path.stat().st_size
        total += size
        rows.append((name, arr.shape, arr.dtype, size, sha256_file(path)))
    bow = files["debian_bow_f32.npy"]
    print(f"  BoW fraction of ones {bow.mean():.4%}; total {total / 2**20:.2f} MiB", flush=True)
    if total > 5 * 2**20:
        raise SystemExit("sample exceeds 5 MiB")
    (args.out / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, _, _, _, h in rows))
    print("\n| file | shape | dtype | bytes | sha256 |\n|---|---|---|---|---|")
    for n, shape, dtype, size, h in rows:
        print(f"| `{n}` | {shape[0]} x {shape[1]} | {dtype} | {size} | `{h}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
