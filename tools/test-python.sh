#!/usr/bin/env bash
# test-python.sh - build the Python package `ibp` (python/) with pip and run its
# pytest suite (python/tests) in a virtual environment.
#
# Steps: make a virtual environment, fetch what the tests need into a
# wheelhouse (numpy, pytest, hypothesis, scikit-build-core; torch and its CUDA
# wheels, about 5 GB installed, optional), install from it, `pip install
# ./python` (scikit-build-core on the project's CMake, incremental in
# build-python/cmake), then pytest. The wheelhouse and the venv live in the
# user's cache (~/.cache/ibp) and are reused by later runs, from any clone,
# while the interpreter and the requirements are unchanged: the package itself
# is rebuilt and reinstalled from this tree every run. (pip's own cache is not
# relied on: on some machines it stores nothing.) Without network the
# wheelhouse alone is used; if torch cannot be installed its tests are
# reported as skipped, not failed. Runs sharing the venv take turns (flock).
#
# The last line is "python: N passed, N failed, N skipped" (pytest's counts,
# from its JUnit report); it is also written to build-python/counts as
# "N N N" for tools/test.sh. Exit status: 0 when nothing failed; 1 otherwise,
# including when pytest collected no tests (its exit 5).
#
# Environment:
#   PYTHON              interpreter to make the venv with (default python3)
#   IBP_WHEELHOUSE      wheel cache (default ~/.cache/ibp/wheelhouse)
#   IBP_PY_VENV         the virtual environment (default ~/.cache/ibp/venv-pyX.Y)
#   IBP_PY_TORCH=0      do not install torch (its tests then skip)
#   IBP_PY_FRESH=1      remake the venv even if it is up to date
#   IBP_PY_BUILD        directory for the CMake build and reports (default build-python)
#   PYTEST_ARGS         extra pytest arguments (e.g. "-k gather")
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${PYTHON:-python3}
out=${IBP_PY_BUILD:-build-python}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ibp
wh=${IBP_WHEELHOUSE:-$cache/wheelhouse}
mkdir -p "$wh"
rm -f "$out/counts"
t0=$(date +%s)
say() { echo "test-python: $*"; }
fail() { echo "test-python: error: $*" >&2; echo "0 1 0" >"$out/counts"; echo "python: 0 passed, 1 failed, 0 skipped"; exit 1; }

if ! command -v "$py" >/dev/null 2>&1; then
	fail "$py not found (install python3 and python3-venv)"
fi
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || fail "$py is older than 3.9"
venv=${IBP_PY_VENV:-$cache/venv-py$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
mkdir -p "$(dirname "$venv")"
# One run at a time per venv (each reinstalls the package into it).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$venv.lock"
	flock 9
fi

# Debian's python3 needs python3-venv (ensurepip) to make a venv.
if ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
	say "$py lacks venv/ensurepip; installing python3-venv with apt-get"
	SUDO=()
	[[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1 && SUDO=(sudo)
	ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	{ "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
		python3-venv "python$ver-venv"; } >/dev/null 2>&1 ||
		{ "${SUDO[@]}" apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1 || true; }
	"$py" -c 'import ensurepip, venv' >/dev/null 2>&1 || fail "cannot make a venv: install python3-venv"
fi

base_reqs=("numpy>=1.22" "pytest>=7" "hypothesis>=6")
build_reqs=("scikit-build-core>=0.10" "ninja") # for pip's isolated build of ./python
torch_reqs=("torch")
stamp="$("$py" -c 'import sys; print(sys.version)' | head -n1) | ${base_reqs[*]} ${build_reqs[*]} | torch=${IBP_PY_TORCH:-1}"

if [[ "${IBP_PY_FRESH:-0}" == 1 || ! -x "$venv/bin/python" || "$(cat "$venv/.ibp-stamp" 2>/dev/null)" != "$stamp" ]]; then
	say "making the virtual environment $venv"
	rm -rf "$venv"
	"$py" -m venv "$venv" || fail "python -m venv failed"
	vpy=$venv/bin/python
	pip=("$vpy" -m pip --disable-pip-version-check)
	# Fetch into the wheelhouse (files already there are not downloaded again),
	# then install from it alone; without network the wheelhouse is all there is.
	if ! "${pip[@]}" download -q -d "$wh" "${base_reqs[@]}" "${build_reqs[@]}"; then
		say "download failed (no network?); installing from the wheelhouse $wh only"
	fi
	"${pip[@]}" install -q --no-index --find-links "$wh" "${base_reqs[@]}" ||
		fail "cannot install ${base_reqs[*]} (no network and not in $wh)"
	if [[ "${IBP_PY_TORCH:-1}" != 0 ]]; then
		ts=$(date +%s)
		"${pip[@]}" download -q -d "$wh" "${torch_reqs[@]}" ||
			say "torch download failed; trying the wheelhouse"
		# --no-compile: byte-compiling torch's thousands of modules costs minutes
		if "${pip[@]}" install -q --no-compile --no-index --find-links "$wh" "${torch_reqs[@]}"; then
			say "torch installed in $(($(date +%s) - ts)) s"
			# optional, pure Python: ibp.torch.FeatureStore then subclasses PyG's
			# FeatureStore and the GraphSAGE test uses SAGEConv (else a torch layer)
			{ "${pip[@]}" download -q -d "$wh" torch_geometric || true; } &&
				"${pip[@]}" install -q --no-compile --no-index --find-links "$wh" torch_geometric ||
				say "torch_geometric could not be installed: ibp.torch tests use their PyG-free path"
		else
			say "torch could not be installed: its tests will be skipped (the next run tries again)"
			stamp="$stamp (torch missing)"
		fi
	fi
	echo "$stamp" >"$venv/.ibp-stamp"
else
	say "reusing the virtual environment $venv (IBP_PY_FRESH=1 remakes it)"
fi
vpy=$venv/bin/python
pip=("$vpy" -m pip --disable-pip-version-check)

# The package: scikit-build-core runs the project's CMake (IBP_TESTS=OFF, CUDA
# off: python/pyproject.toml), incrementally in $out/cmake.
say "pip install ./python"
tb=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
	"${pip[@]}" install -q --no-deps --force-reinstall --no-index --find-links "$wh" \
	"$root/python" -Cbuild-dir="$out/cmake" || fail "pip install ./python failed"
say "package built and installed in $(($(date +%s) - tb)) s"

# pytest from outside the source tree, so `import ibp` is the installed package.
say "pytest python/tests"
set +e
(cd "$out" && IBP_SOURCE_DIR="$root" "$vpy" -m pytest "$root/python/tests" -p no:cacheprovider \
	-rs --junitxml="$out/pytest.xml" ${PYTEST_ARGS:-})
rc=$?
set -e
counts=$("$vpy" "$root/tools/junit_counts.py" "$out/pytest.xml")
read -r np nf ns <<<"$counts"
if [[ $rc -eq 5 ]]; then
	say "pytest collected no tests (exit 5): that is a failure"
	nf=$((nf + 1))
elif [[ $rc -ne 0 && $nf -eq 0 ]]; then
	say "pytest exited $rc without a failing test"
	nf=1
fi
echo "$np $nf $ns" >"$out/counts"
say "done in $(($(date +%s) - t0)) s"
echo "python: $np passed, $nf failed, $ns skipped"
[[ $nf -eq 0 ]]
