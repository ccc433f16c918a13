#!/bin/sh
# Runs the test suite under the sanitizers, each build in its own directory
# so the main build (in the source tree, as scripts/build.sh makes it) is
# left alone:
#   address  build-asan/: the whole `make check` with AddressSanitizer,
#            LeakSanitizer and UndefinedBehaviorSanitizer;
#   thread   build-tsan/: the tests that run the engine from several threads
#            or processes at once, and the gateway under concurrent load,
#            with ThreadSanitizer.
# Usage: scripts/test-sanitizers.sh [address|thread]...   (default: both)
#
# The tree is configured in place, so a true VPATH build (configure run from
# build-asan/ against the source tree) is impossible: automake refuses a
# source tree that is configured itself. Each build directory therefore holds
# a copy of the sources (scripts/copy-sources.sh), refreshed on every run;
# make rebuilds only what changed.
#
# Every sanitizer report goes to a file under BUILD/sanitizer-logs as well as
# to stderr, and the run fails if any file appears: a daemon a test script
# started (the gateway, the mount) may die of a report, or report leaks at
# exit, without the script noticing. Suppressions: tests/sanitizer/*.supp,
# third-party noise only, each entry with its reason.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
jobs=$(nproc)
kinds=${*:-address thread}

# The tests that run threads or processes against one store at once.
tsan_tests="tests/test_segment tests/test_catalog tests/test_object tests/test_commit tests/test_multiproc
	tests/test_cold tests/test_gateway.sh"

run_kind() {
	kind=$1
	case $kind in
	address) dir=build-asan ;;
	thread) dir=build-tsan ;;
	*) echo "test-sanitizers: unknown kind '$kind' (address or thread)" >&2; return 2 ;;
	esac
	start=$(date +%s)
	scripts/copy-sources.sh "$dir"
	logs=$top/$dir/sanitizer-logs
	rm -rf "$logs"
	mkdir -p "$logs"
	(
		cd "$dir"
		if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
			./autogen.sh >/dev/null
		fi
		# -O1: sanitized -O0 code makes the suite several times slower.
		if [ ! -f Makefile ] || [ configure -nt config.status ]; then
			./configure -q --enable-sanitizers="$kind" CFLAGS="-O1 -g"
		fi
		make -s -j"$jobs" >/dev/null
	)
	common="print_stacktrace=1:halt_on_error=1:log_path=$logs/$kind"
	supp=$top/tests/sanitizer
	export ASAN_OPTIONS="$common:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1"
	export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
	export UBSAN_OPTIONS="$common:suppressions=$supp/ubsan.supp"
	export TSAN_OPTIONS="$common:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
	# What the tests fetch from npm lives in the main build (tests/lib.sh).
	export KVT_NPM_DIR="$top"
	status=0
	if [ "$kind" = address ]; then
		make -C "$dir" -j"$jobs" check || status=$?
	else
		# shellcheck disable=SC2086
		make -C "$dir" -j"$jobs" check TESTS="$(echo $tsan_tests)" || status=$?
	fi
	unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS KVT_NPM_DIR
	[ "$status" = 0 ] || scripts/show-failed-tests.sh "$dir"
	# LeakSanitizer stops a process's threads at its exit to scan them; a
	# test that SIGKILLs the process at that moment (the kill -9 rounds of
	# the migrator, FUSE and chaos tests) leaves only "Unable to get
	# registers from thread N" in its log, with no report: said, not failed.
	for f in "$logs"/*; do
		[ -f "$f" ] || continue
		if ! grep -qv 'Unable to get registers from thread' "$f"; then
			echo "test-sanitizers: $kind: $(basename "$f"): a process killed during its leak check: $(head -n 1 "$f")" >&2
			rm -f "$f"
		fi
	done
	reports=$(find "$logs" -type f | wc -l)
	if [ "$reports" -gt 0 ]; then
		echo "test-sanitizers: $kind: $reports sanitizer report(s):" >&2
		for f in "$logs"/*; do
			echo "==== $f" >&2
			head -n 60 "$f" >&2
		done
		status=1
	fi
	echo "test-sanitizers: $kind: $( [ "$status" = 0 ] && echo clean || echo FAILED )" \
		"in $(( $(date +%s) - start )) s"
	return "$status"
}

# run_kind sets `status` for itself (sh has no locals): keep the verdict apart.
failed=0
for kind in $kinds; do
	run_kind "$kind" || failed=1
done
exit "$failed"
