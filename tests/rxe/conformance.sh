# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2154 # here (the script dir) is stage.sh's
#
# The conformance suite (tests/conformance, docs/testing-conformance.md) on
# Soft-RoCE, for each verbs module: rank 0 in rxn2 (rxe21, 10.77.12.2),
# rank 1 in rxn1 (rxe12), the bootstrap over the same link.  Each test of
# the suite is a check of its own, CONF_LOOPS loops (default 20, the bar;
# tools/run-tests runs fewer) with CONF_LATE_MS (when set) as the delay of
# the late tests.  Sourced
# by stage.sh, whose setup_env sets BUILD, PLUGIN, LOGDIR; needs the
# two-node mesh (net.sh up 2).

CONF_LOOPS=${CONF_LOOPS:-20}
CONF_MODULES=${CONF_MODULES:-ib-fabric rdma-mesh}

conf_driver() {
	local d=${CONF_DRIVER:-$BUILD/tests/conformance/nccl-conform}

	[ -x "$d" ] && echo "$d"
}

# check_conf MODULE TEST: both ranks pass TEST (or both skip it: 77).
check_conf() {
	local mod=$1 t=$2 tag="conf-$1-$2" drv port=$((18900 + RANDOM % 100))
	local p0 p1 r0=0 r1=0 bound side args

	drv=$(conf_driver) || { echo "no conformance driver in $BUILD"; return 77; }
	rxe_pair_conf "$mod" "$LOGDIR/$tag.conf"
	# watchdog of a loop; the check's own limit is far longer
	args=(--oob "10.77.12.2:$port" --plugin "$PLUGIN" --test "$t"
	      --loops "$CONF_LOOPS" --timeout 120 -v
	      ${CONF_LATE_MS:+--late-ms "$CONF_LATE_MS"})
	bound=$((CONF_LOOPS * 40 + 120))
	for side in 0 1; do
		local n=rxn2 host=rxn2
		[ "$side" = 1 ] && { n=rxn1; host=rxn1; }
		rxe_spawn "$n" "$LOGDIR/$tag.$side" env NCCL_MESH_HOSTNAME="$host" \
			NCCL_MESH_CONF="$LOGDIR/$tag.conf" \
			NCCL_MESH_MODULE_PATH="$BUILD/modules/$mod" \
			"$drv" --rank "$side" "${args[@]}"
		[ "$side" = 0 ] && p0=$RXE_LAST_PID || p1=$RXE_LAST_PID
		[ "$side" = 0 ] && { rxe_wait_listen rxn2 "$port" 30 || {
			echo "$tag: rank 0 did not listen on $port"
			tail -n 20 "$LOGDIR/$tag.0"
			return 1
		}; }
	done
	rxe_wait "$p1" "$bound" || r1=$?
	rxe_wait "$p0" 60 || r0=$?
	echo "$tag: rank 0 exit $r0, rank 1 exit $r1"
	grep -hE '^(PASS|FAIL|SKIP) ' "$LOGDIR/$tag.0" "$LOGDIR/$tag.1" |
		sed 's/^/    /' || true
	if [ "$r0" -eq 77 ] && [ "$r1" -eq 77 ]; then
		return 77
	fi
	if [ "$r0" -ne 0 ] || [ "$r1" -ne 0 ] ||
	   grep -qE 'AddressSanitizer|runtime error:' "$LOGDIR/$tag.0" "$LOGDIR/$tag.1"; then
		for side in 0 1; do
			echo "---- rank $side (last 40 lines) ----"
			tail -n 40 "$LOGDIR/$tag.$side"
		done
		return 1
	fi
}

check_conf_missing() {
	echo "no conformance driver (tests/conformance) in $BUILD"
	return 77
}

# conf_run_checks: every test of the suite for every verbs module, through
# stage.sh's check NAME LIMIT FUNC.
conf_run_checks() {
	local drv mod t tests

	if ! drv=$(conf_driver); then
		check "conformance on Soft-RoCE" 30 check_conf_missing || true
		return 0
	fi
	tests=$("$drv" --list | awk 'NF { print $1 }')
	for mod in $CONF_MODULES; do
		for t in $tests; do
			check "conformance $mod: $t, $CONF_LOOPS loops" \
				$((CONF_LOOPS * 40 + 240)) check_conf "$mod" "$t" || true
		done
	done
}
