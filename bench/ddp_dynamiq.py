#!/usr/bin/env python3
"""ddp_dynamiq.py - DDP training over gloo (CPU processes) with libibp's
DynamiQ all-reduce hook against plain FP32 and BF16 gradient all-reduce:
loss curves of one small real model, side by side (issue 15).

    PYTHONPATH=python/src IBP_LIBRARY=build/libibp.so \\
        python bench/ddp_dynamiq.py [--world 2] [--steps 300] [--codecs fp32,bf16,dynamiq]

The model: a character-level next-character MLP (8 characters of context,
embeddings 32, hidden 256, vocabulary of the text) trained on this
repository's own documentation (docs/*.md, README.md), each rank on its own
shard of random windows, Adam (lr 3e-3), batch 64 per rank. Every run starts
from the same weights and draws the same batches, so the curves differ only
by the gradient all-reduce. Printed: the mean training loss every 25 steps
and over the last 50 steps, and the final held-out loss (a fixed set of
windows), per all-reduce:

    fp32     DDP's default all-reduce (no hook)
    bf16     torch's bf16_compress_hook (BF16 gradients on the wire)
    none     libibp's hook with codec "none" (since issue 32: the backend's own all-reduce)
    dynamiq  libibp's DynamiQ hook (about 5 bits per coordinate)
"""
import argparse
import glob
import os
import queue
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

CTX = 8


def corpus(root):
    text = ""
    for p in sorted(glob.glob(os.path.join(root, "docs", "*.md"))) + [os.path.join(root, "README.md")]:
        with open(p, encoding="utf-8", errors="replace") as f:
            text += f.read()
    chars = sorted(set(text))
    idx = {c: i for i, c in enumerate(chars)}
    return torch.tensor([idx[c] for c in text], dtype=torch.long), len(chars)


class CharMLP(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.net = nn.Sequential(nn.Linear(CTX * 32, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(),
                                 nn.Linear(256, vocab))

    def forward(self, x):
        return self.net(self.emb(x).flatten(1))


def windows(data, starts):
    x = torch.stack([data[s:s + CTX] for s in starts.tolist()])
    y = data[starts + CTX]
    return x, y


def worker(rank, world, args, codec, data, vocab, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)  # the same initial weights on every rank and in every run
    torch.set_num_threads(1)
    model = nn.parallel.DistributedDataParallel(CharMLP(vocab))
    hook = None
    if codec == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif codec != "fp32":
        import ibp.torch.ddp as ibp_ddp
        hook = ibp_ddp.compressed_allreduce_hook(codec=codec, policy="always", calibrate=False)
        model.register_comm_hook(None, hook)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    lossf = nn.CrossEntropyLoss()
    n = len(data) - CTX - 1
    held = n * 9 // 10  # the last tenth is held out
    g = torch.Generator().manual_seed(99 + rank)  # each rank its own batches, the same in every run
    curve = []
    for step in range(args.steps):
        x, y = windows(data, torch.randint(0, held, (args.batch,), generator=g))
        opt.zero_grad()
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    ev = torch.Generator().manual_seed(7)
    with torch.no_grad():
        x, y = windows(data, torch.randint(held, n, (4096,), generator=ev))
        test = lossf(model.module(x), y).item()
    stats = hook.stats() if hook is not None else {}
    if hook is not None:
        hook.close()
    dist.destroy_process_group()
    if rank == 0:
        out.put((codec, curve, test, stats.get("last_ratio", 1.0) if isinstance(stats, dict) else 1.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--codecs", default="fp32,bf16,dynamiq")
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    data, vocab = corpus(root)
    ctx = mp.get_context("spawn")
    results = []
    for codec in args.codecs.split(","):
        q = ctx.Queue()
        args.port += 1
        ps = [ctx.Process(target=worker, args=(r, args.world, args, codec, data, vocab, q)) for r in range(args.world)]
        for p in ps:
            p.start()
        res = None
        while res is None:  # a rank that dies must not leave us waiting
            try:
                res = q.get(timeout=5)
            except queue.Empty:
                bad = [p.exitcode for p in ps if p.exitcode]
                if bad or all(p.exitcode is not None for p in ps):
                    for p in ps:
                        p.kill()
                    sys.exit("ddp_dynamiq: %s: a rank exited with %s" % (codec, bad or "no result"))
        for p in ps:
            p.join()
        results.append(res)
    print("world %d, steps %d, batch %d per rank, %d characters, vocabulary %d" %
          (args.world, args.steps, args.batch, len(data), vocab))
    head = "%-8s" % "step" + "".join("%10s" % r[0] for r in results)
    print(head)
    for s in range(0, args.steps, 25):
        e = min(s + 25, args.steps)
        print("%-8s" % ("%d-%d" % (s, e - 1)) + "".join("%10.4f" % (sum(r[1][s:e]) / (e - s)) for r in results))
    last = max(1, min(50, args.steps))
    print("%-8s" % "last50" + "".join("%10.4f" % (sum(r[1][-last:]) / last) for r in results))
    print("%-8s" % "held-out" + "".join("%10.4f" % r[2] for r in results))
    base = {r[0]: r[2] for r in results}
    for r in results:
        if r[0] not in ("fp32", "bf16") and "bf16" in base:
            print("%s held-out loss - bf16's: %+.4f (%+.2f%%)" % (r[0], r[2] - base["bf16"],
                                                                   100 * (r[2] - base["bf16"]) / base["bf16"]))


if __name__ == "__main__":
    main()
