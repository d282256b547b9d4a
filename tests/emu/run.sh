#!/usr/bin/env bash
# Runs every CUDA kernel (kernels/*.cu) on the host emulator (no GPU needed):
# races, out-of-bounds accesses, cp.async misuse, barrier and warp-collective
# misuse, deadlocks, and every result against the CPU twin (tests/emu/emu.h).
#
# Usage: tests/emu/run.sh [quick|quick-codecs|quick-rest|full|defects|pcie|build] [SEED]
#   quick    (default) the quick suites, seed SEED (default 1); quick-codecs
#            (ctest test_emu) and quick-rest (ctest test_emu_rest) are its
#            codec kernels and the rest (collectives, cache, bags)
#   full     every row size, 3 seeds from SEED (tens of minutes; IBP_EMU_FULL=1
#            makes `quick` do this)
#   defects  (ctest test_emu_defects) plants each deliberate defect of gen.py
#            and requires the emulator to report it (defect 8, a performance
#            defect: the pcie suite's targets)
#   pcie     (ctest test_emu_pcie) the host-memory (PCIe) requests of the
#            gather kernels per row over the sample datasets (datasets/sample):
#            prints the table and fails unless no byte is fetched twice and
#            a row has at most one partial sector at each end (docs/GPU.md)
#   build    (ctest test_emu_build, which the others follow) only builds
#            the harness
# Environment: IBP_EMU_BUILD (build folder, default build-emu/), IBP_EMU_LIB
# (a libibp.a built with -DIBP_CUDA=OFF; by default the script builds one in
# the build folder), IBP_EMU_JOBS (parallel compiles, default 2).
# Exit status: 0 passed, 1 failed, 77 skipped (no g++/python3/cmake, or not
# x86-64 Linux: the fibers switch with x86-64 assembly).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mode=${1:-quick}
seed=${2:-1}
if [[ "$mode" =~ ^[0-9]+$ ]]; then # the old usage: run.sh SEED
	seed=$mode
	mode=quick
fi
[[ "$mode" == quick && "${IBP_EMU_FULL:-0}" == 1 ]] && mode=full
bdir=${IBP_EMU_BUILD:-$repo/build-emu}
jobs=${IBP_EMU_JOBS:-2}

skip() { echo "SKIPPED: $*"; exit 77; }
for tool in g++ gcc python3 cmake addr2line; do
	command -v "$tool" >/dev/null || skip "$tool not found"
done
[[ "$(uname -s)-$(uname -m)" == Linux-x86_64 ]] || skip "the emulator runs on x86-64 Linux only"

mkdir -p "$bdir"
exec 9>"$bdir/.lock"
if command -v flock >/dev/null; then
	flock 9 # one build at a time (ctest may start test_emu and test_emu_defects together)
fi

# --- the CPU library (the kernels' twins) ---
lib=${IBP_EMU_LIB:-}
if [[ -z "$lib" ]]; then
	lib="$bdir/lib/libibp.a"
	if [[ ! -f "$bdir/lib/CMakeCache.txt" ]]; then
		cmake -S "$repo" -B "$bdir/lib" -DIBP_CUDA=OFF -DIBP_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >"$bdir/lib.log" 2>&1 ||
			{ cat "$bdir/lib.log"; exit 1; }
	fi
	cmake --build "$bdir/lib" --target ibp_static -j"$jobs" >>"$bdir/lib.log" 2>&1 || { tail -n 30 "$bdir/lib.log"; exit 1; }
fi
[[ -f "$lib" ]] || { echo "no CPU library at $lib"; exit 1; }

# --- the harness: kernel code instrumented (-fsanitize=thread inserts the
# calls to emu.cpp's __tsan_* hooks; the TSan runtime is not linked) ---
gen="$bdir/gen"
mkdir -p "$gen"
python3 "$here/gen.py" "$repo" "$gen"
common=(-std=c++20 -O1 -g -fno-pie -ffp-contract=off -fno-omit-frame-pointer -w
	-I"$gen" -I"$here/stub" -I"$here" -I"$repo/include" -I"$repo/src" -I"$repo/kernels")
ub=(-fsanitize=undefined -fno-sanitize-recover=undefined)
if ! echo 'int main(void) { return 0; }' | g++ -x c++ "${ub[@]}" - -o "$bdir/ubsan-probe" 2>/dev/null; then
	echo "note: no UBSan runtime for g++: building the harness without -fsanitize=undefined"
	ub=()
fi
inst=(-fsanitize=thread "${ub[@]}" -include "$here/emu.h")
plain=("${ub[@]}")
stamp="$bdir/stamp"
newest=$( (find "$here" "$repo/kernels" "$repo/include" "$gen" -type f -newer "$stamp"
	find "$repo/src" -name '*.h' -newer "$stamp" -o -name '*_cudahost.c' -newer "$stamp" -o -name 'transport_nccl.c' -newer "$stamp" -o -name 'mem_device.c' -newer "$stamp"
	find "$repo/cache" -name 'kv_cuda.c' -newer "$stamp") 2>/dev/null | head -n 1 || true)
if [[ ! -x "$bdir/harness" || ! -x "$bdir/harness_dq" || ! -x "$bdir/harness_cache" || ! -x "$bdir/harness_bag" || ! -x "$bdir/harness_coll" || ! -f "$stamp" || -n "$newest" || "$lib" -nt "$bdir/harness" ]]; then
	echo "building the emulator harness in $bdir ..."
	t0=$(date +%s)
	# up to $jobs compiles at once: job CMD... starts one, waiting for the
	# oldest when $jobs are running; drain waits for them all (a failure
	# stops the script: set -e)
	pids=()
	job() {
		"$@" &
		pids+=($!)
		if ((${#pids[@]} >= jobs)); then
			wait "${pids[0]}"
			pids=("${pids[@]:1}")
		fi
	}
	drain() {
		local p
		for p in "${pids[@]}"; do wait "$p"; done
		pids=()
	}
	# host code in C against the stub: the pinned allocator (plain) and the
	# KV offload's orchestration (instrumented: its own host accesses are
	# checked); the NCCL transport (instrumented) and the NCCL stand-in it
	# finds by dlsym
	cflags=(-std=gnu11 -O1 -g -fno-pie -w "${ub[@]}" -I"$gen" -I"$here/stub" -I"$repo/include" -I"$repo/src")
	job g++ "${common[@]}" "${inst[@]}" -c "$here/harness.cpp" -o "$bdir/harness.o"
	job g++ "${common[@]}" "${inst[@]}" -c "$here/harness_codecs.cpp" -o "$bdir/harness_codecs.o"
	job g++ "${common[@]}" "${inst[@]}" -c "$here/harness_dynamiq.cpp" -o "$bdir/harness_dynamiq.o"
	job g++ "${common[@]}" "${inst[@]}" -c "$here/harness_cache.cpp" -o "$bdir/harness_cache.o"
	job g++ "${common[@]}" "${inst[@]}" -c "$here/harness_bag.cpp" -o "$bdir/harness_bag.o"
	job g++ "${common[@]}" "${inst[@]}" -c "$here/harness_coll.cpp" -o "$bdir/harness_coll.o"
	job gcc "${cflags[@]}" -c "$gen/pinned_cudahost.c" -o "$bdir/pinned_cudahost.o"
	job gcc "${cflags[@]}" -fsanitize=thread -c "$gen/kv_cuda.c" -o "$bdir/kv_cuda.o"
	job gcc "${cflags[@]}" -fsanitize=thread -c "$gen/transport_nccl.c" -o "$bdir/transport_nccl.o"
	job gcc "${cflags[@]}" -fsanitize=thread -c "$gen/mem_device.c" -o "$bdir/mem_device.o"
	job g++ "${common[@]}" "${plain[@]}" -c "$here/nccl_stub.cpp" -o "$bdir/nccl_stub.o"
	job g++ "${common[@]}" "${plain[@]}" -c "$here/emu.cpp" -o "$bdir/emu.o"
	job g++ "${common[@]}" "${plain[@]}" -c "$here/cuda_stub.cpp" -o "$bdir/cuda_stub.o"
	job g++ "${common[@]}" "${plain[@]}" -c "$here/cudahost.cpp" -o "$bdir/cudahost.o"
	drain
	# jemalloc linked, not dlopen()ed: Debian's copy cannot be loaded late
	# into these binaries (static TLS), and the pinned arena needs it
	je=()
	echo 'int main(void) { return 0; }' | gcc -x c - -ljemalloc -o "$bdir/je-probe" 2>/dev/null && je=(-ljemalloc)
	job g++ -no-pie "${ub[@]}" "$bdir/harness.o" "$bdir/harness_codecs.o" "$bdir/emu.o" "$bdir/cuda_stub.o" \
		"$bdir/cudahost.o" "$bdir/kv_cuda.o" "$bdir/pinned_cudahost.o" \
		"$lib" "${je[@]}" -lxxhash -lpthread -ldl -lm -o "$bdir/harness"
	# kernels/dynamiq.cu: a binary of its own (harness_dynamiq.cpp has its main)
	job g++ -no-pie "${ub[@]}" "$bdir/harness_dynamiq.o" "$bdir/emu.o" "$bdir/cuda_stub.o" \
		"$lib" -lxxhash -lpthread -lm -o "$bdir/harness_dq"
	# kernels/slab_cache.cu (+ cache/slab_cudahost.c) and the streams suite with
	# src/mem/pinned_cudahost.c (C host code, as gen.py wrote it): harness_cache
	job g++ -no-pie "${ub[@]}" "$bdir/harness_cache.o" "$bdir/emu.o" "$bdir/cuda_stub.o" "$bdir/pinned_cudahost.o" \
		"$lib" "${je[@]}" -lxxhash -lpthread -ldl -lm -o "$bdir/harness_cache"
	# kernels/ibp_bag.cu (+ cuda/ibp_bag_cudahost.c): harness_bag.cpp, its own binary
	job g++ -no-pie "${ub[@]}" "$bdir/harness_bag.o" "$bdir/emu.o" "$bdir/cuda_stub.o" "$bdir/cudahost.o" \
		"$lib" -lxxhash -lpthread -lm -o "$bdir/harness_bag"
	# kernels/coll_reduce.cu: harness_coll.cpp, its own binary; -rdynamic:
	# transport_nccl.c looks the stand-in's functions up with dlsym
	job g++ -no-pie -rdynamic "${ub[@]}" "$bdir/harness_coll.o" "$bdir/emu.o" "$bdir/cuda_stub.o" "$bdir/cudahost.o" \
		"$bdir/transport_nccl.o" "$bdir/mem_device.o" "$bdir/nccl_stub.o" "$lib" -lxxhash -lpthread -ldl -lm -o "$bdir/harness_coll"
	drain
	touch "$stamp"
	echo "built in $(($(date +%s) - t0)) s"
fi
h="$bdir/harness"
exec 9>&- # the runs need no lock

# expect_defect N BINARY "SUITE ARGS" NAME: defect N must make the emulator
# report an error (EMU ERROR) in that suite; else rc=1.
expect_defect() { # defect binary suite name [what the log must hold: EMU ERROR, or FAIL for a wrong result]
	local d=$1 bin=$2 suite=$3 name=$4 want=${5:-EMU ERROR} st
	set +e
	# shellcheck disable=SC2086 # the suite's words
	timeout 300 "$bin" $suite --quick --seed "$seed" --defect "$d" >"$bdir/defect$d.log" 2>&1 # a hang is not a report
	st=$?
	set -e
	if [[ $st -ne 0 ]] && grep -q "$want" "$bdir/defect$d.log"; then
		echo "defect $d ($name): reported: $(grep -m1 "$want" "$bdir/defect$d.log")"
	else
		echo "defect $d ($name): NOT REPORTED (exit $st; log $bdir/defect$d.log)"
		rc=1
	fi
}

run() { # name args...: runs the harness, prints its summary, returns its status
	local name=$1 t0 rc
	shift
	t0=$(date +%s)
	set +e
	timeout 600 "$h" "$@" >"$bdir/$name.log" 2>&1
	rc=$?
	[[ $rc -eq 124 ]] && echo "  $name: stopped after 600 s (a hang?)"
	set -e
	grep -E "ALL OK|FAILED|EMU ERROR|^FAIL" "$bdir/$name.log" | head -n 5 || true
	echo "  $name: exit $rc, $(($(date +%s) - t0)) s (log: $bdir/$name.log)"
	if [[ $rc -ne 0 ]]; then
		grep -B2 -A40 -m1 -E "EMU ERROR|^FAIL" "$bdir/$name.log" | head -n 80 || tail -n 40 "$bdir/$name.log"
	fi
	return $rc
}

case "$mode" in
build) exit 0 ;;
quick | quick-codecs | quick-rest)
	# quick-codecs and quick-rest (ctest test_emu, test_emu_rest) are its
	# two halves, about 30 and 22 s on the 2-core VM, run side by side.
	# Each row size covers a code path: tiny rows, a partial last chunk,
	# a tile boundary, the warp kernels' 4 KiB limit, the block kernels.
	rc=0
	if [[ "$mode" != quick-rest ]]; then
		run train train --quick --seed "$seed" || rc=1
		run ibp ibp --quick --seed "$seed" --rows 1,9,33,257,1025,4097 || rc=1
		run api api --quick --seed "$seed" || rc=1
		run exp exp --quick --seed "$seed" || rc=1
		run fp8 fp8 --quick --seed "$seed" || rc=1
	fi
	[[ "$mode" == quick-codecs ]] && exit $rc
	hh=$h h="$bdir/harness_dq"
	run dynamiq dynamiq --quick --seed "$seed" || rc=1
	run lsq lsq --quick --seed "$seed" || rc=1
	run pts pts --quick --seed "$seed" || rc=1
	h="$bdir/harness_cache"
	run cache cache --quick --seed "$seed" || rc=1
	run streams streams --quick --seed "$seed" || rc=1
	h="$bdir/harness_bag"
	run bag bag --quick --seed "$seed" --data "$repo/datasets/sample" --tmp "$bdir" || rc=1
	h="$bdir/harness_coll"
	run coll-reduce reduce --quick --seed "$seed" || rc=1
	run coll-device device --quick --seed "$seed" || rc=1
	run coll-nccl nccl --quick --seed "$seed" || rc=1
	h=$hh
	exit $rc
	;;
pcie)
	set +e
	"$h" pcie --seed "$seed" --data "$repo/datasets/sample" --tmp "$bdir" >"$bdir/pcie.log" 2>"$bdir/pcie.err"
	rc=$?
	set -e
	cat "$bdir/pcie.log"
	[[ $rc -ne 0 ]] && { grep -E "EMU ERROR|^FAIL" -A20 -m3 "$bdir/pcie.err" || tail -n 30 "$bdir/pcie.err"; }
	exit $rc
	;;
full)
	rc=0
	for s in "$seed" $((seed + 1)) $((seed + 2)); do
		run "all-$s" all --seed "$s" || rc=1
		hh=$h h="$bdir/harness_dq"
		run "dynamiq-$s" all --seed "$s" || rc=1
		h="$bdir/harness_cache"
		run "cache-$s" cache --seed "$s" || rc=1
		run "streams-$s" streams --seed "$s" || rc=1
		h="$bdir/harness_bag"
		run "bag-$s" bag --seed "$s" --data "$repo/datasets/sample" --tmp "$bdir" || rc=1
		h="$bdir/harness_coll"
		run "coll-reduce-$s" reduce --seed "$s" || rc=1
		run "coll-device-$s" device --seed "$s" || rc=1
		run "coll-nccl-$s" nccl --seed "$s" || rc=1
		h=$hh
	done
	exit $rc
	;;
defects)
	# Each deliberate defect (gen.py) must make the emulator report an
	# error (EMU ERROR: race, bounds, cp.async, warp collective, barrier).
	rc=0
	names=("" "plain |= instead of atomicOr in ibp_put_bits" "no barrier before the encode stage is reused"
		"cp.async.wait_group one too large (nbuf where nbuf - 1 is needed)" "a shuffle mask that leaves out half of the warp"
		"a staged fetch that reads one byte past the row (a store's last row)"
		"encode field writes not clamped to the group's stage (rows that disagree with their flags)"
		"no barrier between the FP8 codec's Hadamard rounds"
		"a fetch whose warp instructions are not line-aligned (sectors fetched twice; pcie suite)")
	for d in 1 2 3 4 5 6 7 8; do
		suite=(ibp --rows 33,257)
		[[ $d == 7 ]] && suite=(fp8)
		[[ $d == 8 ]] && suite=(pcie --data "$repo/datasets/sample" --tmp "$bdir")
		want="EMU ERROR"
		[[ $d == 8 ]] && want="fetched twice"
		set +e
		"$h" "${suite[@]}" --quick --seed "$seed" --defect "$d" >"$bdir/defect$d.log" 2>&1
		st=$?
		set -e
		if [[ $st -ne 0 ]] && grep -q "$want" "$bdir/defect$d.log"; then
			echo "defect $d (${names[$d]}): reported: $(grep -m1 "$want" "$bdir/defect$d.log")"
		else
			echo "defect $d (${names[$d]}): NOT REPORTED (exit $st; log $bdir/defect$d.log)"
			rc=1
		fi
	done
	# defects in the other binaries and in host code: binary, suite, then the name
	expect_defect 25 "$h" "fp8" "the bounded FP8 decode without its source-length check (host code of kernels/fp8.cu)"
	expect_defect 16 "$bdir/harness_dq" "dynamiq" "no barrier between DynamiQ's group maxima and its scale"
	expect_defect 21 "$bdir/harness_cache" "cache" "the slab cache's probe pins with a plain increment"
	expect_defect 26 "$bdir/harness_cache" "cache" "the slab index read with plain loads beside other launches"
	expect_defect 27 "$bdir/harness_cache" "cache" "the slab probe without its key re-check" FAIL
	expect_defect 28 "$bdir/harness_cache" "cache" "the slab insert publishing its key before its entry" FAIL
	expect_defect 32 "$bdir/harness_cache" "cache" "no __syncwarp between the slab insert's byte copy and lane 0's publication"
	# streams and events (the streams suite; 31 is planted in src/mem/pinned_cudahost.c)
	expect_defect 29 "$bdir/harness_cache" "streams" "no event wait between two streams (a kernel reads what another stream writes)"
	expect_defect 30 "$bdir/harness_cache" "streams" "a pinned staging buffer read before its stream is synchronized"
	if [[ -x "$bdir/je-probe" ]]; then
		expect_defect 31 "$bdir/harness_cache" "streams" "a pinned block handed out again while a copy from it is in flight (ibp_pinned_free_async)"
	else # libc mode frees through cudaFreeHost, which waits: nothing to catch
		echo "defect 31: SKIPPED (no libjemalloc to link: the pinned allocator runs in libc mode)"
	fi
	expect_defect 33 "$bdir/harness_cache" "streams" "a device buffer freed in stream order while another stream still reads it"
	expect_defect 34 "$h" "api" "the KV store reading the encoded sizes from pinned memory before its stream is synchronized (cache/kv_cuda.c)"
	# the NCCL transport on the NCCL stand-in (35: a hang, reported after IBP_EMU_HANG_S)
	export IBP_EMU_HANG_S=3
	expect_defect 35 "$bdir/harness_coll" "nccl" "the NCCL transport growing its staging with cudaFree (a device-wide wait) while the caller's NCCL work waits for a peer"
	unset IBP_EMU_HANG_S
	expect_defect 36 "$bdir/harness_coll" "nccl" "the NCCL transport reading the received size from pinned memory before its stream is waited for"
	expect_defect 37 "$bdir/harness_coll" "nccl" "the NCCL transport returning before its copy into a device destination is done"
	expect_defect 38 "$bdir/harness_coll" "nccl" "a device message handed to the transport before its encode is done (src/coll/mem_device.c)"
	# the decode's list rows, a warp's tiles in order (issue 37)
	expect_defect 39 "$h" "ibp --rows 33,257" "list rows: the list position not advanced past a tile's entries" FAIL
	expect_defect 40 "$h" "ibp --rows 33,257" "list rows: a tile's exception offsets OR'ed over half of the warp"
	expect_defect 41 "$h" "ibp --rows 33,257" "the 32-bit bit deposit shifting its source one bit short after a run" FAIL
	expect_defect 42 "$h" "ibp --rows 33,257" "a decoded chunk stored as one word into an output row not aligned to its size" "misaligned address"
	expect_defect 43 "$h" "fp8" "the FP8 decode's block 0 not checking the stream header's reserved bytes" FAIL
	expect_defect 44 "$h" "ibp --rows 33,257" "a clean tile with static bits decoded as the base row" FAIL
	expect_defect 45 "$h" "pcie --data $repo/datasets/sample --tmp $bdir" "sparse rows gathered a block a row (the kernel chosen by the decoded row size)" FAIL
	expect_defect 46 "$h" "ibp --rows 33,257" "a bitmap row's exception widths summed with each width plane's weight doubled" FAIL
	expect_defect 47 "$h" "exp" "a rANS lane of the exponent decode not required to end in its initial state with its stream consumed" FAIL
	expect_defect 48 "$h" "exp" "no barrier between the rANS encoder's cumulative frequencies and the lanes reading them"
	expect_defect 24 "$bdir/harness_bag" "bag --data $repo/datasets/sample --tmp $bdir" \
		"no __syncwarp between the bag kernel's row decode and its element reads"
	exit $rc
	;;
*)
	echo "unknown mode $mode (quick, quick-codecs, quick-rest, full, defects, pcie, build)"
	exit 2
	;;
esac
