#!/bin/sh
# exports.sh - what libibp lets out (issue 31).
#
#   exports.sh LIBIBP.so LIBIBP.a SOURCE_DIR
#
# The shared library: every dynamic symbol it defines is named ibp_*
# (src/libibp.map) and is declared in a public header (include/), unless
# tests/abi/internal_exports.txt lists it. The static library: every global
# C symbol of our own objects is named ibp_* (the API) or ibpi_* (internal
# names shared between files), unless tests/abi/static_unprefixed.txt lists
# it. Both lists are empty since issue 31 renamed the inherited names, and
# may not grow: a new internal function shared between files is ibpi_*, one
# used in one file is static. Exit 77 without nm.
set -eu
so=$1 a=$2 src=$3
command -v nm >/dev/null || { echo "exports: SKIPPED: no nm"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

nm -D --defined-only "$so" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/dyn"
grep -v '^ibp_' "$tmp/dyn" >"$tmp/bad" || true
if [ -s "$tmp/bad" ]; then
	echo "exports: FAILED: libibp.so exports names outside ibp_* ($(wc -l <"$tmp/bad")):"
	head -n 20 "$tmp/bad"
	fail=1
fi
cat "$src"/include/*.h "$src"/include/ibp/*.h 2>/dev/null | grep -oE '\bibp_[A-Za-z0-9_]+\b' | sort -u >"$tmp/decl"
grep '^ibp_' "$tmp/dyn" | comm -23 - "$tmp/decl" >"$tmp/internal"
grep -v '^#' "$src/tests/abi/internal_exports.txt" | sort -u >"$tmp/known"
comm -23 "$tmp/internal" "$tmp/known" >"$tmp/new"
if [ -s "$tmp/new" ]; then
	echo "exports: FAILED: libibp.so exports ibp_* names no header declares (rename to ibpi_*, make static, or declare in include/):"
	cat "$tmp/new"
	fail=1
fi
gone=$(comm -13 "$tmp/internal" "$tmp/known" | wc -l)

# static library: global symbols of our objects (third-party header
# symbols of CUDA's NVTX and the C++ runtime excluded; C++ names are the
# kernels' and CUB's, mangled, and cannot clash with C names)
nm -g --defined-only "$a" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u |
	grep -vE '^(ibp_|ibpi_|_Z|__|nvtx|InitializeInjectionNvtx|DW\.ref\.)' >"$tmp/st" || true
grep -v '^#' "$src/tests/abi/static_unprefixed.txt" | sort -u >"$tmp/stknown"
comm -23 "$tmp/st" "$tmp/stknown" >"$tmp/stnew"
if [ -s "$tmp/stnew" ]; then
	echo "exports: FAILED: libibp.a defines global C names without the ibp_/ibpi_ prefix (prefix them or make them static):"
	cat "$tmp/stnew"
	fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "exports: OK: libibp.so exports $(wc -l <"$tmp/dyn") names, all ibp_*; $(wc -l <"$tmp/internal") of them internal" \
	"(listed; $gone listed ones not in this build); libibp.a: $(wc -l <"$tmp/st") unprefixed global C names, all listed"
