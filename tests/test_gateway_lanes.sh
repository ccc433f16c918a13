#!/bin/sh
# tests/test_gateway_lanes.sh - the gateway's worker lanes (gateway/gw_work.c)
# under more load than they have room for, with one polling thread:
# - more large uploads at once than stream slots (16): the rest wait with
#   their connection suspended, and every object comes back byte-exact;
# - large GETs (pieces read on the read lane) and ranged GETs at once;
# - batch lookups answered while those uploads are in flight;
# - a lookup answered at once while a PUT on the same polling thread waits
#   for the catalog's write lock (held by another process): it used to wait
#   for that PUT, however long;
# - SIGTERM while uploads stream slowly and others wait for a slot: the
#   gateway drains its lanes, resumes every connection and exits 0 (it must
#   not stop libmicrohttpd with a connection suspended), leaving no partial
#   object;
# - at its open-file limit, idle clients past what the store leaves wait in
#   the backlog, and GETs of cold objects are still served;
# - clients that trickle their request heads are closed after --timeout;
# - a slow GET of a large object while PUTs replace its key (and reclaim
#   frees the old version's segments) sends the old object whole or ends
#   the connection early, never bytes of a newer version.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP
command -v curl >/dev/null || skip "no curl"
curl --help all 2>/dev/null | grep -q -- --aws-sigv4 || skip "curl without --aws-sigv4"

s3()
{
	curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$GW_ACCESS:$GW_SECRET" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

gw_start lanes 1G 8M --threads 1
E=$GW_ENDPOINT
s3 -f -X PUT "$E/lanes" -o /dev/null

step "a lookup does not wait for a PUT stuck on the catalog's write lock"
command -v python3 >/dev/null || skip "no python3"
head -c 4096 /dev/urandom >"$T/small"
s3 -f -X PUT -T "$T/small" "$E/lanes/small0" -o /dev/null
printf 'small0\n' >"$T/key0"
python3 - "$T/lanes/catalog.db" "$T/locked" <<'EOP' &
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN IMMEDIATE")
open(sys.argv[2], "w").close()
time.sleep(6)
db.execute("COMMIT")
EOP
locker=$!
wait_for_file "$T/locked" "the catalog's write lock was not taken"
s3 -f -X PUT -T "$T/small" -w '%{time_total}\n' "$E/lanes/small1" -o /dev/null >"$T/put_t" &
put=$!
sleep 1
s3 -f -X POST --data-binary "@$T/key0" -w '%{time_total}\n' "$E/lanes?kvtier-lookup" \
	-o "$T/lookup" >"$T/look_t" || fail "the lookup failed"
grep -q "<Stored>1</Stored>" "$T/lookup" || fail "lookup answer: $(cat "$T/lookup")"
wait "$put" || fail "the PUT failed once the lock was released"
wait "$locker" || fail "the lock holder failed"
echo "PUT $(cat "$T/put_t") s, lookup $(cat "$T/look_t") s"
# The PUT must have waited (else this step proves nothing); the lookup not.
awk '{ exit !($1 > 3.0) }' "$T/put_t" || fail "the PUT did not wait for the lock"
awk '{ exit !($1 < 2.0) }' "$T/look_t" || fail "the lookup waited $(cat "$T/look_t") s behind the PUT"

step "24 uploads of 3 MiB at once (16 stream slots), lookups meanwhile"
head -c 3145728 /dev/urandom >"$T/big"
n=24
pids=""
i=0
while [ "$i" -lt "$n" ]; do
	# each its own bytes: the key's number in front
	{ printf '%08d' "$i"; cat "$T/big"; } >"$T/up$i"
	s3 -f -X PUT -T "$T/up$i" "$E/lanes/big$i" -o /dev/null &
	pids="$pids $!"
	i=$((i + 1))
done
printf 'big0\nbig1\nnot-there\n' >"$T/keys"
k=0
while [ "$k" -lt 20 ]; do
	s3 -f -X POST --data-binary "@$T/keys" "$E/lanes?kvtier-lookup" -o "$T/lookup" ||
		fail "a lookup failed while uploads streamed"
	grep -q "<Count>3</Count>" "$T/lookup" || fail "lookup answer: $(cat "$T/lookup")"
	k=$((k + 1))
done
for p in $pids; do
	wait "$p" || fail "an upload failed"
done

step "every object back byte-exact, whole and ranged, from several clients at once"
pids=""
i=0
while [ "$i" -lt "$n" ]; do
	s3 -f "$E/lanes/big$i" -o "$T/down$i" &
	pids="$pids $!"
	i=$((i + 1))
done
s3 -f -H "Range: bytes=1048000-2097999" "$E/lanes/big3" -o "$T/range3"
for p in $pids; do
	wait "$p" || fail "a GET failed"
done
i=0
while [ "$i" -lt "$n" ]; do
	cmp -s "$T/up$i" "$T/down$i" || fail "big$i came back different"
	i=$((i + 1))
done
tail -c +1048001 "$T/up3" | head -c 1050000 >"$T/want3"
cmp -s "$T/want3" "$T/range3" || fail "the range of big3 came back different"
s3 -f -X POST --data-binary "@$T/keys" "$E/lanes?kvtier-lookup" -o "$T/lookup"
grep -q "<Stored>2</Stored>" "$T/lookup" || fail "lookup after the uploads: $(cat "$T/lookup")"

step "SIGTERM with 20 slow uploads streaming or waiting for a slot"
pids=""
i=0
while [ "$i" -lt 20 ]; do
	s3 -X PUT --limit-rate 400k -T "$T/big" "$E/lanes/slow$i" -o /dev/null 2>/dev/null &
	pids="$pids $!"
	i=$((i + 1))
done
sleep 3
gw_stop "$GW_PID"
for p in $pids; do
	wait "$p" || :
done
grep -q "shutting down" "$GW_LOG" || fail "no shutdown line in the log"

step "after a restart: no partial object of the slow uploads"
: >"$T/re.err"
"$GATEWAY" -c "$T/lanes.conf" --listen 127.0.0.1:0 --credentials "$GW_CREDS" \
	--access-log off 2>>"$T/re.err" &
GW_PID=$!
gw_pids="$gw_pids $GW_PID"
wait_until "$GW_PID" "$T/re.err" 60 "the restarted gateway" gateway_serves "$T/re.err"
E=http://127.0.0.1:$(gateway_port "$T/re.err")
i=0
while [ "$i" -lt 20 ]; do
	code=$(s3 -o "$T/slow" -w '%{http_code}' "$E/lanes/slow$i")
	case $code in
	404) ;;
	200) cmp -s "$T/big" "$T/slow" || fail "slow$i is there with other bytes" ;;
	*) fail "GET slow$i after the restart: $code" ;;
	esac
	i=$((i + 1))
done
s3 -f "$E/lanes/big5" -o "$T/down5"
cmp -s "$T/up5" "$T/down5" || fail "big5 came back different after the restart"
gw_stop "$GW_PID"

step "GETs of cold objects waiting on a silent partner hold up no PUT"
# The objects go to a file:// G4; the gateway then reads through an S3
# partner that accepts connections and never answers. On the write lane,
# two such recalls took both its workers and a PUT of 4 bytes waited 30 s.
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
open(sys.argv[1], "w").write("%d\n" % s.getsockname()[1])
held, end = [], time.time() + 120
s.settimeout(1)
while time.time() < end:
    try:
        held.append(s.accept()[0])
    except socket.timeout:
        pass' "$T/silent.port" &
silent_pid=$!
gw_pids="$gw_pids $silent_pid"	# killed on the way out, however this ends
poll 600 test -s "$T/silent.port" || fail "the silent partner did not start"
cat >"$T/cold-file.conf" <<EOC
[store]
dir = $T/cold
capacity = 64M
segment_size = 4M
[g4]
url = file://$T/g4
EOC
(umask 077 && printf 'access_key = AK\nsecret_key = SK\n' >"$T/g4.keys")
sed "s|^url = .*|url = s3://g4bucket/pfx\nendpoint = http://127.0.0.1:$(cat "$T/silent.port")\ncredentials = $T/g4.keys|" \
	"$T/cold-file.conf" >"$T/cold-s3.conf"
"$top_builddir/kvtier" -c "$T/cold-file.conf" -q init
"$top_builddir/kvtier" -c "$T/cold-file.conf" mb lanes
printf 'cold bytes' >"$T/c"
for i in 0 1 2 3; do
	"$top_builddir/kvtier" -c "$T/cold-file.conf" put lanes "cold/blk$i" "$T/c"
done
"$top_builddir/kvtier-migrate" -c "$T/cold-file.conf" --idle 0s 2>/dev/null
"$GATEWAY" -c "$T/cold-s3.conf" --listen 127.0.0.1:0 --credentials "$GW_CREDS" --threads 1 \
	--access-log off 2>"$T/cold.err" &
cold_gw=$!
gw_pids="$gw_pids $cold_gw"
wait_until "$cold_gw" "$T/cold.err" 60 "the gateway over a silent partner" gateway_serves "$T/cold.err"
E=http://127.0.0.1:$(gateway_port "$T/cold.err")
for i in 0 1 2 3; do
	s3 --max-time 3 "$E/lanes/cold/blk$i" -o /dev/null 2>/dev/null &
done
sleep 1
s3 -f --max-time 10 -X PUT -T "$T/small" "$E/lanes/hot" -o /dev/null ||
	fail "a PUT waited behind recalls from a silent partner"
step "a partner that is gone: a cold GET says so, 503 with Retry-After"
kill -KILL "$silent_pid"
wait "$silent_pid" 2>/dev/null || :
code=$(s3 --max-time 60 -D "$T/dead.h" -w '%{http_code}' "$E/lanes/cold/blk1" -o "$T/dead") ||
	fail "a cold GET against a partner that is gone did not answer"
[ "$code" = 503 ] && grep -qi '^retry-after:' "$T/dead.h" &&
	grep -q "partner store cannot be reached" "$T/dead" ||
	fail "a cold GET against a partner that is gone answered $code: $(cat "$T/dead")"
kill -KILL "$cold_gw"
wait "$cold_gw" 2>/dev/null || :

step "clients that trickle their request heads are closed after --timeout"
# libmicrohttpd's --timeout sees only silence: clients sending a header line
# a second held every connection, and a new client waited as long as they
# went on (43 s for 40 s of it). A head is now due within --timeout of the
# accept, or of the end of the previous request on a kept connection.
gw_start slowhead 16M 4M --threads 1 --timeout 3 --max-connections 4
timeout 60 python3 - "$GW_PORT" <<'EOP' || fail "slow request heads: $(tail -n 5 "$GW_LOG")"
import socket, sys, threading, time
port = int(sys.argv[1])
def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=10)
def answer(s):
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
    return got
# One kept connection: a whole request first, then a trickled head.
kept = conn()
kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
if not answer(kept).startswith(b"HTTP/1.1 "):
    sys.exit("no answer on the kept connection")
tricklers = [kept] + [conn() for _ in range(5)]
for s in tricklers:
    s.sendall(b"GET /lanes/k HTTP/1.1\r\nHost: x\r\n")
time.sleep(0.5)
res = {}
def newclient():
    t = time.time()
    try:
        s = conn()
        s.settimeout(30)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        res["r"] = answer(s)[:12]
    except OSError as e:
        res["r"] = "error %s" % e
    res["t"] = time.time() - t
th = threading.Thread(target=newclient)
th.start()
t0 = time.time()
while time.time() - t0 < 20 and th.is_alive():
    for s in tricklers:
        try:
            s.send(b"X-A: b\r\n")
        except OSError:
            pass
    time.sleep(1)
th.join(30)
print("    new client: %s after %.1f s" % (res.get("r"), res.get("t", -1)))
if not str(res.get("r")).startswith("b'HTTP/1.1 ") or res["t"] > 7:
    sys.exit("a new client waited %.1f s behind tricklers (--timeout 3): %s" %
             (res.get("t", -1), res.get("r")))
# Every trickler's connection is closed, the last two let in after the others.
deadline = time.time() + 15
for i, s in enumerate(tricklers):
    while True:
        s.settimeout(max(0.1, deadline - time.time()))
        try:
            if not s.recv(4096):
                break
        except ConnectionResetError:
            break
        except socket.timeout:
            sys.exit("trickler %d still connected" % i)
EOP
grep -q "client 127.0.0.1: no complete request head in 3 s: closed" "$GW_LOG" ||
	fail "no word of the slow heads cut: $(tail -n 5 "$GW_LOG")"
gw_stop "$GW_PID"

step "a slow GET of 32 MiB while 10 PUTs replace the key: the old object whole, or cut"
# The PUTs (320 MiB in a 256M store) make reclaim free the old version's
# segments while the GET sends it: the GET must send it whole (a mapped
# body pins its segments until sent) or end the connection early, never
# with bytes of a newer version. KV readers read blocks that other workers
# rewrite under the same content-addressed name.
gw_start getput 256M 16M
s3 -f -X PUT "$GW_ENDPOINT/getput" -o /dev/null
for v in 0 1 2 3 4 5 6 7 8 9 10; do
	python3 -c "import sys; sys.stdout.buffer.write(b'%02d' % $v * 16777216)" >"$T/gp$v"
done
s3 -f -X PUT -T "$T/gp0" "$GW_ENDPOINT/getput/k" -o /dev/null
rm -f "$T/gp.got"
s3 --limit-rate 8M -o "$T/gp.got" "$GW_ENDPOINT/getput/k" 2>"$T/gp.err" &
gp_get=$!
poll 300 test -s "$T/gp.got" || fail "the slow GET sent nothing in 30 s: $(cat "$T/gp.err")"
for v in 1 2 3 4 5 6 7 8 9 10; do
	s3 -f -X PUT -T "$T/gp$v" "$GW_ENDPOINT/getput/k" -o /dev/null
done
gp_rc=0
wait "$gp_get" || gp_rc=$?
gp_n=$(stat -c %s "$T/gp.got")
if [ "$gp_rc" -eq 0 ]; then
	cmp -s "$T/gp.got" "$T/gp0" || fail "the GET ended well with other bytes than the old object's"
else
	cmp -s -n "$gp_n" "$T/gp.got" "$T/gp0" ||
		fail "the GET, cut after $gp_n bytes (curl $gp_rc), sent other bytes than the old object's"
	echo "    the GET was cut after $gp_n bytes: $(cat "$T/gp.err")"
fi
s3 -f -o "$T/gp.now" "$GW_ENDPOINT/getput/k" && cmp -s "$T/gp.now" "$T/gp10" ||
	fail "a GET after the PUTs is not the last one"
rm -f "$T"/gp*
gw_stop "$GW_PID"

step "at its open-file limit, idle clients past it wait; cold GETs are served"
# ulimit -n 300 with 4 segments and one polling thread leaves 23
# connections beside the store's 264 descriptors and the thread's 13 (its
# eventfd, and the catalog connections of it and its 5 workers: 36 took
# them). Taken by 400 idle clients, they left none for recalls:
# every cold GET answered 503 (g4.lock, the manifest: EMFILE).
if python3 -c 'import boto3' 2>/dev/null; then
	sed 's|^capacity = .*|capacity = 16M|; s|^dir = .*|dir = '"$T"'/nofile|' \
		"$T/cold-file.conf" >"$T/nofile.conf"
	"$top_builddir/kvtier" -c "$T/nofile.conf" -q init
	"$top_builddir/kvtier" -c "$T/nofile.conf" mb lanes
	head -c 262144 /dev/urandom >"$T/nf"
	for i in 0 1 2 3 4 5 6 7 8 9; do
		"$top_builddir/kvtier" -c "$T/nofile.conf" put lanes "nf$i/blk" "$T/nf"
	done
	"$top_builddir/kvtier-migrate" -c "$T/nofile.conf" --idle 0s 2>/dev/null
	(ulimit -n 300 && exec "$GATEWAY" -c "$T/nofile.conf" --listen 127.0.0.1:0 \
		--threads 1 --credentials "$GW_CREDS" --access-log off) 2>"$T/nofile.err" &
	nf_gw=$!
	gw_pids="$gw_pids $nf_gw"
	wait_until "$nf_gw" "$T/nofile.err" 60 "the gateway at ulimit -n 300" gateway_serves "$T/nofile.err"
	grep -q "leaves room for 23 connections beside the 277 descriptors" "$T/nofile.err" ||
		fail "no word of the connections the open-file limit leaves: $(cat "$T/nofile.err")"
	python3 - "$(gateway_port "$T/nofile.err")" "$T/nf" <<'EOP' || fail "cold GETs beside 400 idle clients: $(tail -n 5 "$T/nofile.err")"
import boto3, os, socket, sys, time
from botocore.config import Config
port, want = int(sys.argv[1]), open(sys.argv[2], "rb").read()
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port, region_name="us-east-1",
                  aws_access_key_id=os.environ["GW_ACCESS"], aws_secret_access_key=os.environ["GW_SECRET"],
                  config=Config(retries={"max_attempts": 1}, read_timeout=60))
s3.head_bucket(Bucket="lanes")  # this client's connection, kept alive
idle = []
for i in range(400):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    idle.append(s)
time.sleep(2)
bad = []
for i in range(10):
    try:
        if s3.get_object(Bucket="lanes", Key="nf%d/blk" % i)["Body"].read() != want:
            bad.append("nf%d/blk: other bytes" % i)
    except Exception as e:
        bad.append("nf%d/blk: %s" % (i, e))
for s in idle:
    s.close()
if bad:
    sys.exit("\n".join(bad))
EOP
	! grep -q "Too many open files" "$T/nofile.err" ||
		fail "the gateway ran out of descriptors: $(grep -m 3 "Too many open files" "$T/nofile.err")"
	gw_stop "$nf_gw"
	# Four threads hold 52: 264 + 52 + a connection each is more than 300.
	(ulimit -n 300 && exec "$GATEWAY" -c "$T/nofile.conf" --listen 127.0.0.1:0 \
		--threads 4 --credentials "$GW_CREDS" --access-log off) 2>"$T/nofile4.err" &
	nf_gw=$!
	gw_pids="$gw_pids $nf_gw"
	wait_until "$nf_gw" "$T/nofile4.err" 60 "the gateway at ulimit -n 300, 4 threads" \
		gateway_serves "$T/nofile4.err"
	grep -q "open-file limit (300) is below the 320 descriptors that the store, 4 threads" \
		"$T/nofile4.err" || fail "no word of the limit below the threads' needs: $(cat "$T/nofile4.err")"
	gw_stop "$nf_gw"
	# A soft limit below what it needs (systemd's 1024) is raised to the
	# hard one, not taken as a cap on max_connections.
	if [ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 2048 ]; then
		(ulimit -Sn 300 && exec "$GATEWAY" -c "$T/nofile.conf" --listen 127.0.0.1:0 \
			--credentials "$GW_CREDS" --access-log off) 2>"$T/soft.err" &
		nf_gw=$!
		gw_pids="$gw_pids $nf_gw"
		wait_until "$nf_gw" "$T/soft.err" 60 "the gateway at a soft limit of 300" \
			gateway_serves "$T/soft.err"
		! grep -q "leaves room for" "$T/soft.err" ||
			fail "a soft open-file limit capped the connections: $(cat "$T/soft.err")"
		gw_stop "$nf_gw"
	fi
else
	echo "    SKIP the open-file limit: no boto3 (Debian: apt-get install python3-boto3)"
fi
echo "ok"
