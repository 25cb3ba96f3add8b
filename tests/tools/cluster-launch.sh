#!/bin/bash
# SPDX-License-Identifier: MIT
#
# meshinfo --cluster started as launchers start it: three processes on
# loopback that learn the rendezvous, their rank and the job's size from
# the environment alone, once each way:
#   torchrun   MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
#   mpirun     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (+ MASTER_*)
#   srun       SLURM_PROCID, SLURM_NTASKS (+ MASTER_*)
#   PMI        PMI_RANK, PMI_SIZE (+ MASTER_*)
# Each process is a host of its own (NCCL_MESH_HOSTNAME) advertising its
# own 127.0.0.2x over tcp-xdc on lo.  Every rank exits 0, and rank 0's
# JSON lists 3 hosts and 6 pairs, all connected, in the ranks given, and
# no host differing in config or plugin (bandwidth findings are left
# alone: loopback on a busy machine is no steady cable).
# Then the same through Open MPI's real mpirun where it is installed (SKIP
# printed for that part otherwise), and without any rendezvous: exit 2.
#
# usage: cluster-launch.sh MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT
set -euo pipefail

MESHINFO=$1
PLUGIN=$2
MODULE_DIR=$3
src=$4
check=$src/tests/tools/cluster_report.py
schema=$src/docs/meshinfo-cluster.schema.json
size=3

# only what each case sets may speak of a rendezvous
while read -r v; do
	unset "$v"
done < <(compgen -e | grep -E '^(MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*)$' || true)

tmp=$(mktemp -d)
pids=()
cleanup() {
	local pid

	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

export NCCL_MESH_CONF=$src/tests/functional/loopback.conf
export NCCL_MESH_MODULE_PATH=$MODULE_DIR
export NCCL_MESH_ADVERTISE_LOCAL=false
# short bursts: this checks the launchers, not the loopback's speed
args=(--cluster --plugin "$PLUGIN" --timeout 30 --burst-bytes 8M
      --json "$tmp/report.json")

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fail() {
	local f

	for f in "$tmp"/*.log; do
		[ -f "$f" ] || continue
		echo "---- ${f##*/} ----"
		cat "$f"
	done
	echo "FAIL: $*" >&2
	exit 1
}

# wait_all LIMIT_S TAG: every started process exits 0 within LIMIT_S.
wait_all() {
	local deadline=$((SECONDS + $1)) pid rc r=0

	for pid in "${pids[@]}"; do
		while kill -0 "$pid" 2>/dev/null; do
			[ "$SECONDS" -lt "$deadline" ] ||
				fail "$2: rank $r still runs after $1 s"
			sleep 0.1
		done
		rc=0
		wait "$pid" || rc=$?
		[ "$rc" -eq 0 ] || fail "$2: rank $r exited $rc"
		r=$((r + 1))
	done
	pids=()
}

check_report() {
	python3 "$check" "$tmp/report.json" --schema "$schema" \
		--hosts "$size" --ok-pairs $((size * (size - 1))) \
		--no-finding unreachable --no-finding config-differs \
		--no-finding plugin-differs || fail "$1: rank 0's report"
	python3 - "$tmp/report.json" "$size" <<'PY' || fail "$1: host names"
import json, sys
doc = json.load(open(sys.argv[1]))
want = [f"node{r}" for r in range(int(sys.argv[2]))]
got = [h["host"] for h in doc["hosts"]]
if got != want:
    sys.exit(f"hosts by rank are {got}, expected {want}")
PY
}

# launch TAG RANK_VAR SIZE_VAR: three processes, the launcher's variables
# the only word on their rank; rank 0 first, as launchers do not promise
# any order the others start later.
launch() {
	local tag=$1 rank_var=$2 size_var=$3 r t0=$SECONDS

	rm -f "$tmp"/*.log "$tmp/report.json"
	port=$(free_port)
	for ((r = 0; r < size; r++)); do
		env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
			"$rank_var=$r" "$size_var=$size" \
			NCCL_MESH_HOSTNAME="node$r" \
			NCCL_MESH_ADVERTISE_ADDRS="127.0.0.2$r" \
			"$MESHINFO" "${args[@]}" >"$tmp/$tag-rank$r.log" 2>&1 &
		pids+=($!)
	done
	wait_all 60 "$tag"
	check_report "$tag"
	echo "PASS $tag: 3 hosts, 6 pairs connected ($((SECONDS - t0)) s)"
}

launch torchrun RANK WORLD_SIZE
launch mpirun OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE
launch srun SLURM_PROCID SLURM_NTASKS
launch pmi PMI_RANK PMI_SIZE

# Open MPI's own mpirun: the rank is whatever it sets
if command -v mpirun >/dev/null && mpirun --version 2>&1 | grep -q 'Open MPI'; then
	rm -f "$tmp"/*.log "$tmp/report.json"
	port=$(free_port)
	t0=$SECONDS
	# shellcheck disable=SC2016 # expanded by each rank's shell
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 90 \
		mpirun --allow-run-as-root --oversubscribe -np "$size" \
		-x MASTER_ADDR -x MASTER_PORT -x NCCL_MESH_CONF \
		-x NCCL_MESH_MODULE_PATH -x NCCL_MESH_ADVERTISE_LOCAL \
		sh -c 'NCCL_MESH_HOSTNAME=node$OMPI_COMM_WORLD_RANK NCCL_MESH_ADVERTISE_ADDRS=127.0.0.2$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
		"$MESHINFO" "${args[@]}" >"$tmp/real-mpirun.log" 2>&1 ||
		fail "real mpirun: exited $?"
	check_report "real mpirun"
	echo "PASS real mpirun: 3 hosts, 6 pairs connected ($((SECONDS - t0)) s)"
else
	echo "SKIP: real mpirun (Open MPI is not installed)"
fi

# no launcher and no --rendezvous: bad usage, at once
rc=0
timeout 20 "$MESHINFO" --cluster --plugin "$PLUGIN" \
	>"$tmp/none.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "without a rendezvous: exit $rc, expected 2"
grep -qi 'rank\|rendezvous' "$tmp/none.log" ||
	fail "without a rendezvous: no word on what is missing"
echo "PASS without a rendezvous: exit 2, $(head -n1 "$tmp/none.log")"
