# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Sourced by tools/quickstart and tools/run-tests: installs what building
# and testing nccl-mesh needs on Debian or Ubuntu, skipping what is there.

# Needed to build and test (meshinfo --cluster hashes with OpenSSL's
# libcrypto; its tests validate its JSON with python3-jsonschema and
# render its picture with graphviz).
MESH_DEPS=(build-essential meson ninja-build pkg-config libconfig-dev
	   libssl-dev iperf3 python3 python3-jsonschema graphviz)
# Built against when present (the verbs modules; tcp-xdc's faster cipher,
# which Debian has for amd64 only); the rest works without.
MESH_DEPS_OPTIONAL=(libibverbs-dev)
if [[ $(dpkg --print-architecture 2>/dev/null) == amd64 ]]; then
	MESH_DEPS_OPTIONAL+=(libipsec-mb-dev)
fi

# The package stage of the whole run (tests/package/run.sh): Debian's
# packaging tools, help2man for the manual pages, lintian, and mmdebstrap
# for the fresh root the package is installed in.
# shellcheck disable=SC2034  # tools/run-tests adds it to MESH_DEPS
MESH_DEPS_PACKAGE=(dpkg-dev debhelper help2man lintian mmdebstrap)

mesh_log() {
	printf '\n==> %s\n' "$*"
}

mesh_die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

mesh_pkg_installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null |
		grep -q 'install ok installed'
}

mesh_missing_pkgs() {
	local pkg

	for pkg in "$@"; do
		mesh_pkg_installed "$pkg" || printf '%s\n' "$pkg"
	done
}

mesh_apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "$@" </dev/null
}

# Installs missing packages; needs root only when something is missing.
mesh_install_deps() {
	local missing optional

	command -v dpkg-query >/dev/null ||
		mesh_die "not a Debian system: install ${MESH_DEPS[*]} by hand"
	mapfile -t missing < <(mesh_missing_pkgs "${MESH_DEPS[@]}")
	mapfile -t optional < <(mesh_missing_pkgs "${MESH_DEPS_OPTIONAL[@]}")
	if ((${#missing[@]} == 0 && ${#optional[@]} == 0)); then
		mesh_log "build dependencies already installed"
		return 0
	fi
	if ((EUID != 0)); then
		((${#missing[@]} == 0)) && return 0
		mesh_die "missing ${missing[*]}: run $0 as root to install them"
	fi
	mesh_log "installing ${missing[*]} ${optional[*]}"
	if ! apt-get update -q </dev/null; then
		((${#missing[@]} == 0)) ||
			mesh_die "apt-get update failed; cannot install ${missing[*]}"
		echo "note: apt-get update failed; optional ${optional[*]} skipped"
		return 0
	fi
	if ((${#missing[@]})); then
		mesh_apt_install "${missing[@]}" ||
			mesh_die "could not install ${missing[*]}"
	fi
	if ((${#optional[@]})); then
		mesh_apt_install "${optional[@]}" ||
			echo "note: optional ${optional[*]} not installed; continuing"
	fi
}

# Sets up (or reconfigures) a meson build directory.
mesh_setup() {
	local dir=$1
	shift

	if [[ -f $dir/meson-private/coredata.dat ]]; then
		meson setup --reconfigure "$dir" "$@"
	else
		meson setup "$dir" "$@"
	fi
}
