#!/bin/sh
# kvtier's main job, end to end, on embedded defaults in ./scratch: a real
# inference trace (../shared/traces/synthetic_trace.jsonl, the Mooncake
# FAST'25 synthetic workload) replayed through the whole system by
# `kvtier bench trace`: an S3 gateway and a FUSE mount started on a fresh
# store with generated owner-only credentials, G4 a file:// directory,
# conversations offloading and reading back their KV blocks (every byte
# checked), the idle ones demoted to G4 and recalled when they resume; then
# the same replay against an unbounded hot tier and a hot tier without G4,
# a clean shutdown, the report, and a full check of the kvtier store.
#
# Scaled to a small machine (about 3 minutes on 2 cores): every 16th
# conversation of the trace with all its turns (233 requests, 6,553 block
# references over the trace's whole 1,015 s), at 20x speed, 16 KiB blocks,
# conversations idle for 30 s of trace time demoted. KVT_DEMO_TRACE,
# KVT_DEMO_SAMPLE, KVT_DEMO_SPEED, KVT_DEMO_BLOCK and KVT_DEMO_IDLE override
# them. Without the trace, a small generated multi-turn trace is replayed.
#
# Nothing is written outside ./scratch, nothing is left running or mounted.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
scratch="$top/scratch/demo"
kvtier="$top/kvtier"
trace=${KVT_DEMO_TRACE:-$top/../shared/traces/synthetic_trace.jsonl}
sample=${KVT_DEMO_SAMPLE:-16}
speed=${KVT_DEMO_SPEED:-20}
block=${KVT_DEMO_BLOCK:-16K}
idle=${KVT_DEMO_IDLE:-30s}

[ -x "$kvtier" ] || { echo "demo: no kvtier binary in $top: run scripts/build.sh" >&2; exit 1; }
rm -rf "$scratch"
mkdir -p "$scratch"

if [ ! -r "$trace" ]; then
	echo "== no trace at $trace"
	echo "   (it is synthetic_trace.jsonl from Mooncake's FAST25-release/traces; set"
	echo "   KVT_DEMO_TRACE to use another). Replaying a small generated one instead:"
	echo "   40 conversations of 3 turns that share a system prompt."
	trace="$scratch/generated_trace.jsonl"
	python3 - "$trace" <<'PY'
import json, sys
# Each turn repeats the conversation's earlier blocks and adds four; turns
# are 60 s apart, so conversations idle long enough to be demoted.
rows = []
for turn in range(3):
    for c in range(40):
        own = [100000 * (c + 1) + k for k in range(8 + 4 * turn)]
        rows.append({"timestamp": turn * 60000 + c * 1500, "input_length": 512 * (2 + len(own)),
                     "output_length": 16, "hash_ids": [1, 2] + own})
with open(sys.argv[1], "w") as f:
    for r in sorted(rows, key=lambda r: r["timestamp"]):
        f.write(json.dumps(r) + "\n")
PY
	sample=1
	speed=4
fi

via=both
if [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null 2>&1; then
	echo "== no /dev/fuse or fusermount3 here: replaying through S3 only"
	via=s3
fi

set -- "$trace" --via "$via" --sample "$sample" --block-size "$block" --speed "$speed" \
	--idle "$idle" --out "$scratch" --keep
echo "== kvtier bench trace $*"
echo "   three configurations one after another: kvtier (a hot tier of a quarter of"
echo "   the working set, G4 on), an unbounded hot tier, a quarter-size hot tier"
echo "   without G4. Each starts kvtier-gateway and kvtier-fuse on its own store."
# A failed replay (an error, a wrong byte) still gets the check and the
# cleanup check below; the demo then exits with its status.
status=0
"$kvtier" bench trace "$@" || status=$?

echo
echo "== the kvtier store after the replay: every object's checksum (fsck), and its state"
if [ -f "$scratch/kvtier/kvtier.conf" ] && [ -d "$scratch/kvtier/store" ]; then
	"$kvtier" -c "$scratch/kvtier/kvtier.conf" fsck
	"$kvtier" -c "$scratch/kvtier/kvtier.conf" stat
fi

if grep -q "$scratch" /proc/mounts 2>/dev/null; then
	echo "demo: something is still mounted under $scratch" >&2
	exit 1
fi
if [ "$status" -ne 0 ]; then
	echo "demo: the replay reported errors (see above); nothing is left running" >&2
	exit "$status"
fi
echo
echo "== done: nothing is running or mounted. The report is $scratch/report.json,"
echo "   the plots $scratch/hit_ratio.png and $scratch/occupancy.png; the stores"
echo "   stay in $scratch/*/store (remove everything with: rm -rf scratch)"
