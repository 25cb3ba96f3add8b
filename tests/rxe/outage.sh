# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# Outages of the verbs modules' links (docs/modules/ib-fabric.md, "What
# survives what"), for real on Soft-RoCE.  Sourced by stage.sh (and by
# mesh.sh, whose cable-down check runs outage_bounce); needs lib.sh and
# close.sh (close_spawn, close_show, the close driver) and BUILD, PLUGIN,
# LOGDIR.
#
#   check_outage_link MODULE
#       the two-node mesh (net.sh up 2), its one link v12 down for 5 s
#       under traffic both ways: every QP of every connection fails, the
#       requests wait, and once the link is back the QPs are rebuilt over
#       the side channel (the bootstrap TCP crosses the same link) and the
#       traffic goes on, every byte verified.
#   check_outage_budget MODULE
#       the same with outage_ms 3000 and the link left down: both ends'
#       test() must fail within OUTAGE_BUDGET_BOUND seconds, with a WARN
#       naming the peer, the path and how long it was out past outage_ms.
#
# The traffic is tests/rxe/close_driver -k -s STOP: 1 MiB messages each
# way, each cut over the connection's QPs, verified byte by byte, for as
# long as the check needs (a transfer of fixed size might end before the
# outage does on a fast guest, or last minutes on a slow one); STOP ends
# it in order.  retry_cnt 3 makes QPs on a dead link fail as a hardware
# HCA's do: Soft-RoCE at retry_cnt 7 retries forever and would only stall.

OUTAGE_DOWN_S=5
OUTAGE_LIMIT_S=120
# outage_ms 3000 and the time an emulated guest takes to notice
OUTAGE_BUDGET_BOUND=${OUTAGE_BUDGET_BOUND:-40}
declare -gA OUTAGE_PID=()

# outage_tx NS DEV: bytes DEV has sent.
outage_tx() {
	ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}

# outage_tx_wait NS DEV FROM MIB PID LIMIT_S: until DEV has sent MIB MiB
# more than FROM bytes; fails when PID ends or after LIMIT_S.
outage_tx_wait() {
	local deadline=$((SECONDS + $6))

	until [ $(($(outage_tx "$1" "$2") - $3)) -ge $(($4 << 20)) ]; do
		kill -0 "$5" 2>/dev/null || return 1
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# outage_count TAG SIDE down|back PATH_RE: the side's lines of a path's
# outages (one per comm) or of its returns.
outage_count() {
	local what='down \('

	[ "$3" = back ] && what='back after [0-9]+ ms'
	grep -cE "comm [0-9]+ (to|from) .*: path $4 $what" \
		"$LOGDIR/$1.$2" || true
}

# outage_settled TAG PATH_RE: on both sides a comm logged the outage, and
# every outage logged has its return.
outage_settled() {
	local side d

	for side in a b; do
		d=$(outage_count "$1" "$side" down "$2")
		[ "$d" -ge 1 ] &&
			[ "$(outage_count "$1" "$side" back "$2")" -ge "$d" ] ||
			return 1
	done
}

# outage_start TAG MODULE CONF NS_A HOST_A NS_B HOST_B [VAR=value...]:
# the drivers a and b with traffic both ways, pids in OUTAGE_PID.
outage_start() {
	local tag=$1 mod=$2 dir=$LOGDIR/$1.dir

	shift 2
	rm -rf "$dir"
	mkdir -p "$dir"
	cp "$1" "$LOGDIR/$tag.conf"
	close_spawn "$tag" "$mod" a "$2" "$3" "$dir" "${@:6}" -- \
		-k -s "$dir/stop" -t "$OUTAGE_LIMIT_S" || return 1
	OUTAGE_PID[a]=$RXE_LAST_PID
	close_spawn "$tag" "$mod" b "$4" "$5" "$dir" "${@:6}" -- \
		-k -s "$dir/stop" -t "$OUTAGE_LIMIT_S" || return 1
	OUTAGE_PID[b]=$RXE_LAST_PID
}

# outage_warns TAG: the WARN lines of both sides (none expected).
outage_warns() {
	grep -hE 'NCCL WARN' "$LOGDIR/$1.a" "$LOGDIR/$1.b" 2>/dev/null || true
}

# outage_bounce TAG MODULE CONF NS_A HOST_A NS_B HOST_B LINK_NS LINK
# PATH_RE [VAR=value...]: traffic both ways; once LINK (in LINK_NS)
# carries data it goes down for OUTAGE_DOWN_S seconds and up again.  Once
# every comm that logged the outage of PATH_RE ("rxe12 -> 10\.77\.12\.2")
# logged its return and LINK carried 8 MiB again, the drivers stop.  Both
# must close in order with every byte verified and no WARN.
outage_bounce() {
	local tag=$1 mod=$2 lns=$8 link=$9 re=${10} rc=0 ra=0 rb=0 t0 b0 b1
	local b2 side deadline

	b0=$(outage_tx "$lns" "$link")
	outage_start "$tag" "$mod" "$3" "$4" "$5" "$6" "$7" "${@:11}" ||
		return 1
	t0=$SECONDS
	if ! outage_tx_wait "$lns" "$link" "$b0" 8 "${OUTAGE_PID[a]}" 120; then
		echo "$tag: no data over $link within 120 s"
		close_show "$tag"
		return 1
	fi
	echo "data flows after $((SECONDS - t0)) s: $link down for $OUTAGE_DOWN_S s"
	ip -n "$lns" link set "$link" down
	sleep "$OUTAGE_DOWN_S"
	ip -n "$lns" link set "$link" up
	b1=$(outage_tx "$lns" "$link")
	echo "$link up again after $((SECONDS - t0)) s"
	deadline=$((SECONDS + OUTAGE_LIMIT_S))
	until outage_settled "$tag" "$re" &&
	      [ $(($(outage_tx "$lns" "$link") - b1)) -ge $((8 << 20)) ]; do
		if [ "$SECONDS" -ge "$deadline" ] ||
		   ! kill -0 "${OUTAGE_PID[a]}" 2>/dev/null ||
		   ! kill -0 "${OUTAGE_PID[b]}" 2>/dev/null; then
			echo "$tag: the link is not back in use $((SECONDS - t0)) s in"
			rc=1
			break
		fi
		sleep 0.2
	done
	b2=$(outage_tx "$lns" "$link")
	echo "back in use after $((SECONDS - t0)) s: $link sent $(((b2 - b1) >> 20)) MiB since it came back"
	touch "$LOGDIR/$tag.dir/stop"
	rxe_wait "${OUTAGE_PID[a]}" 60 || ra=$?
	rxe_wait "${OUTAGE_PID[b]}" 30 || rb=$?
	echo "$tag: a exited $ra, b exited $rb after $((SECONDS - t0)) s"
	for side in a b; do
		grep -E "^$side: (OK|FAIL|STUCK)" "$LOGDIR/$tag.$side" |
			sed 's/^/    /' || true
		grep -qE "^$side: OK [0-9]+ messages sent, [0-9]+ received, every byte verified" \
			"$LOGDIR/$tag.$side" || rc=1
		grep -hE "comm [0-9]+ (to|from) .*: path $re (down|back after)" \
			"$LOGDIR/$tag.$side" | sed 's/^[ab] NCCL INFO /    /'
	done
	if [ -n "$(outage_warns "$tag")" ]; then
		echo "$tag: a side warned:"
		outage_warns "$tag" | sed 's/^/    /'
		rc=1
	fi
	[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] || rc=1
	[ "$rc" -eq 0 ] || close_show "$tag"
	return "$rc"
}

# The pair's one link: a total outage the connections wait out.
check_outage_link() {
	local mod=$1 var

	var=NCCL_MESH_$(echo "$mod" | tr 'a-z-' 'A-Z_')
	rxe_pair_conf "$mod" "$LOGDIR/outage-$mod.pair.conf"
	# whatever happens, the link is up for the checks after this one
	trap 'ip -n rxn1 link set v12 up 2>/dev/null; rxe_cleanup' EXIT
	outage_bounce "outage-$mod" "$mod" "$LOGDIR/outage-$mod.pair.conf" \
		rxn1 rxn1 rxn2 rxn2 rxn1 v12 'rxe(12|21) -> 10\.77\.12\.[12]' \
		"${var}_RETRY_CNT=3"
}

# The pair's one link down past outage_ms: both ends fail, and say why.
check_outage_budget() {
	local mod=$1 tag=budget-$1 var rc=0 ra=0 rb=0 t0 b0 side

	var=NCCL_MESH_$(echo "$mod" | tr 'a-z-' 'A-Z_')
	rxe_pair_conf "$mod" "$LOGDIR/$tag.pair.conf"
	trap 'ip -n rxn1 link set v12 up 2>/dev/null; rxe_cleanup' EXIT
	b0=$(outage_tx rxn1 v12)
	outage_start "$tag" "$mod" "$LOGDIR/$tag.pair.conf" rxn1 rxn1 \
		rxn2 rxn2 "${var}_RETRY_CNT=3" "${var}_OUTAGE_MS=3000" ||
		return 1
	if ! outage_tx_wait rxn1 v12 "$b0" 8 "${OUTAGE_PID[a]}" 120; then
		echo "$tag: no data over v12 within 120 s"
		close_show "$tag"
		return 1
	fi
	ip -n rxn1 link set v12 down
	t0=$SECONDS
	rxe_wait "${OUTAGE_PID[a]}" "$OUTAGE_BUDGET_BOUND" || ra=$?
	rxe_wait "${OUTAGE_PID[b]}" 10 || rb=$?
	echo "$tag: v12 down; a exited $ra, b exited $rb, $((SECONDS - t0)) s after"
	ip -n rxn1 link set v12 up
	if [ "$ra" -ne 1 ] || [ "$rb" -ne 1 ]; then
		echo "$tag: both must fail a call (exit 1) within $OUTAGE_BUDGET_BOUND s"
		rc=1
	fi
	for side in a b; do
		grep -E "^$side: (OK|FAIL|STUCK)" "$LOGDIR/$tag.$side" |
			sed 's/^/    /' || true
		if ! grep -E 'NCCL WARN .*(send|recv) comm [0-9]+ (to|from) 10\.77\.12\.[12]:[0-9]+: no path to the peer works: rxe(12|21) -> 10\.77\.12\.[12] out for [0-9]+ ms, past outage_ms 3000' \
			"$LOGDIR/$tag.$side" | head -n 1 | sed 's/^/    /' | grep .; then
			echo "$tag: side $side logged no failure past outage_ms naming the peer and the path"
			rc=1
		fi
	done
	[ "$rc" -eq 0 ] || close_show "$tag"
	return "$rc"
}

# outage_run_checks: both checks through the sourcing script's check NAME
# LIMIT FUNC, on the two-node mesh, for the module of the pair (ib-fabric).
outage_run_checks() {
	check "ib-fabric outage: the one link down 5 s under traffic both ways, every byte kept" \
		300 check_outage_link ib-fabric || true
	check "ib-fabric outage: the link down past outage_ms fails both ends, naming path and time" \
		180 check_outage_budget ib-fabric || true
}
