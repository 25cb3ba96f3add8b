# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2154 # here (the script dir) is stage.sh's
#
# ib-fabric's error paths, provoked for real on the two-node rxe mesh
# (rxn2 server at 10.77.12.2, rxn1 client at 10.77.12.1).  Sourced by
# stage.sh, whose setup_env sets MESHPERF, PLUGIN, MODULE_PATH, LOGDIR.
#
# Every check runs one meshperf pair that must fail, and fail well: both
# processes exit 1 (meshperf's failure status, so no crash, signal or
# watchdog) within ERR_BOUND seconds of the client's start, no sanitizer
# or crash report is in their logs, and the plugin's own error line says
# what went wrong and with which peer.
#
#   oversize send      the client sends 4 KiB more than the server posted
#                      (meshperf --fault oversize): isend fails, EMSGSIZE
#   completion error   the server deregisters its receive buffer once its
#                      receives are posted (--fault dereg-recv): the
#                      client's RDMA writes meet a stale rkey and fail
#                      with a work completion error
#   eager oversize     receives of 256 bytes on the eager path (max_recvs
#                      1), so they announce nothing; the client sends
#                      4 KiB more: no FIFO entry will come, the receiver's
#                      credit shows the receive was posted small, and the
#                      isend fails with EMSGSIZE instead of waiting
#   eager message too big for its receive: the same receives, messages
#                      8 bytes longer (--fault oversize-small), still eager:
#                      the receiver's test fails naming both sizes
#   GID types differ   one host uses a RoCE v1 GID (per-host gid_index),
#                      the other RoCE v2: the acceptor refuses before any
#                      queue pair goes to RTR, the connector logs why.
#                      The guest kernel's rxe lists RoCE v2 GIDs only, so
#                      the v1 host reads its GID table from a copy that
#                      adds the v1 twin a NIC with both RoCE versions lists
#                      (ib-fabric's sysfs_root); its device stays the real
#                      rxe device.

# Seconds both processes get to exit after the client starts: a run takes
# 1 to 3 s, the rest is room for a loaded host.  meshperf's own --timeout
# is longer, so a plugin that hangs instead of failing is caught here (or
# by "no progress for" in its log) and not taken for a clean failure.
ERR_BOUND=${ERR_BOUND:-60}
ERR_MP_TIMEOUT=90
ERR_PORT=18640
ERR_SERVER_ARGS=()
ERR_ENV=()	# VAR=value words for both sides

# err_pair TAG [client args]: one meshperf run rxn2 (server) <- rxn1
# (client) with CONF.  Sets ERR_SRC and ERR_CRC (exit statuses, 124 when
# killed at the bound) and ERR_SECS (client start to both gone).
err_pair() {
	local tag=$1 port=$((ERR_PORT + RANDOM % 50)) spid cpid t0 left

	shift
	ERR_SRC=0
	ERR_CRC=0
	rxe_spawn rxn2 "$LOGDIR/$tag.server" env "${ERR_ENV[@]}" NCCL_MESH_HOSTNAME=rxn2 \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_PATH" \
		"$MESHPERF" --server --bind 10.77.12.2 --port "$port" \
		--plugin "$PLUGIN" --json --verbose "${ERR_SERVER_ARGS[@]}"
	spid=$RXE_LAST_PID
	if ! rxe_wait_listen rxn2 "$port" 30; then
		echo "$tag: meshperf server in rxn2 did not listen on $port"
		mp_show_logs "$tag"
		return 1
	fi
	t0=$SECONDS
	rxe_spawn rxn1 "$LOGDIR/$tag.client" env "${ERR_ENV[@]}" NCCL_MESH_HOSTNAME=rxn1 \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_PATH" \
		"$MESHPERF" --client 10.77.12.2 --port "$port" \
		--plugin "$PLUGIN" --json --verbose --timeout "$ERR_MP_TIMEOUT" "$@"
	cpid=$RXE_LAST_PID
	rxe_wait "$cpid" "$ERR_BOUND" || ERR_CRC=$?
	left=$((ERR_BOUND - (SECONDS - t0)))
	rxe_wait "$spid" "$((left > 1 ? left : 1))" || ERR_SRC=$?
	ERR_SECS=$((SECONDS - t0))
	echo "$tag: client exit $ERR_CRC, server exit $ERR_SRC, both gone after $ERR_SECS s"
}

# err_failed_cleanly TAG: both sides exited 1 within the bound, and
# neither log holds a crash, sanitizer or watchdog report.
err_failed_cleanly() {
	local tag=$1 side rc ok=0 bad

	for side in client server; do
		rc=$ERR_CRC
		[ "$side" = server ] && rc=$ERR_SRC
		case $rc in
		1) ;;
		0) echo "$tag: the $side succeeded; it must fail"; ok=1 ;;
		124) echo "$tag: the $side still ran after $ERR_BOUND s (hang)"; ok=1 ;;
		3) echo "$tag: the $side's watchdog ended a stuck plugin call"; ok=1 ;;
		*) echo "$tag: the $side exited $rc (crash or signal?)"; ok=1 ;;
		esac
		bad=$(grep -E 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|core dumped|Aborted|watchdog: stuck|no progress for' \
			"$LOGDIR/$tag.$side" || true)
		if [ -n "$bad" ]; then
			echo "$tag: the $side's log shows a crash or a hang:"
			printf '%s\n' "$bad" | sed 's/^/    /'
			ok=1
		fi
	done
	return "$ok"
}

# err_expect TAG SIDE WHAT REGEX: a line of SIDE's log matches (shown).
err_expect() {
	local tag=$1 side=$2 what=$3 lines

	lines=$(grep -E -- "$4" "$LOGDIR/$tag.$side" || true)
	if [ -z "$lines" ]; then
		echo "$tag: the $side logged no $what (/$4/)"
		return 1
	fi
	echo "$side, $what:"
	printf '%s\n' "$lines" | sed 's/^/    /'
}

# err_absent TAG SIDE WHAT REGEX: no line of SIDE's log matches.
err_absent() {
	local tag=$1 side=$2 what=$3 lines

	lines=$(grep -E -- "$4" "$LOGDIR/$tag.$side" || true)
	[ -z "$lines" ] && return 0
	echo "$tag: the $side logged $what:"
	printf '%s\n' "$lines" | sed 's/^/    /'
	return 1
}

# err_once TAG SIDE WHAT REGEX: exactly one line matches (an error is
# reported once, where it is decided).
err_once() {
	local n

	err_expect "$@" || return 1
	n=$(grep -cE -- "$4" "$LOGDIR/$1.$2")
	[ "$n" -eq 1 ] || {
		echo "$1: the $2 logged the $3 $n times, expected once"
		return 1
	}
}

# size_fault TAG FAULT SIZE SIDE CALL REGEX: the client runs --fault FAULT
# on messages of SIZE; SIDE's CALL (isend, test) must fail with one plugin
# line matching REGEX, the server must receive nothing, and both processes
# must fail cleanly.
size_fault() {
	local tag=$1 fault=$2 size=$3 side=$4 call=$5 rc=0

	CONF=$here/pair.conf
	err_pair "$tag" --fault "$fault" --sizes "$size" --iters 4 \
		--no-latency || rc=1
	[ "$rc" -eq 0 ] && { err_failed_cleanly "$tag" || rc=1; }
	[ "$rc" -eq 0 ] && {
		err_once "$tag" "$side" "size error" "$6" || rc=1
		err_expect "$tag" "$side" "failed $call" \
			"ERROR $call failed: ncclInvalidUsage" || rc=1
		err_absent "$tag" server "received data" '"event":"result"' ||
			rc=1
	}
	[ "$rc" -eq 0 ] || mp_show_logs "$tag"
	return "$rc"
}

# oversize_run TAG SIZE POSTED: the client sends SIZE + 4 KiB into
# receives of SIZE: its isend must fail naming the comm, the peer, its size
# and POSTED ("65536", "at most 1024").
oversize_run() {
	size_fault "$1" oversize "$2" client isend \
		"WARN .*send comm [0-9]+ to 10\.77\.12\.2:[0-9]+: message of $(($2 + 4096)) bytes \(tag [0-9]+\) exceeds the $3 bytes the peer posted"
}

check_error_oversize() {
	oversize_run err-oversize 65536 65536
}

# The same on the eager path (max_recvs 1): receives of 256 bytes announce
# nothing, so the isend must fail on the receiver's credit rather than
# wait for a FIFO entry that never comes.
check_error_eager_oversize() {
	ERR_ENV=(NCCL_MESH_IB_FABRIC_MAX_RECVS=1)
	oversize_run err-eager-oversize 256 "at most 1024" || return 1
	err_expect err-eager-oversize server "eager path" \
		'recv comm [0-9]+ from peer .*, eager up to 1024 bytes'
}

# An eager message 8 bytes longer than its 256-byte receive lands in a
# bounce slot; the receiver's test must fail naming both sizes (the
# client's isend succeeded), and the client must notice the server is gone.
check_error_eager_small() {
	ERR_ENV=(NCCL_MESH_IB_FABRIC_MAX_RECVS=1)
	size_fault err-eager-small oversize-small 256 server test \
		'WARN .*recv comm [0-9]+ from 10\.77\.12\.1:[0-9]+: message of 264 bytes \(tag [0-9]+\) exceeds the 256 bytes posted'
}

# The server deregisters its 4 x 1 MiB receive buffer right after posting
# the receive, before the data comes: the client's RDMA writes hit a stale
# rkey, and its test() must fail with a work completion error naming the
# peer (and not hang until a timeout).
check_error_completion() {
	local tag=err-wc rc=0

	CONF=$here/pair.conf
	ERR_SERVER_ARGS=(--fault dereg-recv)
	err_pair "$tag" --sizes 1M --mem 4M --iters 4 --no-latency || rc=1
	[ "$rc" -eq 0 ] && { err_failed_cleanly "$tag" || rc=1; }
	[ "$rc" -eq 0 ] && {
		err_expect "$tag" server "deregistration" \
			'fault injection: deregistering the receive buffer' || rc=1
		err_once "$tag" client "completion error" \
			'WARN .*send comm [0-9]+ to 10\.77\.12\.2:[0-9]+ on rxe12: work completion error: remote access error \(status [0-9]+' ||
			rc=1
		# the first call to see the completion fails: test(), or an
		# isend, which polls the completion queue before it posts
		err_expect "$tag" client "failed test or isend" \
			'ERROR (test|isend) failed: ncclRemoteError' || rc=1
		err_absent "$tag" server "a completed transfer" \
			'"event":"result"' || rc=1
	}
	grep -hE 'work completion error' "$LOGDIR/$tag.server" |
		sed 's/^/    server: /' || true
	[ "$rc" -eq 0 ] || mp_show_logs "$tag"
	return "$rc"
}

# err_gid_conf FILE V1HOST V1INDEX V1SYSFS: pair.conf's hosts, with host
# V1HOST on GID index V1INDEX of the table under V1SYSFS.
err_gid_conf() {
	local h dev extra

	{
		echo 'version = 1;'
		echo 'modules = [ "ib-fabric" ];'
		echo 'connect_timeout_ms = 60000;'
		echo 'hosts = ('
		for h in rxn1 rxn2; do
			dev=rxe12
			[ "$h" = rxn2 ] && dev=rxe21
			extra=""
			[ "$h" = "$2" ] &&
				extra=" gid_index = $3; sysfs_root = \"$4\";"
			printf '  { match = "%s"; ib-fabric: { hca = "=%s";%s }; }%s\n' \
				"$h" "$dev" "$extra" "$([ "$h" = rxn1 ] && echo ,)"
		done
		echo ');'
	} >"$1"
}

# err_v1_sysfs ROOT DEV: under ROOT, DEV's port 1 as sysfs shows it (state,
# link layer, rate, the GID table read with rxe_gid_table), plus a RoCE v1
# twin of the RoCE v2 IPv4 entry at the next free index, which it prints.
err_v1_sysfs() {
	local dir=$1/$2/ports/1 src=/sys/class/infiniband/$2/ports/1
	local f idx g t last=-1 v2

	v2=$(rxe_gid_index "$2") || return 1
	mkdir -p "$dir/gids" "$dir/gid_attrs/types" "$dir/gid_attrs/ndevs"
	for f in state phys_state link_layer rate; do
		cat "$src/$f" >"$dir/$f"
	done
	while read -r idx g t; do
		echo "$g" >"$dir/gids/$idx"
		echo "$t" >"$dir/gid_attrs/types/$idx"
		cat "$src/gid_attrs/ndevs/$idx" >"$dir/gid_attrs/ndevs/$idx"
		last=$idx
	done < <(rxe_gid_table "$2")
	idx=$((last + 1))
	cp "$dir/gids/$v2" "$dir/gids/$idx"
	cp "$dir/gid_attrs/ndevs/$v2" "$dir/gid_attrs/ndevs/$idx"
	echo "IB/RoCE v1" >"$dir/gid_attrs/types/$idx"
	echo "$idx"
}

# gid_refusal TAG V1HOST: V1HOST on RoCE v1, the other on v2.  The server
# (acceptor) refuses with the "GID types differ" reason before any QP of
# either side reaches RTR; the client (connector) logs that reason.
gid_refusal() {
	local tag=$1 v1host=$2 v1dev v2dev sysfs v1 v2 reason side rc=0

	v1dev=rxe12
	v2dev=rxe21
	if [ "$v1host" = rxn2 ]; then
		v1dev=rxe21
		v2dev=rxe12
	fi
	sysfs=$LOGDIR/$tag.sysfs
	rm -rf "$sysfs"
	v1=$(err_v1_sysfs "$sysfs" "$v1dev") || {
		echo "$v1dev: no RoCE v2 IPv4 GID to make a v1 twin of"
		return 1
	}
	v2=$(rxe_gid_index "$v2dev") || {
		echo "$v2dev: no RoCE v2 IPv4 GID"
		return 1
	}
	echo "$v1host: $v1dev GID $v1 (RoCE v1) from this table:"
	(cd "$sysfs/$v1dev/ports/1" && grep -H . gids/* gid_attrs/types/*) |
		sed 's/^/    /'
	echo "its peer: $v2dev GID $v2 (RoCE v2)"
	CONF=$LOGDIR/$tag.conf
	err_gid_conf "$CONF" "$v1host" "$v1" "$sysfs"
	err_pair "$tag" --sizes 4K --iters 4 --no-latency || rc=1
	[ "$rc" -eq 0 ] && { err_failed_cleanly "$tag" || rc=1; }
	[ "$rc" -eq 0 ] || { mp_show_logs "$tag"; return 1; }
	# the server is the acceptor; the reason names both roles
	if [ "$v1host" = rxn2 ]; then
		reason="GID types differ: the acceptor's GID $v1 on $v1dev is RoCE v1, the connector's GID $v2 is RoCE v2"
	else
		reason="GID types differ: the acceptor's GID $v2 on $v2dev is RoCE v2, the connector's GID $v1 is RoCE v1"
	fi
	err_once "$tag" server "refusal" \
		"WARN .*peer 10\.77\.12\.1:[0-9]+: refusing the connection: $reason" ||
		rc=1
	err_once "$tag" client "refusal reason" \
		"WARN .*peer 10\.77\.12\.2:[0-9]+ refused the connection: $reason" ||
		rc=1
	err_expect "$tag" client "failed connect" \
		'ERROR connect failed: ncclRemoteError' || rc=1
	err_expect "$tag" server "failed accept" \
		'ERROR accept failed: ncclRemoteError' || rc=1
	# No queue pair left INIT: no transition, no connection line.
	for side in client server; do
		err_absent "$tag" "$side" "a queue pair transition" \
			'queue pair [0-9]+ to (RTR|RTS)' || rc=1
		err_absent "$tag" "$side" "an established connection" \
			'(send|recv) comm [0-9]+ (to|from) peer |(send|recv) mesh[0-9]+: ib-fabric' ||
			rc=1
	done
	[ "$rc" -eq 0 ] || mp_show_logs "$tag"
	return "$rc"
}

check_error_gid_types() {
	local rc=0

	gid_refusal err-gid-v1-client rxn1 || rc=1
	gid_refusal err-gid-v1-server rxn2 || rc=1
	return "$rc"
}
