# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shared by the GPU scripts (run.sh, rounds.sh, relay.sh, latency.sh,
# syscalls.sh): sourced, never run.

# gpu_build SCRIPT BUILD: sets $build to BUILD's absolute path and $plugin
# to its plugin; says what is missing, as SCRIPT, and returns 2 when the
# folder or the plugin is.
gpu_build() {
	[ -d "$2" ] || { echo "$1: build directory '$2' not found" >&2; return 2; }
	build=$(cd "$2" && pwd) || return 2
	plugin=$build/core/libnccl-net-mesh.so
	[ -f "$plugin" ] || {
		echo "$1: plugin not built: $plugin (run ninja -C $build)" >&2
		return 2
	}
}

# gpu_libs BUILD FILE...: puts BUILD's core (and BUILD/extra-libs, where
# libraries missing on this host go) on LD_LIBRARY_PATH, then checks that
# each FILE's libraries resolve.  NCCL dlopens the plugin and the core the
# modules: a library missing there would show only as a silent fallback or
# a module not loaded, so say it.  Returns 2 when one is missing.
gpu_libs() {
	local build=$1 f missing
	shift
	export LD_LIBRARY_PATH=$build/core${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	if [ -d "$build/extra-libs" ]; then
		LD_LIBRARY_PATH=$build/extra-libs:$LD_LIBRARY_PATH
	fi
	command -v ldd >/dev/null || return 0
	for f in "$@"; do
		missing=$(ldd "$f" 2>&1 | grep 'not found')
		if [ -n "$missing" ]; then
			echo "$f cannot be loaded, libraries missing:" >&2
			echo "$missing" >&2
			echo "put them in $build/extra-libs" >&2
			return 2
		fi
	done
}

# gpu_nccl_env: what every run shares: both ranks on loopback, no IB, the
# plugin loaded once per process.  The Socket sweep's variables are cleared
# so that a plain Socket run really is NCCL at its defaults.
gpu_nccl_env() {
	export NCCL_SOCKET_IFNAME=lo
	export NCCL_IB_DISABLE=1
	export NCCL_NET_PLUGIN_REF_COUNT=1
	unset NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD
}

# gpu_net_envs BUILD: the settings that select each transport, as arrays
# for env: gpu_mesh_env (the plugin of BUILD, tcp-xdc on loopback by
# tests/gpu/gpu.conf) and gpu_socket_env (NCCL's Socket at its defaults).
gpu_net_envs() {
	local here
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	# shellcheck disable=SC2034  # used by the scripts that source this
	gpu_mesh_env=(NCCL_NET=Mesh NCCL_NET_PLUGIN="$1/core/libnccl-net-mesh.so"
		      NCCL_MESH_CONF="$here/gpu.conf"
		      NCCL_MESH_MODULE_PATH="$1/modules/tcp-xdc")
	# shellcheck disable=SC2034
	gpu_socket_env=(NCCL_NET=Socket NCCL_NET_PLUGIN=none)
}

# gpu_nccl_latency OUT: builds OUT/nccl_latency (tests/gpu/nccl_latency.c)
# with nvcc ($NVCC, else nvcc) against NCCL_HOME's NCCL, or else the one
# PyTorch loads, and puts that NCCL on LD_LIBRARY_PATH.  Says what is
# missing and returns 2 when it cannot.
gpu_nccl_latency() {
	local here
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	command -v "${NVCC:-nvcc}" >/dev/null || { echo "no nvcc" >&2; return 2; }
	if [ -z "${NCCL_HOME:-}" ]; then
		NCCL_HOME=$("${PYTHON:-python3}" -c 'import nvidia.nccl as m
print(list(m.__path__)[0])' 2>/dev/null) || {
			echo "no NCCL_HOME and no PyTorch NCCL package" >&2
			return 2
		}
	fi
	[ -f "$NCCL_HOME/include/nccl.h" ] || {
		echo "no $NCCL_HOME/include/nccl.h" >&2
		return 2
	}
	export LD_LIBRARY_PATH=$NCCL_HOME/lib:$LD_LIBRARY_PATH
	"${NVCC:-nvcc}" -O2 -o "$1/nccl_latency" "$here/nccl_latency.c" \
		-I"$NCCL_HOME/include" -L"$NCCL_HOME/lib" -l:libnccl.so.2 || {
		echo "cannot build nccl_latency" >&2
		return 2
	}
}

# gpu_latency_setup BUILD NAME: what a script running nccl_latency's ranks
# needs: BUILD's plugin and its libraries, the settings of both transports
# (gpu_nccl_env, gpu_net_envs), $out (unless set, a fresh temporary folder
# named for NAME) and $out/nccl_latency.  Returns 2, having said why, when
# something is missing.
gpu_latency_setup() {
	gpu_libs "$1" "$1/core/libnccl-net-mesh.so" || return 2
	gpu_nccl_env
	gpu_net_envs "$1"
	if [ -z "${out:-}" ]; then
		out=$(mktemp -d -t "nccl-mesh-$2.XXXXXX") || return 2
	fi
	mkdir -p "$out" || { echo "cannot create $out" >&2; return 2; }
	gpu_nccl_latency "$out"
}
