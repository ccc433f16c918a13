# tests/s3rver.sh - s3rver (npm) as the partner S3 of a test, sourced after
# tests/lib.sh and kvt_setup (it uses $T for its data and log):
#   s3rver_find            sets S3RVER (installing it with npm into
#                          $kvt_npm_dir/.s3rver if missing), or skips
#   s3rver_start [PORT]    s3rver on PORT, else a free loopback port, with a
#                          bucket g4bucket; sets PORT and server.
#                          $S3RVER_TLS adds options (--key/--cert)
#   s3rver_stop            stops it (call it from the test's EXIT trap)

s3rver_find()
{
	S3RVER=${S3RVER:-$(command -v s3rver || true)}
	if [ -z "$S3RVER" ]; then
		S3RVER=$kvt_npm_dir/.s3rver/node_modules/.bin/s3rver
		kvt_npm_install "$kvt_npm_dir/.s3rver" s3rver@3 "$S3RVER"
	fi
	command -v node >/dev/null || skip "no node to run s3rver"
}

server=
s3rver_stop()
{
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
		server=
	fi
}

s3rver_start()
{
	mkdir -p "$T/s3"
	started=$(cat "$T/s3rver.log" 2>/dev/null | grep -c "listening" || true)
	for _ in 1 2 3 4 5; do
		PORT=${1:-$(shuf -i 20000-40000 -n 1)}
		# shellcheck disable=SC2086
		"$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$PORT" --configure-bucket g4bucket \
			${S3RVER_TLS:-} >>"$T/s3rver.log" 2>&1 &
		server=$!
		for _ in $(seq 100); do
			[ "$(grep -c "listening" "$T/s3rver.log")" -gt "$started" ] && return 0
			kill -0 "$server" 2>/dev/null || break
			sleep 0.1
		done
		s3rver_stop
		sleep 0.5	# the same port again: wait for it to be free
	done
	fail "s3rver did not start: $(cat "$T/s3rver.log")"
}
