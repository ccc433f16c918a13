#!/bin/sh
# tests/test_migrate_s3.sh - kvtier-migrate against a real third-party S3
# server: s3rver (npm), started here on loopback. Demotion puts the objects
# and manifests under s3://BUCKET/PREFIX, kvtier get recalls them
# byte-exact, kill -9 of the migrator is finished by the next run, a second
# store imports a session over the same bucket, and a partner that is down
# fails the read clearly and loses nothing.
#
# s3rver is taken from $S3RVER, PATH, or installed with npm into
# $top_builddir/.s3rver; without node or npm the test is skipped.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

kvt_setup
T=$KVT_TMP
K=$KVTIER
M=$top_builddir/kvtier-migrate
[ -x "$M" ] || fail "no kvtier-migrate binary at '$M' (build it first)"

S3RVER=${S3RVER:-$(command -v s3rver || true)}
if [ -z "$S3RVER" ]; then
	S3RVER=$top_builddir/.s3rver/node_modules/.bin/s3rver
	if [ ! -x "$S3RVER" ]; then
		command -v npm >/dev/null || skip "no s3rver and no npm to install it"
		step "installing s3rver from npm into $top_builddir/.s3rver"
		# Under a lock: the chaos test may be installing it at the same time.
		(flock 9 && { [ -x "$S3RVER" ] || npm install --prefix "$top_builddir/.s3rver" \
			--no-audit --no-fund s3rver@3; }) 9>"$top_builddir/.s3rver.lock" \
			>"$T/npm.log" 2>&1 || skip "npm could not install s3rver: $(tail -3 "$T/npm.log")"
	fi
fi
command -v node >/dev/null || skip "no node to run s3rver"

server=
stop_server()
{
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
		server=
	fi
}
trap 'stop_server; kvt_cleanup' EXIT

# start_server [PORT]: s3rver on PORT, else a free loopback port, bucket g4bucket.
start_server()
{
	for try in 1 2 3 4 5; do
		PORT=${1:-$(shuf -i 20000-40000 -n 1)}
		"$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$PORT" --configure-bucket g4bucket \
			>"$T/s3rver.log" 2>&1 &
		server=$!
		for i in $(seq 50); do
			grep -q "listening" "$T/s3rver.log" && return 0
			kill -0 "$server" 2>/dev/null || break
			sleep 0.1
		done
		stop_server
	done
	fail "s3rver did not start: $(cat "$T/s3rver.log")"
}

mkdir -p "$T/s3"
start_server
printf 'access_key = S3RVER\nsecret_key = S3RVER\n' >"$T/keys"
chmod 600 "$T/keys"
cat >>"$KVTIER_CONF" <<EOF
[g4]
url = s3://g4bucket/kvtier/g4
endpoint = http://127.0.0.1:$PORT
credentials = $T/keys
EOF

step "credentials readable by others are refused"
chmod 644 "$T/keys"
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb models
kvt_expect 2 "$M" --idle 0s
kvt_grep err "must be readable by their owner only"
chmod 600 "$T/keys"

step "demote three sessions to s3rver"
n=0
for s in s1 s2 s3; do
	for size in 0 1 65536 2097153; do
		head -c "$size" /dev/urandom >"$T/in.$s.$size"
		kvt_expect 0 "$K" put --content-type application/octet-stream models \
			"$s/blk$size" "$T/in.$s.$size"
		n=$((n + 1))
	done
done
kvt_expect 0 "$M" --idle 0s --json
kvt_grep out "\"sessions\":3,\"objects\":$n,.*\"failures\":0"
kvt_expect 0 "$K" head models s2/blk2097153
kvt_grep out "^tier: +cold$"
[ -f "$T/s3/g4bucket/kvtier/g4/.kvtier/manifests/models/s2.json._S3rver_object" ] ||
	fail "no manifest of s2 in the bucket"
[ -f "$T/s3/g4bucket/kvtier/g4/models/s2/blk2097153._S3rver_object" ] ||
	fail "no object s2/blk2097153 in the bucket"

step "kvtier get recalls from S3 byte-exact"
for size in 0 1 65536 2097153; do
	kvt_expect 0 "$K" get models "s1/blk$size" "$T/back"
	cmp "$T/in.s1.$size" "$T/back" || fail "s1/blk$size came back different"
done

step "partner down: the read fails clearly, nothing is lost; back up: it works"
stop_server
kvt_expect 1 "$K" get models s2/blk65536 "$T/back"
kvt_grep err "s3 get of 'kvtier/g4/models/s2/blk65536'"
kvt_expect 0 "$K" head models s2/blk65536
kvt_grep out "^tier: +cold$"
start_server
sed -i "s|^endpoint = .*|endpoint = http://127.0.0.1:$PORT|" "$KVTIER_CONF"
kvt_expect 0 "$K" get models s2/blk65536 "$T/back"
cmp "$T/in.s2.65536" "$T/back" || fail "s2/blk65536 differs after the outage"

step "s3rver stopped mid-run, back within the retries: the run completes"
for i in 1 2 3 4 5 6; do
	head -c 2097152 /dev/urandom >"$T/in.s4.$i"
	kvt_expect 0 "$K" put models "s4/blk$i" "$T/in.s4.$i"
done
# 12 MiB up and 12 MiB read back at 4 MiB/s: about 6 s, with the partner
# away for 1 s and the time node takes to start it again (seconds on a
# loaded machine); the backoff (0.25 + 0.5 + ... + 8 s) outlasts that.
"$M" --session models/s4 --jobs 2 --limit-rate 4M 2>"$T/mid.err" &
pid=$!
sleep 1.5
stop_server
sleep 1
start_server "$PORT"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "the run with the partner away for a while exited $rc: $(cat "$T/mid.err")"
grep -Eq "demote: 1 sessions, 6 objects, .* 0 failures$" "$T/mid.err" ||
	fail "unexpected summary: $(cat "$T/mid.err")"
grep -q "try 2 of 7" "$T/mid.err" || fail "nothing was retried: $(cat "$T/mid.err")"
for i in 1 2 3 4 5 6; do
	kvt_expect 0 "$K" head models "s4/blk$i"
	kvt_grep out "^tier: +cold$"
	kvt_expect 0 "$K" get models "s4/blk$i" "$T/back"
	cmp "$T/in.s4.$i" "$T/back" || fail "s4/blk$i differs after the outage"
done

step "kill -9 of the migrator, 10 rounds; a re-run finishes"
for round in $(seq 10); do
	for size in 65536 2097153; do
		head -c "$size" /dev/urandom >"$T/in.s1.$size"
		kvt_expect 0 "$K" put models "s1/blk$size" "$T/in.s1.$size"
	done
	"$M" --idle 0s -q 2>/dev/null &
	pid=$!
	sleep "$(printf '0.%03d' "$(shuf -i 0-150 -n 1)")"
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
done
kvt_expect 0 "$M" --idle 0s
kvt_grep err " 0 failures$"
for s in s1 s2 s3; do
	for size in 0 1 65536 2097153; do
		kvt_expect 0 "$K" get models "$s/blk$size" "$T/back"
		cmp "$T/in.$s.$size" "$T/back" || fail "$s/blk$size differs after the kills"
	done
done

step "a second store over the same bucket imports s3 and reads it"
B=$T/b.conf
sed "s|^dir = .*|dir = $T/datab|" "$KVTIER_CONF" >"$B"
kvt_expect 0 "$K" -c "$B" init
kvt_expect 0 "$M" -c "$B" --import models/s3
kvt_grep err "^kvtier-migrate: import: 1 sessions, 4 objects"
for size in 0 1 65536 2097153; do
	kvt_expect 0 "$K" -c "$B" get models "s3/blk$size" "$T/back"
	cmp "$T/in.s3.$size" "$T/back" || fail "s3/blk$size read on the second store differs"
done
kvt_expect 0 "$K" -c "$B" head models s3/blk2097153
kvt_grep out "^content-type: +application/octet-stream$"

echo "PASS"
