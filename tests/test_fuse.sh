#!/bin/sh
# tests/test_fuse.sh - kvtier-fuse mounted for real on a scratch store.
#
# Plain tools (cp, cat, mv, rm, ls -R, dd, cmp, truncate, ln, chmod, touch),
# Python file I/O and a random-operation exerciser (tests/fuse/fsx.py) work
# through the mount; the CLI (and, with boto3, the gateway) must read back
# the very same bytes. Then the faults: what a KV store cannot do fails with
# a clear errno, the daemon killed with SIGKILL mid-write leaves no half
# object and every closed file intact, a full hot tier answers ENOSPC and
# corrupts nothing, SIGTERM and fusermount3 -u unmount cleanly.
#
# Skips (77) where this machine cannot mount: no /dev/fuse, no fusermount3,
# no python3, or a mount refused (an unprivileged container). Every mount is
# undone when the script exits, however it exits.
#
# KVT_FSX_OPS (3000) and KVT_FSX_SECONDS (240) bound the exerciser.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

# shellcheck source=tests/fuse/lib.sh
. "$top_srcdir/tests/fuse/lib.sh"
fuse_setup
HELPER=$top_builddir/fuse/mount.kvtier
FSX=$top_srcdir/tests/fuse/fsx.py

# A bigger store than lib.sh's: everything below writes some 600 MiB, and
# past the high watermark reclaim would rightly drop plain cache objects
# that later steps read back.
cat >"$KVTIER_CONF" <<EOF
[store]
dir = $KVT_DIR
capacity = 1G
segment_size = 32M

[fuse]
attr_timeout = 1
entry_timeout = 1
EOF
kvt_expect 0 "$K" init

# expect_err ERRNO-TEXT CMD...: CMD must fail and say ERRNO-TEXT.
expect_err()
{
	ee_want=$1
	shift
	kvt_run "$@"
	[ "$rc" -ne 0 ] || fail "'$*' succeeded, expected '$ee_want'"
	grep -q "$ee_want" "$T/err" || fail "'$*' failed with '$(cat "$T/err")', expected '$ee_want'"
}

# gone PATH: PATH does not exist within 30 s (what makes the kernel forget
# it, an entry timeout or a RELEASE that follows close(2), can take seconds
# of a loaded sanitizer build: 3 s was short).
gone()
{
	poll 300 test ! -e "$1"
}

# same FILE BUCKET KEY: the store holds exactly FILE's bytes under KEY.
same()
{
	"$K" get "$2" "$3" "$T/back" >/dev/null 2>&1 || fail "CLI get '$2/$3' failed"
	cmp -s "$1" "$T/back" || fail "'$2/$3' in the store differs from '$1'"
}

step "mount; the root lists buckets, mkdir makes one, rmdir removes it"
fuse_mount "$KVTIER_CONF" "$M"
[ -z "$(ls -A "$M")" ] || fail "a new store's root is not empty: $(ls -A "$M")"
mkdir "$M/models"
"$K" buckets | grep -q " models$" || fail "mkdir at the root made no bucket"
"$K" mb fromcli >/dev/null
[ -d "$M/fromcli" ] || fail "a bucket made by the CLI is not a directory"
expect_err "Invalid argument" mkdir "$M/Not_A_Bucket"
expect_err "File exists" mkdir "$M/models"
expect_err "Operation not permitted" touch "$M/file-at-root"
rmdir "$M/fromcli"
"$K" buckets | grep -q " fromcli$" && fail "rmdir at the root left the bucket"
B=$M/models

step "cp, cat, cmp, dd of sizes around the 1 MiB extent, byte-exact in the store"
for size in 0 1 4095 4096 1048512 1048575 1048576 1048577 2097152 5242883; do
	head -c "$size" /dev/urandom >"$T/in.$size"
	cp "$T/in.$size" "$B/f.$size"
	cmp "$T/in.$size" "$B/f.$size" || fail "cp of $size bytes reads back different"
	[ "$(stat -c %s "$B/f.$size")" -eq "$size" ] || fail "stat of f.$size: wrong size"
	same "$T/in.$size" models "f.$size"
done
cat "$B/f.4095" "$B/f.1" >"$T/cat.out"
cat "$T/in.4095" "$T/in.1" | cmp - "$T/cat.out" || fail "cat through the mount differs"
dd if="$T/in.5242883" of="$B/dd.1m" bs=1M status=none
dd if="$T/in.5242883" of="$B/dd.4k" bs=4k status=none
dd if="$T/in.5242883" of="$B/dd.odd" bs=65521 status=none
for f in dd.1m dd.4k dd.odd; do
	same "$T/in.5242883" models "$f"
done
dd if="$B/dd.1m" of="$T/dd.back" bs=3000 status=none
cmp "$T/in.5242883" "$T/dd.back" || fail "dd read with odd block size differs"
# A write in the middle of an existing file (staged, then republished whole).
head -c 100000 /dev/urandom >"$T/patch"
dd if="$T/patch" of="$B/dd.1m" bs=1 seek=1048000 conv=notrunc status=none
python3 - "$T/in.5242883" "$T/patch" "$T/expect" <<'EOF'
import sys
a = bytearray(open(sys.argv[1], "rb").read())
p = open(sys.argv[2], "rb").read()
a[1048000:1048000 + len(p)] = p
open(sys.argv[3], "wb").write(a)
EOF
cmp "$T/expect" "$B/dd.1m" || fail "dd conv=notrunc in the middle reads back wrong"
same "$T/expect" models dd.1m

step "directories: mkdir -p, ls -R, an empty directory is an S3 prefix, rmdir"
mkdir -p "$B/conv1/turn1" "$B/conv1/turn2" "$B/empty"
cp "$T/in.4096" "$B/conv1/turn1/blk0"
cp "$T/in.1" "$B/conv1/turn2/blk0"
ls -R "$B/conv1" >"$T/lsr"
printf '%s\n' "$B/conv1:" turn1 turn2 "" "$B/conv1/turn1:" blk0 "" "$B/conv1/turn2:" blk0 |
	diff - "$T/lsr" || fail "ls -R shows the wrong tree"
"$K" ls models >"$T/ls"
grep -q "PRE empty/$" "$T/ls" || fail "S3 listing does not show the empty directory: $(cat "$T/ls")"
expect_err "Directory not empty" rmdir "$B/conv1"
expect_err "Not a directory" rmdir "$B/f.1"
expect_err "Is a directory" rm "$B/conv1"
rmdir "$B/empty"
[ ! -e "$B/empty" ] || fail "rmdir left the directory"
# A directory whose last file goes stays, as on any file system.
rm "$B/conv1/turn2/blk0"
[ -d "$B/conv1/turn2" ] || fail "removing the last file removed its directory"
rmdir "$B/conv1/turn2"
# An S3 key that no name reaches (S3 does not normalise paths: "a//b" is a
# key of its own) is not listed, and keeps its directory: rmdir fails
# ENOTEMPTY, and the log says which keys, to remove through S3 (an
# empty-looking directory refused removal and nothing said why).
"$K" put models 'hid/a//b' "$T/in.1" >/dev/null
[ -z "$(ls -A "$B/hid/a")" ] || fail "'hid/a' lists '$(ls -A "$B/hid/a")'"
expect_err "Directory not empty" rmdir "$B/hid/a"
grep -q "'models/hid/a' lists empty but holds S3 keys no name reaches (from 'hid/a//')" \
	"$T/fuse.log" || fail "the log does not say what keeps 'hid/a'"
same "$T/in.1" models 'hid/a//b'
"$K" rm models 'hid/a//b' >/dev/null
gone "$B/hid"

step "mv: rename, over an existing file, directories, across buckets"
cp "$T/in.4095" "$B/a"
cp "$T/in.1" "$B/b"
mv "$B/a" "$B/renamed"
[ ! -e "$B/a" ] || fail "mv left the source"
same "$T/in.4095" models renamed
mv -f "$B/renamed" "$B/b"
same "$T/in.4095" models b
"$K" get models renamed /dev/null 2>/dev/null && fail "the renamed key is still in the store"
mkdir -p "$B/dir1/sub"
cp "$T/in.4096" "$B/dir1/sub/x"
mv "$B/dir1" "$B/dir2"
same "$T/in.4096" models dir2/sub/x
[ ! -e "$B/dir1" ] || fail "mv of a directory left the source"
cmp "$T/in.4096" "$B/dir2/sub/x" || fail "file under a renamed directory differs"
mkdir "$B/dir3" "$B/dir3/keep"
expect_err "Directory not empty\|File exists" mv -T "$B/dir2" "$B/dir3"
mkdir "$M/other"
mv "$B/b" "$M/other/b"	# EXDEV: mv copies and removes
same "$T/in.4095" other b
[ ! -e "$B/b" ] || fail "mv across buckets left the source"
python3 - "$B" <<'EOF'
import ctypes, errno, os, sys
d = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, NOREPLACE, EXCHANGE = -100, 1, 2
open(os.path.join(d, "n1"), "w").write("1")
open(os.path.join(d, "n2"), "w").write("2")
def renameat2(a, b, flags):
    r = libc.renameat2(AT_FDCWD, os.path.join(d, a).encode(), AT_FDCWD,
                       os.path.join(d, b).encode(), flags)
    return 0 if r == 0 else ctypes.get_errno()
assert renameat2("n1", "n2", NOREPLACE) == errno.EEXIST, "RENAME_NOREPLACE replaced"
assert renameat2("n1", "n2", EXCHANGE) == errno.EINVAL, "RENAME_EXCHANGE did not fail EINVAL"
assert renameat2("n1", "n3", NOREPLACE) == 0, "RENAME_NOREPLACE to a free name failed"
os.replace(os.path.join(d, "n3"), os.path.join(d, "n2"))
assert open(os.path.join(d, "n2")).read() == "1"
assert not os.path.exists(os.path.join(d, "n1"))
EOF

step "Python file I/O: O_EXCL, O_APPEND, seek and overwrite, truncate, fsync"
python3 - "$B" <<'EOF'
import os, sys, time
d = sys.argv[1]
p = os.path.join(d, "py")
with open(p, "xb") as f:
    f.write(b"hello world")
try:
    open(p, "xb")
    raise SystemExit("O_EXCL opened an existing file")
except FileExistsError:
    pass
with open(p, "ab") as f:
    f.write(b"!!")
assert open(p, "rb").read() == b"hello world!!"
with open(p, "r+b") as f:
    f.seek(6)
    f.write(b"WORLD")
    f.seek(0)
    assert f.read() == b"hello WORLD!!"
    f.truncate(5)
    f.flush()
    os.fsync(f.fileno())
    # fsync published: another open sees it before close.
    assert open(p, "rb").read() == b"hello"
    f.seek(0, 2)
    f.write(b" again")
assert open(p, "rb").read() == b"hello again"
os.truncate(p, 20)
assert open(p, "rb").read() == b"hello again" + b"\0" * 9
os.truncate(p, 3)
assert open(p, "rb").read() == b"hel"
with open(p, "w") as f:
    pass
assert os.path.getsize(p) == 0
# O_RDONLY|O_TRUNC truncates, as on Linux's own file systems.
open(p, "wb").write(b"hello")
fd = os.open(p, os.O_RDONLY | os.O_TRUNC)
assert os.fstat(fd).st_size == 0 and os.read(fd, 10) == b""
os.close(fd)
assert open(p, "rb").read() == b"", "O_RDONLY|O_TRUNC did not truncate"
# ftruncate(2) to the size the file has moves mtime all the same.
open(p, "wb").write(b"hello")
m0 = os.stat(p).st_mtime_ns
time.sleep(0.02)
fd = os.open(p, os.O_RDWR)
os.ftruncate(fd, 5)
os.close(fd)
assert os.stat(p).st_mtime_ns > m0, "ftruncate to the same size kept mtime"
assert open(p, "rb").read() == b"hello"
# A new file unlinked while open has no links left.
fd = os.open(os.path.join(d, "new-gone"), os.O_RDWR | os.O_CREAT)
os.write(fd, b"x")
os.unlink(os.path.join(d, "new-gone"))
assert os.fstat(fd).st_nlink == 0, os.fstat(fd)
os.close(fd)
# A file written, unlinked while open, is never published; until it is
# closed it keeps its bytes, an fsync included (it read as empty after one).
f = open(os.path.join(d, "gone"), "wb")
f.write(b"x" * 1000)
os.unlink(os.path.join(d, "gone"))
f.close()
assert not os.path.exists(os.path.join(d, "gone"))
with open(os.path.join(d, "gone2"), "wb") as f:
    f.write(b"old")
fd = os.open(os.path.join(d, "gone2"), os.O_RDWR)
os.write(fd, b"y" * 3826)
os.unlink(os.path.join(d, "gone2"))
os.fsync(fd)
assert os.fstat(fd).st_size == 3826 and os.lseek(fd, 0, os.SEEK_END) == 3826
os.write(fd, b"z")
assert os.pread(fd, 4000, 0) == b"y" * 3826 + b"z"
os.close(fd)
assert not os.path.exists(os.path.join(d, "gone2"))
# Shell append, line by line.
for i in range(5):
    with open(os.path.join(d, "log"), "a") as f:
        f.write("line %d\n" % i)
assert open(os.path.join(d, "log")).read() == "".join("line %d\n" % i for i in range(5))
EOF
echo appended >>"$B/log"
tail -1 "$B/log" | grep -qx appended || fail "shell >> did not append"
truncate -s 2000000 "$B/f.1"
[ "$(stat -c %s "$B/f.1")" -eq 2000000 ] || fail "truncate -s did not grow the file"
head -c 1 "$T/in.1" >"$T/grown"
truncate -s 2000000 "$T/grown"
cmp "$T/grown" "$B/f.1" || fail "truncate did not zero-extend"

step "an object replaced by another process is read anew on the next open"
cat "$B/f.4096" >/dev/null	# the kernel caches its size and pages
"$K" put models f.4096 "$T/in.1048576" >/dev/null
cmp "$T/in.1048576" "$B/f.4096" || fail "the mount read the old size or pages after a put"
"$K" put models f.4096 "$T/in.4095" >/dev/null
cmp "$T/in.4095" "$B/f.4096" || fail "the mount read the old size after a smaller put"
"$K" put models f.4096 "$T/in.4096" >/dev/null

step "an object deleted by another process while open here reads whole through the open file"
"$K" put models gone.1048577 "$T/in.1048577" >/dev/null
python3 - "$B/gone.1048577" "$T/in.1048577" "$K" <<'EOF'
import os, subprocess, sys
path, src, kvtier = sys.argv[1:4]
fd = os.open(path, os.O_RDONLY)
subprocess.run([kvtier, "rm", "models", "gone.1048577"], check=True, stdout=subprocess.DEVNULL)
st = os.fstat(fd)
assert st.st_size == 1048577 and st.st_nlink == 0, (st.st_size, st.st_nlink)
got = b""
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    got += b
os.close(fd)
assert got == open(src, "rb").read(), "read %d bytes, not the version opened" % len(got)
assert not os.path.exists(path), "still there after the close"
EOF

step "truncate(2) by name of a file with unpublished writes: EBUSY, not lost at close"
cp "$T/in.4096" "$B/cut"
python3 - "$B/cut" <<'EOF'
import errno, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY)
os.write(fd, b"abcde")
try:
    os.truncate(path, 20)
    raise SystemExit("truncate by name of a file being written answered 0")
except OSError as e:
    assert e.errno == errno.EBUSY, e
os.ftruncate(fd, 20)
os.close(fd)
assert os.stat(path).st_size == 20, os.stat(path).st_size
os.truncate(path, 10)
assert open(path, "rb").read()[:5] == b"abcde" and os.stat(path).st_size == 10
EOF
rm "$B/cut"

step "a file open for writing: lookups see its size so far, its directory is not replaced, its chmod stays"
python3 - "$B" <<'EOF'
import errno, os, sys, time
d = sys.argv[1]
# A lookup of the name (a failed mkdir here; a stat once entry_timeout is
# past) answered the stored version's size, which the kernel took for the
# writer's: its next write at the end landed inside the file.
p = os.path.join(d, "grow")
with open(p, "wb") as f:
    f.write(b"0" * 50)
with open(p, "r+b", buffering=0) as f:
    f.write(b"A" * 100)
    try:
        os.mkdir(p)
    except FileExistsError:
        pass
    assert os.fstat(f.fileno()).st_size == 100, os.fstat(f.fileno()).st_size
    f.seek(0, os.SEEK_END)
    f.write(b"TAIL")
with open(p, "rb") as f:
    assert f.read() == b"A" * 100 + b"TAIL"
os.unlink(p)
# A directory holding a file being written is not empty: renaming another
# over it lost the file.
os.mkdir(os.path.join(d, "rdst"))
os.mkdir(os.path.join(d, "rsrc"))
with open(os.path.join(d, "rdst/kv.bin"), "wb") as f:
    f.write(b"kv")
    try:
        os.rename(os.path.join(d, "rsrc"), os.path.join(d, "rdst"))
        raise SystemExit("a directory was renamed over one holding a file being written")
    except OSError as e:
        assert e.errno == errno.ENOTEMPTY, e
assert os.listdir(os.path.join(d, "rdst")) == ["kv.bin"]
os.unlink(os.path.join(d, "rdst/kv.bin"))
os.rmdir(os.path.join(d, "rdst"))
os.rmdir(os.path.join(d, "rsrc"))
# A chmod and chown before an fsync stay when more is written after it.
p = os.path.join(d, "modes")
with open(p, "wb") as f:
    f.write(b"old")
fd = os.open(p, os.O_RDWR)
os.write(fd, b"new")
os.chmod(p, 0o751)
os.chown(p, 7, 8)
os.fsync(fd)
os.write(fd, b"more")
os.close(fd)
time.sleep(1.1)   # attr_timeout: then the stat is what the store holds
st = os.stat(p)
assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o751, 7, 8), st
os.unlink(p)
EOF

step "symbolic links: stored as objects of their own kind, marked for S3"
ln -s conv1/turn1/blk0 "$B/link"
[ "$(readlink "$B/link")" = conv1/turn1/blk0 ] || fail "readlink gives '$(readlink "$B/link")'"
cmp "$T/in.4096" "$B/link" || fail "reading through a symlink differs"
[ -L "$B/link" ] || fail "the link is not a symlink"
"$K" head models link >"$T/head"
grep -q "kvtier-symlink=1" "$T/head" || fail "the S3 side has no symlink marker: $(cat "$T/head")"
expect_err "File exists" ln -s x "$B/link"
# Only what getxattr can read is listed: Linux reads no user.* attribute of
# a symbolic link (ENODATA), so none is listed (five were).
python3 -c 'import os, sys; n = os.listxattr(sys.argv[1], follow_symlinks=False); assert n == [], n' \
	"$B/link"
# Nor sets or removes one (EPERM, without asking kvtier-fuse): a symbolic
# link is pinned with kvtier pin, never through the mount.
python3 - "$B/link" <<'EOF'
import os, sys
for call in (lambda l: os.setxattr(l, "user.kvtier.pin", b"1", follow_symlinks=False),
             lambda l: os.setxattr(l, "user.kvtier.session", b"s", follow_symlinks=False),
             lambda l: os.removexattr(l, "user.kvtier.pin", follow_symlinks=False)):
    try:
        call(sys.argv[1])
        raise SystemExit("an xattr change of a symbolic link succeeded")
    except OSError as e:
        assert e.errno == 1, e   # EPERM
EOF
"$K" head models link >"$T/head"
grep -q "^pinned: *no$" "$T/head" || fail "the link was pinned: $(cat "$T/head")"

step "xattrs: tier, session, etag, checksum; a session and a prestage can be set"
python3 - "$B" "$K" <<'EOF'
import os, subprocess, sys
d, kvtier = sys.argv[1], sys.argv[2]
p = os.path.join(d, "conv1/turn1/blk0")
names = set(os.listxattr(p))
want = {"user.kvtier.tier", "user.kvtier.session", "user.kvtier.etag", "user.kvtier.checksum",
        "user.kvtier.pin"}
assert names == want, names
assert os.getxattr(p, "user.kvtier.tier") == b"hot"
assert os.getxattr(p, "user.kvtier.session") == b"conv1"
head = subprocess.run([kvtier, "head", "models", "conv1/turn1/blk0"], capture_output=True,
                      text=True, check=True).stdout
etag = os.getxattr(p, "user.kvtier.etag").decode()
crc = os.getxattr(p, "user.kvtier.checksum").decode()
assert '"%s"' % etag in head, (etag, head)
assert "crc32c:        %s" % crc in head, (crc, head)
os.setxattr(p, "user.kvtier.session", b"conv-moved")
assert os.getxattr(p, "user.kvtier.session") == b"conv-moved"
head = subprocess.run([kvtier, "head", "models", "conv1/turn1/blk0"], capture_output=True,
                      text=True, check=True).stdout
assert "session:       conv-moved" in head, head
os.setxattr(os.path.join(d, "conv1"), "user.kvtier.prestage", b"1")
# A bucket is not a session (and bringing back all of them could ask for
# more than the hot tier holds): EINVAL, as kvtier-fuse(8) says (it said
# "set on a directory or file").
try:
    os.setxattr(d, "user.kvtier.prestage", b"1")
    raise SystemExit("a prestage of a bucket succeeded")
except OSError as e:
    assert e.errno == 22, e   # EINVAL
# The session set on a file open for writing whose stored version went away
# since the open (removed through S3, or dropped by reclaim): close publishes
# the new version in that session. It answered ENOENT, and a writer that
# stopped there published an empty file.
q = os.path.join(d, "conv1/turn1/blk-gone")
with open(q, "wb") as f:
    f.write(b"old")
fd = os.open(q, os.O_WRONLY | os.O_TRUNC)
subprocess.run([kvtier, "rm", "models", "conv1/turn1/blk-gone"], check=True)
os.setxattr(fd, "user.kvtier.session", b"conv-new")
# The same for chmod, chown and utimens through the descriptor.
os.fchmod(fd, 0o600)
os.fchown(fd, 5, 6)
os.utime(fd, (1000000000, 1000000000))
# And a rename: the name moves, and close publishes under the new one (the
# rename answered ENOENT, and close published under the old name).
q2 = os.path.join(d, "conv1/turn1/blk-moved")
os.rename(q, q2)
assert not os.path.exists(q)
os.write(fd, b"new bytes")
os.close(fd)
head = subprocess.run([kvtier, "head", "models", "conv1/turn1/blk-moved"], capture_output=True,
                      text=True, check=True).stdout
assert "session:       conv-new" in head, head
with open(q2, "rb") as f:
    assert f.read() == b"new bytes"
assert not os.path.exists(q)
st = os.stat(q2)
assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o600, 5, 6), st
os.unlink(q2)
for bad, err in (("user.kvtier.tier", 95), ("user.other", 95)):
    try:
        os.setxattr(p, bad, b"x")
        raise SystemExit("setxattr %s succeeded" % bad)
    except OSError as e:
        assert e.errno == err, (bad, e)
try:
    os.getxattr(p, "user.nothing")
    raise SystemExit("getxattr of a missing name succeeded")
except OSError as e:
    assert e.errno == 61, e   # ENODATA
# What ext4 answers: removing a name that is not there is ENODATA; a session
# or a pin is always there, so XATTR_CREATE is EEXIST. A session names G4's
# manifest of it, so it follows a key's rules: UTF-8 (EILSEQ).
for call, err in ((lambda: os.removexattr(p, "user.nothing"), 61),
                  (lambda: os.setxattr(p, "user.kvtier.pin", b"1", os.XATTR_CREATE), 17),
                  (lambda: os.setxattr(p, "user.kvtier.session", b"x", os.XATTR_CREATE), 17),
                  (lambda: os.setxattr(p, "user.kvtier.session", b"conv\xff"), 84)):
    try:
        call()
        raise SystemExit("an xattr call that should fail errno %d succeeded" % err)
    except OSError as e:
        assert e.errno == err, (err, e)
assert os.getxattr(p, "user.kvtier.session") == b"conv-moved"
os.setxattr(p, "user.kvtier.session", b"conv-moved", os.XATTR_REPLACE)
# The prestage is never there to read: XATTR_REPLACE is ENODATA, as for any
# name that is not there, and XATTR_CREATE is a prestage (both were one).
# A directory has no session or pin to set, whatever the flags: EISDIR
# (XATTR_CREATE of a session was EEXIST).
conv1 = os.path.join(d, "conv1")
for call, err in ((lambda: os.setxattr(conv1, "user.kvtier.prestage", b"1", os.XATTR_REPLACE), 61),
                  (lambda: os.setxattr(p, "user.kvtier.prestage", b"1", os.XATTR_REPLACE), 61),
                  (lambda: os.setxattr(conv1, "user.kvtier.session", b"x", os.XATTR_CREATE), 21),
                  (lambda: os.setxattr(conv1, "user.kvtier.pin", b"1", os.XATTR_REPLACE), 21)):
    try:
        call()
        raise SystemExit("an xattr call that should fail errno %d succeeded" % err)
    except OSError as e:
        assert e.errno == err, (err, e)
os.setxattr(conv1, "user.kvtier.prestage", b"1", os.XATTR_CREATE)
os.setxattr(p, "user.kvtier.prestage", b"1", os.XATTR_CREATE)
# setfattr -x gives a file back to its key's session (it was ENOTSUP: once
# set, a session could not be cleared); also when set while open for writing.
os.removexattr(p, "user.kvtier.session")
assert os.getxattr(p, "user.kvtier.session") == b"conv1"
os.setxattr(p, "user.kvtier.session", b"conv-moved")
with open(p, "r+b") as f:
    os.removexattr(f.fileno(), "user.kvtier.session")
    b0 = f.read(1)
    f.seek(0)
    f.write(b0)    # the same bytes: a new version all the same
head = subprocess.run([kvtier, "head", "models", "conv1/turn1/blk0"], capture_output=True,
                      text=True, check=True).stdout
assert "session:       conv1" in head, head
# Cleared while open, and the stored version replaced meanwhile with a
# session of its own: getxattr says what close publishes, the key's own
# session (it said the stored version's, conv-s3, until close).
os.setxattr(p, "user.kvtier.session", b"conv-moved")
with open(p, "r+b") as f:
    os.removexattr(f.fileno(), "user.kvtier.session")
    subprocess.run([kvtier, "-q", "put", "--session", "conv-s3", "models", "conv1/turn1/blk0",
                    "/dev/null"], check=True)
    assert os.getxattr(p, "user.kvtier.session") == b"conv1", os.getxattr(p, "user.kvtier.session")
    f.write(b0)
assert os.getxattr(p, "user.kvtier.session") == b"conv1", os.getxattr(p, "user.kvtier.session")
# A file being written lists what getxattr answers for it: the pin its
# writer may set before close (it listed nothing, yet the pin read "0").
q = os.path.join(d, "conv1/turn1/blk-pending")
with open(q, "wb") as f:
    assert os.listxattr(q) == ["user.kvtier.pin"], os.listxattr(q)
    assert os.getxattr(q, "user.kvtier.pin") == b"0"
    # And the session, once set (it was set, yet read ENODATA until close).
    # Before, it is not there: XATTR_REPLACE is ENODATA, XATTR_CREATE sets
    # it (it was EEXIST), and then it is there (EEXIST).
    try:
        os.setxattr(q, "user.kvtier.session", b"conv-pending", os.XATTR_REPLACE)
        raise SystemExit("XATTR_REPLACE of a session not yet set succeeded")
    except OSError as e:
        assert e.errno == 61, e   # ENODATA
    os.setxattr(q, "user.kvtier.session", b"conv-pending", os.XATTR_CREATE)
    try:
        os.setxattr(q, "user.kvtier.session", b"conv-pending", os.XATTR_CREATE)
        raise SystemExit("XATTR_CREATE of a session set before succeeded")
    except OSError as e:
        assert e.errno == 17, e   # EEXIST
    assert set(os.listxattr(q)) == {"user.kvtier.pin", "user.kvtier.session"}, os.listxattr(q)
    assert os.getxattr(q, "user.kvtier.session") == b"conv-pending"
    f.write(b"x")
assert set(os.listxattr(q)) == want, os.listxattr(q)
assert os.getxattr(q, "user.kvtier.session") == b"conv-pending"
os.unlink(q)
# No labels or ACLs are kept: ENOTSUP, which ls -l takes as "stop asking".
for name in ("security.selinux", "system.posix_acl_access", "trusted.x"):
    try:
        os.getxattr(p, name)
        raise SystemExit("getxattr %s succeeded" % name)
    except OSError as e:
        assert e.errno == 95, (name, e)   # ENOTSUP
# The mount's root answers every xattr call as a bucket (a directory) does:
# every set and remove answered EISDIR there, whatever the name.
root, bucket = os.path.dirname(d), d
calls = (("get tier", lambda x: os.getxattr(x, "user.kvtier.tier")),
         ("get other", lambda x: os.getxattr(x, "user.other")),
         ("list", lambda x: os.listxattr(x)),
         ("set session", lambda x: os.setxattr(x, "user.kvtier.session", b"s")),
         ("set pin", lambda x: os.setxattr(x, "user.kvtier.pin", b"1")),
         ("set prestage", lambda x: os.setxattr(x, "user.kvtier.prestage", b"1")),
         ("set tier", lambda x: os.setxattr(x, "user.kvtier.tier", b"x")),
         ("set other", lambda x: os.setxattr(x, "user.other", b"x")),
         ("remove session", lambda x: os.removexattr(x, "user.kvtier.session")),
         ("remove pin", lambda x: os.removexattr(x, "user.kvtier.pin")),
         ("remove other", lambda x: os.removexattr(x, "user.other")))
def answer(call, x):
    try:
        return repr(call(x))
    except OSError as e:
        return e.errno
for what, call in calls:
    a, b = answer(call, root), answer(call, bucket)
    assert a == b, (what, "root", a, "bucket", b)
assert answer(calls[6][1], root) == 95, answer(calls[6][1], root)   # ENOTSUP
assert answer(calls[5][1], root) == 22, answer(calls[5][1], root)   # EINVAL
EOF
# ls -l asks for a label and an ACL once per mount, not once per file.
if command -v strace >/dev/null; then
	files="$(ls -A "$B" | wc -l)"
	[ "$files" -ge 4 ] || fail "only $files files to list"
	strace -f -c -e trace=getxattr,lgetxattr -o "$T/ls.strace" ls -l "$B" >/dev/null
	n="$(awk '$NF ~ /getxattr$/ { s += $4 } END { print s + 0 }' "$T/ls.strace")"
	[ "$n" -le 2 ] || fail "ls -l of $files files made $n getxattr calls"
fi
if command -v getfattr >/dev/null; then
	getfattr --absolute-names -n user.kvtier.tier --only-values "$B/conv1/turn1/blk0" |
		grep -qx hot ||
		fail "getfattr does not show the tier"
fi

step "chmod, chown, touch -d: kept in the catalog"
# As root any owner can be given; otherwise only one's own.
if [ "$(id -u)" -eq 0 ]; then
	owner="1234 5678"
else
	owner="$(id -u) $(id -g)"
fi
cp "$T/in.1" "$B/meta"
chmod 640 "$B/meta"
chown "$(echo "$owner" | tr ' ' :)" "$B/meta"
touch -d "2021-02-03 04:05:06 UTC" "$B/meta"
[ "$(stat -c '%a %u %g %Y' "$B/meta")" = "640 $owner 1612325106" ] ||
	fail "stat after chmod/chown/touch: $(stat -c '%a %u %g %Y' "$B/meta")"
mkdir "$B/mdir"
chmod 700 "$B/mdir"
[ "$(stat -c %a "$B/mdir")" = 700 ] || fail "chmod of a directory: $(stat -c %a "$B/mdir")"
# cp -p sets times and modes on a file still being written.
cp -p "$B/meta" "$B/meta.copy"
[ "$(stat -c '%a %u %g %Y' "$B/meta.copy")" = "640 $owner 1612325106" ] ||
	fail "cp -p did not keep metadata: $(stat -c '%a %u %g %Y' "$B/meta.copy")"
# A name made, removed or renamed in a directory moves its mtime and ctime,
# which make and rsync watch (they stayed those of the mkdir).
python3 - "$B/mdir" "$B/mdir2" <<'EOF'
import os, sys
d, d2 = sys.argv[1], sys.argv[2]
os.mkdir(d2)
def changed(what, f, *dirs):
    for x in dirs:
        os.utime(x, ns=(0, 0))
    before = [os.stat(x).st_ctime_ns for x in dirs]
    f()
    for x, c in zip(dirs, before):
        st = os.stat(x)
        assert st.st_mtime_ns > 0 and st.st_ctime_ns > c, (what, x, st)
changed("create", lambda: open(os.path.join(d, "f"), "wb").close(), d)
changed("mkdir", lambda: os.mkdir(os.path.join(d, "sub")), d)
changed("symlink", lambda: os.symlink("f", os.path.join(d, "l")), d)
changed("rename", lambda: os.rename(os.path.join(d, "f"), os.path.join(d2, "f")), d, d2)
changed("unlink", lambda: os.unlink(os.path.join(d2, "f")), d2)
changed("rmdir", lambda: os.rmdir(os.path.join(d, "sub")), d)
os.unlink(os.path.join(d, "l"))
os.rmdir(d2)
EOF

step "what a KV store cannot hold fails cleanly"
long=$(python3 -c 'print("n" * 256)')
expect_err "File name too long" touch "$B/$long"
expect_err "File name too long" mkdir "$B/$long"
name250=$(python3 -c 'print("d" * 250)')
kvt_run mkdir -p "$B/$name250/$name250/$name250/$name250/$name250"
grep -q "File name too long" "$T/err" || fail "a key over 1024 bytes: '$(cat "$T/err")'"
expect_err "Invalid or incomplete multibyte" touch "$B/$(printf 'bad\377name')"
expect_err "Operation not permitted" mknod "$B/dev" c 1 3
expect_err "Operation not permitted" mkfifo "$B/fifo"
expect_err "Operation not permitted" ln "$B/meta" "$B/hardlink"
python3 - "$B" <<'EOF'
import errno, os, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.bind(os.path.join(sys.argv[1], "sock"))
    raise SystemExit("bind of a unix socket succeeded")
except OSError as e:
    assert e.errno == errno.EPERM, e
EOF

step "statfs reports the hot tier"
[ "$(stat -f -c '%b %S' "$M" | awk '{print $1 * $2}')" -eq $((1024 * 1024 * 1024)) ] ||
	fail "statfs: $(stat -f -c '%b blocks of %S' "$M")"
# Available: free less the 32 MiB segment writers leave to reclaim.
[ "$(stat -f -c '%f %a' "$M" | awk '{print ($1 - $2) * 4096}')" -eq $((32 * 1024 * 1024)) ] ||
	fail "statfs: $(stat -f -c '%f free, %a available' "$M")"

step "reads: readahead of one extent; a read-only close sends no FLUSH"
# The kernel starts a FUSE mount at 128 KiB of readahead; the daemon raises
# it (as root: /sys is root's) so that a 2 MiB block is two requests.
if [ "$(id -u)" -eq 0 ]; then
	ra_dev=$(mountpoint -d "$M")
	ra_kb=$(cat "/sys/class/bdi/$ra_dev/read_ahead_kb")
	[ "$ra_kb" -eq 1024 ] || fail "readahead of the mount is $ra_kb KiB, not 1024"
fi
# A daemon with -d logs every request: closing a read-only file must cost
# no FLUSH, closing a written one must (that is where it is published).
M3=$T/mnt3
mkdir "$M3"
m1_pid=$FUSE_PID
fuse_mount "$KVTIER_CONF" "$M3" -d
m3_pid=$FUSE_PID
head -c 3000000 /dev/urandom >"$T/ra"
cp "$T/ra" "$M3/models/ra"
sleep 0.5
fl_before=$(grep -c "opcode: FLUSH" "$T/fuse.log" || :)
cmp "$T/ra" "$M3/models/ra" || fail "read back other bytes through a -d mount"
cat "$M3/models/ra" >/dev/null
sleep 0.5
fl_after=$(grep -c "opcode: FLUSH" "$T/fuse.log" || :)
[ "$fl_after" -eq "$fl_before" ] ||
	fail "read-only opens sent $((fl_after - fl_before)) FLUSH requests"
echo more >>"$M3/models/ra"
sleep 0.5
fl_write=$(grep -c "opcode: FLUSH" "$T/fuse.log" || :)
[ "$fl_write" -gt "$fl_after" ] || fail "closing a written file sent no FLUSH"
same "$M3/models/ra" models ra
# The first READ of a small file read in small pieces (cp, cat: 128 KiB)
# brings the whole file into the page cache (fh_read_push): the daemon
# stores the rest (FUSE_NOTIFY_STORE, "NOTIFY: code=4" in the -d log), and
# on a quiet machine that is one READ for 3 MB, where the kernel's
# readahead alone sends five. The reader may overtake the store and the
# kernel then sends some of those READs all the same (two, three and five
# seen with two test scripts at once on two vCPUs): counted here is that
# the store was made, and the bytes. A reader of 1 MiB pieces is left to
# that readahead.
head -c 3000000 /dev/urandom >"$T/push"
"$K" put models push "$T/push" >/dev/null
st_before=$(grep -c "NOTIFY: code=4 " "$T/fuse.log" || :)
dd if="$M3/models/push" bs=128k status=none | cmp - "$T/push" ||
	fail "a file pushed into the page cache reads back other bytes"
st_after=$(grep -c "NOTIFY: code=4 " "$T/fuse.log" || :)
[ "$st_after" -gt "$st_before" ] ||
	fail "reading 3 MB 128 KiB at a time stored nothing into the page cache"
"$K" put models push "$T/ra" >/dev/null
sleep 1.1	# the attribute timeout: the next open sees the new version
dd if="$M3/models/push" bs=128k status=none | cmp - "$T/ra" ||
	fail "a version replaced through the CLI reads back the old bytes after a push"
rd_before=$(grep -c "opcode: READ (" "$T/fuse.log" || :)
"$K" put models push "$T/push" >/dev/null
sleep 1.1
dd if="$M3/models/push" bs=1M status=none | cmp - "$T/push" ||
	fail "a file read 1 MiB at a time reads back other bytes"
rd_after=$(grep -c "opcode: READ (" "$T/fuse.log" || :)
[ "$((rd_after - rd_before))" -ge 3 ] ||
	fail "reading 3 MB 1 MiB at a time sent $((rd_after - rd_before)) READs: pushed"
FUSE_PID=$m3_pid
fuse_umount "$M3"
FUSE_PID=$m1_pid
rm "$B/ra"

step "a file being written is listed, with its size so far, before it is closed"
python3 - "$B" <<'EOF'
import os, sys
d = sys.argv[1]
p = os.path.join(d, "being-written")
with open(p, "wb") as f:
    f.write(b"x" * 5000)
    f.flush()
    names = os.listdir(d)
    assert "being-written" in names, "not listed while open: %r" % names
    st = [e for e in os.scandir(d) if e.name == "being-written"][0].stat()
    assert st.st_size == 5000, st.st_size
    f.write(b"y" * 3000000)
    f.flush()
    assert os.listdir(d).count("being-written") == 1
assert os.listdir(d).count("being-written") == 1, "listed twice or not at all after close"
assert os.stat(p).st_size == 3005000
os.unlink(p)
assert "being-written" not in os.listdir(d)
# Closed while a listing of more than one page (1000 entries) is read: it
# existed all along, so it is listed once (it was in neither the page read
# before its close nor the files still being written at the end).
sub = os.path.join(d, "long-listing")
os.mkdir(sub)
for i in range(1200):
    open(os.path.join(sub, "f%04d" % i), "wb").close()
fd = os.open(os.path.join(sub, "a-closed-midway"), os.O_WRONLY | os.O_CREAT)
os.write(fd, b"data")
seen = []
with os.scandir(sub) as it:
    for e in it:
        seen.append(e.name)
        if len(seen) == 5:
            os.close(fd)
assert (len(seen), seen.count("a-closed-midway")) == (1201, 1), (len(seen), seen[:8])
EOF

step "many writers and readers at once (16 writers x 20 files, 8 readers)"
head -c 3000000 /dev/urandom >"$T/src"
mkdir "$B/par"
pids=""
for w in $(seq 1 16); do
	(
		for i in $(seq 1 20); do
			n=$(( (w * 7919 + i * 104729) % 600000 ))
			head -c "$n" "$T/src" >"$B/par/w$w.$i" || exit 1
		done
	) &
	pids="$pids $!"
done
for r in $(seq 1 8); do
	(for i in $(seq 1 20); do cat "$B/f.5242883" >/dev/null || exit 1; done) &
	pids="$pids $!"
done
for p in $pids; do
	wait "$p" || fail "a parallel writer or reader failed"
done
for w in $(seq 1 16); do
	for i in $(seq 1 20); do
		n=$(( (w * 7919 + i * 104729) % 600000 ))
		head -c "$n" "$T/src" | cmp -s - "$B/par/w$w.$i" || fail "par/w$w.$i differs"
	done
done
head -c $(( (16 * 7919 + 20 * 104729) % 600000 )) "$T/src" >"$T/src.part"
same "$T/src.part" models par/w16.20
[ "$(ls "$B/par" | wc -l)" -eq 320 ] || fail "par/ lists $(ls "$B/par" | wc -l) files, not 320"

step "thousands of files open at once"
python3 - "$B" <<'EOF'
import os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
d = os.path.join(sys.argv[1], "many")
os.mkdir(d)
n = 2500
fds = [os.open(os.path.join(d, "f%d" % i), os.O_WRONLY | os.O_CREAT, 0o644) for i in range(n)]
for i, fd in enumerate(fds):
    os.write(fd, b"%d:" % i + b"x" * (i % 5000))
    if i % 3 == 0:
        os.pwrite(fd, b"R", 1)       # a random write: staged
for fd in fds:
    os.close(fd)
fds = [os.open(os.path.join(d, "f%d" % i), os.O_RDONLY) for i in range(n)]
for i, fd in enumerate(fds):
    want = bytearray(b"%d:" % i + b"x" * (i % 5000))
    if i % 3 == 0:
        want[1:2] = b"R"
    got = os.pread(fd, 10000, 0)
    assert got == want, (i, got[:20], want[:20])
    os.close(fd)
assert len(os.listdir(d)) == n
EOF

step "threads writing one open file at once, out of order"
python3 - "$B" <<'EOF2'
import os, random, sys, threading
p = os.path.join(sys.argv[1], "threaded")
chunk, n = 1 << 20, 24
data = [os.urandom(chunk) for _ in range(n)]
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
order = list(range(n))
random.shuffle(order)
def work(part):
    for i in part:
        os.pwrite(fd, data[i], i * chunk)
        assert os.pread(fd, 100, i * chunk) == data[i][:100]
ts = [threading.Thread(target=work, args=(order[k::6],)) for k in range(6)]
for t in ts:
    t.start()
for t in ts:
    t.join()
os.close(fd)
assert open(p, "rb").read() == b"".join(data), "threaded writes read back wrong"
EOF2

step "threads reading one open file at once: through the page cache and with O_DIRECT"
python3 - "$B" <<'EOF2'
import os, random, sys, threading
p = os.path.join(sys.argv[1], "threaded")     # written above: 24 MiB, 25 extents
want = open(p, "rb").read()
for flags in (0, os.O_DIRECT):
    fd = os.open(p, os.O_RDONLY | flags)
    bad = []
    def work(seed):
        r = random.Random(seed)
        for _ in range(150):
            off = r.randrange(len(want))
            n = r.choice([1, 4096, 65536, 1 << 20, 3 << 19])
            if os.pread(fd, n, off) != want[off:off + n]:
                bad.append((off, n))
    ts = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.close(fd)
    assert not bad, "flags %#x: wrong bytes at (offset, length) %s" % (flags, bad[:5])
EOF2

step "random operations against a model (fsx)"
mkdir "$B/fsx"
python3 "$FSX" "$B/fsx" --ops "${KVT_FSX_OPS:-3000}" --seconds "${KVT_FSX_SECONDS:-240}" \
	--max-size 1600000 ||
	fail "fsx found a difference (see above)"

step "a flipped byte on disk: the read fails EIO with a log line, the byte never comes back"
# flip.py PATH SEGMENTS SOURCE HOW: flips a byte of the second extent of
# PATH (extents hold 1 MiB of payload), found in the segment files by its
# neighbours in SOURCE, then reads PATH whole ("whole") or 128 KiB at a time
# ("pieces", as cp does, which has the first READ push the rest into the
# page cache: fh_read_push), or 1 MiB from 768 KiB with O_DIRECT ("span":
# one READ over a good extent's tail and the bad one's head), and expects
# EIO, after nothing but good bytes; never an early end of the file.
cat >"$T/flip.py" <<'EOF'
import glob, os, sys
path, segs, source, how = sys.argv[1:5]
data = open(source, "rb").read()
at = 1048576 + 8192
probe = data[at:at + 4096]
hits = []
for seg in sorted(glob.glob(os.path.join(segs, "*"))):
    with open(seg, "rb") as s:
        i = s.read().find(probe)
    if i >= 0:
        hits.append((seg, i))
assert len(hits) == 1, hits
fd = os.open(hits[0][0], os.O_RDWR)
b = os.pread(fd, 1, hits[0][1])
os.pwrite(fd, bytes([b[0] ^ 0xFF]), hits[0][1])
os.fsync(fd)
os.close(fd)
got = b""
try:
    if how == "span":
        import mmap
        buf = mmap.mmap(-1, 1048576)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            n = os.preadv(fd, [buf], 786432)
        finally:
            os.close(fd)
        raise SystemExit("the read over the damaged extent returned %d bytes" % n)
    with open(path, "rb", buffering=0) as f:
        if how == "whole":
            f.read()
        else:
            while True:
                piece = f.read(131072)
                if not piece:
                    break
                got += piece
    raise SystemExit("the read returned the damaged extent")
except OSError as e:
    assert e.errno == 5, e   # EIO
assert got == data[:len(got)] and len(got) <= 1048576, "bad bytes before the EIO"
EOF
head -c 3145728 /dev/urandom >"$T/flipped"
cp "$T/flipped" "$B/flipped"
python3 "$T/flip.py" "$B/flipped" "$KVT_DIR/segments" "$T/flipped" whole
grep -q "checksum mismatch" "$T/fuse.log" || fail "no log line for the checksum mismatch"
head -c 3145728 /dev/urandom >"$T/flipped2"
"$K" put models flipped2 "$T/flipped2" >/dev/null	# never in this mount's page cache
python3 "$T/flip.py" "$B/flipped2" "$KVT_DIR/segments" "$T/flipped2" pieces
head -c 3145728 /dev/urandom >"$T/flipped3"
"$K" put models flipped3 "$T/flipped3" >/dev/null
python3 "$T/flip.py" "$B/flipped3" "$KVT_DIR/segments" "$T/flipped3" span
rm "$B/flipped" "$B/flipped2" "$B/flipped3"

if [ -x "$top_builddir/kvtier-gateway" ] && python3 -c 'import boto3' 2>/dev/null; then
	step "the gateway on the same store: mount -> S3 GET and S3 PUT -> mount, byte-exact"
	fuse_gateway "$KVTIER_CONF"
	python3 - "$GW_URL" "$GW_SECRET" "$B" "$T/in.5242883" <<'EOF'
import os, sys, boto3
from botocore.config import Config
ep, secret, d, src = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="AKIDFUSETEST",
                  aws_secret_access_key=secret, region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
want = open(src, "rb").read()
assert s3.get_object(Bucket="models", Key="f.5242883")["Body"].read() == want
data = os.urandom(3 * 1024 * 1024 + 17)
s3.put_object(Bucket="models", Key="from-s3/blk", Body=data)
assert open(os.path.join(d, "from-s3/blk"), "rb").read() == data
# Overwritten through S3: the next open sees the new bytes.
data2 = os.urandom(1000)
s3.put_object(Bucket="models", Key="from-s3/blk", Body=data2)
assert open(os.path.join(d, "from-s3/blk"), "rb").read() == data2
# Multipart: past the first part (5 MiB + 100 bytes) the extents no longer
# fall every 1 MiB as a file's do; the mount's reads must cross them.
parts = [os.urandom(5 * 1024 * 1024 + 100), os.urandom(3 * 1024 * 1024 + 5)]
up = s3.create_multipart_upload(Bucket="models", Key="from-s3/mp")["UploadId"]
done = [{"PartNumber": i + 1,
         "ETag": s3.upload_part(Bucket="models", Key="from-s3/mp", UploadId=up,
                                PartNumber=i + 1, Body=p)["ETag"]}
        for i, p in enumerate(parts)]
s3.complete_multipart_upload(Bucket="models", Key="from-s3/mp", UploadId=up,
                             MultipartUpload={"Parts": done})
assert open(os.path.join(d, "from-s3/mp"), "rb").read() == b"".join(parts)
prefixes = [p["Prefix"] for p in
            s3.list_objects_v2(Bucket="models", Delimiter="/").get("CommonPrefixes", [])]
assert "mdir/" in prefixes, prefixes
h = s3.head_object(Bucket="models", Key="link")
assert h["Metadata"].get("kvtier-symlink") == "1", h["Metadata"]
# What carries the marker is a link in the mount: a copy (either metadata
# directive keeps the marker, or gives it anew) and a PUT as a backup restores it.
s3.copy_object(Bucket="models", Key="link-copy", CopySource="models/link")
s3.put_object(Bucket="models", Key="link-put", Body=b"conv1/turn1/blk0",
              Metadata={"kvtier-symlink": "1"})
s3.copy_object(Bucket="models", Key="link-plain", CopySource="models/link",
               MetadataDirective="REPLACE")
for k in ("link-copy", "link-put"):
    p = os.path.join(d, k)
    assert os.path.islink(p) and os.readlink(p) == "conv1/turn1/blk0", k
    assert os.lstat(p).st_mode & 0o777 == 0o777, oct(os.lstat(p).st_mode)
assert not os.path.islink(os.path.join(d, "link-plain"))
EOF
	kill -TERM "$GW_PID"
	wait "$GW_PID" || :
	GW_PID=
fi

# allow_other needs root (or user_allow_other in /etc/fuse.conf), setpriv root.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	step "a second daemon on the same store, allow_other,default_permissions"
	M2=$T/mnt2
	mkdir "$M2"
	chmod 755 "$T"	# mktemp -d made it 0700: let another user reach the mount
	m1_pid=$FUSE_PID
	fuse_mount "$KVTIER_CONF" "$M2" -o allow_other,default_permissions
	m2_pid=$FUSE_PID
	B2=$M2/models
	cmp "$T/in.5242883" "$B2/f.5242883" || fail "the second mount reads other bytes"
	head -c 70000 /dev/urandom >"$T/secret"
	cp "$T/secret" "$B2/secret"
	chmod 600 "$B2/secret"
	cmp "$T/secret" "$B/secret" || fail "a file written on one mount differs on the other"
	as_nobody()
	{
		setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
	}
	expect_err "Permission denied" as_nobody cat "$B2/secret"
	expect_err "Permission denied" as_nobody touch "$B2/by-nobody"
	chmod 644 "$B2/secret"
	sleep 1.1	# attr_timeout: the kernel may keep the old mode that long
	as_nobody cat "$B2/secret" | cmp - "$T/secret" || fail "nobody cannot read a 644 file"
	mkdir "$B2/open"
	chmod 777 "$B2/open"
	as_nobody sh -c "echo mine >'$B2/open/by-nobody'" || fail "nobody cannot write in a 777 directory"
	[ "$(stat -c %u "$B/open/by-nobody")" = 65534 ] || fail "a file by nobody is not owned by nobody"
	FUSE_PID=$m2_pid
	fuse_umount "$M2"
	FUSE_PID=$m1_pid
	chmod 700 "$T"
fi

step "a cold (G4) file opens: recalled in a thread of its own, byte-exact"
# A store of its own with a file:// G4; the session is demoted by
# kvtier-migrate, then opened through a mount: the open recalls it.
MIG=$top_builddir/kvtier-migrate
C=$T/cold
mkdir -p "$C/mnt" "$C/g4"
cat >"$C/kvtier.conf" <<EOF
[store]
dir = $C/store
capacity = 256M
segment_size = 16M

[g4]
url = file://$C/g4
EOF
"$K" -c "$C/kvtier.conf" init >/dev/null || fail "cannot make the cold store"
"$K" -c "$C/kvtier.conf" mb kvc >/dev/null
head -c 2097152 /dev/urandom >"$T/cold1"
head -c 5000000 /dev/urandom >"$T/cold2"
"$K" -c "$C/kvtier.conf" put --session s1 kvc s1/a "$T/cold1" >/dev/null
"$K" -c "$C/kvtier.conf" put --session s1 kvc s1/b "$T/cold2" >/dev/null
"$MIG" -c "$C/kvtier.conf" --session kvc/s1 2>>"$T/fuse.log" || fail "kvtier-migrate could not demote kvc/s1"
for k in a b; do
	"$K" -c "$C/kvtier.conf" head kvc "s1/$k" | grep -q "tier: *cold" ||
		fail "kvc/s1/$k is not cold after demotion"
done
m1_pid=$FUSE_PID
fuse_mount "$C/kvtier.conf" "$C/mnt"
mc_pid=$FUSE_PID
# Two cold opens at once, and a stat meanwhile: all answered.
cmp "$T/cold1" "$C/mnt/kvc/s1/a" & c1=$!
cmp "$T/cold2" "$C/mnt/kvc/s1/b" & c2=$!
ls -l "$C/mnt/kvc/s1" >/dev/null || fail "cannot list a directory of cold files"
wait "$c1" || fail "a cold 2 MiB file read back other bytes"
wait "$c2" || fail "a cold 5 MB file read back other bytes"
FUSE_PID=$mc_pid
fuse_umount "$C/mnt"
FUSE_PID=$m1_pid
"$K" -c "$C/kvtier.conf" head kvc s1/a | grep -q "tier: *hot" || fail "kvc/s1/a was not recalled"

step "remount: data and metadata survive"
find "$B" -type f | sort >"$T/files.before"
fuse_umount "$M"
fuse_mount "$KVTIER_CONF" "$M"
find "$B" -type f | sort | diff "$T/files.before" - || fail "remount lost or added files"
same "$T/in.5242883" models f.5242883
cmp "$T/in.5242883" "$B/f.5242883" || fail "f.5242883 differs after remount"
[ "$(stat -c '%a %u %g %Y' "$B/meta")" = "640 $owner 1612325106" ] ||
	fail "metadata after remount: $(stat -c '%a %u %g %Y' "$B/meta")"

step "SIGKILL of the daemon mid-write: no half object, closed files intact"
head -c 3000000 /dev/urandom >"$T/old"
cp "$T/old" "$B/rewritten"
cp "$T/in.1048576" "$B/closed"
python3 - "$B" "$T/ready" <<'EOF' &
import os, sys, time
d, ready = sys.argv[1:3]
new = open(os.path.join(d, "half"), "wb")
new.write(os.urandom(2 * 1024 * 1024 + 5))
rw = open(os.path.join(d, "rewritten"), "r+b")
rw.seek(1000)
rw.write(os.urandom(500000))      # staged rewrite in progress
open(ready, "w").close()
time.sleep(60)
EOF
writer=$!
wait_for_file "$T/ready" "the writer never got going"
kill -KILL "$FUSE_PID"
wait "$FUSE_PID" 2>/dev/null || :
kill -KILL "$writer" 2>/dev/null || :
wait "$writer" 2>/dev/null || :
fusermount3 -u -z "$M"
mounts=$(echo "$mounts" | sed "s| $FUSE_PID:[^ ]*||")
"$K" get models half /dev/null 2>/dev/null && fail "a half-written file was published"
same "$T/old" models rewritten
same "$T/in.1048576" models closed
kvt_expect 0 "$K" fsck
fuse_mount "$KVTIER_CONF" "$M"
[ ! -e "$B/half" ] || fail "the half-written file shows after remount"
cmp "$T/old" "$B/rewritten" || fail "the file being rewritten changed"
cmp "$T/in.1048576" "$B/closed" || fail "a closed file changed"

step "SIGTERM unmounts cleanly"
kill -TERM "$FUSE_PID"
rc=0
wait "$FUSE_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "kvtier-fuse exited $rc on SIGTERM"
mounts=$(echo "$mounts" | sed "s| $FUSE_PID:[^ ]*||")
is_mounted "$M" && fail "still mounted after SIGTERM"

# detached_find: dpid = the detached kvtier-fuse serving $M (the cleanup
# stops it if the test fails); detached_umount: fusermount_u $M, and that
# daemon must be gone within 10 s.
detached_find()
{
	dpid=$(pgrep -f "kvtier-fuse -c $KVTIER_CONF $M" | head -1)
	[ -n "$dpid" ] || fail "no detached kvtier-fuse process"
	mounts="$mounts $dpid:$M"
}

detached_umount()
{
	fusermount_u "$M"
	wait_gone "$dpid" 60 "the detached daemon, unmounted with fusermount3 -u,"
	mounts=$(echo "$mounts" | sed "s| $dpid:[^ ]*||")
}

step "mount.kvtier, as mount(8) runs it: detaches once mounted, fstab options dropped"
[ -x "$HELPER" ] || fail "no mount helper at '$HELPER'"
# -t without its type, last: the shell's "can't shift that many" before.
kvt_expect 1 env KVTIER_FUSE="$FUSE" "$HELPER" "$KVTIER_CONF" "$M" -t
kvt_grep err "^usage: mount.kvtier CONFIG MOUNTPOINT"
KVTIER_FUSE=$FUSE "$HELPER" "$KVTIER_CONF" "$M" -o "defaults,_netdev,noauto,log=$T/daemon.log" ||
	fail "mount.kvtier failed: $(cat "$T/daemon.log" 2>/dev/null)"
is_mounted "$M" || fail "mount.kvtier returned before the mount was ready"
grep " $M fuse.kvtier" /proc/mounts >/dev/null || fail "the mount is not of type fuse.kvtier"
cmp "$T/in.4096" "$B/conv1/turn1/blk0" || fail "a file differs through the detached daemon"
detached_find
detached_umount

step "a detached daemon without -o log: its log lines go to syslog"
sl_ready=0
if [ -e /dev/log ]; then
	echo "    SKIP: /dev/log exists (a syslog daemon runs here), so it is not intercepted"
else
	# A stand-in for the syslog daemon, on /dev/log while the step runs. It
	# says it is ready with a file of ours, not by /dev/log appearing: a
	# second run of this test at the same moment may hold /dev/log instead.
	python3 - "$T/syslog.out" "$T/syslog.ready" <<'EOP' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    s.bind("/dev/log")
except OSError:
    sys.exit(3)
open(sys.argv[2], "w").close()
s.settimeout(20)
try:
    with open(sys.argv[1], "w") as out:
        while True:
            line = s.recv(4096).decode(errors="replace")
            out.write(line + "\n")
            out.flush()
            if "kvtier-fuse" in line and "unmounting" in line:
                break
except socket.timeout:
    pass
finally:
    os.unlink("/dev/log")
EOP
	slpid=$!
	syslog_up() { [ -e "$T/syslog.ready" ] || ! kill -0 "$slpid" 2>/dev/null; }
	poll 600 syslog_up || fail "the stand-in syslog did not start"
	if [ -e "$T/syslog.ready" ]; then
		sl_ready=1
	else
		[ -e /dev/log ] || fail "the stand-in syslog could not take /dev/log, and nothing holds it"
		echo "    SKIP: /dev/log was taken meanwhile (another run of this test)"
	fi
fi
if [ "$sl_ready" = 1 ]; then
	"$FUSE" -c "$KVTIER_CONF" "$M" || fail "a detached mount failed"
	detached_find
	detached_umount
	wait "$slpid" || :
	grep -q "kvtier-fuse\[$dpid\]: mounted '.*' on '$M'" "$T/syslog.out" ||
		fail "syslog got no 'mounted' line from the daemon: $(cat "$T/syslog.out")"
	grep -q "kvtier-fuse\[$dpid\]: unmounting '$M'" "$T/syslog.out" ||
		fail "syslog got no 'unmounting' line from the daemon: $(cat "$T/syslog.out")"
fi
kvt_expect 2 "$FUSE" -c "$T/no-such.conf" "$M"
kvt_grep err "no-such.conf"
printf '[store]\ndir = %s\n' "$T/never" >"$T/never.conf"
kvt_expect 2 "$FUSE" -c "$T/never.conf" "$M" -o no_such_option
kvt_grep err "unknown option"
[ ! -e "$T/never" ] || fail "a refused command line created a store"
# A failure after it detached (the store cannot be made): the parent waits
# for it, and exits 1 with the reason, not 0 with nothing mounted.
: >"$T/a-file"
printf '[store]\ndir = %s\ncapacity = 8M\nsegment_size = 1M\n' "$T/a-file/store" >"$T/nodir.conf"
kvt_expect 1 timeout 60 "$FUSE" -c "$T/nodir.conf" "$M"
kvt_grep err "cannot open the store in '$T/a-file/store': Not a directory"
! grep -q " $M fuse" /proc/mounts || fail "a daemon that failed left a mount"
kvt_expect 0 "$FUSE" --help
kvt_grep out "^usage: kvtier-fuse"

step "a full hot tier (8 MiB): ENOSPC, nothing corrupted"
S=$T/small
mkdir "$S" "$S/mnt"
cat >"$S/kvtier.conf" <<EOF
[store]
dir = $S/data
capacity = 8M
segment_size = 1M
EOF
fuse_mount "$S/kvtier.conf" "$S/mnt"
mkdir "$S/mnt/bkt"
# One file bigger than the whole tier cannot fit: EFBIG, once past it.
head -c 12000000 /dev/urandom >"$S/big"
kvt_run cp "$S/big" "$S/mnt/bkt/big"
[ "$rc" -ne 0 ] || fail "a 12 MB file fitted in an 8 MiB tier"
grep -q "File too large" "$T/err" || fail "cp of 12 MB said: $(cat "$T/err")"
# close(2) returned the error; the kernel forgets the name once the release
# that follows it (asynchronous) is done.
gone "$S/mnt/bkt/big" || fail "the file that did not fit was published"
# A write or a truncate past what the tier can hold is refused at once,
# before any byte is stored, and leaves the file as it was (it was ENOSPC
# at close, after zeros had filled the tier).
python3 - "$S/mnt/bkt/sparse" <<'PY' || fail "a write past the tier's size was not refused EFBIG"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for call in (lambda: os.pwrite(fd, b"x", 100 << 20), lambda: os.ftruncate(fd, 100 << 20)):
    try:
        call()
        sys.exit("not refused")
    except OSError as e:
        if e.errno != errno.EFBIG:
            raise
os.pwrite(fd, b"kept", 0)
os.close(fd)
PY
[ "$(cat "$S/mnt/bkt/sparse")" = kept ] || fail "the file refused EFBIG lost its bytes"
kvt_run truncate -s 100M "$S/mnt/bkt/sparse"
grep -q "File too large" "$T/err" || fail "truncate past the tier said: $(cat "$T/err")"
# Plain objects are a cache: reclaim drops them for new ones, no ENOSPC.
for i in $(seq 1 12); do
	head -c 1000000 /dev/urandom >"$S/p$i"
	cp "$S/p$i" "$S/mnt/bkt/p$i" || fail "writing plain object p$i failed: reclaim should make room"
done
# The daemon's background demoter may still drop one between the check and
# the read: gone by then is fine, other bytes are not.
for i in $(seq 1 12); do
	if cat "$S/mnt/bkt/p$i" >"$S/got" 2>"$T/err"; then
		cmp "$S/p$i" "$S/got" || fail "p$i survived reclaim but differs"
	else
		grep -q "No such file or directory" "$T/err" || fail "reading p$i: $(cat "$T/err")"
	fi
done
# Pinned objects must never be dropped: fill the tier with them, pinned as
# they are stored (a file written through the mount is cache until pinned,
# and the daemon's background demoter may drop it before a later pin; the
# user.kvtier.pin xattr set before close closes that gap, test_fuse_pin.sh).
full=0
for i in $(seq 1 12); do
	head -c 1000000 /dev/urandom >"$S/k$i"
	if ! "$K" -c "$S/kvtier.conf" put --pin bkt "k$i" "$S/k$i" 2>"$S/err"; then
		grep -q "No space left on device" "$S/err" || fail "k$i failed with: $(cat "$S/err")"
		kvt_expect 1 "$K" -c "$S/kvtier.conf" head bkt "k$i"
		full=$i
		break
	fi
done
[ "$full" -gt 0 ] || fail "twelve pinned 1 MB files fitted in 8 MiB"
echo "    ENOSPC at pinned file $full"
# The mount meets the same full tier: ENOSPC at close, nothing published.
kvt_run cp "$S/k$full" "$S/mnt/bkt/extra"
[ "$rc" -ne 0 ] || fail "a 1 MB file fitted in a tier full of pinned objects"
grep -q "No space left on device" "$T/err" || fail "cp into a full tier said: $(cat "$T/err")"
gone "$S/mnt/bkt/extra" || fail "the file that did not fit was published"
for i in $(seq 1 $((full - 1))); do
	cmp "$S/k$i" "$S/mnt/bkt/k$i" || fail "pinned k$i differs after ENOSPC"
done
kvt_expect 0 "$K" -c "$S/kvtier.conf" fsck
fuse_umount "$S/mnt"

# A close that failed is final. The chaos test read a block's older version
# after a newer one was acknowledged: the older one's close had failed with
# ENOSPC, and the RELEASE that follows every close tried again, found room
# and published it over the newer one. Here the tier waits 2 s for room
# (space_wait, with a G4 to demote to), so the RELEASE is still waiting when
# room is made right after the close fails.
step "a failed close (ENOSPC) publishes nothing later, even once there is room"
L=$T/late
mkdir "$L" "$L/mnt" "$L/g4"
cat >"$L/kvtier.conf" <<EOF
[store]
dir = $L/data
capacity = 8M
segment_size = 1M
space_wait = 2s

[g4]
url = file://$L/g4
EOF
kvt_expect 0 "$K" -c "$L/kvtier.conf" init
kvt_expect 0 "$K" -c "$L/kvtier.conf" mb bkt
fuse_mount "$L/kvtier.conf" "$L/mnt"
# write_file PATH SIZE [pin]: SIZE random bytes (or OLD for 0), pinned as
# they are written when asked (so that they fill the daemon's own segments
# too); fails with the close's error.
write_file()
{
	python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
if sys.argv[3:]:
    os.setxattr(fd, "user.kvtier.pin", b"1")
os.write(fd, os.urandom(int(sys.argv[2])) if sys.argv[2] != "0" else b"OLD")
os.close(fd)' "$@"
}
write_file "$L/mnt/bkt/f" 0 pin || fail "writing bkt/f failed"
for size in 1000000 100000 4000; do
	i=0
	while write_file "$L/mnt/bkt/k$size-$i" "$size" pin 2>"$T/err"; do
		i=$((i + 1))
		[ "$i" -lt 300 ] || fail "300 pinned files of $size bytes fitted in 8 MiB"
	done
	grep -q "No space left on device" "$T/err" || fail "filling the tier said: $(cat "$T/err")"
done
# (Not dd: it closes a dup of the descriptor first, which publishes the
# file as it is then, empty.)
kvt_run python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"NEW")
os.close(fd)' "$L/mnt/bkt/f"
[ "$rc" -ne 0 ] || fail "a rewrite fitted in a tier full of pinned files"
grep -q "No space left on device" "$T/err" || fail "the rewrite's close said: $(cat "$T/err")"
kvt_expect 0 "$K" -c "$L/kvtier.conf" rm bkt k1000000-0
kvt_expect 0 "$K" -c "$L/kvtier.conf" rm bkt k1000000-1
sleep 3
kvt_expect 0 "$K" -c "$L/kvtier.conf" get bkt f -
[ "$(cat "$T/out")" = OLD ] || fail "bkt/f holds '$(cat "$T/out")' after its rewrite's close failed"
[ "$(cat "$L/mnt/bkt/f")" = OLD ] || fail "the mount reads '$(cat "$L/mnt/bkt/f")', not OLD"
kvt_expect 0 "$K" -c "$L/kvtier.conf" fsck

step "unmount"
fuse_umount "$L/mnt"
echo "ok"
