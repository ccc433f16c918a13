# tests/lib.sh - what the script tests share; sourced, never run.
#
# A script test drives the real binaries against a scratch store of its own:
# kvt_setup makes a directory under ${TMPDIR:-/tmp}, writes a small
# kvtier.conf there (64M of 4M segments, so a test fills and reclaims
# quickly), exports KVTIER_CONF so that every binary finds it, and removes the
# directory when the script exits, however it exits. Set KVT_KEEP=1 to keep
# it for a post-mortem.
#
# Exit statuses follow automake: 0 pass, 1 fail (`fail`), 77 skip (`skip`,
# for what this machine cannot run, said why).
#
# `make check` sets top_builddir and top_srcdir (AM_TESTS_ENVIRONMENT); run
# by hand from a checkout, both default to the directory above tests/.

kvt_here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(dirname "$kvt_here")}"
: "${top_builddir:=$(dirname "$kvt_here")}"

fail()
{
	echo "FAIL: $*" >&2
	exit 1
}

skip()
{
	echo "SKIP: $*" >&2
	exit 77
}

# poll TRIES CMD...: runs CMD every 0.1 s until it succeeds; returns 1 if
# it has not after TRIES tries.
poll()
{
	_tries=$1
	shift
	_i=1
	until "$@"; do
		[ "$_i" -lt "$_tries" ] || return 1
		_i=$((_i + 1))
		sleep 0.1
	done
}

# wait_until PID LOG SECONDS WHAT CMD...: waits up to SECONDS for CMD to
# succeed while process PID runs (a daemon started in the background, whose
# errors go to LOG); fails with LOG's text, saying WHAT died or did not
# start.
wait_until()
{
	_wu_pid=$1 _wu_log=$2 _wu_secs=$3 _wu_what=$4
	shift 4
	poll $((_wu_secs * 10)) while_alive "$@" ||
		fail "$_wu_what did not start in $_wu_secs s: $(cat "$_wu_log" 2>/dev/null)"
}

while_alive()
{
	"$@" && return 0
	kill -0 "$_wu_pid" 2>/dev/null || fail "$_wu_what died: $(cat "$_wu_log" 2>/dev/null)"
	return 1
}

# gateway_port LOG: the port kvtier-gateway logged it serves S3 on, or nothing.
gateway_port()
{
	sed -n 's/.*serving S3 on .* (port \([0-9]*\)).*/\1/p' "$1" 2>/dev/null | head -n 1
}

gateway_serves()
{
	[ -n "$(gateway_port "$1")" ]
}

# gateway_metrics_port LOG: the port kvtier-gateway logged it serves /metrics
# on (--metrics-listen ADDR:0 lets the kernel pick it), or nothing.
gateway_metrics_port()
{
	sed -n 's/.*serving \/metrics and \/health on .* (port \([0-9]*\)).*/\1/p' "$1" \
		2>/dev/null | head -n 1
}

gateway_metrics_serves()
{
	[ -n "$(gateway_metrics_port "$1")" ]
}

# wait_for_file PATH WHAT: waits up to 30 s for PATH to exist, then fails
# saying WHAT did not happen.
wait_for_file()
{
	poll 300 test -e "$1" || fail "$2"
}

not_running()
{
	! kill -0 "$1" 2>/dev/null
}

# wait_gone PID SECONDS WHAT: waits up to SECONDS for process PID to end,
# then fails saying WHAT is still running.
wait_gone()
{
	poll $(($2 * 10)) not_running "$1" || fail "$3 still runs $2 s on"
}

umount_try()
{
	fusermount3 -u "$1" 2>"$1.umount.err"
}

# fusermount_u DIR: fusermount3 -u DIR, and again for up to 5 s while the
# mount is busy. Another process may be in it for a moment: CI's make check
# -j2 runs other tests beside this one, and one that walks /tmp can stand
# in the mount when it is unmounted (one CI run failed so). If it stays
# busy, the failure names the processes in it.
fusermount_u()
{
	if ! poll 50 umount_try "$1"; then
		_in=$(ls -l /proc/[0-9]*/cwd /proc/[0-9]*/fd 2>/dev/null | grep -F " $1" | head -5)
		fail "fusermount3 -u '$1': $(cat "$1.umount.err"); in it: ${_in:-no process found}"
	fi
	rm -f "$1.umount.err"
}

# A line saying what the test does next, so a failure reads in context.
step()
{
	echo "--- $*"
}

# kvt_write_config FILE DIR: a config for a small store in DIR.
kvt_write_config()
{
	cat >"$1" <<EOF
[store]
dir = $2
capacity = 64M
segment_size = 4M
EOF
}

kvt_cleanup()
{
	if [ -n "${KVT_TMP:-}" ] && [ -d "$KVT_TMP" ]; then
		if [ -n "${KVT_KEEP:-}" ]; then
			echo "kept $KVT_TMP" >&2
		else
			rm -rf "$KVT_TMP"
		fi
	fi
}

# Sets KVT_TMP (scratch), KVT_DIR (the store), KVTIER_CONF and KVTIER.
kvt_setup()
{
	KVT_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-test.XXXXXX") ||
		fail "cannot make a scratch directory in ${TMPDIR:-/tmp}"
	trap kvt_cleanup EXIT
	# A signal exits through the EXIT trap, so the scratch directory goes too.
	trap 'exit 130' INT
	trap 'exit 143' TERM
	KVT_DIR=$KVT_TMP/data
	KVTIER_CONF=$KVT_TMP/kvtier.conf
	export KVTIER_CONF
	kvt_write_config "$KVTIER_CONF" "$KVT_DIR"
	KVTIER=$top_builddir/kvtier
	[ -x "$KVTIER" ] || fail "no kvtier binary at '$KVTIER' (build it first)"
}

# Where tests install what they fetch from npm: the build directory, unless
# KVT_NPM_DIR names another (scripts/test-sanitizers.sh points its builds at
# the main build's, so each package is fetched once).
kvt_npm_dir=${KVT_NPM_DIR:-$top_builddir}

# kvt_npm_install PREFIX SPEC FILE: installs the npm package SPEC into
# PREFIX (a directory under $kvt_npm_dir) unless FILE, which the package
# installs, is there already; under a lock, since several tests may want it
# at once; npm's output goes to PREFIX-npm.log. Skips the test, saying why,
# where npm or the registry is missing, or where npm has not finished in
# 5 minutes (a CI run once lost its whole 20-minute test budget to an npm
# install that never returned).
kvt_npm_install()
{
	[ -e "$3" ] && return 0
	command -v npm >/dev/null || skip "no npm to install $2 (Debian: apt-get install npm)"
	step "installing $2 from npm into $1"
	(flock 9 && { [ -e "$3" ] || timeout -k 10 300 npm install --prefix "$1" \
		--no-audit --no-fund --fetch-timeout=60000 --fetch-retries=2 "$2"; }) \
		9>"$1.lock" >"$1-npm.log" 2>&1 ||
		skip "npm could not install $2 (it is given 5 minutes): $(tail -n 3 "$1-npm.log")"
}

# kvt_run CMD...: runs CMD with its output in $KVT_TMP/out and $KVT_TMP/err,
# and its exit status in $rc, without tripping `set -e`.
kvt_run()
{
	rc=0
	"$@" >"$KVT_TMP/out" 2>"$KVT_TMP/err" || rc=$?
}

# kvt_expect STATUS CMD...: runs CMD (as kvt_run) and fails unless it exits
# with STATUS.
kvt_expect()
{
	kvt_want=$1
	shift
	kvt_run "$@"
	[ "$rc" -eq "$kvt_want" ] ||
		fail "'$*' exited $rc, expected $kvt_want; stderr: $(cat "$KVT_TMP/err")"
}

# kvt_grep WHICH PATTERN: fails unless $KVT_TMP/WHICH (out or err) of the
# last kvt_run matches the extended regular expression PATTERN.
kvt_grep()
{
	grep -Eq -- "$2" "$KVT_TMP/$1" ||
		fail "std$1 does not match '$2'; it was: $(cat "$KVT_TMP/$1")"
}
