#!/bin/bash
# SPDX-License-Identifier: MIT
#
# PID 1 of the rxe stage's guest after the image's stub (tests/rxe/lab/guest
# copies it onto the control share at every boot).  Mounts what the tests
# need, shares the host's directory at /src, runs the command the host left
# in the control share and powers off.  The host reads ready (the command
# started), rc (its exit status) and output from the share.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
ctl=/run/ctl

off() {
	sync
	echo o >/proc/sysrq-trigger
	sleep 600
}

mount -o remount,rw /
mkdir -p /dev/pts /dev/shm /src
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
# bash's process substitution and many tools want these links
ln -sfn /proc/self/fd /dev/fd
ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout
ln -sfn /proc/self/fd/2 /dev/stderr
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 src /src; then
	echo "mesh guest: cannot mount the shared directory" >/dev/console
	off
fi
hostname mesh-guest
ip link set lo up

# The clock starts from the emulated RTC, a second at best; files on the
# shares carry the host's time.  Take the host's time from a file written
# through the share, so tools that compare time stamps agree with the host.
: >"$ctl/clock"
t=$(stat -c %.3Y "$ctl/clock" 2>/dev/null || stat -c %Y "$ctl/clock")
date -s "@$t" >/dev/null

echo "mesh guest: up after $(cut -d' ' -f1 /proc/uptime) s, kernel $(uname -r)" >/dev/console
: >"$ctl/ready"
cd /src || off
bash "$ctl/cmd" </dev/null 2>&1 | tee "$ctl/output" >/dev/console
rc=${PIPESTATUS[0]}
echo "$rc" >"$ctl/rc.new"
mv "$ctl/rc.new" "$ctl/rc"
off
