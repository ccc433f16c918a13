#!/bin/sh
# tests/test_migrate.sh - kvtier-migrate end to end against the file:// G4:
# the real binaries on scratch stores. Idle sessions are demoted (kvtier head
# says cold, G4 holds the objects and a manifest per session), kvtier get
# recalls them byte-exact, a second run is locked out with 75, kill -9 at
# random points never loses or duplicates anything and a re-run finishes,
# and a second store over the same G4 imports a session and reads it; the
# listing of multipart uploads that starts a run against S3 is tried again
# when the partner answers 503; an import that lands between a demotion's
# owner check and its manifest write (an S3 partner of a few lines that
# honours If-Match) is not written over, and its copies stay. A session
# whose manifest name is over NAME_MAX gets one under its SHA-256.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

kvt_setup
T=$KVT_TMP
K=$KVTIER
M=$top_builddir/kvtier-migrate
G4=$T/g4
[ -x "$M" ] || fail "no kvtier-migrate binary at '$M' (build it first)"
cat >>"$KVTIER_CONF" <<EOF
[g4]
url = file://$G4
EOF

tier_is()	# BUCKET KEY TIER
{
	kvt_expect 0 "$K" head "$1" "$2"
	kvt_grep out "^tier: +$3$"
}

g4_files()	# objects G4 holds (not manifests, not temporaries)
{
	find "$G4" \( -path "$G4/.kvtier/manifests" -o -path "$G4/.kvtier/tmp" \) -prune \
		-o -type f -name '*%' -print | wc -l
}

g4_name()	# BUCKET KEY [CONF]: the name of its G4 copy, as kvtier head gives it
{
	kvt_expect 0 "$K" -c "${3:-$KVTIER_CONF}" head "$1" "$2"
	sed -n 's/^g4: *//p' "$KVT_TMP/out"
}

g4_tmp_files()
{
	find "$G4/.kvtier/tmp" -type f 2>/dev/null | wc -l
}

step "a store with four sessions, one object pinned"
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb models
n=0
for s in s1 s2 s3 s4; do
	for size in 0 1 4096 1048577 3000000; do
		head -c "$size" /dev/urandom >"$T/in.$s.$size"
		kvt_expect 0 "$K" put models "$s/blk$size" "$T/in.$s.$size"
		n=$((n + 1))
	done
done
echo pinned >"$T/in.pin"
kvt_expect 0 "$K" put --pin models s1/pinned "$T/in.pin"

step "usage and configuration errors exit 2"
kvt_expect 2 "$M" --idle forever
kvt_grep err "bad --idle 'forever'"
kvt_expect 2 "$M" --session nosession
kvt_expect 2 "$M" --recall models/s1 --import models/s1
kvt_expect 2 "$M" extra-argument
kvt_expect 2 "$M" --limit-rate fast
kvt_grep err "bad --limit-rate 'fast'"
kvt_expect 2 "$M" --jobs 65
printf '[g4]\nurl = ftp://x\n' >"$T/bad.conf"
kvt_expect 2 "$M" -c "$T/bad.conf"
kvt_grep err "url must be file:///DIR, s3://BUCKET/PREFIX or none"
printf '[store]\ndir = %s\n[g4]\nurl = none\n' "$KVT_DIR" >"$T/none.conf"
kvt_expect 2 "$M" -c "$T/none.conf" --idle 0s
kvt_grep err "url = none in .*none.conf: this node has no cold tier"
{ sed '/^\[g4\]/,$d' "$KVTIER_CONF" &&
	printf '[g4]\nurl = s3://b/p\nendpoint = http://127.0.0.1:1\ncredentials = %s\n' "$T/g4keys"
} >"$T/down.conf"
kvt_expect 2 "$M" -c "$T/down.conf" --idle 0s
kvt_grep err "cannot open g4 's3://b/p' \(see \[g4\] in .*down.conf\)"
(umask 077 && printf 'access_key = AK\nsecret_key = SK\n' >"$T/g4keys")

step "a partner that refuses connections is no configuration error: exit 1, named"
kvt_expect 1 "$M" -c "$T/down.conf" --idle 0s
kvt_grep err "^kvtier-migrate: demote: g4 'http://127.0.0.1:1' does not answer: nothing was moved; the next run tries again$"

step "nothing is idle for 24h (the default)"
kvt_expect 0 "$M"
kvt_grep err "^kvtier-migrate: demote: 0 sessions, 0 objects, 0 bytes in .*, 0 failures$"
# -q, as cron runs it: nothing printed, for cron mails what is.
kvt_expect 0 "$M" -q
[ ! -s "$KVT_TMP/err" ] || fail "a quiet run that did its work printed: $(cat "$KVT_TMP/err")"

step "--dry-run --json counts and moves nothing"
kvt_expect 0 "$M" --idle 0s --dry-run --json
kvt_grep out "^\{\"action\":\"demote\",\"dry_run\":true,\"sessions\":4,\"objects\":$n,"
tier_is models s1/blk4096 hot

step "a second run while one holds the lock exits 75"
# The lock is held from before the first run until after the second: held
# for a fixed 3 s from 0.5 s before, the runs of a loaded sanitizer build
# could start after it was gone. Bounded, and it lets go once $T goes.
timeout 120 flock "$KVT_DIR/migrate.lock" sh -c \
	'touch "$1"; while [ -e "$1" ]; do sleep 0.05; done' sh "$T/lock.held" &
locker=$!
wait_for_file "$T/lock.held" "flock did not take migrate.lock"
kvt_expect 75 "$M" --idle 0s
kvt_grep err "another run holds '.*migrate.lock'"
kvt_expect 75 "$M" --idle 0s -q
[ ! -s "$KVT_TMP/err" ] || fail "a quiet run locked out printed: $(cat "$KVT_TMP/err")"
rm "$T/lock.held"
wait "$locker" || fail "the lock holder failed"

step "demote everything idle: cold, in G4 with manifests"
kvt_expect 0 "$M" --idle 0s
kvt_grep err "^kvtier-migrate: demote: 4 sessions, $n objects, [0-9]+ bytes in .* 0 failures$"
for s in s1 s2 s3 s4; do
	tier_is models "$s/blk3000000" cold
	[ -f "$G4/.kvtier/manifests/models/$s.json%" ] || fail "no manifest for session $s"
done
tier_is models s1/pinned hot
[ "$(g4_files)" -eq "$n" ] || fail "G4 holds $(g4_files) objects, expected $n"
# Each copy is under the store's id, its key and its version.
id=$("$K" store-id | sed -n 's/^id: *//p')
name=$(g4_name models s2/blk1048577)
echo "$name" | grep -Eq "^\.kvtier/stores/$id/models/s2/blk1048577~[0-9a-f]{16}$" ||
	fail "the copy of s2/blk1048577 is named '$name'"
[ -f "$G4/$name%" ] || fail "G4 holds no '$name'"
[ "$(g4_name models s1/pinned)" = - ] || fail "kvtier head names a copy of s1/pinned"
grep -q "\"key\": \"s2/blk1048577\", \"g4_key\": \"$name\", \"size\": 1048577" \
	"$G4/.kvtier/manifests/models/s2.json%" || fail "manifest of s2 lacks blk1048577"
kvt_expect 0 "$K" stat
kvt_grep out "tiers: +1 hot, 0 demoting, $n cold, 0 recalling"
kvt_grep out "demoted to G4: +$n$"

step "kvtier get recalls byte-exact"
for size in 0 1 4096 1048577 3000000; do
	kvt_expect 0 "$K" get models "s1/blk$size" "$T/back"
	cmp "$T/in.s1.$size" "$T/back" || fail "s1/blk$size came back different"
	tier_is models "s1/blk$size" hot
done

step "--recall brings a whole session back"
kvt_expect 0 "$M" --recall models/s2
kvt_grep err "^kvtier-migrate: recall: 1 sessions, 5 objects"
tier_is models s2/blk3000000 hot
kvt_expect 0 "$K" get models s2/blk3000000 "$T/back"
cmp "$T/in.s2.3000000" "$T/back" || fail "recalled s2/blk3000000 differs"
kvt_expect 0 "$K" stat
kvt_grep out "recalled from G4: +10$"

step "kill -9 at random points, 30 rounds; a re-run finishes without duplicates"
rounds=0
midway=0
while [ "$rounds" -lt 30 ]; do
	# Make work: new versions to upload, and a session to recall.
	for s in s1 s2 s3; do
		for size in 1048577 3000000; do
			head -c "$size" /dev/urandom >"$T/in.$s.$size"
			kvt_expect 0 "$K" put models "$s/blk$size" "$T/in.$s.$size"
		done
	done
	kvt_expect 0 "$M" --recall models/s4
	"$M" --idle 0s --jobs 4 -q 2>/dev/null &
	pid=$!
	delay=$(shuf -i 0-200 -n 1)
	sleep "$(printf '0.%03d' "$delay")"
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rounds=$((rounds + 1))
	# Count the rounds the kill caught half way: objects left demoting.
	kvt_expect 0 "$K" stat
	grep -Eq "tiers: .* 0 demoting" "$T/out" || midway=$((midway + 1))
done
kvt_expect 0 "$M" --idle 0s --jobs 3
kvt_grep err " 0 failures$"
kvt_expect 0 "$K" stat
kvt_grep out "tiers: +1 hot, 0 demoting, $n cold, 0 recalling"
[ "$(g4_files)" -eq "$n" ] || fail "G4 holds $(g4_files) objects after kills, expected $n"
[ "$(g4_tmp_files)" -eq 0 ] || fail "temporary files left in G4: $(g4_tmp_files)"
for s in s1 s2 s3 s4; do
	for size in 0 1 4096 1048577 3000000; do
		kvt_expect 0 "$K" get models "$s/blk$size" "$T/back"
		cmp "$T/in.$s.$size" "$T/back" || fail "$s/blk$size differs after the kills"
	done
done
kvt_expect 0 "$K" fsck
echo "    $rounds rounds, $midway killed with objects demoting"

step "--recall-keys brings a list back, in parallel, rate-limited"
kvt_expect 0 "$M" --idle 0s
printf '# two blocks\nmodels/s1/blk3000000\n\nmodels/s3/blk1048577\nmodels/nosuch\n' >"$T/keys"
kvt_expect 1 "$M" --recall-keys "$T/keys" --jobs 2 --limit-rate 20M
kvt_grep err "^kvtier-migrate: recall: 0 sessions, 2 objects, 4048577 bytes in .*, 1 failures$"
tier_is models s1/blk3000000 hot
tier_is models s3/blk1048577 hot
tier_is models s3/blk3000000 cold
# A line holding a NUL byte was the key cut at the NUL (s3/blk3000000 came
# back, which no line names); a directory read as an empty file, and the
# run recalled nothing and exited 0. Both are refused now (exit 2).
printf 'models/s3/blk3000000\000junk\n' >"$T/keys-nul"
kvt_expect 2 "$M" --recall-keys "$T/keys-nul"
kvt_grep err "^kvtier-migrate: '.*/keys-nul' line 1 holds a NUL byte"
tier_is models s3/blk3000000 cold
kvt_expect 2 "$M" --recall-keys "$T"
kvt_grep err "^kvtier-migrate: cannot read '$T': Is a directory$"
# Blank lines are skipped also when they hold spaces or tabs (such a line
# was a key, and a failure), and a CR before the LF is no part of a key.
printf ' \t\r\nmodels/s3/blk3000000\r\n' >"$T/keys-crlf"
kvt_expect 0 "$M" --recall-keys "$T/keys-crlf"
kvt_grep err "^kvtier-migrate: recall: 0 sessions, 1 objects, 3000000 bytes in .*, 0 failures$"
tier_is models s3/blk3000000 hot

step "a second store over the same G4 imports a session and reads it"
kvt_expect 0 "$M" --session models/s3
tier_is models s3/blk1048577 cold
B=$T/b.conf
cat >"$B" <<EOF
[store]
dir = $T/datab
capacity = 64M
segment_size = 4M
[g4]
url = file://$G4
EOF
kvt_expect 0 "$K" -c "$B" init
# Before any import, B has no bucket 'models': said so, not "No such file".
kvt_expect 1 "$M" -c "$B" --recall models/s3
kvt_grep err "recall: no bucket 'models' in this store; .* imported first"
kvt_expect 1 "$M" -c "$B" --import models/nosuch
kvt_grep err "import: G4 holds no manifest of session 'nosuch' of bucket 'models'"
kvt_expect 0 "$M" -c "$B" --import models/s3 --json
kvt_grep out "\"action\":\"import\",\"dry_run\":false,\"sessions\":1,\"objects\":5,"
kvt_expect 0 "$K" -c "$B" head models s3/blk3000000
kvt_grep out "^tier: +cold$"
for size in 0 1 4096 1048577 3000000; do
	kvt_expect 0 "$K" -c "$B" get models "s3/blk$size" "$T/back"
	cmp "$T/in.s3.$size" "$T/back" || fail "s3/blk$size read on the second store differs"
done
kvt_expect 0 "$K" -c "$B" head models s3/blk3000000
kvt_grep out "^tier: +hot$"

step "two stores with an object each at one key keep their own G4 copies"
# Both copies were named BUCKET/KEY: store B's upload of its conv-1/b0 (in
# a session of its own) went over A's copy, and A's read failed its
# CRC32C; B's sweep of its deleted conv-2/b0 deleted A's copy.
for f in a1 b1 a2 b2; do
	head -c 70000 /dev/urandom >"$T/in.$f"
done
kvt_expect 0 "$K" mb llama
kvt_expect 0 "$K" -c "$B" mb llama
kvt_expect 0 "$K" put llama conv-1/b0 "$T/in.a1"
kvt_expect 0 "$K" -c "$B" put --session b-1 llama conv-1/b0 "$T/in.b1"
kvt_expect 0 "$M" --session llama/conv-1
kvt_expect 0 "$M" -c "$B" --session llama/b-1
tier_is llama conv-1/b0 cold
kvt_expect 0 "$K" get llama conv-1/b0 "$T/back"
cmp "$T/in.a1" "$T/back" || fail "A's conv-1/b0 differs once B demoted its own"
kvt_expect 0 "$K" -c "$B" get llama conv-1/b0 "$T/back"
cmp "$T/in.b1" "$T/back" || fail "B's conv-1/b0 differs"
kvt_expect 0 "$K" put llama conv-2/b0 "$T/in.a2"
kvt_expect 0 "$K" -c "$B" put --session b-2 llama conv-2/b0 "$T/in.b2"
kvt_expect 0 "$M" -c "$B" --session llama/b-2
kvt_expect 0 "$M" --session llama/conv-2
kvt_expect 0 "$K" -c "$B" rm llama conv-2/b0
kvt_expect 0 "$M" -c "$B" --idle 0s
tier_is llama conv-2/b0 cold
kvt_expect 0 "$K" get llama conv-2/b0 "$T/back"
cmp "$T/in.a2" "$T/back" || fail "A's conv-2/b0 differs once B swept its own"

step "a recall of a copy put over or deleted in G4 says so"
# Over one G4, another node may put over a copy or sweep it away: the read
# said "File too large" or "No such file or directory", naming no copy.
tier_is models s3/blk4096 cold
name=$(g4_name models s3/blk4096)
C4="$G4/$name%"
cp "$C4" "$T/c4"
cat "$T/c4" "$T/c4" >"$C4"
kvt_expect 1 "$K" get models s3/blk4096 "$T/back"
kvt_grep err "cannot recall 'models/s3/blk4096': g4's copy '$name' is longer than its 4096 bytes, so not this object's"
mv "$C4" "$T/c4.long"
kvt_expect 1 "$K" get models s3/blk4096 "$T/back"
kvt_grep err "cannot recall 'models/s3/blk4096': g4 'file://$G4' holds no copy '$name' \(deleted since it was demoted\)"
cp "$T/c4" "$C4"
kvt_expect 0 "$K" get models s3/blk4096 "$T/back"
cmp "$T/in.s3.4096" "$T/back" || fail "s3/blk4096 differs once its copy is back"

step "a G4 copy the sweep cannot delete does not stop later runs"
# The copy of a deleted key turned into a directory: its delete fails
# (EISDIR), as a partner that refuses DeleteObject would. Every run exited
# 2, "cannot open g4", and demoted nothing while it stayed.
echo sweep >"$T/in.sweep"
kvt_expect 0 "$K" put models s5/gone "$T/in.sweep"
kvt_expect 0 "$M" --session models/s5
name=$(g4_name models s5/gone)
kvt_expect 0 "$K" rm models s5/gone
rm -f "$G4/$name%"
mkdir -p "$G4/$name%/blocker"
kvt_expect 0 "$K" put models s6/new "$T/in.sweep"
# The run goes on, but fails: only logged, it said "0 failures" and exited
# 0, and a nightly cron job never told that a deleted key stayed in G4.
kvt_expect 1 "$M" --idle 0s
kvt_grep err "cannot delete '$name' from g4"
kvt_grep err "^kvtier-migrate: demote: [0-9]+ sessions, [0-9]+ objects, .*, 1 failures$"
tier_is models s6/new cold
rm -rf "$G4/$name%"
kvt_expect 0 "$M" --idle 0s
kvt_run grep -q "cannot delete" "$KVT_TMP/err"
[ "$rc" -ne 0 ] || fail "the sweep still fails once the copy can go: $(cat "$KVT_TMP/err")"
[ ! -e "$G4/.kvtier/manifests/models/s5.json%" ] || fail "s5's manifest outlived its last object"

step "--dry-run tidies nothing in G4: a deleted key's copy and manifest stay until a real run"
# The sweep ran in dry runs too, and deleted what "moves nothing" promised
# to leave.
kvt_expect 0 "$K" put models s8/gone "$T/in.sweep"
kvt_expect 0 "$M" --session models/s8
C8="$G4/$(g4_name models s8/gone)%"
[ -f "$C8" ] || fail "s8/gone was not demoted"
kvt_expect 0 "$K" rm models s8/gone
kvt_expect 0 "$M" --idle 0s --dry-run
kvt_grep err "^kvtier-migrate: demote \(dry run\): .*, 0 failures$"
[ -f "$C8" ] || fail "--dry-run deleted the G4 copy of s8/gone"
[ -f "$G4/.kvtier/manifests/models/s8.json%" ] || fail "--dry-run deleted the manifest of s8"
kvt_expect 0 "$M" --idle 0s
[ ! -e "$C8" ] || fail "the run after the dry run left the copy of s8/gone"
[ ! -e "$G4/.kvtier/manifests/models/s8.json%" ] || fail "s8's manifest outlived its last object"

step "a session whose copies G4 refuses fails the run, named; the other sessions go"
# A file where the directory of sa's copies goes: its puts fail (ENOTDIR),
# as a partner refusing that session's keys would, and it answers sb.
echo one >"$T/in.one"
for k in sa/a sa/b sb/a; do
	kvt_expect 0 "$K" put models "$k" "$T/in.one"
done
: >"$G4/.kvtier/stores/$id/models/sa"
kvt_expect 1 "$M" --idle 0s
kvt_grep err "cannot demote 2 objects of session 'sa' of bucket 'models'; they stay hot for the next run"
kvt_grep err "^kvtier-migrate: demote: [0-9]+ sessions, [0-9]+ objects, .*, 2 failures$"
tier_is models sa/a demoting
tier_is models sb/a cold
rm "$G4/.kvtier/stores/$id/models/sa"
kvt_expect 0 "$M" --idle 0s
tier_is models sa/b cold

step "a manifest of a newer format is refused, neither imported nor written over"
# Nodes of one G4 are upgraded one at a time: one still on this kvtier meets
# manifests a newer one wrote. Read as this format, they were imported as
# it understood them, and a demotion here wrote them over in this format.
echo newer >"$T/in.newer"
kvt_expect 0 "$K" put models s7/a "$T/in.newer"
kvt_expect 0 "$M" --session models/s7
MF="$G4/.kvtier/manifests/models/s7.json%"
sed -i 's/"kvtier_manifest": 2,/"kvtier_manifest": 3,/' "$MF"
cp "$MF" "$T/mf.newer"
kvt_expect 1 "$M" -c "$B" --import models/s7
kvt_grep err "the manifest '.kvtier/manifests/models/s7.json' in g4 is of format 3, which a newer kvtier wrote; this one reads format 2"
kvt_expect 1 "$K" -c "$B" head models s7/a
kvt_expect 0 "$K" put models s7/b "$T/in.newer"
# A run that cannot demote a session fails, counting what stays hot: it
# logged the refusal, said "0 failures" and exited 0, and a nightly cron
# job never told anyone. Other sessions of the run still go.
echo other >"$T/in.other"
kvt_expect 0 "$K" put models s8/a "$T/in.other"
kvt_expect 1 "$M" --idle 0s
kvt_grep err "is of format 3, which a newer kvtier wrote; this one reads format 2: session 's7' of bucket 'models' is left alone"
kvt_grep err "cannot demote session 's7' of bucket 'models'"
kvt_grep err "^kvtier-migrate: demote: [0-9]+ sessions, [0-9]+ objects, .*, 1 failures$"
cmp -s "$MF" "$T/mf.newer" || fail "the newer manifest was written over: $(cat "$MF")"
tier_is models s7/b hot
tier_is models s8/a cold
kvt_expect 1 "$M" --session models/s7 --json
kvt_grep out "\"action\":\"demote\",.*\"objects\":0,.*\"failures\":1,"
# Put back in this format for the steps that follow.
sed -i 's/"kvtier_manifest": 3,/"kvtier_manifest": 2,/' "$MF"

step "a key without '/' is plain cache to reclaim, but a session of its own here"
# docs/operations.md said it had no session; head, stat and the migrator
# have always made it one of one object, named by the key.
echo plain >"$T/in.plain"
kvt_expect 0 "$K" put models plainkey "$T/in.plain"
kvt_expect 0 "$K" head models plainkey
kvt_grep out "^session: +plainkey$"
kvt_expect 0 "$M" --session models/plainkey
kvt_grep err "^kvtier-migrate: demote: 1 sessions, 1 objects"
tier_is models plainkey cold
[ -f "$G4/.kvtier/manifests/models/plainkey.json%" ] || fail "no manifest for session plainkey"
kvt_expect 0 "$K" get models plainkey "$T/back"
cmp "$T/in.plain" "$T/back" || fail "plainkey came back different"
tier_is models plainkey hot

step "a session whose manifest name the directory cannot hold goes under its SHA-256, and imports"
# "SESSION.json" of a session of one component of 252 bytes is 257 bytes,
# over NAME_MAX: each run uploaded its objects, failed to write the
# manifest and left them demoting; none went cold, no store could import it.
ls=$(printf '%0252d' 5)
printf 'long session' >"$T/in.ls"
kvt_expect 0 "$K" put models "$ls/blk" "$T/in.ls"
kvt_expect 0 "$M" --session "models/$ls"
kvt_grep err "^kvtier-migrate: demote: 1 sessions, 1 objects, 12 bytes .* 0 failures$"
tier_is models "$ls/blk" cold
h=$(printf '%s' "$ls" | sha256sum | cut -d' ' -f1)
[ -f "$G4/.kvtier/manifests/_sha256/models/$h.json%" ] ||
	fail "no manifest of the session of 252 bytes under its SHA-256"
kvt_expect 0 "$M" -c "$B" --import "models/$ls"
kvt_grep err "^kvtier-migrate: import: 1 sessions, 1 objects"
kvt_expect 0 "$K" -c "$B" get models "$ls/blk" "$T/back"
cmp "$T/in.ls" "$T/back" || fail "the long session's object differs on the second store"

step "a 503 on the listing of multipart uploads that starts a run is tried again"
# It ended the run with exit 1, "nothing was moved", where every other
# request to the partner is tried again. An S3 partner of a few lines
# answers the listing 503 SlowDown twice, then with no uploads.
timeout 120 python3 - "$T/fake.log" >"$T/fake.port" <<'PY' &
import http.server, sys
log = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    busy = 2
    def log_message(self, *a):
        pass
    def answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    def do_GET(self):
        log.write(self.command + " " + self.path + "\n")
        log.flush()
        if "uploads" not in self.path:
            return self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
        if H.busy > 0:
            H.busy -= 1
            return self.answer(503, b"<Error><Code>SlowDown</Code><Message>later</Message></Error>")
        self.answer(200, b"<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                    b"</ListMultipartUploadsResult>")
    do_HEAD = do_GET
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
fake=$!
trap 'kill "$fake" 2>/dev/null || :; kvt_cleanup' EXIT
poll 600 test -s "$T/fake.port" || fail "the fake partner did not start"
printf 'access_key = a\nsecret_key = b\n' >"$T/fake.keys"
chmod 600 "$T/fake.keys"
kvt_write_config "$T/fake.conf" "$T/fake"
cat >>"$T/fake.conf" <<EOF
[g4]
url = s3://g4bucket/kvtier
endpoint = http://127.0.0.1:$(cat "$T/fake.port")
credentials = $T/fake.keys
EOF
kvt_expect 0 "$K" -c "$T/fake.conf" init
kvt_expect 0 "$M" -c "$T/fake.conf" --idle 0s
kvt_grep err "the listing of multipart uploads: .*; try 3 of"
kvt_grep err " 0 failures$"
n=$(grep -c uploads "$T/fake.log")
[ "$n" -eq 3 ] || fail "the listing was asked $n times, not 3"
kill "$fake" 2>/dev/null || :

step "an import that lands between a demotion's owner check and its manifest write is not written over"
# Another node's kvtier-migrate --import names its store in the manifest.
# The demotion asked G4 for the owner, then wrote the manifest naming this
# store again whatever had landed in between, and its sweep deleted the
# copies the importer had taken. An S3 partner of a few lines that honours
# If-Match / If-None-Match on PUT lands such an import (the owner in the
# manifest changed) just before the demotion's write while $T/race.arm is
# there: the write is refused with 412, and the copies stay.
timeout 300 python3 - "$T/cas.log" "$T/race.arm" >"$T/cas.port" <<'PY' &
import hashlib, http.server, os, re, sys
log = open(sys.argv[1], "a")
arm = sys.argv[2]
objs = {}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, code, body=b"", etag=None):
        self.send_response(code)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    def note(self, extra=""):
        log.write("%s %s%s\n" % (self.command, self.path, extra))
        log.flush()
    def do_GET(self):
        self.note()
        if "uploads" in self.path:
            return self.answer(200, b"<ListMultipartUploadsResult><IsTruncated>false"
                               b"</IsTruncated></ListMultipartUploadsResult>")
        if self.path not in objs:
            return self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
        body, etag = objs[self.path]
        self.answer(200, body, etag)
    do_HEAD = do_GET
    def do_DELETE(self):
        self.note()
        objs.pop(self.path, None)
        self.answer(204)
    def do_PUT(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        im, inm = self.headers.get("If-Match"), self.headers.get("If-None-Match")
        self.note(" if-match=%s if-none-match=%s" % (im, inm))
        if "/.kvtier/manifests/" in self.path and self.path in objs and os.path.exists(arm):
            os.unlink(arm)      # the other node's import lands now
            other = re.sub(rb'"owner": "[0-9a-f]{16}"', b'"owner": "00000000000000ff"',
                           objs[self.path][0])
            objs[self.path] = (other, '"%s"' % hashlib.md5(other).hexdigest())
        cur = objs.get(self.path)
        if (im and (not cur or im != cur[1])) or (inm == "*" and cur):
            return self.answer(412, b"<Error><Code>PreconditionFailed</Code></Error>")
        etag = '"%s"' % hashlib.md5(body).hexdigest()
        objs[self.path] = (body, etag)
        self.answer(200, b"", etag)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
cas=$!
trap 'kill "$cas" 2>/dev/null || :; kvt_cleanup' EXIT
poll 600 test -s "$T/cas.port" || fail "the conditional partner did not start"
kvt_write_config "$T/cas.conf" "$T/cas"
cat >>"$T/cas.conf" <<EOF
[g4]
url = s3://g4bucket/kvtier
endpoint = http://127.0.0.1:$(cat "$T/cas.port")
credentials = $T/fake.keys
EOF
kvt_expect 0 "$K" -c "$T/cas.conf" init
kvt_expect 0 "$K" -c "$T/cas.conf" mb kvs
kvt_expect 0 "$K" -c "$T/cas.conf" put kvs s1/a "$T/in.plain"
kvt_expect 0 "$M" -c "$T/cas.conf" --session kvs/s1
kvt_expect 0 "$K" -c "$T/cas.conf" put kvs s1/b "$T/in.plain"
: >"$T/race.arm"
kvt_run "$M" -c "$T/cas.conf" --session kvs/s1
race=$rc
cp "$KVT_TMP/err" "$T/race.err"
[ ! -e "$T/race.arm" ] || fail "the demotion wrote no manifest"
name=$(g4_name kvs s1/a "$T/cas.conf")
kvt_expect 0 "$K" -c "$T/cas.conf" rm kvs s1/a
kvt_run "$M" -c "$T/cas.conf" --idle 0s
if grep -qF "DELETE /g4bucket/kvtier/$name" "$T/cas.log"; then
	fail "the sweep deleted the importer's copy of s1/a (the demotion exited $race:" \
		"$(cat "$T/race.err"))"
fi
kvt_grep err "session 's1' of bucket 'kvs' belongs to store 00000000000000ff now: its g4 copies are left to it"
[ "$race" -eq 1 ] || fail "the demotion the import raced exited $race, not 1"
grep -q "session 's1' of bucket 'kvs' was imported by store 00000000000000ff while this demotion ran" \
	"$T/race.err" || fail "the demotion did not say why: $(cat "$T/race.err")"
kvt_expect 0 "$K" -c "$T/cas.conf" head kvs s1/b
kvt_grep out "^tier: +demoting$"
grep -q "^PUT /g4bucket/kvtier/.kvtier/manifests/kvs/s1.json if-match=None if-none-match=\*$" \
	"$T/cas.log" || fail "the first manifest was not put with If-None-Match: *: $(cat "$T/cas.log")"
grep -q "^PUT /g4bucket/kvtier/.kvtier/manifests/kvs/s1.json if-match=\"[0-9a-f]\{32\}\" if-none-match=None$" \
	"$T/cas.log" || fail "no manifest was put with If-Match: $(cat "$T/cas.log")"
kill "$cas" 2>/dev/null || :

echo "PASS"
