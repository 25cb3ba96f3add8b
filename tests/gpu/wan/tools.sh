#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Collects the network tools that tests/gpu/wan/run.sh needs (ip, tc, ss,
# nft, conntrack, iperf3) from this host into DIR, with every library ldd
# names and the dynamic loader, for a GPU host that lacks them.  run.sh
# starts them as DIR/ld.so --library-path DIR/lib DIR/bin/TOOL, so only
# those processes see the libraries: no LD_LIBRARY_PATH reaches the ranks.
#
# Usage: tests/gpu/wan/tools.sh DIR
#
# This host and the GPU host must both be x86-64 Linux; the tools bring
# their own C library, so the distributions may differ.  iperf3 is
# optional (run.sh measures the WAN with Python sockets without it).

set -euo pipefail

die() {
	echo "tools.sh: $*" >&2
	exit 2
}

[ $# -eq 1 ] || die "usage: tools.sh DIR"
dir=$1
command -v ldd >/dev/null || die "no ldd on this host"

# TOOL:PACKAGE (Debian's name, for the message when it is missing)
required=(ip:iproute2 tc:iproute2 ss:iproute2 nft:nftables
	  conntrack:conntrack)
optional=(iperf3:iperf3)

rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"

loader=
# copy_tool PATH: the binary and every library ldd resolves for it.
copy_tool() {
	local bin=$1 lib line

	cp -L "$bin" "$dir/bin/"
	while read -r line; do
		case $line in
		*"=> not found"*)
			die "$bin: a library is missing here: $line" ;;
		*"=> /"*)
			lib=${line#*=> }
			lib=${lib%% (*}
			cp -L "$lib" "$dir/lib/" ;;
		/*ld-linux*)
			lib=${line%% (*}
			if [ -z "$loader" ]; then
				loader=$lib
			elif [ "$loader" != "$lib" ]; then
				die "two loaders: $loader and $lib"
			fi ;;
		esac
	done < <(ldd "$bin")
}

for t in "${required[@]}" "${optional[@]}"; do
	name=${t%%:*}
	path=$(PATH=$PATH:/usr/sbin:/sbin command -v "$name" || true)
	if [ -z "$path" ]; then
		case " ${optional[*]} " in
		*" $t "*) echo "tools.sh: $name not found here (optional," \
			  "package ${t#*:}); skipped" >&2; continue ;;
		esac
		die "$name not found here (install the ${t#*:} package)"
	fi
	copy_tool "$path"
done

[ -n "$loader" ] || die "ldd named no dynamic loader"
cp -L "$loader" "$dir/ld.so"
"$dir/ld.so" --library-path "$dir/lib" "$dir/bin/ip" -V >/dev/null ||
	die "the copied ip does not start through $dir/ld.so"
echo "tools.sh: $(cd "$dir/bin" && echo *) in $dir ($(du -sh "$dir" | cut -f1))"
