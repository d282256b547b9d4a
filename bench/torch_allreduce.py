#!/usr/bin/env python3
"""torch_allreduce.py - one AllReduce through libibp's torch.distributed
transport (ibp.torch.ddp.TorchTransport) against torch.distributed's own
all_reduce, on the same tensor in the same run (issue 32).

    sudo tools/netns-tc.sh -n 2 -r 1 --exec 'PYTHONPATH=python/src \\
        IBP_LIBRARY=build/libibp.so python bench/torch_allreduce.py --netns'
    PYTHONPATH=python/src IBP_LIBRARY=build/libibp.so python bench/torch_allreduce.py   # loopback, 2 ranks

Each repetition runs, in turn, dist.all_reduce (the backend's, gloo), then
libibp's ring with codec exp and with codec none (policy "always", pieces in
flight through the transport's async table), each after a barrier; the
first repetition is a warm-up. Prints per path the median and every time,
and libibp's ratio to the backend's. --netns: this process is one rank of
tools/netns-tc.sh --exec (IBP_NETNS_* variables); otherwise it spawns --world
ranks on loopback. Timed numbers are never asserted.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, init, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    import ibp.torch.ddp as D
    x = torch.randn(args.mib * (1 << 20) // 4, generator=torch.Generator().manual_seed(rank)) * 0.01
    comm = D.communicator(policy="always", calibrate=False)
    paths = {"torch": None, "exp": "exp", "none": "none"}
    times = {k: [] for k in paths}
    for _ in range(args.reps + 1):
        for k, codec in paths.items():
            y = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            if codec is None:
                dist.all_reduce(y)
            else:
                comm.allreduce(y, out=y, codec=codec)
            times[k].append(time.perf_counter() - t0)
    mx = {}
    for k, v in times.items():  # the slower rank's time per repetition
        t = torch.tensor(v[1:], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        mx[k] = t.tolist()
    ratio = comm.stats()["logical_bytes"] / max(comm.stats()["wire_bytes"], 1)
    comm.close()
    dist.destroy_process_group()
    if rank == 0:
        base = statistics.median(mx["torch"])
        print("%-26s | %9s | %8s | %s" % ("path", "median ms", "vs torch", "times (ms)"))
        for k, v in mx.items():
            med = statistics.median(v)
            name = {"torch": "torch.distributed (gloo)", "exp": "libibp exp", "none": "libibp none"}[k]
            print("%-26s | %9.1f | %7.2fx | %s" % (name, 1e3 * med, base / med, " ".join("%.0f" % (1e3 * t) for t in v)))
        print("libibp's wire ratio over the run (both codecs): %.3f" % ratio)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=25, help="tensor size in MiB of float32 (DDP's bucket: 25)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--netns", action="store_true", help="one rank of tools/netns-tc.sh --exec")
    args = ap.parse_args()
    if args.netns:
        try:
            rank, world = int(os.environ["IBP_NETNS_RANK"]), int(os.environ["IBP_NETNS_WORLD"])
            master = os.environ["IBP_NETNS_MASTER"]
        except (KeyError, ValueError):
            ap.error("--netns: run under tools/netns-tc.sh --exec (IBP_NETNS_* unset)")
        if rank == 0:
            print("bench/torch_allreduce.py: %d MiB float32, %d ranks, network namespaces at %s Gbit/s, %s UTC"
                  % (args.mib, world, os.environ.get("IBP_NETNS_RATE", "?"),
                     time.strftime("%Y-%m-%d %H:%M", time.gmtime())), flush=True)
        rank_main(rank, world, "tcp://%s:29534" % master, args)
        return 0
    print("bench/torch_allreduce.py: %d MiB float32, %d ranks on loopback, %s UTC"
          % (args.mib, args.world, time.strftime("%Y-%m-%d %H:%M", time.gmtime())), flush=True)
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(rank_main, args=(args.world, "file://" + os.path.join(d, "rdv"), args), nprocs=args.world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
