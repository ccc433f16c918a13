#!/usr/bin/env python3
"""deleterace.py - a reader of one file on a kvtier-fuse mount while other
processes PUT and DELETE its key through S3, for a bounded time.

    deleterace.py DIR SECONDS S3-ENDPOINT BUCKET

DIR is a directory of the mount in BUCKET (AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY set). A reader opens and reads DIR/k in a loop; one
process PUTs the key through S3, another DELETEs it. Each open either
fails ENOENT (the key was deleted) or reads one payload whole. Nothing
else: opens failed ESTALE (the kernel's one retry of a name deleted since
its lookup met another DELETE), 19 in 8 s with two readers. (With two
readers, the second of two versions open at once may still get ESTALE in
the same kind of instant: kvtier-fuse(8), ERRORS.) Exits 0 when all held,
1 listing what did not.
"""

import errno
import multiprocessing
import os
import sys
import time

import boto3
from botocore.config import Config

d, seconds, endpoint, bucket = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
key = os.path.relpath(os.path.join(d, "k"), os.path.join(d, ".."))
path = os.path.join(d, "k")


def payload(seq):
    return b"P %d\n" % seq + bytes([seq % 251]) * (seq % 5 * 20000)


def s3_loop(what, until, out):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    seq, bad = 0, []
    while time.monotonic() < until:
        seq += 1
        try:
            if what == "put":
                s3.put_object(Bucket=bucket, Key=key, Body=payload(seq))
            else:
                s3.delete_object(Bucket=bucket, Key=key)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            bad.append("%s %d: %s" % (what, seq, e))
    out.put((what, seq, bad))


def read_loop(until, out):
    opens = gone = 0
    bad = []
    while time.monotonic() < until:
        opens += 1
        try:
            with open(path, "rb") as f:
                b = f.read()
        except FileNotFoundError:
            gone += 1
            continue
        except OSError as e:
            bad.append("open/read: %s" % os.strerror(e.errno or errno.EIO))
            continue
        head, _, rest = b.partition(b"\n")
        if not head.startswith(b"P ") or b != payload(int(head[2:])):
            bad.append("read %d bytes that are no payload whole" % len(b))
    out.put(("read", opens, gone, bad))


def main():
    os.makedirs(d, exist_ok=True)
    until = time.monotonic() + seconds
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=s3_loop, args=(w, until, out))
             for w in ("put", "delete")]
    procs.append(multiprocessing.Process(target=read_loop, args=(until, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    bad = []
    for r in results:
        if r[0] == "read":
            print("reader: %d opens, %d ENOENT, %d failed" % (r[1], r[2], len(r[3])))
        else:
            print("%s: %d requests" % (r[0], r[1]))
        bad += r[-1]
    for b in sorted(set(bad)):
        print("FAIL:", b, "(x%d)" % bad.count(b))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
