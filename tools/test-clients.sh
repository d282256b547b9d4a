#!/usr/bin/env bash
# test-clients.sh - the client tests: python/tests files that run against a
# real client library (vLLM, ...), each client in its own virtual environment
# under ~/.cache/ibp/clients (tools/client-env.sh makes or reuses it; the ibp
# wheel of this tree is built once per run and installed into each).
#
# A client whose environment cannot be made for want of the package registry
# or of disk space (client-env.sh's exit 77) has its test files reported as
# skipped, one each, with the reason; any other failure to make it counts as
# a failure. The last line is "clients: N passed, N failed, N skipped"; it is
# also written to $IBP_PY_BUILD/clients-counts as "N N N" for tools/test.sh.
# Exit status: 0 when nothing failed.
#
# Environment:
#   IBP_CLIENTS      names of the clients to run (default: all of CLIENTS; those of
#                    OPTIONAL only when named, e.g. IBP_CLIENTS="vllm vllm033")
#   IBP_PY_BUILD     build directory (default build-python)
#   PYTEST_ARGS      extra pytest arguments
#   and those of tools/client-env.sh (IBP_CLIENT_MIN_FREE_GB, IBP_CLIENT_FRESH, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# NAME | requirements (space-separated; after "--": installed without their
# dependencies, see client-env.sh) | test files, relative to python/tests
# torchrec 1.9 with fbgemm-gpu-cpu loads with torch 2.14.1 only; its other
# dependencies are listed as torchrec 1.9.2 declares them. vLLM 0.34.0 (the
# current release) pins flashinfer-python==0.7.3, a release the registry has
# no files for: 0.7.4 stands in (--override; the CPU tests never load it).
CLIENTS=(
	"vllm|vllm==0.34.* --override flashinfer-python==0.7.4|clients/test_vllm_*.py test_torch_vllm.py"
	"torchrec|torch==2.14.1 fbgemm-gpu-cpu==1.9.0 tensordict torchmetrics==1.0.3 tqdm pyre-extensions -- torchrec==1.9.2|clients/test_torchrec_*.py"
)
# The older release ibp.torch.vllm still supports, run when named.
OPTIONAL=(
	"vllm033|vllm==0.33.*|clients/test_vllm_*.py test_torch_vllm.py"
)

out=${IBP_PY_BUILD:-build-python}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/clients-counts"
say() { echo "test-clients: $*"; }
t0=$(date +%s)
np=0 nf=0 ns=0
want=" ${IBP_CLIENTS:-} "

# The ibp wheel of this tree: client-env.sh builds it for the first client
# (on tools/test-python.sh's CMake build, so nothing is compiled again after
# that ran); the others get the same wheel (IBP_CLIENT_WHEEL).
wheel=""

for entry in "${CLIENTS[@]}" "${OPTIONAL[@]/#/optional:}"; do
	optional=0
	[[ $entry == optional:* ]] && optional=1 && entry=${entry#optional:}
	IFS='|' read -r name reqs tests <<<"$entry"
	if [[ $want != *" $name "* && ( $want != "  " || $optional -eq 1 ) ]]; then continue; fi
	tc=$(date +%s)
	files=()
	read -r -a testv <<<"$tests"
	for t in "${testv[@]}"; do
		for f in "$root"/python/tests/$t; do [[ -f $f ]] && files+=("$f"); done
	done
	[[ ${#files[@]} -gt 0 ]] || { say "$name: no test files ($tests)"; nf=$((nf + 1)); continue; }
	read -r -a reqv <<<"$reqs"
	set +e
	vpy=$(IBP_CLIENT_WHEEL=$wheel tools/client-env.sh "$name" "${reqv[@]}" 2> >(tee "$out/client-env-$name.log" >&2))
	rc=$?
	set -e
	vpy=$(tail -n1 <<<"$vpy")
	if [[ $rc -eq 77 ]]; then
		say "$name: SKIPPED ${#files[@]} test files: $(grep 'skipped:' "$out/client-env-$name.log" | tail -n1)"
		ns=$((ns + ${#files[@]}))
		continue
	elif [[ $rc -ne 0 || ! -x $vpy ]]; then
		say "$name: the environment could not be made (tools/client-env.sh exit $rc)"
		nf=$((nf + 1))
		continue
	fi
	[[ -n $wheel ]] || wheel=$(ls "$out"/wheel/ibp-*.whl 2>/dev/null | head -n1)
	say "$name: pytest ${files[*]#"$root"/} ($vpy)"
	xml="$out/clients-$name.xml"
	rm -f "$xml"
	set +e
	# shellcheck disable=SC2086
	(cd "$out" && IBP_SOURCE_DIR="$root" "$vpy" -m pytest "${files[@]}" -p no:cacheprovider -rs \
		--junitxml="$xml" ${PYTEST_ARGS:-})
	rc=$?
	set -e
	read -r p f s < <("$vpy" "$root/tools/junit_counts.py" "$xml")
	if [[ $rc -eq 5 ]]; then
		say "$name: pytest collected no tests (exit 5): that is a failure"
		f=$((f + 1))
	elif [[ $rc -ne 0 && $f -eq 0 ]]; then
		say "$name: pytest exited $rc without a failing test"
		f=1
	fi
	say "$name: $p passed, $f failed, $s skipped in $(($(date +%s) - tc)) s"
	np=$((np + p)) nf=$((nf + f)) ns=$((ns + s))
done

echo "$np $nf $ns" >"$out/clients-counts"
say "done in $(($(date +%s) - t0)) s"
echo "clients: $np passed, $nf failed, $ns skipped"
[[ $nf -eq 0 ]]
