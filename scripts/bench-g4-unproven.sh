#!/bin/sh
# Shows what g4_claim_unproven()'s and recall_unproven()'s catalog queries
# cost at N cold objects in one bucket, before (BEFORE_TREE: a built tree of
# the commit before the fix) and after (AFTER_TREE), alternating RUNS times.
# Run: scripts/bench-g4-unproven.sh BEFORE_TREE AFTER_TREE [N] [SIZES] [QUERIES] [RUNS]
# (each tree built with `make libkvtier.la`; scratch under $TMPDIR).
set -eu
before=$1 after=$2 n=${3:-200000} sizes=${4:-4096} q=${5:-20} runs=${6:-3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs="-lsqlite3 -luring -lcrypto -lisal -linih -ls3 -lcurl -pthread"
for t in before after; do
	eval tree=\$$t
	flag=; [ $t = after ] && flag=-DAFTER
	cc -O2 $flag -I"$tree" -I"$tree/src" -o "$tmp/bench-$t" "$here/bench-g4-unproven.c" \
		"$tree/.libs/libkvtier.a" $libs
done
i=0
while [ $i -lt "$runs" ]; do
	for t in before after; do
		rm -rf "$tmp/d" && mkdir "$tmp/d"
		echo "== $t, run $((i + 1)): N=$n sizes=$sizes queries=$q"
		nice -n 10 "$tmp/bench-$t" "$tmp/d" "$n" "$sizes" "$q"
	done
	i=$((i + 1))
done
