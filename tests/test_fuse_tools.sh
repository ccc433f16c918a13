#!/bin/sh
# tests/test_fuse_tools.sh - everyday tools on a real kvtier-fuse mount, each
# driving the file system its own way:
#   - rsync -a in and out (temp files renamed into place, modes, times,
#     symlinks), an update in place (--inplace), --delete;
#   - tar: an archive extracted into the mount and made from it again;
#   - git: init, add, commit (lock files renamed into place, fsync), a
#     clone out of the mount, fsck and gc (packs read through mmap).
# Bytes, modes, mtimes and link targets must match the local originals;
# the store must fsck clean after unmount. A missing tool skips its step;
# the test skips (77) where this machine cannot mount.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/fuse/lib.sh
. "$top_srcdir/tests/fuse/lib.sh"
fuse_setup
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb tools
fuse_mount "$KVTIER_CONF" "$M"
B=$M/tools

# A tree with what the tools care about: sizes across extents, an empty
# file, a private mode, an old mtime, a symlink, a nested directory.
mkdir -p "$T/src/a/b" "$T/src/empty-dir"
for size in 0 1 4096 1048576 3000000; do
	head -c "$size" /dev/urandom >"$T/src/a/f$size"
done
echo nested >"$T/src/a/b/n.txt"
chmod 600 "$T/src/a/f4096"
touch -d 2020-01-02T03:04:05 "$T/src/a/f1"
ln -s f1048576 "$T/src/a/link"

# same_tree A B: the same names, bytes, link targets, modes and mtimes.
same_tree()
{
	diff -r --no-dereference "$1" "$2" >"$T/diff" 2>&1 || fail "trees differ: $(cat "$T/diff")"
	(cd "$1" && find . -printf '%p %y %m %TY-%Tm-%Td %TH:%TM:%TS\n' | sed 's/\.[0-9]*$//' | sort) >"$T/meta1"
	(cd "$2" && find . -printf '%p %y %m %TY-%Tm-%Td %TH:%TM:%TS\n' | sed 's/\.[0-9]*$//' | sort) >"$T/meta2"
	# Directories' times change as their entries do; compare files' only.
	grep -v ' d ' "$T/meta1" >"$T/m1" || :
	grep -v ' d ' "$T/meta2" >"$T/m2" || :
	cmp -s "$T/m1" "$T/m2" || fail "modes or times differ: $(diff "$T/m1" "$T/m2")"
}

if command -v rsync >/dev/null; then
	step "rsync -a into the mount and back out"
	kvt_expect 0 rsync -a "$T/src/" "$B/rs/"
	same_tree "$T/src" "$B/rs"
	kvt_expect 0 rsync -a "$B/rs/" "$T/rs-back/"
	same_tree "$T/src" "$T/rs-back"

	step "rsync: nothing to do the second time; --inplace updates; --delete removes"
	kvt_expect 0 rsync -a --itemize-changes "$T/src/" "$B/rs/"
	[ ! -s "$T/out" ] || fail "rsync found changes in an unchanged tree: $(cat "$T/out")"
	head -c 5000 /dev/urandom >>"$T/src/a/f1048576"
	kvt_expect 0 rsync -a --inplace "$T/src/" "$B/rs/"
	cmp "$T/src/a/f1048576" "$B/rs/a/f1048576" || fail "rsync --inplace: bytes differ"
	rm "$T/src/a/f1"
	kvt_expect 0 rsync -a --delete "$T/src/" "$B/rs/"
	[ ! -e "$B/rs/a/f1" ] || fail "rsync --delete left a/f1"
	same_tree "$T/src" "$B/rs"
else
	step "rsync: skipped (no rsync)"
fi

step "tar: extract into the mount, archive it again"
tar -C "$T/src" -cf "$T/in.tar" .
mkdir "$B/tx"
kvt_expect 0 tar -C "$B/tx" -xpf "$T/in.tar"
same_tree "$T/src" "$B/tx"
kvt_expect 0 tar -C "$B/tx" -cf "$T/out.tar" .
mkdir "$T/tx-back"
tar -C "$T/tx-back" -xpf "$T/out.tar"
same_tree "$T/src" "$T/tx-back"

if command -v git >/dev/null; then
	step "git: init, add, commit on the mount; clone out of it; fsck and gc"
	export GIT_AUTHOR_NAME=kvtier GIT_AUTHOR_EMAIL=kvtier@localhost
	export GIT_COMMITTER_NAME=kvtier GIT_COMMITTER_EMAIL=kvtier@localhost
	mkdir "$B/repo"
	cp -r "$T/src/a" "$B/repo/"
	kvt_expect 0 git -C "$B/repo" init -q
	kvt_expect 0 git -C "$B/repo" add -A
	kvt_expect 0 git -C "$B/repo" commit -q -m first
	echo second >"$B/repo/a/b/n.txt"
	kvt_expect 0 git -C "$B/repo" commit -q -am second
	kvt_expect 0 git -C "$B/repo" fsck --strict
	kvt_expect 0 git -C "$B/repo" gc -q
	kvt_expect 0 git -C "$B/repo" fsck --strict
	kvt_expect 0 git clone -q "$B/repo" "$T/clone"
	kvt_expect 0 git -C "$T/clone" log --format=%s
	[ "$(tr '\n' ' ' <"$T/out")" = "second first " ] || fail "git log: $(cat "$T/out")"
	cmp "$T/clone/a/f3000000" "$T/src/a/f3000000" || fail "git clone: bytes differ"
	kvt_expect 0 git -C "$B/repo" status --porcelain
	[ ! -s "$T/out" ] || fail "git status on the mount: $(cat "$T/out")"
else
	step "git: skipped (no git)"
fi

step "unmount; fsck"
fuse_umount "$M"
kvt_expect 0 "$K" fsck
echo "ok"
