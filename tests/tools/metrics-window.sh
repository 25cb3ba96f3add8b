#!/bin/bash
# SPDX-License-Identifier: MIT
# tcp-xdc's copies of completed sends under a small memory_max: two
# meshperf processes over loopback (tcp-xdc, 4 streams, window set so that
# a send stream keeps copies at this round trip of microseconds), the
# process's budget 3 MiB, less than the 10 MiB its rings want.
#   limit   the transfers complete and verify; the client says once that
#           a stream got no ring; every sample of its metrics file while
#           data moves holds no more bytes of rings (nccl_mesh_window_bytes)
#           than the limit it reports (nccl_mesh_window_limit_bytes, 3 MiB),
#           no more kept than its rings hold, and rings there are
#
# usage: metrics-window.sh BUILD_DIR SOURCE_DIR
set -uo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
# shellcheck source=tests/tools/metrics-lib.sh
. "$src/tests/tools/metrics-lib.sh"
metrics_loopback_setup "$build" "$src"
export NCCL_MESH_TCP_XDC_STREAMS=4
export NCCL_MESH_TCP_XDC_WINDOW=8M
export NCCL_MESH_TCP_XDC_MEMORY_MAX=3M
limit=$((3 << 20))
# the system's: a per-user shim in front of it costs seconds a start here
py=python3
[ ! -x /usr/bin/python3 ] || py=/usr/bin/python3

# the client's file (glob $1), sampled every 20 ms until file $2 is
# there: one line a sample, "window kept limit" ("none" where a sample has
# no such series)
sample() {
	"$py" - "$prom_py" "$1" "$2" >"$tmp/samples" <<'PY' &
import glob, importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location('prom', sys.argv[1])
prom = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prom)
pattern, stop = sys.argv[2], sys.argv[3]
while not os.path.exists(stop):
    for path in glob.glob(pattern):
        try:
            errors, samples = prom.parse(path)
        except OSError:
            errors, samples = ['gone'], []
        if not errors:
            got = [prom.total(samples, n, {'module': 'tcp-xdc'}) for n in
                   ('nccl_mesh_window_bytes', 'nccl_mesh_kept_bytes',
                    'nccl_mesh_window_limit_bytes')]
            print(' '.join('none' if v is None else '%d' % v for v in got),
                  flush=True)
    time.sleep(0.02)
PY
	sampler=$!
	pids+=("$sampler")
}

case_limit() {
	local dir=$tmp/w ok=0 n over
	mkdir -p "$dir"
	loopback_server "$dir/s-%p.prom"
	sample "$dir/c-*.prom" "$tmp/stop"
	NCCL_MESH_METRICS_FILE="$dir/c-%p.prom" timeout 100 \
		"$meshperf" --client 127.0.0.1 --port "$(cat "$tmp/port")" \
		--plugin "$plugin" --no-latency --verbose --sizes 1M,16M \
		--iters 200 --budget 256M --mem 64M >"$tmp/client.log" 2>&1 &
	client=$!
	pids+=("$client")
	wait "$client" || ok=1
	wait "$server" || ok=1
	touch "$tmp/stop"
	wait "$sampler"
	grep -q "all checks passed" "$tmp/client.log" || ok=1
	n=$(grep -c "no room left for stream [0-9]*'s .* KiB of copies (memory_max 3 MiB" "$tmp/client.log")
	[ "$n" = 1 ] || ok=1
	# every sample: rings within the limit, kept within the rings; some
	# sample with rings in it, all with the limit said
	# (no window series: no send comm open yet, or any more)
	over=$(awk -v lim="$limit" '
		$3 != lim || ($1 == "none") != ($2 == "none") { bad++; next }
		$1 == "none" { next }
		$1 + 0 > lim || $2 + 0 > $1 + 0 { bad++ }
		$1 + 0 > 0 { held++ }
		END { print (NR && held ? 0 + bad : "no samples with rings") }' \
		"$tmp/samples")
	[ "$over" = 0 ] || ok=1
	check $ok "limit: verified, one line of no room ($n), $(wc -l <"$tmp/samples") samples, none over $limit bytes ($over bad), most held $(sort -n "$tmp/samples" | tail -n 1 | cut -d' ' -f1)"
	[ $ok -eq 0 ] || tail -n 5 "$tmp/samples"
}

case_limit
[ $failures -eq 0 ]
