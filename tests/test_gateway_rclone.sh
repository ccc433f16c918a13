#!/bin/sh
# tests/test_gateway_rclone.sh - kvtier-gateway driven by rclone's S3 backend
# (provider Other, path style, SigV4): copy and check of a tree byte for byte,
# a multipart upload and the MD5 rclone keeps in its metadata, a ranged read,
# server-side copy and move, modification times set by touch, sync with
# deletions, listings of more than one page with both ListObjects versions,
# a wrong secret, and purge.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

command -v rclone >/dev/null 2>&1 || skip "no rclone (Debian: apt-get install rclone)"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP

gw_start rclone 256M 4M --timeout 5
cat >"$T/rclone.conf" <<EOC
[kv]
type = s3
provider = Other
access_key_id = $GW_ACCESS
secret_access_key = $GW_SECRET
endpoint = $GW_ENDPOINT
region = us-east-1
force_path_style = true

[wrong]
type = s3
provider = Other
access_key_id = $GW_ACCESS
secret_access_key = not-the-secret
endpoint = $GW_ENDPOINT
region = us-east-1
force_path_style = true
EOC
# rclone 1.60 refuses to start an S3 remote, even over plain HTTP, when
# AWS_CA_BUNDLE names a bundle ("unable to load custom CA bundle").
unset AWS_CA_BUNDLE
rc_() { rclone --config "$T/rclone.conf" "$@"; }

step "mkdir, lsd"
kvt_expect 0 rc_ mkdir kv:rclone-b
kvt_expect 0 rc_ lsd kv:
kvt_grep out " rclone-b$"

step "copy a tree, then check it byte for byte"
mkdir -p "$T/tree/a/b"
for size in 0 1 4095 4096 1048576 7340032; do
	head -c "$size" /dev/urandom >"$T/tree/a/f$size"
done
echo odd >"$T/tree/a/b/odd key ü +%.txt"
kvt_expect 0 rc_ copy "$T/tree" kv:rclone-b/tree
kvt_expect 0 rc_ check --download "$T/tree" kv:rclone-b/tree
kvt_grep err "0 differences found"
kvt_grep err "7 matching files"

step "a multipart upload of 12 MiB: the bytes and the MD5 in its metadata"
head -c 12582912 /dev/urandom >"$T/big"
kvt_expect 0 rc_ copyto --s3-upload-cutoff 5M --s3-chunk-size 5M --s3-upload-concurrency 4 \
	"$T/big" kv:rclone-b/mp/big
kvt_expect 0 rc_ cat kv:rclone-b/mp/big
cmp "$T/big" "$T/out" || fail "multipart upload read back differs"
kvt_expect 0 rc_ md5sum kv:rclone-b/mp/big
kvt_grep out "^$(md5sum <"$T/big" | cut -d' ' -f1)  big$"
grep -q 'UploadPart' "$T/rclone.access" || fail "no UploadPart in the access log"

step "a ranged read"
kvt_expect 0 rc_ cat --offset 1000000 --count 100 kv:rclone-b/mp/big
dd if="$T/big" bs=1 skip=1000000 count=100 2>/dev/null | cmp - "$T/out" ||
	fail "ranged read differs"

step "server-side copy and move"
kvt_expect 0 rc_ -v copyto kv:rclone-b/mp/big kv:rclone-b/copy/big
kvt_grep err "server-side copy"
kvt_expect 0 rc_ -v moveto kv:rclone-b/copy/big kv:rclone-b/moved/big
kvt_expect 0 rc_ cat kv:rclone-b/moved/big
cmp "$T/big" "$T/out" || fail "moved object differs"
kvt_expect 0 rc_ lsf kv:rclone-b/copy
[ ! -s "$T/out" ] || fail "the move left its source: $(cat "$T/out")"

step "touch sets the modification time rclone reads back"
kvt_expect 0 rc_ touch -t 2020-01-02T03:04:05 kv:rclone-b/tree/a/f1
kvt_expect 0 rc_ lsl kv:rclone-b/tree/a/f1
kvt_grep out "2020-01-02 03:04:05"
kvt_expect 0 rc_ cat kv:rclone-b/tree/a/f1
cmp "$T/tree/a/f1" "$T/out" || fail "touch changed the bytes"

step "sync deletes what the source lost and replaces what changed"
rm "$T/tree/a/f4095"
echo changed >"$T/tree/a/f1"
kvt_expect 0 rc_ sync "$T/tree" kv:rclone-b/tree
kvt_expect 0 rc_ check --download "$T/tree" kv:rclone-b/tree
kvt_grep err "6 matching files"
kvt_expect 0 rc_ lsf kv:rclone-b/tree/a
if grep -q f4095 "$T/out"; then fail "sync left a deleted file"; fi

step "1,100 keys: both ListObjects versions page through all of them"
mkdir "$T/many"
i=0
while [ "$i" -lt 1100 ]; do
	echo "$i" >"$T/many/k$i"
	i=$((i + 1))
done
kvt_expect 0 rc_ copy --transfers 16 "$T/many" kv:rclone-b/many
for v in 1 2; do
	kvt_expect 0 rc_ lsf --s3-list-version "$v" kv:rclone-b/many
	[ "$(wc -l <"$T/out")" -eq 1100 ] ||
		fail "list version $v gave $(wc -l <"$T/out") keys, not 1100"
done

step "a wrong secret: a clear refusal, nothing written"
echo nope >"$T/nope"
kvt_run rc_ --retries 1 --low-level-retries 1 copyto "$T/nope" wrong:rclone-b/nope
[ "$rc" -ne 0 ] || fail "a wrong secret was accepted"
kvt_grep err "SignatureDoesNotMatch|403"
kvt_expect 0 rc_ lsf kv:rclone-b/nope
[ ! -s "$T/out" ] || fail "a refused upload left an object"

step "purge removes every object and the bucket"
kvt_expect 0 rc_ purge kv:rclone-b
kvt_expect 0 rc_ lsd kv:
if grep -q rclone-b "$T/out"; then fail "purge left the bucket"; fi
gw_stop "$GW_PID"
echo "ok"
