#!/usr/bin/env python3
"""flush.py - who may publish a file open for writing on a kvtier-fuse mount.

    flush.py DIR KVTIER

DIR is a directory of the mount (its last component is the bucket, and it
is at the root of that bucket); KVTIER the CLI, which reads the store
directly (KVTIER_CONF set). Checks, with the store and with readers in
other processes:

  - a subprocess started while a file is written (fork + exec closes the
    child's copy of the descriptor: a FLUSH from another process) publishes
    nothing, before or after the first write, for a new file and for a
    rewrite; readers meanwhile see ENOENT or the old version, never the
    bytes written so far; the writer's close publishes the whole file;
  - a writer killed by SIGKILL mid-write publishes nothing (a new file stays
    absent, a rewritten one keeps its old version);
  - a writer that exits with the file still open publishes it (the kernel
    closes its files for it).

Before the fix (commit "publish at flush only from the writer") the first
check failed at once: the child's close published the first write, and the
chaos test then found FUSE-written blocks truncated at their first write(2).
Exits 0 when everything held, 1 (an assertion) when not.
"""

import os
import signal
import subprocess
import sys
import time

d, kvtier = sys.argv[1], sys.argv[2]
bucket = os.path.basename(os.path.normpath(d))


def store(key):
    """The bytes the store holds under key, or None."""
    r = subprocess.run([kvtier, "get", bucket, key, "-"], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def reader(key):
    """What another process reads through the mount: bytes, or None (ENOENT)."""
    r = subprocess.run(["cat", os.path.join(d, key)], capture_output=True)
    if r.returncode != 0:
        assert b"No such file" in r.stderr, r.stderr
        return None
    return r.stdout


def show(data):
    return "absent" if data is None else "%d bytes" % len(data)


a, b = os.urandom(300000), os.urandom(2500000)

# A new file.
fd = os.open(os.path.join(d, "fork-new"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b[:100000])
subprocess.run(["true"], check=True)
got = store("fork-new")
assert got is None, "a child's close published a new file after its first write: %s" % show(got)
assert reader("fork-new") is None, "another process read a file still being created"
os.write(fd, b[100000:])
subprocess.run(["true"], check=True)
got = store("fork-new")
assert got is None, "a child's close published a new file being written: %s" % show(got)
os.close(fd)
assert store("fork-new") == b, "the writer's close did not publish the whole file"
assert reader("fork-new") == b

# A rewrite, O_TRUNC: the old version until the writer's close.
with open(os.path.join(d, "fork-old"), "wb") as f:
    f.write(a)
fd = os.open(os.path.join(d, "fork-old"), os.O_WRONLY | os.O_TRUNC)
subprocess.run(["true"], check=True)
got = store("fork-old")
assert got == a, "a child's close before the first write published: %s" % show(got)
os.write(fd, b[:1048000])
subprocess.run(["true"], check=True)
got = store("fork-old")
assert got == a, "a child's close published a rewrite half done: %s" % show(got)
assert reader("fork-old") == a, "a reader saw bytes not yet published"
os.write(fd, b[1048000:])
os.close(fd)
assert store("fork-old") == b and reader("fork-old") == b, "the rewrite was not published"

# Writers killed mid-write: a new file and a rewrite.
for key, old in (("killed-new", None), ("fork-old", b)):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        fd = os.open(os.path.join(d, key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, a[:70000])
        os.write(w, b"x")
        time.sleep(60)
        os._exit(1)
    os.close(w)
    assert os.read(r, 1) == b"x", "the writer never got going"
    os.close(r)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    time.sleep(0.3)     # the RELEASE that follows the FLUSH is asynchronous
    got = store(key)
    assert got == old, "%s: a killed writer published %s" % (key, show(got))
    assert reader(key) == old, "%s: the mount shows a killed writer's bytes" % key

# A writer that exits with the file open: the kernel closes it, it publishes.
pid = os.fork()
if pid == 0:
    fd = os.open(os.path.join(d, "exited"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, a)
    os._exit(0)
os.waitpid(pid, 0)
assert store("exited") == a, "a writer that exited with the file open did not publish it"
print("flush: children's closes, killed and exiting writers: ok")
