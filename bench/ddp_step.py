#!/usr/bin/env python3
"""ddp_step.py - step time of DistributedDataParallel over gloo (CPU ranks)
with libibp's all-reduce hook against plain DDP, side by side (issue 32).

    PYTHONPATH=python/src IBP_LIBRARY=build/libibp.so \\
        python bench/ddp_step.py [--world 2] [--steps 20] [--warmup 3]
                                 [--configs plain,exp-auto,exp-always,dynamiq,bf16]
                                 [--width 2048] [--batch 64] [--quick]

What a user compares: one training step (forward, backward with DDP's
gradient all-reduce, SGD update) of the same model on the same batches,

    plain       DDP without a hook (the backend's all-reduce, overlapped with
                the backward pass)
    exp-auto    ibp.torch.ddp.compressed_allreduce_hook("exp") with its
                default policy="auto": buckets the calibrated model says
                cannot gain go to the backend's own all-reduce
                (asynchronously, as plain DDP); otherwise the hook times 3
                steps each way and keeps the faster (its trial)
    exp-always  the same hook with policy="always" (every bucket compressed)
    dynamiq     the hook with codec "dynamiq" (lossy by request: always)
    bf16        torch's own bf16_compress_hook (for reference)
    fsdp-plain  FSDP2 (fully_shard on each Linear and the root), no custom
                collectives
    fsdp-exp-auto  the same with ibp.torch.fsdp's CompressedAllGather and
                CompressedReduceScatter("exp"), policy "auto" (calls the
                shared model rules plain go to torch.distributed's own;
                the others run a trial per op and size, 3 calls each way,
                and keep the faster)
    fsdp-exp-trial  the same without calibration: every call's trial decides
    fsdp-exp-always  the same with policy "always" (every call compressed)

The model: an MLP of three Linear layers (width x width in the middle) whose
gradients take at least 16 MiB (width 2048: 8.4 M parameters, 33.6 MB of
float32 gradients, two DDP buckets of 25 MiB). Every configuration wraps its
own copy of the same initial weights in its own DDP instance; steps
alternate between the configurations (one step each per round, every rank
in the same order), so a busy machine slows them alike. Timed per step with
time.perf_counter on each rank, the slowest rank counts (a max all-reduce
of the times after the run). Printed: per configuration the median and
spread of the step time, the ratio to plain DDP's (FSDP2 rows: plain FSDP2's) median (step time / plain's: 1.0 =
as fast; the issue's target for exp-auto is <= 1.1), and for the exp rows
whether the weights stayed bit-identical to the plain run's (exp is
lossless; with 2 ranks the ring's sum is the same as gloo's).

The ranks run on the loopback interface, unthrottled: the fast-link case,
where compression cannot gain and "auto" must cost nothing. --netns: this
process is one rank started by tools/netns-tc.sh --exec in its network
namespace (rank, world and rank 0's address from its IBP_NETNS_*
variables; gloo over the shaped link), for the slow-link case:

    sudo tools/netns-tc.sh -n 2 -r 1 --exec 'PYTHONPATH=python/src \
        IBP_LIBRARY=build/libibp.so python bench/ddp_step.py --netns'

--quick: 6 steps, 2 warm-up, for CI smoke tests. Timed numbers are never
asserted.
"""
import argparse
import os
import queue
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CONFIGS = ("plain", "exp-auto", "exp-trial", "exp-always", "dynamiq", "bf16", "fsdp-plain", "fsdp-exp-auto",
           "fsdp-exp-trial", "fsdp-exp-always")


def model(width, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(width // 2, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                         nn.Linear(width, width // 2))


class _FsdpPair:
    """The FSDP2 all-gather and reduce-scatter objects as one: counts summed."""

    def __init__(self, ag, rs):
        self.ag, self.rs = ag, rs

    def stats(self):
        a, r = self.ag.stats(), self.rs.stats()
        d = {k: a.get(k, 0) + r.get(k, 0) for k in ("hook_native", "compressed", "plain", "not_worth",
                                                    "incompressible")}
        d["fsdp_trials"] = dict(a.get("hook_trials", {}), **r.get("hook_trials", {}))
        return d

    def close(self):
        self.ag.close()
        self.rs.close()


def wrap(cfg, net, world):
    if cfg.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for layer in net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(net, mesh=mesh)
        hook = None
        if cfg != "fsdp-plain":
            import ibp.torch.fsdp as ibp_fsdp
            kw = {"fsdp-exp-trial": {"calibrate": False},  # the trial decides every call
                  "fsdp-exp-always": {"policy": "always"}}.get(cfg, {})
            ag, rs = ibp_fsdp.CompressedAllGather("exp", **kw), ibp_fsdp.CompressedReduceScatter("exp", **kw)
            ibp_fsdp.set_compressed_collectives(net, ag, rs)
            hook = _FsdpPair(ag, rs)
        return net, hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(net)
    hook = None
    if cfg == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif cfg != "plain":
        import ibp.torch.ddp as ibp_ddp
        codec, _, pol = cfg.partition("-")
        if pol == "trial":  # "auto" without the calibrated model: the measured choice decides
            hook = ibp_ddp.compressed_allreduce_hook(codec, policy="auto", calibrate=False)
        else:
            hook = ibp_ddp.compressed_allreduce_hook(codec, policy=pol or "auto")
        ddp.register_comm_hook(None, hook)
    return ddp, hook


def worker(rank, world, args, init, out_q):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    cfgs = args.configs
    runs = {}
    for c in cfgs:
        ddp, hook = wrap(c, model(args.width, 1234).to(DTYPES[args.dtype]), world)
        runs[c] = (ddp, hook, torch.optim.SGD(ddp.parameters(), lr=1e-3))
    g = torch.Generator().manual_seed(99 + rank)
    times = {c: [] for c in cfgs}
    total = args.warmup + args.steps
    for step in range(total):
        x = torch.randn(args.batch, args.width // 2, generator=g).to(DTYPES[args.dtype])
        y = torch.randn(args.batch, args.width // 2, generator=g).to(DTYPES[args.dtype])
        for c in cfgs:
            ddp, _, opt = runs[c]
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            t = time.perf_counter() - t0
            if step >= args.warmup:
                times[c].append(t)
        if rank == 0 and (step + 1) % 5 == 0:
            print("  step %d of %d" % (step + 1, total), file=sys.stderr, flush=True)
    # the slowest rank's time per step
    mx = {}
    for c in cfgs:
        t = torch.tensor(times[c], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        mx[c] = t.tolist()
    same = {}

    def params(c):
        return [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in runs[c][0].parameters()]

    for base, pre in (("plain", "exp"), ("fsdp-plain", "fsdp-exp")):
        if base in runs:
            ref = params(base)
            for c in cfgs:
                if c.startswith(pre):
                    same[c] = all(torch.equal(a, b) for a, b in zip(ref, params(c)))
    stats = {c: runs[c][1].stats() for c in cfgs if runs[c][1] is not None}
    for c in cfgs:
        if runs[c][1] is not None:
            runs[c][1].close()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and out_q is not None:
        out_q.put((mx, same, stats))
    return mx, same, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES),
                    help="parameters and gradients (bfloat16: the exp codec's ratio is 1.4, float32's 1.17)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every FSDP2 trial's times")
    ap.add_argument("--netns", action="store_true", help="one rank of tools/netns-tc.sh --exec")
    args = ap.parse_args()
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error("unknown configuration %r (one of %s)" % (c, ", ".join(CONFIGS)))
    if args.quick:
        args.steps, args.warmup = 6, 2
    w = args.width
    nparam = (w // 2) * w + w + w * w + w + w * (w // 2) + w // 2
    if args.netns:
        try:
            rank, args.world = int(os.environ["IBP_NETNS_RANK"]), int(os.environ["IBP_NETNS_WORLD"])
            master, rate = os.environ["IBP_NETNS_MASTER"], os.environ.get("IBP_NETNS_RATE", "?")
        except (KeyError, ValueError):
            ap.error("--netns: run under tools/netns-tc.sh --exec (IBP_NETNS_RANK, _WORLD, _MASTER unset)")
        link = "network namespaces (tools/netns-tc.sh), %s Gbit/s per rank" % rate
    else:
        link = "loopback (unthrottled)"
    quiet = args.netns and rank != 0
    if not quiet:
        print("bench/ddp_step.py: DDP step time over gloo, %d CPU ranks, %s" % (args.world, link))
    if not quiet:
        print("date (UTC): %s | torch %s | model: MLP width %d, %.1f M parameters, %.1f MB of %s gradients"
              % (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), torch.__version__, w, nparam / 1e6,
                 nparam * (2e-6 if args.dtype == "bfloat16" else 4e-6), args.dtype))
        print("steps: %d timed (+%d warm-up) per configuration, alternating; batch %d per rank" %
              (args.steps, args.warmup, args.batch), flush=True)
    if args.netns:
        res = worker(rank, args.world, args, "tcp://%s:29533" % master, None)
        return 0 if quiet else report(args, res)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "rdv")
        procs = [ctx.Process(target=worker, args=(r, args.world, args, init, q)) for r in range(args.world)]
        for p in procs:
            p.start()
        res = None
        try:
            deadline = time.monotonic() + 3600
            while res is None and time.monotonic() < deadline:
                try:
                    res = q.get(timeout=2)
                except queue.Empty:
                    if all(p.exitcode is not None for p in procs):
                        break  # every rank ended without a result: failed
        finally:
            for p in procs:
                p.join(timeout=120)
                if p.exitcode is None:
                    p.kill()
        if any(p.exitcode != 0 for p in procs) or res is None:
            print("error: a rank failed (exit codes %s)" % [p.exitcode for p in procs], file=sys.stderr)
            return 1
    return report(args, res)


def report(args, res):
    mx, same, stats = res
    bases = {"": statistics.median(mx["plain"]) if "plain" in mx else None,
             "fsdp": statistics.median(mx["fsdp-plain"]) if "fsdp-plain" in mx else None}
    print("%-13s | %9s %9s %9s | %8s | %s" % ("config", "median ms", "min", "max", "vs plain", "notes"))
    for c in args.configs:
        t = mx[c]
        med = statistics.median(t)
        base = bases["fsdp" if c.startswith("fsdp") else ""]
        notes = []
        if c in same:
            notes.append("weights %s plain %s's" % ("bit-identical to" if same[c] else "DIFFER from",
                                                      "FSDP2" if c.startswith("fsdp") else "DDP"))
        if c in stats:
            s = stats[c]
            notes.append("buckets: native %d, compressed %d, plain/not_worth %d" %
                         (s.get("hook_native", 0), s.get("compressed", 0),
                          s.get("plain", 0) + s.get("not_worth", 0) + s.get("incompressible", 0)))
            trials = s.get("fsdp_trials")
            if trials:
                ch = [v.get("choice") for v in trials.values()]
                notes.append("auto trials (per op and size): %d kept native, %d libibp, %d undecided" %
                             (ch.count("native"), ch.count("libibp"), ch.count(None)))
                if args.verbose:
                    for k, v in sorted(trials.items()):
                        print("  trial %s: %s (native %.2f ms, libibp %.2f ms)" % (
                            k, v.get("choice"), 1e3 * v.get("native_s", 0), 1e3 * v.get("libibp_s", 0)))
            elif s.get("hook_choice"):
                tr = s.get("hook_trial") or {}
                notes.append("auto trial: %s (steps %.1f ms native, %.1f ms libibp)" %
                             (s["hook_choice"], 1e3 * tr.get("native_s", 0), 1e3 * tr.get("libibp_s", 0)))
            elif (c.endswith("auto") or c.endswith("trial")) and not s.get("compressed", 0):
                notes.append("no trial: the shared model says no codec gains (Communicator.plain)")
            elif c.endswith("auto") or c.endswith("trial"):
                notes.append("no trial: the shared model (calibrated at creation) chose compression")
        print("%-13s | %9.2f %9.2f %9.2f | %8s | %s" % (c, 1e3 * med, 1e3 * min(t), 1e3 * max(t),
                                                     "%.2fx" % (med / base) if base else "-", "; ".join(notes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
