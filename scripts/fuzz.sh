#!/bin/sh
# Runs a libFuzzer campaign on one fuzz target (tests/fuzz_TARGET.c):
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]
#   scripts/fuzz.sh --merge TARGET   # what the campaigns found that adds
#                                    # coverage goes into the seed corpus
#   scripts/fuzz.sh --list           # the targets
# The targets are built with clang -fsanitize=fuzzer,address,undefined in
# build-fuzz/ (./configure CC=clang --enable-fuzzing on a copy of the sources,
# scripts/copy-sources.sh), away from the main build. The campaign starts
# from the committed seeds (tests/fuzz/corpus/TARGET, only read) and keeps
# what it finds in build-fuzz/corpus/TARGET, so a later campaign goes on from
# there; crashes, leaks and timeouts land in build-fuzz/artifacts/TARGET/.
# A crasher becomes a regression seed by copying it into the seed corpus:
# `make check` replays every seed (tests/fuzz_main.c).
# Output: libFuzzer's log in build-fuzz/logs/TARGET-DATE.log, and one summary
# line: target, seconds, executions, coverage (edges), features, corpus,
# crashes.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
build=$top/build-fuzz
targets=$(sed -n 's|^tests_libfuzzer_fuzz_\(.*\)_SOURCES.*|\1|p' Makefile.am)

usage() {
	echo "usage: $0 TARGET SECONDS [libFuzzer options] | --merge TARGET | --list" >&2
	echo "targets: $(echo $targets)" >&2
	exit 2
}

build() {
	command -v clang >/dev/null || { echo "fuzz: needs clang (apt-get install clang)" >&2; exit 1; }
	mkdir -p "$build"
	# Campaigns run side by side: one build of the tree at a time.
	exec 9>"$build.lock"
	flock 9
	scripts/copy-sources.sh "$build"
	(
		cd "$build"
		if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
			./autogen.sh >/dev/null
		fi
		if [ ! -f Makefile ] || [ configure -nt config.status ]; then
			./configure -q CC=clang --enable-fuzzing CFLAGS="-O1 -g"
		fi
		make -s -j2 "tests/libfuzzer/fuzz_$1" >/dev/null
	)
	flock -u 9
}

known() {
	for t in $targets; do
		[ "$t" = "$1" ] && return 0
	done
	echo "fuzz: no target '$1'" >&2
	usage
}

[ $# -ge 1 ] || usage
case $1 in
--list)
	echo $targets
	exit 0
	;;
--merge)
	[ $# -eq 2 ] || usage
	known "$2"
	build "$2"
	mkdir -p "$build/corpus/$2" "$top/tests/fuzz/corpus/$2"
	# -merge=1 adds to the first directory only inputs with new coverage.
	"$build/tests/libfuzzer/fuzz_$2" -merge=1 "$top/tests/fuzz/corpus/$2" "$build/corpus/$2"
	exit 0
	;;
esac
[ $# -ge 2 ] || usage
target=$1
seconds=$2
shift 2
known "$target"
case $seconds in
'' | *[!0-9]*) usage ;;
esac
build "$target"
work=$build/corpus/$target
art=$build/artifacts/$target
logs=$build/logs
mkdir -p "$work" "$art" "$logs"
log=$logs/$target-$(date -u +%Y%m%dT%H%M%SZ).log
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:print_stacktrace=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
stamp=$build/.fuzz-start-$target
touch "$stamp"
status=0
# Stays in the build tree: targets that write scratch files put them there.
(cd "$build" && TMPDIR=${TMPDIR:-/tmp} "./tests/libfuzzer/fuzz_$target" \
	-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
	-max_len=65536 -artifact_prefix="$art/" "$@" \
	"$work" "$top/tests/fuzz/corpus/$target") >"$log" 2>&1 || status=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1 | cut -d' ' -f2)
crashes=$(find "$art" -type f -newer "$stamp" 2>/dev/null | wc -l)
[ "$status" = 0 ] || crashes=$((crashes > 0 ? crashes : 1))
echo "fuzz: $target ${seconds}s execs=${execs:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corp:-?}" \
	"crashes=$crashes log=$log"
if [ "$status" != 0 ]; then
	grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz_.*broken promise)' "$log" >&2 || tail -n 30 "$log" >&2
	echo "fuzz: artifacts in $art" >&2
fi
exit "$status"
