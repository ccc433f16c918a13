#!/usr/bin/env python3
"""tests/chaos/chaos.py - every kvtier process on one data directory, under
load, while processes are killed, the partner fails and the hot tier fills.

Processes: kvtier-gateway, a kvtier-fuse mount, kvtier-migrate runs and
kvtier CLI runs, all on one store whose G4 is s3rver behind a fault proxy
(this file, a thread): [g4] url = s3://g4bucket/chaos, endpoint = the proxy.

Load (threads, each owning its keys so that its model of them is exact):
  s3      boto3 PUT / GET / DELETE / POST ?kvtier-lookup through the gateway
  fuse    files written and read through the mount
  cli     kvtier put (half the keys --pin) / get / rm
  migrate kvtier-migrate --idle 0s --session B/S (demote) or --recall B/S
  filler  pinned 1.5 MiB objects until the hot tier says ENOSPC, then rm
Chaos (one thread): SIGKILL of the gateway, the FUSE daemon (then a lazy
unmount and a new mount), a running migrator or CLI; partner fault windows
(HTTP 500, 503, connections dropped mid-response, stalls).

Every payload starts with a header naming its key and version and the
SHA-256 of the rest; every read checks it, so a wrong byte is seen by the
client. The model of a key: the last acknowledged version (or deleted), and
the versions of writes whose outcome is unknown (the process died, the
connection broke) since then, any of which may have won.

What may be missing at the end (src/reclaim.c, cat_object_drop): with G4
configured, reclaim drops only plain cache, an unpinned object whose key is
its own session (here: a key without '/'), and only when G4 does not hold
its version. Session state, an object whose key names a session, is
demoted to G4 before its segment is freed and then goes cold, never away;
if the demotion fails the segment stays whole and writers get ENOSPC. A
pinned object is relocated. So:
  wrong bytes         a read that does not verify, or names another key
  stale reads         a verified read of a version the model excludes
  lost durable        an acknowledged version that is not plain cache, missing
                      or unreadable at the end
  G4 damaged          an object in the partner bucket that does not verify
  evicted (allowed)   plain cache, missing; at most evicted_objects
and `kvtier fsck` must be clean. Exit 0 when all of these hold, 1 if not.
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import ResponseStreamingError

BUCKET = "chaos"
G4_BUCKET = "g4bucket"
G4_PREFIX = "chaos"
HDR = 400
MAGIC = b"KVCHAOS1"


def log(msg):
    print("%s chaos: %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def s3_code(e):
    """The S3 error code of a botocore exception, or None."""
    r = getattr(e, "response", None)
    return (r or {}).get("Error", {}).get("Code")


# How long a daemon (the gateway, the mount) may take to start: a bound for
# a hang, not a guess at a loaded machine's speed.
START_SECONDS = 120


def port_free(port):
    """Nothing but a socket in TIME_WAIT has port: s3rver and the gateway
    (SO_REUSEADDR, as here) bind over those."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port():
    """A free loopback port below the kernel's ephemeral range (above it
    where the range leaves too few below). The gateway comes back on its
    port after each kill, and the range is where the kernel picks the local
    port of every outgoing connection, this run's or another test's: one
    took the gateway's port while it was down, and the restart failed."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    rng = (10000, lo - 1) if lo > 11000 else (hi + 1, 65535) if hi < 64535 else None
    pick = random.SystemRandom()    # not the seeded generator: ports are not the run's
    for _ in range(50):
        port = pick.randint(*rng) if rng else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port in %s" % (rng,))


# ---- payloads ---------------------------------------------------------------

def make_payload(key, ver, size):
    """HDR bytes of header (magic, key, version, length, sha256), then size bytes."""
    rnd = random.Random("%s/%d" % (key, ver))
    body = rnd.randbytes(size)
    head = b"%s %s %d %d %s" % (MAGIC, key.encode(), ver, size,
                                 hashlib.sha256(body).hexdigest().encode())
    assert len(head) < HDR
    return head.ljust(HDR, b"\n") + body


def check_payload(key, data):
    """The version data holds, or None when it does not verify as key's."""
    try:
        f = data[:HDR].rstrip(b"\n").split(b" ")
        if len(f) != 5 or f[0] != MAGIC or f[1].decode() != key:
            return None
        ver, size = int(f[2]), int(f[3])
        body = data[HDR:]
        if len(body) != size or hashlib.sha256(body).hexdigest().encode() != f[4]:
            return None
        return ver
    except (ValueError, UnicodeDecodeError):
        return None


# ---- the model ----------------------------------------------------------------

class Key:
    """What a key may hold: acked (a version, or None: absent) or one of maybe."""

    def __init__(self, name, pinned):
        self.name = name
        self.pinned = pinned
        # Plain cache: its own session (session_depth 1), not pinned.
        self.cache = "/" not in name and not pinned
        self.acked = None
        self.maybe = set()
        self.late = set()   # writes that timed out: they may still land later
        self.history = []   # (time, what) for a post-mortem
        self.lock = threading.Lock()

    def note(self, what):
        self.history.append((time.strftime("%H:%M:%S"), what))
        del self.history[:-12]

    def allowed(self):
        return {self.acked} | self.maybe | self.late


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}
        self.samples = {}   # a few distinct error messages per kind

    def sample(self, kind, msg):
        with self.lock:
            l = self.samples.setdefault(kind, [])
            if msg not in l and len(l) < 6:
                l.append(msg)

    def add(self, name, n=1):
        with self.lock:
            self.c[name] = self.c.get(name, 0) + n

    def get(self, name):
        with self.lock:
            return self.c.get(name, 0)


# ---- the partner's fault proxy ------------------------------------------------------

class FaultProxy(threading.Thread):
    """TCP proxy to s3rver. While a fault window is open, each new connection
    gets the fault with probability 1/2: an HTTP 500 or 503 (S3 error XML),
    a connection closed after part of the response, or a stall of seconds
    before it is closed."""

    def __init__(self, upstream_port, stats):
        super().__init__(daemon=True)
        self.upstream = upstream_port
        self.stats = stats
        self.mode = None
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopping = False

    def run(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    @staticmethod
    def read_head(c):
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            b = c.recv(65536)
            if not b:
                break
            data += b
        return data

    def serve(self, c):
        mode = self.mode if self.mode and random.random() < 0.7 else None
        try:
            if mode in ("500", "503"):
                self.read_head(c)
                code, name = (500, "InternalError") if mode == "500" else (503, "SlowDown")
                body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                        "<Message>chaos</Message></Error>" % name).encode()
                c.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                          % (code, name.encode(), len(body), body))
                self.stats.add("faults_" + mode)
                return
            if mode == "stall":
                self.read_head(c)
                self.stats.add("faults_stall")
                time.sleep(random.uniform(2, 8))
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            cut = random.randint(0, 4096) if mode == "drop" else None
            if mode == "drop":
                self.stats.add("faults_drop")
            t = threading.Thread(target=self.pump, args=(c, u, None), daemon=True)
            t.start()
            self.pump(u, c, cut)
            try:
                u.close()
            except OSError:
                pass
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    @staticmethod
    def pump(src, dst, cut):
        sent = 0
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if cut is not None and sent + len(b) >= cut:
                    dst.sendall(b[:max(0, cut - sent)])
                    break
                dst.sendall(b)
                sent += len(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# ---- the system under test ---------------------------------------------------------

class System:
    def __init__(self, args, tmp, stats):
        self.args = args
        self.tmp = tmp
        self.stats = stats
        self.bin = args.builddir
        self.conf = os.path.join(tmp, "kvtier.conf")
        self.dir = os.path.join(tmp, "data")
        self.mnt = os.path.join(tmp, "mnt")
        self.env = dict(os.environ, KVTIER_CONF=self.conf)
        self.lock = threading.Lock()
        self.gateway = None
        self.fuse = None
        self.running = set()    # short-lived processes the chaos thread may kill
        self.gw_port = None
        self.s3rver = None
        self.mnt_fd = None      # the bucket's directory in the current mount

    def start_s3rver(self):
        os.makedirs(os.path.join(self.tmp, "s3"))
        for _ in range(5):
            port = free_port()
            logf = open(os.path.join(self.tmp, "s3rver.log"), "w")
            p = subprocess.Popen([self.args.s3rver, "-d", os.path.join(self.tmp, "s3"),
                                  "-a", "127.0.0.1", "-p", str(port),
                                  "--configure-bucket", G4_BUCKET],
                                 stdout=logf, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + START_SECONDS
            while time.monotonic() < deadline:
                time.sleep(0.1)
                with open(os.path.join(self.tmp, "s3rver.log")) as f:
                    if "listening" in f.read():
                        self.s3rver, self.s3_port = p, port
                        return
                if p.poll() is not None:
                    break
            p.kill()
            p.wait()
        raise RuntimeError("s3rver did not start")

    def write_config(self, proxy_port):
        keys = os.path.join(self.tmp, "g4keys")
        with open(keys, "w") as f:
            f.write("access_key = S3RVER\nsecret_key = S3RVER\n")
        os.chmod(keys, 0o600)
        self.creds = os.path.join(self.tmp, "creds")
        self.ak, self.sk = "CHAOSKEY", "chaos-secret-" + os.urandom(8).hex()
        with open(self.creds, "w") as f:
            f.write("%s %s\n" % (self.ak, self.sk))
        os.chmod(self.creds, 0o600)
        with open(self.conf, "w") as f:
            f.write("[store]\ndir = %s\ncapacity = %s\nsegment_size = 2M\n"
                    "access_flush_ms = 200\n\n"
                    "[g4]\nurl = s3://%s/%s\nendpoint = http://127.0.0.1:%d\n"
                    "credentials = %s\n" % (self.dir, self.args.capacity, G4_BUCKET,
                                            G4_PREFIX, proxy_port, keys))

    def cli(self, *argv, stdin=None, timeout=60, kill_ok=True):
        """Runs kvtier ARGV, killable by the chaos thread; (rc, out, err)."""
        p = subprocess.Popen([os.path.join(self.bin, argv[0])] + list(argv[1:]),
                             env=self.env, stdin=subprocess.PIPE if stdin is not None else None,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if kill_ok:
            with self.lock:
                self.running.add(p)
        try:
            out, err = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.stats.add("timeouts")
        finally:
            with self.lock:
                self.running.discard(p)
        return p.returncode, out, err

    def start_gateway(self):
        deadline = time.monotonic() + START_SECONDS
        if not self.gw_port:
            self.gw_port = free_port()
        # A restart comes back on the same port: wait for whatever holds it.
        while not port_free(self.gw_port):
            if time.monotonic() > deadline:
                raise RuntimeError("port %d of the gateway is still taken %d s on"
                                   % (self.gw_port, START_SECONDS))
            time.sleep(0.1)
        logf = open(os.path.join(self.tmp, "gateway.log"), "a")
        p = subprocess.Popen([os.path.join(self.bin, "kvtier-gateway"), "--listen",
                              "127.0.0.1:%d" % self.gw_port, "--credentials", self.creds,
                              "--access-log", "off", "-f"],
                             env=self.env, stdout=logf, stderr=subprocess.STDOUT)
        # As long as it takes (START_SECONDS): after 10 s it went on as if
        # the gateway served, and the mount below failed outright.
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % self.gw_port, timeout=1)
                break
            except Exception:
                if p.poll() is not None:
                    raise RuntimeError("the gateway exited %d" % p.returncode)
                if time.monotonic() > deadline:
                    p.kill()
                    p.wait()
                    raise RuntimeError("the gateway did not serve in %d s" % START_SECONDS)
                time.sleep(0.1)
        self.gateway = p

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(l.split()[1] == self.mnt for l in f)

    def start_fuse(self):
        os.makedirs(self.mnt, exist_ok=True)
        logf = open(os.path.join(self.tmp, "fuse.log"), "a")
        p = subprocess.Popen([os.path.join(self.bin, "kvtier-fuse"), self.mnt, "-f"],
                             env=self.env, stdout=logf, stderr=subprocess.STDOUT)
        # As long as it takes (START_SECONDS): after 10 s (a sanitized
        # daemon on a loaded machine, recovering from a SIGKILL) it went on,
        # and opening the bucket in the plain directory under the mount
        # point failed: FileNotFoundError, and the run with it.
        deadline = time.monotonic() + START_SECONDS
        while not self.mounted():
            if p.poll() is not None:
                raise RuntimeError("kvtier-fuse exited %d" % p.returncode)
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                self.unmount()
                raise RuntimeError("kvtier-fuse did not mount in %d s" % START_SECONDS)
            time.sleep(0.1)
        self.fuse = p
        # Workers go through this descriptor, never through the path: while
        # the mount is down the path is a plain directory that would take the
        # writes. A dead mount's descriptor fails (ENOTCONN); old ones are
        # never closed, so that a worker never uses a reused number.
        self.mnt_fd = os.open(os.path.join(self.mnt, BUCKET), os.O_RDONLY | os.O_DIRECTORY)

    def unmount(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], stderr=subprocess.DEVNULL)

    def kill_gateway(self):
        with self.lock:
            p, self.gateway = self.gateway, None
        if p:
            p.kill()
            p.wait()
            return True
        return False

    def restart_gateway(self):
        with self.lock:
            if self.gateway is None:
                self.start_gateway()

    def kill_fuse(self):
        with self.lock:
            p, self.fuse = self.fuse, None
        if p:
            p.kill()
            p.wait()
            self.unmount()
            return True
        return False

    def restart_fuse(self):
        with self.lock:
            if self.fuse is None:
                self.unmount()
                self.start_fuse()

    def s3(self):
        return boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % self.gw_port,
                            aws_access_key_id=self.ak, aws_secret_access_key=self.sk,
                            region_name="us-east-1",
                            config=Config(signature_version="s3v4",
                                          s3={"addressing_style": "path"},
                                          retries={"max_attempts": 1},
                                          connect_timeout=3, read_timeout=30))

    def lookup(self, keys):
        body = "\n".join(keys).encode()
        url = "http://127.0.0.1:%d/%s?kvtier-lookup" % (self.gw_port, BUCKET)
        req = AWSRequest(method="POST", url=url, data=body,
                         headers={"x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
        SigV4Auth(boto3.Session(self.ak, self.sk).get_credentials(), "s3",
                  "us-east-1").add_auth(req)
        with urllib.request.urlopen(urllib.request.Request(
                req.url, data=body, headers=dict(req.headers), method="POST"),
                timeout=30) as r:
            return int(r.headers["x-kvtier-stored"])


# ---- load --------------------------------------------------------------------------

def pick_size(rnd):
    r = rnd.random()
    if r < 0.4:
        return rnd.randint(0, 8192)
    if r < 0.85:
        return rnd.randint(8192, 300 * 1024)
    return rnd.randint(300 * 1024, 1536 * 1024)


class Worker(threading.Thread):
    """Owns keys s<NN>/<kind>-<i>: only it writes them."""

    def __init__(self, kind, system, stats, keys, seed, deadline):
        super().__init__(daemon=True)
        self.kind = kind
        self.sys = system
        self.stats = stats
        self.keys = keys
        self.rnd = random.Random(seed)
        self.deadline = deadline
        self.versions = 0
        self.failed = None

    def verify(self, k, data, where):
        """Checks bytes read for k; they must verify and be allowed."""
        ver = check_payload(k.name, data)
        if ver is None:
            self.stats.add("wrong_bytes")
            log("WRONG BYTES: %s via %s (%d bytes, header %r); history %s" %
                (k.name, where, len(data), data[:80], k.history))
            return
        with k.lock:
            if ver not in k.allowed():
                self.stats.add("stale_reads")
                log("STALE: %s via %s: version %d, acked %s, in doubt %s; history %s" %
                    (k.name, where, ver, k.acked, sorted(x for x in k.maybe if x), k.history))

    def missing(self, k, where):
        with k.lock:
            if None not in k.allowed():
                # Evictable objects may miss; the final check decides about the rest.
                self.stats.add("misses")

    def next_version(self):
        self.versions += 1
        return self.versions

    def write(self, k, ver, data):
        raise NotImplementedError

    def read(self, k):
        raise NotImplementedError

    def delete(self, k):
        raise NotImplementedError

    def run(self):
        try:
            while time.time() < self.deadline:
                k = self.rnd.choice(self.keys)
                r = self.rnd.random()
                if r < 0.45:
                    ver = self.next_version()
                    data = make_payload(k.name, ver, pick_size(self.rnd))
                    with k.lock:
                        k.maybe.add(ver)
                    ok = self.write(k, ver, data)
                    self.stats.add("writes")
                    with k.lock:
                        k.note("put v%d %s" % (ver, ok))
                        if ok:
                            k.acked = ver
                            k.maybe = set()
                        elif ok is None:
                            k.late.add(ver)
                    if ok:
                        self.stats.add("acked_writes")
                elif r < 0.52:
                    with k.lock:
                        k.maybe.add(None)
                    ok = self.delete(k)
                    self.stats.add("deletes")
                    with k.lock:
                        k.note("delete %s" % ok)
                        if ok:
                            k.acked = None
                            k.maybe = set()
                        elif ok is None:
                            k.late.add(None)
                else:
                    self.read(k)
                    self.stats.add("reads")
                time.sleep(self.rnd.uniform(0, 0.05))
        except Exception as e:  # a bug in the driver must not pass silently
            self.failed = repr(e)
            log("worker %s died: %r" % (self.kind, e))


class S3Worker(Worker):
    def client(self):
        return self.sys.s3()

    def write(self, k, ver, data):
        try:
            self.client().put_object(Bucket=BUCKET, Key=k.name, Body=data)
            return True
        except Exception as e:
            if "timeout" in repr(e).lower():
                self.stats.add("timeouts_s3")
                return None     # the gateway may still be working on it
            code = s3_code(e)
            # The gateway answers a full hot tier with 503 SlowDown.
            if code in ("InsufficientStorage", "507") or "hot tier is full" in str(e):
                self.stats.add("enospc")
            self.stats.add("errors_s3")
            self.stats.sample("s3", repr(e)[:160])
            return False

    def read(self, k):
        try:
            if self.rnd.random() < 0.2:
                self.sys.lookup([k.name])
                self.stats.add("lookups")
                return
            body = self.client().get_object(Bucket=BUCKET, Key=k.name)["Body"].read()
            self.verify(k, body, "s3")
        except Exception as e:
            code = s3_code(e)
            if code in ("NoSuchKey", "404"):
                self.missing(k, "s3")
            else:
                self.stats.add("errors_s3")

    def delete(self, k):
        try:
            self.client().delete_object(Bucket=BUCKET, Key=k.name)
            return True
        except Exception as e:
            if "timeout" in repr(e).lower():
                self.stats.add("timeouts_s3")
                return None
            self.stats.add("errors_s3")
            return False


class FuseWorker(Worker):
    def write(self, k, ver, data):
        d = self.sys.mnt_fd
        try:
            try:
                os.mkdir(os.path.dirname(k.name), dir_fd=d)
            except FileExistsError:
                pass
            fd = os.open(k.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=d)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)    # publishes; its error is the write's
            return True
        except OSError as e:
            if e.errno == 28:
                self.stats.add("enospc")
            with k.lock:
                k.note("fuse write v%d: %r" % (ver, e))
            self.stats.add("errors_fuse")
            self.stats.sample("fuse", repr(e)[:160])
            return False

    def read(self, k):
        if self.rnd.random() < 0.1:
            self.move(k)
            return
        try:
            fd = os.open(k.name, os.O_RDONLY, dir_fd=self.sys.mnt_fd)
            try:
                chunks = []
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        break
                    chunks.append(b)
            finally:
                os.close(fd)
            self.verify(k, b"".join(chunks), "fuse")
        except FileNotFoundError:
            self.missing(k, "fuse")
        except OSError:
            self.stats.add("errors_fuse")

    def move(self, k):
        """Moves k to another session (user.kvtier.session), or back to the
        one its key names: its bytes stay; a cold k keeps its G4 copy, and
        the next migrator run of either session rewrites both manifests."""
        to = self.rnd.choice(self.sys.sessions + [None])
        try:
            fd = os.open(k.name, os.O_RDONLY, dir_fd=self.sys.mnt_fd)
            try:
                if to is None:
                    try:
                        os.removexattr(fd, "user.kvtier.session")
                    except OSError as e:
                        if e.errno != 61:   # ENODATA: never set
                            raise
                else:
                    os.setxattr(fd, "user.kvtier.session", to.encode())
            finally:
                os.close(fd)
            self.stats.add("session_moves")
            with k.lock:
                k.note("session %s" % (to or "of its key"))
        except FileNotFoundError:
            pass
        except OSError as e:
            self.stats.add("errors_fuse")
            self.stats.sample("fuse", "move: " + repr(e)[:150])

    def delete(self, k):
        try:
            os.unlink(k.name, dir_fd=self.sys.mnt_fd)
            return True
        except FileNotFoundError:
            # Absent: deleted before, or evicted; either way absent now.
            return True
        except OSError:
            self.stats.add("errors_fuse")
            return False


class CliWorker(Worker):
    def write(self, k, ver, data):
        argv = ["kvtier", "put"] + (["--pin"] if k.pinned else []) + [BUCKET, k.name, "-"]
        rc, _, err = self.sys.cli(*argv, stdin=data)
        if rc == 0:
            return True
        if b"hot tier full" in err or b"No space left" in err:
            self.stats.add("enospc")
        self.stats.add("errors_cli")
        self.stats.sample("cli", "rc %d: %s" % (rc, err.decode(errors="replace").strip()[-160:]))
        return False

    def read(self, k):
        rc, out, err = self.sys.cli("kvtier", "get", BUCKET, k.name, "-")
        if rc == 0:
            self.verify(k, out, "cli")
        elif b"No such" in err or b"not found" in err.lower():
            self.missing(k, "cli")
        else:
            self.stats.add("errors_cli")

    def delete(self, k):
        rc, _, err = self.sys.cli("kvtier", "rm", BUCKET, k.name)
        if rc == 0:
            return True
        self.stats.add("errors_cli")
        return False


class Filler(CliWorker):
    """Fills the hot tier with pinned objects until ENOSPC, then frees them."""

    def run(self):
        try:
            while time.time() < self.deadline:
                time.sleep(self.rnd.uniform(3, 8))
                written = []
                for k in self.keys:
                    if time.time() >= self.deadline:
                        break
                    ver = self.next_version()
                    with k.lock:
                        k.maybe.add(ver)
                    ok = self.write(k, ver, make_payload(k.name, ver, 1536 * 1024))
                    self.stats.add("writes")
                    if ok:
                        with k.lock:
                            k.acked = ver
                            k.maybe = set()
                        self.stats.add("acked_writes")
                        written.append(k)
                    elif self.stats.get("enospc"):
                        break
                time.sleep(self.rnd.uniform(0.5, 2))
                for k in written:
                    with k.lock:
                        k.maybe.add(None)
                    if self.delete(k):
                        with k.lock:
                            k.acked = None
                            k.maybe = set()
        except Exception as e:
            self.failed = repr(e)
            log("filler died: %r" % (e,))


def migrator(system, stats, sessions, seed, deadline):
    """Demotes or recalls a random session now and then."""
    rnd = random.Random(seed)
    while time.time() < deadline:
        time.sleep(rnd.uniform(0.5, 3))
        s = rnd.choice(sessions)
        if rnd.random() < 0.6:
            rc, _, _ = system.cli("kvtier-migrate", "--idle", "0s", "--session",
                                  "%s/%s" % (BUCKET, s), "-q", timeout=120)
            stats.add("demotions")
        else:
            rc, _, _ = system.cli("kvtier-migrate", "--recall", "%s/%s" % (BUCKET, s), "-q",
                                  timeout=120)
            stats.add("recalls")
        if rc != 0:
            stats.add("migrate_failures")


def chaos(system, proxy, stats, seed, deadline, spare=()):
    rnd = random.Random(seed)
    # Each kind of event once first, in random order, so that a short run
    # (and a slow one: under ASan a restart takes seconds) has them all;
    # then at random. r picks the kind: gateway, fuse, other process, faults.
    first = [0.1, 0.3, 0.5, 0.8]
    rnd.shuffle(first)
    while time.time() < deadline:
        time.sleep(rnd.uniform(0.5, 2.5))
        r = first.pop() if first else rnd.random()
        if (r < 0.25 and "gateway" in spare) or (0.25 <= r < 0.45 and "fuse" in spare):
            continue
        if r < 0.25:
            if system.kill_gateway():
                stats.add("kills_gateway")
            time.sleep(rnd.uniform(0.1, 1))
            system.restart_gateway()
        elif r < 0.45:
            if system.kill_fuse():
                stats.add("kills_fuse")
            time.sleep(rnd.uniform(0.1, 1))
            system.restart_fuse()
        elif r < 0.65:
            with system.lock:
                victims = list(system.running)
            if victims:
                p = rnd.choice(victims)
                name = os.path.basename(p.args[0])
                try:
                    p.kill()
                    stats.add("kills_" + name.replace("-", "_"))
                except OSError:
                    pass
        else:
            proxy.mode = rnd.choice(["500", "503", "drop", "stall"])
            stats.add("fault_windows")
            time.sleep(rnd.uniform(1, 4))
            proxy.mode = None


# ---- the end ---------------------------------------------------------------------

def read_partner_object(s3, key):
    """The bytes s3rver serves for key. s3rver writes an object in place and
    declares the length it recorded at the last whole PUT, so an object torn
    by a cut PUT can end early: tried three times, then what arrived."""
    chunks = []
    for _ in range(3):
        chunks = []
        try:
            for chunk in s3.get_object(Bucket=G4_BUCKET, Key=key)["Body"].iter_chunks():
                chunks.append(chunk)
            return b"".join(chunks)
        except ResponseStreamingError:
            time.sleep(0.5)
    data = b"".join(chunks)
    log("G4 object %s ends early (%d bytes served)" % (key, len(data)))
    return data


def g4_objects(system):
    """Reads the partner bucket past the proxy. Returns the (key, version) of
    every payload copy, the (key, version) the sessions' manifests list
    (what the store holds verified in G4: reclaim turns those cold, never
    drops them), the number of copies that do not verify (or are gone)
    though a manifest lists them, and the number of failed uploads the
    partner kept.

    A store names each version it uploads .kvtier/stores/STORE/BUCKET/KEY~VID
    (.kvtier/stores/STORE/.versions/BUCKET/VID when the partner cannot hold
    that name), and before that BUCKET/KEY: so every object under the url but
    the manifests is a copy, and the payload's header says whose. A manifest
    entry names its copy (g4_key, under the url; none: BUCKET/KEY). This
    read only chaos/BUCKET/ once, which the per-store names left empty: the
    damage check then saw no copy at all and passed."""
    s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % system.s3_port,
                      aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                      region_name="us-east-1",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    copies = {}     # G4 name under the url -> (key, version), or None: does not verify
    sizes = {}
    root = G4_PREFIX + "/"
    mprefix = ".kvtier/manifests/%s/" % BUCKET
    manifests = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=G4_BUCKET, Prefix=root):
        for o in page.get("Contents", []):
            name = o["Key"][len(root):]
            if name.endswith("/") or re.search(r"/~[0-9a-f]{16}$", name):
                continue    # a directory the mount made ("s01/"), not a payload
            if name.startswith(".kvtier/manifests/"):
                if name.startswith(mprefix):
                    manifests.append(o["Key"])
                continue
            data = read_partner_object(s3, o["Key"])
            sizes[name] = len(data)
            try:
                key = data[:HDR].split(b" ")[1].decode()
            except (IndexError, UnicodeDecodeError):
                key = None
            ver = check_payload(key, data) if key else None
            copies[name] = (key, ver) if ver is not None else None
    listed, in_manifest = set(), {}
    for mkey in manifests:
        body = read_partner_object(s3, mkey)
        try:
            m = json.loads(body)
        except ValueError:
            # s3rver writes an object in place: a PUT cut by a kill or a
            # fault can leave it empty (S3 itself is atomic). Manifests
            # only annotate LOST lines here; kvtier's import refuses them.
            log("G4 manifest %s unreadable (%d bytes)" % (mkey, len(body)))
            continue
        for e in m["objects"]:
            if e["key"].endswith("/"):
                continue    # a directory, which holds no payload
            name = e.get("g4_key") or "%s/%s" % (BUCKET, e["key"])
            in_manifest[name] = (e["key"], e.get("size"), mkey)
            c = copies.get(name)
            if c and c[0] == e["key"]:
                listed.add(c)
    # A copy that does not verify is damage kvtier relies on only if a
    # manifest lists it with that size (demotion writes the manifest after
    # verifying every upload), and so is one a manifest lists that is gone.
    # s3rver stores a PUT cut by a kill or a dropped connection as a short
    # object with a 200 (it does not check Content-Length); S3 would keep
    # nothing. Those failed uploads, never recorded, are counted apart; every
    # key is also read back through kvtier below.
    bad = torn = 0
    for name, c in sorted(copies.items()):
        if c is not None:
            continue
        if name in in_manifest and in_manifest[name][1] == sizes[name]:
            bad += 1
            log("G4 DAMAGED: %s (%d bytes), listed in %s" % (name, sizes[name],
                                                            in_manifest[name][2]))
        else:
            torn += 1
            log("G4 failed upload left by the partner: %s (%d bytes)" % (name, sizes[name]))
    for name, (key, size, mkey) in sorted(in_manifest.items()):
        if name not in copies:
            bad += 1
            log("G4 MISSING: %s (%s, %s bytes), listed in %s" % (name, key, size, mkey))
        elif copies[name] and copies[name][0] != key:
            bad += 1
            log("G4 DAMAGED: %s holds %s, listed in %s as %s" % (name, copies[name][0],
                                                                 mkey, key))
    return set(c for c in copies.values() if c), listed, bad, torn


def final_check(system, stats, keys):
    s3 = system.s3()
    in_g4, listed, g4_bad, g4_torn = g4_objects(system)
    stats.add("g4_torn_by_partner", g4_torn)
    stats.add("g4_listed", len(listed))
    stats.add("g4_objects", len(in_g4))
    stats.add("g4_damaged", g4_bad)
    missing_evictable = 0
    for k in keys:
        data, err = None, None
        for attempt in range(5):
            try:
                data = s3.get_object(Bucket=BUCKET, Key=k.name)["Body"].read()
                err = None
                break
            except Exception as e:
                err = s3_code(e) or repr(e)
                if err in ("NoSuchKey", "404"):
                    break
                time.sleep(1)
        allowed = k.allowed()
        if data is not None:
            ver = check_payload(k.name, data)
            if ver is None:
                stats.add("wrong_bytes")
                log("WRONG BYTES at the end: %s; history %s" % (k.name, k.history))
            elif ver not in allowed:
                stats.add("stale_reads")
                log("STALE at the end: %s version %d, acked %s; history %s" %
                    (k.name, ver, k.acked, k.history))
            else:
                stats.add("verified_at_end")
        elif err in ("NoSuchKey", "404"):
            # Missing is allowed if the key may be deleted, or if a version it may
            # hold is plain cache (not pinned, never in G4) that reclaim may drop.
            if None in allowed:
                continue
            if k.cache:
                missing_evictable += 1
            else:
                stats.add("lost_durable")
                in_manifest = sorted(v for v in allowed if (k.name, v) in listed)
                log("LOST: %s: acked %s, in doubt %s, listed in a manifest %s, in G4 %s; "
                    "history %s" % (k.name, k.acked, sorted(v for v in k.maybe if v),
                                    in_manifest, sorted(v for (n, v) in in_g4 if n == k.name),
                                    k.history))
        else:
            stats.add("unreadable_at_end")
            log("UNREADABLE at the end: %s: %s" % (k.name, err))
    stats.add("evicted_allowed", missing_evictable)
    return missing_evictable


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--builddir", default=os.environ.get("top_builddir", "."))
    ap.add_argument("--s3rver", required=True)
    ap.add_argument("--capacity", default="24M")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--spare", default="",
                    help="comma-separated daemons never SIGKILLed: gateway, fuse")
    args = ap.parse_args()
    random.seed(args.seed)
    tmp = tempfile.mkdtemp(prefix="kvtier-chaos.", dir=os.environ.get("TMPDIR", "/tmp"))
    stats = Stats()
    system = System(args, tmp, stats)
    proxy = None
    ok = False
    t0 = time.time()
    log("seed %d, %g s, scratch %s" % (args.seed, args.seconds, tmp))
    try:
        system.start_s3rver()
        proxy = FaultProxy(system.s3_port, stats)
        proxy.start()
        system.write_config(proxy.port)
        for argv in (["kvtier", "init"], ["kvtier", "mb", BUCKET]):
            rc, out, err = system.cli(*argv, kill_ok=False)
            if rc != 0:
                raise RuntimeError("%s: %s" % (" ".join(argv), err.decode()))
        system.start_gateway()
        system.start_fuse()

        nsess = 6
        sessions = ["s%02d" % i for i in range(nsess)]
        system.sessions = sessions
        deadline = time.time() + args.seconds
        workers, keys = [], []
        for kind, cls, n in (("s3a", S3Worker, 16), ("s3b", S3Worker, 16),
                             ("fuse", FuseWorker, 16), ("cli", CliWorker, 12)):
            ks = [Key("%s/%s-%d" % (sessions[i % nsess], kind, i), kind == "cli" and i % 2 == 0)
                  for i in range(n)]
            if kind.startswith("s3"):
                # Plain cache: keys that are their own session.
                ks += [Key("cache-%s-%d" % (kind, i), False) for i in range(6)]
                # A last component too long for KEY~VID at the partner
                # (over 238 bytes): the copy goes under the version's name.
                ks += [Key("%s/%s-%d-%s" % (sessions[i], kind, i, "L" * 240), False)
                       for i in range(2)]
            keys += ks
            workers.append(cls(kind, system, stats, ks, args.seed ^ hash(kind), deadline))
        fill = [Key("fill/f-%d" % i, True) for i in range(40)]
        keys += fill
        workers.append(Filler("fill", system, stats, fill, args.seed + 7, deadline))
        threads = workers + [
            threading.Thread(target=migrator, args=(system, stats, sessions, args.seed + 1,
                                                    deadline), daemon=True),
            threading.Thread(target=chaos, args=(system, proxy, stats, args.seed + 2, deadline,
                                                 tuple(filter(None, args.spare.split(",")))),
                             daemon=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        driver_errors = [w.failed for w in workers if w.failed]

        log("load over; partner healthy, everything restarted, final check")
        proxy.mode = None
        system.restart_gateway()
        system.restart_fuse()
        evictable = final_check(system, stats, keys)
        system.kill_fuse()
        system.gateway.terminate()
        system.gateway.wait()
        rc, out, err = system.cli("kvtier", "stat", kill_ok=False)
        m = re.search(rb"evicted[ _a-z]*:\s*(\d+)", out)
        evicted = int(m.group(1)) if m else 0
        rc, out, err = system.cli("kvtier", "fsck", kill_ok=False, timeout=600)
        fsck_ok = rc == 0
        if not fsck_ok:
            log("fsck exited %d: %s %s" % (rc, out.decode()[-2000:], err.decode()[-2000:]))

        c = stats.c
        kills = sum(v for n, v in c.items() if n.startswith("kills_"))
        faults = sum(v for n, v in c.items() if n.startswith("faults_"))
        report = {
            "seconds": round(time.time() - t0),
            "seed": args.seed,
            "operations": c.get("writes", 0) + c.get("reads", 0) + c.get("deletes", 0) +
                          c.get("demotions", 0) + c.get("recalls", 0),
            "writes": c.get("writes", 0), "acked_writes": c.get("acked_writes", 0),
            "reads": c.get("reads", 0), "lookups": c.get("lookups", 0),
            "deletes": c.get("deletes", 0),
            "demotions": c.get("demotions", 0), "recalls": c.get("recalls", 0),
            "session_moves": c.get("session_moves", 0),
            "migrate_failures": c.get("migrate_failures", 0),
            "kills": kills,
            "kills_by_process": {n[6:]: v for n, v in c.items() if n.startswith("kills_")},
            "fault_windows": c.get("fault_windows", 0),
            "faults": faults,
            "faults_by_kind": {n[7:]: v for n, v in c.items() if n.startswith("faults_")},
            "enospc": c.get("enospc", 0),
            "client_errors": {n: v for n, v in c.items() if n.startswith("errors_")},
            "misses_during_load": c.get("misses", 0),
            "g4_objects": c.get("g4_objects", 0),
            "g4_in_manifests": c.get("g4_listed", 0),
            "verified_at_end": c.get("verified_at_end", 0),
            "evicted_allowed": evictable, "evicted_objects_counter": evicted,
            "wrong_bytes": c.get("wrong_bytes", 0),
            "stale_reads": c.get("stale_reads", 0),
            "lost_durable_objects": c.get("lost_durable", 0),
            "client_timeouts": c.get("timeouts_s3", 0),
            "unreadable_at_end": c.get("unreadable_at_end", 0),
            "g4_damaged": c.get("g4_damaged", 0),
            "fsck_clean": fsck_ok,
            "error_samples": stats.samples,
        }
        print(json.dumps(report, indent=1, sort_keys=False), flush=True)
        problems = []
        for name in ("wrong_bytes", "stale_reads", "lost_durable_objects", "g4_damaged",
                     "unreadable_at_end"):
            if report[name]:
                problems.append("%s = %d" % (name, report[name]))
        # The G4 check reads what it knows of the partner's layout: one that
        # finds no copy after demotions ran reads the wrong place (it read
        # BUCKET/KEY for a release after copies became per store and
        # version, and passed on nothing).
        if report["demotions"] > report["migrate_failures"] and not report["g4_objects"]:
            problems.append("G4 holds no copy after %d demotions: the G4 check read nothing"
                            % report["demotions"])
        if evictable > evicted:
            problems.append("%d objects missing but only %d evicted" % (evictable, evicted))
        if not fsck_ok:
            problems.append("fsck is not clean")
        if driver_errors:
            problems.append("driver errors: %s" % driver_errors)
        # Fault windows, not faults: a window in which nothing talked to the
        # partner injects none (seed 202 of a 45 s run: one window, 0 faults).
        if kills == 0 or c.get("fault_windows", 0) == 0:
            problems.append("no chaos happened (kills %d, fault windows %d)"
                            % (kills, c.get("fault_windows", 0)))
        if problems:
            log("FAIL: " + "; ".join(problems))
        else:
            log("PASS")
            ok = True
    finally:
        if proxy:
            proxy.stopping = True
            proxy.sock.close()
        system.kill_gateway()
        system.kill_fuse()
        with system.lock:
            for p in list(system.running):
                p.kill()
        if system.s3rver:
            system.s3rver.kill()
            system.s3rver.wait()
        if args.keep or not ok:
            log("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
