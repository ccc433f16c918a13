#!/bin/sh
# tests/test_gateway.sh - kvtier-gateway end to end with boto3: the real
# gateway on loopback over a scratch store, driven by tests/gateway/test_s3.py
# (round trips from 0 B to 100 MiB, listings of thousands of keys, multipart,
# SigV4 in all its forms, the KV extensions, bad input, a full hot tier).
# Runs the suite once with every python3 on PATH (and /usr/bin/python3) that
# has boto3, so both Debian's boto3 and a newer one are covered when present.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP

step "startup refuses what it must: open credentials, bad lines, bad flags"
gw_config "$T/c.conf" "$T/c" 8M 1M
cp "$GW_CREDS" "$T/open-creds"
chmod 644 "$T/open-creds"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$T/open-creds" --listen 127.0.0.1:0
kvt_grep err "must not be accessible by group or others \(chmod 600"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$T/no-such-file" --listen 127.0.0.1:0
kvt_grep err "no-such-file: cannot open"
(umask 077 && printf 'AKIDONLY\n' >"$T/bad-creds")
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$T/bad-creds" --listen 127.0.0.1:0
kvt_grep err "bad-creds:1: expected ACCESS_KEY SECRET_KEY"
(umask 077 && printf 'AK SK Not_A_Bucket\n' >"$T/bad-creds")
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$T/bad-creds" --listen 127.0.0.1:0
kvt_grep err "'Not_A_Bucket' is not a bucket name"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --listen nowhere:port
kvt_grep err "listen 'nowhere:port'"
# Numeric, strictly: getaddrinfo() wrapped port 65536 to 0 (one the kernel
# picks: the gateway served, where nobody looked) and 70000 to 4464, read
# 010.0.0.1 as octal (8.0.0.1) and 127.1 as 127.0.0.1, and took ::1:0, an
# address of its own, for [::1]:0.
for a in 127.0.0.1:65536 127.0.0.1:70000 010.0.0.1:0 127.1:0 '127.0.0.1: 0' ::1:0; do
	kvt_expect 2 timeout 20 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --listen "$a"
	kvt_grep err "listen '$a': expected ADDR:PORT .*PORT from 0 to 65535"
	kvt_expect 2 timeout 20 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" \
		--listen 127.0.0.1:0 --metrics-listen "$a"
	kvt_grep err "metrics listen '$a'"
done
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --threads 0
# A flag takes what kvtier.conf's key takes, and says so (--threads took 100000).
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --threads 1025
kvt_grep err "bad number '1025' for --threads: expected 1 to 1024"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --max-connections 1000001
kvt_grep err "bad number '1000001' for --max-connections: expected 1 to 1000000"
# Threads beyond the connections would never have one (they took 2 of 4).
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --threads 4 --max-connections 2
kvt_grep err "max connections \(2\) below threads \(4\)"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --timeout 100001
kvt_grep err "bad number '100001' for --timeout: expected 1 to 100000"
printf '[gateway]\nmax_object = 0\n' >>"$T/c.conf"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --credentials "$GW_CREDS" --listen 127.0.0.1:0
kvt_grep err "c.conf:[0-9]+: bad value '0' for \[gateway\] max_object"
gw_config "$T/c.conf" "$T/c" 8M 1M
kvt_expect 2 "$GATEWAY" -c "$T/no-such.conf" --credentials "$GW_CREDS"
kvt_expect 2 "$GATEWAY" --no-such-flag
kvt_expect 0 "$GATEWAY" --help
kvt_grep out "^usage: kvtier-gateway"
kvt_expect 2 "$GATEWAY" -c "$T/c.conf" --listen 127.0.0.1:0
kvt_grep err "no users: set \[gateway\] credentials"

step "the [gateway] section of kvtier.conf configures it; flags win over it"
gw_config "$T/g.conf" "$T/g" 8M 1M
cat >>"$T/g.conf" <<EOC
[gateway]
listen = 127.0.0.1:1
threads = 2
credentials = $GW_CREDS
region = eu-north-1
EOC
"$GATEWAY" -c "$T/g.conf" --listen 127.0.0.1:0 --access-log off 2>"$T/g.err" &
g_pid=$!
gw_pids="$gw_pids $g_pid"
wait_until "$g_pid" "$T/g.err" 60 "gateway from [gateway]" gateway_serves "$T/g.err"
grep -q "serving S3 on 127.0.0.1:0 (port [0-9]*), 2 threads" "$T/g.err" ||
	fail "listen or threads not taken: $(cat "$T/g.err")"
gport=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$T/g.err" | head -n 1)
if command -v curl >/dev/null 2>&1; then
	kvt_expect 0 curl -s --aws-sigv4 "aws:amz:us-east-1:s3" --user "$GW_ACCESS:$GW_SECRET" \
		"http://127.0.0.1:$gport/"
	kvt_grep out "expecting 'eu-north-1'"
	kvt_expect 0 curl -sf --aws-sigv4 "aws:amz:eu-north-1:s3" --user "$GW_ACCESS:$GW_SECRET" \
		"http://127.0.0.1:$gport/"
	kvt_grep out "<ListAllMyBucketsResult"
	# curl signs the body but sends no x-amz-content-sha256: a clear 403.
	printf 'some body' >"$T/body"
	kvt_expect 0 curl -s --aws-sigv4 "aws:amz:eu-north-1:s3" --user "$GW_ACCESS:$GW_SECRET" \
		-X PUT --data-binary @"$T/body" "http://127.0.0.1:$gport/nob/k"
	kvt_grep out "no x-amz-content-sha256 header"
fi
# A second gateway on the same port (another store, or one started twice) is
# refused: with SO_REUSEPORT the kernel split clients between the two stores.
gw_config "$T/g2.conf" "$T/g2" 8M 1M
# The error names the address and why, once; libmicrohttpd's own line said
# "port 0", and with --threads 1 it warned of a pool it does not use.
kvt_expect 1 timeout 30 "$GATEWAY" -c "$T/g2.conf" --credentials "$GW_CREDS" --listen "127.0.0.1:$gport" \
	--threads 1
kvt_grep err "^kvtier-gateway: error: cannot listen on '127.0.0.1:$gport': Address already in use$"
[ "$(wc -l <"$KVT_TMP/err")" -eq 1 ] || fail "more than the one error line: $(cat "$KVT_TMP/err")"

step "-d on a port another listener holds exits non-zero at once, naming the address"
# daemon(3) came before the bind: the caller got 0 and the child exited
# silently (to syslog). The parent now waits for the child to serve or fail.
kvt_expect 1 timeout 30 "$GATEWAY" -c "$T/g2.conf" --credentials "$GW_CREDS" --listen "127.0.0.1:$gport" \
	--access-log off -d
kvt_grep err "^kvtier-gateway: error: cannot listen on '127.0.0.1:$gport': Address already in use$"
gw_stop "$g_pid"

step "SIGHUP rereads the credentials (a bad file keeps the old users) and reopens the log"
if command -v curl >/dev/null 2>&1; then
	H=$T/hup-creds
	(umask 077 && printf 'AKIDHUPOLD oldsecret\n' >"$H")
	gw_start hup 8M 1M --credentials "$H"
	hup_pid=$GW_PID
	hup_status() {
		curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
			--user "$1" "$GW_ENDPOINT/"
	}
	hup_wait() {
		poll 600 grep -q "$1" "$GW_LOG" || fail "no '$1' after SIGHUP: $(cat "$GW_LOG")"
	}
	[ "$(hup_status AKIDHUPOLD:oldsecret)" = 200 ] || fail "the first user cannot sign in"
	(umask 077 && printf 'AKIDHUPNEW newsecret\n' >"$H.new")
	mv "$H.new" "$H"
	mv "$T/hup.access" "$T/hup.access.1"
	kill -HUP "$hup_pid"
	hup_wait "SIGHUP: 1 users from"
	[ "$(hup_status AKIDHUPNEW:newsecret)" = 200 ] || fail "the new user cannot sign in"
	[ "$(hup_status AKIDHUPOLD:oldsecret)" = 403 ] || fail "the removed user still signs in"
	# A request's line is written when libmicrohttpd reports it complete,
	# which can come a moment after its client has the answer.
	poll 600 test -s "$T/hup.access" || fail "the access log was not reopened after SIGHUP"
	chmod 644 "$H"
	kill -HUP "$hup_pid"
	hup_wait "credentials not reloaded, the old users stay"
	[ "$(hup_status AKIDHUPNEW:newsecret)" = 200 ] || fail "a refused file dropped the users"
	gw_stop "$hup_pid"

	step "-d keeps relative paths: the files SIGHUP opens again"
	# daemon(3) moved to /: a key rotation read /creds, and logrotate
	# made /access.log.
	R=$T/rel
	mkdir "$R"
	(umask 077 && printf 'AKIDREL relsecret\n' >"$R/creds")
	gw_config "$R/kvtier.conf" "$R/data" 8M 1M
	# Port 0: -d returns once it serves, having said on stderr which port
	# the kernel gave (a port picked at random could be in use).
	(cd "$R" && "$GATEWAY" -c kvtier.conf -d --listen 127.0.0.1:0 --credentials creds \
		--access-log access.log 2>"$R/start.err") ||
		fail "kvtier-gateway -d did not start: $(cat "$R/start.err")"
	rport=$(gateway_port "$R/start.err")
	[ -n "$rport" ] || fail "kvtier-gateway -d did not say its port: $(cat "$R/start.err")"
	GW_ENDPOINT=http://127.0.0.1:$rport
	curl -sf -o /dev/null "$GW_ENDPOINT/health" || fail "kvtier-gateway -d does not answer"
	# Not our child: the gateway whose directory is $R (other runs may
	# have gateways of their own here).
	rel_pid=
	for p in $(pgrep -x kvtier-gateway); do
		[ "$(readlink "/proc/$p/cwd" 2>/dev/null)" != "$R" ] || rel_pid=$p
	done
	[ -n "$rel_pid" ] || fail "cannot find kvtier-gateway -d"
	gw_pids="$gw_pids $rel_pid"	# not a child: stopped at exit all the same
	[ "$(hup_status AKIDREL:relsecret)" = 200 ] || fail "the -d gateway's user cannot sign in"
	(umask 077 && printf 'AKIDREL2 relsecret2\n' >"$R/creds")
	mv "$R/access.log" "$R/access.log.1"
	kill -HUP "$rel_pid"
	poll 600 [ "$(hup_status AKIDREL2:relsecret2)" = 200 ] ||
		fail "SIGHUP of kvtier-gateway -d did not reread its relative credentials"
	poll 600 test -s "$R/access.log" || fail "SIGHUP of kvtier-gateway -d did not reopen its log"
	kill "$rel_pid"
	poll 300 [ ! -d "/proc/$rel_pid" ] || fail "kvtier-gateway -d did not stop on SIGTERM"
fi

pythons=""
for py in python3 /usr/bin/python3; do
	p=$(command -v "$py" 2>/dev/null) || continue
	case " $pythons " in *" $p "*) continue ;; esac
	"$p" -c 'import boto3' 2>/dev/null && pythons="$pythons $p"
done
[ -n "$pythons" ] ||
	skip "no python3 with boto3 (Debian: apt-get install python3-boto3); startup checks passed"

step "a tiny store (8 MiB) to fill up with pinned objects"
gw_start small 8M 1M --timeout 3
GW_SMALL_ENDPOINT=$GW_ENDPOINT
small_pid=$GW_PID

step "a store whose multipart parts may be of any size (--min-part-size 1)"
gw_start parts 64M 1M --timeout 3 --min-part-size 1
GW_PARTS_ENDPOINT=$GW_ENDPOINT

step "the main store (384 MiB)"
gw_start main 384M 8M --timeout 3 --threads 4
main_pid=$GW_PID
main_log=$GW_LOG
export GW_ENDPOINT GW_SMALL_ENDPOINT GW_PARTS_ENDPOINT
GW_ACCESS_LOG=$KVT_TMP/main.access
GW_SMALL_ACCESS_LOG=$KVT_TMP/small.access
export GW_ACCESS_LOG GW_SMALL_ACCESS_LOG
GW_TIMEOUT=3
GW_PID=$main_pid
export GW_TIMEOUT GW_PID

for py in $pythons; do
	step "boto3 suite with $py"
	"$py" "$top_srcdir/tests/gateway/test_s3.py" || fail "test_s3.py failed with $py (gateway log: $main_log)"
done

step "every request has one access-log line with its request id"
n=$(wc -l <"$KVT_TMP/main.access")
[ "$n" -gt 1000 ] || fail "only $n access-log lines"
grep -Eq '^[0-9T:.-]+Z 127\.0\.0\.1 [0-9A-F]{16} AKIDKVTIERTEST PUT /' "$KVT_TMP/main.access" ||
	fail "no PUT line in the access log: $(head -3 "$KVT_TMP/main.access")"

# s3curl OUT CURL_ARGS...: a SigV4-signed request to the gateway; the body
# goes to OUT, the headers to $T/h; prints the HTTP status.
s3curl()
{
	s3c_out=$1
	shift
	curl -s -D "$T/h" -o "$s3c_out" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
		--user "$GW_ACCESS:$GW_SECRET" "$@"
}

step "cold objects: GET recalls from G4 byte-exact, prestage of a session brings it back"
if command -v curl >/dev/null 2>&1; then
	MC=$KVT_TMP/main.conf
	s3get() {
		s3curl "$2" "$GW_ENDPOINT/$1"
	}
	tier_of() {
		"$KVTIER" -c "$MC" head "$1" "$2" >"$T/head" || fail "head $1/$2 failed"
		sed -n 's/^tier: *//p' "$T/head"
	}
	kvt_expect 0 "$KVTIER" -c "$MC" mb coldb
	for i in 0 1 2 3; do
		head -c $((1048576 + i * 4097)) /dev/urandom >"$T/cold.$i"
		kvt_expect 0 "$KVTIER" -c "$MC" put coldb "conv9/blk$i" "$T/cold.$i"
	done
	kvt_expect 0 "$top_builddir/kvtier-migrate" -c "$MC" --session coldb/conv9
	[ "$(tier_of coldb conv9/blk0)" = cold ] || fail "conv9/blk0 not cold after demotion"
	[ "$(s3get coldb/conv9/blk0 "$T/got")" = 200 ] || fail "GET of a cold object failed"
	cmp "$T/cold.0" "$T/got" || fail "a recalled object differs"
	[ "$(tier_of coldb conv9/blk0)" = hot ] || fail "a GET did not leave the object hot"
	[ "$(tier_of coldb conv9/blk1)" = cold ] || fail "a GET recalled more than its object"
	kvt_expect 0 curl -s -o /dev/null -w '%{http_code}' -X POST --aws-sigv4 \
		"aws:amz:us-east-1:s3" --user "$GW_ACCESS:$GW_SECRET" \
		"$GW_ENDPOINT/coldb?kvtier-prestage&session=conv9"
	kvt_grep out '^202$'
	conv9_hot() { [ "$(tier_of coldb conv9/blk3)" = hot ] && [ "$(tier_of coldb conv9/blk1)" = hot ]; }
	poll 600 conv9_hot || fail "prestage of conv9 did not bring it back in 60 s"
	for i in 1 2 3; do
		[ "$(s3get "coldb/conv9/blk$i" "$T/got")" = 200 ] || fail "GET conv9/blk$i failed"
		cmp "$T/cold.$i" "$T/got" || fail "prestaged conv9/blk$i differs"
		grep -qi '^x-kvtier-tier: hot' "$T/h" || fail "conv9/blk$i not served hot"
	done
else
	echo "    skipped: no curl"
fi

step "a flipped byte on disk: GET answers 500 on every read path, never the bad bytes"
# 4 KiB is read whole, 256 KiB is checked in place on the polling thread,
# 2 MiB in place on the read lane. The byte is flipped 100 bytes into each
# object's payload, found by its contents in the segment files.
if command -v curl >/dev/null 2>&1; then
	gw_start flip 64M 8M
	flip_pid=$GW_PID
	s3() {
		s3curl "$T/got" "$@"
	}
	[ "$(s3 -X PUT "$GW_ENDPOINT/flip")" = 200 ] || fail "cannot create bucket flip"
	for size in 4096 262144 2097152; do
		head -c "$size" /dev/urandom >"$T/flip.$size"
		[ "$(s3 -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$T/flip.$size" \
			"$GW_ENDPOINT/flip/o$size")" = 200 ] ||
			fail "PUT of $size bytes failed: $(head -c 300 "$T/got")"
		[ "$(s3 "$GW_ENDPOINT/flip/o$size")" = 200 ] && cmp -s "$T/flip.$size" "$T/got" ||
			fail "GET of $size bytes before the flip failed"
		python3 - "$KVT_TMP/flip/segments" "$T/flip.$size" <<'EOP' || fail "could not flip a byte of o$size"
import os, sys
want = open(sys.argv[2], "rb").read(4096)
for name in sorted(os.listdir(sys.argv[1])):
    path = os.path.join(sys.argv[1], name)
    at = open(path, "rb").read().find(want)
    if at >= 0:
        fd = os.open(path, os.O_RDWR)
        b = os.pread(fd, 1, at + 100)
        os.pwrite(fd, bytes([b[0] ^ 0x20]), at + 100)
        os.close(fd)
        sys.exit(0)
sys.exit("object not found in any segment")
EOP
		code=$(s3 "$GW_ENDPOINT/flip/o$size")
		[ "$code" = 500 ] || fail "GET of o$size with a flipped byte answered $code"
		grep -q '<Code>InternalError</Code>' "$T/got" || fail "o$size: not an S3 error: $(head -c 200 "$T/got")"
		code=$(s3 -r 0-999 "$GW_ENDPOINT/flip/o$size")
		[ "$code" = 500 ] || fail "ranged GET of o$size with a flipped byte answered $code"
	done
	# Bytes of another extent than the flipped one still read back.
	[ "$(s3 -r 1048576-2097151 "$GW_ENDPOINT/flip/o2097152")" = 206 ] ||
		fail "the good extent of o2097152 did not read"
	tail -c 1048576 "$T/flip.2097152" | cmp -s - "$T/got" || fail "the good extent of o2097152 differs"
	grep -q "checksum" "$KVT_TMP/flip.err" || fail "no checksum error in the gateway log"
	kill "$flip_pid"
	wait "$flip_pid" || fail "the flip gateway did not stop cleanly"
else
	echo "    skipped: no curl"
fi

step "TLS (boto3 streams aws-chunked with a CRC32 trailer over HTTPS), --metrics-listen"
if command -v openssl >/dev/null 2>&1 && command -v curl >/dev/null 2>&1; then
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/key.pem" -out "$T/cert.pem" \
		-days 2 -subj /CN=localhost >/dev/null 2>&1 || fail "openssl could not make a certificate"
	chmod 600 "$T/key.pem"
	gw_start tls 64M 4M --tls-cert "$T/cert.pem" --tls-key "$T/key.pem" \
		--metrics-listen 127.0.0.1:0
	gw_metrics_port
	tls_pid=$GW_PID
	for py in $pythons; do
		"$py" - "https://127.0.0.1:$GW_PORT" <<'EOP' || fail "boto3 over TLS failed with $py"
import io, os, sys, warnings
import boto3
from botocore.config import Config
warnings.simplefilter("ignore")
s3 = boto3.client("s3", endpoint_url=sys.argv[1], verify=False, region_name="us-east-1",
                  aws_access_key_id=os.environ["GW_ACCESS"],
                  aws_secret_access_key=os.environ["GW_SECRET"],
                  config=Config(s3={"addressing_style": "path"}))
try:
    s3.create_bucket(Bucket="tls")
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
data = os.urandom(12 << 20)
s3.upload_fileobj(io.BytesIO(data), "tls", "mp")
s3.put_object(Bucket="tls", Key="one", Body=data[:3 << 20])
assert s3.get_object(Bucket="tls", Key="mp")["Body"].read() == data
assert s3.get_object(Bucket="tls", Key="one")["Body"].read() == data[:3 << 20]
print("    boto3 %s over TLS ok" % boto3.__version__)
EOP
	done
	kvt_expect 0 curl -s "http://127.0.0.1:$GW_METRICS_PORT/metrics"
	kvt_grep out 'kvtier_gateway_requests_total\{op="PutObject",status="200"\}'
	kvt_expect 0 curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$GW_PORT/metrics"
	kvt_grep out '^403$'
	gw_stop "$tls_pid"
else
	echo "    skipped: no openssl or curl"
fi

step "SIGTERM stops the gateways cleanly"
gw_stop "$main_pid"
gw_stop "$small_pid"
grep -q "SIGTERM: shutting down" "$main_log" || fail "no shutdown line: $(cat "$main_log")"
echo "ok"
