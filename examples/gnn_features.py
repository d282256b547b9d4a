#!/usr/bin/env python3
"""gnn_features.py - GraphSAGE on the Debian package graph with its node
features served from compressed stores (ibp.torch.FeatureStore, PyG's
FeatureStore interface) beside the same run on plain tensors.

    python3 examples/gnn_features.py [--epochs N] [--batch B] [--fanouts 10,5]

The graph: 4605 Debian packages (sections net, science, games, sound,
graphics, math, video as labels), 6755 dependency edges, a 1433-word
bag-of-words row and a 100-dimensional PCA row per package
(python/tests/data/debian_graph.npz; datasets/README.md says how it was
made). One epoch by default: mini-batches of seed packages, neighbours drawn
by a small sampler written in torch ops, PyG's SAGEConv when torch_geometric
is installed (else the same layer in torch). Both runs use the same seed;
the script checks that every loss is bit-identical and prints, for each
path, the time spent fetching features, the rows fetched per second and the
host bytes the features take.

Needs: pip install ./python torch [torch_geometric] (tools/test-python.sh's
virtual environment has them).
"""
import argparse
import os
import sys
import time

import torch

import ibp.torch as it
from ibp.torch import _features

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
import debian_graph  # noqa: E402  (the graph loader, sampler and model the tests use)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--codec", default="ibp", choices=["ibp", "exp"])
    a = ap.parse_args(argv)
    fanouts = tuple(int(x) for x in a.fanouts.split(","))

    g = debian_graph.load()
    bow, pca = torch.from_numpy(g["bow"]), torch.from_numpy(g["pca"])
    print("graph: %d packages, %d edges, features bow %s + pca %s float32"
          % (bow.shape[0], g["edges"].shape[0], list(bow.shape[1:]), list(pca.shape[1:])))
    t0 = time.perf_counter()
    fs = it.FeatureStore(codec=a.codec)
    fs["package", "bow", None] = bow
    fs["package", "pca", None] = pca
    print("FeatureStore (codec %s, PyG base class: %s) built in %.2f s" % (
        a.codec, _features.HAVE_PYG, time.perf_counter() - t0))

    def timed(fetch):
        stats = {"t": 0.0, "rows": 0}

        def features(n_id):
            t = time.perf_counter()
            x = fetch(n_id)
            stats["t"] += time.perf_counter() - t
            stats["rows"] += n_id.numel()
            return x
        return features, stats

    plain, ps = timed(lambda n_id: torch.cat([bow[n_id], pca[n_id]], 1))
    served, cs = timed(lambda n_id: torch.cat(
        fs.multi_get_tensor([("package", "bow", n_id), ("package", "pca", n_id)]), 1))
    kw = dict(epochs=a.epochs, batch=a.batch, fanouts=fanouts, use_pyg=_features.HAVE_PYG)
    t = time.perf_counter()
    ref = debian_graph.train(plain, g, **kw)
    tp = time.perf_counter() - t
    t = time.perf_counter()
    got = debian_graph.train(served, g, **kw)
    tc = time.perf_counter() - t
    same = got == ref
    print("%d steps, loss %.4f -> %.4f; losses bit-identical: %s" % (len(ref), ref[0], ref[-1], same))
    row_bytes = (bow.shape[1] + pca.shape[1]) * 4
    plain_bytes = (bow.numel() + pca.numel()) * 4
    print("%-10s %12s %12s %14s %14s %12s" % ("features", "epoch s", "fetch s", "rows/s", "MB/s decoded",
                                               "host bytes"))
    for name, st, total, nbytes in (("plain", ps, tp, plain_bytes), ("ibp", cs, tc, fs.nbytes)):
        print("%-10s %12.2f %12.3f %14.0f %14.0f %12d" % (
            name, total, st["t"], st["rows"] / st["t"], st["rows"] * row_bytes / st["t"] / 1e6, nbytes))
    print("host bytes saved: %.1f%% (bow %.1fx, pca %.2fx)" % (
        100.0 * (1 - fs.nbytes / plain_bytes), fs.store("package", "bow").ratio, fs.store("package", "pca").ratio))
    fs.close()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
