#!/usr/bin/env python3
"""Sweep `ibp cache-sim` over budgets and policies; print Markdown tables
(docs/BENCHMARKS.md, "Slab cache") and a text plot of hit rate and PCIe bytes
against budget.

    python3 bench/cache_sim_sweep.py IBP STORE.ibp TRACE [--budgets 1,2,5,10,20,50]
        [--policies static,clock,s3fifo,lru] [--batch N] [--class-step S] [--before IBP0]

IBP is the `ibp` executable, TRACE a --trace SPEC (zipf:ALPHA:N:SEED or a file).
--before IBP0: an older `ibp`, run in the same sweep on the default policy
(the last of --policies that is s3fifo, else the first): its targets are a
"before" column of the main table. "meta" is the metadata of each cache
(index, per-slot state, workspaces), outside the byte budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def run(ibp, store, trace, pct, policy, batch, step):
    cmd = [ibp, "cache-sim", store, "--trace", trace, "--capacity", f"{pct}%", "--policy", policy, "--json"]
    if batch:
        cmd += ["--batch", str(batch)]
    if step:
        cmd += ["--class-step", str(step)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def mib(b):
    return f"{b / 1048576:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ibp")
    ap.add_argument("store")
    ap.add_argument("trace")
    ap.add_argument("--budgets", default="1,2,5,10,20,50")
    ap.add_argument("--policies", default="static,clock,s3fifo,lru")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--class-step", type=int, default=0)
    ap.add_argument("--before", default="")
    a = ap.parse_args()
    budgets = [float(x) for x in a.budgets.split(",")]
    pols = a.policies.split(",")
    res = {(p, b): run(a.ibp, a.store, a.trace, b, p, a.batch, a.class_step) for p in pols for b in budgets}
    dp = "s3fifo" if "s3fifo" in pols else pols[0]
    before = ({b: run(a.before, a.store, a.trace, b, dp, a.batch, a.class_step) for b in budgets}
              if a.before else {})
    r0 = next(iter(res.values()))
    print(f"store `{a.store}`: {r0['rows']} rows x {r0['row_bytes']} B, ratio {r0['ratio']:.2f}; "
          f"trace `{r0['trace']}`: {r0['requests']} requests, {r0['batches']} batches, "
          f"{r0['distinct_rows']} distinct rows; no cache: {mib(r0['none']['pcie_bytes'])} MiB PCIe\n")

    def targets(r):
        return ("rows " + ("ok" if r["target_rows"] else "MISS") + ", pcie " +
                ("ok" if r["target_pcie"] else "MISS"))

    print(f"Policy {dp}, uncompressed (unc.) against compressed (comp.) cache at the same budget:\n")
    print("| budget | hit rate unc. | hit rate comp. | rows unc. | rows comp. | x rows | "
          "PCIe MiB unc. | PCIe MiB comp. | model ms unc. | model ms comp. | meta KiB unc. | meta KiB comp. | "
          + ("targets before | " if before else "") + "targets |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if before else "") + "---|")
    for b in budgets:
        r = res[(dp, b)]
        u, c = r["uncompressed"], r["compressed"]
        bt = f"{targets(before[b])} | " if before else ""
        print(f"| {b:g}% | {100 * u['hit_rate']:.1f}% | {100 * c['hit_rate']:.1f}% | "
              f"{u['rows_resident']} | {c['rows_resident']} | {r['rows_resident_x']:.1f} | "
              f"{mib(u['pcie_bytes'])} | {mib(c['pcie_bytes'])} | {1e3 * u['model_seconds']:.2f} | "
              f"{1e3 * c['model_seconds']:.2f} | {u['meta_bytes'] / 1024:.0f} | {c['meta_bytes'] / 1024:.0f} | "
              f"{bt}{targets(r)} |")
    print("\nCompressed-cache hit rate by policy (uncompressed in brackets), targets missed marked *:\n")
    print("| policy | " + " | ".join(f"{b:g}%" for b in budgets) + " |")
    print("|---|" + "---:|" * len(budgets))
    for p in pols:
        cells = []
        for b in budgets:
            r = res[(p, b)]
            miss = "" if r["target_rows"] and r["target_pcie"] else "*"
            cells.append(f"{100 * r['compressed']['hit_rate']:.1f}% ({100 * r['uncompressed']['hit_rate']:.1f}%){miss}")
        print(f"| {p} | " + " | ".join(cells) + " |")
    # Text plot: hit rate (0..100%) of the best dynamic policy and PCIe bytes.
    print("\n```")
    width = 50
    for p in pols:
        print(f"{p}: hit rate, u = uncompressed, c = compressed (0..100%); PCIe bytes relative to no cache")
        for b in budgets:
            r = res[(p, b)]
            line = [" "] * (width + 1)
            hu = int(round(r["uncompressed"]["hit_rate"] * width))
            hc = int(round(r["compressed"]["hit_rate"] * width))
            line[hu] = "u"
            line[hc] = "c" if hc != hu else "*"
            nb = r["none"]["pcie_bytes"] or 1
            pu = r["uncompressed"]["pcie_bytes"] / nb
            pc = r["compressed"]["pcie_bytes"] / nb
            print(f"  {b:5g}% |{''.join(line)}| PCIe u {pu:5.2f} c {pc:5.2f}")
    print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
