#!/bin/sh
# tests/test_security.sh - the promises of docs/security.md that no other
# test holds: the gateway's (tests/gateway/test_security.py, against real
# gateways on loopback), and around it: signatures compared in constant
# time, G4 credentials that others can read refused, keys that climb out of
# G4's directory when demoted, a mount with allow_other alone still checking
# permissions, the gateway serving as an unprivileged user.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP
MIGRATE=$top_builddir/kvtier-migrate
FUSE=$top_builddir/kvtier-fuse

step "signatures, chunk and trailer signatures and payload hashes: constant-time compares"
# Every comparison with a secret-derived value goes through gw_secure_eq
# (CRYPTO_memcmp); a strcmp or memcmp on one would leak how much matched.
# String literals are dropped first: comparing a name with "chunk-signature=" is fine.
bad=$(sed 's/"[^"]*"/""/g' "$top_srcdir"/gateway/*.c |
	grep -nE '(strcmp|strncmp|memcmp|strcasecmp)\([^;]*(sig|signature|secret|payload_sha256)' || :)
[ -z "$bad" ] || fail "a signature compared with a plain compare: $bad"
n=$(grep -c 'gw_secure_eq(' "$top_srcdir/gateway/s3_auth.c" "$top_srcdir/gateway/gw_http.c" |
	awk -F: '{ s += $2 } END { print s }')
[ "$n" -ge 4 ] || fail "only $n gw_secure_eq calls: a check went elsewhere"
grep -q 'CRYPTO_memcmp' "$top_srcdir/gateway/gw_util.c" || fail "gw_secure_eq lost CRYPTO_memcmp"

step "G4 credentials readable by others are refused"
printf 'access_key = AK\nsecret_key = SK\n' >"$T/g4-creds"
chmod 644 "$T/g4-creds"
cat >"$T/s3.conf" <<EOC
[store]
dir = $T/s3store
capacity = 8M
segment_size = 1M
[g4]
url = s3://bucket/prefix
endpoint = http://127.0.0.1:1
credentials = $T/g4-creds
EOC
KVTIER_CONF=$T/s3.conf "$KVTIER" init >/dev/null
kvt_run "$MIGRATE" -c "$T/s3.conf" --idle 0s
[ "$rc" -ne 0 ] || fail "kvtier-migrate ran with world-readable G4 credentials"
kvt_grep err "readable by their owner only"

step "keys that climb ('..', absolute, NUL-free, long) stay inside G4 when demoted"
cat >"$T/g4.conf" <<EOC
[store]
dir = $T/g4store
capacity = 16M
segment_size = 1M
[g4]
url = file://$T/deep/g4
EOC
mkdir -p "$T/deep/g4"
printf 'x' >"$T/one"
KVTIER_CONF=$T/g4.conf "$KVTIER" init >/dev/null
KVTIER_CONF=$T/g4.conf "$KVTIER" mb models >/dev/null
for key in "s1/../../../../../escaped" "/s2/absolute" "s3/./dot/../x" ".." \
	"s4/$(printf 'k%.0s' $(seq 1 200))" "s5/%2E%2E/%2F"; do
	KVTIER_CONF=$T/g4.conf "$KVTIER" put models "$key" "$T/one" ||
		fail "cannot put the key '$key'"
done
kvt_run env KVTIER_CONF="$T/g4.conf" "$MIGRATE" --idle 0s
[ "$rc" -eq 0 ] || fail "demotion failed: $(cat "$T/err")"
kvt_grep err "0 failures"
# Only g4 in deep/, nothing in $T that was not there, every file under g4/.
[ "$(ls -A "$T/deep")" = g4 ] || fail "G4 wrote beside its directory: $(ls -A "$T/deep")"
[ ! -e "$T/escaped" ] && [ ! -e "/escaped" ] && [ ! -e "$T/deep/escaped" ] ||
	fail "a key climbed out of G4"
n=$(find "$T/deep/g4" -type f ! -path '*/.kvtier/manifests/*' ! -path '*/.kvtier/tmp/*' \
	-name '*%' | wc -l)
[ "$n" -eq 6 ] || fail "$n files in G4 for 6 keys: $(find "$T/deep/g4" -type f)"
# Each under this store's name of its own (kvtier-migrate(8)), none above.
n=$(find "$T/deep/g4/.kvtier/stores" -type f | wc -l)
[ "$n" -eq 6 ] || fail "$n copies under .kvtier/stores for 6 keys: $(find "$T/deep/g4" -type f)"
for key in "s1/../../../../../escaped" "/s2/absolute" ".."; do
	KVTIER_CONF=$T/g4.conf "$KVTIER" get models "$key" "$T/back" || fail "cannot recall '$key'"
	cmp "$T/one" "$T/back" || fail "'$key' came back different"
done

if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && [ -e /dev/fuse ]; then
	step "a mount with allow_other but no default_permissions still checks permissions"
	mkdir "$T/mnt"
	chmod 755 "$T"
	"$FUSE" -c "$T/g4.conf" "$T/mnt" -o allow_other -f 2>"$T/fuse.err" &
	fpid=$!
	wait_until "$fpid" "$T/fuse.err" 120 kvtier-fuse grep -q " $T/mnt " /proc/mounts
	head -c 1000 /dev/urandom >"$T/mnt/models/private"
	chmod 600 "$T/mnt/models/private"
	if setpriv --reuid=65534 --regid=65534 --clear-groups cat "$T/mnt/models/private" \
		>/dev/null 2>&1; then
		fusermount3 -u "$T/mnt" || :
		fail "nobody read a 0600 file of root's through an allow_other mount"
	fi
	setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "echo x >'$T/mnt/models/p2'" \
		2>/dev/null && fail "nobody wrote into root's 0755 bucket directory"
	grep -q "adding default_permissions" "$T/fuse.err" ||
		fail "no note of default_permissions: $(cat "$T/fuse.err")"
	fusermount3 -u "$T/mnt"
	wait "$fpid" || fail "kvtier-fuse exited $? after unmount"
	chmod 700 "$T"

	step "the gateway serves as an unprivileged user"
	mkdir "$T/nobody"
	gw_config "$T/nobody/g.conf" "$T/nobody/data" 8M 1M
	cp "$GW_CREDS" "$T/nobody/creds"
	chown -R 65534:65534 "$T/nobody"
	chmod 755 "$T"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$GATEWAY" -c "$T/nobody/g.conf" \
		--credentials "$T/nobody/creds" --listen 127.0.0.1:0 --access-log off \
		2>"$T/nobody.err" &
	npid=$!
	gw_pids="$gw_pids $npid"
	wait_until "$npid" "$T/nobody.err" 60 "the gateway as nobody" gateway_serves "$T/nobody.err"
	[ "$(stat -c %u /proc/$npid)" = 65534 ] || fail "the gateway does not run as nobody"
	gw_stop "$npid"
	chmod 700 "$T"
fi

py=$(command -v python3 || :)
[ -n "$py" ] && "$py" -c 'import boto3' 2>/dev/null ||
	skip "no python3 with boto3 (Debian: apt-get install python3-boto3); the other checks passed"

step "gateways: plain, with --metrics-listen, with tight limits"
# gw_start reads the log the gateway's redirection makes: make it first, so a
# loaded machine cannot run the reader before the gateway exists.
: >"$T/main.err"
: >"$T/metrics.err"
: >"$T/limits.err"
: >"$T/streams.err"
gw_start main 64M 4M --timeout 3
main_pid=$GW_PID
main=$GW_ENDPOINT
gw_start metrics 16M 1M --metrics-listen 127.0.0.1:0
gw_metrics_port
GW_METRICS_ENDPOINT=$GW_ENDPOINT
GW_METRICS_ONLY=http://127.0.0.1:$GW_METRICS_PORT
# One thread: libmicrohttpd splits the connection limit among its threads.
gw_start limits 16M 1M --max-connections 4 --max-object 1M --timeout 3 --threads 1
GW_LIMITS_ENDPOINT=$GW_ENDPOINT
gw_start uploads 16M 1M --max-uploads 5 --max-uploads-per-bucket 3 --upload-max-age 6s \
	--min-part-size 1K
GW_UPLOADS_ENDPOINT=$GW_ENDPOINT
# Stream slots: a wait for one ends at half of --timeout, a holder under the
# floor rate is cut after --timeout; the test's bounds are made from it.
GW_STREAMS_TIMEOUT=4
gw_start streams 128M 4M --timeout "$GW_STREAMS_TIMEOUT"
GW_STREAMS_ENDPOINT=$GW_ENDPOINT
GW_ENDPOINT=$main
GW_TIMEOUT=3
export GW_ENDPOINT GW_METRICS_ENDPOINT GW_METRICS_ONLY GW_LIMITS_ENDPOINT GW_UPLOADS_ENDPOINT GW_TIMEOUT
export GW_STREAMS_ENDPOINT GW_STREAMS_TIMEOUT

step "tests/gateway/test_security.py"
"$py" "$top_srcdir/tests/gateway/test_security.py" ||
	fail "test_security.py failed (gateway log: $KVT_TMP/main.err)"
gw_stop "$main_pid"
