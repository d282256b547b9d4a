#!/usr/bin/env bash
# Runs the IBP CUDA kernels on the host emulator (no GPU needed) under
# ASan/UBSan against the CPU codec. Needs a built CPU library:
#   cmake -S . -B build-cuda-off -DIBP_CUDA=OFF && cmake --build build-cuda-off --target ibp_static
# Usage: tests/emu/run.sh [SEED [ROW_BYTES]]   (all row sizes take ~30 min on 1 core)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
lib=${IBP_EMU_LIB:-$repo/build-cuda-off/libibp.a}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 "$here/gen.py" "$repo" "$out"
g++ -std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -w \
	-I"$here/stub" -I"$out" -I"$here" -I"$repo/include" -I"$repo/src" -I"$repo/kernels" \
	-include "$here/emu.h" "$here/harness.cpp" "$here/emu.cpp" -o "$out/harness" \
	"$lib" -ljemalloc -lxxhash -lpthread -lm
"$out/harness" "$@"
