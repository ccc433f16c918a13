#!/bin/sh
# Shows what the background demoter's passes cost on a full store that can
# demote nothing (scripts/bench-demoter-idle.c: a copied store, a partner
# that does not answer, at once or after 100 ms, or its bucket missing),
# for each TREE in turn (a built tree of a commit: the one before a fix,
# the fix), alternating RUNS times. Prints the demoter thread's CPU a
# second and a pass, and counts the engine's log of each run instead of
# showing it.
# Run: [MODES='copy down'] [SESSIONS=3060] [DURATION=10] [RUNS=3] \
#      scripts/bench-demoter-idle.sh TREE...
# (MODES from copy, down, nobucket, slow; each tree configured with
# CFLAGS='-O2 -g' and built with `make libkvtier.la`; scratch under $TMPDIR).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 TREE..." >&2; exit 2; }
modes=${MODES:-copy down} n=${SESSIONS:-3060} secs=${DURATION:-10} runs=${RUNS:-3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs="-lsqlite3 -luring -lcrypto -lisal -linih -ls3 -lcurl -pthread"
k=0
for tree; do
	k=$((k + 1))
	cc -O2 -g -I"$tree" -I"$tree/src" -o "$tmp/bench-$k" "$here/bench-demoter-idle.c" \
		"$tree/.libs/libkvtier.a" $libs
done
i=0
while [ $i -lt "$runs" ]; do
	for m in $modes; do
		k=0
		for tree; do
			k=$((k + 1))
			rm -rf "$tmp/d" && mkdir "$tmp/d"
			printf '== %s, run %d: ' "$tree" $((i + 1))
			nice -n 10 "$tmp/bench-$k" "$tmp/d" "$m" "$n" "$secs" 2>"$tmp/log"
			echo "   log: $(wc -l <"$tmp/log") lines, $(grep -c 'under pressure' "$tmp/log" || :) of them 'under pressure'"
		done
	done
	i=$((i + 1))
done
