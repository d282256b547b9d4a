#!/bin/sh
# exports.sh - what libibp lets out (issue 31).
#
#   exports.sh LIBIBP.so LIBIBP.a SOURCE_DIR
#
# The shared library: every dynamic symbol it defines is named ibp_*
# (src/libibp.map) and is declared in a public header (include/). The
# static library: every global C symbol of our own objects is named ibp_*
# (the API) or ibpi_* (internal names shared between files). A function
# used in one file is static. Exit 77 without nm.
set -eu
so=$1 a=$2 src=$3
command -v nm >/dev/null || { echo "exports: SKIPPED: no nm"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
report() { # file message: fails the test when the file is not empty
	if [ -s "$1" ]; then
		echo "exports: FAILED: $2 ($(wc -l <"$1")):"
		head -n 40 "$1"
		fail=1
	fi
}

nm -D --defined-only "$so" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/dyn"
grep -v '^ibp_' "$tmp/dyn" >"$tmp/outside" || true
report "$tmp/outside" "libibp.so exports names outside ibp_*"
cat "$src"/include/*.h "$src"/include/ibp/*.h 2>/dev/null | grep -oE '\bibp_[A-Za-z0-9_]+\b' | sort -u >"$tmp/decl"
grep '^ibp_' "$tmp/dyn" | comm -23 - "$tmp/decl" >"$tmp/internal"
report "$tmp/internal" "libibp.so exports ibp_* names no header declares (rename to ibpi_*, make static, or declare in include/)"

# static library: global symbols of our objects (third-party header symbols
# of CUDA's NVTX and the C++ runtime excluded; C++ names are the kernels'
# and CUB's, mangled, and cannot clash with C names)
nm -g --defined-only "$a" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u |
	grep -vE '^(ibp_|ibpi_|_Z|__|nvtx|InitializeInjectionNvtx|DW\.ref\.)' >"$tmp/st" || true
report "$tmp/st" "libibp.a defines global C names without the ibp_/ibpi_ prefix (prefix them or make them static)"

[ "$fail" = 0 ] || exit 1
echo "exports: OK: libibp.so exports $(wc -l <"$tmp/dyn") names, all ibp_* and declared in include/;" \
	"libibp.a: every global C name ibp_* or ibpi_*"
