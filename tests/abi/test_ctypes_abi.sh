#!/bin/sh
# test_ctypes_abi.sh - runs test_ctypes_abi.py (the ctypes mirrors of
# python/src/ibp/_structs.py against the C structs); exit 77 (ctest: skipped)
# without python3. Usage: test_ctypes_abi.sh ABI_LAYOUT_EXE SOURCE_DIR
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: test_ctypes_abi: python3 not found"
	exit 77
fi
exec python3 "$(dirname "$0")/test_ctypes_abi.py" "$@"
