#!/usr/bin/env python3
"""The KV offloader's memory case (issue 28): build it, store it, measure.

The case: the MiniLM K/V of datasets/sample (minilm_kv_bf16.npy: 6 layers,
K and V of 128 tokens, 12 heads x 32 dims, bf16), in blocks of 16 tokens,
made 24 layers deep by repeating the 6 layers four times and 96 blocks per
layer by repeating each layer's 128 tokens with the token order rotated
(rotation r: token t -> (t + 37 r) mod 128), so that no two blocks are the
same bytes: 24 x 96 blocks of 24 KiB, 56.6 MB raw (--blocks 256: 151 MB, the
size the issue was measured at). Also --case example: examples/kv_offload.py's own case (the sample's
6 layers, 8 blocks each).

It calibrates every layer (timed), stores every layer's blocks once
(KVOffloader, CPU path, capacity_bytes None or --capacity), and prints, in
bytes: raw, compressed (used_bytes), the resident growth after the stores
(/proc/self/statm, steady state) and the peak growth during them (VmHWM),
against the target compressed + 5% + 16 MiB (peak: + one call's
workspace). Then it loads every block back and checks the bytes.

    python3 bench/kv_offload_case.py [--case 24x96|example] [--capacity BYTES] [--json]
    python3 bench/kv_offload_case.py --speed PASSES | --store-only PASSES [--blocks 256]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def statm_rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    """Linux: writing 5 to clear_refs resets VmHWM to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def build_case(case, blocks=96):
    """[layers] of [2, blocks, 16, 12, 32] bf16 tensors (torch)."""
    import torch
    kv = np.load(os.path.join(ROOT, "datasets", "sample", "minilm_kv_bf16.npy"))  # (1536, 384) uint16
    kv = kv.reshape(6, 2, 128, 12, 32)
    layers = []
    if case == "example":
        for layer in range(6):
            t = torch.from_numpy(kv[layer].reshape(2, 8, 16, 12, 32).copy().view(np.int16)).view(torch.bfloat16)
            layers.append(t)
        return layers
    reps = -(-blocks * 16 // 128)
    for depth in range(24):
        src = kv[depth % 6]
        toks = []
        for r in range(reps):  # 128 tokens per repetition, 8 blocks of 16
            order = (np.arange(128) + 37 * r + 11 * (depth // 6)) % 128
            toks.append(src[:, order])
        t = np.concatenate(toks, axis=1)[:, :blocks * 16].reshape(2, blocks, 16, 12, 32)
        layers.append(torch.from_numpy(np.ascontiguousarray(t).view(np.int16)).view(torch.bfloat16))
    return layers


def speed(layers, reps, capacity):
    """Store and load speed against what a user does without us (issue 33):
    the plain way is `index_select` of the blocks into a preallocated host
    tensor (its creation timed) and `index_copy_` back; ours is a
    KVOffloader (its creation and calibration timed on the first pass) and
    store / load. Pass 1 = fresh objects (first touch of every page), then
    warm passes reusing them (the plain tensor rewritten, the offloader's
    blocks freed and stored again). Every pass alternates plain and ours
    and checks the bytes. Returns [(pass, plain store s, ibp store s, plain
    load s, ibp load s, calibrate s)]."""
    import torch
    import ibp.torch as it
    nl, nb = len(layers), layers[0].shape[1]
    ids = torch.arange(nb)
    back = [torch.empty_like(t) for t in layers]
    rows = []
    host = off = handles = None
    for rep in range(reps):
        first = rep == 0
        # plain
        t0 = time.perf_counter()
        if first:
            host = [torch.empty_like(t) for t in layers]
        for t, h in zip(layers, host):
            torch.index_select(t, 1, ids, out=h)
        ps = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b, h in zip(back, host):
            b.index_copy_(1, ids, h)
        pl = time.perf_counter() - t0
        for t, b in zip(layers, back):
            if not torch.equal(t.view(torch.int16), b.view(torch.int16)):  # checked under python -O too
                raise SystemExit("kv_offload_case: the plain copy differs")
        # ours
        cal = 0.0
        t0 = time.perf_counter()
        if first:
            off = it.KVOffloader(nl, tuple(layers[0].shape[2:]), torch.bfloat16, capacity_bytes=capacity)
            for i, t in enumerate(layers):
                off.calibrate(i, t)
            cal = time.perf_counter() - t0
        else:
            for hs in handles:
                off.free(hs)
        handles = [off.store(i, t, list(range(nb))) for i, t in enumerate(layers)]
        ist = time.perf_counter() - t0 - cal
        for b in back:
            b.zero_()
        t0 = time.perf_counter()
        for i, b in enumerate(back):
            off.load(i, handles[i], b, list(range(nb)))
        il = time.perf_counter() - t0
        for t, b in zip(layers, back):
            if not torch.equal(t.view(torch.int16), b.view(torch.int16)):
                raise SystemExit("kv_offload_case: the KVOffloader round trip differs")
        rows.append(("first" if first else "warm", ps, ist, pl, il, cal))
    off.close()
    return rows


def store_only(layers, reps, capacity):
    """Warm stores alone (issue 33): `index_select` of every layer's blocks
    into a preallocated host tensor against the offloader's free of the
    previous pass and store, alternating, nothing else between them (the
    --speed passes also load and compare, which moves the cache state and
    the VM's spread). Returns (plain s, ibp free s, ibp store s) per pass;
    the last pass's blocks are checked byte for byte."""
    import torch
    import ibp.torch as it
    nl, nb = len(layers), layers[0].shape[1]
    ids, bl = torch.arange(nb), list(range(nb))
    host = [torch.empty_like(t) for t in layers]
    off = it.KVOffloader(nl, tuple(layers[0].shape[2:]), torch.bfloat16, capacity_bytes=capacity)
    for i, t in enumerate(layers):
        off.calibrate(i, t)
    for t, h in zip(layers, host):  # first touch outside the timing, both sides
        torch.index_select(t, 1, ids, out=h)
    handles = [off.store(i, t, bl) for i, t in enumerate(layers)]
    rows = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for t, h in zip(layers, host):
            torch.index_select(t, 1, ids, out=h)
        t1 = time.perf_counter()
        for hs in handles:
            off.free(hs)
        t2 = time.perf_counter()
        handles = [off.store(i, t, bl) for i, t in enumerate(layers)]
        t3 = time.perf_counter()
        rows.append((t1 - t0, t2 - t1, t3 - t2))
    for i, t in enumerate(layers):
        back = torch.empty_like(t)
        off.load(i, handles[i], back, bl)
        if not torch.equal(back.view(torch.int16), t.view(torch.int16)):
            raise SystemExit("kv_offload_case: layer %d does not round-trip" % i)
    off.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="24x96", choices=["24x96", "example"])
    ap.add_argument("--capacity", type=int, default=None)
    ap.add_argument("--blocks", type=int, default=96, help="blocks per layer of the 24-layer case (96: 56.6 MB raw; "
                    "256: 151 MB)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="--speed: torch's threads for the plain copies (libibp uses every core)")
    ap.add_argument("--speed", type=int, default=0, metavar="PASSES",
                    help="store/load speed against index_select / index_copy_ instead (PASSES >= 2: the "
                         "first, then warm ones)")
    ap.add_argument("--store-only", type=int, default=0, metavar="PASSES",
                    help="warm stores alone against index_select, alternating (median and range of PASSES)")
    a = ap.parse_args()
    import torch
    import ibp.torch as it
    layers = build_case(a.case, a.blocks)
    if a.store_only:
        raw = sum(t.numel() * 2 for t in layers)
        torch.set_num_threads(a.torch_threads)
        rows = store_only(layers, max(3, a.store_only), a.capacity)
        med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        p, f, st = (med([r[k] for r in rows]) for k in range(3))
        print("KV warm store, case %s (%d layers x %d blocks, %.1f MB raw), %s, %d torch thread(s), libibp on %d "
              "cores, %d passes" % (a.case, len(layers), layers[0].shape[1], raw / 1e6,
                                    time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), a.torch_threads,
                                    os.cpu_count(), len(rows)))
        print("  index_select %.1f ms (%.1f-%.1f); ibp store %.1f ms (%.1f-%.1f) + free %.1f ms; ratio %.2fx "
              "(store alone %.2fx)" % (p * 1e3, min(r[0] for r in rows) * 1e3, max(r[0] for r in rows) * 1e3,
                                      st * 1e3, min(r[2] for r in rows) * 1e3, max(r[2] for r in rows) * 1e3,
                                      f * 1e3, p / (st + f), p / st))
        if a.json:
            print(json.dumps({"raw_bytes": raw, "passes": [dict(zip(("plain_s", "ibp_free_s", "ibp_store_s"), r))
                                                           for r in rows]}))
        return 0
    if a.speed:
        raw = sum(t.numel() * 2 for t in layers)
        torch.set_num_threads(a.torch_threads)
        print("KV offload speed, case %s (%d layers x %d blocks, %.1f MB raw), %s, %d torch thread(s), "
              "libibp on %d cores" % (a.case, len(layers), layers[0].shape[1], raw / 1e6,
                                       time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), a.torch_threads,
                                       os.cpu_count()))
        print("%-6s | %21s | %21s | %21s | %21s | %s" % ("pass", "plain store GB/s", "ibp store GB/s", "ratio store",
                                                        "plain load GB/s", "ibp load GB/s  ratio load"))
        rows = speed(layers, max(2, a.speed), a.capacity)
        for name, ps, ist, pl, il, cal in rows:
            print("%-6s | %21.2f | %21.2f | %20.2fx | %21.2f | %10.2f %10.2fx%s" % (
                name, raw / ps / 1e9, raw / ist / 1e9, ps / ist, raw / pl / 1e9, raw / il / 1e9, pl / il,
                "  (calibration %.2f s, not in the store time)" % cal if cal else ""))
        if a.json:
            print(json.dumps({"raw_bytes": raw, "passes": [dict(zip(("pass", "plain_store_s", "ibp_store_s",
                                                                     "plain_load_s", "ibp_load_s", "calibrate_s"), r))
                                                           for r in rows]}))
        return 0
    nl, nb = len(layers), layers[0].shape[1]
    raw = sum(t.numel() * 2 for t in layers)
    off = it.KVOffloader(nl, (16, 12, 32), torch.bfloat16, capacity_bytes=a.capacity)
    t0 = time.perf_counter()
    for i, t in enumerate(layers):
        off.calibrate(i, t)
    calib = time.perf_counter() - t0
    codecs = sorted(set(off.codec(i) for i in range(nl)))
    base = statm_rss()
    hwm_ok = reset_hwm()
    t0 = time.perf_counter()
    handles = [off.store(i, t, list(range(nb))) for i, t in enumerate(layers)]
    store_s = time.perf_counter() - t0
    steady = statm_rss() - base
    peak = (vm_hwm() - base) if hwm_ok else None
    used = off.used_bytes
    target = used * 1.05 + (16 << 20)
    # every block back, byte for byte
    for i, t in enumerate(layers):
        back = torch.zeros_like(t)
        off.load(i, handles[i], back, list(range(nb)))
        if not torch.equal(back.view(torch.int16), t.view(torch.int16)):
            print("kv_offload_case: layer %d does not round-trip" % i, file=sys.stderr)
            return 1
    res = dict(case=a.case, layers=nl, blocks_per_layer=nb, raw_bytes=raw, compressed_bytes=used,
               ratio=raw / used if used else 0.0, codecs=codecs, calibrate_s=round(calib, 3),
               store_s=round(store_s, 3), rss_growth_bytes=steady, peak_growth_bytes=peak,
               target_bytes=int(target), steady_ok=steady <= target)
    off.close()
    if a.json:
        print(json.dumps(res))
    else:
        mb = 1e6
        print("KV offload case %s: %d layers x %d blocks, raw %.1f MB, compressed %.1f MB (ratio %.3f, %s)"
              % (a.case, nl, nb, raw / mb, used / mb, res["ratio"], "/".join(codecs)))
        print("  calibrate %.2f s, store %.2f s" % (calib, store_s))
        print("  resident growth after the stores %.1f MB (target <= %.1f MB: compressed + 5%% + 16 MiB): %s"
              % (steady / mb, target / mb, "ok" if res["steady_ok"] else "OVER"))
        if peak is not None:
            print("  peak growth during the stores %.1f MB" % (peak / mb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
