#!/bin/sh
# tests/test_gateway_jssdk.sh - kvtier-gateway driven by the AWS SDK for
# JavaScript v3 (tests/gateway/sdk.mjs), with the SDK's default checksums:
# a CRC32 header on every upload, an aws-chunked body with a CRC32 trailer for
# streams, multipart parts with their own CRC32, checksums asked for by name.
#
# The SDK comes from the npm registry, once, into .js-sdk-VERSION in the
# build directory (kvt_npm_dir). Version 3.730.0 is the first that sends checksums by default
# and still runs on Debian 12's Node.js 18.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

command -v node >/dev/null 2>&1 || skip "no node (Debian: apt-get install nodejs npm)"
kvt_setup
# shellcheck source=tests/gateway/lib.sh
. "$top_srcdir/tests/gateway/lib.sh"
T=$KVT_TMP
sdk_version=3.730.0
sdk_dir=$kvt_npm_dir/.js-sdk-$sdk_version
kvt_npm_install "$sdk_dir" "@aws-sdk/client-s3@$sdk_version" \
	"$sdk_dir/node_modules/@aws-sdk/client-s3/package.json"

gw_start jssdk 256M 4M --timeout 5
# Node resolves a module's imports from where the module lies.
cp "$top_srcdir/tests/gateway/sdk.mjs" "$T/sdk.mjs"
ln -s "$sdk_dir/node_modules" "$T/node_modules"
node "$T/sdk.mjs" "$GW_ENDPOINT" "$GW_ACCESS" "$GW_SECRET" ||
	fail "the AWS SDK for JavaScript run failed (gateway log: $GW_LOG)"
gw_stop "$GW_PID"
echo "ok"
