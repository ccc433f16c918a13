# tests/s3rver.sh - s3rver (npm) as the partner S3 of a test, sourced after
# tests/lib.sh and kvt_setup (it uses $T for its data and log):
#   s3rver_find            sets S3RVER (installing it with npm into
#                          $kvt_npm_dir/.s3rver if missing), or skips
#   s3rver_start [PORT]    s3rver on PORT (waiting for it to be free: a
#                          restart on the port the test's config names),
#                          else on a free loopback port below the kernel's
#                          ephemeral range, with a bucket g4bucket; sets
#                          PORT and server.
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

# s3rver_port_free PORT: no TCP socket on this machine that a process holds
# has PORT as its local port (a listener, a connection). Those of a stopped
# s3rver left to the kernel (FIN-WAIT-2 while a client keeps its end open,
# TIME-WAIT) do not count: node's SO_REUSEADDR binds over them. Without ss,
# taken as free: s3rver then fails to listen and s3rver_start tries again.
s3rver_port_free()
{
	command -v ss >/dev/null || return 0
	[ -z "$(s3rver_port_users "$1")" ]
}

s3rver_port_users()
{
	ss -Htanp state listening state established state syn-sent state syn-recv \
		state close-wait "( sport = :$1 )" 2>/dev/null
}

# s3rver_pick_port: a free port below the kernel's ephemeral range (where it
# picks the local port of every outgoing connection: 32768-60999 by default,
# and one of another test could hold any port in it), from 10000 up; above
# it where the range leaves too few below.
s3rver_pick_port()
{
	# shellcheck disable=SC2046
	set -- $(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768 60999)
	if [ "$1" -gt 11000 ]; then
		_lo=10000 _hi=$(($1 - 1))
	elif [ "$2" -lt 64535 ]; then
		_lo=$(($2 + 1)) _hi=65535
	else
		_lo=20000 _hi=40000	# nothing outside it: the retries below must do
	fi
	for _ in $(seq 50); do
		_p=$(shuf -i "$_lo-$_hi" -n 1)
		s3rver_port_free "$_p" && break
	done
	echo "$_p"
}

s3rver_start()
{
	mkdir -p "$T/s3"
	started=$(cat "$T/s3rver.log" 2>/dev/null | grep -c "listening" || true)
	for _ in 1 2 3 4 5; do
		if [ -n "${1:-}" ]; then
			# A restart on the port the test's config names: wait for
			# whatever holds it to let go (the s3rver just stopped,
			# another test's socket), up to 60 s.
			PORT=$1
			poll 600 s3rver_port_free "$PORT" ||
				fail "port $PORT s3rver is to restart on is still in use 60 s on: $(s3rver_port_users "$PORT")"
		else
			PORT=$(s3rver_pick_port)
		fi
		# shellcheck disable=SC2086
		"$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$PORT" --configure-bucket g4bucket \
			${S3RVER_TLS:-} >>"$T/s3rver.log" 2>&1 &
		server=$!
		# node takes seconds to start on a loaded machine; a port taken
		# between the check and the listen ends it at once.
		for _ in $(seq 1200); do
			[ "$(grep -c "listening" "$T/s3rver.log")" -gt "$started" ] && return 0
			kill -0 "$server" 2>/dev/null || break
			sleep 0.1
		done
		s3rver_stop
	done
	fail "s3rver did not start: $(cat "$T/s3rver.log")"
}
