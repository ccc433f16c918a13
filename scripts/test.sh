#!/bin/sh
# README command two: install what the tests need, build, run the whole suite.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
status=0
make -j"$(nproc)" check || status=$?
[ "$status" = 0 ] || scripts/show-failed-tests.sh .
# One closing line in the plain form every CI reader understands.
if [ -f test-suite.log ]; then
	count() { sed -n "s/^# $1: *\([0-9]*\).*/\1/p" test-suite.log | head -n 1; }
	echo "$(count PASS) passed, $(($(count FAIL) + $(count ERROR) + $(count XPASS))) failed, $(count SKIP) skipped"
fi
exit "$status"
