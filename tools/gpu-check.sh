#!/usr/bin/env bash
# gpu-check.sh - everything that runs on a GPU machine, in one command that
# fits a short device window (docs/GPU.md "The GPU check").
#
# Steps run in priority order, each with a time estimate: the build of what
# the tests need (only those targets, on every core), the GPU correctness
# tests (Criterion binaries, the CUDA example, the Python GPU tests), then
# compute-sanitizer memcheck / racecheck / synccheck on a quick subset, then
# the GPU benchmarks (gpu_codecs, gpu_gather, gpu_cache; each under 30 s),
# then CPU runs that want many cores (the collectives with 4 and 8
# in-process ranks under --rate: checks of the collectives' cost model, not
# comparisons with native). A step that would not finish inside the time
# budget is skipped and named; a step never runs past the budget (it is
# stopped); a failed step never costs the results of the steps before it.
# Every step's output goes to the report as it runs; the summary is written
# at the end, also when the script is stopped.
#
# Usage: tools/gpu-check.sh [--budget SECONDS] [--out DIR] [--build-dir DIR]
#                           [--arch N] [--only STEP,...] [--dry-run]
#   --budget   wall-time budget including the build (default
#              $IBP_GPU_BUDGET, else 480 s = 8 minutes)
#   --out      report folder (default $IBP_GPU_OUT, else
#              BUILD/gpu-report-<date>): report.txt (every step's output),
#              summary.txt (one line per step), device.txt (nvidia-smi,
#              nvcc, host), and each benchmark's JSON (gpu_*.json)
#   --build-dir  build folder (default $IBP_GPU_BUILD, else build-gpu)
#   --arch     CUDA architecture (default $IBP_GPU_ARCH, else 90)
#   --only     run only these steps (and the setup steps they need)
#   --dry-run  on any machine, GPU or not: configure the build, check that
#              every target, binary, script and file the steps name exists,
#              print the steps in order with their estimates; exit 0
#              (77 when no CUDA compiler is installed). CI runs it.
#   --self-test  the scheduler on made-up steps (a pass, a failure, a hang,
#              a step past the budget, a pass after the failure) checked
#              against its summary; no GPU needed. CI runs it.
# Environment: IBP_GPU_SKIP_SANITIZE=1, IBP_GPU_SKIP_BENCH=1 and
#   IBP_GPU_SKIP_CPU=1 leave groups out; IBP_GPU_FULL=1 runs the tests'
#   full sweeps (default: IBP_TEST_QUICK=1, every test, fewer sizes).
# A step near its limit has the stacks of its processes written to the
# report (cuda-gdb) before it is stopped.
# Missing libraries (Criterion, jemalloc, xxHash, zstd, lz4): when .debs/
# exists (../shared/gpu/fetch-debs.sh fills it on a machine with Debian's
# package lists), .debs/unpack-debs.sh is sourced first.
# Exit status: 0 nothing failed (steps skipped for the budget are named in
# the summary), 1 a step failed, 2 bad usage, 77 no usable GPU (nothing ran).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

budget=${IBP_GPU_BUDGET:-480}
out=${IBP_GPU_OUT:-}
build=${IBP_GPU_BUILD:-build-gpu}
arch=${IBP_GPU_ARCH:-90}
dry=0
only=""
usage() { sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
	case $1 in
	--budget) budget=${2:?}; shift ;;
	--out) out=${2:?}; shift ;;
	--build-dir) build=${2:?}; shift ;;
	--arch) arch=${2:?}; shift ;;
	--only) only=${2:?}; shift ;;
	--dry-run) dry=1 ;;
	--self-test) dry=2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "gpu-check: unknown argument $1 (--help)" >&2; exit 2 ;;
	esac
	shift
done
[[ $budget =~ ^[0-9]+$ && $budget -gt 0 ]] || { echo "gpu-check: --budget takes seconds > 0" >&2; exit 2; }
[[ $build = /* ]] || build=$root/$build
jobs=$(nproc 2>/dev/null || echo 2)
stamp=$(date -u +%Y%m%d-%H%M%S)
[[ -n $out ]] || out=$build/gpu-report-$stamp
t_start=$(date +%s)

# ---- the steps: name, estimate (s), group, what it needs, what it is ----
# group: setup (always before the rest), test, sanitize, bench, cpu.
# needs: build targets ("t:NAME"), files in the tree ("f:PATH"), commands
# on the PATH ("c:NAME"); a step whose targets were not built is skipped.
names=() ests=() groups=() needs=() descs=()
def() { names+=("$1"); ests+=("$2"); groups+=("$3"); needs+=("$4"); descs+=("$5"); }
selftest=${IBP_GPU_SELFTEST:-0} # the scheduler on made-up steps (--self-test), no GPU needed
min_cap=30                      # a step's time limit is at least this (s)

gpu_tests=(test_cuda_ibp test_cuda_codecs test_cuda_index test_cuda_dynamiq test_cache_cuda test_kv_cuda
	test_coll_device test_nccl)
py_gpu_tests=(python/tests/test_cuda.py python/tests/test_torch_kv_cuda.py python/tests/test_torch_bag_cuda.py)
benches=(gpu_codecs gpu_gather gpu_cache)

def deps 10 setup "" "libraries the build needs (Criterion, jemalloc, xxHash) from .debs/"
def configure 15 setup "c:cmake" "cmake configure (Release, IBP_CUDA=ON, sm_$arch)"
def build-tests 90 setup "$(printf 't:%s ' "${gpu_tests[@]}") t:example_cuda t:ibp" \
	"build the GPU test binaries, the CUDA example and libibp.so (-j$jobs)"
for t in "${gpu_tests[@]}"; do
	e=15
	[[ $t == test_cuda_codecs ]] && e=40 # FP8 conversion of all 2^32 floats
	[[ $t == test_cuda_ibp ]] && e=45    # encode/gather sweeps (every third size: IBP_TEST_QUICK)
	def "$t" "$e" test "t:$t" "GPU tests: $t (Criterion)"
done
def example_cuda 5 test "t:example_cuda" "examples/cuda.c on the device"
def python-gpu 45 test "t:ibp $(printf 'f:%s ' "${py_gpu_tests[@]}")" \
	"Python GPU tests (torch on the device) against this build's libibp.so"
def sanitize-probe 15 sanitize "c:compute-sanitizer t:test_cuda_index" "does compute-sanitizer run on this machine?"
for pair in memcheck:test_cuda_ibp racecheck:test_cuda_ibp synccheck:test_cuda_ibp memcheck:test_cuda_codecs \
	memcheck:test_kv_cuda memcheck:test_cache_cuda racecheck:test_cuda_codecs synccheck:test_cuda_codecs \
	racecheck:test_cache_cuda; do
	tool=${pair%%:*} t=${pair#*:}
	def "$tool-$t" 45 sanitize "c:compute-sanitizer t:$t" "compute-sanitizer --tool $tool on $t (IBP_TEST_QUICK=1)"
done
def build-bench 45 bench "$(printf 't:%s ' "${benches[@]}") t:ibp_coll_perf t:gpu_model_rows t:coll_codec_speed t:overlap_probe t:exp_rows_probe" \
	"build the GPU benchmarks, ibp-coll-perf, the cost model's row counter and the codec-speed probe"
def gpu_codecs 25 bench "t:gpu_codecs" "exponent and FP8 kernels, GB/s (bench/gpu_codecs.cu)"
def gpu_gather 30 bench "t:gpu_gather f:datasets/sample" "gather against the PCIe line and plain cudaMemcpy (bench/gpu_gather.cu, short)"
def gpu-model 40 bench "t:gpu_model_rows f:tools/sass-report.py f:tools/gpu_model.py" \
	"the SASS cost model's predicted decode beside the measured gather (tools/sass-report.py --model)"
def gpu_cache 25 bench "t:gpu_cache" "GPU slab cache: hit rate and rows/s on a Zipf trace (bench/gpu_cache.cu)"
for np in 4 8; do
	def "coll-$np" 60 cpu "t:ibp_coll_perf t:coll_codec_speed f:tools/coll_model.py" \
		"collectives, $np in-process ranks, --rate 1.25e9, beside the cost model's prediction (tools/coll_model.py)"
done
def overlap-probe 20 cpu "t:overlap_probe" \
	"random rows' misses against dependent work on this host's CPU (bench/overlap_probe.c): do they overlap here? (issue 29)"
def exp-rows-probe 40 cpu "t:exp_rows_probe" \
	"exponent rows against a plain float32 bag on this host's CPU (bench/exp_rows_probe.c, issue 29)"

if [[ $selftest == 1 ]]; then
	# The scheduler itself: a pass, a failure, a hang stopped at its limit,
	# a step too long for the budget, and a pass after all of them.
	names=() ests=() groups=() needs=() descs=()
	min_cap=2
	def st-pass 1 test "" "passes"
	def st-fail 1 test "" "fails"
	def st-hang 1 test "" "hangs: stopped at its limit"
	def st-long 100000 test "" "longer than the budget: skipped"
	def st-after 1 test "" "passes after the failure"
	do_st_pass() { echo "pass"; }
	do_st_fail() { echo "failing on purpose"; return 3; }
	do_st_hang() { limited sleep 60; }
	do_st_long() { echo "must not run"; return 1; }
	do_st_after() { echo "after"; }
fi
nsteps=${#names[@]}
declare -A status=() took=() why=()

index_of() { local i; for i in "${!names[@]}"; do [[ ${names[$i]} == "$1" ]] && { echo "$i"; return 0; }; done; return 1; }
wanted() { # step index: in --only (setup steps always), and its group not switched off
	local n=${names[$1]} g=${groups[$1]}
	[[ $g == sanitize && ${IBP_GPU_SKIP_SANITIZE:-0} == 1 ]] && return 1
	[[ $g == bench && ${IBP_GPU_SKIP_BENCH:-0} == 1 ]] && return 1
	[[ $g == cpu && ${IBP_GPU_SKIP_CPU:-0} == 1 ]] && return 1
	[[ -z $only || $g == setup ]] && return 0
	[[ ",$only," == *",$n,"* ]] && return 0
	# the bench group's build comes with any bench or cpu step
	[[ $n == build-bench ]] && for s in ${only//,/ }; do
		local j; j=$(index_of "$s") || continue
		[[ ${groups[$j]} == bench || ${groups[$j]} == cpu ]] && return 0
	done
	return 1
}
if [[ -n $only ]]; then
	for s in ${only//,/ }; do index_of "$s" >/dev/null || { echo "gpu-check: --only: no step $s" >&2; exit 2; }; done
fi

# binary of a target in this build
bin_of() {
	case $1 in
	ibp) echo "$build/libibp.so" ;;
	ibp_coll_perf) echo "$build/bin/ibp-coll-perf" ;;
	*) echo "$build/bin/$1" ;;
	esac
}

# ---- self-test: the scheduler on made-up steps, in a child ----
if [[ $dry == 2 ]]; then
	st_out=$(mktemp -d)
	trap 'rm -rf "$st_out"' EXIT
	IBP_GPU_SELFTEST=1 "$0" --budget 60 --out "$st_out" >"$st_out/stdout" 2>&1
	rc=$?
	bad=()
	[[ $rc == 1 ]] || bad+=("exit $rc, want 1 (a step failed)")
	want=("st-pass +passed" "st-fail +FAILED .*exit 3" "st-hang +FAILED .*stopped at its limit" \
		"st-long +skipped .*budget" "st-after +passed")
	for w in "${want[@]}"; do
		grep -Eq "^$w" "$st_out/summary.txt" 2>/dev/null || bad+=("summary lacks /$w/")
	done
	grep -q "must not run" "$st_out/report.txt" && bad+=("a step skipped for the budget ran")
	grep -q "^pass$" "$st_out/report.txt" || bad+=("report.txt lacks the first step's output")
	if [[ ${#bad[@]} -ne 0 ]]; then
		cat "$st_out/stdout"
		printf 'gpu-check --self-test: FAILED: %s\n' "${bad[@]}"
		exit 1
	fi
	cat "$st_out/summary.txt"
	echo "gpu-check --self-test: OK (pass, failure, hang stopped, budget skip, pass after a failure)"
	exit 0
fi

# ---- dry run ----
if [[ $dry == 1 ]]; then
	echo "gpu-check --dry-run: $nsteps steps, budget ${budget} s, build $build"
	nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
	if [[ ! -x $nvcc_path ]]; then
		echo "gpu-check --dry-run: SKIPPED: no CUDA compiler (nvcc) here, so the GPU build cannot be configured"
		exit 77
	fi
	mkdir -p "$build"
	if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DIBP_CUDA=ON -DIBP_CUDA_ARCHITECTURES="$arch" \
		-DIBP_TESTS=ON >"$build/dry-configure.log" 2>&1; then
		tail -n 20 "$build/dry-configure.log"
		echo "gpu-check --dry-run: FAILED: cmake configure (log: $build/dry-configure.log)"
		exit 1
	fi
	targets=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
	bad=0 total=0
	printf '%-4s %-28s %6s  %-8s %s\n' "#" step "est s" group what
	for i in "${!names[@]}"; do
		printf '%-4s %-28s %6s  %-8s %s\n' "$((i + 1))" "${names[$i]}" "${ests[$i]}" "${groups[$i]}" "${descs[$i]}"
		total=$((total + ests[i]))
		for nd in ${needs[$i]}; do
			case $nd in
			t:*) grep -qx "${nd#t:}" <<<"$targets" || { echo "     MISSING target ${nd#t:}"; bad=1; } ;;
			f:*) [[ -e $root/${nd#f:} ]] || { echo "     MISSING file ${nd#f:}"; bad=1; } ;;
			c:*) command -v "${nd#c:}" >/dev/null || echo "     (command ${nd#c:} not on this machine; needed on the GPU machine)" ;;
			esac
		done
	done
	[[ -x $root/tools/gpu-check.sh ]] || { echo "MISSING script tools/gpu-check.sh (or not executable)"; bad=1; }
	# outside the repository (a developer's checkout has it; CI's clone may not)
	[[ -e $root/../shared/gpu/fetch-debs.sh ]] ||
		echo "(note: ../shared/gpu/fetch-debs.sh is not beside this checkout: .debs/ must come from elsewhere)"
	echo "sum of the estimates: ${total} s (budget ${budget} s: the steps past it are skipped, lowest priority first)"
	if [[ $bad != 0 ]]; then
		echo "gpu-check --dry-run: FAILED: a step names something this tree does not have"
		exit 1
	fi
	echo "gpu-check --dry-run: OK"
	exit 0
fi

# ---- the real run ----
mkdir -p "$out" || { echo "gpu-check: cannot make $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
report=$out/report.txt summary=$out/summary.txt
: >"$report"
say() { echo "$*" | tee -a "$report"; }
elapsed() { echo $(($(date +%s) - t_start)); }

write_summary() {
	{
		echo "libibp GPU check $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), budget ${budget} s, $(elapsed) s used"
		head -n 1 "$out/device.txt" 2>/dev/null
		printf '%-28s %-8s %6s %6s  %s\n' step result "s" "est s" note
		local i n
		for i in "${!names[@]}"; do
			n=${names[$i]}
			[[ -n ${status[$n]:-} ]] || continue
			printf '%-28s %-8s %6s %6s  %s\n' "$n" "${status[$n]}" "${took[$n]:--}" "${ests[$i]}" "${why[$n]:-}"
		done
	} >"$summary"
}
finish() {
	write_summary
	echo
	cat "$summary"
	local f=0 n
	for n in "${!status[@]}"; do [[ ${status[$n]} == FAILED ]] && f=1; done
	echo "report: $out (report.txt, summary.txt, device.txt, gpu_*.json)"
	exit "$f"
}
trap 'say "gpu-check: stopped by a signal"; finish' INT TERM

{
	echo "libibp GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
	echo "host: $(uname -n) $(uname -m), $jobs cores"
} >"$out/device.txt"
if [[ $selftest == 1 ]]; then
	echo "self-test: no device needed" >>"$out/device.txt"
elif ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >>"$out/device.txt" 2>&1; then
	say "no usable GPU (nvidia-smi missing or found no device): nothing to check here;"
	say "without a GPU the kernels are checked by tests/emu (ctest test_emu); tools/gpu-check.sh --dry-run checks this script."
	exit 77
fi
[[ $selftest == 1 ]] || nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.max.sm \
	--format=csv >>"$out/device.txt" 2>&1
[[ $selftest == 1 ]] || ! command -v nvcc >/dev/null || nvcc --version | tail -n 2 >>"$out/device.txt"
cat "$out/device.txt" | tee -a "$report"
say "budget ${budget} s; $nsteps steps; report folder $out"

# Runs step i with its function; records status and time. A step gets at
# most 3x its estimate (at least 30 s), and never more than the budget left.
run_step() {
	local i=$1 n=${names[$1]} e=${ests[$1]} left cap rc t0 nd
	left=$((budget - $(elapsed)))
	for nd in ${needs[$i]}; do
		case $nd in
		t:*) if [[ ${groups[$i]} != setup && $n != build-* && ! -e $(bin_of "${nd#t:}") ]]; then
			status[$n]=skipped; why[$n]="not built (${nd#t:})"; say "--- $n: skipped: ${nd#t:} was not built"; return 0
		fi ;;
		c:*) if ! command -v "${nd#c:}" >/dev/null; then
			status[$n]=skipped; why[$n]="${nd#c:} not installed"; say "--- $n: skipped: ${nd#c:} not installed"; return 0
		fi ;;
		esac
	done
	if [[ $e -gt $left ]]; then
		status[$n]=skipped; why[$n]="budget: ~${e} s needed, ${left} s left"
		say "--- $n: skipped for the budget (~${e} s needed, ${left} s left)"
		return 0
	fi
	cap=$((3 * e)); [[ $cap -lt $min_cap ]] && cap=$min_cap
	[[ ${groups[$i]} == setup ]] && cap=$left
	[[ $cap -gt $left ]] && cap=$left
	say "--- $n ($(elapsed) s in; est ${e} s, limit ${cap} s): ${descs[$i]}"
	t0=$(date +%s)
	step_timeout=$cap
	"do_${n//-/_}" >>"$report" 2>&1
	rc=$?
	took[$n]=$(($(date +%s) - t0))
	case $rc in
	0) status[$n]=passed ;;
	77) status[$n]=skipped; [[ -n ${why[$n]:-} ]] || why[$n]="skipped itself (exit 77: see report)" ;;
	124 | 137) status[$n]=FAILED; why[$n]="stopped at its limit of ${cap} s" ;;
	*) status[$n]=FAILED; [[ -n ${why[$n]:-} ]] || why[$n]="exit $rc" ;;
	esac
	say "--- $n: ${status[$n]} in ${took[$n]} s ${why[$n]:+(${why[$n]})}"
	write_summary
	return 0
}
# A command under the step's time limit (the whole process group ends).
# Shortly before the limit a watcher writes the stacks of what still runs
# (cuda-gdb attaches; there is no gdb on the device image), so that a hang
# names its place in the report.
descendants() { # pid: its descendants, deepest last
	local c
	for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}
dump_stacks() { # pid of the timeout process
	local p comm dbg
	dbg=$(command -v cuda-gdb || command -v gdb) || { echo "gpu-check: no cuda-gdb/gdb: no stacks"; return 0; }
	echo "gpu-check: near the step's limit; the stacks of what still runs:"
	for p in $(descendants "$1"); do
		comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
		[[ $comm == compute-sanitiz* ]] && continue
		echo "--- pid $p ($comm)"
		timeout 20 "$dbg" -p "$p" -batch -ex "info threads" -ex "thread apply all bt 12" 2>&1 |
			grep -E '^#|^\*? *[0-9]+ +Thread|^Thread' | head -n 60
	done
}
limited() {
	local cap=$step_timeout lead w rc
	lead=$((cap > 40 ? 20 : cap / 2))
	timeout -k 5 "$cap" "$@" &
	local tp=$!
	(sleep $((cap - lead)) && kill -0 "$tp" 2>/dev/null && dump_stacks "$tp") &
	w=$!
	wait "$tp"
	rc=$?
	pkill -P "$w" 2>/dev/null
	kill "$w" 2>/dev/null
	wait "$w" 2>/dev/null
	return $rc
}

# ---- what each step does ----
have_criterion() {
	ldconfig -p 2>/dev/null | grep -q 'libcriterion\.so' && return 0
	compgen -G '/opt/debs/usr/lib/*/libcriterion.so*' >/dev/null
}
do_deps() {
	local missing=()
	have_criterion || missing+=(criterion)
	ldconfig -p 2>/dev/null | grep -q libxxhash || [[ -e /opt/debs/usr/include/xxhash.h ]] || missing+=(xxhash)
	ldconfig -p 2>/dev/null | grep -q libjemalloc || compgen -G '/opt/debs/usr/lib/*/libjemalloc.so*' >/dev/null ||
		missing+=(jemalloc)
	if [[ ${#missing[@]} -eq 0 ]]; then
		echo "deps: nothing missing"
		return 0
	fi
	echo "deps: missing ${missing[*]}"
	if [[ -f $root/.debs/unpack-debs.sh ]]; then
		echo "deps: sourcing .debs/unpack-debs.sh (into /opt/debs)"
		# in this shell (a function, not a subshell): the exports reach cmake
		# shellcheck disable=SC1091
		source "$root/.debs/unpack-debs.sh"
		have_criterion && return 0
		echo "deps: still no Criterion after unpacking .debs/"
		return 1
	fi
	echo "deps: no .debs/ folder: run ../shared/gpu/fetch-debs.sh on a machine with Debian's package lists and carry .debs"
	have_criterion || return 1
	return 0
}
do_configure() {
	local tests=ON
	have_criterion || { tests=OFF; echo "configure: no Criterion: tests off (the benchmarks still build)"; }
	limited cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DIBP_CUDA=ON -DIBP_CUDA_ARCHITECTURES="$arch" \
		-DIBP_TESTS="$tests" -DIBP_WERROR=OFF # its gcc is not CI's: a new warning must not cost the window
}
build_targets() { # targets that exist in this configuration, built together
	local have t want=()
	have=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
	for t in "$@"; do grep -qx "$t" <<<"$have" && want+=("$t") || echo "build: no target $t in this configuration"; done
	[[ ${#want[@]} -gt 0 ]] || return 1
	limited cmake --build "$build" -j"$jobs" --target "${want[@]}"
}
do_build_tests() { build_targets "${gpu_tests[@]}" example_cuda ibp; }
do_build_bench() { build_targets "${benches[@]}" ibp_coll_perf gpu_model_rows coll_codec_speed overlap_probe exp_rows_probe; }
json_count() { grep -m1 -oE "\"$2\": *[0-9]+" "$1" 2>/dev/null | grep -oE '[0-9]+$' || echo 0; }
criterion_run() { # binary [env...]: a Criterion binary; its counts go into the summary's note
	local t=$1 rep=$build/test-reports/$1.json rc
	shift
	mkdir -p "$build/test-reports"
	rm -f "$rep"
	# quick sweeps unless IBP_GPU_FULL=1; --verbose: each test's start and end in the report
	limited env IBP_SOURCE_DIR="$root" IBP_TEST_QUICK="${IBP_TEST_QUICK:-$((1 - ${IBP_GPU_FULL:-0}))}" "$@" \
		"$(bin_of "$t")" --jobs=1 --short-filename --verbose --json="$rep"
	rc=$?
	[[ -f $rep ]] && why[$t]="$(json_count "$rep" passed) passed, $(($(json_count "$rep" failed) + \
		$(json_count "$rep" errored))) failed, $(json_count "$rep" skipped) skipped"
	return $rc
}
for t in "${gpu_tests[@]}"; do eval "do_$t() { criterion_run $t; }"; done
do_example_cuda() { mkdir -p "$build/examples/cuda"; limited "$(bin_of example_cuda)" "$build/examples/cuda"; }
do_python_gpu() {
	local py=${PYTHON:-python3}
	"$py" -c 'import torch, numpy, pytest, hypothesis; assert torch.cuda.is_available()' ||
		{ why[python-gpu]="python3 lacks torch with CUDA, numpy, pytest or hypothesis"; return 77; }
	(cd "$build" && limited env IBP_LIBRARY="$build/libibp.so" PYTHONPATH="$root/python/src" \
		IBP_SOURCE_DIR="$root" "$py" -m pytest -q -p no:cacheprovider -rs -o faulthandler_timeout=60 "${py_gpu_tests[@]/#/$root/}")
}
sanitizer_ok=unknown
do_sanitize_probe() {
	local log=$build/sanitize-probe.log
	limited compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 \
		"$(bin_of test_cuda_index)" --jobs=1 --short-filename >"$log" 2>&1
	local rc=$?
	cat "$log"
	if grep -q "Device not supported\|not supported on this" "$log"; then
		sanitizer_ok=no
		why[sanitize-probe]="compute-sanitizer does not support this device (gVisor?): sanitizer runs skipped"
		return 77
	fi
	[[ $rc -eq 0 ]] && sanitizer_ok=yes
	return $rc
}
sanitize_run() { # tool binary
	[[ $sanitizer_ok == no ]] && { why[$1-$2]="compute-sanitizer unsupported here"; return 77; }
	# no --leak-check: the pinned allocator's regions live as long as the
	# process by design (src/mem/pinned_cudahost.c), and each is reported as
	# a leak (seen on an H200, 2026-11-28)
	# Criterion runs each test in a child process: the sanitizer follows it
	limited env IBP_TEST_QUICK=1 IBP_SOURCE_DIR="$root" compute-sanitizer --tool "$1" \
		--target-processes all --error-exitcode 99 "$(bin_of "$2")" --jobs=1 --short-filename
}
for i in "${!names[@]}"; do
	[[ ${groups[$i]} == sanitize && ${names[$i]} != sanitize-probe ]] || continue
	n=${names[$i]}
	eval "do_${n//-/_}() { sanitize_run ${n%%-*} ${n#*-}; }"
done
bench_run() { # binary args...: its JSON into the report folder (BENCH.json) and the report
	local b=$1
	shift
	limited "$(bin_of "$b")" "$@" --json >"$out/$b.json" || return $?
	cat "$out/$b.json"
}
do_gpu_codecs() { bench_run gpu_codecs --mb 256; }
do_gpu_gather() { bench_run gpu_gather --store-mb 256 --runs 10 --sizes 1024,4096 --savings 30,70; }
do_gpu_cache() { bench_run gpu_cache; }
do_gpu_model() { # the prediction (docs/GPU.md "SASS cost model") beside gpu_gather's measurement
	limited python3 "$root/tools/sass-report.py" --kernels gather --arch "$arch" --model --quiet \
		--rows-tool "$(bin_of gpu_model_rows)" --json "$out/gpu_model.json" || return $?
	[[ -f $out/gpu_gather.json ]] || { echo "no gpu_gather.json: run the gpu_gather step for the comparison"; return 0; }
	python3 "$root/tools/sass-report.py" --compare "$out/gpu_model.json" "$out/gpu_gather.json"
}
coll_run() { # ranks: the collectives' cost model (issue 38) checked where ranks have cores of their own
	local np=$1 op c d="$out/coll-$np" cores
	echo "collectives with $np in-process ranks, each send throttled to 1.25 GB/s (10 Gb/s), beside the cost"
	echo "model's prediction from inputs measured apart (ping-pong, each codec alone): NOT a comparison with native"
	mkdir -p "$d"
	cores=$(( $(nproc) / np > 0 ? $(nproc) / np : 1 ))
	limited "$(bin_of ibp_coll_perf)" --threads 2 -o pingpong -b 64K -e 16M -f 4 -n 9 --json >"$d/pingpong.jsonl" ||
		return $?
	limited "$(bin_of coll_codec_speed)" --runs 7 >"$d/codecs.json" || return $?
	printf '{"transport": "inproc", "cores_per_rank": %d, "link": {"source": "in-process transport, ping-pong"}}\n' \
		"$cores" >"$d/setup.json"
	: >"$d/runs.jsonl"
	for op in allgather reducescatter allreduce alltoall; do
		for c in none exp fp8 dynamiq pts lsq; do
			case $op/$c in
			*/dynamiq | */pts) [[ $op == allreduce ]] || continue ;;
			*/lsq) [[ $op == alltoall ]] || continue ;;
			esac
			limited "$(bin_of ibp_coll_perf)" --threads "$np" -o "$op" -c "$c" -d bf16 -b 4M -e 16M -f 4 \
				--rate 1.25e9 --policy always -n 5 -w 1 --json >>"$d/runs.jsonl" || return $?
		done
	done
	python3 "$root/tools/coll_model.py" --inputs "$d/pingpong.jsonl" --inputs "$d/codecs.json" \
		--inputs "$d/setup.json" --validate "$d/runs.jsonl" --json "$d/validate.json" ||
		echo "coll-$np: the model is outside its tolerance on some lines (above): a finding, not a failed step"
}
do_overlap_probe() { # the bound on random bags (docs/BENCHMARKS.md "Misses and decode add up") on another CPU
	limited "$(bin_of overlap_probe)" --reps 5 --rows 131072 --row 128,256 --work 20,40 | tee "$out/overlap_probe.txt"
}
do_exp_rows_probe() { # issue 29's predicted bag (docs/BENCHMARKS.md "Exponent rows") on another CPU
	limited "$(bin_of exp_rows_probe)" --reps 5 --ahead 16 | tee "$out/exp_rows_probe.txt"
}
do_coll_4() { coll_run 4; }
do_coll_8() { coll_run 8; }

# ---- run ----
for i in "${!names[@]}"; do
	wanted "$i" || continue
	n=${names[$i]}
	# nothing after a failed setup step can run
	if [[ ${groups[$i]} != setup ]]; then
		for s in configure build-tests; do
			if [[ ${status[$s]:-} == FAILED ]]; then
				status[$n]=skipped; why[$n]="$s failed"
				continue 2
			fi
		done
	fi
	if [[ $n == build-bench && ${status[configure]:-} != passed ]]; then
		status[$n]=skipped; why[$n]="not configured"
		continue
	fi
	run_step "$i"
done
finish
