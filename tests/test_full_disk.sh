#!/bin/sh
# tests/test_full_disk.sh - the file system under the store fills up.
#
# The store lives on a file system of its own, 64 MiB: an ext4 image on a
# loop device, else a tmpfs of that size. Segment files are written whole
# at init, so what a full disk can break is the catalog. Checked here:
#   - init with a capacity the disk cannot hold is refused with the reason,
#     and leaves nothing behind; a later growth past it is refused the same
#     way and the store opens as before;
#   - once another file has taken all the room: the CLI still reads every
#     object byte-exact and fsck passes; kvtier-gateway and kvtier-fuse start
#     (keeping io_uring; the mount on a store never mounted before, which
#     makes its staging directory at the first write with room) and read
#     every object byte-exact too;
#   - writes fail at once with a clear error (the CLI: exit 1 and "is full";
#     the gateway: 503 SlowDown; the mount: ENOSPC at close), nothing half
#     written shows up, and nothing stored before is lost;
#   - with room again, every face writes again and fsck is clean;
#   - remounted read-only (as ext4 does after an I/O error), the store opens
#     to be read: every face reads, writes answer EROFS (the CLI, the mount)
#     or 503 (the gateway), even with the catalog's -wal and -shm gone, and
#     with a capacity raised since (served at the store's size);
#     without the -shm file alone it reads after a clean close, and is
#     refused with the reason when a killed process left commits in the WAL;
#     an older kvtier's catalog there is refused saying so (its migration
#     would write), and upgraded once the disk is writable;
#   - G4 (file://) on a full disk: kvtier-migrate fails with the reason,
#     every object stays readable, nothing is left half written in G4, and
#     the next run, with room, demotes everything.
#
# Needs root (mount); skips (77) where no small file system can be mounted.
# The mount part skips alone where FUSE is missing.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || skip "mounting a small file system needs root"
kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP
K=$KVTIER
FUSE=$top_builddir/kvtier-fuse
DISK=$T/disk
M=$T/mnt
FUSE_PID=

fd_cleanup()
{
	if [ -n "$FUSE_PID" ]; then
		fusermount3 -u -z "$M" 2>/dev/null || :
		kill -KILL "$FUSE_PID" 2>/dev/null || :
		wait "$FUSE_PID" 2>/dev/null || :
	fi
	for p in $gw_pids; do
		kill -TERM "$p" 2>/dev/null || :
		wait "$p" 2>/dev/null || :
	done
	umount -l "$DISK" 2>/dev/null || :
	kvt_cleanup
}
trap fd_cleanup EXIT

mkdir "$DISK" "$M"
if command -v mkfs.ext4 >/dev/null && truncate -s 64M "$T/disk.img" &&
	mkfs.ext4 -q -F "$T/disk.img" 2>/dev/null && mount -o loop "$T/disk.img" "$DISK" 2>/dev/null; then
	echo "    the store's disk: a 64 MiB ext4 image on a loop device"
elif mount -t tmpfs -o size=64m kvtier-test "$DISK" 2>/dev/null; then
	echo "    the store's disk: a 64 MiB tmpfs"
else
	skip "cannot mount a 64 MiB file system (loop device or tmpfs)"
fi

# gw_start makes its store in $T/NAME: here, on the small disk.
mkdir "$DISK/store"
ln -s "$DISK/store" "$T/full"
CONF=$T/full.conf
export KVTIER_CONF=$CONF

step "a capacity the disk cannot hold: init refuses, naming the room, and leaves nothing"
gw_config "$CONF" "$T/full" 128M 8M
kvt_expect 1 "$K" init
kvt_grep err "capacity 128 MiB needs 128 MiB more for segment files in '$T/full', which has [0-9]+ MiB free: lower \[store\] capacity or make room"
[ -z "$(ls -A "$DISK/store")" ] || fail "a refused init left files: $(ls -A "$DISK/store")"

step "a store that fits (40 MiB), with objects in it"
gw_config "$CONF" "$T/full" 40M 8M
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb bkt
for i in 0 1 2 3 4 5; do
	head -c $((262144 * (i + 1) + i)) /dev/urandom >"$T/in.$i"
	kvt_expect 0 "$K" put bkt "before/$i" "$T/in.$i"
done

step "growing past the disk is refused the same way; the store opens as before"
gw_config "$CONF" "$T/full" 256M 8M
kvt_expect 1 "$K" stat
kvt_grep err "lower \[store\] capacity or make room"
gw_config "$CONF" "$T/full" 40M 8M
kvt_expect 0 "$K" stat
kvt_grep out "^capacity: +40\.0 MiB"

s3curl()
{
	s3c_out=$1
	shift
	curl -s -o "$s3c_out" -w "%{http_code}" --aws-sigv4 "aws:amz:us-east-1:s3" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
		--user "$GW_ACCESS:$GW_SECRET" "$@"
}

# fd_mounted_or_exited: kvtier-fuse ($FUSE_PID) has mounted $M, or has exited.
fd_mounted_or_exited()
{
	grep -q " $M fuse" /proc/mounts || ! kill -0 "$FUSE_PID" 2>/dev/null
}

# fd_mount: kvtier-fuse on the store at $M, fuse=1; where this machine
# cannot mount, fuse=0 and the mount's checks are skipped, said so.
fd_mount()
{
	fuse=0
	if ! [ -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
		echo "    SKIP the mount: no /dev/fuse or fusermount3 here"
		return 0
	fi
	"$FUSE" -c "$CONF" "$M" -f 2>"$T/fuse.log" &
	FUSE_PID=$!
	poll 1200 fd_mounted_or_exited || fail "kvtier-fuse did not mount in 120 s: $(cat "$T/fuse.log")"
	if grep -q " $M fuse" /proc/mounts; then
		fuse=1
		return 0
	fi
	FUSE_PID=
	if grep -q "fuse: device not found\|Operation not permitted\|Permission denied" "$T/fuse.log"; then
		echo "    SKIP the mount: this machine refuses FUSE mounts: $(tail -1 "$T/fuse.log")"
	else
		fail "kvtier-fuse exited: $(cat "$T/fuse.log")"
	fi
}

# fd_umount: kvtier-fuse must exit 0 on fusermount3 -u.
fd_umount()
{
	[ "$fuse" = 1 ] || return 0
	fusermount_u "$M"
	fuse_rc=0
	wait "$FUSE_PID" || fuse_rc=$?
	FUSE_PID=
	fuse=0
	[ "$fuse_rc" -eq 0 ] || fail "kvtier-fuse exited $fuse_rc: $(tail -5 "$T/fuse.log")"
}

# check_all WHEN: every object stored so far reads back byte-exact through
# the CLI, and through the gateway and the mount once they run; fsck passes.
gw=0 fuse=0 stored_full=
check_all()
{
	for i in 0 1 2 3 4 5; do
		kvt_expect 0 "$K" get bkt "before/$i" "$T/back"
		cmp -s "$T/in.$i" "$T/back" || fail "$1: before/$i differs (CLI)"
		if [ "$gw" = 1 ]; then
			[ "$(s3curl "$T/back" "$GW_ENDPOINT/bkt/before/$i")" = 200 ] ||
				fail "$1: gateway GET of before/$i"
			cmp -s "$T/in.$i" "$T/back" || fail "$1: before/$i differs (gateway)"
		fi
		if [ "$fuse" = 1 ]; then
			cmp -s "$T/in.$i" "$M/bkt/before/$i" || fail "$1: before/$i differs (mount)"
		fi
	done
	for k in $stored_full; do
		kvt_expect 0 "$K" get bkt "$k" "$T/back"
		cmp -s "$T/small" "$T/back" || fail "$1: $k, stored while the disk was full, differs"
	done
	kvt_expect 0 "$K" fsck
	kvt_grep out "^status: +clean"
}

step "another file takes all the room left"
dd if=/dev/zero of="$DISK/filler" bs=64k 2>/dev/null || :
# And the last blocks: a directory's block (the mount's staging directory)
# must not fit by chance.
dd if=/dev/zero of="$DISK/filler" bs=1k oflag=append conv=notrunc 2>/dev/null || :
avail=$(df -k --output=avail "$DISK" | tail -1 | tr -d ' ')
[ "$avail" -lt 64 ] || fail "the disk still has $avail KiB free"

step "a full disk: the CLI reads every object; fsck passes; stat says so"
check_all "disk full"
kvt_expect 0 "$K" stat
kvt_grep out "^catalog: +[0-9.]+ [KM]iB, [0-9.]+ [KM]?i?B left on its disk$"
kvt_expect 0 "$K" stat --json
free=$(sed -n 's/.*"disk_free_bytes":\([0-9]*\).*/\1/p' "$T/out")
[ -n "$free" ] && [ "$free" -lt 65536 ] || fail "stat --json: disk_free_bytes '$free' on a full disk"

step "a full disk: kvtier-gateway and kvtier-fuse start, and read every object"
# The store was never mounted: kvtier-fuse could not make its staging
# directory and did not start ("No space left on device"). It now makes it
# at the first write that needs it.
[ ! -e "$DISK/store/fuse-staging" ] || fail "the store was mounted before: it has a staging directory"
gw_start full 40M 8M
gw=1
if grep -q "unavailable" "$GW_LOG" && ! grep -q " $DISK tmpfs" /proc/mounts; then
	fail "the gateway gave up io_uring on a full disk: $(cat "$GW_LOG")"
fi
fd_mount
check_all "disk full, daemons running"
curl -s "$GW_ENDPOINT/metrics" >"$T/metrics"
free=$(sed -n 's/^kvtier_disk_free_bytes \([0-9]*\)$/\1/p' "$T/metrics")
[ -n "$free" ] && [ "$free" -lt 65536 ] || fail "/metrics: kvtier_disk_free_bytes '$free' on a full disk"
grep -Eq '^kvtier_catalog_bytes [1-9][0-9]*$' "$T/metrics" || fail "/metrics: no kvtier_catalog_bytes"

step "a full disk: writes fail at once with a clear error, and nothing half written shows"
head -c 4096 /dev/urandom >"$T/small"
# The catalog's log may still hold a few commits: write until one fails.
failed=0
i=0
while [ "$i" -lt 300 ]; do
	t0=$(date +%s)
	kvt_run "$K" put bkt "full/$i" "$T/small"
	if [ "$rc" -ne 0 ]; then
		[ "$rc" -eq 1 ] || fail "a put on a full disk exited $rc, expected 1"
		kvt_grep err "the file system holding '.*catalog\.db' is full"
		kvt_grep err "^kvtier: put: 'bkt/full/$i': no space left \(hot tier full, or the disk under the store\)$"
		[ $(($(date +%s) - t0)) -le 5 ] || fail "a put on a full disk took over 5 s to fail"
		failed=1
		break
	fi
	stored_full="$stored_full full/$i"
	i=$((i + 1))
done
[ "$failed" = 1 ] || fail "300 puts on a full disk all succeeded"
echo "    put $i failed as it should, after $i that the catalog's log still held"
kvt_expect 1 "$K" head bkt "full/$i"
# Between failures a checkpoint may free room in the catalog's log for a
# commit or two: each face writes until it fails, and what it wrote counts.
j=0
while :; do
	[ "$j" -lt 300 ] || fail "300 gateway PUTs on a full disk all succeeded"
	code=$(s3curl "$T/gwout" -T "$T/small" "$GW_ENDPOINT/bkt/full/gw$j")
	[ "$code" = 200 ] || break
	stored_full="$stored_full full/gw$j"
	j=$((j + 1))
done
[ "$code" = 503 ] || fail "gateway PUT on a full disk answered $code: $(cat "$T/gwout")"
grep -q "<Code>SlowDown</Code>" "$T/gwout" || fail "gateway PUT on a full disk: $(cat "$T/gwout")"
[ "$(curl -s -o "$T/health" -w '%{http_code}' "$GW_ENDPOINT/health")" = 200 ] ||
	fail "the gateway is unhealthy after a failed PUT"
# A readiness check reads what the next PUT meets (it said "ok").
grep -qx "writes: refused (disk full)" "$T/health" ||
	fail "/health on a full disk: $(cat "$T/health")"
kvt_expect 1 "$K" head bkt "full/gw$j"
if [ "$fuse" = 1 ]; then
	j=0
	while cp "$T/small" "$M/bkt/fuse-full$j" 2>"$T/cp.err"; do
		stored_full="$stored_full fuse-full$j"
		j=$((j + 1))
		[ "$j" -lt 300 ] || fail "300 copies into the mount on a full disk all succeeded"
	done
	grep -q "No space left on device" "$T/cp.err" || fail "cp on a full disk: $(cat "$T/cp.err")"
	kvt_expect 1 "$K" head bkt "fuse-full$j"
	grep -q "cannot make the staging directory '.*' yet: mounted to be read" "$T/fuse.log" ||
		fail "kvtier-fuse did not say it started without its staging directory: $(cat "$T/fuse.log")"
	# Past 2 MiB a file streams into a part, which needs the staging
	# directory (its owner lock): ENOSPC, saying why.
	head -c $((3 << 20)) /dev/urandom >"$T/big3"
	if cp "$T/big3" "$M/bkt/fuse-big" 2>"$T/cp.err"; then
		fail "a 3 MiB copy into the mount on a full disk succeeded"
	fi
	grep -q "No space left on device" "$T/cp.err" || fail "3 MiB cp on a full disk: $(cat "$T/cp.err")"
	kvt_expect 1 "$K" head bkt fuse-big
fi
check_all "after failed writes"

step "room again: every face writes again; fsck is clean"
rm "$DISK/filler"
curl -s "$GW_ENDPOINT/health" >"$T/health"
grep -qx "writes: ok" "$T/health" || fail "/health with room again: $(cat "$T/health")"
kvt_expect 0 "$K" put bkt after/cli "$T/small"
kvt_expect 0 "$K" get bkt after/cli "$T/back"
cmp -s "$T/small" "$T/back" || fail "after/cli differs"
[ "$(s3curl /dev/null -T "$T/small" "$GW_ENDPOINT/bkt/after/gw")" = 200 ] ||
	fail "gateway PUT once the disk had room"
# The gateway started on the full disk without its uploads bucket: the
# first multipart upload makes it.
if python3 -c 'import boto3' 2>/dev/null; then
	head -c $((6 << 20)) /dev/urandom >"$T/big"
	GW_ENDPOINT=$GW_ENDPOINT python3 - "$T/big" <<'EOP' || fail "multipart upload once the disk had room"
import os, sys
import boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["GW_ENDPOINT"], region_name="us-east-1",
                  aws_access_key_id=os.environ["GW_ACCESS"],
                  aws_secret_access_key=os.environ["GW_SECRET"],
                  config=Config(s3={"addressing_style": "path"}))
data = open(sys.argv[1], "rb").read()
up = s3.create_multipart_upload(Bucket="bkt", Key="after/multi")["UploadId"]
parts = []
for n, off in enumerate(range(0, len(data), 5 << 20), 1):
    r = s3.upload_part(Bucket="bkt", Key="after/multi", UploadId=up, PartNumber=n,
                       Body=data[off:off + (5 << 20)])
    parts.append({"PartNumber": n, "ETag": r["ETag"]})
s3.complete_multipart_upload(Bucket="bkt", Key="after/multi", UploadId=up,
                             MultipartUpload={"Parts": parts})
assert s3.get_object(Bucket="bkt", Key="after/multi")["Body"].read() == data
EOP
else
	echo "    SKIP the multipart upload: no boto3 (Debian: apt-get install python3-boto3)"
fi
if [ "$fuse" = 1 ]; then
	cp "$T/small" "$M/bkt/after/fuse" || fail "cp into the mount once the disk had room"
	cp "$T/big3" "$M/bkt/after/fuse-big" || fail "3 MiB cp into the mount once the disk had room"
	cmp -s "$T/big3" "$M/bkt/after/fuse-big" || fail "after/fuse-big differs"
	[ -d "$DISK/store/fuse-staging" ] || fail "the first write with room made no staging directory"
	grep -q "made the staging directory '.*': files are written again" "$T/fuse.log" ||
		fail "kvtier-fuse did not say it made its staging directory: $(cat "$T/fuse.log")"
	kvt_expect 0 "$K" get bkt after/fuse "$T/back"
	cmp -s "$T/small" "$T/back" || fail "after/fuse differs"
fi
fd_umount
gw_stop "$GW_PID"
gw=0
kvt_expect 0 "$K" fsck
kvt_grep out "^status: +clean"
kvt_expect 0 "$K" stat

step "the disk goes read-only: every face still reads; writes answer EROFS, 503"
mount -o remount,ro "$DISK" || fail "cannot remount the disk read-only"
kvt_expect 1 "$K" put bkt ro/cli "$T/small"
kvt_grep err "^kvtier: put: 'bkt/ro/cli': Read-only file system$"
kvt_grep err "is on a read-only file system: opened to read only"
check_all "read-only"
# A capacity raised meanwhile cannot be made: served at the store's size.
gw_config "$CONF" "$T/full" 256M 8M
kvt_expect 0 "$K" stat
kvt_grep err "has 5 segments and cannot grow to the 32 that capacity asks for on a read-only file system: opened at 5$"
kvt_grep out "^capacity: +40\.0 MiB"
kvt_expect 1 "$K" init
kvt_grep err "^kvtier: init: cannot grow the store in '.*': Read-only file system$"
gw_config "$CONF" "$T/full" 40M 8M
kvt_expect 1 "$top_builddir/kvtier-migrate"
kvt_grep err "is on a read-only file system: nothing can be demoted, recalled or imported"
gw_start full 40M 8M
gw=1
fd_mount
check_all "read-only, daemons running"
code=$(s3curl "$T/gwout" -T "$T/small" "$GW_ENDPOINT/bkt/ro/gw")
[ "$code" = 503 ] || fail "gateway PUT on a read-only store answered $code: $(cat "$T/gwout")"
grep -q "read-only file system" "$T/gwout" || fail "gateway PUT on a read-only store: $(cat "$T/gwout")"
curl -s "$GW_ENDPOINT/health" >"$T/health"
grep -q "^writes: refused (read-only file system)$" "$T/health" || fail "/health: $(cat "$T/health")"
if [ "$fuse" = 1 ]; then
	if cp "$T/small" "$M/bkt/ro-fuse" 2>"$T/cp.err"; then
		fail "cp into a read-only store's mount succeeded"
	fi
	grep -q "Read-only file system" "$T/cp.err" || fail "cp into a read-only mount: $(cat "$T/cp.err")"
fi
fd_umount
gw_stop "$GW_PID"
gw=0

step "read-only without the catalog's -wal and -shm files: still reads"
mount -o remount,rw "$DISK"
rm -f "$DISK/store/catalog.db-wal" "$DISK/store/catalog.db-shm"
mount -o remount,ro "$DISK"
check_all "read-only, no -wal"
mount -o remount,rw "$DISK"

step "read-only without the -shm file: reads after a clean close; refused with the reason while the WAL holds commits"
kvt_expect 0 "$K" ls bkt
rm -f "$DISK/store/catalog.db-shm"
mount -o remount,ro "$DISK"
check_all "read-only, no -shm"
mount -o remount,rw "$DISK"
gw_start full 40M 8M
[ "$(s3curl "$T/gwout" -T "$T/small" "$GW_ENDPOINT/bkt/after/killed")" = 200 ] ||
	fail "gateway PUT before the kill: $(cat "$T/gwout")"
kill -9 "$GW_PID"
wait "$GW_PID" 2>/dev/null || :
rm -f "$DISK/store/catalog.db-shm"
[ -s "$DISK/store/catalog.db-wal" ] || fail "the killed gateway left no commits in the WAL"
mount -o remount,ro "$DISK"
kvt_expect 1 "$K" get bkt after/killed "$T/back"
kvt_grep err "catalog.db-shm' file is missing and its file system is read-only"
kvt_grep err "open the store once where it can be written$"
mount -o remount,rw "$DISK"
kvt_expect 0 "$K" get bkt after/killed "$T/back"
cmp -s "$T/small" "$T/back" || fail "after/killed differs once the disk was writable again"
kvt_expect 0 "$K" put bkt after/rw "$T/small"
kvt_expect 0 "$K" fsck
kvt_grep out "^status: +clean"

step "an older kvtier's catalog on a read-only file system: refused saying why; upgraded once writable"
# Schema 7 is what kvtier wrote before migration 8 (a settings row); 9 set
# another (set again as it was), 10 added g4_dead.unproven and its index,
# 11 three indexes.
sqlite3 "$DISK/store/catalog.db" "DELETE FROM settings WHERE name = 'extent_payload_max';
	DROP INDEX objects_g4_unnamed; DROP INDEX objects_g4_unnamed_crc;
	DROP INDEX g4_dead_unproven_session;
	DROP INDEX g4_dead_unproven; ALTER TABLE g4_dead DROP COLUMN unproven;
	PRAGMA user_version = 7" || fail "cannot make the catalog an older kvtier's"
mount -o remount,ro "$DISK"
kvt_expect 1 "$K" get bkt after/rw "$T/back"
kvt_grep err "the catalog's schema is version 7, an older kvtier's: this kvtier \([0-9]+\) upgrades it at its first open, which its read-only file system does not allow; open the store once where it can be written"
mount -o remount,rw "$DISK"
kvt_expect 0 "$K" get bkt after/rw "$T/back"
cmp -s "$T/small" "$T/back" || fail "after/rw differs once the catalog was upgraded"
[ "$(sqlite3 "$DISK/store/catalog.db" "PRAGMA user_version")" -gt 7 ] ||
	fail "the catalog was not upgraded once writable"

step "G4 (file://) on a full disk: demotion fails with the reason and loses nothing; with room it completes"
# A store of its own, off the small disk; its G4 directory on it.
G4C=$T/g4.conf
gw_config "$G4C" "$T/g4store" 32M 8M
printf '[g4]\nurl = file://%s/g4\n' "$DISK" >>"$G4C"
kvt_expect 0 "$K" -c "$G4C" init
kvt_expect 0 "$K" -c "$G4C" mb g4b
for i in 0 1 2 3 4 5; do
	head -c $((700000 + i)) /dev/urandom >"$T/g4in.$i"
	kvt_expect 0 "$K" -c "$G4C" put g4b "conv/s$((i % 2))/b$i" "$T/g4in.$i"
done
dd if=/dev/zero of="$DISK/filler" bs=64k 2>/dev/null || :
kvt_expect 1 "$top_builddir/kvtier-migrate" -c "$G4C" --idle 0s
kvt_grep err "No space left on device"
kvt_grep err "demote: .*[1-9][0-9]* failures"
for i in 0 1 2 3 4 5; do
	kvt_expect 0 "$K" -c "$G4C" get g4b "conv/s$((i % 2))/b$i" "$T/back"
	cmp -s "$T/g4in.$i" "$T/back" || fail "conv/s$((i % 2))/b$i differs after a demotion into a full G4"
done
[ -z "$(find "$DISK/g4" -path '*/.kvtier/tmp/*' -type f 2>/dev/null)" ] ||
	fail "the failed demotion left temporary files in G4: $(find "$DISK/g4" -path '*/.kvtier/tmp/*')"
rm "$DISK/filler"
kvt_expect 0 "$top_builddir/kvtier-migrate" -c "$G4C" --idle 0s
kvt_grep err "demote: .* 0 failures"
for i in 0 1 2 3 4 5; do
	kvt_expect 0 "$K" -c "$G4C" head g4b "conv/s$((i % 2))/b$i"
	kvt_grep out "^tier: +cold$"
	kvt_expect 0 "$K" -c "$G4C" get g4b "conv/s$((i % 2))/b$i" "$T/back"
	cmp -s "$T/g4in.$i" "$T/back" || fail "conv/s$((i % 2))/b$i differs once recalled"
done
kvt_expect 0 "$K" -c "$G4C" fsck
kvt_grep out "^status: +clean"
echo "ok"
