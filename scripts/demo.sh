#!/bin/sh
# kvtier's main job on embedded defaults, in ./scratch: make a store, offload
# a set of KV-block-sized objects for a few conversations, read them back
# byte-exact, demote idle conversations to G4 (a local directory by default),
# resume one so that it is recalled, check the store and print its state.
#
# Block size and count are scaled to a small machine; KVT_DEMO_BLOCK and
# KVT_DEMO_BLOCKS override them.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
scratch="$top/scratch/demo"
block=${KVT_DEMO_BLOCK:-2097152}
blocks=${KVT_DEMO_BLOCKS:-48}
sessions=4

rm -rf "$scratch"
mkdir -p "$scratch/in" "$scratch/out"
cat > "$scratch/kvtier.conf" <<CONF
# Written by scripts/demo.sh: a small hot tier in the scratch directory.
[store]
dir = $scratch/data
capacity = 1G
segment_size = 64M
CONF
export KVTIER_CONF="$scratch/kvtier.conf"
kvtier="$top/kvtier"

echo "== kvtier demo: $blocks blocks of $block bytes over $sessions conversations"
"$kvtier" init
"$kvtier" mb llama3-8b

# Each block is a file of random bytes, stored under conversation/layer-block keys.
i=0
start=$(date +%s.%N)
while [ "$i" -lt "$blocks" ]; do
	conv=$((i % sessions))
	head -c "$block" /dev/urandom > "$scratch/in/$i"
	"$kvtier" put --session "conv-$conv" llama3-8b "conv-$conv/block-$i" "$scratch/in/$i"
	i=$((i + 1))
done
mid=$(date +%s.%N)
i=0
while [ "$i" -lt "$blocks" ]; do
	conv=$((i % sessions))
	"$kvtier" get llama3-8b "conv-$conv/block-$i" "$scratch/out/$i"
	cmp -s "$scratch/in/$i" "$scratch/out/$i" || { echo "block $i differs" >&2; exit 1; }
	i=$((i + 1))
done
end=$(date +%s.%N)
echo "== stored and read back $blocks blocks byte-exact"
python3 - "$start" "$mid" "$end" "$blocks" "$block" <<'PY'
import sys
s, m, e, n, b = map(float, sys.argv[1:])
mb = n * b / 1e6
print(f"   put {mb:.0f} MB in {m - s:.2f} s, get in {e - m:.2f} s (one CLI process per block)")
PY
echo "== demotion: every conversation idle, to G4 in $scratch/data/g4"
"$top/kvtier-migrate" --idle 0s
"$kvtier" head llama3-8b conv-2/block-2 | grep '^tier'
echo "== conversation conv-2 resumes: its blocks come back from G4 on read"
i=2
while [ "$i" -lt "$blocks" ]; do
	"$kvtier" get llama3-8b "conv-2/block-$i" "$scratch/out/$i"
	cmp -s "$scratch/in/$i" "$scratch/out/$i" || { echo "recalled block $i differs" >&2; exit 1; }
	i=$((i + sessions))
done
"$kvtier" head llama3-8b conv-2/block-2 | grep '^tier'
echo "   recalled $(( (blocks - 2 + sessions - 1) / sessions )) blocks byte-exact"
echo "== listing"
"$kvtier" ls llama3-8b
echo "== fsck"
"$kvtier" fsck
echo "== stat"
"$kvtier" stat
rm -rf "$scratch/in" "$scratch/out"
echo "== done: the store stays in $scratch/data (remove with: rm -rf scratch)"
