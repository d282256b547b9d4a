#!/usr/bin/env bash
# kernel_resources.sh - registers, spills, stack and static shared memory of
# every CUDA kernel as ptxas reports them for sm_ARCH (default 90), and the
# occupancy the registers allow on an H100 (64 K registers, 64 warps per SM).
# No GPU needed (ctest test_kernel_resources in CUDA builds; tools/gpu-check.sh).
# A gather kernel that spills is flagged (the target is none; today the
# block kernels for C = 2, 4, 8 spill 32 bytes); IBP_PTXAS_STRICT=1 makes
# that a failure. Usage: tests/cuda/kernel_resources.sh [ARCH]
# Exit 77: no nvcc; 1: a kernel did not compile (or a strict spill).
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
cat "$out"/*.log | python3 -c '
import re, subprocess, sys
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
        print("  ^ WARNING: a gather kernel spills (target: none)")
strict = "'"${IBP_PTXAS_STRICT:-0}"'" == "1"
sys.exit(1 if bad and strict else 0)
' || rc=1
exit $rc
