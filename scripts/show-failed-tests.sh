#!/bin/sh
# Prints the last lines of the log of every test that failed in the build
# directory DIR (default: .), so a CI transcript says why, not only which.
# Usage: scripts/show-failed-tests.sh [DIR] [LINES]
dir=${1:-.}
lines=${2:-80}
find "$dir/tests" -name '*.trs' 2>/dev/null | while read -r trs; do
	grep -qE '^:test-result: (FAIL|ERROR|XPASS)' "$trs" || continue
	log=${trs%.trs}.log
	echo "==== last $lines lines of $log" >&2
	tail -n "$lines" "$log" >&2
done
exit 0
