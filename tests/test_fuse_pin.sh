#!/bin/sh
# tests/test_fuse_pin.sh - user.kvtier.pin through a real kvtier-fuse mount.
#
# A file written through the mount was plain cache until `kvtier pin` ran
# after close, and the daemon's background demoter could drop it first.
# tests/fuse/pin.py sets the xattr on the open descriptor (before the
# bytes, and after them) while another thread fills a 16 MiB tier three
# times over with plain files: every close publishes a pinned version,
# every pinned file reads back byte-exact and plain files were dropped.
# Then getfattr shows the pin, a rewrite keeps it, setfattr -x and "0"
# unpin (and the next fills drop those files), a directory answers EISDIR
# and a bad value EINVAL. The shell checks getfattr/setfattr themselves
# where attr is installed, then fsck.
#
# Skips (77) where this machine cannot mount.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/fuse/lib.sh
. "$top_srcdir/tests/fuse/lib.sh"
fuse_setup
# Keys at a bucket's root are each their own session: plain cache, which
# reclaim drops even with a cold tier (the default file:// G4 here, so the
# daemon runs its background demoter).
capacity=16777216
cat >"$KVTIER_CONF" <<EOF
[store]
dir = $KVT_DIR
capacity = $capacity
segment_size = 1M

[fuse]
attr_timeout = 1
entry_timeout = 1
EOF
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb pins

fuse_mount "$KVTIER_CONF" "$M"

step "pinned while written, during a fill of 3x the tier: published pinned, survives whole"
python3 "$top_srcdir/tests/fuse/pin.py" "$M/pins" "$K" pins "$capacity" || fail "pin.py (above)"

if command -v getfattr >/dev/null && command -v setfattr >/dev/null; then
	step "getfattr and setfattr"
	head -c 100000 /dev/urandom >"$T/small"
	cp "$T/small" "$M/pins/tool"
	[ "$(getfattr --absolute-names -n user.kvtier.pin --only-values "$M/pins/tool")" = 0 ] ||
		fail "getfattr: a new file is pinned"
	setfattr -n user.kvtier.pin -v 1 "$M/pins/tool"
	[ "$(getfattr --absolute-names -n user.kvtier.pin --only-values "$M/pins/tool")" = 1 ] ||
		fail "getfattr: setfattr -v 1 did not pin"
	kvt_expect 0 "$K" head pins tool
	kvt_grep out "^pinned: +yes"
	setfattr -x user.kvtier.pin "$M/pins/tool"
	kvt_expect 0 "$K" head pins tool
	kvt_grep out "^pinned: +no"
	getfattr --absolute-names -d -m - "$M/pins/tool" >"$T/attrs"
	grep -q '^user.kvtier.pin="0"' "$T/attrs" || fail "getfattr -d: $(cat "$T/attrs")"
else
	step "getfattr and setfattr: skipped (no attr package)"
fi

step "unmount; fsck"
fuse_umount "$M"
kvt_expect 0 "$K" fsck
echo "ok"
