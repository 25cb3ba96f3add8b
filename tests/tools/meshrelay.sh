#!/bin/bash
# SPDX-License-Identifier: MIT
# meshrelay against small configs: one that does not enable the relay
# module (exit 2, naming the file), a broken one (the file:line error), bad
# usage (64); then, where the relay module is built, a relay on a free
# loopback port: it listens, prints its counters on SIGUSR1 and on its
# timer, and stops with status 0 on SIGTERM, its port closed.
#
# usage: meshrelay.sh MESHRELAY MODULES_BUILD_DIR
set -u

meshrelay=$1
modules=$2
tmp=$(mktemp -d)
pid=""
failed=0

# shellcheck disable=SC2317  # runs from the trap
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	failed=1
}

show() {
	echo "--- stdout:"; cat "$tmp/out"
	echo "--- stderr:"; cat "$tmp/err"
}

# Only what the test sets may steer the core.
for v in $(compgen -e); do
	case $v in NCCL_MESH_*|NCCL_DEBUG) unset "$v" ;; esac
done
export NCCL_MESH_MODULE_PATH=$modules/tcp-xdc:$modules/relay

# run CONF [args...]: meshrelay in the foreground; status in $rc.
run() {
	local conf=$1

	shift
	timeout 60 "$meshrelay" --config "$conf" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
}

# ---- a config without the relay module
cat >"$tmp/plain.conf" <<'EOF'
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lo"; };
EOF
run "$tmp/plain.conf"
want="meshrelay: the relay module is not enabled in $tmp/plain.conf (add \"relay\" to modules)"
if [ "$rc" != 2 ] || ! grep -qxF "$want" "$tmp/err"; then
	fail "no relay: want exit 2 and '$want', got exit $rc"; show
else
	echo "ok: no relay module -> exit 2"
fi

# ---- the relay enabled, but no module file for it on the path
cat >"$tmp/missing.conf" <<'EOF'
version = 1;
modules = [ "tcp-xdc", "relay" ];
tcp-xdc: { ifname = "lo"; };
EOF
# The path set is the whole search: only it is named as searched, so an
# installed relay module cannot stand in for the one of this build.
NCCL_MESH_MODULE_PATH=$modules/tcp-xdc run "$tmp/missing.conf"
want="module relay: not found (searched: $modules/tcp-xdc)"
if [ "$rc" != 1 ] || ! grep -qF "$want" "$tmp/err" ||
   ! grep -qF "meshrelay: the relay module failed" "$tmp/err"; then
	fail "relay module missing: want exit 1 and '$want', got exit $rc"
	show
else
	echo "ok: relay module missing -> exit 1"
fi

# ---- a relay module where the path does not point: beside the core
# (nccl-mesh/ next to the program), as an install puts one; the set path
# still wins, so the relay does not start
if [ -e "$modules/relay/mesh-relay.so" ]; then
	mkdir -p "$tmp/inst/nccl-mesh"
	cp "$meshrelay" "$tmp/inst/meshrelay"
	cp "$modules/relay/mesh-relay.so" "$tmp/inst/nccl-mesh/"
	NCCL_MESH_MODULE_PATH=$modules/tcp-xdc \
		meshrelay=$tmp/inst/meshrelay run "$tmp/missing.conf"
	if [ "$rc" != 1 ] || ! grep -qF "$want" "$tmp/err"; then
		fail "relay module beside the core, outside the path: want exit 1 and '$want', got exit $rc"
		show
	else
		echo "ok: a module outside the set path is not loaded"
	fi
	rm -rf "$tmp/inst"
fi

# ---- a broken config: its file and line
cat >"$tmp/broken.conf" <<'EOF'
version = 1;
modules = [ "tcp-xdc", "relay" ];
dc = ;
tcp-xdc: { ifname = "lo"; };
EOF
run "$tmp/broken.conf"
if [ "$rc" = 0 ] || ! grep -qF "$tmp/broken.conf:3:" "$tmp/err"; then
	fail "broken config: want non-zero and '$tmp/broken.conf:3:', got exit $rc"
	show
else
	echo "ok: broken config -> exit $rc naming $tmp/broken.conf:3"
fi

# ---- bad usage
usage_ok=1
for args in "--report-every 0" "--report-every x" "--no-such-option" "extra"; do
	# shellcheck disable=SC2086
	run "$tmp/plain.conf" $args
	if [ "$rc" != 64 ]; then
		fail "usage '$args': want exit 64, got $rc"; show; usage_ok=0
	fi
done
[ "$usage_ok" = 1 ] && echo "ok: bad usage -> exit 64"

# ---- a relay on loopback
if [ ! -e "$modules/relay/mesh-relay.so" ]; then
	echo "SKIP: the relay module is not built ($modules/relay/mesh-relay.so)"
	[ "$failed" = 0 ] && echo PASS || echo FAILED
	exit "$failed"
fi
if ! command -v ss >/dev/null; then
	echo "SKIP: a running relay: no ss (iproute2) to see its port"
	[ "$failed" = 0 ] && echo PASS || echo FAILED
	exit "$failed"
fi

listening() {
	ss -Htln "sport = :$1" | grep -q .
}

# shellcheck disable=SC2317  # called through wait_for
closed() {
	! listening "$1"
}

# A port nothing listens on now, outside Linux's ephemeral range (where
# outgoing connections of tests alongside could take it).
port=""
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 10000))
	if ! listening "$p"; then
		port=$p
		break
	fi
done
[ -n "$port" ] || { fail "no free port found"; exit 1; }

cat >"$tmp/relay.conf" <<EOF
version = 1;
modules = [ "tcp-xdc", "relay" ];
tcp-xdc: { ifname = "lo"; };
relay: {
  name = "t0";
  port = $port;
  members = [ "127.0.0.0/8" ];
};
EOF

# wait_for SECONDS COMMAND...: until the command succeeds.
wait_for() {
	local deadline=$((SECONDS + $1))

	shift
	until "$@"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

reports() {
	grep -c -- "^--- meshrelay report .* ($1) ---\$" "$tmp/out"
}

has_report() {
	[ "$(reports "$1")" -ge "${2:-1}" ]
}

# --once-report: starts, prints once, stops.
run "$tmp/relay.conf" --once-report
if [ "$rc" != 0 ] || ! has_report once; then
	fail "--once-report: want exit 0 and one report, got exit $rc"; show
else
	echo "ok: --once-report"
fi
wait_for 10 closed "$port" ||
	fail "--once-report left port $port listening"

NCCL_DEBUG=INFO "$meshrelay" --config "$tmp/relay.conf" --report-every 1 \
	>"$tmp/out" 2>"$tmp/err" &
pid=$!
if ! wait_for 20 listening "$port"; then
	fail "meshrelay does not listen on port $port"; show; exit 1
fi
echo "ok: listens on port $port"
kill -USR1 "$pid"
if wait_for 10 has_report "on request"; then
	echo "ok: SIGUSR1 prints a report"
else
	fail "no report after SIGUSR1"
fi
# The report has a body: the module's counters under the header.
if ! awk '/^--- meshrelay report/ { h = 1; next } h && NF { b = 1 }
	  END { exit !b }' "$tmp/out"; then
	fail "the report has no counters under its header"
fi
if wait_for 10 has_report periodic 2; then
	echo "ok: --report-every 1 prints reports"
else
	fail "no periodic reports"
fi
kill -TERM "$pid"
deadline=$((SECONDS + 20))
while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
	sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
	fail "meshrelay still runs 20 s after SIGTERM"
else
	wait "$pid"
	rc=$?
	pid=""
	if [ "$rc" != 0 ]; then
		fail "meshrelay exited $rc after SIGTERM"
	elif ! has_report "at exit"; then
		fail "no report at exit"
	else
		echo "ok: SIGTERM -> report, exit 0"
	fi
fi
listening "$port" && fail "port $port still listens after meshrelay stopped"
[ "$failed" = 0 ] || show
[ "$failed" = 0 ] && echo PASS || echo FAILED
exit "$failed"
