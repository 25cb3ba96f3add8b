#!/bin/bash
# SPDX-License-Identifier: MIT
# The Debian package as a user gets it: builds it from this tree with
# Debian's tooling (dpkg-buildpackage, in a scratch copy of the tree, so
# nothing is written into the checkout or next to it), checks it with
# lintian, makes a fresh minimal bookworm root with mmdebstrap, installs
# the package there with `apt-get install ./nccl-mesh_*.deb` and runs
# in-root.sh in it: meshinfo, meshrelay and a two-process meshperf from
# the installed files, in a network namespace of its own.
#
#   tests/package/run.sh [LOGDIR]
#
# LOGDIR (default build/package-logs) gets the build log, lintian's
# report, the root's log and the packages; it is emptied first, and
# nothing else is kept between runs.  Needs root, dpkg-dev, debhelper,
# lintian, mmdebstrap and iproute2, and a Debian mirror as apt on this host
# is configured to reach it.  Exit status 0 passed, 1 failed, 77 skipped
# (then the last line says why, starting "SKIP: package stage: ").
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
logdir=$(realpath -m "${1:-$top/build/package-logs}")
suite=bookworm

skip() {
	echo "SKIP: package stage: $*"
	exit 77
}

fail() {
	echo "FAIL: package stage: $*" >&2
	exit 1
}

# The tail of a log, once, where a step failed.
fail_log() {
	local what=$1 log=$2

	echo "--- last lines of $log ---" >&2
	tail -n 40 "$log" >&2
	fail "$what (whole log: $log)"
}

((EUID == 0)) || skip "needs root (mmdebstrap's root mode, chroot, namespaces)"
for tool in dpkg-buildpackage dh lintian mmdebstrap ip unshare; do
	command -v "$tool" >/dev/null ||
		skip "$tool not found (tools/deps.sh installs it for the full run)"
done
unshare --net true 2>/dev/null || skip "cannot make a network namespace"

rm -rf "$logdir"
mkdir -p "$logdir" || fail "cannot make $logdir"
scratch=$(mktemp -d -t mesh-package.XXXXXX) || fail "mktemp failed"
go=$scratch/go
root_pid=
# shellcheck disable=SC2317  # runs from the trap
cleanup() {
	# the root's bootstrap, when running, is told to give up and waited
	# for: it unmounts what it mounted
	if [[ -n $root_pid ]]; then
		[[ -e $go ]] || echo stop >"$go"
		wait "$root_pid"
	fi
	rm -rf "$scratch"
}
trap cleanup EXIT

# How long each step took, for the CI budget.
t0=$SECONDS
step() {
	printf '==> package: %s (%d s so far)\n' "$*" $((SECONDS - t0))
}

# The tree as it stands, with what is not committed yet but without what
# git ignores (build directories): a fresh clone's view of it.
step "copying the tree"
src=$scratch/nccl-mesh
mkdir -p "$src"
if git -C "$top" rev-parse --show-toplevel >/dev/null 2>&1; then
	(cd "$top" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			[[ -e $f || -L $f ]] && printf '%s\0' "$f"
		done | tar --null -T - -cf -) | tar -xf - -C "$src" ||
		fail "cannot copy the tree"
else
	tar -C "$top" --exclude='./build*' --exclude='./debian/build' \
		-cf - . | tar -xf - -C "$src" || fail "cannot copy the tree"
fi

# What the package builds with; the full run's tools/deps.sh installs it
# (libipsec-mb-dev only where apt has it: then this stage cannot run).
unmet=$(cd "$src" && dpkg-checkbuilddeps 2>&1) ||
	skip "build dependencies missing: ${unmet#*: Unmet build dependencies: }"

# The root gets the mirrors and the Acquire options (proxy, snapshot
# validity) that apt on this host uses; else mmdebstrap's default mirror.
mirrors=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
	/etc/apt/sources.list.d/*.sources; do
	[[ -f $f ]] && grep -q '^[^#]' "$f" && mirrors+=("$f")
done
aptopts=()
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
	[[ -f $f ]] && grep -q '^[[:space:]]*Acquire' "$f" &&
		aptopts+=("--aptopt=$f")
done

# The root is made while the package builds: most of its time is waiting
# on the mirror and on dpkg, which the build's two compilers do not.  Its
# first customize hook waits until $go says "go" (the packages are built
# and lintian passed) or anything else (give up); an hour at most, should
# this script be killed before it can say.  Then the packages go in with
# apt from inside the root, as a user installs them, while the root still
# has this host's network for the mirror; the checks run in a network
# namespace of their own (loopback only), so meshinfo sees the same
# interfaces on every host and no port of this host is in the way.  The
# root lives on a tmpfs in a mount namespace of its own: no disk writes to
# wait for, and nothing left mounted whatever happens.
debs=$scratch/debs
mkdir -p "$scratch/root" "$debs"
step "mmdebstrap $suite (in the background)"
# shellcheck disable=SC2016  # $1 is the hooks' own argument, the root
unshare --mount -- sh -c 'mount -t tmpfs -o size=2g,mode=0755 tmpfs "$1" &&
	shift && exec "$@"' sh "$scratch/root" \
	mmdebstrap --mode=root --variant=apt --dpkgopt=force-unsafe-io \
	--skip=cleanup/apt/lists "${aptopts[@]}" \
	--customize-hook="i=0; while [ ! -e $go ] && [ \$i -lt 3600 ]; do
		sleep 1; i=\$((i + 1)); done; [ \"\$(cat $go)\" = go ]" \
	--customize-hook="copy-in $debs /tmp" \
	--customize-hook='chroot "$1" sh -c "cd /tmp/debs &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends ./nccl-mesh_*.deb ./nccl-mesh-dev_*.deb pkgconf"' \
	--customize-hook='unshare --net sh -c "ip link set lo up &&
		chroot \"\$1\" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		/bin/bash /tmp/debs/in-root.sh" sh "$1"' \
	"$suite" "$scratch/root" "${mirrors[@]}" >"$logdir/root.log" 2>&1 &
root_pid=$!

step "dpkg-buildpackage -us -uc -b"
# Two jobs at most: CI's machine has two cores.  nocheck: the package's
# build-time tests (unit, loader) are the plain build's, which CI runs
# on the same code; MESH_PACKAGE_CHECK=1 runs them here too.
opts="parallel=2"
[[ ${MESH_PACKAGE_CHECK:-0} == 1 ]] || opts+=" nocheck"
if ! (cd "$src" && DEB_BUILD_OPTIONS="$opts ${DEB_BUILD_OPTIONS:-}" \
	dpkg-buildpackage -us -uc -b) >"$logdir/build.log" 2>&1; then
	fail_log "dpkg-buildpackage failed" "$logdir/build.log"
fi
cp "$scratch"/*.deb "$scratch"/*.changes "$scratch"/*.buildinfo "$logdir/" ||
	fail "no packages built"
changes=$(ls "$logdir"/*.changes)

step "lintian"
# Errors fail the stage; warnings are reported (docs/packaging.md lists
# the ones that stand, and why).
lintian --fail-on error --display-info "$changes" >"$logdir/lintian.log" 2>&1
lintian_rc=$?
grep -v '^N: ' "$logdir/lintian.log" | grep -v 'root privileges'
((lintian_rc == 0)) || fail "lintian found errors (exit $lintian_rc): $logdir/lintian.log"

# (the hooks name $debs, a path of mktemp's, never the checkout's)
cp "$logdir"/nccl-mesh_*.deb "$logdir"/nccl-mesh-dev_*.deb "$debs/" ||
	fail "nccl-mesh or nccl-mesh-dev was not built"
cp "$here/in-root.sh" "$debs/" || fail "cannot copy in-root.sh"
echo go >"$go"
step "waiting for the root: apt-get install ./nccl-mesh_*.deb, checks"
wait "$root_pid"
root_rc=$?
root_pid=
# The checks' own lines, whatever happened around them.
grep -E '^(ok|FAIL|not run) - |^in-root: ' "$logdir/root.log"
((root_rc == 0)) || fail_log "the clean root failed (mmdebstrap exit $root_rc)" \
	"$logdir/root.log"
grep -q '^in-root: all passed$' "$logdir/root.log" ||
	fail_log "the checks did not finish" "$logdir/root.log"
step "passed"
echo "package stage: passed in $((SECONDS - t0)) s"
