# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2154 # here (the script dir) is stage.sh's
#
# Orderly close and peer death of the verbs modules (ib-fabric, rdma-mesh),
# for real on the two-node rxe mesh (net.sh up 2: rxn1 with rxe12 at
# 10.77.12.1, rxn2 with rxe21 at 10.77.12.2).  Sourced by stage.sh,
# whose setup_env sets BUILD, PLUGIN, LOGDIR; lib.sh gives rxe_spawn and
# rxe_wait.  The checks:
#
#   check_close_loop MODULE [eager]
#       tests/rxe/close_driver in both nodes: each connects to the other
#       and accepts from it, sends 12 messages (0 B .. 1 MiB) and receives
#       12, and closes each comm the moment its own last request is done:
#       the send comm while the peer still receives (its FIFO writes and
#       credits still coming), the recv comm with 2 more receives posted
#       (the peer's last write may still be in flight).  CLOSE_ITERS
#       connections in a row (default 20) over one listen comm each, every
#       byte and size verified.  Both must succeed, and neither may log a
#       WARN: an orderly close with nothing owed is no error.  "eager"
#       runs it with max_recvs 1, so small messages take the eager path
#       and its credits.  "lag" (driver -l): each side waits for the
#       peer's send comm to be closed, then posts 2 more receives (their
#       FIFO writes now head for QPs that are gone) and tests nothing for
#       CLOSE_LAG_MS, longer than the QP's retry time: the error of those
#       writes is in by then and must not fail the receives already done.
#       Then the first extra receive, which nothing was sent into, must
#       fail its test() within 5 s with the peer-closed reason (the close
#       notice, not a timeout); that is the only WARN allowed.
#   check_close_kill MODULE a|b
#       the same driver with -k (1 MiB messages both ways, endlessly); once
#       data flows, the given side is killed (SIGKILL: no close).  The
#       survivor must fail a test() within CLOSE_KILL_BOUND seconds with
#       a WARN line naming the comm and the peer's death.
#
# The driver is $BUILD/tests/rxe/close_driver (tests/rxe/meson.build builds
# it; the guest has no compiler).  CLOSE_PLUGIN and
# CLOSE_MODULES (the directory holding <module>/mesh-<module>.so) run the
# checks against another build, e.g. an older one to see them fail.
# CLOSE_LOG=trace gives the drivers' logs the plugin's TRACE lines (a
# repair's steps and counts).

CLOSE_ITERS=${CLOSE_ITERS:-20}
CLOSE_BOUND=${CLOSE_BOUND:-240}
# The killed peer's kernel closes its side channel, which the survivor
# takes for its death at once (docs/modules/ib-fabric.md); where that
# were missed, a comm with no completion for 1 s probes the peer and
# fails when the probe is unanswered 10 s on (outage_ms 0), or its QPs
# fail: about 12 s.  The survivor gets five times that, for a loaded
# emulated guest; the driver's own limit (-t 120, no progress) lies well
# beyond, and the WARN checked names the peer's death as the cause.
CLOSE_PEER_DEAD_S=12
CLOSE_KILL_BOUND=${CLOSE_KILL_BOUND:-$((5 * CLOSE_PEER_DEAD_S))}
CLOSE_LAG_MS=${CLOSE_LAG_MS:-2000}

# close_driver_path: the driver's path; fails when the build lacks it.
close_driver_path() {
	local d=${CLOSE_DRIVER:-$BUILD/tests/rxe/close_driver}

	[ -x "$d" ] || { echo "no close driver at $d (build it)" >&2; return 1; }
	echo "$d"
}

# close_spawn TAG MODULE SIDE NS HOST DIR [env words] -- [driver args]
close_spawn() {
	local tag=$1 mod=$2 side=$3 ns=$4 host=$5 dir=$6 envw=() drv

	shift 6
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		envw+=("$1")
		shift
	done
	shift
	drv=$(close_driver_path) || return 1
	rxe_spawn "$ns" "$LOGDIR/$tag.$side" env NCCL_MESH_HOSTNAME="$host" \
		NCCL_MESH_CONF="$LOGDIR/$tag.conf" NCCL_MESH_LOG="${CLOSE_LOG:-info}" \
		NCCL_MESH_MODULE_PATH="${CLOSE_MODULES:-$BUILD/modules}/$mod" \
		"${envw[@]}" "$drv" "${CLOSE_PLUGIN:-$PLUGIN}" "$side" "$dir" "$@"
}

# close_env MODULE [eager|lag]: VAR=value words for both sides.
close_env() {
	local var

	var=NCCL_MESH_$(echo "$1" | tr 'a-z-' 'A-Z_')_MAX_RECVS
	[ "${2:-}" = eager ] && echo "$var=1"
	return 0
}

close_show() {
	local side

	for side in a b; do
		echo "---- $1 $side (last 40 lines) ----"
		tail -n 40 "$LOGDIR/$1.$side" 2>/dev/null || true
	done
}

check_close_loop() {
	local mod=$1 mode=${2:-} tag="close-$1${2:+-$2}" dir pa pb ra=0 rb=0 rc=0
	local envw t0=$SECONDS side iters=$CLOSE_ITERS args=() ok_warn='^$' n

	read -ra envw <<<"$(close_env "$mod" "$mode")"
	if [ "$mode" = lag ]; then
		# each connection waits out the lag: fewer of them
		iters=$(((CLOSE_ITERS + 3) / 4))
		args=(-l "$CLOSE_LAG_MS")
		ok_warn='NCCL WARN .*recv comm [0-9]+ from [^ ]+: the peer closed the connection without sending into a posted receive'
	fi
	dir=$LOGDIR/$tag.dir
	rm -rf "$dir"
	mkdir -p "$dir"
	rxe_pair_conf "$mod" "$LOGDIR/$tag.conf"
	close_spawn "$tag" "$mod" a rxn1 rxn1 "$dir" "${envw[@]}" -- \
		-i "$iters" -t 60 "${args[@]}" || return 1
	pa=$RXE_LAST_PID
	close_spawn "$tag" "$mod" b rxn2 rxn2 "$dir" "${envw[@]}" -- \
		-i "$iters" -t 60 "${args[@]}" || return 1
	pb=$RXE_LAST_PID
	rxe_wait "$pa" "$CLOSE_BOUND" || ra=$?
	rxe_wait "$pb" 30 || rb=$?
	echo "$tag: $iters connections each way; exit a=$ra b=$rb after $((SECONDS - t0)) s"
	for side in a b; do
		grep -E "^$side: (OK|FAIL|STUCK)" "$LOGDIR/$tag.$side" |
			sed 's/^/    /' || true
		grep -q "^$side: OK $iters iterations" "$LOGDIR/$tag.$side" ||
			rc=1
		if grep -E 'NCCL WARN|AddressSanitizer|runtime error:' \
			"$LOGDIR/$tag.$side" | grep -vE "$ok_warn"; then
			echo "$tag: side $side logged a warning (an orderly close is no error)"
			rc=1
		fi
	done
	if [ "$mode" = lag ]; then
		for side in a b; do
			n=$(grep -cE "^$side: iteration [0-9]+: the unsent receive failed" \
				"$LOGDIR/$tag.$side" || true)
			grep -E "^$side: iteration [0-9]+: the unsent receive failed" \
				"$LOGDIR/$tag.$side" | tail -n 1 | sed 's/^/    /'
			[ "$n" -eq "$iters" ] || {
				echo "$tag: side $side saw $n unsent receives fail, expected $iters"
				rc=1
			}
		done
	fi
	grep -hE 'recv comm [0-9]+ from .*eager up to [0-9]+ bytes' "$LOGDIR/$tag.b" | head -n 1 |
		sed 's/^/    /' || true
	if [ "$mode" = eager ] &&
	   ! grep -qE 'recv comm [0-9]+ from .*eager up to 1024 bytes' \
		"$LOGDIR/$tag.b"; then
		echo "$tag: the eager path was not taken"
		rc=1
	fi
	[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] || rc=1
	[ "$rc" -eq 0 ] || close_show "$tag"
	return "$rc"
}

check_close_kill() {
	local mod=$1 victim=$2 tag="close-kill-$1-$2" dir pa pb pv ps rs=0
	local survivor t0 waited=0 rc=0

	survivor=a
	[ "$victim" = a ] && survivor=b
	dir=$LOGDIR/$tag.dir
	rm -rf "$dir"
	mkdir -p "$dir"
	rxe_pair_conf "$mod" "$LOGDIR/$tag.conf"
	close_spawn "$tag" "$mod" a rxn1 rxn1 "$dir" -- -k -t 120 || return 1
	pa=$RXE_LAST_PID
	close_spawn "$tag" "$mod" b rxn2 rxn2 "$dir" -- -k -t 120 || return 1
	pb=$RXE_LAST_PID
	pv=$pa
	ps=$pb
	[ "$victim" = b ] && { pv=$pb; ps=$pa; }
	# both must be moving data before the kill
	until grep -q "^a: transferring" "$LOGDIR/$tag.a" 2>/dev/null &&
	      grep -q "^b: transferring" "$LOGDIR/$tag.b" 2>/dev/null; do
		if [ "$waited" -ge 600 ] || ! kill -0 "$pa" 2>/dev/null ||
		   ! kill -0 "$pb" 2>/dev/null; then
			echo "$tag: the transfer never started"
			close_show "$tag"
			return 1
		fi
		sleep 0.2
		waited=$((waited + 1))
	done
	sleep 1
	kill -KILL "$pv"
	t0=$SECONDS
	rxe_wait "$ps" "$CLOSE_KILL_BOUND" || rs=$?
	echo "$tag: $victim killed mid-transfer; $survivor exited $rs after $((SECONDS - t0)) s"
	case $rs in
	1) ;;
	124) echo "$tag: the survivor still ran after $CLOSE_KILL_BOUND s"; rc=1 ;;
	*) echo "$tag: the survivor exited $rs, expected 1 (a failed call)"; rc=1 ;;
	esac
	grep -E "^$survivor: FAIL" "$LOGDIR/$tag.$survivor" | sed 's/^/    /' || true
	grep -qE "^$survivor: FAIL: test" "$LOGDIR/$tag.$survivor" || {
		echo "$tag: the survivor's failure did not come from test()"
		rc=1
	}
	if ! grep -E 'NCCL WARN .*(send|recv) comm [0-9]+ (to|from) [^ ]+ .*(work completion error|no answer from the peer|closed)' \
		"$LOGDIR/$tag.$survivor" | sed 's/^/    /' | grep .; then
		echo "$tag: the survivor logged no reason naming the comm"
		rc=1
	fi
	[ "$rc" -eq 0 ] || close_show "$tag"
	return "$rc"
}

# close_run_checks: every close check through the sourcing script's
# check NAME LIMIT FUNC, for both verbs modules.
close_run_checks() {
	local mod

	for mod in ib-fabric rdma-mesh; do
		check "$mod close: right after completion, both ways, $CLOSE_ITERS connections" \
			"$((CLOSE_BOUND + 60))" check_close_loop "$mod" || true
		check "$mod close: the same on the eager path" \
			"$((CLOSE_BOUND + 60))" check_close_loop "$mod" eager || true
		check "$mod close: receiver lagging behind a closed sender" \
			"$((CLOSE_BOUND + 60))" check_close_loop "$mod" lag || true
		check "$mod close: b killed mid-transfer fails a's test" 240 \
			check_close_kill "$mod" b || true
		check "$mod close: a killed mid-transfer fails b's test" 240 \
			check_close_kill "$mod" a || true
	done
}
