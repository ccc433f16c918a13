#!/usr/bin/env python3
# What a device flush costs on this disk, and whether it is the number of
# fdatasync() calls or the bytes written before them that costs. Writes
# 16 MiB with O_DIRECT into each of 8 files of 64 MiB, then flushes them in
# one of three ways, 5 rounds each, and prints each round's time and the
# flushes the disk counted (/proc/diskstats):
#   seq  fdatasync() of each file, one after another (kvt_store_sync today)
#   par  the same from 8 threads at once
#   one  fdatasync() of one file only
#
# Usage: scripts/flush-cost.py [DIR [DEVICE]]  (default /var/tmp/flush-cost, vda)
import mmap
import os
import sys
import threading
import time

d = sys.argv[1] if len(sys.argv) > 1 else "/var/tmp/flush-cost"
dev = sys.argv[2] if len(sys.argv) > 2 else "vda"
n, size, mib = 8, 64 << 20, 1 << 20
os.makedirs(d, exist_ok=True)
fds = []
for i in range(n):
    path = "%s/f%d" % (d, i)
    if not os.path.exists(path) or os.path.getsize(path) != size:
        with open(path, "wb") as f:
            f.write(b"\0" * size)
            os.fsync(f.fileno())
    fds.append(os.open(path, os.O_RDWR | os.O_DIRECT))
buf = mmap.mmap(-1, mib)
buf.write(os.urandom(mib))


def flushes():
    for line in open("/proc/diskstats"):
        f = line.split()
        if f[2] == dev:
            return int(f[18])
    sys.exit("no device %s in /proc/diskstats" % dev)


for mode in ("seq", "par", "one", "seq", "par", "one"):
    rounds = []
    for r in range(5):
        for fd in fds:
            for k in range(16):
                os.pwritev(fd, [buf], ((k * 4 + r) % 64) * mib)
        c0, t0 = flushes(), time.monotonic()
        if mode == "seq":
            for fd in fds:
                os.fdatasync(fd)
        elif mode == "one":
            os.fdatasync(fds[0])
        else:
            ts = [threading.Thread(target=os.fdatasync, args=(fd,)) for fd in fds]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        rounds.append("%.0f ms/%d" % ((time.monotonic() - t0) * 1e3, flushes() - c0))
    print("%-4s %s" % (mode, ", ".join(rounds)))
