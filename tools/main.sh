#!/usr/bin/env bash
# main.sh - the main job: install what is missing, build the whole project
# (library, `ibp` CLI, tests, benchmarks, examples; CUDA kernels when nvcc is
# found), then run `ibp bench` on the bundled sample data (datasets/sample/*.npy):
# for each file IBP beside the exponent and FP8 codecs, zstd and lz4, ending
# with a one-line takeaway. Afterwards the CLI is at build/bin/ibp and
# `cmake --install build --prefix DIR` installs the library.
# Extra arguments go to every `ibp bench` call (for example --json).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

tools/install-deps.sh
mkdir -p build
log=build/main-build.log
fail_build() {
	echo "main: error: $1 failed; the last lines of $log:" >&2
	tail -n 30 "$log" >&2
	exit 1
}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || fail_build "cmake configure"
what="library (shared + static), ibp CLI, tests, benchmarks, API examples"
if grep -q "libibp: CUDA kernels ON" "$log"; then
	what+=", CUDA kernels"
fi
echo "main: building the whole project in build/ ($what) with $jobs jobs;" \
	"a few minutes on 2 cores, log in $log"
cmake --build build -j"$jobs" >>"$log" 2>&1 || fail_build "the build"

shopt -s nullglob
samples=(datasets/sample/*.npy)
if [[ ${#samples[@]} -eq 0 ]]; then
	echo "main: error: no sample data in datasets/sample/ (see datasets/README.md)" >&2
	exit 1
fi

# The legend, once (not with --json: stdout is then JSON objects only).
if [[ " $* " != *" --json "* ]]; then
	cat <<'EOF'

How to read the tables (docs/CLI.md, `ibp bench`, has the details):
  ratio      raw bytes / compressed bytes (higher is smaller); GB/s = raw bytes per
             second, median of repeated runs; every lossless decode is checked byte for byte
  row / 64K  unit: every row compressed on its own (any row can be read alone: random
             row access, what IBP is for) / the rows as one stream cut into 64 KiB blocks
             (better ratios, but reading one row decodes its whole block)
  chunk, T   IBP cuts a row into chunks of C bytes and keeps, per chunk position, the
             bits that are invariant in a fraction >= T of the rows (Mask/Bitval)
  paper layout  the ratio the original IBP paper's row layout would give (same Mask/Bitval)
  exp        lossless exponent codec (bf16/f16/f32); fp8: LOSSY FP8 E4M3 blocks,
             their relative L2 error is printed under the table
EOF
fi

status=0
for f in "${samples[@]}"; do
	# bf16 has no NumPy dtype: the sample stores its bit patterns as <u2.
	extra=()
	[[ "$f" == *bf16* ]] && extra=(--dtype bf16)
	echo
	echo "### $f"
	build/bin/ibp bench "$f" "${extra[@]}" "$@" || status=$?
done
exit $status
