"""tests/fuse/metaclose.py DIR ROOM - with the mount's ROOM staging files
all taken (and one more refused with ENFILE), files that exist already are
opened O_RDWR, given new metadata only (ftruncate to their own size, fchmod,
futimens) and closed: every close succeeds, and each file keeps its bytes
and shows the new mode and mtime. Their close wrote the unchanged bytes out
through a staging file, and failed with ENFILE once the room was full
though nothing had failed before it."""
import errno
import os
import sys

d, room = sys.argv[1], int(sys.argv[2])
OFF = 1100000  # past the 1 MiB a file keeps in memory: staged
bad = []

# Existing files, written sequentially (a stream or memory: no staging).
sizes = {"small": 4096, "big": 3 * 1024 * 1024, "empty": 0}
for name, size in sizes.items():
    with open("%s/meta.%s" % (d, name), "wb") as f:
        f.write(bytes(i % 251 for i in range(size)))

staged = []
for i in range(room + 1):
    p = "%s/room%04d" % (d, i)
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, b"A", 0)
        os.pwrite(fd, b"B", OFF)
        if i == room:
            bad.append("%s: staged beyond the room of %d" % (p, room))
    except OSError as e:
        if i < room or e.errno != errno.ENFILE:
            bad.append("%s: write: %s" % (p, e))
    staged.append(fd)

for name, size in sizes.items():
    p = "%s/meta.%s" % (d, name)
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
        os.fchmod(fd, 0o600)
        os.utime(fd, ns=(1000000000 * 1000000000, 1000000000 * 1000000000))
    except OSError as e:
        bad.append("%s: %s" % (p, e))
    try:
        os.close(fd)
    except OSError as e:
        bad.append("%s: metadata only, and close failed: %s" % (p, e))

for fd in staged:
    try:
        os.close(fd)
    except OSError:
        pass  # the one refused its write; its close says so

for name, size in sizes.items():
    p = "%s/meta.%s" % (d, name)
    st = os.stat(p)
    if st.st_mode & 0o7777 != 0o600:
        bad.append("%s: mode %o, not 600" % (p, st.st_mode & 0o7777))
    if st.st_mtime_ns != 1000000000 * 1000000000:
        bad.append("%s: mtime %d, not the one set" % (p, st.st_mtime_ns))
    with open(p, "rb") as f:
        if f.read() != bytes(i % 251 for i in range(size)):
            bad.append("%s: other bytes" % p)
if bad:
    sys.exit("\n".join(bad[:10]))
