#!/usr/bin/env bash
# gpu-check.sh - everything that needs a real GPU, in one command, for the day
# a device appears (docs/GPU.md). Builds for sm_90 in build-gpu/, prints the
# kernels' registers / spills / shared memory (ptxas), runs every GPU test
# binary plain and under compute-sanitizer (memcheck, racecheck, synccheck,
# initcheck), runs the GPU benchmarks, and writes ONE report file with the
# device, driver, date and every figure.
#
# Usage: tools/gpu-check.sh [REPORT]   (default: build-gpu/gpu-report-<date>.txt)
# Environment: IBP_GPU_BUILD (default build-gpu), IBP_GPU_ARCH (default 90),
#              IBP_GPU_SKIP_BENCH=1, IBP_GPU_SKIP_SANITIZE=1.
# Exit status: 0 all passed, 1 something failed, 77 no usable GPU (the
# report then says so; nothing else ran).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
stamp=$(date -u +%Y%m%d-%H%M%S)
build=${IBP_GPU_BUILD:-build-gpu}
mkdir -p "$build"
report=${1:-$root/$build/gpu-report-$stamp.txt}
arch=${IBP_GPU_ARCH:-90}
jobs=$(nproc 2>/dev/null || echo 2)
: >"$report"
failed=()

say() { echo "$*" | tee -a "$report"; }
section() { say; say "=== $* ==="; }
step() { # name command...: runs, appends its output to the report, records a failure
	local name=$1 rc
	shift
	say "--- $name: $*"
	"$@" >>"$report" 2>&1
	rc=$?
	say "--- $name: exit $rc"
	[[ $rc -eq 0 || $rc -eq 77 ]] || failed+=("$name")
	return $rc
}

section "libibp GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(uname -n) $(uname -m), $(nproc 2>/dev/null) cores; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >>"$report" 2>&1; then
	say "no usable GPU (nvidia-smi missing or found no device): nothing to check here;"
	say "without a GPU the kernels are checked by tests/emu (ctest test_emu)."
	exit 77
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
	--format=csv >>"$report" 2>&1
command -v nvcc >/dev/null && nvcc --version | tail -n 2 >>"$report"

section "build (sm_$arch, $build/)"
step configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DIBP_CUDA=ON -DIBP_CUDA_ARCHITECTURES="$arch" \
	-DIBP_TESTS=ON || { say "configure failed"; exit 1; }
step build cmake --build "$build" -j"$jobs" || { say "build failed"; exit 1; }

section "kernel resources (ptxas, sm_$arch)"
step ptxas "$root/tests/cuda/kernel_resources.sh" "$arch"

section "GPU tests"
tests=()
for t in "$build"/bin/test_cuda_* "$build"/bin/test_nccl "$build"/bin/test_coll_device; do
	[[ -x "$t" ]] && tests+=("$t")
done
for t in "${tests[@]}"; do
	step "$(basename "$t")" "$t" --jobs=1 --short-filename
done

if [[ "${IBP_GPU_SKIP_SANITIZE:-0}" != 1 ]]; then
	section "compute-sanitizer"
	if command -v compute-sanitizer >/dev/null; then
		for tool in memcheck racecheck synccheck initcheck; do
			extra=()
			[[ $tool == memcheck ]] && extra=(--leak-check full)
			for t in "${tests[@]}"; do
				# Criterion runs each test in a child process: follow it
				IBP_TEST_QUICK=1 step "$tool $(basename "$t")" compute-sanitizer --tool "$tool" "${extra[@]}" \
					--target-processes all --error-exitcode 99 "$t" --jobs=1 --short-filename
			done
		done
	else
		say "compute-sanitizer not found: sanitizer runs NOT done"
		failed+=("compute-sanitizer missing")
	fi
fi

if [[ "${IBP_GPU_SKIP_BENCH:-0}" != 1 ]]; then
	section "benchmarks"
	for b in "$build"/bin/gpu_*; do
		[[ -x "$b" ]] || continue
		step "$(basename "$b")" "$b"
		step "$(basename "$b") --json" "$b" --json
	done
fi

section "summary"
if [[ ${#failed[@]} -eq 0 ]]; then
	say "all GPU checks passed; report: $report"
	exit 0
fi
say "FAILED: ${failed[*]}"
say "report: $report"
exit 1
