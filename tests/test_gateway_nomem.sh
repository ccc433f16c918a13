#!/bin/sh
# tests/test_gateway_nomem.sh - kvtier-gateway when it cannot allocate a
# response: the real gateway on loopback with tests/gw_nomem_preload
# preloaded, which makes libmicrohttpd's MHD_create_response_from_buffer()
# fail for every body holding the bytes "kvtnomem". The answer is an S3
# error (503 ServiceUnavailable, reason no-memory) that the access log and
# /metrics name; where even that error cannot be built, the connection is
# dropped and the log and /metrics say the same.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP
NOMEM=$top_builddir/tests/gw_nomem_preload
[ -f "$NOMEM" ] || fail "no $NOMEM (make check builds it)"
command -v curl >/dev/null 2>&1 || skip "no curl"

step "a gateway whose responses holding 'kvtnomem' cannot be allocated"
# A sanitizer's runtime wants to be loaded first; gw_nomem_preload intercepts no
# allocation of its.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
KVT_NOMEM_BODY=kvtnomem
export ASAN_OPTIONS KVT_NOMEM_BODY
LD_PRELOAD=$NOMEM
export LD_PRELOAD
gw_start nomem 8M 1M
unset LD_PRELOAD
access=$KVT_TMP/nomem.access

# s3 OUT CURL_ARGS...: prints the HTTP status; the body in OUT, headers in $T/h.
s3()
{
	s3_out=$1
	shift
	curl -s -D "$T/h" -o "$s3_out" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
		--user "$GW_ACCESS:$GW_SECRET" "$@"
}

# nomem_answer WHAT: $T/got is the S3 error of no memory, with its request id.
nomem_answer()
{
	grep -q '<Code>ServiceUnavailable</Code>' "$T/got" ||
		fail "$1: not an S3 error: $(head -c 300 "$T/got")"
	id=$(sed -n 's/.*<RequestId>\([0-9A-F]*\)<\/RequestId>.*/\1/p' "$T/got")
	[ -n "$id" ] || fail "$1: no RequestId: $(cat "$T/got")"
	grep -q "<Resource>/nmb" "$T/got" || fail "$1: no Resource: $(cat "$T/got")"
	grep -qi '^x-amz-request-id: '"$id" "$T/h" || fail "$1: the header names another request"
	grep -qi '^retry-after: ' "$T/h" || fail "$1: no Retry-After"
}

# logged ID WHAT: the access-log line of request ID ends with the code and reason.
logged()
{
	poll 100 grep -q " $1 " "$access" || fail "$2: no access-log line for $1"
	grep " $1 " "$access" | grep -q ' 503 .* ServiceUnavailable no-memory$' ||
		fail "$2: access log: $(grep " $1 " "$access")"
}

[ "$(s3 "$T/got" -X PUT "$GW_ENDPOINT/nmb")" = 200 ] || fail "cannot create bucket nmb: $(cat "$T/got")"
printf 'the bytes kvtnomem of a small object\n' >"$T/small"
for key in obj kvtnomem-obj; do
	[ "$(s3 "$T/got" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$T/small" \
		"$GW_ENDPOINT/nmb/$key")" = 200 ] || fail "PUT $key failed: $(head -c 300 "$T/got")"
done
[ "$(s3 "$T/got" "$GW_ENDPOINT/")" = 200 ] || fail "ListBuckets failed: $(head -c 300 "$T/got")"

step "a GET whose body cannot be allocated answers 503 ServiceUnavailable no-memory"
code=$(s3 "$T/got" "$GW_ENDPOINT/nmb/obj") || fail "GET: curl exited $? (52: an empty reply)"
[ "$code" = 503 ] || fail "GET answered $code: $(head -c 300 "$T/got")"
nomem_answer GET
logged "$id" GET

step "so does a listing (the key kvtnomem-obj is in it)"
code=$(s3 "$T/got" "$GW_ENDPOINT/nmb?list-type=2") ||
	fail "ListObjectsV2: curl exited $? (52: an empty reply)"
[ "$code" = 503 ] || fail "ListObjectsV2 answered $code: $(head -c 300 "$T/got")"
nomem_answer ListObjectsV2
logged "$id" ListObjectsV2

step "where the error cannot be built either, the connection is dropped and logged as one"
# Its Resource, /nmb/kvtnomem-obj, holds the bytes too. curl: 52, an empty reply.
lines=$(wc -l <"$access")
rc=0
s3 "$T/got" "$GW_ENDPOINT/nmb/kvtnomem-obj" >"$T/code" || rc=$?
[ "$rc" = 52 ] || fail "curl exited $rc (status $(cat "$T/code")), not 52 (an empty reply)"
poll 100 [ "$(wc -l <"$access")" -gt "$lines" ] || fail "no access-log line for the dropped GET"
tail -n +$((lines + 1)) "$access" | grep -q ' GET /nmb/kvtnomem-obj 503 GetObject .* ServiceUnavailable no-memory$' ||
	fail "the dropped GET: $(tail -n +$((lines + 1)) "$access")"

step "/metrics counts the three"
kvt_expect 0 curl -s "$GW_ENDPOINT/metrics"
kvt_grep out '^kvtier_gateway_errors_total\{code="ServiceUnavailable",reason="no-memory"\} 3$'
kvt_grep out '^kvtier_gateway_requests_total\{op="GetObject",status="503"\} 2$'

step "the gateway still serves"
[ "$(s3 "$T/got" "$GW_ENDPOINT/nmb/obj" -r 0-2)" = 206 ] || fail "a ranged GET failed after it"
gw_stop "$GW_PID"
echo "ok"
