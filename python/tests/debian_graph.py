"""The Debian package graph for the ibp.torch tests and examples, with a small
GraphSAGE and a neighbour sampler written in torch ops.

load() reads the committed sample tests/data/debian_graph.npz (the whole
default-size graph of datasets/make_datasets.py: 4605 packages, 6755
dependency edges, 7 section labels, 1433-word bag of words; see
tests/data/make_debian_graph.py) and returns the bag-of-words rows and the
100-dimensional PCA of them (datasets/debgraph.pca's recipe: centred float64,
top axes signed so their largest loading is positive). When
datasets/cache/debian_pca100_f32.npy exists (make_datasets.py --only gnn) it
is used as is; otherwise the axes come from an eigendecomposition of the
1433 x 1433 covariance (the same projection as the SVD's to ~1e-8; ~2 s),
cached in memory for the process.
"""

from __future__ import annotations

import functools
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("IBP_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
NPZ = os.path.join(HERE, "data", "debian_graph.npz")
SECTIONS = ["net", "science", "games", "sound", "graphics", "math", "video"]


@functools.lru_cache(maxsize=1)
def load():
    """dict: bow float32 (N, 1433) 0/1, pca float32 (N, 100), labels int64 (N,),
    edges int64 (E, 2) [dependent, dependency]."""
    import torch
    z = np.load(NPZ)
    indptr, cols = z["bow_indptr"].astype(np.int64), z["bow_indices"].astype(np.int64)
    n, d = indptr.size - 1, int(z["bow_cols"])
    bow = np.zeros((n, d), np.float32)
    bow[np.repeat(np.arange(n), np.diff(indptr)), cols] = 1.0
    cached = os.path.join(REPO, "datasets", "cache", "debian_pca100_f32.npy")
    if os.path.exists(cached) and np.load(cached, mmap_mode="r").shape == (n, 100):
        pca = np.load(cached)
    else:
        b = torch.from_numpy(bow)
        mean = b.double().mean(0)
        # centred covariance: B'B (exact in float32: integer counts) - n mean mean'
        cov = (b.T @ b).double() - n * torch.outer(mean, mean)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # LAPACK's eigh on a busy 2-core machine: 1.5 s, not 30
        try:
            _, vec = torch.linalg.eigh(cov)
        finally:
            torch.set_num_threads(threads)
        x = b.double() - mean
        vt = vec[:, -100:].flip(1).T.contiguous()  # top 100 axes, largest first
        signs = vt.gather(1, vt.abs().argmax(1, keepdim=True)).sign()
        pca = (x @ (vt * signs).T).float().numpy()
    return {"bow": bow, "pca": pca, "labels": z["labels"].astype(np.int64),
            "edges": z["edges"].astype(np.int64)}


class Sampler:
    """Uniform neighbour sampling with replacement (GraphSAGE's), in torch ops.

    The graph is made undirected and stored as CSR. sample(seeds) draws
    fanouts[0] neighbours of every seed, then fanouts[1] of every node drawn,
    ...; nodes without neighbours draw none. Returns (n_id, edge_index, seed_pos):
    the distinct nodes touched (sorted), the sampled edges (neighbour ->
    node, relabelled into n_id) and where the seeds are in n_id.
    """

    def __init__(self, edges, num_nodes: int, fanouts, generator):
        import torch
        e = torch.as_tensor(edges)
        src = torch.cat([e[:, 0], e[:, 1]])
        dst = torch.cat([e[:, 1], e[:, 0]])
        order = torch.argsort(src * num_nodes + dst)
        self.col = dst[order]
        self.rowptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        self.rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=num_nodes), 0)
        self.fanouts = list(fanouts)
        self.gen = generator

    def sample(self, seeds):
        import torch
        nodes, srcs, dsts = [seeds], [], []
        frontier = seeds
        for k in self.fanouts:
            start, deg = self.rowptr[frontier], self.rowptr[frontier + 1] - self.rowptr[frontier]
            has = deg > 0
            f, start, deg = frontier[has], start[has], deg[has]
            r = torch.rand(f.numel(), k, generator=self.gen)
            nbr = self.col[start[:, None] + (r * deg[:, None]).long().clamp_max(deg[:, None] - 1)]
            srcs.append(nbr.reshape(-1))
            dsts.append(f.repeat_interleave(k))
            frontier = nbr.reshape(-1).unique()
            nodes.append(frontier)
        n_id, inv = torch.unique(torch.cat(nodes + srcs + dsts), return_inverse=True)
        ns = sum(t.numel() for t in nodes)
        ne = sum(t.numel() for t in srcs)
        edge_index = torch.stack([inv[ns:ns + ne], inv[ns + ne:]])
        return n_id, edge_index, inv[:seeds.numel()]


def make_model(in_dim: int, hidden: int, classes: int, use_pyg: bool):
    """Two SAGE layers (mean aggregation, root weight): PyG's SAGEConv when
    use_pyg, else the same layer written in torch."""
    import torch

    if use_pyg:
        from torch_geometric.nn import SAGEConv as Conv
    else:
        class Conv(torch.nn.Module):
            def __init__(self, i, o):
                super().__init__()
                self.lin_l = torch.nn.Linear(i, o)               # neighbours' mean
                self.lin_r = torch.nn.Linear(i, o, bias=False)   # the node itself

            def forward(self, x, edge_index):
                src, dst = edge_index
                # index_select and scatter_add_, as PyG: the backward of x[src]
                # and index_add_ accumulate with atomics on the CPU (run-to-run
                # float noise)
                msg = x.index_select(0, src)
                agg = torch.zeros_like(x).scatter_add_(0, dst[:, None].expand_as(msg), msg)
                deg = torch.bincount(dst, minlength=x.shape[0]).clamp_min(1).to(x.dtype)
                return self.lin_l(agg / deg[:, None]) + self.lin_r(x)

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = Conv(in_dim, hidden)
            self.conv2 = Conv(hidden, classes)

        def forward(self, x, edge_index):
            h = torch.relu(self.conv1(x, edge_index))
            return self.conv2(h, edge_index)

    return SAGE()


def node_batches(graph, *, epochs=3, batch=512, fanouts=(10, 5), seed=0):
    """The sampled mini-batches of train() with these arguments, in order:
    (seeds, n_id, edge_index, seed_pos) per step. The sampling draws from its
    own generator only, so the list can be made ahead (to fetch the features
    of every step in DataLoader workers)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    n = graph["labels"].shape[0]
    train_ids = torch.randperm(n, generator=gen)[: int(0.6 * n)]
    sampler = Sampler(graph["edges"], n, fanouts, gen)
    for _ in range(epochs):
        perm = train_ids[torch.randperm(train_ids.numel(), generator=gen)]
        for seeds in perm.split(batch):
            yield (seeds,) + sampler.sample(seeds)


def train(features, graph, *, epochs=3, batch=512, fanouts=(10, 5), seed=0, use_pyg=True,
          on_batch=None):
    """Seeded mini-batch GraphSAGE training; `features(n_id)` returns the input
    rows of nodes n_id. Returns the loss of every step (Python floats).
    on_batch(n_id) is called before every feature fetch (for timing)."""
    import torch
    torch.manual_seed(seed)
    labels = torch.from_numpy(graph["labels"])
    in_dim = graph["bow"].shape[1] + graph["pca"].shape[1]
    model = make_model(in_dim, 64, len(SECTIONS), use_pyg)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for seeds, n_id, edge_index, seed_pos in node_batches(graph, epochs=epochs, batch=batch, fanouts=fanouts,
                                                          seed=seed):
        if on_batch is not None:
            on_batch(n_id)
        x = features(n_id)
        out = model(x, edge_index)[seed_pos]
        loss = torch.nn.functional.cross_entropy(out, labels[seeds])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
