#!/usr/bin/env python3
"""versions.py - each open file reads the version it opened, whole, on a
kvtier-fuse mount, whatever happens to the name meanwhile.

    versions.py DIR KVTIER BUCKET KEYPREFIX

DIR is the mount's directory of BUCKET/KEYPREFIX; KVTIER the CLI, used as
"another process" that replaces objects (kvtier put). The kernel keeps one
size per inode, so each case is one the daemon once got wrong
(fuse/file.c, "One version per inode"):

  1. a reader opened through the page cache before a writer opened the
     file with O_TRUNC on this mount read the old version cut at the
     writer's size;
  2. a reader of the old version, when a newer, smaller one was opened by
     another reader, read the old version cut at the new size;
  3. a reader of the old version, when a newer, larger one was opened by
     another reader, read past its end: zeros up to the new size;
  4. a reader that opened a new, smaller version while the kernel still
     had the older size read it padded with zeros, and its fstat gave the
     older size (an mmap of it died of SIGBUS);
  5. a private mmap of a new version, opened while a reader of the old
     one was open through the page cache, showed the old version's pages
     (the inode's cache held them), and the reverse;
  6. a file open for writing (O_RDWR, not truncated) and changed in
     place: the writer's private mmap shows its own bytes, a reader's the
     version it opened, and the change is published at the writer's close;
  8. a file just written here, created, rewritten smaller or larger, or
     changed in place, and mapped at once MAP_SHARED read-only
     (numpy.memmap, mmap.ACCESS_READ):
     the kernel refused the map (ENODEV) until a stat after the attribute
     timeout.
  9. a file rewritten with O_TRUNC beside its reader through the page
     cache took every other file of its directory off the page cache for
     2 s: a settled file there mapped MAP_SHARED failed ENODEV (LMCache
     keeps its whole cache in one directory).
 10. as 8., when the writer's RELEASE comes a moment after its close(2)
     returned (a child forked with the descriptor exits 30 ms later; a
     loaded daemon is as late): the reader opened in between went to
     direct I/O and the map failed ENODEV (CI, 2026-11-30).
 11. as 10., the RELEASE 0.5 s late: the daemon waited for it only
     100 ms after the close, less than a loaded sanitizer daemon can take.
 12. a reader of a file whose writer's descriptor a child still holds,
     while another writer there closes again and again: each close made
     the readers' wait for the late RELEASE longer, and open(2)
     did not return while the writes went on.

Each reader first waits out the attribute timeout and stats the file, so
that it opens through the page cache (the daemon knows the size the kernel
has). Exits 0 when every read was whole, 1 listing what was not.
"""

import mmap
import os
import subprocess
import sys
import threading
import time

d, kvtier, bucket, prefix = sys.argv[1:5]
os.makedirs(d, exist_ok=True)
bad = []
ATTR_TIMEOUT = 1.0     # [fuse] attr_timeout's default, which the test uses


def data(tag, n):
    return (b"%s %d\n" % (tag, n) + bytes(range(256)) * (n // 256 + 1))[:n]


def settle(p):
    """Waits out the kernel's attributes, then has it ask for them."""
    time.sleep(ATTR_TIMEOUT + 0.2)
    os.stat(p)


def write(p, b):
    with open(p, "wb") as f:
        f.write(b)


def put(name, b):
    src = os.path.join(os.environ.get("TMPDIR", "/tmp"), "versions.%d" % os.getpid())
    with open(src, "wb") as f:
        f.write(b)
    subprocess.run([kvtier, "put", bucket, prefix + "/" + name, src], check=True,
                   stdout=subprocess.DEVNULL)
    os.unlink(src)


def read_rest(fd, first):
    out = first
    while True:
        b = os.read(fd, 65536)
        if not b:
            return out
        out += b


def expect(what, got, want):
    if got != want:
        zeros = len(got) > len(want) and got[len(want):] == bytes(len(got) - len(want))
        bad.append("%s: read %d bytes, want %d (%s)" % (
            what, len(got), len(want),
            "padded with zeros" if zeros and got.startswith(want) else
            "cut" if want.startswith(got) else "other bytes"))


# 1. reader before a writer on this mount
p = os.path.join(d, "rewritten")
v1, v2 = data(b"v1", 300000), data(b"v2", 1000)
write(p, v1)
settle(p)
r = os.open(p, os.O_RDONLY)
first = os.read(r, 4096)
w = os.open(p, os.O_WRONLY | os.O_TRUNC)
os.write(w, v2[:500])
expect("1. reader of the old version while a writer writes", read_rest(r, first), v1)
os.lseek(r, 0, os.SEEK_SET)
os.write(w, v2[500:])
os.close(w)
expect("1. reader of the old version after the writer's close", read_rest(r, b""), v1)
os.close(r)
with open(p, "rb") as f:
    expect("1. a new open after the writer's close", f.read(), v2)

# 2. and 3. reader of an old version while another opens a newer one
for case, new_size in (("2", 1000), ("3", 600000)):
    p = os.path.join(d, "replaced" + case)
    old, new = data(b"old", 300000), data(b"new", new_size)
    write(p, old)
    settle(p)
    r = os.open(p, os.O_RDONLY)
    first = os.read(r, 4096)
    put("replaced" + case, new)
    settle(p)
    with open(p, "rb") as f:
        expect("%s. reader of the new version" % case, f.read(), new)
    expect("%s. reader of the old version" % case, read_rest(r, first), old)
    os.close(r)

# 4. a new, smaller version opened while the kernel has the older size
p = os.path.join(d, "shrunk")
old, new = data(b"old", 8192), data(b"new", 11)
write(p, old)
settle(p)
with open(p, "rb") as f:
    expect("4. the old version", f.read(), old)
os.stat(p)                        # the kernel has the old size for ATTR_TIMEOUT
put("shrunk", new)
fd = os.open(p, os.O_RDONLY)      # within the attribute timeout, no stat
# fstat answered the old size, and an mmap of that size died of SIGBUS.
size = os.fstat(fd).st_size
if size != len(new):
    bad.append("4. fstat of the new version's open: %d bytes, want %d" % (size, len(new)))
else:
    with mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ) as m:
        expect("4. a private mmap of the new version", m[:], new)
expect("4. the new version, opened without a stat", read_rest(fd, b""), new)
os.close(fd)

# 5. private mmaps of two versions open at once
p = os.path.join(d, "mapped")
old, new = data(b"old", 300000), data(b"new", 300000)
write(p, old)
settle(p)
r = os.open(p, os.O_RDONLY)
first = os.read(r, 4096)
put("mapped", new)
settle(p)
fd = os.open(p, os.O_RDONLY)
with mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m:
    expect("5. mmap of the new version beside the old one's reader", m[:], new)
    expect("5. reader of the old version beside the new one's mmap", read_rest(r, first), old)
    with mmap.mmap(r, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m2:
        expect("5. mmap of the old version beside the new one's", m2[:], old)
        expect("5. mmap of the new version beside the old one's", m[:], new)
os.close(fd)
os.close(r)

# 6. a private mmap of a file open for writing, beside a reader's
p = os.path.join(d, "inplace")
old = data(b"old", 300000)
patch = b"patched in place" * 4096
new = old[:100000] + patch + old[100000 + len(patch):]
write(p, old)
settle(p)
r = os.open(p, os.O_RDONLY)
first = os.read(r, 4096)
w = os.open(p, os.O_RDWR)
os.pwrite(w, patch, 100000)
with mmap.mmap(w, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m:
    expect("6. the writer's mmap of its own bytes", m[:], new)
    with mmap.mmap(r, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m2:
        expect("6. a reader's mmap beside the writer's", m2[:], old)
    expect("6. the reader beside the writer's mmap", read_rest(r, first), old)
os.close(w)
os.close(r)
with open(p, "rb") as f:
    expect("6. a new open after the writer's close", f.read(), new)

# 7. truncate(2) by name beside a reader of the page cache
p = os.path.join(d, "truncated")
old = data(b"old", 300000)
for case, size in (("shorter", 1000), ("empty", 0), ("longer", 400000)):
    write(p, old)
    settle(p)
    r = os.open(p, os.O_RDONLY)
    first = os.read(r, 4096)
    os.truncate(p, size)
    got = os.stat(p).st_size
    if got != size:
        bad.append("7. stat after truncate to %s beside a reader: size %d, want %d"
                   % (case, got, size))
    expect("7. reader of the version before a truncate to %s" % case, read_rest(r, first), old)
    os.close(r)
    want = old[:size] + bytes(max(0, size - len(old)))
    with open(p, "rb") as f:
        expect("7. a new open after a truncate to %s" % case, f.read(), want)

# 8. a shared read-only mmap of a file just written here, without a stat;
# in a directory of its own, away from the names 7.'s truncates kept off
# the page cache a while (fh_writer_enter)
os.mkdir(os.path.join(d, "8"))
p = os.path.join(d, "8", "justwritten")
for case, b in (("created", data(b"new", 70000)), ("rewritten smaller", data(b"small", 5000)),
                ("rewritten larger", data(b"large", 200000))):
    # The last case's reader is gone first: a RELEASE slower than a
    # writer's wait for it (FH_CACHE_WAIT_MS, on a loaded machine) moves
    # the name off the cache a while, and the mmap then meets direct I/O
    # (ENODEV, as kvtier-fuse(8) says).
    if case != "created":
        settle(p)
    write(p, b)
    try:
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            expect("8. a shared mmap of a file just %s" % case, m[:], b)
    except OSError as e:
        bad.append("8. a shared mmap of a file just %s: %s" % (case, e))

# and one changed in place (O_RDWR, no O_TRUNC: NIXL's POSIX backend)
p = os.path.join(d, "8", "inplace")
b = data(b"inplace", 65536)
write(p, b)
settle(p)
fd = os.open(p, os.O_RDWR | os.O_CREAT)
os.pwrite(fd, b"patched", 100)
os.close(fd)
try:
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        expect("8. a shared mmap of a file just changed in place", m[:], b[:100] + b"patched" + b[107:])
except OSError as e:
    bad.append("8. a shared mmap of a file just changed in place: %s" % e)

# 9. a rewrite beside a cached reader keeps that name alone off the cache
os.mkdir(os.path.join(d, "9"))
p, other = os.path.join(d, "9", "rewritten"), os.path.join(d, "9", "other")
old, settled = data(b"old", 100000), data(b"settled", 100000)
write(p, old)
write(other, settled)
settle(p)
os.stat(other)
r = os.open(p, os.O_RDONLY)
first = os.read(r, 4096)
write(p, data(b"new", 5000))      # waits for the reader 100 ms, then a new inode
try:
    with open(other, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        expect("9. a shared mmap of a settled file beside a rewrite", m[:], settled)
except OSError as e:
    bad.append("9. a shared mmap of a settled file beside a rewrite: %s" % e)
expect("9. the reader of the rewritten file's old version", read_rest(r, first), old)
os.close(r)

# 10. and 11. a shared mmap of a file whose writer's RELEASE is late, as a
# child forked with the writer's descriptor keeps it 30 ms, or 0.5 s (a
# loaded daemon, a sanitizer build in CI, can take a RELEASE up that late:
# the daemon waited 100 ms for it, and the reader went to direct I/O,
# ENODEV); three tries, as a child that exits late under load may be later
# than the daemon's wait for it (FH_CLOSED_WAIT_MS, 1 s after the close)
def late_release_map(case, name, hold):
    os.mkdir(os.path.join(d, name))
    p = os.path.join(d, name, "laterelease")
    fails = []
    for attempt in range(3):
        b = data(b"late%d" % attempt, 70000 + attempt)
        w = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        child = os.fork()
        if child == 0:
            time.sleep(hold)
            os._exit(0)
        os.write(w, b)
        os.close(w)
        try:
            with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if m[:] != b:
                    fails.append("the map is not the version written")
        except OSError as e:
            fails.append(str(e))
        os.waitpid(child, 0)
        if len(fails) == attempt:
            return
    bad.append("%s. a shared mmap of a file whose writer's release is %g s late: %s"
               % (case, hold, fails))


late_release_map(10, "10", 0.03)
late_release_map(11, "11", 0.5)


def held_writer(name, write_after=None):
    """A file in directory name whose writer closed while a forked child
    holds a copy of its descriptor until the pipe end returned is closed;
    write_after: the child writes through it that many seconds after a
    byte comes down the pipe."""
    os.mkdir(os.path.join(d, name))
    p = os.path.join(d, name, "held")
    w = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(w, data(b"held", 5000))
    hold_r, hold_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(hold_w)
        if write_after is not None and os.read(hold_r, 1):
            time.sleep(write_after)
            os.pwrite(w, b"more", 5000)
        os.read(hold_r, 1)  # holds the writer's descriptor until told
        os._exit(0)
    os.close(hold_r)
    os.close(w)             # its RELEASE waits for the child
    return p, hold_w, child


def open_seconds(p, what):
    """How long open(2) of p for reading took; a failure goes to bad."""
    start = time.monotonic()
    try:
        os.close(os.open(p, os.O_RDONLY))
    except OSError as e:
        bad.append("%s: %s" % (what, e))
    return time.monotonic() - start


# 12. an open that waits for a late RELEASE waits FH_CLOSED_WAIT_MS (1 s) at most, however
# often other writers of the file close meanwhile
p, hold_w, child = held_writer("12")
stop = threading.Event()


def rewrite():
    deadline = time.monotonic() + 6
    while not stop.is_set() and time.monotonic() < deadline:
        fd = os.open(p, os.O_WRONLY)
        os.write(fd, b"x")
        os.close(fd)
        stop.wait(0.02)     # the pace of the writes, well under 1 s


t = threading.Thread(target=rewrite)
t.start()
stop.wait(0.2)              # a few closes first
took = open_seconds(p, "12. a reader beside a writer that closes again and again")
stop.set()
t.join()
os.close(hold_w)
os.waitpid(child, 0)
if took > 2.5:
    bad.append("12. a reader beside a writer that closes again and again: open(2) took"
               " %.1f s (the wait for a late RELEASE is 1 s)" % took)

# 13. a copy of the writer's descriptor that writes on ends a reader's wait
# for its RELEASE: the reader goes to direct I/O beside it at once, not
# when the wait runs out (1 s after the close)
p, hold_w, child = held_writer("13", write_after=0.1)   # the reader's open waits by then
os.write(hold_w, b"g")
took = open_seconds(p, "13. a reader beside a copy of the writer's descriptor that writes")
os.close(hold_w)
os.waitpid(child, 0)
if took > 0.6:
    bad.append("13. a reader beside a copy of the writer's descriptor that writes 0.1 s on:"
               " open(2) took %.2f s (until the wait ran out)" % took)

print("versions: %d reads were not their version whole" % len(bad))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
