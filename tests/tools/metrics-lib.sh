#!/bin/bash
# SPDX-License-Identifier: MIT
# What the metrics tests share: a strict reader of Prometheus's text
# exposition format (0.0.4), written here rather than trusted to a
# library, so that anything our text gets wrong fails the test.
#
#   prom check FILE            every line well-formed, HELP and TYPE at
#                              most once per name and before its samples,
#                              a family's samples together, no series
#                              twice, counters named *_total and whole
#                              numbers, every name nccl_mesh_*
#   prom get FILE NAME [L=V]...  the sum of the samples of NAME whose
#                              labels include every L=V; "none" when no
#                              sample matches
#
# prom_setup DIR writes the reader to DIR/prom.py first (a python of the
# test may import it: parse(path) -> (errors, samples), total(samples,
# name, labels)).
#
# metrics_test_setup: what every metrics test starts with: a scratch
# directory tmp (removed, and the processes in pids killed, on exit), the
# reader in it, no NCCL_MESH_* or NCCL_DEBUG from the caller, failures 0.
# metrics_loopback_setup BUILD SRC: that, for two meshperf processes of
# BUILD over loopback (tcp-xdc, files every 100 ms): meshperf and plugin.
# loopback_server FILE [TIMEOUT]: a meshperf server writing its metrics to
# FILE (a metrics_file pattern), in the background (pid server), until
# its port is in tmp/port.
# check STATUS WHAT: PASS or FAIL (with the tails of tmp/*.log) and counts.
# json_sum FIELD: the sum of FIELD of the meshperf client's results
# (tmp/client.json).
#
# For the tests of meshrelay's endpoint, with meshrelay, meshperf, plugin
# and RELAYS ("r1 127.0.0.2:PORT") set:
#   free_port ADDR         a TCP port nothing uses on ADDR now
#   relay_start LISTEN     meshrelay r1 on RELAYS' address, its metrics on
#                          LISTEN (ip:port), logging to tmp/r1.log, until
#                          the metrics port listens (pid r1)
#   relayed_server         a meshperf server that advertises only
#                          127.0.0.3, in the background (pid server),
#                          until its port is in tmp/port
#   relayed_client ARGS... its client, routed through r1, with meshperf
#                          ARGS, in the background (pid client); results
#                          in tmp/client.json

# shellcheck disable=SC2154  # meshrelay, meshperf, plugin: the test's
metrics_test_setup() {
	local v

	tmp=$(mktemp -d)
	pids=()
	failures=0
	trap metrics_test_cleanup EXIT
	prom_setup "$tmp"
	for v in $(compgen -e); do
		case $v in NCCL_MESH_*|NCCL_DEBUG) unset "$v" ;; esac
	done
}

metrics_loopback_setup() {
	meshperf=$1/tools/meshperf/meshperf
	plugin=$1/core/libnccl-net-mesh.so
	metrics_test_setup
	export NCCL_MESH_CONF=$2/tests/functional/loopback.conf
	export NCCL_MESH_MODULE_PATH=$1/modules/tcp-xdc
	export NCCL_MESH_METRICS_INTERVAL_MS=100
}

loopback_server() {
	rm -f "$tmp/port"
	NCCL_MESH_METRICS_FILE=$1 timeout "${2:-120}" \
		"$meshperf" --server --port 0 --port-file "$tmp/port" \
		--plugin "$plugin" >"$tmp/server.log" 2>&1 &
	server=$!
	pids+=("$server")
	port_file_wait
}

# port_file_wait: until a server wrote its port to tmp/port (10 s at most)
port_file_wait() {
	for _ in $(seq 100); do
		[ -s "$tmp/port" ] && return
		sleep 0.1
	done
}

# shellcheck disable=SC2317  # runs from the trap
metrics_test_cleanup() {
	local p

	for p in "${pids[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
}

check() {
	local f

	if [ "$1" -eq 0 ]; then
		echo "PASS: $2"
	else
		echo "FAIL: $2"
		for f in "$tmp"/*.log; do
			echo "---- $(basename "$f") ----"
			grep -a -v "^\[" "$f" | tail -n 20
		done
		failures=$((failures + 1))
	fi
}

free_port() {
	python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"
}

relay_start() {
	local relay=${RELAYS#r1 } port=${1##*:}

	NCCL_DEBUG=INFO NCCL_MESH_RELAY_NAME=r1 \
		NCCL_MESH_RELAY_PORT=${relay##*:} \
		NCCL_MESH_RELAY_RELAYS="$RELAYS" NCCL_MESH_METRICS_LISTEN=$1 \
		"$meshrelay" >"$tmp/r1.log" 2>&1 &
	r1=$!
	pids+=("$r1")
	for _ in $(seq 100); do
		ss -Htln "sport = :$port" | grep -q . && return
		sleep 0.1
	done
}

relayed_server() {
	rm -f "$tmp/port"
	NCCL_MESH_RELAY_NAME=d NCCL_MESH_RELAY_RELAYS="$RELAYS" \
		NCCL_MESH_ADVERTISE_ADDRS=127.0.0.3 \
		NCCL_MESH_ADVERTISE_LOCAL=false \
		timeout 120 "$meshperf" --server --port 0 --port-file "$tmp/port" \
		--plugin "$plugin" >"$tmp/server.log" 2>&1 &
	server=$!
	pids+=("$server")
	port_file_wait
}

relayed_client() {
	NCCL_MESH_RELAY_NAME=c NCCL_MESH_RELAY_RELAYS="$RELAYS" \
		NCCL_MESH_RELAY_ROUTES="127.0.0.3 via r1" \
		timeout 100 "$meshperf" --client 127.0.0.1 \
		--port "$(cat "$tmp/port")" --plugin "$plugin" --no-latency \
		--json "$@" >"$tmp/client.json" 2>"$tmp/client.log" &
	client=$!
	pids+=("$client")
}

json_sum() {
	python3 -c 'import json,sys
print(sum(r[sys.argv[1]] for r in map(json.loads, open(sys.argv[2]))
          if r.get("event") == "result"))' "$1" "$tmp/client.json"
}

prom_setup() {
	prom_py=$1/prom.py
	cat >"$prom_py" <<'PY'
import re
import sys

NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
LABEL = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*')


def value_of(text):
    if text in ('+Inf', '-Inf', 'NaN'):
        return float(text)
    if not re.fullmatch(r'[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?', text):
        raise ValueError('value %r' % text)
    return float(text)


def label_value(line, i):
    """A quoted value from line[i] (the opening quote): (value, next)."""
    if line[i:i + 1] != '"':
        raise ValueError('label value without its quote')
    out, i = [], i + 1
    while i < len(line):
        c = line[i]
        if c == '"':
            return ''.join(out), i + 1
        if c == '\\':
            esc = line[i + 1:i + 2]
            if esc not in ('\\', '"', 'n'):
                raise ValueError('escape \\%s' % esc)
            out.append('\n' if esc == 'n' else esc)
            i += 2
            continue
        if c == '\n':
            raise ValueError('newline in a label value')
        out.append(c)
        i += 1
    raise ValueError('label value not closed')


def sample(line):
    m = NAME.match(line)
    if not m:
        raise ValueError('no metric name')
    name, i, labels = m.group(0), m.end(), {}
    if line[i:i + 1] == '{':
        i += 1
        while line[i:i + 1] != '}':
            m = LABEL.match(line, i)
            if not m or line[m.end():m.end() + 1] != '=':
                raise ValueError('bad label at %d' % i)
            key = m.group(0)
            if key in labels:
                raise ValueError('label %s twice' % key)
            labels[key], i = label_value(line, m.end() + 1)
            if line[i:i + 1] == ',':
                i += 1
            elif line[i:i + 1] != '}':
                raise ValueError('bad label list at %d' % i)
        i += 1
    rest = line[i:]
    if not rest.startswith(' '):
        raise ValueError('no space before the value')
    parts = rest[1:].split(' ')
    if len(parts) not in (1, 2):
        raise ValueError('trailing fields')
    val = value_of(parts[0])
    if len(parts) == 2 and not re.fullmatch(r'-?\d+', parts[1]):
        raise ValueError('bad timestamp')
    return name, labels, val, parts[0]


def parse(path):
    text = open(path, encoding='utf-8').read()
    errors, samples = [], []
    if text and not text.endswith('\n'):
        errors.append('the text does not end with a newline')
    helps, types, seen, done_families = {}, {}, set(), set()
    current = None
    for n, line in enumerate(text.split('\n')[:-1], 1):
        try:
            if line.startswith('# HELP ') or line.startswith('# TYPE '):
                kind, body = line[2:6], line[7:]
                name, _, rest = body.partition(' ')
                if not NAME.fullmatch(name):
                    raise ValueError('bad name %r' % name)
                table = helps if kind == 'HELP' else types
                if name in table:
                    raise ValueError('%s of %s twice' % (kind, name))
                if name in done_families or current == name:
                    raise ValueError('%s of %s after its samples'
                                     % (kind, name))
                if kind == 'TYPE' and rest not in (
                        'counter', 'gauge', 'histogram', 'summary',
                        'untyped'):
                    raise ValueError('type %r' % rest)
                if kind == 'HELP' and re.search(r'\\[^\\n]', rest):
                    raise ValueError('bad escape in HELP')
                table[name] = rest
                continue
            if line.startswith('#') or not line.strip():
                raise ValueError('not a sample, HELP or TYPE')
            name, labels, val, raw = sample(line)
            if name != current:
                if name in done_families:
                    raise ValueError('samples of %s not together' % name)
                if current:
                    done_families.add(current)
                current = name
            key = (name, tuple(sorted(labels.items())))
            if key in seen:
                raise ValueError('series twice')
            seen.add(key)
            if not name.startswith('nccl_mesh_'):
                raise ValueError('name without nccl_mesh_')
            if name not in types or name not in helps:
                raise ValueError('%s has no TYPE or HELP before it' % name)
            if types[name] == 'counter' and (
                    not name.endswith('_total') or
                    not re.fullmatch(r'\d+', raw)):
                raise ValueError('counter %s: a name in _total, a whole '
                                 'number' % name)
            samples.append((name, labels, val))
        except ValueError as e:
            errors.append('%s:%d: %s: %r' % (path, n, e, line))
    return errors, samples


def total(samples, metric, want):
    """The sum of metric's samples with every label of want; None: none."""
    hits = [v for name, labels, v in samples if name == metric and
            all(labels.get(k) == x for k, x in want.items())]
    return sum(hits) if hits else None


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    errors, samples = parse(path)
    if cmd == 'check':
        for e in errors:
            print(e)
        sys.exit(1 if errors else 0)
    if errors:
        print('unparsable: ' + errors[0], file=sys.stderr)
        sys.exit(2)
    got = total(samples, sys.argv[3],
                dict(a.split('=', 1) for a in sys.argv[4:]))
    print('none' if got is None else '%d' % got)


if __name__ == '__main__':
    main()
PY
}

prom() {
	python3 "$prom_py" "$@"
}
