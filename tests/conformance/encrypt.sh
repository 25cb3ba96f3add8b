#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The conformance suite through tcp-xdc with encrypt = true: a fresh key
# (mode 0600) and a config that sets it and turns encryption on, in a temp
# dir removed on exit; then run.sh with everything after the first
# argument.  Fails if the comms did not say they were encrypted.
#
# usage: encrypt.sh RUN_SH RUN_SH_ARGS...
set -uo pipefail

run=$1
shift
dir=$(mktemp -d /tmp/conform-encrypt.XXXXXX) || exit 2
trap 'rm -rf "$dir"' EXIT
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/key"
cat >"$dir/nccl-mesh.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
auth_key_file = "$dir/key";
tcp-xdc: {
  ifname = "lo";
  streams = 2;
  threads = 2;
  timeout_ms = 2000;
  encrypt = true;
  record_size = "64K";
};
CONF
mkdir "$dir/logs"
bash "$run" --conf "$dir/nccl-mesh.conf" --log-dir "$dir/logs" "$@"
rc=$?
if [ "$rc" -eq 0 ] &&
	! grep -rqs 'encrypted (AES-256-GCM' "$dir/logs"; then
	echo "encrypt.sh: no comm said it was encrypted (is -v passed?)" >&2
	rc=1
fi
exit "$rc"
