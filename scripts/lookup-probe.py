#!/usr/bin/env python3
"""scripts/lookup-probe.py - latency of ?kvtier-lookup beside PUT streams.

    lookup-probe.py PORT ACCESS_KEY SECRET_KEY BUCKET [LOOKUPS [WRITERS [GAP_MS]]]

Against a kvtier-gateway on 127.0.0.1:PORT: WRITERS processes (default 1)
PUT 64 KiB objects into BUCKET in a loop, each on its own connection, while
this process sends LOOKUPS (default 1000) lookups of 24 keys (k0 to k23),
one every GAP_MS ms (default 5; 0: back to back) on one keep-alive
connection, and prints their latency from the send: p50, p90, p99 and max,
in ms. Writers are processes, not threads, so that Python's lock never
delays the timed lookups. Then the same for GET /health, a request that
touches neither authentication nor the catalog: the floor under the
lookup's latency at that GAP_MS on this machine (waking an idle CPU).

The lookups answer whatever BUCKET holds; put k0..k23 first for hits:
    for i in $(seq 0 23); do head -c 65536 /dev/urandom | kvtier put BUCKET k$i -; done
"""

import hashlib
import http.client
import multiprocessing
import os
import sys
import time

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def signed(port, cred, method, path, body):
    req = AWSRequest(method=method, url="http://127.0.0.1:%d%s" % (port, path), data=body,
                     headers={"x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    SigV4Auth(cred, "s3", "us-east-1").add_auth(req)
    return dict(req.headers)


def writer(port, cred, bucket, i):
    c = http.client.HTTPConnection("127.0.0.1", port)
    body = os.urandom(65536)
    for j in range(1 << 62):
        path = "/%s/w%d-%d" % (bucket, i, j % 500)
        c.request("PUT", path, body, signed(port, cred, "PUT", path, body))
        c.getresponse().read()


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    port, bucket = int(sys.argv[1]), sys.argv[4]
    cred = Credentials(sys.argv[2], sys.argv[3])
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    nwriters = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    writers = [multiprocessing.Process(target=writer, args=(port, cred, bucket, i), daemon=True)
               for i in range(nwriters)]
    for w in writers:
        w.start()
    c = http.client.HTTPConnection("127.0.0.1", port)
    path = "/%s?kvtier-lookup" % bucket
    body = "\n".join("k%d" % i for i in range(24)).encode()
    gap = float(sys.argv[7]) / 1e3 if len(sys.argv) > 7 else 0.005
    for what, method, p, b in (("lookup", "POST", path, body), ("health", "GET", "/health", b"")):
        lat = []
        for _ in range(n):
            headers = signed(port, cred, method, p, b) if what == "lookup" else {}
            t0 = time.perf_counter()
            c.request(method, p, b, headers)
            r = c.getresponse()
            r.read()
            lat.append(time.perf_counter() - t0)
            if r.status != 200:
                sys.exit("%s: HTTP %d" % (what, r.status))
            time.sleep(gap)
        lat.sort()
        q = lambda f: lat[min(len(lat) - 1, int(len(lat) * f))] * 1e3
        print("writers %d, gap %g ms: %s p50 %.3f ms p90 %.3f p99 %.3f max %.3f" %
              (nwriters, gap * 1e3, what, q(0.5), q(0.9), q(0.99), lat[-1] * 1e3))
    for w in writers:
        w.terminate()


if __name__ == "__main__":
    main()
