#!/bin/sh
# tests/test_gateway_awscli.sh - kvtier-gateway driven by the aws cli (s3 cp,
# ls, rm, sync, presign; s3api) and by curl (presigned URLs, curl's own SigV4
# signing, raw bad requests). Byte-exact round trips are checked with cmp.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

command -v aws >/dev/null 2>&1 || skip "no aws cli (Debian: apt-get install awscli)"
command -v curl >/dev/null 2>&1 || skip "no curl (Debian: apt-get install curl)"

kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP

gw_start cli 256M 4M --timeout 5
E=$GW_ENDPOINT

# The aws cli of this test only: no user config, no instance metadata lookups.
AWS_CONFIG_FILE=$T/aws.config
AWS_SHARED_CREDENTIALS_FILE=$T/aws.credentials
cat >"$AWS_CONFIG_FILE" <<EOC
[default]
region = us-east-1
s3 =
    signature_version = s3v4
    addressing_style = path
EOC
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$GW_ACCESS" "$GW_SECRET" >"$AWS_SHARED_CREDENTIALS_FILE"
AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE AWS_EC2_METADATA_DISABLED
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE || :

s3() { aws --endpoint-url "$E" s3 --only-show-errors "$@"; }
s3api() { aws --endpoint-url "$E" s3api "$@"; }
# absent KEY: head-object fails with a 404 (the cli's exit status varies by version)
absent()
{
	kvt_run s3api head-object --bucket cli --key "$1"
	[ "$rc" -ne 0 ] || fail "'$1' exists"
	kvt_grep err "404|Not Found"
}
sigv4() { curl -s --aws-sigv4 "aws:amz:us-east-1:s3" --user "$GW_ACCESS:$GW_SECRET" "$@"; }

step "mb, and ls shows the bucket"
kvt_expect 0 aws --endpoint-url "$E" s3 mb s3://cli
kvt_expect 0 aws --endpoint-url "$E" s3 ls
kvt_grep out " cli$"

step "cp round trips, byte-exact: 0 B to 32 MiB, and a 20 MiB multipart upload"
mkdir -p "$T/sizes" "$T/sizes.back"
for size in 0 1 4095 4096 1048576 33554432 20971520; do
	head -c "$size" /dev/urandom >"$T/sizes/$size"
done
# One cp each way: the aws cli takes seconds to start.
kvt_expect 0 s3 cp --recursive "$T/sizes" s3://cli/sizes
kvt_expect 0 s3 cp --recursive s3://cli/sizes "$T/sizes.back"
for size in 0 1 4095 4096 1048576 33554432 20971520; do
	cmp "$T/sizes/$size" "$T/sizes.back/$size" ||
		fail "aws s3 cp of $size bytes came back different"
	echo "    $size bytes ok"
done
kvt_expect 0 s3 cp "$T/sizes/4095" "s3://cli/one file"
kvt_expect 0 s3 cp "s3://cli/one file" "$T/one.back"
cmp "$T/sizes/4095" "$T/one.back" || fail "single-file cp differs"
kvt_expect 0 s3api head-object --bucket cli --key sizes/20971520
kvt_grep out '"ETag": "\\"[0-9a-f]{32}-3\\""'
kvt_expect 0 s3api head-object --bucket cli --key sizes/4096
kvt_grep out "\"ETag\": \"\\\\\"$(md5sum <"$T/sizes/4096" | cut -d' ' -f1)\\\\\"\""

step "ls and ls --recursive"
kvt_expect 0 aws --endpoint-url "$E" s3 ls s3://cli/
kvt_grep out "PRE sizes/"
kvt_expect 0 aws --endpoint-url "$E" s3 ls --recursive s3://cli/
kvt_grep out " 33554432 sizes/33554432$"

step "sync up, sync down, sync again uploads only what changed, sync --delete"
mkdir -p "$T/tree/a/b" "$T/tree/c d" "$T/down"
for i in $(seq 1 40); do
	head -c $((i * 997)) /dev/urandom >"$T/tree/a/f$i"
done
echo "spaces and ünïcode" >"$T/tree/c d/ü ñ.txt"
head -c 9000000 /dev/urandom >"$T/tree/a/b/big"
kvt_expect 0 s3 sync "$T/tree" s3://cli/tree
kvt_expect 0 s3 sync s3://cli/tree "$T/down"
diff -r "$T/tree" "$T/down" || fail "sync round trip differs"
sleep 1
echo changed >"$T/tree/a/f7"
kvt_expect 0 aws --endpoint-url "$E" s3 sync --no-progress "$T/tree" s3://cli/tree
kvt_grep out "upload: .*/tree/a/f7 to s3://cli/tree/a/f7"
[ "$(grep -c '^upload:' "$T/out")" -eq 1 ] || fail "sync uploaded more than the changed file: $(cat "$T/out")"
rm "$T/tree/a/f1"
kvt_expect 0 aws --endpoint-url "$E" s3 sync --no-progress --delete "$T/tree" s3://cli/tree
kvt_grep out "delete: s3://cli/tree/a/f1"

step "s3api: metadata, ranges, listings, delete-objects, multipart abort"
kvt_expect 0 s3api put-object --bucket cli --key "meta/obj" --body "$T/sizes/4095" \
	--metadata model=llama3,turn=7 --content-type application/x-kv
kvt_expect 0 s3api head-object --bucket cli --key meta/obj
kvt_grep out '"model": "llama3"'
kvt_grep out '"ContentType": "application/x-kv"'
kvt_expect 0 s3api get-object --bucket cli --key sizes/1048576 --range bytes=100-199 "$T/range"
kvt_grep out '"ContentRange": "bytes 100-199/1048576"'
dd if="$T/sizes/1048576" of="$T/range.want" bs=1 skip=100 count=100 2>/dev/null
cmp "$T/range" "$T/range.want" || fail "ranged get differs"
kvt_expect 0 s3api list-objects-v2 --bucket cli --prefix tree/a/ --delimiter / --max-keys 5
kvt_grep out '"Prefix": "tree/a/b/"'
kvt_expect 0 s3api list-objects-v2 --bucket cli --prefix tree/ --query 'length(Contents)'
kvt_grep out '^4[0-9]$'
kvt_expect 0 s3api delete-objects --bucket cli \
	--delete '{"Objects":[{"Key":"tree/a/f2"},{"Key":"tree/a/f3"}],"Quiet":false}'
kvt_grep out '"Key": "tree/a/f2"'
kvt_expect 0 s3api create-multipart-upload --bucket cli --key mp/aborted
uid=$(sed -n 's/.*"UploadId": "\([0-9a-f]*\)".*/\1/p' "$T/out")
[ -n "$uid" ] || fail "no upload id: $(cat "$T/out")"
kvt_expect 0 s3api list-multipart-uploads --bucket cli
kvt_grep out "$uid"
kvt_expect 0 s3api abort-multipart-upload --bucket cli --key mp/aborted --upload-id "$uid"
kvt_expect 0 s3api get-bucket-location --bucket cli
absent mp/aborted

step "presigned GET with curl, curl's own SigV4 for PUT and GET"
url=$(aws --endpoint-url "$E" s3 presign s3://cli/sizes/1048576 --expires-in 120)
case "$url" in *X-Amz-Signature=*) ;; *) fail "not a SigV4 presigned URL: $url" ;; esac
kvt_expect 0 curl -sf -o "$T/presigned" "$url"
cmp "$T/sizes/1048576" "$T/presigned" || fail "presigned GET differs"
kvt_expect 22 curl -sf -o /dev/null "$(echo "$url" | sed 's/X-Amz-Expires=120/X-Amz-Expires=121/')"
# curl signs an upload as an empty body unless told it is unsigned: refused.
kvt_expect 0 sigv4 -o "$T/unsigned" -w '%{http_code}' -T "$T/sizes/4095" "$E/cli/curl%20put/x"
kvt_grep out '^400$'
grep -q XAmzContentSHA256Mismatch "$T/unsigned" || fail "body not checked: $(cat "$T/unsigned")"
kvt_expect 0 sigv4 -f -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$T/sizes/4095" \
	"$E/cli/curl%20put/x"
kvt_expect 0 sigv4 -f -o "$T/curl.back" "$E/cli/curl%20put/x"
cmp "$T/sizes/4095" "$T/curl.back" || fail "curl --aws-sigv4 round trip differs"

step "kvtier-lookup with curl"
printf 'sizes/0\nsizes/1\nsizes/missing\nsizes/4095\n' >"$T/lookup"
kvt_expect 0 sigv4 -f -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" --data-binary @"$T/lookup" \
	"$E/cli?kvtier-lookup"
kvt_grep out '<Count>4</Count><Stored>2</Stored>'
kvt_grep out '<Key><Name>sizes/4095</Name><Tier>hot</Tier><Size>4095</Size></Key>'

step "bad requests answer S3 XML errors"
kvt_expect 0 curl -s -o "$T/anon" -w '%{http_code}' "$E/cli/sizes/1"
kvt_grep out '^403$'
grep -q '<Code>AccessDenied</Code>' "$T/anon" || fail "anonymous GET: $(cat "$T/anon")"
kvt_expect 0 curl -s -o "$T/bad" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
	--user "$GW_ACCESS:wrong" "$E/cli/sizes/1"
kvt_grep out '^403$'
grep -q '<Code>SignatureDoesNotMatch</Code>' "$T/bad" || fail "bad signature: $(cat "$T/bad")"
kvt_expect 0 sigv4 -o "$T/nokey" -w '%{http_code}' "$E/cli/no/such/key"
kvt_grep out '^404$'
grep -q '<Code>NoSuchKey</Code>' "$T/nokey" || fail "missing key: $(cat "$T/nokey")"

step "a client that gives up mid-upload leaves nothing"
head -c 8388608 /dev/urandom >"$T/slow"
kvt_run sigv4 --limit-rate 512K --max-time 1 -T "$T/slow" "$E/cli/abandoned"
[ "$rc" -ne 0 ] || fail "the throttled upload finished within a second"
sleep 1
absent abandoned

step "rm --recursive, rb"
kvt_expect 0 s3 rm --recursive s3://cli/
kvt_expect 0 aws --endpoint-url "$E" s3 ls s3://cli/
[ ! -s "$T/out" ] || fail "bucket not empty after rm --recursive: $(cat "$T/out")"
kvt_expect 0 aws --endpoint-url "$E" s3 rb s3://cli
gw_stop "$GW_PID"
echo "ok"
