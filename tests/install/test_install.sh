#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR - install libibp into a temporary prefix and
# build a program against it twice: with find_package(ibp) and with pkg-config.
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/consumer/app")
[[ "$out" == "ibp "* ]] || { echo "FAIL: find_package consumer printed: $out"; exit 1; }
pc=$(find "$tmp/prefix" -name ibp.pc -print -quit)
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir ibp)
cc "$src/tests/install/main.c" $(pkg-config --cflags --libs ibp) -o "$tmp/app2"
out2=$(LD_LIBRARY_PATH="$libdir" "$tmp/app2")
[[ "$out2" == "$out" ]] || { echo "FAIL: pkg-config consumer printed: $out2"; exit 1; }
echo "PASS: find_package and pkg-config consumers: $out"
