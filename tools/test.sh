#!/usr/bin/env bash
# test.sh - run every libibp test: the Criterion suites (release build, CUDA
# kernels compiled when nvcc exists; GPU tests skip without a device), the same
# suites under AddressSanitizer + UBSan, and each libFuzzer target for a
# bounded time. The CLI ends up at build/bin/ibp.
# Environment: IBP_FUZZ_SECONDS (default 30 per target; 0 skips fuzzing),
#              IBP_SKIP_SANITIZE=1 skips the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${IBP_FUZZ_SECONDS:-30}

tools/install-deps.sh --fuzz

passed=0
failed=0
failures=()
step() { echo; echo "=== $* ==="; }
record() { # name status [log]: a ctest log adds its test counts, anything else counts once
	local total=1 bad=$(($2 != 0))
	if [[ -n "${3:-}" ]] && line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$3" | tail -n1); then
		bad=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
		total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
		[[ $2 -ne 0 && $bad -eq 0 ]] && bad=1
	fi
	passed=$((passed + total - bad)); failed=$((failed + bad))
	[[ $2 -ne 0 ]] && failures+=("$1")
	return 0
}

step "release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DIBP_TESTS=ON
cmake --build build -j"$jobs"
step "tests (release)"
set +e
(cd build && ctest -j"$jobs" --output-on-failure) 2>&1 | tee build/ctest.log
record "ctest release" "${PIPESTATUS[0]}" build/ctest.log
set -e

if [[ "${IBP_SKIP_SANITIZE:-0}" != 1 ]]; then
	step "ASan+UBSan build (build-asan/)"
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DIBP_SANITIZE=ON -DIBP_CUDA=OFF >/dev/null
	cmake --build build-asan -j"$jobs"
	step "tests (ASan+UBSan)"
	set +e
	(cd build-asan && IBP_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest -j"$jobs" --output-on-failure) 2>&1 | tee build-asan/ctest.log
	record "ctest asan+ubsan" "${PIPESTATUS[0]}" build-asan/ctest.log
	set -e
fi

if [[ "$fuzz_seconds" != 0 ]]; then
	step "libFuzzer targets, ${fuzz_seconds}s each (build-fuzz/)"
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIBP_FUZZ=ON \
		-DIBP_CUDA=OFF -DIBP_SANITIZE=ON >/dev/null
	cmake --build build-fuzz -j"$jobs"
	for f in build-fuzz/bin/fuzz_*; do
		[[ -x "$f" ]] || continue
		name=$(basename "$f")
		corpus="$root/tests/fuzz/corpus/$name"
		work="build-fuzz/corpus-$name"
		mkdir -p "$work"
		seeds=()
		[[ -d "$corpus" ]] && seeds=("$corpus")
		echo "--- $name"
		set +e
		"$f" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
			"$work" "${seeds[@]}" >"build-fuzz/$name.log" 2>&1
		rc=$?
		set -e
		tail -n 4 "build-fuzz/$name.log"
		[[ $rc -ne 0 ]] && { echo "fuzzer $name failed; log: build-fuzz/$name.log"; grep -m5 -A20 "ERROR\|SUMMARY" "build-fuzz/$name.log" || true; }
		record "fuzz $name" $rc
	done
fi

echo
if [[ $failed -ne 0 ]]; then
	echo "FAILED steps: ${failures[*]}"
fi
echo "all: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
