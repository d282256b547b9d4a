#!/usr/bin/env bash
# netns-tc.sh - ibp-coll-perf over a real, rate-limited network on one host:
# every MPI rank in its own network namespace, the namespaces joined by veth
# pairs to a bridge, each rank's sends shaped by tc (tbf rate limit, plus
# netem delay when the kernel has sch_netem), Open MPI over TCP only (no
# shared memory). Compressed and plain collectives run side by side at each
# rate, so the busbw columns compare like for like.
#
#   sudo tools/netns-tc.sh [-n RANKS] [-r "1 10 25"] [-o "allgather reducescatter allreduce"]
#        [-c "none exp"] [-d bf16] [-b 1M] [-e 16M] [-f 4] [--iters 3] [--delay 50us]
#        [--data FILE.npy] [--policy always] [--bin build/bin/ibp-coll-perf] [--json]
#        [--cores split|all]
#   sudo tools/netns-tc.sh -n 2 -r 1 --exec 'python bench/ddp_step.py --netns'
#
# Rates are Gbit/s per rank (tbf on the namespace's end of its veth). How
# the ranks get into namespaces: mpirun (root namespace) starts one orted per
# namespace through a launcher agent (this script with --agent) that runs
# `ip netns exec NS ...`; the daemons reach mpirun over the bridge
# (10.77.0.254) and the ranks talk over the veth addresses (btl tcp only,
# btl_tcp_if_include 10.77.0.0/24), so every message crosses a shaped link.
#
# --exec CMD runs CMD (with sh -c, from the repository root) once per rank
# in its namespace instead of ibp-coll-perf under mpirun, at each rate, all
# ranks at once; the environment names the rank (IBP_NETNS_RANK 0..n-1,
# IBP_NETNS_WORLD, IBP_NETNS_MASTER = rank 0's address 10.77.0.1,
# IBP_NETNS_RATE in Gbit/s) and points gloo at the shaped link
# (GLOO_SOCKET_IFNAME=eth0). The run fails when a rank does.
#
# Cores (--cores): `split` (the default) gives each rank its own share of
# this machine's CPUs, as separate hosts would have (rank k: CPUs
# [k m, (k + 1) m), m = max(1, CPUs / ranks), wrapping when ranks outnumber
# CPUs); `all` lets every rank's threads run anywhere. Open MPI's own
# binding cannot do this: every namespace is a "node" of its own, so each
# daemon binds its rank to core 0 and all ranks shared one core (as every
# run before 2026-11-29 did).
#
# Needs root (namespaces, links, qdiscs), ip, tc and mpirun: without them it
# says which is missing and exits 2. Everything it creates is named
# ibp<PID>* and removed on exit (also on failure or Ctrl-C). Environment:
# IBP_NETNS_RUN_TIMEOUT (s per mpirun, default 300; a run that times out is
# retried up to 3 times), IBP_NETNS_MPI_ARGS (extra mpirun words).
set -euo pipefail

if [ "${1:-}" = "--agent" ]; then
	# Open MPI's rsh agent: `--agent HOST [options] COMMAND...`; HOST is a rank
	# address 10.77.0.K, whose namespace is $IBP_NETNS_PREFIX<K>.
	shift
	host=$1
	shift
	while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done # ssh options (-x etc.)
	exec ip netns exec "${IBP_NETNS_PREFIX}${host##*.}" sh -c "$*"
fi

die() {
	echo "netns-tc.sh: $*" >&2
	exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ranks=4 rates="1 10 25" ops="allgather reducescatter allreduce" codecs="none exp" dtype=bf16
bmin=1M bmax=16M factor=4 iters=3 delay="" data="" policy=always json="" bin="$root/build/bin/ibp-coll-perf"
cores=split exec_cmd=""
run_timeout=${IBP_NETNS_RUN_TIMEOUT:-300}
while [ $# -gt 0 ]; do
	case $1 in
	-n) ranks=$2; shift 2 ;;
	-r) rates=$2; shift 2 ;;
	-o) ops=$2; shift 2 ;;
	-c) codecs=$2; shift 2 ;;
	-d) dtype=$2; shift 2 ;;
	-b) bmin=$2; shift 2 ;;
	-e) bmax=$2; shift 2 ;;
	-f) factor=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--delay) delay=$2; shift 2 ;;
	--data) data=$2; shift 2 ;;
	--policy) policy=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--json) json=--json; shift ;;
	--cores) cores=$2; shift 2 ;;
	--exec) exec_cmd=$2; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) die "unknown option $1 (--help lists them)" ;;
	esac
done

[ "$(id -u)" = 0 ] || die "needs root: it creates network namespaces, veth links and tc qdiscs (run it with sudo, or in a container with CAP_NET_ADMIN)"
for t in ip tc $([ -n "$exec_cmd" ] || echo mpirun); do
	command -v $t >/dev/null 2>&1 || die "$t not found (ip/tc: iproute2; mpirun: openmpi-bin)"
done
[ -n "$exec_cmd" ] || [ -x "$bin" ] || die "$bin is not built (cmake --build build, with MPI found; or pass --bin)"
if [ "$ranks" -lt 2 ] || [ "$ranks" -gt 200 ]; then die "-n must be 2..200"; fi
pfx="ibp$$n"
br="ibp$$br"
export IBP_NETNS_PREFIX=$pfx
# Processes left in our namespaces (a stray daemon of a failed run), by PID.
kill_ns_procs() {
	for k in $(seq 1 "$ranks"); do
		for p in $(ip netns pids "$pfx$k" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
	done
}
cleanup() {
	kill_ns_procs
	for k in $(seq 1 "$ranks"); do
		ip netns del "$pfx$k" 2>/dev/null || true
		ip link del "ibp$$h$k" 2>/dev/null || true
	done
	ip link del "$br" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip link add "$br" type bridge || die "cannot create a bridge (kernel without bridge support?)"
ip addr add 10.77.0.254/24 dev "$br"
ip link set "$br" up
for k in $(seq 1 "$ranks"); do
	ns="$pfx$k"
	ip netns add "$ns"
	ip link add "ibp$$h$k" type veth peer name "ibp$$c$k"
	ip link set "ibp$$c$k" netns "$ns"
	ip link set "ibp$$h$k" master "$br" up
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "ibp$$c$k" name eth0
	ip -n "$ns" addr add "10.77.0.$k/24" dev eth0
	ip -n "$ns" link set eth0 up
done
hosts=$(seq -s, -f "10.77.0.%g" 1 "$ranks")
# netem (delay) is a module some kernels lack: probe it on a namespace's own lo
if [ -n "$delay" ]; then
	if ip netns exec "${pfx}1" tc qdisc add dev lo root netem delay 0us 2>/dev/null; then
		ip netns exec "${pfx}1" tc qdisc del dev lo root
	else
		echo "netns-tc.sh: this kernel has no sch_netem: --delay $delay ignored (rate limits only)" >&2
		delay=""
	fi
fi

# tbf on each rank's egress: rate, a burst of 1 ms of traffic (>= 64 KiB for GSO frames)
shape() {
	local mbit burst
	mbit=$(awk -v g="$1" 'BEGIN { printf "%d", g * 1000 }') # fractional Gbit/s allowed
	[ "$mbit" -ge 1 ] || die "rate $1 Gbit/s is below 1 Mbit/s"
	burst=$(( mbit * 125 ))
	[ "$burst" -ge 65536 ] || burst=65536
	for k in $(seq 1 "$ranks"); do
		ip netns exec "$pfx$k" tc qdisc del dev eth0 root 2>/dev/null || true
		if [ -n "$delay" ]; then
			ip netns exec "$pfx$k" tc qdisc add dev eth0 root handle 1: netem delay "$delay"
			ip netns exec "$pfx$k" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "${mbit}mbit" \
				burst "$burst" latency 50ms
		else
			ip netns exec "$pfx$k" tc qdisc add dev eth0 root tbf rate "${mbit}mbit" burst "$burst" latency 50ms
		fi
	done
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2054,SC2206 # commas are mpirun's; IBP_NETNS_MPI_ARGS: extra words (e.g. verbosity)
mpi=(mpirun --allow-run-as-root --host "$hosts" -np "$ranks" --map-by node
	--mca plm_rsh_agent "$here/netns-tc.sh --agent" --mca plm_rsh_no_tree_spawn 1
	--mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
	--mca btl_base_warn_component_unused 0 -x IBP_NETNS_PREFIX --bind-to none ${IBP_NETNS_MPI_ARGS:-})
ncpu=$(nproc)
case $cores in
split)
	command -v taskset >/dev/null 2>&1 || die "taskset not found (util-linux); or --cores all"
	per=$((ncpu / ranks > 0 ? ncpu / ranks : 1))
	# the rank's CPUs, from its rank number (the launched command runs this)
	pin=(sh -c 'f=$(( (OMPI_COMM_WORLD_RANK * '"$per"') % '"$ncpu"' )); exec taskset -c "$f-$((f + '"$per"' - 1))" "$@"' sh)
	corenote="$per CPU(s) a rank (taskset)" ;;
all) pin=() corenote="all $ncpu CPUs shared" ;;
*) die "--cores split|all, not $cores" ;;
esac

echo "# netns-tc.sh: $ranks ranks, one per network namespace, rates ${rates// /, } Gbit/s per rank${delay:+, delay $delay}"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sr), $ncpu CPUs ($corenote), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$exec_cmd" ]; then
	for gbit in $rates; do
		shape "$gbit"
		echo "# rate ${gbit} Gbit/s: $exec_cmd"
		pids=()
		for k in $(seq 1 "$ranks"); do
			r=$((k - 1))
			cpu=()
			if [ "$cores" = split ]; then
				f=$(( (r * per) % ncpu ))
				cpu=(taskset -c "$f-$((f + per - 1))")
			fi
			(cd "$root" && exec ip netns exec "$pfx$k" env IBP_NETNS_RANK=$r IBP_NETNS_WORLD="$ranks" \
				IBP_NETNS_MASTER=10.77.0.1 IBP_NETNS_RATE="$gbit" GLOO_SOCKET_IFNAME=eth0 \
				${cpu[@]+"${cpu[@]}"} timeout "$run_timeout" sh -c "$exec_cmd") &
			pids+=($!)
		done
		bad=0
		for p in "${pids[@]}"; do wait "$p" || bad=1; done
		[ "$bad" = 0 ] || die "a rank of '$exec_cmd' failed at $gbit Gbit/s"
	done
	exit 0
fi
for gbit in $rates; do
	shape "$gbit"
	for op in $ops; do
		for c in $codecs; do
			echo "# rate ${gbit} Gbit/s, $op, codec $c"
			args=(-o "$op" -b "$bmin" -e "$bmax" -f "$factor" -c "$c" -d "$dtype" -n "$iters" -w 1 --policy "$policy")
			[ -z "$data" ] || args+=(--data "$data")
			[ -z "$json" ] || args+=("$json")
			# A daemon sometimes fails to start in its namespace and mpirun then
			# waits for it forever: bound each run (--timeout) and retry it.
			ok=0
			for attempt in 1 2 3; do
				if "${mpi[@]}" --timeout "$run_timeout" ${pin[@]+"${pin[@]}"} "$bin" "${args[@]}"; then
					ok=1
					break
				fi
				echo "# (run failed or timed out after ${run_timeout} s: attempt $attempt of 3)"
				kill_ns_procs
			done
			[ "$ok" = 1 ] || die "ibp-coll-perf failed 3 times at $gbit Gbit/s ($op, $c)"
		done
	done
done
