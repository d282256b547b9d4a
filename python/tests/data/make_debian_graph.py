#!/usr/bin/env python3
"""Cut the committed graph sample python/tests/data/debian_graph.npz (115 KB)
from the Debian package graph that datasets/make_datasets.py builds.

    python3 datasets/make_datasets.py --only gnn        # datasets/cache/debian_*.npy
    python3 python/tests/data/make_debian_graph.py [--cache datasets/cache]

The whole default-size graph (4605 nodes, 6755 edges, 1433-word bag of
words; datasets/README.md "Debian package graph"), stored compactly:

  edges        int32 (E, 2)   row [i, j]: package i depends on package j
  labels       uint8 (N,)     Debian section, 0..6 (net, science, games,
                              sound, graphics, math, video)
  bow_indptr   int32 (N + 1,) CSR of the 0/1 bag-of-words matrix (N x 1433)
  bow_indices  uint16 (nnz,)  column of every 1, row-major order
  bow_cols     int64 ()       1433

The PCA features (debian_pca100_f32.npy) are not stored (1.8 MB of dense
floats): ibp.torch's tests recompute them from the bag of words
(tests/test_torch_features.py, `debian_graph`). Checked here against the
committed sample datasets/sample/debian_bow_f32.npy (256 evenly spaced rows
of the same matrix), so both come from the same archive snapshot.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=os.path.join(REPO, "datasets", "cache"))
    ap.add_argument("--out", default=os.path.join(HERE, "debian_graph.npz"))
    a = ap.parse_args(argv)
    bow = np.load(os.path.join(a.cache, "debian_bow_u8.npy"))
    edges = np.load(os.path.join(a.cache, "debian_edges.npy"))
    labels = np.load(os.path.join(a.cache, "debian_labels.npy"))
    sample = np.load(os.path.join(REPO, "datasets", "sample", "debian_bow_f32.npy"))
    idx = np.linspace(0, bow.shape[0] - 1, sample.shape[0]).round().astype(np.int64)
    if not np.array_equal(sample, bow[idx].astype(np.float32)):
        sys.exit("the graph in %s is not the one datasets/sample was cut from" % a.cache)
    rows, cols = np.nonzero(bow)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=bow.shape[0]))])
    np.savez_compressed(a.out, edges=edges.astype(np.int32), labels=labels.astype(np.uint8),
                        bow_indptr=indptr.astype(np.int32), bow_indices=cols.astype(np.uint16),
                        bow_cols=np.int64(bow.shape[1]))
    print("%s: %d nodes, %d edges, %d ones, %d bytes" % (a.out, bow.shape[0], edges.shape[0],
                                                          cols.size, os.path.getsize(a.out)))


if __name__ == "__main__":
    main()
