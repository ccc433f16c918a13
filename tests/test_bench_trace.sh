#!/bin/sh
# tests/test_bench_trace.sh - `kvtier bench trace` end to end, small.
#
# A Mooncake-format trace made here (12 conversations of two turns that share
# a system prompt; every conversation idles between its turns while the
# others write more than the hot tier holds) is replayed through the real
# kvtier-gateway and a real kvtier-fuse mount, kvtier against the unbounded
# and the no-G4 baselines. The report must add up (hot hits + recalls +
# misses = blocks requested, every block of the trace counted), the lag
# behind the trace clock must be there (p50 <= p99 <= max), the gateway's
# own count of lookups must match the replay's, kvtier must have recalled
# from G4, the hit ratios must be ordered unbounded >= kvtier
# >= no-G4, no byte may be wrong, and nothing may stay mounted or running.
# Then a replay interrupted with SIGINT must stop everything it started.
#
# Without /dev/fuse (or fusermount3) only the S3 half runs, and the test
# exits 77 after it passes, saying that the FUSE half was skipped.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip "no python3 (to make the trace and read the report)"
kvt_setup
T=$KVT_TMP
OUT=$T/replay
via=both
if [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
	via=s3
fi
[ -x "$top_builddir/kvtier-gateway" ] || fail "no kvtier-gateway in '$top_builddir'"

# Whatever this script started is gone when it exits, however it exits.
trace_cleanup()
{
	for m in $(awk -v o="$T" 'index($2, o) == 1 { print $2 }' /proc/mounts); do
		fusermount3 -uz "$m" 2>/dev/null || true
	done
	kvt_cleanup
}
trap trace_cleanup EXIT

# Nothing of OUT left: no mount under it, no process whose command line names it.
nothing_left()
{
	if awk -v o="$OUT" 'index($2, o) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		fail "still mounted under $OUT: $(grep "$OUT" /proc/mounts)"
	fi
	for p in /proc/[0-9]*; do
		[ "$p" = "/proc/$$" ] && continue
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		case $cmd in
		*"$OUT/"*) fail "still running: $cmd" ;;
		esac
	done
}

step "make a trace: 12 conversations, two turns 60 s apart, a shared system prompt"
python3 - "$T/trace.jsonl" <<'PY'
import json, sys
convs, period = 12, 60000
with open(sys.argv[1], "w") as f:
    rows = []
    for turn in range(2):
        for c in range(convs):
            # Blocks 1 and 2 are a system prompt every conversation shares; a
            # later turn repeats the earlier turn's blocks and adds two.
            own = [1000 * (c + 1) + k for k in range(2 + 2 * turn)]
            rows.append({"timestamp": turn * period + c * period // convs,
                         "input_length": 512 * (2 + len(own)), "output_length": 8,
                         "hash_ids": [1, 2] + own})
    for r in rows:
        f.write(json.dumps(r) + "\n")
PY

step "a malformed trace is refused with its line, before anything starts"
# name|trace lines ('\n' between lines)|what stderr must say
while IFS='|' read -r name lines want; do
	printf '%b\n' "$lines" >"$T/bad-$name.jsonl"
	kvt_run "$KVTIER" bench trace "$T/bad-$name.jsonl" --via s3 --out "$T/bad-out"
	[ "$rc" -ne 0 ] || fail "trace '$name' was accepted"
	grep -q -- "$want" "$T/err" || fail "trace '$name': '$want' not in: $(cat "$T/err")"
	[ ! -e "$T/bad-out" ] || fail "trace '$name' made its --out directory"
done <<'EOF'
negative|{"timestamp": 1, "hash_ids": [1, 2]}\n{"timestamp": 2, "hash_ids": [1, -2]}|bad-negative.jsonl:2: expected
unterminated|{"timestamp": 1, "hash_ids": [1, 2|bad-unterminated.jsonl:1: expected
word|{"timestamp": 1, "hash_ids": [1, two]}|bad-word.jsonl:1: expected
no-time|{"hash_ids": [1]}|bad-no-time.jsonl:1: expected
nan-time|{"timestamp": nan, "hash_ids": [1]}|bad-nan-time.jsonl:1: expected
backwards|{"timestamp": 5, "hash_ids": [1]}\n{"timestamp": 4, "hash_ids": [2]}|timestamps go back at request 2
empty||no requests in
EOF

step "replay it via $via: kvtier, unbounded, nog4"
# 256 KiB blocks less the 64-byte extent header fill 4K-aligned extents
# exactly; a 1 MiB-segment hot tier of 4 MiB is a third of the working set.
kvt_run "$KVTIER" bench trace "$T/trace.jsonl" --via "$via" --block-size 262080 \
	--hot-capacity 4M --speed 12 --idle 12s --workers 4 --out "$OUT"
cat "$T/out"
[ "$rc" -eq 0 ] || { cat "$T/err"; fail "bench trace exited $rc"; }
nothing_left
[ -s "$OUT/report.json" ] || fail "no report.json"
for f in kvtier unbounded nog4; do
	[ -s "$OUT/$f/timeline.tsv" ] || fail "no timeline for $f"
	[ ! -e "$OUT/$f/store" ] || fail "the store of $f was left in $OUT"
done
if command -v gnuplot >/dev/null; then
	[ -s "$OUT/hit_ratio.png" ] && [ -s "$OUT/occupancy.png" ] || fail "no plots"
fi

step "the report adds up"
python3 - "$OUT/report.json" <<'PY' || fail "report check failed"
import json, sys
r = json.load(open(sys.argv[1]))
cfg = {c["name"]: c for c in r["configs"]}
assert set(cfg) == {"kvtier", "unbounded", "nog4"}, cfg.keys()
refs = r["trace"]["block_refs"]
for name, c in cfg.items():
    print("%-9s hit %.3f  hot %d recalled %d missed %d of %d, lost %d, wrong bytes %d, errors %d"
          % (name, c["hit_ratio"], c["hot_hits"], c["recalls"], c["misses"], c["blocks"],
             c["lost_after_lookup"], c["wrong_bytes"], c["errors"]))
    assert c["requests"] == r["trace"]["requests"], (name, "requests")
    assert c["blocks"] == refs, (name, "blocks", c["blocks"], refs)
    assert c["hot_hits"] + c["recalls"] + c["misses"] == c["blocks"], (name, "sum")
    assert c["wrong_bytes"] == 0 and c["wrong_blocks"] == 0, (name, "wrong bytes")
    assert c["errors"] == 0, (name, "errors")
    assert abs(c["hit_ratio"] - (c["hot_hits"] + c["recalls"]) / c["blocks"]) < 1e-3
    assert c["latency_ms"]["all"]["lookup"]["n"] == c["requests"], (name, "lookups")
    assert c["writes"] + c["misses_already_stored"] == c["misses"], (name, "writes")
    assert c["latency_ms"]["all"]["write"]["n"] == c["writes"], (name, "write latencies")
    # Keeping up is a measured figure: every request's lag behind its due time.
    lag = c["lag_ms"]
    assert 0 <= lag["p50"] <= lag["p99"] <= lag["max"], (name, "lag", lag)
    assert lag["max"] < 1000 * c["wall_s"], (name, "lag past the whole replay", lag)
    # The lookup timed from the due time adds the lag to the lookup from the
    # send, request by request, so its quantiles can be no lower.
    due, send = c["latency_ms"]["all"]["lookup_from_due"], c["latency_ms"]["all"]["lookup"]
    assert due["n"] == c["requests"], (name, "lookups from due time")
    for q in ("p50", "p99"):
        assert due[q] >= send[q] - 1e-3, (name, "from due < from send", due, send)
    # The gateway counted the S3 lookups the replay sent, no more, no fewer.
    gw = c["gateway_ms"]["KvLookup"]
    assert gw["n"] == c["latency_ms"]["s3"]["lookup"]["n"], (name, "gateway lookups", gw)
    if gw["n"]:
        assert gw["p50_le"] is not None and gw["p50_le"] <= (gw["p99_le"] or 1e9), (name, gw)
k, u, n = cfg["kvtier"], cfg["unbounded"], cfg["nog4"]
assert k["recalls"] > 0, "kvtier recalled nothing from G4"
assert k["demotion_runs"]["objects"] > 0, "kvtier demoted nothing"
assert u["recalls"] == 0 and n["recalls"] == 0, "a baseline recalled"
# Requests of conversations that share a prefix run side by side, so which
# of two writes a lookup sees first is timing: the unbounded baseline, the
# best possible in a replay of one order, can miss a block or two that a
# kvtier replay found (seen once on a loaded machine, 0.575 vs 0.583 of 120).
slack = 3 / refs
assert u["hit_ratio"] + slack >= k["hit_ratio"] >= n["hit_ratio"], "hit ratios out of order"
assert k["hit_ratio"] > n["hit_ratio"], "G4 gained nothing over plain eviction"
print("ordered: unbounded %.3f (+%.3f) >= kvtier %.3f > nog4 %.3f"
      % (u["hit_ratio"], slack, k["hit_ratio"], n["hit_ratio"]))
g = r["goals"]
for key in ("kvtier_lag_p50_s", "kvtier_lag_p99_s", "kvtier_lag_max_s", "kvtier_lookup_p99_ms",
            "kvtier_lookup_from_due_p99_ms", "kvtier_lookup_p99_ms_s3", "kvtier_lookup_p99_ms_fuse"):
    assert key in g, ("goal missing", key)
assert g["kvtier_lag_p50_s"] <= g["kvtier_lag_p99_s"] <= g["kvtier_lag_max_s"], g
assert abs(g["kvtier_lag_p99_s"] * 1000 - k["lag_ms"]["p99"]) < 1, g
print("kvtier lag p50/p99/max %.3f/%.3f/%.3f s" % (g["kvtier_lag_p50_s"], g["kvtier_lag_p99_s"],
                                                  g["kvtier_lag_max_s"]))
PY

step "SIGINT in the middle stops the gateway and unmounts"
OUT2=$T/replay2
"$KVTIER" bench trace "$T/trace.jsonl" --via "$via" --block-size 262080 --speed 2 \
	--configs kvtier --out "$OUT2" >"$T/int.out" 2>"$T/int.err" &
pid=$!
wait_until "$pid" "$T/int.err" 120 "the interrupted replay" grep -q "kvtier-gateway on" "$T/int.out"
sleep 2
kill -INT "$pid"
set +e
wait "$pid"
irc=$?
set -e
[ "$irc" -ne 0 ] || fail "an interrupted replay exited 0"
grep -q "interrupted" "$T/int.err" || fail "no word of the interruption: $(cat "$T/int.err")"
OUT=$OUT2
nothing_left

if [ "$via" = s3 ]; then
	skip "the S3 half passed; the FUSE half needs /dev/fuse and fusermount3"
fi
echo "PASS"
