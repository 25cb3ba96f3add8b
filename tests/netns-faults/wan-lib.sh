# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# WAN faults that tcp-xdc must survive with an outage budget (outage_ms),
# for the netns-faults tests (wan.sh, conform-flaps.sh) and the benchmark
# tests/bench/wan-faults.sh.  Sourced after tests/netns/lib.sh, never run.
#
# The pair topology (wan_pair) is two hosts, each behind a router, the
# routers joined by one veth, the "WAN link", shaped in both directions:
#
#   c 10.77.1.1 -- 10.77.1.2 rc 10.77.0.1 ==wan== 10.77.0.2 rs 10.77.2.2 -- 10.77.2.1 s
#
# The hosts' own interfaces (lan) stay up whatever the WAN does, as a
# host's NIC does when a link between datacenters fails: a process that
# starts during an outage still finds its device.
#
# Every meshperf run here meets its peer through a netns_tcp_bridge (a unix
# socket), never through the network under test: the faults hit only the
# plugin's own connections, as in a real job, where NCCL's bootstrap has a
# network of its own.

# The system's python3 before any other on PATH: the bridges and samplers
# start it several times a run, and a per-user shim in front of it (pyenv)
# costs seconds a start on a busy host.
[ ! -x /usr/bin/python3 ] || PATH=/usr/bin:$PATH

declare -gA WAN_IP=([c]=10.77.1.1 [s]=10.77.2.1)
# rc's route to s's side, which goes with the WAN link when it goes down
WAN_ROUTE="10.77.2.0/24 via 10.77.0.2"
WAN_TIMEOUT_MS=${WAN_TIMEOUT_MS:-3000}
WAN_OUTAGE_MS=${WAN_OUTAGE_MS:-10000}
WAN_RATE=${WAN_RATE:-2gbit}
WAN_STREAMS=${WAN_STREAMS:-4}
# A long WAN (tests/netns/lib.sh's delay line, DELAYLINE its program): each
# router holds what it receives from the WAN for WAN_DELAY (e.g. 25ms, so
# the round trip is twice that) and loses WAN_LOSS percent of it.
WAN_DELAY=${WAN_DELAY:-}
WAN_LOSS=${WAN_LOSS:-0}
# meshperf's own watchdog: far beyond any outage, so that the plugin is
# what ends a run, never meshperf
WAN_MP_TIMEOUT=${WAN_MP_TIMEOUT:-120}

wan_now_ms() {
	date +%s%3N
}

# wan_pair [RATE]: the pair topology, its WAN link shaped to RATE (default
# WAN_RATE; "" leaves it unshaped), with a delay line in each router where
# WAN_DELAY is set.  Built with `ip -n` batches rather than lib.sh's one
# `ip netns exec` a step: a test builds it every run.
wan_pair() {
	local rate=${1-$WAN_RATE} n

	for n in c rc rs s; do
		ip netns add "$(ns "$n")" ||
			netns_die "cannot create namespace $(ns "$n")"
		NETNS_LIST+=("$(ns "$n")")
	done
	netns_veth c lan rc lan
	netns_veth rc wan rs wan
	netns_veth rs lan s lan
	wan_batch c "link set lo up" "addr add ${WAN_IP[c]}/24 dev lan" \
		"route add default via 10.77.1.2"
	wan_batch rc "link set lo up" "addr add 10.77.1.2/24 dev lan" \
		"addr add 10.77.0.1/24 dev wan" "route add $WAN_ROUTE"
	wan_batch rs "link set lo up" "addr add 10.77.0.2/24 dev wan" \
		"addr add 10.77.2.2/24 dev lan" "route add 10.77.1.0/24 via 10.77.0.1"
	wan_batch s "link set lo up" "addr add ${WAN_IP[s]}/24 dev lan" \
		"route add default via 10.77.2.2"
	netns_forwarding rc
	netns_forwarding rs
	if [ -n "$rate" ]; then
		netns_shape rc wan "$rate"
		netns_shape rs wan "$rate"
	fi
	if [ -n "$WAN_DELAY" ]; then
		netns_delayline rc wan "$WAN_DELAY" "$WAN_LOSS"
		netns_delayline rs wan "$WAN_DELAY" "$WAN_LOSS"
	fi
}

# wan_batch NS CMD...: ip commands (without "ip") in namespace NS at once.
wan_batch() {
	local n=$1

	shift
	printf '%s\n' "$@" | ip -n "$(ns "$n")" -batch - ||
		netns_die "$n: ip -batch failed"
}

# wan_down / wan_up: the WAN link goes down at rc (rs sees its carrier
# go) and comes back, with rc's route through it.  wan_down_for MS: down
# for MS, then up; prints when it went down and when it was up again.
wan_down() {
	wan_link_down rc wan
}

wan_up() {
	wan_link_up rc wan "$WAN_ROUTE"
}

wan_down_for() {
	wan_flap rc wan "$1" "$WAN_ROUTE"
}

# wan_pair_conf FILE [LINE...]: a config of tcp-xdc on the pair's link with
# WAN_STREAMS streams, the test's timeout and outage budget; each LINE (a
# setting of another key) goes into the tcp-xdc section after them.
wan_pair_conf() {
	local file=$1 line

	shift
	{
		echo 'version = 1;'
		echo 'modules = [ "tcp-xdc" ];'
		echo 'tcp-xdc: {'
		echo '  ifname = "lan";'
		echo "  streams = $WAN_STREAMS;"
		echo '  threads = 2;'
		echo "  timeout_ms = $WAN_TIMEOUT_MS;"
		echo "  outage_ms = $WAN_OUTAGE_MS;"
		for line in "$@"; do
			echo "  $line"
		done
		echo '};'
	} >"$file"
}

# Extra environment words for both meshperf processes, or one of them.
WAN_ENV=()
WAN_SERVER_ENV=()
WAN_CLIENT_ENV=()

# wan_meshperf NS SIDE TAG CONF [meshperf args...]: meshperf in NS as
# SIDE (server, client) of run TAG, logging to $NETNS_TMP/TAG.SIDE with
# INFO lines, its pid in NETNS_LAST_PID.
wan_meshperf() {
	local n=$1 side=$2 tag=$3 conf=$4 extra=()

	shift 4
	if [ "$side" = server ]; then
		extra=("${WAN_SERVER_ENV[@]}")
	else
		extra=("${WAN_CLIENT_ENV[@]}")
	fi
	netns_spawn "$n" "$NETNS_TMP/$tag.$side" env NCCL_MESH_HOSTNAME="$n" \
		NCCL_MESH_CONF="$conf" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		"${WAN_ENV[@]}" "${extra[@]}" "$MESHPERF" --plugin "$PLUGIN" \
		--timeout "$WAN_MP_TIMEOUT" --verbose "$@"
}

# wan_start SERVER CLIENT TAG BOOT_PORT CONF [meshperf args...]: one meshperf
# pair with config CONF, server in namespace SERVER, client in CLIENT,
# meeting through a bridge on 127.0.0.1:BOOT_PORT (one port per concurrent
# run; a port always leads to one server namespace).  Logs go to
# $NETNS_TMP/TAG.server and TAG.client; the pids are left in WAN_SPID and
# WAN_CPID.
declare -gA WAN_BRIDGE=()
# shellcheck disable=SC2034 # WAN_SPID, WAN_CPID are for the caller
wan_start() {
	local srv=$1 cli=$2 tag=$3 port=$4 conf=$5

	shift 5
	wan_meshperf "$srv" server "$tag" "$conf" --server --port "$port" "$@"
	WAN_SPID=$NETNS_LAST_PID
	netns_wait_listen "$srv" "$port" 10 ||
		netns_die "$tag: meshperf server in $srv did not listen"
	if [ -z "${WAN_BRIDGE[$cli:$port]:-}" ]; then
		netns_tcp_bridge "$cli" "$port" "$srv" "$port"
		WAN_BRIDGE[$cli:$port]=$srv
	elif [ "${WAN_BRIDGE[$cli:$port]}" != "$srv" ]; then
		netns_die "$tag: bootstrap port $port of $cli leads to ${WAN_BRIDGE[$cli:$port]}"
	fi
	wan_meshperf "$cli" client "$tag" "$conf" --client 127.0.0.1 \
		--port "$port" "$@"
	WAN_CPID=$NETNS_LAST_PID
}

# wan_end PID LIMIT_S: waits for PID at most LIMIT_S seconds; sets WAN_RC
# (its status; 124 after killing it at the limit) and WAN_END (when it
# ended, wan_now_ms).
# shellcheck disable=SC2034 # WAN_RC, WAN_END are for the caller
wan_end() {
	local pid=$1 deadline=$((SECONDS + $2))

	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			WAN_RC=124
			WAN_END=$(wan_now_ms)
			return 0
		fi
		sleep 0.05
	done
	WAN_END=$(wan_now_ms)
	WAN_RC=0
	wait "$pid" || WAN_RC=$?
}

# wan_rx NS IF: bytes interface IF of namespace NS has received.
wan_rx() {
	nsx "$1" cat "/sys/class/net/$2/statistics/rx_bytes"
}

# wan_wait_rx NS IF BYTES LIMIT_S TAG: until IF in NS has received BYTES
# more than when called (run TAG's transfer is under way); fails when it
# takes longer than LIMIT_S or when one of its processes (WAN_SPID,
# WAN_CPID) ends first.
wan_wait_rx() {
	local n=$1 dev=$2 want deadline=$((SECONDS + $4)) tag=$5 pid

	want=$(($(wan_rx "$n" "$dev") + $3))
	while [ "$(wan_rx "$n" "$dev")" -lt "$want" ]; do
		for pid in "$WAN_SPID" "$WAN_CPID"; do
			kill -0 "$pid" 2>/dev/null ||
				wan_fail "$tag" "$tag: a meshperf process ended before the fault"
		done
		[ "$SECONDS" -lt "$deadline" ] ||
			wan_fail "$tag" "$tag: $n's $dev received less than $3 bytes in $4 s"
		sleep 0.02
	done
}

wan_show_logs() {
	local f

	for f in "$NETNS_TMP/$1".* "${@:2}"; do
		[ -f "$f" ] || continue
		echo "---- $(basename "$f") ----"
		tail -n 40 "$f"
	done
}

# wan_fail TAG MESSAGE [MORE_LOGS...]: the run's logs, then FAIL.
wan_fail() {
	wan_show_logs "$1" "${@:3}" >&2
	netns_die "$2"
}

# ---------------------------------------------------------------- faults

# wan_secs MS: MS as seconds for sleep (1500 -> 1.500).
wan_secs() {
	printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000))
}

# wan_link_down NS IF / wan_link_up NS IF [ROUTE...]: the link goes down
# and comes back.  A link that goes down loses the routes through it; each
# ROUTE ("DEST via GW") is put back when it comes up.
wan_link_down() {
	nsx "$1" ip link set dev "$2" down
}

wan_link_up() {
	local n=$1 dev=$2 r

	shift 2
	nsx "$n" ip link set dev "$dev" up
	for r in "$@"; do
		# shellcheck disable=SC2086 # "DEST via GW" is three words
		nsx "$n" ip route replace $r
	done
}

# wan_flap NS IF MS [ROUTE...]: as wan_link_down, MS later wan_link_up,
# in one process inside NS, so that the time between is MS and not what
# starting commands in a namespace costs on a busy host; prints "T_DOWN
# T_UP", when each took effect (wan_now_ms).
wan_flap() {
	local n=$1 dev=$2 ms=$3 out

	shift 3
	# shellcheck disable=SC2016 # expanded by the inner sh
	out=$(nsx "$n" sh -c '
		ip link set dev "$1" down || exit 1
		date +%s%3N
		sleep "$2"
		ip link set dev "$1" up || exit 1
		shift 2
		for r in "$@"; do ip route replace $r || exit 1; done
		date +%s%3N' sh "$dev" "$(wan_secs "$ms")" "$@" | paste -sd ' ')
	[[ $out =~ ^[0-9]+\ [0-9]+$ ]] || netns_die "$n: cannot flap $dev"
	echo "$out"
}

# wan_reset_for NS MS: for MS, router NS answers every TCP segment it
# forwards with a reset to its sender, both ways, as a middlebox that kills
# streams does (nftables; resets themselves pass: a host's answer to one).
# The rule matches while an element of a set lives, which the kernel
# expires after exactly MS, whatever the host's load makes of the commands
# around it.  Returns once the time is over and prints "T_ON T_OFF"
# (wan_now_ms): taken just before the element was added, and MS later.
wan_reset_for() {
	local n=$1 ms=$2 t0

	wan_nft_rules
	nsx "$n" nft list table inet wanfault >/dev/null 2>&1 ||
		nsx "$n" nft -f "$NETNS_TMP/wanfault.nft" ||
		netns_die "$n: cannot load the reset rules"
	t0=$(wan_now_ms)
	nsx "$n" nft add element inet wanfault on "{ tcp timeout ${ms}ms }" ||
		netns_die "$n: cannot switch the reset rule on"
	while [ "$(wan_now_ms)" -lt $((t0 + ms)) ]; do
		sleep 0.01
	done
	echo "$t0 $((t0 + ms))"
}

# wan_nft_rules: the ruleset of wan_reset_for in $NETNS_TMP/wanfault.nft.
wan_nft_rules() {
	cat >"$NETNS_TMP/wanfault.nft" <<NFT
table inet wanfault {
	set on {
		type inet_proto
		flags timeout
	}
	chain fault {
		type filter hook forward priority 0; policy accept;
		meta l4proto @on tcp flags & rst == 0 reject with tcp reset
	}
}
NFT
}

# wan_nft_works: nft is installed and can load the reset rules (SKIP
# otherwise, with why).
wan_nft_works() {
	local probe

	command -v nft >/dev/null || netns_skip "nft (nftables) is not installed"
	probe=$(ns nftprobe)
	ip netns add "$probe" || netns_die "cannot create $probe"
	NETNS_LIST+=("$probe")
	wan_nft_rules
	ip netns exec "$probe" nft -f "$NETNS_TMP/wanfault.nft" >/dev/null 2>&1 ||
		netns_skip "nftables cannot load 'reject with tcp reset' here"
}

# wan_strict_conntrack NS: NS's connection tracking stops picking up
# streams it did not see start (nf_conntrack_tcp_loose=0), as many
# firewalls do: after a flush every stream through NS is lost for good,
# so a flush is always an outage, never healed by the next segment.
wan_strict_conntrack() {
	nsx "$1" sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0 ||
		netns_die "$1: cannot set nf_conntrack_tcp_loose"
}

# wan_conntrack_flush NS: the connection tracking table of NS, emptied.
wan_conntrack_flush() {
	nsx "$1" conntrack -F >/dev/null 2>&1
}

# ---------------------------------------------------------------- checks

# wan_resumed FILE: how many INFO lines of FILE say a connection resumed.
wan_resumed() {
	grep -c 'INFO.*resumed' "$1" || true
}

# wan_check_ok TAG OUTAGES RC_CLIENT RC_SERVER [MORE_LOGS...]: both sides
# of run TAG ended well, verified every byte, warned of nothing and logged
# at least OUTAGES INFO lines with "resumed" each.
wan_check_ok() {
	local tag=$1 outages=$2 side rc n f

	for side in client server; do
		f=$NETNS_TMP/$tag.$side
		if [ "$side" = client ]; then rc=$3; else rc=$4; fi
		[ "$rc" -eq 0 ] ||
			wan_fail "$tag" "$tag: the $side failed (status $rc)" "${@:5}"
		grep -q "all checks passed" "$f" ||
			wan_fail "$tag" "$tag: the $side did not verify its transfers" "${@:5}"
		! grep -E "WARN|ERROR|ABORT" "$f" >&2 ||
			wan_fail "$tag" "$tag: the $side logged a warning or an error" "${@:5}"
		n=$(wan_resumed "$f")
		[ "$n" -ge "$outages" ] ||
			wan_fail "$tag" "$tag: the $side logged $n INFO lines with 'resumed', expected at least $outages" "${@:5}"
		grep -h 'INFO.*resumed' "$f" | head -n 4 | sed "s/^/$side: /"
	done
}

# wan_check_fail TAG SIDE RC T0 END LIMIT_MS REGEX: that side of run TAG
# failed cleanly (status RC: not 0, no signal, not meshperf's watchdog) by
# LIMIT_MS after T0 (END: when it ended), and its log matches REGEX.
wan_check_fail() {
	local tag=$1 side=$2 rc=$3 took=$(($5 - $4)) limit=$6 re=$7
	local f=$NETNS_TMP/$1.$2

	echo "$tag $side: exit status $rc, $took ms after the fault"
	[ "$rc" -ne 0 ] || wan_fail "$tag" "$tag: the $side succeeded despite the fault"
	netns_clean_failure "$rc" ||
		wan_fail "$tag" "$tag: the $side hung or died of a signal (status $rc)"
	! grep -q watchdog "$f" ||
		wan_fail "$tag" "$tag: the $side was stopped by meshperf's watchdog, not the plugin"
	[ "$took" -le "$limit" ] ||
		wan_fail "$tag" "$tag: the $side took $took ms to fail, limit $limit ms"
	grep -E -m 2 -- "$re" "$f" ||
		wan_fail "$tag" "$tag: the $side's log does not match: $re"
}

# wan_setup_ms FILE: how long the connects and accepts of the meshperf
# run that logged to FILE (with --json) took, in ms (its setup event)
wan_setup_ms() {
	python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{"event":"setup"'):
        print(json.loads(line)["setup_ms"])
        break
else:
    sys.exit("no setup event in " + sys.argv[1])
PY
}

# wan_setup_confs DIR [STREAMS]: DIR/clear.conf and DIR/auth.conf, tcp-xdc
# on the pair's link at its defaults (STREAMS streams where given), the
# second with a fresh key in DIR/key: the two configs of setup timings
wan_setup_confs() {
	local dir=$1 streams=${2:-} cf

	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' \
		>"$dir/key")
	for cf in clear auth; do
		{
			echo 'version = 1;'
			echo 'modules = [ "tcp-xdc" ];'
			[ "$cf" = clear ] || echo "auth_key_file = \"$dir/key\";"
			echo "tcp-xdc: { ifname = \"lan\";${streams:+ streams = $streams;} };"
		} >"$dir/$cf.conf"
	done
}

# wan_setup_run TAG PORT CONF [meshperf options...]: one meshperf pair
# across the pair topology, server in s, that only connects (one 8-byte
# message); both must end well.  Sets WAN_SETUP_MS to "CLIENT SERVER",
# each side's connects and accepts in ms.
# shellcheck disable=SC2034 # WAN_SETUP_MS is for the caller
wan_setup_run() {
	local tag=$1 port=$2 cf=$3 c s

	shift 3
	wan_start s c "$tag" "$port" "$cf" --json --no-latency --sizes 8 \
		--iters 1 "$@"
	wan_end "$WAN_CPID" 60
	[ "$WAN_RC" -eq 0 ] || wan_fail "$tag" "$tag: the client failed ($WAN_RC)"
	wan_end "$WAN_SPID" 30
	[ "$WAN_RC" -eq 0 ] || wan_fail "$tag" "$tag: the server failed ($WAN_RC)"
	c=$(wan_setup_ms "$NETNS_TMP/$tag.client") ||
		wan_fail "$tag" "$tag: the client logged no setup time"
	s=$(wan_setup_ms "$NETNS_TMP/$tag.server") ||
		wan_fail "$tag" "$tag: the server logged no setup time"
	WAN_SETUP_MS="$c $s"
}

# ------------------------------------------------------------- the path

# wan_iperf3 TAG STREAMS SECS OMIT [iperf3 client options...]: TCP from c to
# s over the pair, STREAMS streams for SECS seconds after OMIT seconds of
# ramp that are not counted (a long WAN's slow start); prints the
# receiver's Mbit/s, the JSON left in $NETNS_TMP/TAG.json.
wan_iperf3() {
	local tag=$1 streams=$2 secs=$3 omit=$4 port=5201 pid rc=0

	shift 4
	netns_spawn s "$NETNS_TMP/$tag.iperf3-server" iperf3 -s -1 -p "$port"
	pid=$NETNS_LAST_PID
	netns_wait_listen s "$port" 10 || netns_die "$tag: iperf3 -s did not start"
	timeout $((secs + omit + 30)) ip netns exec "$(ns c)" iperf3 \
		-c "${WAN_IP[s]}" -p "$port" -P "$streams" -t "$secs" \
		-O "$omit" -J "$@" >"$NETNS_TMP/$tag.json" || rc=$?
	netns_wait "$pid" 10 || true
	[ "$rc" -eq 0 ] || {
		tail -n 20 "$NETNS_TMP/$tag.json" >&2
		netns_die "$tag: iperf3 failed (status $rc)"
	}
	python3 -c 'import json, sys
print("%.1f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]
                ["bits_per_second"] / 1e6))' "$NETNS_TMP/$tag.json"
}
