#!/usr/bin/env python3
"""rewrite.py - an open reader of a large file on a kvtier-fuse mount keeps
reading the version it opened, whole, while another process rewrites the
name again and again in a store small enough that reclaim must free
segments meanwhile.

    rewrite.py DIR MIB ROUNDS

DIR is a directory of the mount, MIB the file's size, ROUNDS the rewrites.
Each case opens the file, reads its first MiB, lets the writer rewrite
the name ROUNDS times (more than the store holds: reclaim runs), then
reads the rest and checks every byte against the version it opened:

  1. read with O_DIRECT, the name rewritten with O_TRUNC;
  2. read through the page cache, the name replaced by a temp file and
     rename(2) (how LMCache and NIXL writers publish a block);
  3. opened O_RDWR, given new metadata only and fsync'ed (which publishes
     it): read from the version published, rewritten with O_TRUNC. That
     version was opened at the first read after the fsync without a hold,
     and failed as 1 and 2 did before their holds.

A replaced version is dead space, so its segments were empty and reclaim
took them first: the reader failed with EIO (the log: "was evicted while
open") a few MiB in, while the versions written after it, as dead, were
still there to take (src/reclaim.c, "Open readers"). Never a byte of
another version either way. Exits 0 when every read was whole, 1 saying
what the reader got.
"""

import mmap
import os
import struct
import sys

d, mib, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SIZE = mib << 20
MIB = 1 << 20
os.makedirs(d, exist_ok=True)
bad = []


def data(v):
    """Version v: each 4 KiB block names v and its number, then v's byte."""
    blk = bytearray([v]) * 4096
    out = bytearray()
    for i in range(SIZE // 4096):
        struct.pack_into("<QQ", blk, 0, v, i)
        out += blk
    return bytes(out)


def put(path, v, how):
    target = path + ".tmp" if how == "rename" else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    b = data(v)
    for o in range(0, SIZE, MIB):
        os.write(fd, b[o:o + MIB])
    os.close(fd)
    if how == "rename":
        os.rename(target, path)


def case(name, direct, how, fsynced=False):
    path = os.path.join(d, name)
    put(path, 1, "trunc")
    if fsynced:
        # New metadata only, published by the fsync: the handle reads on
        # from the version it published, which it opens at its next read.
        fd = os.open(path, os.O_RDWR)
        os.ftruncate(fd, SIZE)
        os.fchmod(fd, 0o600)
        os.fsync(fd)
    else:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    buf = mmap.mmap(-1, MIB)    # aligned, for O_DIRECT
    got, off, err = bytearray(), 0, None
    while off < SIZE and err is None:
        if off == MIB:
            for v in range(2, rounds + 2):
                put(path, v, how)
        try:
            n = os.preadv(fd, [buf], off)
        except OSError as e:
            err = e.strerror
            break
        if n == 0:
            break
        got += buf[:n]
        off += n
    os.close(fd)
    want = data(1)
    if err is not None:
        bad.append("%s: read failed at %d MiB of %d: %s" % (name, off // MIB, mib, err))
    elif bytes(got) != want:
        first = next((i for i in range(0, min(len(got), SIZE), 4096)
                      if got[i:i + 4096] != want[i:i + 4096]), len(got))
        bad.append("%s: %d bytes of %d, not the version opened from %d (block says %s)"
                   % (name, len(got), SIZE, first,
                      struct.unpack_from("<QQ", got, first) if first < len(got) else "EOF"))


case("odirect-trunc", True, "trunc")
case("cache-rename", False, "rename")
case("rdwr-fsync-trunc", False, "trunc", fsynced=True)
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
