#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs inside the fresh root that tests/package/run.sh made, after
# `apt-get install ./nccl-mesh_*.deb ./nccl-mesh-dev_*.deb`, with an empty
# environment and only loopback: nothing here may come from a build tree
# or an NCCL_MESH_* variable but those it sets itself.  Each check prints
# "ok - WHAT" or "FAIL - WHAT"; the last line is "in-root: all passed"
# only when every check passed.
set -uo pipefail

failed=0
tmp=$(mktemp -d) || exit 1
server=
# shellcheck disable=SC2317  # runs from the trap
cleanup() {
	[[ -z $server ]] || kill "$server" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

ok() { echo "ok - $*"; }
bad() {
	echo "FAIL - $*"
	failed=1
}
# check WHAT COMMAND...: one check, its output shown when it fails.
check() {
	local what=$1
	shift
	if "$@" >"$tmp/out" 2>&1; then
		ok "$what"
	else
		bad "$what (exit $?)"
		sed 's/^/    /' "$tmp/out"
	fi
}

# Where the package put the plugin: a directory the dynamic loader
# searches by default, where NCCL's dlopen("libnccl-net-mesh.so") looks
# with NCCL_NET_PLUGIN=mesh (with no SONAME it is not in ld.so.cache; the
# meshperf run below loads it by that name).
plugin=$(dpkg -L nccl-mesh | grep '/libnccl-net-mesh\.so$')
libdir=${plugin%/*}
moddir=$libdir/nccl-mesh
case $libdir in
/usr/lib/*-linux-*) ok "plugin in the multiarch library directory: $plugin" ;;
*) bad "plugin not in /usr/lib/<multiarch>: '$plugin'" ;;
esac
for m in tcp-xdc relay; do
	check "module $m in $moddir" test -f "$moddir/mesh-$m.so"
done
for t in meshinfo meshperf meshrelay; do
	check "$t in /usr/bin" test -x "/usr/bin/$t"
done
check "/etc/nccl-mesh.conf is a conffile" sh -c \
	"dpkg-query -W -f='\${Conffiles}\n' nccl-mesh | grep -q '^ /etc/nccl-mesh.conf [0-9a-f]'"

# The unit: in place, pointing at the installed binary and config, and
# not enabled (a relay belongs on gateway hosts only; docs/packaging.md).
unit=/lib/systemd/system/meshrelay.service
check "meshrelay.service installed" test -f "$unit"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
read -r exec_bin exec_args <<<"$exec_start"
check "the unit starts the installed meshrelay ($exec_start)" \
	test "$exec_bin" = /usr/bin/meshrelay -a "$exec_args" = "--config /etc/nccl-mesh.conf"
check "meshrelay.service is not enabled" \
	sh -c '! ls /etc/systemd/system/*.wants/meshrelay.service 2>/dev/null'

# nccl-mesh-dev: the pkg-config file points at the headers and at the
# directory the core loads modules from.
check "pkg-config moduledir is $moddir" \
	test "$(pkgconf --variable=moduledir nccl-mesh-module)" = "$moddir"
# shellcheck disable=SC2016  # expanded by the inner shell
check "module.h where pkg-config's cflags point" sh -c \
	'f=$(pkgconf --cflags-only-I nccl-mesh-module | sed "s/^-I//; s/ *$//")
	 test -f "${f:-/usr/include}/nccl-mesh/module.h"'

# meshinfo with the shipped config and modules found without any variable
# but the interface (the default config skips loopback, the only one here).
export NCCL_MESH_TCP_XDC_IFNAME=lo
check "meshinfo --check /etc/nccl-mesh.conf" meshinfo --check /etc/nccl-mesh.conf
if meshinfo >"$tmp/meshinfo" 2>&1; then
	ok "meshinfo: exit 0"
else
	bad "meshinfo: exit $?"
fi
sed 's/^/    /' "$tmp/meshinfo" | sed -n '1,/^    # rails/p'
check "meshinfo reads /etc/nccl-mesh.conf" \
	grep -q '^# config: /etc/nccl-mesh.conf$' "$tmp/meshinfo"
check "meshinfo loads tcp-xdc from $moddir" \
	grep -Eq "^tcp-xdc +[0-9.]+ +ready +$moddir/mesh-tcp-xdc.so$" "$tmp/meshinfo"
check "meshinfo: usable" grep -q '^# status: usable' "$tmp/meshinfo"
# Every module of the package loads: its libraries are in the package's
# dependencies (the verbs modules find no devices here, which is fine).
mods=
for f in "$moddir"/mesh-*.so; do
	f=${f##*/mesh-}
	mods+=${mods:+,}${f%.so}
done
NCCL_MESH_MODULES=$mods meshinfo >"$tmp/all" 2>&1
for m in ${mods//,/ }; do
	check "module $m loads" grep -Eq \
		"^$m +[0-9.]+ +(ready|no devices) +$moddir/mesh-$m.so$" "$tmp/all"
done

# meshrelay reads the conffile; with the relay enabled it starts, serves
# and stops.
meshrelay >"$tmp/relay" 2>&1
rc=$?
check "meshrelay with the shipped config: exit 2, relay not enabled" test "$rc" = 2
check "meshrelay --once-report with the relay enabled" \
	env NCCL_MESH_MODULES=tcp-xdc,relay meshrelay --once-report

# Two meshperf processes through the installed plugin, which meshperf
# dlopen()s by name as NCCL does.
meshperf --server --port 0 --port-file "$tmp/port" >"$tmp/server" 2>&1 &
server=$!
for _ in $(seq 100); do
	[[ -s $tmp/port ]] && break
	kill -0 "$server" 2>/dev/null || break
	sleep 0.1
done
if [[ -s $tmp/port ]]; then
	if meshperf --client 127.0.0.1 --port "$(<"$tmp/port")" \
		--sizes 8,64K,1M --iters 200 --mem 16M >"$tmp/client" 2>&1; then
		ok "meshperf client"
	else
		bad "meshperf client (exit $?)"
	fi
	sed 's/^/    /' "$tmp/client"
	if wait "$server"; then
		ok "meshperf server"
	else
		bad "meshperf server (exit $?)"
		sed 's/^/    /' "$tmp/server"
	fi
else
	bad "meshperf server did not start"
	sed 's/^/    /' "$tmp/server"
fi
server=
check "meshperf found the plugin by its name, as NCCL does" \
	grep -q '^# meshperf\[client\]: net "Mesh" from libnccl-net-mesh.so,' "$tmp/client"

# Removal keeps the edited conffile, purge takes it and everything else.
echo "# edited" >>/etc/nccl-mesh.conf
check "apt-get remove" env DEBIAN_FRONTEND=noninteractive \
	apt-get remove -y -q nccl-mesh-dev nccl-mesh
check "remove keeps the conffile" test -f /etc/nccl-mesh.conf
check "remove takes the plugin and modules" \
	test ! -e "$plugin" -a ! -e "$moddir"
check "dpkg --purge" dpkg --purge nccl-mesh-dev nccl-mesh
check "purge takes the conffile" test ! -e /etc/nccl-mesh.conf

if ((failed)); then
	echo "in-root: some checks failed"
	exit 1
fi
echo "in-root: all passed"
