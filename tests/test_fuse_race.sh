#!/bin/sh
# tests/test_fuse_race.sh - kvtier-fuse when several processes use the same
# names at once, and who may publish a file still open for writing.
#
#  1. tests/fuse/flush.py: a child's close of a copy of the writer's
#     descriptor (fork + exec) publishes nothing; a writer killed by SIGKILL
#     publishes nothing; one that exits with the file open publishes it;
#     readers in other processes see ENOENT (a new file) or the old version
#     until the writer closes. (The chaos test's truncated blocks.)
#  2. tests/fuse/versions.py: a reader keeps reading the version it opened,
#     whole, while a writer on this mount rewrites the file or a newer
#     version, smaller or larger, is put and opened by another reader; a
#     smaller version opened while the kernel had the older size is not
#     zero-padded; private mmaps of two versions, and of a file open for
#     writing beside a reader's, each show their own bytes; truncate(2) by
#     name beside a reader is seen by the next stat; a file just written
#     maps MAP_SHARED read-only at once (it failed ENODEV), and so does
#     a file beside one rewritten while read.
#  3. tests/fuse/namerace.py: create, stat, read, rename and unlink of the
#     same names from four processes, plus S3 PUT and DELETE of the same keys
#     through the gateway (with boto3), for KVT_RACE_SECONDS (15 s):
#     open(O_CREAT) never fails ENOENT or ESTALE, a process's own files read
#     back and stat as written, every read gives one version whole (never
#     cut, zero-padded or mixed).
#  4. tests/fuse/deleterace.py: a reader of one file while S3 PUTs and
#     DELETEs its key, for as long: each open reads one version whole or
#     fails ENOENT, never ESTALE.
#  5. tests/fuse/rewrite.py, on a store of 256M: a reader of a 16 MiB file
#     while the name is rewritten 16 times (O_TRUNC, temp + rename) reads
#     the version it opened whole; reclaim, which must free segments
#     meanwhile, takes the versions written after it first (it failed with
#     EIO: a replaced version's segments were the first victims).
#
# Then fsck is clean. Skips (77) where this machine cannot mount.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/fuse/lib.sh
. "$top_srcdir/tests/fuse/lib.sh"
fuse_setup
cat >"$KVTIER_CONF" <<EOF
[store]
dir = $KVT_DIR
capacity = 512M
segment_size = 16M
EOF
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb race
kvt_expect 0 "$K" mb names

fuse_mount "$KVTIER_CONF" "$M"

step "a flush that is not the writer's publishes nothing; a killed writer leaves nothing"
python3 "$top_srcdir/tests/fuse/flush.py" "$M/race" "$K" || fail "flush.py (above)"
grep -q "'race/killed-new' is not published: its writer (task [0-9]*) was killed" "$T/fuse.log" ||
	fail "no log line for the killed writer: $(cat "$T/fuse.log")"

step "each open file reads its own version whole: a writer, a smaller and a larger put meanwhile"
python3 "$top_srcdir/tests/fuse/versions.py" "$M/race/versions" "$K" race versions ||
	fail "versions.py (above)"

# 15 s in the suite; longer by hand (KVT_RACE_SECONDS=120 make check
# TESTS=tests/test_fuse_race.sh). It found, in CI on 2026-11-30, a read of
# a new version zero-padded to an older size, an old version cut at a
# writer's size, and open(O_CREAT) failing ESTALE: each fails it now. In
# CI later that day it read versions put through S3 cut at an older size
# (the kernel had kept an older of two attribute replies: fuse/file.c,
# fh_reader_mode; and fh_create, a create that met a new cached reader).
secs=${KVT_RACE_SECONDS:-15}
if [ "$secs" = 0 ]; then
	step "name races from several processes: skipped (KVT_RACE_SECONDS=0)"
elif [ -x "$top_builddir/kvtier-gateway" ] && python3 -c 'import boto3' 2>/dev/null; then
	step "create/stat/read/rename/unlink of shared names from 4 processes and S3, ${secs} s"
	fuse_gateway "$KVTIER_CONF"
	AWS_ACCESS_KEY_ID=AKIDFUSETEST AWS_SECRET_ACCESS_KEY=$GW_SECRET \
		python3 "$top_srcdir/tests/fuse/namerace.py" "$M/names/st" "$secs" 4 "$GW_URL" names ||
		fail "namerace.py (above)"
	step "a reader of a file whose key is PUT and DELETEd through S3: ENOENT or whole, ${secs} s"
	AWS_ACCESS_KEY_ID=AKIDFUSETEST AWS_SECRET_ACCESS_KEY=$GW_SECRET \
		python3 "$top_srcdir/tests/fuse/deleterace.py" "$M/names/dr" "$secs" "$GW_URL" names ||
		fail "deleterace.py (above)"
	kill -TERM "$GW_PID"
	wait "$GW_PID" || :
	GW_PID=
else
	step "create/stat/read/rename/unlink of shared names from 4 processes, ${secs} s (no boto3: no S3)"
	python3 "$top_srcdir/tests/fuse/namerace.py" "$M/names/st" "$secs" 4 ||
		fail "namerace.py (above)"
fi

step "unmount; fsck"
fuse_umount "$M"
kvt_expect 0 "$K" fsck

step "a reader of a 16 MiB file rewritten 16 times in a 256M store reads it whole"
cat >"$KVTIER_CONF" <<EOF
[store]
dir = $T/small
capacity = 256M
segment_size = 16M
EOF
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb rewrite
fuse_mount "$KVTIER_CONF" "$M"
python3 "$top_srcdir/tests/fuse/rewrite.py" "$M/rewrite/r" 16 16 ||
	fail "rewrite.py (above): $(grep 'evicted while open' "$T/fuse.log" | head -3)"
! grep "evicted while open" "$T/fuse.log" || fail "a reader was evicted (above)"
fuse_umount "$M"
kvt_expect 0 "$K" fsck
echo "ok"
