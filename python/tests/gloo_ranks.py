"""Runs a test module's scenarios on gloo ranks: spawned processes on the
CPU, joined through a file:// rendezvous in a temporary directory. Each rank
calls scenarios(rank, world, res) and writes res to tmp/rank<r>.json; the
parent collects them and fails on a rank that crashed or wrote nothing.
Used by test_torch_ddp.py and test_torch_moe.py."""

import json
import multiprocessing as mp
import os
import textwrap
import time

import ibp


def _rank_main(scenarios, rank, world, tmp, libpath):
    """One rank. Ends with os._exit so that sends abandoned by error
    scenarios cannot hang the process group's teardown."""
    t0 = time.monotonic()
    res = {"t": {}}
    try:
        os.environ["IBP_LIBRARY"] = libpath
        import torch.distributed as dist
        res["t"]["import_torch"] = time.monotonic() - t0
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"), rank=rank,
                                world_size=world)
        scenarios(rank, world, res)
    except BaseException as e:  # reported, not swallowed: the parent fails on it
        import traceback
        res["crash"] = "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())
    with open(os.path.join(tmp, "rank%d.json" % rank), "w") as f:
        json.dump(res, f)
    os._exit(0)


def run_ranks(scenarios, world, tmp, timeout=150):
    """Runs scenarios (a module-level function, so that spawn can pickle it)
    on `world` ranks; returns the ranks' result dicts in rank order."""
    ctx = mp.get_context("spawn")
    libpath = ibp.library_path()
    procs = [ctx.Process(target=_rank_main, args=(scenarios, r, world, tmp, libpath)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    out = []
    for r in range(world):
        path = os.path.join(tmp, "rank%d.json" % r)
        assert os.path.exists(path), "rank %d wrote no results (exit code %s)" % (r, procs[r].exitcode)
        with open(path) as f:
            out.append(json.load(f))
    for r, d in enumerate(out):
        print("rank %d phase end times (s): %s" % (r, d.get("t")))
        assert "crash" not in d, "rank %d crashed:\n%s" % (r, textwrap.indent(d["crash"], "  "))
    return out
