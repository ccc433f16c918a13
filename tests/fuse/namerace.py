#!/usr/bin/env python3
"""namerace.py - create, stat, read, rename and unlink of the same few names
from several processes at once on a kvtier-fuse mount, with S3 PUT and
DELETE of the same keys through the gateway, for a bounded time.

    namerace.py DIR SECONDS PROCS [S3-ENDPOINT BUCKET]

DIR is a directory of the mount; keys are made under DIR/d0..d2, names
n0..n3 shared by all, own-W private to process W. With an endpoint (and
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY set) one more process PUTs and
DELETEs the shared keys through S3. What must hold, whatever the others do:

  - open(O_CREAT) of a name in a directory that exists never fails ENOENT
    (it did: the kernel's name was stale after another process's rename or
    unlink, or a publish had landed under the name a file had just left);
  - a private name reads back, stats and lists as just written;
  - S3 PUT and DELETE of those keys succeed (the bucket exists);
  - every read of a shared name (in one read, or 128 KiB at a time as cp
    reads) gives the bytes of one payload, whole, as one writer wrote it:
    never a mix of two, never one cut short or padded with zeros (the
    kernel keeps one size per inode; a reader that opened
    the file before a writer on this mount, or before another version was
    published, once read the old version cut at the writer's size, or a
    new, smaller version zero-padded to an older size: fuse/file.c, "One
    version per inode");
  - no call fails with ESTALE or any error other than ENOENT where ENOENT
    is allowed.

Exits 0 when all held, 1 listing what did not.
"""

import os
import random
import sys
import time

d, seconds, nproc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
endpoint = sys.argv[4] if len(sys.argv) > 5 else None
s3_bucket = sys.argv[5] if len(sys.argv) > 5 else None
s3_prefix = os.path.relpath(d, os.path.join(d, "..")) if endpoint else None
DIRS = ["d%d" % i for i in range(3)]
NAMES = ["n%d" % i for i in range(4)]
for x in DIRS:
    os.makedirs(os.path.join(d, x), exist_ok=True)


def payload(who, seq, rnd):
    # Up to 3 MiB: files read in pieces below 4 MiB are pushed whole into
    # the page cache at their first READ (fuse/file.c, fh_read_push).
    n = rnd.choice([0, rnd.randint(1, 5000), rnd.randint(5000, 400000),
                    rnd.randint(1 << 20, 3 << 20)])
    return b"P %s %d %d\n" % (who, seq, n) + bytes([seq % 251]) * n


def read_all(f, piece):
    """f's bytes: in one read, or (piece > 0) piece bytes at a time, as cp."""
    if not piece:
        return f.read()
    parts = []
    while True:
        b = f.read(piece)
        if not b:
            return b"".join(parts)
        parts.append(b)


def check(data):
    """None if data is one payload, whole, as written; else what it is."""
    head, nl, body = data.partition(b"\n")
    f = head.split(b" ")
    if not data:
        return "empty"
    if not nl:
        return "cut in its header" if data.startswith(b"P ") else "not one payload"
    if len(f) != 4 or f[0] != b"P":
        return "not one payload"
    try:
        n, fill = int(f[3]), bytes([int(f[2]) % 251])
    except ValueError:
        return "not one payload"
    if len(body) < n:
        return "cut" if body == fill * len(body) else "not one payload"
    if body[:n] != fill * n:
        return "not one payload"
    if len(body) > n:
        return "padded" if body[n:] == bytes(len(body) - n) else "longer than its payload"
    return None


def worker(w):
    rnd = random.Random(w * 7919 + int(time.time()))
    bad, ops, seq, whole = [], 0, 0, 0
    end = time.time() + seconds
    me = b"w%d" % w
    while time.time() < end and len(bad) < 10:
        ops += 1
        sub = rnd.choice(DIRS)
        p = os.path.join(d, sub, rnd.choice(NAMES))
        r = rnd.random()
        what = "?"
        try:
            if r < 0.25:
                seq += 1
                data = payload(me, seq, rnd)
                what = "open(O_CREAT) " + p
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    what = "write " + p
                    half = len(data) // 2
                    os.write(fd, data[:half])
                    os.write(fd, data[half:])
                    what = "fstat " + p
                    os.fstat(fd)
                finally:
                    os.close(fd)
            elif r < 0.45:
                what = "read " + p
                try:
                    with open(p, "rb", buffering=0) as f:
                        data = read_all(f, rnd.choice([0, 131072]))
                except FileNotFoundError:
                    continue
                c = check(data)
                if c is not None:
                    bad.append("%s: %s (%d bytes: %r)" % (p, c, len(data), data[:40]))
                else:
                    whole += 1
            elif r < 0.55:
                what = "stat " + p
                try:
                    os.stat(p)
                except FileNotFoundError:
                    pass
            elif r < 0.7:
                q = os.path.join(d, rnd.choice(DIRS), rnd.choice(NAMES))
                what = "rename %s %s" % (p, q)
                try:
                    os.rename(p, q)
                except FileNotFoundError:
                    pass
            elif r < 0.8:
                what = "unlink " + p
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            else:
                own = os.path.join(d, sub, "own-%d" % w)
                seq += 1
                data = payload(me, seq, rnd)
                what = "write own " + own
                with open(own, "wb") as f:
                    f.write(data)
                what = "stat own " + own
                if os.stat(own).st_size != len(data):
                    bad.append("%s: size %d after writing %d" % (own, os.stat(own).st_size,
                                                                 len(data)))
                what = "read own " + own
                with open(own, "rb") as f:
                    if f.read() != data:
                        bad.append("%s: reads back other bytes" % own)
                what = "list " + sub
                if "own-%d" % w not in os.listdir(os.path.join(d, sub)):
                    bad.append("%s: not listed" % own)
        except OSError as e:
            bad.append("%s: %r" % (what, e))
    return ops, bad, whole


def s3worker():
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"},
                                    retries={"max_attempts": 1}))
    rnd = random.Random(int(time.time()))
    end, ops, bad = time.time() + seconds, 0, []
    while time.time() < end:
        k = "%s/%s/%s" % (s3_prefix, rnd.choice(DIRS), rnd.choice(NAMES))
        ops += 1
        try:
            if rnd.random() < 0.6:
                s3.put_object(Bucket=s3_bucket, Key=k, Body=payload(b"s3", ops, rnd))
            else:
                s3.delete_object(Bucket=s3_bucket, Key=k)
        except Exception as e:
            # The bucket exists and has room: any error is one. (A PUT whose
            # key was deleted just after its commit answered NoSuchBucket.)
            bad.append("S3 %s: %r" % (k, e))
            if len(bad) >= 10:
                break
    return ops, bad, 0


children = []
for w in range(nproc + (1 if endpoint else 0)):
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = s3worker() if w == nproc else worker(w)
        except Exception as e:
            res = 0, ["process %d died: %r" % (w, e)], 0
        os.write(wfd, repr(res).encode())
        os._exit(0)
    os.close(wfd)
    children.append((pid, r))
total, fails, wholes = 0, [], 0
for pid, r in children:
    out = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    ops, bad, whole = eval(out.decode()) if out else (0, ["a process said nothing"], 0)
    total += ops
    fails += bad
    wholes += whole
print("namerace: %d processes%s, %d operations in %g s, %d whole reads of shared names, "
      "%d failures" % (nproc, " and S3" if endpoint else "", total, seconds, wholes, len(fails)))
for f in fails[:40]:
    print("  " + f)
sys.exit(1 if fails else 0)
