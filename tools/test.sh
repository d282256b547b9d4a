#!/usr/bin/env bash
# test.sh - run every libibp test: the Criterion suites (release build, CUDA
# kernels compiled when nvcc exists; GPU tests skip without a device), the same
# suites under AddressSanitizer + UBSan, each libFuzzer target for a bounded
# time, and the mutation check (tools/mutate.sh). The CLI ends up at
# build/bin/ibp.
#
# The last line counts tests, not binaries: "N passed, N failed, N skipped".
# A Criterion binary counts each of its tests (from its JSON report, see
# tests/CMakeLists.txt); any other ctest test, fuzz target or mutation counts
# one. A binary that fails without a failing test in its report (a crash, a
# sanitizer report at exit, a timeout) counts one failure more. The exit
# status is non-zero when anything failed.
#
# Environment: IBP_FUZZ_SECONDS (default 30 per target; 0 skips fuzzing),
#              IBP_SKIP_SANITIZE=1 skips the sanitizer pass,
#              IBP_SKIP_MUTATION=1 skips the mutation check,
#              IBP_SKIP_PYTHON=1 skips the Python package (tools/test-python.sh)
#              and the client tests,
#              IBP_SKIP_CLIENTS=1 skips the client tests (tools/test-clients.sh: vLLM, torchrec
#              in ~/.cache/ibp/clients; their files then run, and skip, in the
#              Python package's pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${IBP_FUZZ_SECONDS:-30}

tools/install-deps.sh --fuzz

passed=0
failed=0
skipped=0
failures=()
# each step with the time since the start (the CI budget: 45 minutes cold, 30 warm)
step() { echo; echo "=== $* === [$(date -u +%H:%M:%S), $((SECONDS / 60))m$((SECONDS % 60))s in]"; }
count() { # passed failed skipped
	passed=$((passed + $1)); failed=$((failed + $2)); skipped=$((skipped + $3))
}
# A top-level count ("passed", "failed", ...) of a Criterion JSON report: the
# first occurrence is the report's own, the suites' come after it.
json_count() { grep -m1 -oE "\"$2\": *[0-9]+" "$1" | grep -oE '[0-9]+$' || echo 0; }

# Counts a ctest run from its log and the JSON reports in BUILD/test-reports.
# usage: count_ctest LABEL BUILD_DIR CTEST_STATUS
count_ctest() {
	local label=$1 dir=$2 rc=$3 line name result p f s rep bad=0
	while IFS= read -r line; do
		[[ $line =~ Test\ +#[0-9]+:\ +([^ ]+)\ +\.*\ *(\*\*\*)?(Passed|Failed|Skipped|Not\ Run|Timeout|Exception|[A-Za-z]+) ]] || continue
		name=${BASH_REMATCH[1]}
		result=${BASH_REMATCH[3]}
		rep="$dir/test-reports/$name.json"
		if [[ -f $rep ]]; then
			p=$(json_count "$rep" passed)
			f=$(($(json_count "$rep" failed) + $(json_count "$rep" errored)))
			s=$(json_count "$rep" skipped)
			if [[ $result != Passed && $result != Skipped && $f -eq 0 ]]; then f=1; fi
		else
			p=0 f=0 s=0
			case $result in
			Passed) p=1 ;;
			Skipped) s=1 ;;
			*) f=1 ;;
			esac
		fi
		if [[ $f -ne 0 ]]; then bad=1; fi
		count "$p" "$f" "$s"
	done <"$dir/ctest.log"
	if [[ $rc -ne 0 && $bad -eq 0 ]]; then
		count 0 1 0 # ctest failed without a test that did
		bad=1
	fi
	if [[ $bad -ne 0 ]]; then failures+=("$label"); fi
	return 0
}

# usage: run_ctest LABEL BUILD_DIR [VAR=value ...]
run_ctest() {
	local label=$1 dir=$2
	shift 2
	rm -rf "$dir/test-reports"
	mkdir -p "$dir/test-reports"
	set +e
	(cd "$dir" && env "$@" ctest -j"$jobs" --output-on-failure) 2>&1 | tee "$dir/ctest.log"
	local rc=${PIPESTATUS[0]}
	set -e
	count_ctest "$label" "$dir" "$rc"
}

step "release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DIBP_TESTS=ON
cmake --build build -j"$jobs"
step "tests (release)"
run_ctest "ctest release" build

# The Python package (python/): venv, pip install ./python, pytest; counts pytest's tests.
if [[ "${IBP_SKIP_PYTHON:-0}" != 1 ]]; then
	step "Python package (tools/test-python.sh, build-python/)"
	# python/tests/clients runs in the client environments below, not here
	addopts=${PYTEST_ADDOPTS:-}
	if [[ "${IBP_SKIP_CLIENTS:-0}" != 1 ]]; then addopts="$addopts --ignore=$root/python/tests/clients"; fi
	set +e; PYTEST_ADDOPTS=$addopts tools/test-python.sh; rc=$?; set -e
	read -r p f s <"${IBP_PY_BUILD:-build-python}/counts" 2>/dev/null || { p=0; f=1; s=0; }
	count "$p" "$f" "$s"
	[[ $rc -ne 0 ]] && failures+=("python package")
	# Client libraries (vLLM, torchrec), each in its own environment under ~/.cache/ibp/clients.
	if [[ "${IBP_SKIP_CLIENTS:-0}" != 1 ]]; then
		step "client libraries (tools/test-clients.sh, ~/.cache/ibp/clients)"
		set +e; tools/test-clients.sh; rc=$?; set -e
		read -r p f s <"${IBP_PY_BUILD:-build-python}/clients-counts" 2>/dev/null || { p=0; f=1; s=0; }
		count "$p" "$f" "$s"
		[[ $rc -ne 0 ]] && failures+=("client tests")
	fi
fi

if [[ "${IBP_SKIP_SANITIZE:-0}" != 1 ]]; then
	step "ASan+UBSan build (build-asan/)"
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DIBP_SANITIZE=ON -DIBP_CUDA=OFF >/dev/null
	cmake --build build-asan -j"$jobs"
	step "tests (ASan+UBSan)"
	run_ctest "ctest asan+ubsan" build-asan IBP_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi

if [[ "$fuzz_seconds" != 0 ]]; then
	step "libFuzzer targets, ${fuzz_seconds}s each, $jobs at a time (build-fuzz/)"
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIBP_FUZZ=ON \
		-DIBP_CUDA=OFF -DIBP_SANITIZE=ON >/dev/null
	# only the fuzz targets (tests/fuzz/fuzz_*.c), not the suites beside them
	targets=()
	for src in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
	cmake --build build-fuzz -j"$jobs" --target "${targets[@]}"
	# one fuzzer a core at a time (libFuzzer runs on one), reported in order
	fuzz_one() {
		local name=$1 f="build-fuzz/bin/$1" corpus="$root/tests/fuzz/corpus/$1"
		# the working corpus (new inputs) is kept between runs in build-fuzz/
		local work="build-fuzz/corpus-$name" seeds=()
		mkdir -p "$work"
		[[ -d "$corpus" ]] && seeds=("$corpus")
		"$f" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
			"$work" "${seeds[@]}" >"build-fuzz/$name.log" 2>&1
		echo $? >"build-fuzz/$name.rc"
	}
	pids=()
	for ((k = 0; k < ${#targets[@]}; k++)); do
		rm -f "build-fuzz/${targets[k]}.rc"
		fuzz_one "${targets[k]}" &
		pids[k]=$!
		# at most $jobs at once: wait for the oldest still running
		if ((k + 1 - jobs >= 0 && k + 1 < ${#targets[@]})); then wait "${pids[k + 1 - jobs]}" 2>/dev/null || true; fi
	done
	wait
	for name in "${targets[@]}"; do
		rc=$(cat "build-fuzz/$name.rc" 2>/dev/null || echo 1)
		echo "--- $name"
		tail -n 4 "build-fuzz/$name.log"
		if [[ $rc -ne 0 ]]; then
			echo "fuzzer $name failed; log: build-fuzz/$name.log"
			grep -m5 -A20 "ERROR\|SUMMARY" "build-fuzz/$name.log" || true
			count 0 1 0
			failures+=("fuzz $name")
		else
			count 1 0 0
		fi
	done
fi

if [[ "${IBP_SKIP_MUTATION:-0}" != 1 ]]; then
	step "mutation check (build-mutate/)"
	mkdir -p build-mutate
	set +e
	tools/mutate.sh --jobs "$jobs" 2>&1 | tee build-mutate/mutate.log
	rc=${PIPESTATUS[0]}
	set -e
	# its last line: "mutations: K killed, S survived, E errors, N skipped"
	# (skipped: entries for CPU features this machine lacks)
	line=$(tail -n 1 build-mutate/mutate.log)
	if [[ $line =~ ^mutations:\ ([0-9]+)\ killed,\ ([0-9]+)\ survived,\ ([0-9]+)\ errors(,\ ([0-9]+)\ skipped)? ]]; then
		count "${BASH_REMATCH[1]}" $((BASH_REMATCH[2] + BASH_REMATCH[3])) "${BASH_REMATCH[5]:-0}"
	else
		count 0 1 0
	fi
	if [[ $rc -ne 0 ]]; then failures+=("mutation check"); fi
fi

echo
if [[ ${#failures[@]} -ne 0 ]]; then
	echo "FAILED steps: ${failures[*]}"
	if [[ $failed -eq 0 ]]; then failed=1; fi
fi
echo "total $((SECONDS / 60))m$((SECONDS % 60))s"
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
