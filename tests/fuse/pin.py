#!/usr/bin/env python3
"""pin.py - user.kvtier.pin on a kvtier-fuse mount: a file pinned while it
is being written is published pinned and survives reclaim byte-exact, while
the plain cache files written around it are dropped.

    pin.py DIR KVTIER BUCKET CAPACITY

DIR is the mount's directory of BUCKET, on a store of CAPACITY bytes whose
keys at the bucket's root are plain cache (each its own session); KVTIER the
CLI, which reads what the store itself holds (kvtier head, kvtier get).

The race it closes: a file written through the mount and pinned only after
close (kvtier pin) was plain cache in between, and the daemon's background
demoter could drop it first. Here the pin is set on the open descriptor,
before or after the bytes, while another process fills the tier three
times over; each close must publish a pinned version (kvtier head says so
at once), every pinned file must read back whole, and plain files must
have been dropped (else reclaim never ran and nothing was shown). Then:
getfattr, a rewrite keeps the pin, removexattr and "0" unpin, and an
unpinned file is dropped again; EISDIR on a directory, EINVAL on a bad
value. Exits 0 when all holds, 1 saying what did not.
"""

import errno
import os
import subprocess
import sys
import threading

d, kvtier, bucket, capacity = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
PIN = "user.kvtier.pin"
MB = 1000 * 1000


def fail(msg):
    print("pin.py: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def data(tag, n):
    """n bytes that say which file and where: a swap or a shift shows."""
    head = b"%s\n" % tag.encode()
    body = os.urandom(n)
    return (head + body)[:n]


def pinned_in_store(key):
    r = subprocess.run([kvtier, "head", bucket, key], capture_output=True, text=True)
    if r.returncode != 0:
        fail("'%s' is not in the store: %s" % (key, r.stderr.strip()))
    fields = dict(l.split(":", 1) for l in r.stdout.splitlines())
    return fields["pinned"].strip() == "yes"


def in_store():
    """The keys the store holds now (not what the kernel may still cache)."""
    r = subprocess.run([kvtier, "ls", bucket], capture_output=True, text=True, check=True)
    return {l.split()[-1] for l in r.stdout.splitlines()}


def store_bytes(key):
    r = subprocess.run([kvtier, "get", bucket, key, "-"], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def write_pinned(name, content, when):
    """Writes name through the mount with the pin set on its descriptor
    'before' any byte or 'after' the last one, and checks, the moment close
    returns, that the store's version is pinned."""
    p = os.path.join(d, name)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if when == "before":
            os.setxattr(fd, PIN, b"1")
        view = memoryview(content)
        while view:
            n = os.write(fd, view[:1 << 20])
            view = view[n:]
        if when == "after":
            os.setxattr(fd, PIN, b"1")
        if os.getxattr(fd, PIN) != b"1":
            fail("'%s' open for writing: getxattr says %r" % (name, os.getxattr(fd, PIN)))
    finally:
        os.close(fd)
    if not pinned_in_store(name):
        fail("'%s' was published unpinned though pinned before close (%s)" % (name, when))


# Plain cache written by another thread the whole time the pinned files
# are, so that reclaim and the demoter run around their commits. New names
# each time: an overwrite would leave empty segments for reclaim to take
# instead of the full ones.
plain = []


fill_errors = []


def fill(tag, count):
    try:
        for i in range(count):
            name = "plain-%s-%03d" % (tag, i)
            with open(os.path.join(d, name), "wb") as f:
                f.write(data(name, MB))
            plain.append(name)
    except OSError as e:
        # Plain cache is dropped for new writes: never ENOSPC.
        fill_errors.append("%s: %s" % (name, e))


# 1. Pinned while written, during a fill three times the tier's size.
filler = threading.Thread(target=fill, args=("a", 3 * capacity // MB))
filler.start()
want = {}
try:
    for i, (size, when) in enumerate([(3 * MB + 12345, "before"),   # streamed, composed
                                      (400 * 1000, "before"),       # in memory
                                      (2 * MB + 77, "after"),
                                      (300 * 1000, "after"),
                                      (1, "before")]):
        name = "pinned%d" % i
        want[name] = data(name, size)
        write_pinned(name, want[name], when)
finally:
    filler.join()
if fill_errors:
    fail("writing plain files failed: %s" % fill_errors[0])
# ... and after it: the first ones have seen the whole fill since.
for name, content in want.items():
    if store_bytes(name) != content:
        fail("pinned '%s' did not survive reclaim byte-exact" % name)
    with open(os.path.join(d, name), "rb") as f:
        if f.read() != content:
            fail("pinned '%s' reads back wrong through the mount" % name)
held = in_store()
dropped = [n for n in plain if n not in held]
if not dropped:
    fail("no plain file was dropped after %d MB into a %d MB tier: reclaim never ran"
         % (len(plain), capacity // MB))
print("    %d pinned files whole; %d of %d plain files dropped"
      % (len(want), len(dropped), len(plain)))

# 2. getfattr and listxattr.
kept = [n for n in plain if n in held]
if kept and os.getxattr(os.path.join(d, kept[-1]), PIN) != b"0":
    fail("a plain file's %s is not 0" % PIN)
if os.getxattr(os.path.join(d, "pinned0"), PIN) != b"1":
    fail("pinned0's %s is not 1" % PIN)
if PIN not in os.listxattr(os.path.join(d, "pinned0")):
    fail("listxattr does not name %s" % PIN)

# 3. A rewrite through the mount keeps the pin, with no moment unpinned.
want["pinned1"] = data("pinned1 again", 500 * 1000)
with open(os.path.join(d, "pinned1"), "wb") as f:
    f.write(want["pinned1"])
if not pinned_in_store("pinned1"):
    fail("rewriting a pinned file through the mount lost its pin")

# 4. Unpin: removexattr (setfattr -x), and the value "0".
os.removexattr(os.path.join(d, "pinned0"), PIN)
os.setxattr(os.path.join(d, "pinned2"), PIN, b"0")
for name in ("pinned0", "pinned2"):
    if os.getxattr(os.path.join(d, name), PIN) != b"0" or pinned_in_store(name):
        fail("'%s' is still pinned after unpinning" % name)
# Unpinned, they are plain cache again: the next fills drop them, while
# the files still pinned stay. Bounded: six times the tier.
for r in range(6):
    if not {"pinned0", "pinned2"} & in_store():
        break
    fill("b%d" % r, capacity // MB)
    if fill_errors:
        fail("writing plain files failed: %s" % fill_errors[0])
else:
    fail("unpinned files survived six times the tier in plain writes")
for name in ("pinned1", "pinned3", "pinned4"):
    if store_bytes(name) != want[name]:
        fail("pinned '%s' did not survive the second fill byte-exact" % name)

# 5. Bad requests.
try:
    os.setxattr(d, PIN, b"1")
    fail("setxattr %s on a directory succeeded" % PIN)
except OSError as e:
    if e.errno != errno.EISDIR:
        fail("setxattr %s on a directory: %s, expected EISDIR" % (PIN, e))
for bad in (b"2", b"yes", b"", b"11"):
    try:
        os.setxattr(os.path.join(d, "pinned1"), PIN, bad)
        fail("setxattr %s = %r succeeded" % (PIN, bad))
    except OSError as e:
        if e.errno != errno.EINVAL:
            fail("setxattr %s = %r: %s, expected EINVAL" % (PIN, bad, e))
if not pinned_in_store("pinned1"):
    fail("a refused value changed the pin")
print("    getxattr, rewrite, unpin, EISDIR and EINVAL as documented")
