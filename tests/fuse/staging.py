"""tests/fuse/staging.py DIR N ROOM - N files written out of order past
1 MiB, all open at once through a mount whose daemon has room for ROOM
staging files: the writes past ROOM fail with ENFILE, the close of a file
fails only if one of its writes did, and every file whose writes and
close succeeded reads back byte-exact. Then, with all of them closed, ROOM
more stage again."""
import errno
import os
import sys

d, n, room = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
OFF = 1100000  # past the 1 MiB a file keeps in memory: staged


def want(p):
    return b"A" * 10 + b"\0" * (OFF - 10) + p.encode()


def round_(tag, count):
    files, failed, bad = [], 0, []
    for i in range(count):
        p = "%s/%s%04d" % (d, tag, i)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        ok = True
        try:
            os.pwrite(fd, b"A" * 10, 0)
            os.pwrite(fd, p.encode(), OFF)
        except OSError as e:
            if e.errno != errno.ENFILE:
                bad.append("%s: write: %s" % (p, e))
            failed += 1
            ok = False
        files.append((p, fd, ok))
    for p, fd, ok in files:
        try:
            os.close(fd)
            if not ok:
                bad.append("%s: its write failed, and close did not" % p)
        except OSError as e:
            if ok:
                bad.append("%s: its writes succeeded, and close failed: %s" % (p, e))
    for p, fd, ok in files:
        if ok:
            try:
                with open(p, "rb") as f:
                    if f.read() != want(p):
                        bad.append("%s: other bytes" % p)
            except OSError as e:
                bad.append("%s: written and closed, then: %s" % (p, e))
    return failed, bad


failed, bad = round_("f", n)
if failed != max(0, n - room):
    bad.append("%d of %d writes failed, not %d" % (failed, n, max(0, n - room)))
failed, more = round_("g", room)
if failed:
    more.append("%d of %d writes failed once the others were closed" % (failed, room))
if bad or more:
    sys.exit("\n".join(bad[:10] + more[:10]))
