#!/bin/sh
# tests/test_gateway_s3cmd.sh - kvtier-gateway driven by s3cmd (SigV4, path
# style): mb, put/get round trips, multipart put, ls/la, info, sync, del, rb.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

command -v s3cmd >/dev/null 2>&1 || skip "no s3cmd (Debian: apt-get install s3cmd)"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP

gw_start s3cmd 128M 4M --timeout 5
cat >"$T/s3cfg" <<EOC
[default]
access_key = $GW_ACCESS
secret_key = $GW_SECRET
host_base = 127.0.0.1:$GW_PORT
host_bucket = 127.0.0.1:$GW_PORT
bucket_location = us-east-1
use_https = False
signature_v2 = False
check_ssl_certificate = False
progress_meter = False
EOC
s3c() { s3cmd -c "$T/s3cfg" "$@"; }

step "mb, ls"
kvt_expect 0 s3c mb s3://s3cmd-b
kvt_expect 0 s3c ls
kvt_grep out "s3://s3cmd-b"

step "put/get round trips, byte-exact, and a 12 MiB multipart put"
for size in 0 1 4095 4096 1048576 12582912; do
	head -c "$size" /dev/urandom >"$T/in.$size"
	kvt_expect 0 s3c put --multipart-chunk-size-mb=5 "$T/in.$size" "s3://s3cmd-b/sizes/$size"
	kvt_expect 0 s3c get --force "s3://s3cmd-b/sizes/$size" "$T/back.$size"
	cmp "$T/in.$size" "$T/back.$size" || fail "s3cmd round trip of $size bytes differs"
	echo "    $size bytes ok"
done

step "keys with spaces and unicode"
echo hello >"$T/odd"
kvt_expect 0 s3c put "$T/odd" "s3://s3cmd-b/odd key/ünï +%.txt"
kvt_expect 0 s3c get --force "s3://s3cmd-b/odd key/ünï +%.txt" "$T/odd.back"
cmp "$T/odd" "$T/odd.back" || fail "odd key differs"

step "ls, la, info"
kvt_expect 0 s3c ls s3://s3cmd-b/sizes/
kvt_grep out "12582912 +s3://s3cmd-b/sizes/12582912"
kvt_expect 0 s3c la
kvt_grep out "s3://s3cmd-b/odd key/"
kvt_run s3c info s3://s3cmd-b/sizes/4095
kvt_grep out "File size: +4095"
kvt_grep out "MD5 sum: +$(md5sum <"$T/in.4095" | cut -d' ' -f1)"

step "sync, del, rb"
mkdir -p "$T/tree/x"
for i in 1 2 3; do echo "$i" >"$T/tree/x/$i"; done
kvt_expect 0 s3c sync "$T/tree/" s3://s3cmd-b/tree/
kvt_expect 0 s3c ls --recursive s3://s3cmd-b/tree/
kvt_grep out "s3://s3cmd-b/tree/x/3"
kvt_expect 0 s3c del --recursive --force s3://s3cmd-b/
kvt_expect 0 s3c rb s3://s3cmd-b
gw_stop "$GW_PID"
echo "ok"
