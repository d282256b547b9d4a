#!/usr/bin/env bash
# test_python_load.sh - Python's ctypes must load libibp.so after numpy.
# numpy's libraries use up glibc's static TLS surplus; a libibp.so that NEEDs
# libjemalloc.so.2 (initial-exec TLS) then fails to load with "cannot allocate
# memory in static TLS block". libibp dlopen()s jemalloc itself and falls back
# to libc, so the load must succeed with no GLIBC_TUNABLES.
# Usage: tests/python/test_python_load.sh /path/to/libibp.so
# Exit 77 (skipped) when python3 or numpy is missing.
set -euo pipefail

lib="${1:?usage: $0 /path/to/libibp.so}"
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: test_python_load: python3 not found"
	exit 77 # ctest: skipped (SKIP_RETURN_CODE), not passed
fi
if ! python3 -c "import numpy" >/dev/null 2>&1; then
	echo "SKIP: test_python_load: python3 has no numpy"
	exit 77
fi
unset GLIBC_TUNABLES # the workaround users should not need

python3 - "$lib" <<'PY'
import sys, ctypes, numpy  # numpy first: it is what uses up the static TLS
lib = ctypes.CDLL(sys.argv[1])
lib.ibp_version_string.restype = ctypes.c_char_p
lib.ibp_host_allocator.restype = ctypes.c_char_p
lib.ibp_host_alloc.restype = ctypes.c_void_p
lib.ibp_host_alloc.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
lib.ibp_host_free.argtypes = [ctypes.c_void_p]
p = lib.ibp_host_alloc(1 << 20, 4096)
assert p and p % 4096 == 0, "ibp_host_alloc failed"
ctypes.memset(p, 0xAB, 1 << 20)
lib.ibp_host_free(p)
print("test_python_load: OK: libibp", lib.ibp_version_string().decode(),
      "loaded after numpy", numpy.__version__ + "; host allocator:", lib.ibp_host_allocator().decode())
PY
