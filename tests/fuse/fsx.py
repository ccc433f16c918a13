#!/usr/bin/env python3
"""fsx.py - a random-operation exerciser for a kvtier-fuse mount, in the
spirit of fsx: thousands of operations on a few files, each checked against
an in-memory model of what the files must hold.

The model is kvtier's, not plain POSIX: a file open for writing builds a new
version that is published when it is closed (or fsynced). So within a
write session the handle reads back its own writes, a reader opened during
the session sees the version published before it, and after close every
open sees the new bytes.

    fsx.py DIR [--ops N] [--seed S] [--seconds T] [--max-size BYTES]

DIR is a directory inside the mount (empty or made here). Exits 0 when
every check held, 1 with the seed, the failing operation and the last
operations when one did not. Sizes cross the engine's 1 MiB extents so
that reads and writes straddle them.
"""

import argparse
import errno
import os
import random
import sys
import time

NAMES = ["f%d" % i for i in range(6)] + ["sub/g%d" % i for i in range(4)]


class Failure(Exception):
    pass


class Fsx:
    def __init__(self, root, seed, max_size):
        self.root = root
        self.rng = random.Random(seed)
        self.max_size = max_size
        self.files = {}  # name -> bytes, as published
        self.log = []
        self.counts = {}
        self.written = 0
        os.makedirs(os.path.join(root, "sub"), exist_ok=True)
        for name in os.listdir(root):
            if name != "sub":
                raise SystemExit("fsx: %s is not empty" % root)

    # -- helpers -----------------------------------------------------------
    def path(self, name):
        return os.path.join(self.root, name)

    def note(self, what):
        self.log.append(what)
        if len(self.log) > 40:
            del self.log[0]

    def data(self, n):
        self.written += n
        return self.rng.randbytes(n)

    def expect(self, cond, what):
        if not cond:
            raise Failure(what)

    def check_bytes(self, got, want, what):
        if got != want:
            first = next((i for i in range(min(len(got), len(want)))
                          if got[i] != want[i]), min(len(got), len(want)))
            raise Failure("%s: %d bytes read, %d expected, first difference at %d"
                          % (what, len(got), len(want), first))

    def size(self):
        r = self.rng.random()
        if r < 0.3:
            return self.rng.randrange(0, 4096)
        if r < 0.8:
            return self.rng.randrange(0, 300 * 1024)
        return self.rng.randrange(0, self.max_size)

    def read_all(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    # -- operations ----------------------------------------------------------
    def op_read(self):
        name = self.rng.choice(list(self.files) or NAMES)
        want = self.files.get(name)
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except FileNotFoundError:
            self.expect(want is None, "read: %s missing" % name)
            return
        try:
            self.expect(want is not None, "read: %s exists, should not" % name)
            if self.rng.random() < 0.3:
                got = os.read(fd, len(want) + 100)
                while True:
                    more = os.read(fd, 1 << 20)
                    if not more:
                        break
                    got += more
                self.check_bytes(got, want, "read whole %s" % name)
            else:
                off = self.rng.randrange(0, len(want) + 10)
                n = self.rng.randrange(0, 2 << 20)
                got = os.pread(fd, n, off)
                self.check_bytes(got, want[off:off + n], "pread %s %d+%d" % (name, off, n))
        finally:
            os.close(fd)

    def op_stat(self):
        name = self.rng.choice(NAMES)
        want = self.files.get(name)
        try:
            st = os.stat(self.path(name))
        except FileNotFoundError:
            self.expect(want is None, "stat: %s missing" % name)
            return
        self.expect(want is not None, "stat: %s exists, should not" % name)
        self.expect(st.st_size == len(want),
                    "stat %s: size %d, expected %d" % (name, st.st_size, len(want)))

    def op_listdir(self):
        for d in ("", "sub"):
            got = set(os.listdir(self.path(d) if d else self.root)) - {"sub"}
            want = {n.split("/", 1)[1] if "/" in n else n
                    for n in self.files if (n.startswith("sub/") if d else "/" not in n)}
            self.expect(got == want, "listdir %r: %s, expected %s"
                        % (d, sorted(got), sorted(want)))

    def op_truncate(self):
        name = self.rng.choice(list(self.files) or NAMES)
        n = self.rng.choice([0, self.size(), len(self.files.get(name, b"")) // 2])
        try:
            os.truncate(self.path(name), n)
        except FileNotFoundError:
            self.expect(name not in self.files, "truncate: %s missing" % name)
            return
        old = self.files[name]
        self.files[name] = old[:n] + b"\0" * max(0, n - len(old))

    def op_rename(self):
        if not self.files:
            return
        a = self.rng.choice(list(self.files))
        b = self.rng.choice(NAMES)
        os.rename(self.path(a), self.path(b))
        if a != b:
            self.files[b] = self.files.pop(a)

    def op_unlink(self):
        name = self.rng.choice(NAMES)
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            self.expect(name not in self.files, "unlink: %s missing" % name)
            return
        self.expect(name in self.files, "unlink: %s existed, should not" % name)
        del self.files[name]

    def op_excl(self):
        name = self.rng.choice(NAMES)
        try:
            fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            self.expect(name in self.files, "O_EXCL: %s exists, should not" % name)
            return
        self.expect(name not in self.files, "O_EXCL: created %s, which existed" % name)
        data = self.data(self.size())
        os.write(fd, data)
        os.close(fd)
        self.files[name] = data

    def op_session(self):
        """Open for writing, several operations on the handle, close."""
        name = self.rng.choice(NAMES)
        old = self.files.get(name)
        mode = self.rng.choice(["rw", "trunc", "append", "new"])
        flags = os.O_RDWR | os.O_CREAT
        if mode == "trunc" or mode == "new":
            flags |= os.O_TRUNC
        if mode == "append":
            flags |= os.O_APPEND
        fd = os.open(self.path(name), flags, 0o644)
        content = bytearray(b"" if (old is None or flags & os.O_TRUNC) else old)
        self.note("  open %s %s (%d bytes)" % (name, mode, len(content)))
        side = None
        try:
            for _ in range(self.rng.randrange(1, 8)):
                r = self.rng.random()
                if r < 0.45:
                    # Sequential from where the content ends: the stream path.
                    data = self.data(self.size() // 2)
                    if flags & os.O_APPEND:
                        os.write(fd, data)
                        off = len(content)
                    else:
                        off = len(content)
                        os.pwrite(fd, data, off)
                    content[off:off + len(data)] = data
                    self.note("  write %d+%d" % (off, len(data)))
                elif r < 0.65:
                    data = self.data(self.rng.randrange(0, 200 * 1024))
                    off = self.rng.randrange(0, len(content) + 5000)
                    if flags & os.O_APPEND:
                        os.write(fd, data)  # O_APPEND: always at the end
                        off = len(content)
                    else:
                        os.pwrite(fd, data, off)
                    if off > len(content):
                        content.extend(b"\0" * (off - len(content)))
                    content[off:off + len(data)] = data
                    self.note("  pwrite %d+%d" % (off, len(data)))
                elif r < 0.75:
                    n = self.rng.randrange(0, len(content) + 5000)
                    os.ftruncate(fd, n)
                    if n < len(content):
                        del content[n:]
                    else:
                        content.extend(b"\0" * (n - len(content)))
                    self.note("  ftruncate %d" % n)
                elif r < 0.85:
                    off = self.rng.randrange(0, len(content) + 10)
                    n = self.rng.randrange(0, 1 << 20)
                    got = os.pread(fd, n, off)
                    self.check_bytes(got, bytes(content[off:off + n]),
                                     "pread in session %s %d+%d" % (name, off, n))
                    self.expect(os.fstat(fd).st_size == len(content),
                                "fstat in session %s: %d, expected %d"
                                % (name, os.fstat(fd).st_size, len(content)))
                elif r < 0.93 and side is None and old is not None:
                    # Another reader sees the version published before.
                    side = os.open(self.path(name), os.O_RDONLY)
                    got = os.pread(side, len(old) + 10, 0)
                    self.check_bytes(got, old, "side reader of %s during a write" % name)
                else:
                    os.fsync(fd)
                    self.files[name] = bytes(content)
                    old = self.files[name]
                    self.note("  fsync")
        finally:
            if side is not None:
                os.close(side)
            os.close(fd)
        self.files[name] = bytes(content)
        got = self.read_all(name)
        self.check_bytes(got, self.files[name], "after close of %s" % name)

    def run(self, ops, deadline):
        table = [
            (self.op_session, 30), (self.op_read, 20), (self.op_stat, 10),
            (self.op_truncate, 6), (self.op_rename, 8), (self.op_unlink, 6),
            (self.op_excl, 6), (self.op_listdir, 4),
        ]
        weights = [w for _, w in table]
        done = 0
        for i in range(ops):
            if time.monotonic() > deadline:
                break
            op = self.rng.choices(table, weights)[0][0]
            self.note("%d %s" % (i, op.__name__))
            op()
            self.counts[op.__name__] = self.counts.get(op.__name__, 0) + 1
            done += 1
        # Finally, everything reads back whole.
        for name, want in sorted(self.files.items()):
            self.check_bytes(self.read_all(name), want, "final read of %s" % name)
        self.op_listdir()
        return done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--max-size", type=int, default=3 * 1024 * 1024)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    fsx = Fsx(a.dir, seed, a.max_size)
    start = time.monotonic()
    try:
        done = fsx.run(a.ops, start + a.seconds)
    except (Failure, OSError) as e:
        print("fsx: FAILED with seed %d: %s" % (seed, e), file=sys.stderr)
        print("fsx: last operations:\n  " + "\n  ".join(fsx.log), file=sys.stderr)
        return 1
    print("fsx: %d operations in %.1fs, seed %d, %d files, %.0f MiB written: %s"
          % (done, time.monotonic() - start, seed, len(fsx.files), fsx.written / 1048576,
             " ".join("%s=%d" % (k[3:], v) for k, v in sorted(fsx.counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
