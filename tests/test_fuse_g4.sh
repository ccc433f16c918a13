#!/bin/sh
# tests/test_fuse_g4.sh - a cold file opened through kvtier-fuse while the
# partner (G4, s3rver on loopback) is down: the open fails EIO at once with
# a log line naming the file, the file is still listed with its real size
# and stays cold in the catalog (nothing lost); once the partner is back
# the same open recalls it byte-exact, on the same mount. With [g4] url
# naming a bucket the partner lacks, the open fails ENXIO instead, and the
# file stays cold (the later steps recall it). Then a prestage
# set on a directory below its session ([store] session_depth) brings that
# session back (it asked for a session named by the whole path). A cold
# file given another session (user.kvtier.session) is described by that
# session's manifest after the next run: a second store imports it.
#
# s3rver is taken from $S3RVER, PATH, or installed with npm into
# $kvt_npm_dir/.s3rver (as tests/test_migrate_s3.sh does); without node or
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

# shellcheck source=tests/s3rver.sh
. "$top_srcdir/tests/s3rver.sh"
s3rver_find

trap 's3rver_stop; fuse_cleanup' EXIT

mkdir -p "$T/s3" "$T/mnt"
s3rver_start
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

step "[g4] url naming a bucket the partner lacks: a cold open fails ENXIO, naming the bucket; still cold"
# It failed EIO, as a damaged file or disk would: the partner's bucket is
# missing (deleted, or the url misnamed), which ENXIO says.
sed 's|^url = .*|url = s3://nosuch/fuse|' "$KVTIER_CONF" >"$T/nosuch.conf"
fuse_mount "$T/nosuch.conf" "$T/mnt"
kvt_run cat "$T/mnt/models/s1/b"
[ "$rc" -ne 0 ] || fail "a cold file opened with the partner's bucket missing"
kvt_grep err "No such device or address"
grep -q "the bucket 'nosuch' does not exist at the partner" "$T/fuse.log" ||
	fail "no log line names the missing bucket: $(cat "$T/fuse.log")"
[ "$(stat -c %s "$T/mnt/models/s1/b")" -eq 70000 ] || fail "the cold file lost its size"
fuse_umount "$T/mnt"
kvt_expect 0 "$K" head models s1/b
kvt_grep out "^tier: +cold$"

step "partner down: a cold open fails EIO with a log line; listed, still cold"
fuse_mount "$KVTIER_CONF" "$T/mnt"
s3rver_stop
kvt_run cat "$T/mnt/models/s1/a"
[ "$rc" -ne 0 ] || fail "a cold file opened with the partner down"
kvt_grep err "Input/output error"
grep -q "s1/a" "$T/fuse.log" || fail "no log line names the file: $(cat "$T/fuse.log")"
[ "$(stat -c %s "$T/mnt/models/s1/a")" -eq 3000000 ] || fail "the cold file lost its size"
[ -f "$T/mnt/models/s1/b" ] || fail "a cold file does not show"
kvt_expect 0 "$K" head models s1/a
kvt_grep out "^tier: +cold$"

step "partner back: the same open recalls it, byte-exact"
s3rver_start "$PORT"
cmp "$T/a" "$T/mnt/models/s1/a" || fail "s1/a differs after the partner came back"
cmp "$T/b" "$T/mnt/models/s1/b" || fail "s1/b differs after the partner came back"
kvt_expect 0 "$K" head models s1/a
kvt_grep out "^tier: +hot$"

step "a prestage set on a directory below its session brings the session back"
head -c 5000 /dev/urandom >"$T/c"
kvt_expect 0 "$K" put models s2/t1/c "$T/c"
kvt_expect 0 "$K" put models s2/t2/c "$T/c"
kvt_expect 0 "$MIG" --session models/s2
# s2/t1/ names no session; its keys are session s2's ([store] session_depth 1).
setfattr -n user.kvtier.prestage -v 1 "$T/mnt/models/s2/t1" ||
	fail "cannot set user.kvtier.prestage on a directory"
hot_both() {
	"$K" head models s2/t1/c | grep -q "^tier: *hot$" &&
		"$K" head models s2/t2/c | grep -q "^tier: *hot$"
}
poll 600 hot_both || fail "the prestage of s2/t1/ did not bring session s2 back: $(cat "$T/fuse.log")"
cmp "$T/c" "$T/mnt/models/s2/t2/c" || fail "s2/t2/c differs after its prestage"

step "a cold file given another session is in that session's manifest after the next run"
# It kept its G4 copy, and the run's sweep wrote the manifest of the
# session it left without it: no manifest listed it, and an import of its
# new session on another store found none (exit 1).
head -c 40000 /dev/urandom >"$T/d"
kvt_expect 0 "$K" put models s3/d "$T/d"
kvt_expect 0 "$K" put models s3/e "$T/c"
kvt_expect 0 "$MIG" --session models/s3
setfattr -n user.kvtier.session -v s4 "$T/mnt/models/s3/d" ||
	fail "cannot set user.kvtier.session on a cold file"
kvt_expect 0 "$K" head models s3/d
kvt_grep out "^session: +s4$"
kvt_grep out "^tier: +cold$"
kvt_expect 0 "$MIG"
kvt_grep err " 0 failures$"
sed "s|^dir = .*|dir = $T/datab|" "$KVTIER_CONF" >"$T/b.conf"
kvt_expect 0 "$K" -c "$T/b.conf" init
kvt_expect 0 "$MIG" -c "$T/b.conf" --import models/s4
kvt_grep err "^kvtier-migrate: import: 1 sessions, 1 objects, 40000 bytes"
kvt_expect 0 "$MIG" -c "$T/b.conf" --import models/s3
kvt_grep err "^kvtier-migrate: import: 1 sessions, 1 objects, 5000 bytes"
kvt_expect 0 "$K" -c "$T/b.conf" get models s3/d "$T/back"
cmp "$T/d" "$T/back" || fail "s3/d read on the second store differs"
kvt_expect 0 "$K" -c "$T/b.conf" head models s3/e
kvt_grep out "^session: +s3$"

step "unmount; fsck"
fuse_umount "$T/mnt"
kvt_expect 0 "$K" fsck
echo "ok"
