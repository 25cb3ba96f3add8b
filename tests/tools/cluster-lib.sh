# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2154 # tmp and pids: the sourcing script's
# What the meshinfo --cluster tests on loopback share, sourced after they
# set tmp (a scratch folder) and pids (what they started):
#   cleanup     ends what they started (and the meshinfo under each
#               `timeout`), removes tmp; set as the EXIT trap here
#   free_port   a TCP port free on 127.0.0.1 (or $1) now
#   check NAME STATUS WHAT   PASS or FAIL, on FAIL the logs in tmp;
#               failures counts them

failures=0

cleanup() {
	local p

	for p in "${pids[@]}"; do
		pkill -KILL -P "$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"
}

check() {
	local name=$1 ok=$2 what=$3 f

	if [ "$ok" -eq 0 ]; then
		echo "PASS: $name: $what"
		return
	fi
	echo "FAIL: $name: $what"
	for f in "$tmp"/*.log "$tmp"/*.err; do
		[ -s "$f" ] || continue
		echo "---- $(basename "$f") ----"
		tail -n 40 "$f"
	done
	failures=$((failures + 1))
}
