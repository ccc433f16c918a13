#!/bin/sh
# tests/test_fuse_nofile.sh - kvtier-fuse under a low open-file limit.
#
# Every file written out of order past 1 MiB holds a staging file open in
# the daemon until it is closed. At ulimit -n 300, 400 of them at once
# failed writes and closes with EMFILE, the daemon's limit and not the
# application's, and a file whose writes had all succeeded vanished at its
# failed close (the store was short of descriptors too). Here the daemon
# runs at ulimit -n 340 with 8 segments: it says at mount that this leaves
# room for 48 staged files beside the store's 292 descriptors (2 per
# segment + 256, and a catalog connection of each of 10 loop threads);
# tests/fuse/staging.py writes 400 at once: the 352 writes past the room fail
# with ENFILE, only their closes fail, every other file reads back whole,
# and once they are closed 48 more stage. The daemon says why once.
#
# Skips (77) where this machine cannot mount.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/fuse/lib.sh
. "$top_srcdir/tests/fuse/lib.sh"
fuse_setup
cat >"$KVTIER_CONF" <<EOF
[store]
dir = $KVT_DIR
capacity = 1G
segment_size = 128M
EOF
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb bkt
# The daemon's limit, hard and soft (the store asks 272), not the writer's.
printf '#!/bin/sh\nulimit -n 340\nexec "%s" "$@"\n' "$FUSE" >"$T/fuse-340"
chmod +x "$T/fuse-340"
FUSE=$T/fuse-340
fuse_mount "$KVTIER_CONF" "$M"

step "the mount says how many files can be staged at once"
grep -q "the open-file limit (340) leaves room for 48 files staged at once" "$T/fuse.log" ||
	fail "no word of the staged files the limit leaves room for: $(cat "$T/fuse.log")"

step "400 files staged at once: 352 writes fail with ENFILE, nothing written is lost"
python3 "$top_srcdir/tests/fuse/staging.py" "$M/bkt" 400 48 || fail "staging.py (above)"
[ "$(grep -c "no more files can be staged" "$T/fuse.log")" = 1 ] ||
	fail "the refusal was not said once: $(tail -n 5 "$T/fuse.log")"
! grep -q "Too many open files$" "$T/fuse.log" ||
	fail "the daemon ran out of descriptors: $(grep -m 3 "Too many open files$" "$T/fuse.log")"

step "with the staging room full, a close after metadata-only changes succeeds"
# open(O_RDWR) of an existing file, ftruncate to its own size, fchmod,
# futimens, close: the close wrote the unchanged bytes out through a staging
# file, and failed with ENFILE once the room was full, after every call
# before it had succeeded.
python3 "$top_srcdir/tests/fuse/metaclose.py" "$M/bkt" 48 || fail "metaclose.py (above)"

step "unmount; fsck"
fuse_umount "$M"
kvt_expect 0 "$K" fsck
echo "ok"
