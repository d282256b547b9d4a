#!/usr/bin/env bash
# install-deps.sh - make sure the Debian packages libibp builds and tests with are
# present; install the missing ones with apt-get (as root, or through sudo).
# Usage: tools/install-deps.sh [--fuzz]   (--fuzz adds clang and its libFuzzer runtime)
set -euo pipefail

# libjemalloc2 is the run-time jemalloc libibp dlopen()s (libc malloc without
# it). libjemalloc-dev is needed only by CUDA builds (src/mem/pinned_cudahost.c
# includes <jemalloc/jemalloc.h> for extent_hooks_t).
# Open MPI: the MPI transport of the collectives (src/coll, libibp_coll_mpi) and its mpirun tests.
pkgs=(cmake make gcc pkg-config libcriterion-dev libjemalloc2 libjemalloc-dev libxxhash-dev libzstd-dev liblz4-dev
	libopenmpi-dev openmpi-bin)
if [[ "${1:-}" == "--fuzz" ]]; then
	pkgs+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing missing Debian packages: ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: error: apt-get not found; this script needs a Debian-based system." >&2
	echo "install-deps: install these packages by hand: ${missing[*]}" >&2
	exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		echo "install-deps: error: not root and no sudo; run as root or install: ${missing[*]}" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update -qq; then
	echo "install-deps: error: 'apt-get update' failed (no network to the Debian mirror?)" >&2
	exit 1
fi
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
	echo "install-deps: error: 'apt-get install ${missing[*]}' failed" >&2
	exit 1
fi
