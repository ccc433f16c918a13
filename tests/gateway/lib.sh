# tests/gateway/lib.sh - starting and stopping kvtier-gateway for the script
# tests; sourced after tests/lib.sh and kvt_setup, never run.
#
# gw_start NAME CAPACITY SEGMENT [ARGS...] makes a store of its own in
# $KVT_TMP/NAME (a config file, a data directory), starts the real gateway on
# 127.0.0.1 with port 0 (the kernel picks a free one, which the gateway
# prints) and waits until it serves. It sets GW_PID, GW_PORT, GW_ENDPOINT and
# GW_LOG (its stderr); the access log is $KVT_TMP/NAME.access. With
# --metrics-listen 127.0.0.1:0 among ARGS, gw_metrics_port then sets
# GW_METRICS_PORT. Every gateway
# started is stopped when the script exits, however it exits.
#
# Users, in $GW_CREDS (mode 0600):
#   $GW_ACCESS / $GW_SECRET                 every bucket
#   $GW_SCOPED_ACCESS / $GW_SCOPED_SECRET   only bucket $GW_SCOPED_BUCKET

GATEWAY=$top_builddir/kvtier-gateway
[ -x "$GATEWAY" ] || fail "no kvtier-gateway binary at '$GATEWAY' (build it first)"

gw_pids=""

gw_cleanup()
{
	for p in $gw_pids; do
		kill -TERM "$p" 2>/dev/null || :
	done
	for p in $gw_pids; do
		wait "$p" 2>/dev/null || :
	done
	kvt_cleanup
}
trap gw_cleanup EXIT

GW_ACCESS=AKIDKVTIERTEST
GW_SECRET=$(head -c 30 /dev/urandom | base64 | tr -d '\n/+=' | cut -c1-40)
GW_SCOPED_ACCESS=AKIDKVTIERSCOPED
GW_SCOPED_SECRET=$(head -c 30 /dev/urandom | base64 | tr -d '\n/+=' | cut -c1-40)
GW_SCOPED_BUCKET=scoped-bucket
GW_CREDS=$KVT_TMP/credentials
(umask 077 && printf '# test users\n%s %s\n%s %s %s\n' "$GW_ACCESS" "$GW_SECRET" \
	"$GW_SCOPED_ACCESS" "$GW_SCOPED_SECRET" "$GW_SCOPED_BUCKET" >"$GW_CREDS")
export GW_ACCESS GW_SECRET GW_SCOPED_ACCESS GW_SCOPED_SECRET GW_SCOPED_BUCKET

# gw_config FILE DIR CAPACITY SEGMENT
gw_config()
{
	cat >"$1" <<EOC
[store]
dir = $2
capacity = $3
segment_size = $4
EOC
}

gw_start()
{
	gw_name=$1 gw_cap=$2 gw_seg=$3
	shift 3
	gw_config "$KVT_TMP/$gw_name.conf" "$KVT_TMP/$gw_name" "$gw_cap" "$gw_seg"
	GW_LOG=$KVT_TMP/$gw_name.err
	# Emptied here, not only by the redirection below, which the background
	# child makes: a NAME started before left its "serving" line, and a
	# gateway_serves that came first read the old gateway's port.
	: >"$GW_LOG"
	"$GATEWAY" -c "$KVT_TMP/$gw_name.conf" --listen 127.0.0.1:0 --credentials "$GW_CREDS" \
		--access-log "$KVT_TMP/$gw_name.access" -v "$@" 2>"$GW_LOG" &
	GW_PID=$!
	gw_pids="$gw_pids $GW_PID"
	# A new store zero-fills its segments first: allow it time.
	wait_until "$GW_PID" "$GW_LOG" 120 "gateway '$gw_name'" gateway_serves "$GW_LOG"
	GW_PORT=$(gateway_port "$GW_LOG")
	GW_ENDPOINT=http://127.0.0.1:$GW_PORT
}

# gw_metrics_port: after gw_start ... --metrics-listen 127.0.0.1:0, sets
# GW_METRICS_PORT to the port the kernel gave the metrics listener, which the
# gateway logs just after the S3 one. (A port found free beforehand, by binding
# port 0 and closing it, another process can take before the gateway does.)
gw_metrics_port()
{
	wait_until "$GW_PID" "$GW_LOG" 60 "the metrics listener of gateway '$gw_name'" \
		gateway_metrics_serves "$GW_LOG"
	GW_METRICS_PORT=$(gateway_metrics_port "$GW_LOG")
}

# gw_check_sigterm_blocked PID: every thread of the gateway but the main one
# blocks SIGTERM, so the main thread's sigtimedwait() takes it (while it waits,
# the kernel shows it unblocked there). A thread that did not (a CI run saw
# it: the store's flusher) dies of it instead, with the whole process,
# whenever the main thread is not waiting at that moment.
gw_check_sigterm_blocked()
{
	for gw_task in /proc/"$1"/task/*; do
		[ "${gw_task##*/}" != "$1" ] || continue
		gw_blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$gw_task/status" 2>/dev/null) || continue
		[ -n "$gw_blk" ] || continue	# the thread ended meanwhile
		# SIGTERM is signal 15: bit 14, the 0x4 in the last four hex digits.
		gw_low=$(printf '%d' "0x${gw_blk#"${gw_blk%????}"}")
		[ $((gw_low & 16384)) -ne 0 ] ||
			fail "gateway $1: thread $(cat "$gw_task/comm") has SIGTERM unblocked (SigBlk $gw_blk)"
	done
}

# gw_stop PID: SIGTERM, and the gateway must exit 0 within 60 s (a bound for
# a hang: a sanitizer build on a loaded machine takes seconds to exit).
gw_stop()
{
	gw_check_sigterm_blocked "$1"
	kill -TERM "$1"
	wait_gone "$1" 60 "gateway $1, sent SIGTERM,"
	gw_rc=0
	wait "$1" || gw_rc=$?
	[ "$gw_rc" -eq 0 ] || fail "gateway $1 exited $gw_rc after SIGTERM"
	gw_pids=$(echo "$gw_pids" | sed "s/ $1\b//")
}
