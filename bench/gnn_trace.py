#!/usr/bin/env python3
"""Write a GNN neighbour-sampling trace for `ibp cache-sim`.

    python3 bench/gnn_trace.py EDGES.npy OUT.txt [--batch 64] [--fanout 10,5]
        [--epochs 3] [--seed 1] [--train-frac 1.0]

EDGES.npy is an E x 2 int64 edge list (datasets/: debian_edges.npy, made by
`python3 datasets/make_datasets.py --only gnn`), taken as undirected. Each
epoch shuffles the training nodes (the first --train-frac of a seeded
permutation of all nodes) into mini-batches of --batch seeds; each batch
samples, GraphSAGE-style, up to fanout[0] neighbours of every seed without
replacement, then up to fanout[1] of each of those, and so on. One line of
OUT.txt per batch: the distinct node ids whose input features the batch
needs (seeds and every sampled node), which is what a feature cache sees.
Deterministic for a given seed. Needs numpy.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("edges")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--fanout", default="10,5")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-frac", type=float, default=1.0)
    ap.add_argument("--nodes", type=int, default=0, help="node count (default: max id + 1)")
    a = ap.parse_args()
    fanout = [int(x) for x in a.fanout.split(",") if x]
    if a.batch < 1 or a.epochs < 1 or not fanout or min(fanout) < 1 or not 0 < a.train_frac <= 1:
        ap.error("--batch, --epochs and each fanout must be positive, --train-frac in (0, 1]")
    e = np.load(a.edges)
    if e.ndim != 2 or e.shape[1] != 2 or e.dtype.kind not in "iu":
        ap.error(f"{a.edges}: expected an E x 2 integer array, got {e.shape} {e.dtype}")
    n = a.nodes or int(e.max()) + 1
    if e.min() < 0 or e.max() >= n:
        ap.error(f"{a.edges}: edge ids outside [0, {n})")
    # CSR of the undirected graph.
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, src + 1, 1)
    indptr = np.cumsum(indptr)
    rng = np.random.default_rng(a.seed)
    train = rng.permutation(n)[: max(1, int(round(a.train_frac * n)))]
    lines = 0
    sizes = []
    with open(a.out, "w") as f:
        f.write(f"# gnn_trace.py {a.edges} batch {a.batch} fanout {a.fanout} epochs {a.epochs} "
                f"seed {a.seed} train-frac {a.train_frac}: {n} nodes, {len(e)} edges\n")
        for _ in range(a.epochs):
            seeds_all = rng.permutation(train)
            for b in range(0, len(seeds_all), a.batch):
                frontier = np.unique(seeds_all[b: b + a.batch])
                need = [frontier]
                for k in fanout:
                    nxt = []
                    for v in frontier:
                        nb = dst[indptr[v]: indptr[v + 1]]
                        if len(nb) > k:
                            nb = rng.choice(nb, size=k, replace=False)
                        nxt.append(nb)
                    frontier = np.unique(np.concatenate(nxt)) if nxt else frontier[:0]
                    need.append(frontier)
                ids = np.unique(np.concatenate(need))
                f.write(" ".join(map(str, ids.tolist())) + "\n")
                sizes.append(len(ids))
                lines += 1
    print(f"{a.out}: {lines} batches, {sum(sizes)} ids, mean {sum(sizes) / lines:.1f} per batch",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
