"""Datasets for the DataLoader tests (test_torch_procs.py, test_torch_features.py).
They live in a module of their own so that spawned workers can import them
by name (a spawn worker unpickles the dataset, stores and all)."""

from __future__ import annotations

import torch


class Batches(torch.utils.data.Dataset):
    """Item i is (i, {source name: rows of ids batches[i]}). Sources: an
    ibp.Store, an ibp.torch.Feature, an ibp.torch.FeatureStore (rows of
    group "n", attribute "x") or a (ibp.Cache, ibp.Store) pair. Every read
    uses all the store's threads (nthreads=0), so a worker uses the pool."""

    def __init__(self, sources: dict, batches):
        self.sources = sources
        self.batches = list(batches)

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        import ibp
        import ibp.torch as it
        ids = self.batches[i]
        out = {}
        for name, src in self.sources.items():
            if isinstance(src, ibp.Store):
                out[name] = src.gather(ids, nthreads=0)
            elif isinstance(src, it.Feature):
                out[name] = src.read(ids)
            elif isinstance(src, it.FeatureStore):
                out[name] = src["n", "x", ids]
            else:
                cache, store = src
                out[name] = cache.gather(store, ids)
        return i, out


class NodeFeatures(torch.utils.data.Dataset):
    """Item i is the GraphSAGE input of step i: bag of words and PCA rows of
    n_ids[i] from an ibp.torch.FeatureStore (group "package"), side by side."""

    def __init__(self, fs, n_ids):
        self.fs = fs
        self.n_ids = list(n_ids)

    def __len__(self):
        return len(self.n_ids)

    def __getitem__(self, i):
        n_id = self.n_ids[i]
        b, p = self.fs.multi_get_tensor([("package", "bow", n_id), ("package", "pca", n_id)])
        return i, torch.cat([b, p], 1)
