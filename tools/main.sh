#!/usr/bin/env bash
# main.sh - the main job: install what is missing, build, and run `ibp bench`
# on the bundled sample data (datasets/sample/*.npy), printing for each file the
# comparison table (IBP beside zstd and lz4). The CLI ends up at build/bin/ibp.
# Extra arguments go to every `ibp bench` call (for example --json).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target ibp_cli >/dev/null

shopt -s nullglob
samples=(datasets/sample/*.npy)
if [[ ${#samples[@]} -eq 0 ]]; then
	echo "main: error: no sample data in datasets/sample/ (see datasets/README.md)" >&2
	exit 1
fi
status=0
for f in "${samples[@]}"; do
	echo
	echo "### $f"
	build/bin/ibp bench "$f" "$@" || status=$?
done
exit $status
