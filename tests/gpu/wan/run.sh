#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Real NCCL between two datacenters on one host: four ranks, each in its
# own network namespace, two behind a NAT router, joined by a shaped WAN
# (tests/gpu/wan/topo.sh).  Each variant runs a PyTorch all-reduce loop
# (wan.py) with every result checked exactly and the path it took read
# from the logs; faults can hit the WAN while it runs.
#
# Usage: tests/gpu/wan/run.sh [BUILD_DIR] [--variants LIST] [--rate RATE]
#            [--duration S] [--sizes LIST] [--batch N] [--ceiling-secs S]
#            [--fault KIND[@T[:D]]]... [--faults] [--strict-conntrack]
#            [--outage-ms N] [--timeout S] [--out DIR] [--tools DIR]
#            [--carried-tools] [--rtt MS] [--loss PCT] [--line-queues N]
#            [--line-cpus LIST] [--rank-cpus LIST] [--boot-wan] [--gpus N]
#            [--no-mps] [--no-gpu] [--debug]

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
WAN_HERE=$here

usage() {
	sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
	cat <<'EOF'
  BUILD_DIR          meson build directory (default: build)
  --variants LIST    of nat, encrypt, gateway, socket, socket-tuned, routed
                     (default: nat,encrypt,gateway,socket); socket-tuned is
                     NCCL's Socket tuned by hand for a long WAN:
                     NCCL_BUFFSIZE 32 MiB, NCCL_MIN_NCHANNELS 8, 8 threads
                     x 8 sockets
  --rate RATE        the WAN's rate each way, tc syntax (default 4gbit)
  --duration S       seconds of each variant's all-reduce loop (default 60)
  --sizes LIST       all-reduce sizes (default 64M,256M)
  --batch N          in-place calls per checked batch (default 5)
  --ceiling-secs S   plain TCP across the WAN for S s each way first
                     (default 5; 0: not measured)
  --fault SPEC       KIND@T[:D]: KIND at T s into the loop, for D s:
                     wan-down (the WAN veth down), wan-drop (nft drops all
                     across), wan-reset (nft resets every TCP segment),
                     conntrack-flush (rb's table emptied, no D),
                     relay-restart (meshrelay on ga stopped, started D s
                     later; gateway variant)
  --faults           the issue's plan: wan-down@30:60 (twice tcp-xdc's
                     default timeout_ms), conntrack-flush@150, strict
                     conntrack on rb; --duration 240 unless given
  --strict-conntrack rb drops streams it did not see start
                     (nf_conntrack_tcp_loose=0): a flush loses them all
  --outage-ms N      tcp-xdc outage_ms for the Mesh runs (environment)
  --timeout S        limit of each variant's run (default: duration + 300)
  --out DIR          results and logs (default: a new temporary folder)
  --tools DIR        tools for a host without them (default
                     BUILD_DIR/wan-tools, made by tools.sh)
  --carried-tools    take every tool from --tools, even where the system
                     has it
  --rtt MS           a long WAN: a delay line in each router holds what it
                     receives from the WAN for MS / 2 (tools/delayline; no
                     netem needed); the hosts' tcp_rmem and tcp_wmem go up
                     to 256 MiB a socket (default 0: no line)
  --loss PCT         with --rtt: each line loses PCT percent of the packets
                     on the wire (default 0)
  --line-queues N    with --rtt: queues (threads) of each line (default 4)
  --line-cpus LIST   with --rtt: the lines run on these CPUs only (taskset
                     syntax, 12-15); their writes carry the kernel's
                     forwarding, so on a busy host they fall behind
  --rank-cpus LIST   the ranks (and meshperf) run on these CPUs only
  --boot-wan         NCCL's bootstrap crosses the WAN for every variant, as
                     Socket's must (it takes NCCL_SOCKET_IFNAME for both),
                     not the management network: for timing setup alike;
                     Mesh variants then need DC B routed (routed)
  --gpus N           GPUs, rank r on cuda:(r % N) (default: all visible)
  --no-mps           do not start CUDA MPS
  --no-gpu           meshperf pairs across the DCs instead of the GPU job:
                     the topology and the plugin's paths, no GPU needed
  --debug            NCCL's INFO log of every subsystem
EOF
}

die() {
	echo "run.sh: $*" >&2
	exit 2
}

build=build
variants=nat,encrypt,gateway,socket
rate=4gbit
duration=
sizes=64M,256M
batch=5
ceiling_secs=5
faults=()
preset=0
strict=0
outage_ms=
timeout_s=
out=
tools=
carried=0
gpus=0
use_mps=1
no_gpu=0
debug=0
rtt_ms=0
loss=0
line_queues=4
line_cpus=
rank_cpus=
boot_wan=0
positional=0

while [ $# -gt 0 ]; do
	case $1 in
	--variants) variants=${2:?--variants needs a value}; shift ;;
	--rate) rate=${2:?--rate needs a value}; shift ;;
	--duration) duration=${2:?--duration needs a value}; shift ;;
	--sizes) sizes=${2:?--sizes needs a value}; shift ;;
	--batch) batch=${2:?--batch needs a value}; shift ;;
	--ceiling-secs) ceiling_secs=${2:?--ceiling-secs needs a value}; shift ;;
	--fault) faults+=("${2:?--fault needs a value}"); shift ;;
	--faults) preset=1 ;;
	--strict-conntrack) strict=1 ;;
	--outage-ms) outage_ms=${2:?--outage-ms needs a value}; shift ;;
	--timeout) timeout_s=${2:?--timeout needs a value}; shift ;;
	--out) out=${2:?--out needs a value}; shift ;;
	--tools) tools=${2:?--tools needs a value}; shift ;;
	--carried-tools) carried=1 ;;
	--gpus) gpus=${2:?--gpus needs a value}; shift ;;
	--no-mps) use_mps=0 ;;
	--no-gpu) no_gpu=1 ;;
	--debug) debug=1 ;;
	--rtt) rtt_ms=${2:?--rtt needs a value}; shift ;;
	--loss) loss=${2:?--loss needs a value}; shift ;;
	--line-queues) line_queues=${2:?--line-queues needs a value}; shift ;;
	--line-cpus) line_cpus=${2:?--line-cpus needs a value}; shift ;;
	--rank-cpus) rank_cpus=${2:?--rank-cpus needs a value}; shift ;;
	--boot-wan) boot_wan=1 ;;
	-h|--help) usage; exit 0 ;;
	-*) usage >&2; die "unknown option $1" ;;
	*)
		[ $positional -eq 0 ] || die "only one BUILD_DIR may be given"
		build=$1
		positional=1 ;;
	esac
	shift
done

if [ $preset -eq 1 ]; then
	faults=(wan-down@30:60 conntrack-flush@150 "${faults[@]}")
	strict=1
	duration=${duration:-240}
fi
duration=${duration:-60}
timeout_s=${timeout_s:-$((duration + 300))}
for v in duration batch ceiling_secs timeout_s gpus rtt_ms line_queues; do
	case ${!v} in
	''|*[!0-9]*) die "--${v%_s} must be a number" ;;
	esac
done
[ -z "$outage_ms" ] || case $outage_ms in
	*[!0-9]*) die "--outage-ms must be a number" ;;
esac
[[ $loss =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--loss must be a percentage"
[[ $line_cpus$rank_cpus =~ ^[0-9,-]*$ ]] ||
	die "--line-cpus and --rank-cpus take CPU lists (0-3,8)"
# a list from the command line: the ranks' (or meshperf's) CPUs
pin=(${rank_cpus:+taskset -c "$rank_cpus"})

# parse_fault SPEC: "KIND T D" (D 0 where it has none), or dies.
parse_fault() {
	local kind=${1%%@*} t=0 d=0 rest

	if [ "$kind" != "$1" ]; then
		rest=${1#*@}
		t=${rest%%:*}
		[ "$rest" = "$t" ] || d=${rest#*:}
	fi
	case $kind in
	wan-down|wan-drop|wan-reset|relay-restart) [ "$d" != 0 ] || d=60 ;;
	conntrack-flush) d=0 ;;
	*) die "--fault: unknown kind '$kind'" ;;
	esac
	case $t$d in
	*[!0-9]*) die "--fault $1: T and D are whole seconds" ;;
	esac
	echo "$kind $t $d"
}
plan=()
for f in ${faults[@]+"${faults[@]}"}; do
	plan+=("$(parse_fault "$f")") || exit 2
done
if [ ${#plan[@]} -gt 0 ]; then
	mapfile -t plan < <(printf '%s\n' "${plan[@]}" | sort -n -k2)
fi

IFS=, read -r -a variant_list <<<"$variants"
for v in "${variant_list[@]}"; do
	case $v in
	nat|encrypt|gateway)
		# DC B's bootstrap listeners sit behind the NAT
		[ $boot_wan -eq 0 ] ||
			die "--boot-wan: variant '$v' has DC B behind NAT; take routed" ;;
	socket|socket-tuned|routed) ;;
	*) die "--variants: unknown '$v'" ;;
	esac
done

cd "$repo" || die "cannot enter the repository"
# shellcheck source=tests/gpu/lib.sh
. "$repo/tests/gpu/lib.sh"
# shellcheck source=tests/gpu/wan/topo.sh
. "$here/topo.sh"
gpu_build run.sh "$build" || exit 2
meshinfo=$build/tools/meshinfo/meshinfo
meshrelay=$build/tools/meshrelay/meshrelay
meshperf=$build/tools/meshperf/meshperf
for f in "$meshinfo" "$meshrelay" "$build/modules/tcp-xdc/mesh-tcp-xdc.so" \
	 "$build/modules/relay/mesh-relay.so"; do
	[ -e "$f" ] || die "missing $f (ninja -C $build)"
done
gpu_libs "$build" "$plugin" "$meshrelay" || exit 2
if [ "$rtt_ms" -gt 0 ]; then
	WAN_DELAYLINE=$build/tools/delayline/delayline
	[ -x "$WAN_DELAYLINE" ] || die "missing $WAN_DELAYLINE (ninja -C $build)"
	gpu_libs "$build" "$WAN_DELAYLINE" || exit 2
fi
WAN_RTT_MS=$rtt_ms
WAN_LOSS=$loss
WAN_DL_QUEUES=$line_queues
WAN_DL_CPUS=$line_cpus
WAN_RATE=$rate
wan_rate_bits "$rate" >/dev/null || die "--rate: bad rate '$rate'"
wan_tools "${tools:-$build/wan-tools}" "$carried"

if [ -z "$out" ]; then
	out=$(mktemp -d -t nccl-mesh-wan-out.XXXXXX) || die "mktemp failed"
fi
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

# ---- CUDA MPS: four ranks side by side on a GPU ----
mps_ours=0
mps_note="off"
mps_stop() {
	[ $mps_ours -eq 1 ] || return 0
	mps_ours=0
	echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
	sleep 1
}

finish() {
	mps_stop
	wan_cleanup
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
wan_init

echo "results and logs: $out"
rtt_note=
[ "$rtt_ms" -eq 0 ] || rtt_note=", RTT $rtt_ms ms"
echo "build: $build; WAN $rate each way$rtt_note; variants $variants;" \
     "loop ${duration}s of $sizes"
[ -z "${!WAN_CARRIED[*]}" ] ||
	echo "tools from ${tools:-$build/wan-tools}: ${!WAN_CARRIED[*]}"

if [ $no_gpu -eq 0 ]; then
	if [ $use_mps -eq 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
		CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/nccl-mesh-mps.XXXXXX)
		CUDA_MPS_LOG_DIRECTORY=$out/mps-log
		export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
		mkdir -p "$CUDA_MPS_LOG_DIRECTORY"
		if nvidia-cuda-mps-control -d; then
			mps_ours=1
			mps_note="on ($CUDA_MPS_PIPE_DIRECTORY)"
		else
			unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
		fi
	fi
	python3 -c 'import torch, sys
sys.exit(0 if torch.cuda.is_available() else "CUDA is not available")' ||
		wan_skip "no usable GPU (--no-gpu checks the network alone)"
	echo "MPS: $mps_note"
fi

# ---- topology ----
t0=$SECONDS
wan_topology
if [ "$rtt_ms" -gt 0 ]; then
	wan_delayline "$out"
	for h in "${WAN_HOSTS[@]}"; do
		nsx_sysctl "$h" net.ipv4.tcp_rmem "4096 131072 268435456"
		nsx_sysctl "$h" net.ipv4.tcp_wmem "4096 16384 268435456"
	done
	echo "delay lines: RTT $rtt_ms ms, loss $loss% each way, $line_queues" \
	     "queues a router; hosts' TCP up to 256 MiB a socket," \
	     "$(nsx a1 cat /proc/sys/net/ipv4/tcp_congestion_control)"
fi
wan_mode nat
[ $strict -eq 0 ] || wan_strict_conntrack
echo "topology up in $((SECONDS - t0)) s: $(nsx ra tc qdisc show dev wan |
	grep -o 'tbf.*rate [^ ]*' | head -n1)"

ceiling=
if [ "$ceiling_secs" -gt 0 ]; then
	echo "==== WAN ceiling: plain TCP a1 -> rb NAT -> b1, 8 streams, ${ceiling_secs} s each way"
	ceiling=$(wan_ceiling 8 "$ceiling_secs" "$out") ||
		die "the TCP ceiling could not be measured (logs in $out)"
	read -r up down <<<"$ceiling"
	echo "WAN ceiling: A->B $up Gbit/s, B->A $down Gbit/s"
	awk -v a="$up" -v b="$down" -v r="$(wan_rate_bits "$rate")" \
		'BEGIN { exit !(a * 1e9 < 0.9 * r || b * 1e9 < 0.9 * r) }' &&
		echo "WAN ceiling below 0.9 of $rate: the path falls short," \
		     "figures against it are void"
	[ "$rtt_ms" -eq 0 ] || wan_delayline_report "$out"
fi

umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$out/mesh.key"
umask 022

# ---- one variant ----
# mesh_env CONF: env_words = the plugin's settings with config CONF.
mesh_env() {
	env_words=(NCCL_NET_PLUGIN="$plugin" NCCL_MESH_CONF="$here/$1"
		   NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc:$build/modules/relay")
	[ -z "$outage_ms" ] ||
		env_words+=(NCCL_MESH_TCP_XDC_OUTAGE_MS="$outage_ms")
	# the WAN's round trip, declared as a deployment declares its
	# cross-DC class (docs/modules/tcp-xdc.md, latency at distance)
	[ "$rtt_ms" -eq 0 ] ||
		env_words+=(NCCL_MESH_XDC_RTT_MS="$rtt_ms")
}

# relay_start G [LOG]: meshrelay as G (ga on ra, gb on rb; variant
# gateway), logging to LOG (default meshrelay-G.log in the results).
declare -A relay_pid=()
relay_start() {
	local g=$1 r=r${1:1} log=${2:-$out/meshrelay-$1.log}

	wan_spawn "$r" "$log" env NCCL_MESH_HOSTNAME="$g" \
		NCCL_MESH_CONF="$here/gateway.conf" NCCL_DEBUG=INFO \
		NCCL_MESH_AUTH_KEY_FILE="$out/mesh.key" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc:$build/modules/relay" \
		"$meshrelay" --config "$here/gateway.conf"
	relay_pid[$g]=$WAN_LAST_PID
	wan_wait_listen "$r" "$WAN_RELAY_PORT" 15 || {
		cat "$log" >&2
		wan_die "meshrelay $g does not serve port $WAN_RELAY_PORT"
	}
}

relays_stop() {
	local g

	for g in "${!relay_pid[@]}"; do
		kill -TERM "${relay_pid[$g]}" 2>/dev/null || true
		wait "${relay_pid[$g]}" 2>/dev/null || true
	done
	relay_pid=()
	# a relay a fault restarted is not ours to wait for, but still here
	for n in ra rb; do
		for pid in $(wan_x ip netns pids "$(ns "$n")" 2>/dev/null); do
			kill -TERM "$pid" 2>/dev/null || true
		done
	done
}

# fault_log LINE: to the console and the variant's fault log.
fault_log() {
	printf '==== fault +%ss: %s\n' "$(fault_at)" "$1" | tee -a "$fault_file"
}

fault_at() {
	local now=${EPOCHREALTIME/,/.}

	awk -v a="$now" -v b="$fault_t0" 'BEGIN { printf "%.1f", a - b }'
}

# fault_sleep_until T: until T s after the loop began, or the job's end
# (then 1).
fault_sleep_until() {
	while [ ! -e "$done_file" ]; do
		awk -v a="${EPOCHREALTIME/,/.}" -v b="$fault_t0" -v t="$1" \
			'BEGIN { exit !(a - b >= t) }' && return 0
		sleep 0.2
	done
	return 1
}

# faults_run: the plan, in the background of a run: waits for the loop's
# start (the mark), then each fault at its time; a fault that has begun
# always ends, also after the job did, so the next variant finds the WAN
# as it was.
faults_run() {
	local kind t d

	while [ ! -e "$mark_file" ]; do
		[ -e "$done_file" ] && return 0
		sleep 0.2
	done
	fault_t0=${EPOCHREALTIME/,/.}
	fault_log "the loop started; faults: ${plan[*]}"
	for f in "${plan[@]}"; do
		read -r kind t d <<<"$f"
		fault_sleep_until "$t" || {
			fault_log "$kind at +${t}s not reached: the job ended"
			continue
		}
		case $kind in
		wan-down) wan_fault_down ;;
		wan-drop) wan_fault_nft drop ;;
		wan-reset) wan_fault_nft reset ;;
		conntrack-flush)
			fault_log "conntrack -F in rb: $(wan_fault_flush | tail -n1)"
			continue ;;
		relay-restart)
			if [ -z "${relay_pid[ga]:-}" ]; then
				fault_log "relay-restart: no meshrelay in this variant"
				continue
			fi
			kill -TERM "${relay_pid[ga]}"
			# gone before the next one takes the port (and a log)
			while kill -0 "${relay_pid[ga]}" 2>/dev/null; do
				sleep 0.1
			done ;;
		esac
		fault_log "$kind for ${d}s"
		sleep "$d"
		case $kind in
		wan-down) wan_fault_down_end ;;
		wan-drop|wan-reset) wan_fault_nft_end ;;
		relay-restart) relay_start ga "$out/meshrelay-ga-restarted.log" ;;
		esac
		fault_log "$kind ended"
	done
}

ranks=
for h in "${WAN_HOSTS[@]}"; do
	ranks+="${ranks:+,}$h=$(ns_path "$h")"
done

failures=0
results=()

# job NAME NET EXPECT [VAR=VALUE...]: the all-reduce loop of one variant.
job() {
	local name=$1 net=$2 expect=$3 args

	shift 3
	args=(--net "$net" --ranks "$ranks" --master "${WAN_MG[a1]}"
	      --sizes "$sizes" --duration "$duration" --batch "$batch"
	      --gpus "$gpus" --timeout "$timeout_s" --expect "$expect"
	      --ext-b "$WAN_EXT_B" --out "$out/$name.jsonl"
	      --log-dir "$out/logs-$name" --loop-mark "$mark_file")
	[ $debug -eq 1 ] && args+=(--debug)
	env "$@" NCCL_IB_DISABLE=1 NCCL_NET_PLUGIN_REF_COUNT=1 \
		timeout -k 10 $((timeout_s + 60)) "${pin[@]}" \
		python3 "$here/wan.py" "${args[@]}" 2>&1 | tee "$out/$name.log"
}

# probe NAME EXPECT [VAR=VALUE...]: without a GPU, meshperf b1 <- a1 and
# b2 <- a2 at once across the DCs, bootstrap on the management network,
# then wan.py's checks of the paths on their logs.
probe() {
	local name=$1 expect=$2 rc=0 pids=() srv cli k=0 logs=

	shift 2
	touch "$mark_file"
	for pair in b1:a1 a2:b2; do
		srv=${pair%:*}
		cli=${pair#*:}
		wan_spawn "$srv" "$out/$name-$srv.log" env "$@" \
			NCCL_MESH_HOSTNAME="$srv" NCCL_DEBUG=INFO \
			"${pin[@]}" "$meshperf" --server --bind "${WAN_MG[$srv]}" \
			--port $((18515 + k)) --plugin "$plugin" --json --verbose
		pids+=("$WAN_LAST_PID")
		wan_wait_listen "$srv" $((18515 + k)) 10 ||
			wan_die "meshperf in $srv does not listen"
		wan_spawn "$cli" "$out/$name-$cli.log" env "$@" \
			NCCL_MESH_HOSTNAME="$cli" NCCL_DEBUG=INFO \
			"${pin[@]}" "$meshperf" --client "${WAN_MG[$srv]}" \
			--port $((18515 + k)) --plugin "$plugin" --json --verbose \
			--timeout "$timeout_s" --sizes 0,4K,1M,8M \
			--budget "$((duration * 50))M" --mem 64M --lat-max 4K
		pids+=("$WAN_LAST_PID")
		logs+="${logs:+,}$srv=$out/$name-$srv.log,$cli=$out/$name-$cli.log"
		k=$((k + 1))
	done
	for pid in "${pids[@]}"; do
		wait "$pid" || rc=1
	done
	grep -h '"event":"result".*"size":8388608' "$out/$name"-[ab]?.log |
		grep -o '"gbits_per_s":[0-9.]*' | sed "s/^/$name: 8 MiB /"
	[ $rc -eq 0 ] || { echo "$name: meshperf failed"; return 1; }
	python3 "$here/wan.py" --net Mesh --check-logs "$logs" \
		--expect "$expect" --ext-b "$WAN_EXT_B"
}

for v in "${variant_list[@]}"; do
	echo
	mark_file=$out/$v.loop
	done_file=$out/$v.done
	fault_file=$out/$v.faults
	rm -f "$mark_file" "$done_file" "$fault_file"
	case $v in
	nat) mode=nat; net=Mesh; expect=nat
	     mesh_env nat.conf ;;
	encrypt) mode=nat; net=Mesh; expect=nat,encrypt
	     mesh_env nat.conf
	     env_words+=(NCCL_MESH_TCP_XDC_ENCRYPT=true
			 NCCL_MESH_AUTH_KEY_FILE="$out/mesh.key") ;;
	gateway) mode=gateway; net=Mesh; expect=gateway
	     mesh_env gateway.conf
	     env_words+=(NCCL_MESH_AUTH_KEY_FILE="$out/mesh.key") ;;
	routed) mode=routed; net=Mesh; expect=routed
	     # DC B's hosts are routed here: nothing to advertise
	     mesh_env nat.conf
	     env_words+=(NCCL_MESH_ADVERTISE_ADDRS=) ;;
	socket) mode=routed; net=Socket; expect=
	     env_words=(NCCL_NET_PLUGIN=none) ;;
	socket-tuned) mode=routed; net=Socket; expect=
	     env_words=(NCCL_NET_PLUGIN=none NCCL_BUFFSIZE=33554432
			NCCL_MIN_NCHANNELS=8 NCCL_SOCKET_NTHREADS=8
			NCCL_NSOCKS_PERTHREAD=8) ;;
	esac
	if [ "$net" = Socket ] || [ $boot_wan -eq 1 ]; then
		env_words+=(NCCL_SOCKET_IFNAME==lan0)
	else
		env_words+=(NCCL_SOCKET_IFNAME==mg0)
	fi
	if [ "$net" != Socket ]; then
		# every outage the plugin rode out is one INFO line
		[ ${#plan[@]} -eq 0 ] || expect+=${expect:+,}resumed
	fi
	echo "==== $v: $net, $mode WAN"
	wan_mode "$mode"
	[ "$mode" = gateway ] && { relay_start ga; relay_start gb; }
	fpid=
	if [ ${#plan[@]} -gt 0 ]; then
		faults_run &
		fpid=$!
	fi
	t0=$SECONDS
	if [ $no_gpu -eq 1 ]; then
		if [ "$net" = Socket ]; then
			echo "==== $v: skipped (NCCL's Socket needs the GPU job)"
			touch "$done_file"
			[ -z "$fpid" ] || wait "$fpid"
			continue
		fi
		probe "$v" "$expect" "${env_words[@]}"
	else
		job "$v" "$net" "$expect" "${env_words[@]}"
	fi
	rc=$?
	touch "$done_file"
	[ -z "$fpid" ] || wait "$fpid"
	if [ "$mode" = gateway ]; then
		echo "==== $v: relays"
		grep -ah "forwarding\|closed by\|failed" "$out"/meshrelay-g?.log |
			sed 's/.*NET\/Mesh\///' | sort | uniq -c | sort -rn | head -n 8
		relays_stop
	fi
	if [ $rc -ne 0 ]; then
		echo "==== $v: FAILED (exit $rc) after $((SECONDS - t0)) s"
		failures=$((failures + 1))
	else
		echo "==== $v: passed in $((SECONDS - t0)) s"
	fi
	results+=("$v=$out/$v.jsonl")
done

echo
echo "==== summary (WAN $rate each way${ceiling:+; plain TCP $up Gbit/s A->B, $down B->A})"
if [ $no_gpu -eq 0 ]; then
	python3 "$here/wan.py" --net Mesh --summary "$(IFS=,; echo "${results[*]}")" \
		${ceiling:+--ceiling "$up,$down"} | tee "$out/summary.txt"
fi
[ "$rtt_ms" -eq 0 ] || wan_delayline_report "$out" | tee -a "$out/summary.txt"
echo "results and logs: $out"
if [ $failures -ne 0 ]; then
	echo "RESULT: FAIL ($failures of ${#variant_list[@]} variants failed)"
	exit 1
fi
echo "RESULT: PASS"
