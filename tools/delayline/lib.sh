# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shell helpers for the tiers that start a delay line (tests/netns/lib.sh,
# tests/gpu/wan/topo.sh); sourced, not run.

# delayline_up LOG PID: waits, 10 s at most, for the line whose log is LOG
# and whose process (or the shell that starts it) is PID to say it is up.
# Returns 1, its log on stderr, when it ended first or did not in time.
delayline_up() {
	local log=$1 pid=$2

	for _ in $(seq 200); do
		grep -q ' up, ' "$log" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	grep -q ' up, ' "$log" 2>/dev/null && return 0
	cat "$log" >&2
	return 1
}
