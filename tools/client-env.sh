#!/usr/bin/env bash
# client-env.sh - make (or reuse) the virtual environment of one client
# library the `ibp` package integrates with (vLLM, torchrec, ...), for the
# client tests that run against the real library (tools/test-clients.sh).
#
#   tools/client-env.sh NAME REQ... [--override SPEC...] [-- NODEPS_REQ...]
#                                       e.g. tools/client-env.sh vllm 'vllm==0.34.*'
#
# NODEPS_REQ (after a literal --) are installed last, without their declared
# dependencies, for a client one of whose dependencies must be replaced by a
# twin listed in REQ (torchrec requires fbgemm-gpu, the CUDA build: its CPU
# build fbgemm-gpu-cpu goes in REQ, torchrec after --).
# SPEC (after --override) replaces a pin that REQ declares and the registry
# cannot satisfy (vLLM 0.34.0 pins flashinfer-python==0.7.3, a release with
# no files): REQ is installed without its dependencies, then REQ's declared
# dependencies (markers evaluated, extras left out) with each one named by a
# SPEC replaced by that SPEC. pip warns that REQ's pin is not met.
#
# The environment is ${XDG_CACHE_HOME:-~/.cache}/ibp/clients/NAME, outside
# the clone, shared by every clone and reused while its stamp (the
# interpreter's version and the requirement list) is unchanged; otherwise it
# is made again. Wheels come from the wheelhouse (~/.cache/ibp/wheelhouse,
# the one tools/test-python.sh fills): installed from it alone when it has
# them (no network), else downloaded into it first (so the next time needs no
# network). Installed: REQ..., numpy, pytest, hypothesis, then the ibp package
# of this tree as a wheel built once per run (IBP_CLIENT_WHEEL, which
# tools/test-clients.sh sets; else built here into $IBP_PY_BUILD/wheel, on the
# same incremental CMake build as tools/test-python.sh, build-python/cmake).
# Progress goes to stderr; the last stdout line is the environment's python.
#
# Exit status: 0 with the python printed; 77 with a one-line reason on stderr
# when the environment cannot be made for want of the registry (unreachable
# and the wheelhouse lacks a wheel) or of disk space (callers report the tests
# as skipped); 1 on any other failure (a requirement that does not resolve, a
# failed build).
#
# Environment:
#   PYTHON                  interpreter for the environment (default python3)
#   IBP_WHEELHOUSE          wheel cache (default ~/.cache/ibp/wheelhouse)
#   IBP_CLIENT_MIN_FREE_GB  free GB needed to (re)make an environment (default 20:
#                           vLLM with its CUDA torch is about 9 GB installed,
#                           6.5 GB of wheels)
#   IBP_CLIENT_FRESH=1      remake the environment even if it is up to date
#   IBP_CLIENT_WHEEL        the ibp wheel to install (default: build one)
#   IBP_PY_BUILD            build directory (default build-python)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [[ $# -lt 2 ]]; then
	echo "usage: tools/client-env.sh NAME REQ... [-- NODEPS_REQ...]" >&2
	exit 1
fi
name=$1
shift
reqs=() nodeps=() overrides=()
while [[ $# -gt 0 && $1 != "--" && $1 != "--override" ]]; do reqs+=("$1"); shift; done
if [[ $# -gt 0 && $1 == "--override" ]]; then
	shift
	while [[ $# -gt 0 && $1 != "--" ]]; do overrides+=("$1"); shift; done
fi
[[ $# -gt 0 ]] && shift && nodeps=("$@")
[[ ${#reqs[@]} -gt 0 ]] || { echo "client-env: no requirement before --override / --" >&2; exit 1; }
[[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "client-env: bad name '$name'" >&2; exit 1; }

say() { echo "client-env: $name: $*" >&2; }
skip() { echo "client-env: $name: skipped: $*" >&2; exit 77; }
die() { echo "client-env: $name: error: $*" >&2; exit 1; }

py=${PYTHON:-python3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ibp
wh=${IBP_WHEELHOUSE:-$cache/wheelhouse}
venv=$cache/clients/$name
out=${IBP_PY_BUILD:-build-python}
min_gb=${IBP_CLIENT_MIN_FREE_GB:-20}
base_reqs=("numpy>=1.22" "pytest>=7" "hypothesis>=6")
build_reqs=("scikit-build-core>=0.10" "ninja") # pip's isolated build of ./python

command -v "$py" >/dev/null 2>&1 || die "$py not found"
"$py" -c 'import ensurepip, venv' >/dev/null 2>&1 || die "$py cannot make a venv (install python3-venv)"
mkdir -p "$wh" "$cache/clients" "$out"
out=$(cd "$out" && pwd)

# One run at a time per environment.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$venv.lock"
	flock 9
fi

# Free space on the cache's file system, in GB.
free_gb() { df -Pk "$cache" | awk 'NR == 2 { print int($4 / 1048576) }'; }

# Whether the package registry answers (pip's own configuration: index,
# certificates, proxy), within a short time.
registry_up() {
	"$py" -m pip --disable-pip-version-check index versions pip --timeout 20 --retries 1 >/dev/null 2>&1
}

# pip of the environment: installs from the wheelhouse alone.
vpy=$venv/bin/python
pip_offline() { "$vpy" -m pip --disable-pip-version-check -q install --no-compile --no-index --find-links "$wh" "$@"; }

# Installs the requirements from the wheelhouse; fetches them into it first
# when it lacks one.
install_reqs() {
	if pip_offline "$@" 2>/dev/null; then
		return 0
	fi
	registry_up || skip "the package registry is unreachable and $wh lacks wheels for: $*"
	say "downloading into $wh: $*"
	"$vpy" -m pip --disable-pip-version-check -q download -d "$wh" "$@" ||
		die "pip download $* failed"
	pip_offline "$@" || die "pip install $* from $wh failed"
}

# REQ's declared dependencies (installed REQ, markers evaluated, no extras),
# one a line, those named by an override left out.
declared_deps() {
	"$vpy" - "${reqs[@]}" -- "${overrides[@]}" <<'PYEOF'
import importlib.metadata as md, re, sys
from pip._vendor.packaging.requirements import Requirement
args = sys.argv[1:]
cut = args.index("--")
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
over = {norm(Requirement(s).name) for s in args[cut + 1:]}
for spec in args[:cut]:
    for d in md.requires(Requirement(spec).name) or []:
        r = Requirement(d)
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        if norm(r.name) not in over:
            print(d.split(";")[0].strip())
PYEOF
}

stamp="v1 | $("$py" -c 'import sys; print(sys.version)' | head -n1) | ${reqs[*]}${overrides[*]:+ --override ${overrides[*]}}${nodeps[*]:+ -- ${nodeps[*]}} | ${base_reqs[*]}"
if [[ "${IBP_CLIENT_FRESH:-0}" == 1 || ! -x "$vpy" || "$(cat "$venv/.ibp-stamp" 2>/dev/null)" != "$stamp" ]]; then
	gb=$(free_gb)
	if [[ $gb -lt $min_gb ]]; then
		skip "only $gb GB free under $cache, $min_gb GB needed to make this environment (IBP_CLIENT_MIN_FREE_GB)"
	fi
	t0=$(date +%s)
	say "making $venv (${reqs[*]})"
	rm -rf "$venv"
	"$py" -m venv "$venv" || die "python -m venv $venv failed"
	# --no-compile: byte-compiling torch's and vLLM's modules costs minutes
	if [[ ${#overrides[@]} -eq 0 ]]; then
		install_reqs "${reqs[@]}" "${base_reqs[@]}"
	else
		install_reqs --no-deps "${reqs[@]}"
		deps_txt=$(declared_deps) || die "cannot read the dependencies of ${reqs[*]}"
		mapfile -t deps <<<"$deps_txt"
		say "${reqs[*]}: ${#deps[@]} declared dependencies, with ${overrides[*]}"
		install_reqs "${deps[@]}" "${overrides[@]}" "${base_reqs[@]}"
	fi
	[[ ${#nodeps[@]} -eq 0 ]] || install_reqs --no-deps "${nodeps[@]}"
	echo "$stamp" >"$venv/.ibp-stamp"
	say "made in $(($(date +%s) - t0)) s ($(du -sh "$venv" 2>/dev/null | cut -f1))"
else
	say "reusing $venv (IBP_CLIENT_FRESH=1 remakes it)"
fi

# The ibp package of this tree.
wheel=${IBP_CLIENT_WHEEL:-}
if [[ -z $wheel ]]; then
	# same CMake build directory as tools/test-python.sh: only what changed is compiled
	exec 8>"$out/wheel.lock"
	command -v flock >/dev/null 2>&1 && flock 8
	tb=$(date +%s)
	rm -rf "$out/wheel"
	build() {
		CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
			"$vpy" -m pip --disable-pip-version-check -q wheel --no-deps --no-index --find-links "$wh" \
			-w "$out/wheel" "$root/python" -Cbuild-dir="$out/cmake" >&2
	}
	if ! build 2>/dev/null; then
		"$vpy" -m pip --disable-pip-version-check -q download -d "$wh" "${build_reqs[@]}" >&2 ||
			say "could not fetch ${build_reqs[*]}"
		build || die "pip wheel ./python failed"
	fi
	wheel=$(ls "$out"/wheel/ibp-*.whl 2>/dev/null | head -n1)
	say "ibp wheel built in $(($(date +%s) - tb)) s"
fi
[[ -f $wheel ]] || die "no ibp wheel ($wheel)"
"$vpy" -m pip --disable-pip-version-check -q install --no-deps --force-reinstall --no-index "$wheel" >&2 ||
	die "pip install $wheel failed"
echo "$vpy"
