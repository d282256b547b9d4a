#!/usr/bin/env bash
# kernel_resources.sh - registers, spills, stack and static shared memory of
# every CUDA kernel as ptxas reports them for sm_ARCH (default 90), and the
# occupancy the registers allow on an H100 (64 K registers, 64 warps per SM).
# For each gather kernel it then computes the rows in flight per GPU (an
# H100: 132 SMs) from its registers and its own launch configuration
# (kernels/ibp_gather.cu: groups per block, stage buffers per group) and
# compares their bytes with the PCIe bandwidth-delay product, 55 GB/s x
# 2 us = 110 KB (docs/GPU.md, "Rows in flight"). Targets, failures unless
# IBP_PTXAS_STRICT=0: no gather kernel spills, and the rows in flight cover
# at least 4x the product (warp kernels: 128-byte compressed rows, R = 256
# at 50%; block kernels: their smallest rows, R = 4097 at 50%).
# No GPU needed (ctest test_kernel_resources in CUDA builds; tools/gpu-check.sh).
# Usage: tests/cuda/kernel_resources.sh [ARCH]
# Exit 77: no nvcc; 1: a kernel did not compile, or a target is missed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
arch=${1:-90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x "$nvcc" ]] || { echo "SKIPPED: nvcc not found"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for cu in "$repo"/kernels/*.cu; do
	name=$(basename "$cu" .cu)
	("$nvcc" -O3 -DIBP_BUILDING -DIBP_HAVE_CUDA=1 -D_GNU_SOURCE -arch=sm_"$arch" -cubin --resource-usage \
		--expt-relaxed-constexpr -I"$repo/include" -I"$repo/src" -I"$repo/kernels" "$cu" -o "$out/$name.cubin" \
		>"$out/$name.log" 2>&1 || touch "$out/$name.failed") &
	pids+=($!)
	[[ ${#pids[@]} -ge 2 ]] && { wait "${pids[0]}" || true; pids=("${pids[@]:1}"); }
done
wait
rc=0
for cu in "$repo"/kernels/*.cu; do
	name=$(basename "$cu" .cu)
	[[ -f "$out/$name.failed" ]] && { echo "nvcc failed on $cu:"; cat "$out/$name.log"; rc=1; }
done
cat "$out"/*.log | IBP_REPO="$repo" python3 -c '
import os, re, subprocess, sys
rows, cur = [], None
for line in sys.stdin:
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        cur = {"name": m.group(1), "stack": 0, "spill_st": 0, "spill_ld": 0, "regs": 0, "smem": 0}
        rows.append(cur)
        continue
    if cur is None:
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
        cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
    m = re.search(r"Used (\d+) registers", line)
    if m:
        cur["regs"] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", line)
        cur["smem"] = int(s.group(1)) if s else 0
names = [r["name"] for r in rows]
try:
    dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
except OSError:
    dem = names
bad = 0
print("%-72s %5s %6s %6s %6s %7s %s" % ("kernel (sm_'"$arch"')", "regs", "spillS", "spillL", "stack", "smem", "warps/SM by regs"))
for r, d in zip(rows, dem):
    per_warp = ((r["regs"] * 32 + 255) // 256) * 256 if r["regs"] else 256
    warps = min(64, 65536 // per_warp)
    d = (d or r["name"])[:72]
    print("%-72s %5d %6d %6d %6d %7d %d" % (d, r["regs"], r["spill_st"], r["spill_ld"], r["stack"], r["smem"], warps))
    if "gather" in d and (r["spill_st"] or r["spill_ld"]):
        bad += 1
        print("  ^ FAILED: a gather kernel spills (target: none)")

# Rows in flight per GPU: the launch configuration of ibp_gather_config as
# the cost model computes it (tools/gpu_model.py geometry: a warp kernel
# block holds up to IBP_WARP_GROUPS groups, a block kernel block one group;
# each group keeps nbuf - 1 rows in flight while it decodes one; H100 limits),
# for dense rows (the longest encoding is the row).
sys.path.insert(0, os.path.join(os.environ["IBP_REPO"], "tools"))
import gpu_model as gm
consts = gm.gather_consts(os.environ["IBP_REPO"])
WMAX, SMS = consts[3], gm.SMS
BDP = 55e9 * 2e-6
print()
print("Rows in flight per GPU (H100, %d SMs) against the PCIe bandwidth-delay product (55 GB/s x 2 us = %.0f KB):" % (SMS, BDP / 1e3))
print("%-40s %5s %7s %5s %4s %9s %8s %9s %9s %7s" % ("gather kernel", "regs", "threads", "nbuf", "R", "row bytes", "blk/SM", "rows/GPU", "KB", "x BDP"))
for r, d in zip(rows, dem):
    m = re.search(r"ibp_gather_kernel<(\d+)u?, (\d+)>", d or "")
    if not m:
        continue
    C, nw = int(m.group(1)), int(m.group(2))
    R = 256 if nw == 1 else WMAX + 1
    comp = R // 2  # compressed bytes at 50% savings
    g = gm.geometry(R, r["regs"], consts)
    threads, nbuf, blocks, inflight = g["threads"], g["nbuf"], g["blocks_per_sm"], g["rows_in_flight"]
    x = inflight * comp / BDP
    print("%-40s %5d %7d %5d %4d %9d %8d %9d %9.0f %7.2f" % ("ibp_gather_kernel<C=%d, NW=%d> %s" % (C, nw, "warp/row" if nw == 1 else "block/row"), r["regs"], threads, nbuf, R, comp, blocks, inflight, inflight * comp / 1e3, x))
    if x < 4:
        bad += 1
        print("  ^ FAILED: rows in flight cover less than 4x the bandwidth-delay product")
strict = "'"${IBP_PTXAS_STRICT:-1}"'" != "0"
sys.exit(1 if bad and strict else 0)
' || rc=1
exit $rc
