# shellcheck shell=sh
# tests/fuse/lib.sh - what the FUSE test scripts share; sourced after
# tests/lib.sh, never run.
#
# fuse_setup checks that this machine can mount, makes the scratch store
# (kvt_setup) and the mount point $M, and sets the EXIT trap.
# fuse_mount starts kvtier-fuse in the foreground, in the background of the
# script, and waits for the mount; fuse_cleanup (the EXIT trap) undoes every
# mount made and stops the gateway fuse_gateway started, however the script
# exits. A machine that refuses FUSE mounts makes the test skip (77).

FUSE=$top_builddir/kvtier-fuse

# Mounts made here, as "pid:dir" pairs, undone on exit.
mounts=""
GW_PID=

fuse_cleanup()
{
	for m in $mounts; do
		fusermount3 -u -z "${m#*:}" 2>/dev/null || :
		kill -KILL "${m%%:*}" 2>/dev/null || :
	done
	for m in $mounts; do
		wait "${m%%:*}" 2>/dev/null || :
	done
	[ -z "${GW_PID:-}" ] || { kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; } || :
	kvt_cleanup
}

# fuse_require: skips where this machine cannot mount at all.
fuse_require()
{
	[ -c /dev/fuse ] || skip "no /dev/fuse on this machine"
	command -v fusermount3 >/dev/null || skip "no fusermount3 (Debian: apt-get install fuse3)"
	command -v python3 >/dev/null || skip "no python3"
	[ -x "$FUSE" ] || fail "no kvtier-fuse binary at '$FUSE' (build it first)"
}

# fuse_setup: fuse_require, kvt_setup, T, K and an empty mount point M; the
# EXIT trap is fuse_cleanup.
fuse_setup()
{
	fuse_require
	kvt_setup
	T=$KVT_TMP
	K=$KVTIER
	M=$T/mnt
	mkdir "$M"
	trap fuse_cleanup EXIT
}

is_mounted()
{
	grep -q " $1 fuse" /proc/mounts
}

# fuse_mount CONF DIR [ARGS...]: kvtier-fuse in the foreground, in the
# background of this script, logging to $T/fuse.log; sets FUSE_PID. Skips
# if this machine refuses.
fuse_mount()
{
	fm_conf=$1 fm_dir=$2
	shift 2
	"$FUSE" -c "$fm_conf" "$fm_dir" -f "$@" 2>>"$T/fuse.log" &
	FUSE_PID=$!
	mounts="$mounts $FUSE_PID:$fm_dir"
	poll 1200 fuse_mounted "$fm_dir" ||
		fail "kvtier-fuse did not mount in 120 s: $(cat "$T/fuse.log")"
}

# fuse_mounted DIR: whether $FUSE_PID has mounted DIR yet; skips or fails
# if it exited instead.
fuse_mounted()
{
	is_mounted "$1" && return 0
	if ! kill -0 "$FUSE_PID" 2>/dev/null; then
		if grep -q "fuse: device not found\|Operation not permitted\|Permission denied" "$T/fuse.log"; then
			skip "this machine refuses FUSE mounts: $(tail -1 "$T/fuse.log")"
		fi
		fail "kvtier-fuse exited before mounting: $(cat "$T/fuse.log")"
	fi
	return 1
}

# fuse_umount DIR: fusermount3 -u; the daemon must exit 0.
fuse_umount()
{
	fusermount_u "$1"
	fu_rc=0
	wait "$FUSE_PID" || fu_rc=$?
	[ "$fu_rc" -eq 0 ] || fail "kvtier-fuse exited $fu_rc after fusermount3 -u: $(tail -5 "$T/fuse.log")"
	mounts=$(echo "$mounts" | sed "s| $FUSE_PID:[^ ]*||")
}

# fuse_gateway CONF: kvtier-gateway on a free loopback port with one user,
# AKIDFUSETEST and secret $GW_SECRET; sets GW_PID and GW_URL.
fuse_gateway()
{
	GW_SECRET=secret$$
	(umask 077 && printf 'AKIDFUSETEST %s\n' "$GW_SECRET" >"$T/creds")
	"$top_builddir/kvtier-gateway" -c "$1" --listen 127.0.0.1:0 \
		--credentials "$T/creds" --access-log off 2>"$T/gw.log" &
	GW_PID=$!
	wait_until "$GW_PID" "$T/gw.log" 60 "the gateway" gateway_serves "$T/gw.log"
	GW_URL=http://127.0.0.1:$(gateway_port "$T/gw.log")
}
