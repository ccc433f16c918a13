#!/bin/sh
# tests/test_fuse_g4.sh - a cold file opened through kvtier-fuse while the
# partner (G4, s3rver on loopback) is down: the open fails EIO at once with
# a log line naming the file, the file is still listed with its real size
# and stays cold in the catalog (nothing lost); once the partner is back
# the same open recalls it byte-exact, on the same mount.
#
# s3rver is taken from $S3RVER, PATH, or installed with npm into
# $top_builddir/.s3rver (as tests/test_migrate_s3.sh does); without node or
# npm, or where this machine cannot mount, the test is skipped (77).
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/fuse/lib.sh
. "$top_srcdir/tests/fuse/lib.sh"
fuse_require

kvt_setup
T=$KVT_TMP
K=$KVTIER
MIG=$top_builddir/kvtier-migrate
[ -x "$MIG" ] || fail "no kvtier-migrate binary at '$MIG' (build it first)"

S3RVER=${S3RVER:-$(command -v s3rver || true)}
if [ -z "$S3RVER" ]; then
	S3RVER=$top_builddir/.s3rver/node_modules/.bin/s3rver
	if [ ! -x "$S3RVER" ]; then
		command -v npm >/dev/null || skip "no s3rver and no npm to install it"
		step "installing s3rver from npm into $top_builddir/.s3rver"
		# Under a lock: other tests may be installing it at the same time.
		(flock 9 && { [ -x "$S3RVER" ] || npm install --prefix "$top_builddir/.s3rver" \
			--no-audit --no-fund s3rver@3; }) 9>"$top_builddir/.s3rver.lock" \
			>"$T/npm.log" 2>&1 || skip "npm could not install s3rver: $(tail -3 "$T/npm.log")"
	fi
fi
command -v node >/dev/null || skip "no node to run s3rver"

server=
stop_server()
{
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
		server=
	fi
}
trap 'stop_server; fuse_cleanup' EXIT

# start_server [PORT]: s3rver on PORT, else a free loopback port.
start_server()
{
	for _ in 1 2 3 4 5; do
		PORT=${1:-$(shuf -i 20000-40000 -n 1)}
		"$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$PORT" --configure-bucket g4bucket \
			>"$T/s3rver.log" 2>&1 &
		server=$!
		for _ in $(seq 100); do
			grep -q "listening" "$T/s3rver.log" && return 0
			kill -0 "$server" 2>/dev/null || break
			sleep 0.1
		done
		stop_server
		sleep 0.5	# the same port again: wait for it to be free
	done
	fail "s3rver did not start: $(cat "$T/s3rver.log")"
}

mkdir -p "$T/s3" "$T/mnt"
start_server
printf 'access_key = S3RVER\nsecret_key = S3RVER\n' >"$T/keys"
chmod 600 "$T/keys"
cat >"$KVTIER_CONF" <<EOF
[store]
dir = $KVT_DIR
capacity = 64M
segment_size = 4M

[g4]
url = s3://g4bucket/fuse
endpoint = http://127.0.0.1:$PORT
credentials = $T/keys
EOF
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb models

step "a session demoted to s3rver"
head -c 3000000 /dev/urandom >"$T/a"
head -c 70000 /dev/urandom >"$T/b"
kvt_expect 0 "$K" put --session s1 models s1/a "$T/a"
kvt_expect 0 "$K" put --session s1 models s1/b "$T/b"
kvt_expect 0 "$MIG" --session models/s1
for k in a b; do
	kvt_expect 0 "$K" head models "s1/$k"
	kvt_grep out "^tier: +cold$"
done

step "partner down: a cold open fails EIO with a log line; listed, still cold"
fuse_mount "$KVTIER_CONF" "$T/mnt"
stop_server
kvt_run cat "$T/mnt/models/s1/a"
[ "$rc" -ne 0 ] || fail "a cold file opened with the partner down"
kvt_grep err "Input/output error"
grep -q "s1/a" "$T/fuse.log" || fail "no log line names the file: $(cat "$T/fuse.log")"
[ "$(stat -c %s "$T/mnt/models/s1/a")" -eq 3000000 ] || fail "the cold file lost its size"
[ -f "$T/mnt/models/s1/b" ] || fail "a cold file does not show"
kvt_expect 0 "$K" head models s1/a
kvt_grep out "^tier: +cold$"

step "partner back: the same open recalls it, byte-exact"
start_server "$PORT"
cmp "$T/a" "$T/mnt/models/s1/a" || fail "s1/a differs after the partner came back"
cmp "$T/b" "$T/mnt/models/s1/b" || fail "s1/b differs after the partner came back"
kvt_expect 0 "$K" head models s1/a
kvt_grep out "^tier: +hot$"

step "unmount; fsck"
fuse_umount "$T/mnt"
kvt_expect 0 "$K" fsck
echo "ok"
