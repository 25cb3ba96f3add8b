# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2034 # cluster_checks is for the sourcing script
#
# meshinfo --cluster checks of the rxe stage (docs/testing-rxe.md,
# docs/meshinfo.md "Cluster view"): one meshinfo process per node, every
# pair connected through the plugin over Soft-RoCE, and the report read
# back.  Sourced, never run: stage.sh sources it after lib.sh, net.sh,
# mesh.sh and relay.sh and before it dispatches "--check FUNC", and runs
# the entries of cluster_checks with its `check`.
#
# Needs from the sourcing script (exported, so the per-check processes see
# them): BUILD, MESHINFO, PLUGIN, LOGDIR; the helpers of lib.sh, mesh.sh
# and relay.sh.
#
#   triangle  mesh.sh's triangle (hosts tri1..tri3, mesh-rdma.conf, whose
#             hca lists break index pairing): every pair connects over
#             rdma-mesh on the one cable joining it: the report's device
#             of pair i -> j is rxe<i><j>, its local and remote addresses
#             node i's and node j's ends of cable i-j.
#   ring      relay.sh's ring of four (hosts n1..n4, relay-ring.conf, a
#             meshrelay per node): neighbours connect directly over their
#             cable, the diagonal pairs are "relayed" through a node next
#             to both, leaving on the cable to that node, and the picture
#             (DOT) draws each relayed way through its relay's node.
#
# The guest has neither python3 nor Graphviz: the JSON report is read with
# awk (it is printed one key per line), the picture as DOT text; where
# Graphviz is installed (a host run) the DOT is rendered to SVG as well
# and the relayed edges looked for in the SVG.

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/rxe/relay.sh
declare -F relay_start >/dev/null || . "$CLUSTER_DIR/relay.sh"

# The checks in order, "FUNC|LIMIT_S|NAME"; cluster_run_checks runs them.
cluster_checks=(
	"check_cluster_triangle|420|cluster: meshinfo --cluster on the triangle, each pair over its own cable"
	"check_cluster_ring|600|cluster: meshinfo --cluster on the relay ring, diagonal pairs relayed through a neighbour"
	"check_cluster_topology_down|60|cluster: topology down"
)

cluster_run_checks() {
	local entry func limit name

	for entry in "${cluster_checks[@]}"; do
		IFS='|' read -r func limit name <<<"$entry"
		check "$name" "$limit" "$func" || true
	done
}

# Short bursts: the guest is emulated, and every pair runs one at a time.
CLUSTER_ARGS=(--timeout 120 --burst-ms 300 --burst-bytes 16M --lat-iters 20)

# cluster_run TAG N HOST_PREFIX CONF MODULE_PATH RDV...: meshinfo --cluster
# on nodes 1..N, rank r on node r+1 named HOST_PREFIX<r+1>, rank 0
# listening on port CLUSTER_PORT of the first RDV (0.0.0.0: every
# address) and rank r dialling the r-th RDV (rank 0's address as node r+1
# reaches it).  Rank 0 writes LOGDIR/TAG.json and TAG.dot, every rank's output
# is in LOGDIR/TAG.rank<r>; each rank's exit status in CLUSTER_RC[r].
CLUSTER_PORT=18950
CLUSTER_RC=()
cluster_run() {
	local tag=$1 n=$2 prefix=$3 conf=$4 modpath=$5 r extra pids=() rc rdv

	shift 5
	rdv=("$@")
	for ((r = 0; r < n; r++)); do
		extra=()
		[ "$r" -eq 0 ] &&
			extra=(--json "$LOGDIR/$tag.json" --dot "$LOGDIR/$tag.dot")
		# NCCL's bootstrap on the management network (m<node>), as
		# on a cluster whose cables are each their own subnet: the
		# bootstrap check finds no finding there
		rxe_spawn "rxn$((r + 1))" "$LOGDIR/$tag.rank$r" env \
			NCCL_SOCKET_IFNAME="=m$((r + 1))" \
			NCCL_MESH_HOSTNAME="$prefix$((r + 1))" NCCL_MESH_CONF="$conf" \
			NCCL_MESH_MODULE_PATH="$modpath" "$MESHINFO" --cluster \
			--rendezvous "${rdv[r]}:$CLUSTER_PORT" --rank "$r" --size "$n" \
			--plugin "$PLUGIN" "${CLUSTER_ARGS[@]}" "${extra[@]}"
		pids+=("$RXE_LAST_PID")
	done
	for ((r = 0; r < n; r++)); do
		rc=0
		rxe_wait "${pids[$r]}" 400 || rc=$?
		CLUSTER_RC[r]=$rc
	done
}

cluster_show() {
	local f

	for f in "$LOGDIR/$1".rank*; do
		echo "---- $(basename "$f") (last 40 lines) ----"
		tail -n 40 "$f"
	done
}

# cluster_pairs JSON: one line per pair of the report,
# "from|to|ok|class|module|local|remote|relays|gbps|error|devices" with
# host names for ranks, the lists comma-separated, "-" for null or none.
# meshinfo prints its JSON one key per line, two spaces deeper per level.
cluster_pairs() {
	awk '
	function val(s) {
		sub(/^[^:]*: */, "", s)
		sub(/,$/, "", s)
		gsub(/"/, "", s)
		return s == "null" ? "-" : s
	}
	/^  "[a-z_]+": / { sec = $1; gsub(/[":]/, "", sec) }
	sec == "hosts" && /^      "rank": / { rank = val($0) }
	sec == "hosts" && /^      "host": / { name[rank] = val($0) }
	sec != "pairs" { next }
	list != "" && /\]/ { list = ""; next }
	list != "" { v = $0; gsub(/[ ",]/, "", v); l[list] = l[list] (l[list] == "" ? "" : ",") v; next }
	/^      "[a-z_]+": \[$/ { list = $1; gsub(/[":]/, "", list); next }
	/^      "[a-z_]+": / { k = $1; gsub(/[":]/, "", k); f[k] = val($0) }
	/^    }/ {
		print name[f["from"]] "|" name[f["to"]] "|" f["ok"] "|" f["class"] "|" \
		      f["module"] "|" f["local"] "|" f["remote"] "|" \
		      (l["relays"] == "" ? "-" : l["relays"]) "|" f["gbps"] "|" \
		      f["error"] "|" (l["devices"] == "" ? "-" : l["devices"])
		delete f
		delete l
	}' "$1"
}

# cluster_findings JSON: the text of each finding, one a line.
cluster_findings() {
	sed -n '/^  "findings": \[/,/^  \]/s/^      "text": "\(.*\)"$/\1/p' "$1"
}

# cluster_expect PAIRS FROM TO CLASS MODULE LOCAL_RE REMOTE_RE RELAYS_RE
# DEVICES_RE: the line of FROM -> TO in PAIRS (cluster_pairs) connected
# with that class and module, its addresses, relays and local devices
# matching the expressions, and a measured bandwidth.
cluster_expect() {
	local line f

	line=$(printf '%s\n' "$1" | grep -E "^$2\|$3\|") || {
		echo "$2 -> $3: not in the report"
		return 1
	}
	IFS='|' read -ra f <<<"$line"
	if [ "${f[2]}" = true ] && [ "${f[3]}" = "$4" ] && [ "${f[4]}" = "$5" ] &&
	   [[ ${f[5]} =~ ^($6)$ ]] && [[ ${f[6]} =~ ^($7)$ ]] &&
	   [[ ${f[7]} =~ ^($8)$ ]] && [[ ${f[10]} =~ ^($9)$ ]] &&
	   [[ ${f[8]} =~ ^[0-9.]+$ ]] &&
	   awk -v g="${f[8]}" 'BEGIN { exit !(g > 0) }'; then
		echo "$2 -> $3: ${f[3]} ${f[4]} over ${f[10]} ${f[5]} -> ${f[6]} via ${f[7]}, ${f[8]} Gb/s"
		return 0
	fi
	echo "$2 -> $3: expected ok $4 $5 over /$9/ /$6/ -> /$7/ via /$8/, got:"
	echo "    $line"
	return 1
}

# cluster_judge TAG N: every rank exited 0, the report has N*(N-1) pairs
# and says so in its text; the pairs in CLUSTER_PAIRS, findings printed.
cluster_judge() {
	local tag=$1 n=$2 r rc=0

	for ((r = 0; r < n; r++)); do
		[ "${CLUSTER_RC[r]}" -eq 0 ] && continue
		echo "$tag: rank $r exited ${CLUSTER_RC[r]}, expected 0 (every pair connects)"
		rc=1
	done
	if [ ! -s "$LOGDIR/$tag.json" ] || [ ! -s "$LOGDIR/$tag.dot" ]; then
		echo "$tag: rank 0 wrote no JSON or DOT"
		rc=1
	fi
	if [ "$rc" -ne 0 ]; then
		cluster_show "$tag"
		return 1
	fi
	sed -n '1p' "$LOGDIR/$tag.rank0"
	CLUSTER_PAIRS=$(cluster_pairs "$LOGDIR/$tag.json")
	if [ "$(printf '%s\n' "$CLUSTER_PAIRS" | grep -c .)" -ne $((n * (n - 1))) ] ||
	   ! grep -q "$((n * (n - 1))) of $((n * (n - 1))) pairs connected" \
		"$LOGDIR/$tag.rank0"; then
		echo "$tag: the report does not have $((n * (n - 1))) connected pairs:"
		printf '%s\n' "$CLUSTER_PAIRS" | sed 's/^/    /'
		cluster_show "$tag"
		return 1
	fi
	echo "findings:"
	cluster_findings "$LOGDIR/$tag.json" | sed 's/^/    /'
	# a pair that connects both ways is neither unreachable nor one-way
	if grep -qE '"kind": "unreachable"' "$LOGDIR/$tag.json" ||
	   grep -E '"text": ' "$LOGDIR/$tag.json" | grep -q 'does not connect'; then
		echo "$tag: a reachability finding, though every pair connected"
		return 1
	fi
}

# cluster_addr_re I J: node I's end of cable i-j, with any port.
cluster_addr_re() {
	local a

	a=$(mesh_addr "$1" "$2")
	echo "${a//./\\.}:[0-9]+"
}

# ------------------------------------------------------ checks: triangle

# Three ranks on the triangle: the six ordered pairs connect over
# rdma-mesh, each on the cable joining its two nodes (the addresses of
# that cable's subnet on both ends, whatever its place in the hca lists).
check_cluster_triangle() {
	local tag=cluster-tri i j rc=0

	mesh_need_module || return 1
	mesh_triangle_ensure || return 1
	cluster_run "$tag" 3 tri "$MESH_DIR/mesh-rdma.conf" \
		"$BUILD/modules/rdma-mesh" 0.0.0.0 10.77.12.1 10.77.13.1
	cluster_judge "$tag" 3 || return 1
	for i in 1 2 3; do
		for j in 1 2 3; do
			[ "$i" = "$j" ] && continue
			cluster_expect "$CLUSTER_PAIRS" "tri$i" "tri$j" same-DC \
				rdma-mesh "$(cluster_addr_re "$i" "$j")" \
				"$(cluster_addr_re "$j" "$i")" - "rxe$i$j" || rc=1
		done
	done
	[ "$rc" -eq 0 ] || cluster_show "$tag"
	return "$rc"
}

# ---------------------------------------------------------- checks: ring

# cluster_dot_relayed I J K DOT: the DOT draws the way from node I to
# node J through relay K: an orange edge from I to K with the label, and
# a bold orange one from K to J (ranks are nodes - 1); red and thick
# instead where a finding marks the pair (the emulated guest's figures
# are noisy enough for a "degraded" one).
CLUSTER_MARK='(, penwidth=3, fontcolor=red)?'
cluster_dot_relayed() {
	local a=$(($1 - 1)) b=$(($2 - 1)) k=$(($3 - 1))

	grep -qE "^  h$a -- h$k \[color=(orange|red)$CLUSTER_MARK, label=" "$4" &&
		grep -qE "^  h$k -- h$b \[color=(orange|red), style=bold$CLUSTER_MARK\];" "$4"
}

# cluster_svg_edges SVG: the rendered edges as "hA--hB", one a line.
cluster_svg_edges() {
	grep -A1 'class="edge"' "$1" | sed -n 's/.*<title>\(.*\)<\/title>.*/\1/p' |
		sed 's/&#45;/-/g'
}

# Four ranks on the ring with a meshrelay per node: neighbours connect
# directly over their cable, the four diagonal ways are relayed with a
# node next to both as their one relay, and the picture draws each
# relayed way through that relay's node.
check_cluster_ring() {
	local tag=cluster-ring i j via line relay rc=0 edges

	relay_need || return $?
	relay_topology_ensure ring || return 1
	relay_use ring
	relay_start "$tag" || return 1
	cluster_run "$tag" 4 n "$RELAY_CONF" "$RELAY_MODPATH" \
		10.88.0.1 10.88.0.1 10.88.0.1 10.88.0.1
	cluster_judge "$tag" 4 || { relay_show "$tag"; return 1; }
	for i in 1 2 3 4; do
		for j in 1 2 3 4; do
			[ "$i" = "$j" ] && continue
			if [ $(((i - j + 4) % 2)) = 1 ]; then
				cluster_expect "$CLUSTER_PAIRS" "n$i" "n$j" same-DC \
					rdma-mesh "$(cluster_addr_re "$i" "$j")" \
					"$(cluster_addr_re "$j" "$i")" - "rxe$i$j" || rc=1
				continue
			fi
			via=$(relay_between "$i" "$j")
			cluster_expect "$CLUSTER_PAIRS" "n$i" "n$j" relayed \
				rdma-mesh - "10\.77\.[0-9]+\.$j:[0-9]+" "n($via)" \
				"rxe$i($via)" || {
				rc=1
				continue
			}
			line=$(printf '%s\n' "$CLUSTER_PAIRS" | grep -E "^n$i\|n$j\|")
			relay=$(cut -d'|' -f8 <<<"$line")
			# the first hop leaves on the cable to that relay
			if [ "$(cut -d'|' -f11 <<<"$line")" != "rxe$i${relay#n}" ]; then
				echo "n$i -> n$j: via $relay, but not over rxe$i${relay#n}"
				rc=1
			fi
			if cluster_dot_relayed "$i" "$j" "${relay#n}" "$LOGDIR/$tag.dot"; then
				echo "    drawn through $relay"
			else
				echo "n$i -> n$j: the DOT does not draw it through $relay"
				rc=1
			fi
		done
	done
	if [ "$rc" -ne 0 ]; then
		sed 's/^/    /' "$LOGDIR/$tag.dot"
		cluster_show "$tag"
		relay_show "$tag"
		return 1
	fi
	if ! command -v dot >/dev/null; then
		echo "SKIP the rendered picture: no Graphviz here (the DOT was checked)"
		return 0
	fi
	dot -Tsvg -o "$LOGDIR/$tag.svg" "$LOGDIR/$tag.dot" || {
		echo "$tag: Graphviz could not render the DOT"
		return 1
	}
	edges=$(cluster_svg_edges "$LOGDIR/$tag.svg")
	while read -r line; do
		printf '%s\n' "$edges" | grep -qx "$line" || {
			echo "$tag: the SVG has no edge $line of a relayed way"
			rc=1
		}
	done < <(grep -E '^  h[0-9] -- h[0-9] \[color=(orange|red), style=bold' \
			"$LOGDIR/$tag.dot" | awk '{ print $1 "--" $3 }')
	echo "SVG: $(printf '%s\n' "$edges" | grep -c .) edges rendered"
	return "$rc"
}

check_cluster_topology_down() {
	rxnet_down
	if rxnet_ns_exists rxn1 || rxnet_ns_exists rxnm; then
		echo "the topology is still there"
		return 1
	fi
}
