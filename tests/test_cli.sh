#!/bin/sh
# tests/test_cli.sh - the admin command end to end: the real kvtier binary on
# a scratch store. Round trips are compared byte for byte with cmp, exit
# statuses are those kvtier(1) documents (0 done, 1 failed, 2 usage or
# configuration, 3 damage), and a byte flipped on disk must turn into a failed
# get and a failing fsck, never into wrong data; a deleted segment file is
# reported, and segment files whose catalog is gone are not made a new store.
set -eu

# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

# no_tmp_left: fails if a get left a FILE.tmp-PID behind in the scratch dir.
no_tmp_left()
{
	for f in "$T"/*.tmp-*; do
		[ ! -e "$f" ] || fail "$1 left the temporary file '$f'"
	done
}

kvt_setup
T=$KVT_TMP
K=$KVTIER

step "init creates the store; a second init opens it"
kvt_expect 0 "$K" init
kvt_grep out "^created store in '$KVT_DIR'"
kvt_grep out "capacity: +64\.0 MiB"
kvt_grep out "segments: +16 of 4\.0 MiB"
[ -f "$KVT_DIR/catalog.db" ] || fail "init made no catalog"
kvt_expect 0 "$K" init
kvt_grep out "^opened existing store"

step "mb, and mb of a bucket that exists"
kvt_expect 0 "$K" mb models
kvt_expect 1 "$K" mb models
kvt_grep err "^kvtier: mb: bucket 'models' already exists$"

step "put/get round trips, byte-exact"
for size in 0 1 4095 4096 1048576 5242880; do
	head -c "$size" /dev/urandom >"$T/in.$size"
	kvt_expect 0 "$K" put models "sizes/$size" "$T/in.$size"
	[ ! -s "$T/out" ] || fail "put printed something without -v: $(cat "$T/out")"
	kvt_expect 0 "$K" get models "sizes/$size" "$T/back.$size"
	cmp "$T/in.$size" "$T/back.$size" || fail "object of $size bytes came back different"
	kvt_expect 0 "$K" head models "sizes/$size"
	kvt_grep out "^size: +$size$"
	# The ETag is the S3 one: the MD5 of the bytes, quoted.
	if command -v md5sum >/dev/null; then
		md5=$(md5sum <"$T/in.$size" | cut -d' ' -f1)
		kvt_grep out "^etag: +\"$md5\"$"
	fi
	echo "    $size bytes ok"
done
no_tmp_left "get"
# An existing file is replaced whole; a device is written in place, not replaced.
kvt_expect 0 "$K" get models sizes/4095 "$T/back.1"
cmp "$T/in.4095" "$T/back.1" || fail "get over an existing file differs"
kvt_expect 0 "$K" get models sizes/4096 /dev/null
[ -c /dev/null ] || fail "get replaced /dev/null"

step "put from stdin and get to stdout with -"
kvt_run sh -c "cat '$T/in.1048576' | '$K' put models stream/one -"
[ "$rc" -eq 0 ] || fail "put from stdin exited $rc: $(cat "$T/err")"
kvt_run sh -c "'$K' get models stream/one - >'$T/stream.out'"
[ "$rc" -eq 0 ] || fail "get to stdout exited $rc: $(cat "$T/err")"
cmp "$T/in.1048576" "$T/stream.out" || fail "stdin/stdout round trip differs"
printf 'hello\n' | "$K" put models conv1/turn1/blk0 -
printf 'world\n' | "$K" put models conv1/turn2/blk0 -
[ "$("$K" get models conv1/turn2/blk0 -)" = world ] || fail "small stdout get differs"

step "put -v says what it stored"
kvt_expect 0 "$K" -v put models verbose "$T/in.1"
kvt_grep out "1 bytes, etag \""

step "ls with directories and prefixes, as aws s3 ls"
kvt_expect 0 "$K" ls models
kvt_grep out "^ {27}PRE conv1/$"
kvt_grep out "^ {27}PRE sizes/$"
kvt_grep out "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} +1 verbose$"
grep -q 'turn1' "$T/out" && fail "ls without -r went into conv1/"
kvt_expect 0 "$K" ls models conv1/
kvt_grep out "^ {27}PRE turn1/$"
kvt_grep out "^ {27}PRE turn2/$"
[ "$(wc -l <"$T/out")" -eq 2 ] || fail "ls models conv1/ printed: $(cat "$T/out")"
kvt_expect 0 "$K" ls models sizes/4
kvt_grep out " 4095 4095$"
kvt_grep out " 4096 4096$"
[ "$(wc -l <"$T/out")" -eq 2 ] || fail "ls models sizes/4 printed: $(cat "$T/out")"
kvt_expect 0 "$K" ls -r models
kvt_grep out " 6 conv1/turn1/blk0$"
kvt_grep out " 5242880 sizes/5242880$"
[ "$(wc -l <"$T/out")" -eq 10 ] || fail "ls -r printed: $(cat "$T/out")"
kvt_expect 0 "$K" ls --recursive models conv1/
[ "$(wc -l <"$T/out")" -eq 2 ] || fail "ls --recursive with a prefix printed: $(cat "$T/out")"
kvt_expect 0 "$K" buckets
kvt_grep out " models$"

step "head shows content type, session, metadata"
kvt_expect 0 "$K" put --content-type application/x-kv --session chat-7 \
	--meta Layer=12 --meta model=llama models meta/obj "$T/in.4096"
kvt_expect 0 "$K" head models meta/obj
kvt_grep out "^content-type: +application/x-kv$"
kvt_grep out "^session: +chat-7$"
kvt_grep out "^meta: +layer=12$"
kvt_grep out "^meta: +model=llama$"
kvt_grep out "^tier: +hot$"
kvt_grep out "^pinned: +no$"
kvt_grep out "^mtime: +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$"
kvt_grep out "^crc32c: +[0-9a-f]{8} "
kvt_expect 0 "$K" head models conv1/turn1/blk0
kvt_grep out "^session: +conv1$"

step "put --if-none-match refuses an existing key"
kvt_expect 1 "$K" put --if-none-match models meta/obj "$T/in.1"
kvt_grep err "^kvtier: put: object 'models/meta/obj' already exists$"
kvt_expect 0 "$K" put --if-none-match models meta/new "$T/in.1"

step "cp copies bytes and metadata"
kvt_expect 0 "$K" mb copies
kvt_expect 2 "$K" cp models meta/obj copies/dst obj
kvt_grep err "invalid bucket name"
kvt_expect 0 "$K" cp models meta/obj copies dst/obj
kvt_expect 0 "$K" get copies dst/obj "$T/copy.out"
cmp "$T/in.4096" "$T/copy.out" || fail "copy differs from its source"
kvt_expect 0 "$K" head copies dst/obj
kvt_grep out "^meta: +layer=12$"
kvt_grep out "^content-type: +application/x-kv$"
kvt_expect 1 "$K" cp models no/such copies x
kvt_grep err "^kvtier: cp: no such object 'models/no/such'$"
kvt_expect 1 "$K" cp models meta/obj nobucket x
kvt_grep err "^kvtier: cp: no such bucket 'nobucket'$"

step "pin and unpin"
kvt_expect 0 "$K" pin models sizes/1
kvt_expect 0 "$K" head models sizes/1
kvt_grep out "^pinned: +yes$"
kvt_expect 0 "$K" stat
kvt_grep out "^pinned: +1$"
kvt_expect 0 "$K" unpin models sizes/1
kvt_expect 0 "$K" head models sizes/1
kvt_grep out "^pinned: +no$"
kvt_expect 0 "$K" pin models sizes/0
kvt_expect 1 "$K" pin models no/such
kvt_grep err "^kvtier: pin: no such object 'models/no/such'$"

step "rm, and rb of a full then an empty bucket"
kvt_expect 0 "$K" rm copies dst/obj
kvt_expect 1 "$K" get copies dst/obj "$T/gone"
[ ! -e "$T/gone" ] || fail "a failed get created its output file"
kvt_expect 1 "$K" rm copies dst/obj
kvt_grep err "^kvtier: rm: no such object 'copies/dst/obj'$"
kvt_expect 1 "$K" rb models
kvt_grep err "^kvtier: rb: bucket 'models' is not empty$"
kvt_expect 0 "$K" rb copies
kvt_expect 1 "$K" rb copies
kvt_grep err "^kvtier: rb: no such bucket 'copies'$"
kvt_expect 0 "$K" buckets
[ "$(wc -l <"$T/out")" -eq 1 ] || fail "buckets after rb printed: $(cat "$T/out")"

step "stat and stat --json"
kvt_expect 0 "$K" stat
for field in capacity used live segments buckets objects sessions tiers pinned \
	"evicted objects" "reclaimed segments" "checksum failures" io; do
	kvt_grep out "^$field: "
done
kvt_grep out "^buckets: +1$"
kvt_grep out "^objects: +12 "
kvt_grep out "^evicted objects: +0$"
kvt_expect 0 "$K" stat --json
if command -v python3 >/dev/null; then
	python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["capacity"] == 64 << 20, s
assert s["segment_size"] == 4 << 20, s
assert s["segments"] == 16, s
assert s["buckets"] == 1, s
assert s["objects"] == 12, s
assert s["pinned"] == 1, s
assert s["tiers"]["hot"] == 12, s
assert s["io"] in ("uring", "sync"), s
assert s["segments_free"] + s["segments_open"] + s["segments_sealed"] == 16, s
' "$T/out" || fail "stat --json is not what was stored: $(cat "$T/out")"
else
	echo "    (no python3: checking the JSON by eye only)"
	kvt_grep out '^\{.*"objects":12.*\}$'
fi

step "fsck of a clean store"
kvt_expect 0 "$K" fsck
kvt_grep out "^checksum errors: +0$"
kvt_grep out "^status: +clean$"
kvt_expect 0 "$K" reclaim
kvt_grep out "^reclaimed [0-9]+ segments"

step "a flipped byte on disk: get fails, fsck finds it, fsck --repair removes it"
# A fresh store, so that its one object starts at offset 0 of segment 0:
# an extent is a 64-byte header and then the payload, so segment byte 8192
# is object byte 8128.
KVTIER_CONF=$T/fresh.conf
kvt_write_config "$KVTIER_CONF" "$T/fresh"
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb damage
head -c 1048576 /dev/urandom >"$T/victim"
kvt_expect 0 "$K" put damage victim "$T/victim"
seg=$T/fresh/segments/000000
[ -f "$seg" ] || fail "no segment file '$seg'"
cmp -s -n 4096 -i 8192:8128 "$seg" "$T/victim" ||
	fail "the object is not where this test expects it in '$seg' (extent layout changed?)"
byte=$(od -An -tu1 -j 8192 -N 1 "$seg" | tr -d ' ')
# shellcheck disable=SC2059 # the octal escape is the point
printf "\\$(printf %o $((byte ^ 255)))" | dd of="$seg" bs=1 seek=8192 count=1 conv=notrunc 2>/dev/null
kvt_expect 1 "$K" get damage victim "$T/victim.out"
kvt_grep err "^kvtier: get: 'damage/victim': I/O or checksum error$"
[ ! -e "$T/victim.out" ] || fail "a get that failed left '$T/victim.out'"
no_tmp_left "a get that failed"
kvt_expect 1 "$K" get damage victim -
# One damaged extent counts once, however often it is read or checked:
# an alert on the counter rising fires once per new damage.
kvt_expect 0 "$K" stat
kvt_grep out "^checksum failures: +1$"
kvt_expect 3 "$K" fsck
kvt_grep out "^checksum errors: +1$"
kvt_grep out "^status: +damaged"
kvt_expect 3 "$K" fsck
kvt_expect 0 "$K" stat
kvt_grep out "^checksum failures: +1$"
kvt_expect 0 "$K" fsck --repair
kvt_grep out "^status: +repaired$"
kvt_expect 1 "$K" head damage victim
kvt_grep err "^kvtier: head: no such object 'damage/victim'$"
kvt_expect 0 "$K" fsck

step "a damaged extent header: fsck names the object, once"
KVTIER_CONF=$T/header.conf
kvt_write_config "$KVTIER_CONF" "$T/header"
kvt_expect 0 "$K" init
kvt_expect 0 "$K" mb damage
kvt_expect 0 "$K" put damage victim "$T/victim"
printf 'X' | dd of="$T/header/segments/000000" bs=1 count=1 conv=notrunc 2>/dev/null
kvt_expect 3 "$K" fsck
kvt_grep out "^header errors: +1$"
[ "$(grep -c "'damage/victim': extent 0 (segment 0 offset 0): bad magic$" "$KVT_TMP/err")" = 1 ] ||
	fail "fsck did not name the damaged header's object once: $(cat "$KVT_TMP/err")"

step "init grows a store only when no other process has it open"
# A put that waits for its stdin keeps the store open meanwhile.
mkfifo "$T/held"
"$K" put damage held - <"$T/held" 2>"$T/held.err" &
held=$!
exec 7>"$T/held"
# Until the put has the store open, however long a loaded sanitizer build
# takes: after 5 s the test went on regardless, and init grew the store.
holds_store() {
	ls -l "/proc/$held/fd" 2>/dev/null | grep -q 'segments\.map$'
}
wait_until "$held" "$T/held.err" 60 "the put holding the store open" holds_store
sed 's/^capacity = 64M$/capacity = 96M/' "$KVTIER_CONF" >"$T/grown.conf"
kvt_expect 1 "$K" -c "$T/grown.conf" init
kvt_grep err "cannot grow the store in '.*': another kvtier process has it open"
kvt_expect 0 "$K" stat
kvt_grep out "^capacity: +64\.0 MiB"
exec 7>&-
wait "$held" || fail "the put that held the store open failed"
kvt_expect 0 "$K" -c "$T/grown.conf" init
kvt_grep out "capacity: +96\.0 MiB"
KVTIER_CONF=$T/fresh.conf

step "a deleted or cut segment file: the next open says so, fsck --repair forgets what it held"
kvt_expect 0 "$K" put damage gone "$T/victim"
rm "$seg"
kvt_expect 0 "$K" ls damage
kvt_grep err "^kvtier: error: segment file '$seg' was missing: made again, empty; the objects it held are lost"
kvt_expect 1 "$K" get damage gone -
kvt_expect 3 "$K" fsck
kvt_expect 0 "$K" fsck --repair
kvt_expect 1 "$K" head damage gone
kvt_expect 0 "$K" fsck
kvt_grep out "^status: +clean$"
kvt_expect 0 "$K" put damage cut "$T/victim"
truncate -s 4096 "$seg"
kvt_expect 0 "$K" ls damage
kvt_grep err "^kvtier: error: segment file '$seg' was cut to 4096 bytes: filled up again with zeros"
kvt_expect 3 "$K" fsck
kvt_expect 0 "$K" fsck --repair
kvt_expect 1 "$K" head damage cut

step "segment files without their catalog: init will not make a new store over them"
mv "$T/fresh/catalog.db" "$T/catalog.db.away"
rm -f "$T/fresh/catalog.db-wal" "$T/fresh/catalog.db-shm"
kvt_expect 1 "$K" init
kvt_grep err "has segment files but no catalog: not making a new store over them"
[ ! -e "$T/fresh/catalog.db" ] || fail "init made a new catalog over old segment files"
mv "$T/catalog.db.away" "$T/fresh/catalog.db"
kvt_expect 0 "$K" init
kvt_grep out "^opened existing store"
KVTIER_CONF=$T/kvtier.conf

step "a first init that fails removes the directories it made, and only them"
mkdir "$T/had"
printf '[store]\ndir = %s\ncapacity = 16384T\n' "$T/had/new/er/store" >"$T/huge.conf"
kvt_expect 1 "$K" -c "$T/huge.conf" init
kvt_grep err "cannot create a store in '$T/had/new/er/store'"
[ -d "$T/had" ] || fail "a failed init removed a directory it did not make"
[ ! -e "$T/had/new" ] || fail "a failed init left '$(find "$T/had/new")' behind"

step "a store of more segments than the soft open-file limit: raised to the hard one, else refused"
printf '[store]\ndir = %s\ncapacity = 160M\nsegment_size = 1M\n' "$T/many" >"$T/many.conf"
# A process holds all 160 segment files open; 64 is below that.
(ulimit -Sn 64 && "$K" -c "$T/many.conf" init) >"$T/out" 2>"$T/err" ||
	fail "init under a soft limit of 64 failed: $(cat "$T/err")"
kvt_grep out "segments: +160 of 1\\.0 MiB"
rc=0
(ulimit -Sn 64 && ulimit -Hn 128 && "$K" -c "$T/many.conf" stat) >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" -eq 1 ] || fail "stat under a hard limit of 128 exited $rc, expected 1"
kvt_grep err "has 160 segments, and a process holds each open: the open-file limit is 128; raise it to at least 576"

step "init killed while it writes the segment files: the next init finishes, nothing reported lost"
rm -rf "$T/many"
timeout -s KILL 0.1 "$K" -c "$T/many.conf" init >/dev/null 2>&1 || :
kvt_expect 0 "$K" -c "$T/many.conf" init
kvt_grep out "segments: +160 of 1\\.0 MiB"
! grep -q "error" "$T/err" || fail "the init after a killed one reported: $(cat "$T/err")"
kvt_expect 0 "$K" -c "$T/many.conf" fsck
rm -rf "$T/many"

step "a damaged catalog page: commands say so, and fsck first of all (exit 3)"
db=$KVT_DIR/catalog.db
root=$(sqlite3 "$db" "SELECT rootpage FROM sqlite_schema WHERE name = 'objects'")
psize=$(sqlite3 "$db" "PRAGMA page_size")
[ -n "$root" ] && [ -n "$psize" ] || fail "cannot find the objects table's page in $db"
cp "$db" "$T/catalog.db.good"
head -c "$psize" /dev/zero | tr "\\0" Z | dd of="$db" bs="$psize" seek=$((root - 1)) conv=notrunc 2>/dev/null
kvt_expect 1 "$K" ls models
kvt_grep err "^kvtier: error: the catalog '$db' is damaged \(.*\): see kvtier fsck$"
kvt_grep err "^kvtier: ls: 'models': the catalog is damaged \(kvtier\(1\), DAMAGED CATALOG\)$"
kvt_expect 3 "$K" fsck
kvt_grep err "^kvtier: error: the catalog of '$KVT_DIR' is damaged: "
kvt_grep out "^status: +catalog damaged$"
kvt_expect 3 "$K" fsck --repair
kvt_expect 1 "$top_builddir/kvtier-migrate" --idle 0s
kvt_grep err "^kvtier-migrate: demote: the catalog is damaged \(kvtier\(1\), DAMAGED CATALOG\)$"
cp "$T/catalog.db.good" "$db"
# Their pages are read by the open itself, before fsck's quick check.
for table in segments settings; do
	root=$(sqlite3 "$db" "SELECT rootpage FROM sqlite_schema WHERE name = '$table'")
	[ -n "$root" ] || fail "cannot find the $table table's page in $db"
	head -c "$psize" /dev/zero | tr "\\0" Z | dd of="$db" bs="$psize" seek=$((root - 1)) conv=notrunc 2>/dev/null
	kvt_expect 3 "$K" fsck
	kvt_grep err "^kvtier: fsck: cannot open the store in '$KVT_DIR': the catalog is damaged "
	kvt_grep out "^status: +catalog damaged$"
	kvt_expect 3 "$K" fsck --repair
	cp "$T/catalog.db.good" "$db"
done
kvt_expect 0 "$K" fsck
kvt_grep out "^status: +clean$"

step "store-id --new refuses a store that is where its id was given; --force gives it one"
# A second --new (a script that runs it at every boot), or --new on the
# original, left the store's own sessions in g4 to its old id.
kvt_expect 0 "$K" store-id
kvt_grep out "^matches: +yes$"
id=$(sed -n 's/^id: *\([0-9a-f]*\).*/\1/p' "$KVT_TMP/out")
kvt_expect 1 "$K" store-id --new
kvt_grep err "^kvtier: store-id: the store in '$KVT_DIR' is where its id $id was given: no copy"
kvt_expect 0 "$K" store-id
kvt_grep out "^id: +$id$"
kvt_expect 2 "$K" store-id --keep --force
kvt_expect 0 "$K" store-id --new --force
kvt_grep out "^id: +[0-9a-f]{16} \(new\)$"
! grep -q "^id: *$id" "$KVT_TMP/out" || fail "store-id --new --force kept the id $id"

step "store-id exits 4 on a store that is not where its id was given, 0 once --new or --keep says whose it is"
# It exited 0 either way: monitoring had to read 'matches:'.
for how in new keep; do
	rm -rf "$T/copy"
	cp -a "$KVT_DIR" "$T/copy"
	kvt_write_config "$T/copy.conf" "$T/copy"
	kvt_expect 4 "$K" -c "$T/copy.conf" store-id
	kvt_grep out "^matches: +no: a copy of a store"
	kvt_expect 0 "$K" -c "$T/copy.conf" store-id --$how
	kvt_grep out "^matches: +yes$"
	kvt_expect 0 "$K" -c "$T/copy.conf" store-id
done
rm -rf "$T/copy"

step "store-id: a machine-id systemd mounts at boot (transient) moves no store"
# A machine whose /etc/machine-id is empty or read-only gets a random one
# mounted over it at each boot: its store was not where its id was given
# after every reboot. Here a private mount namespace mounts another id.
echo 0123456789abcdef0123456789abcdef >"$T/machine-id"
if [ -f /etc/machine-id ] && unshare -m true 2>/dev/null; then
	unshare -m sh -c "mount --bind '$T/machine-id' /etc/machine-id && '$K' store-id" \
		>"$KVT_TMP/out" 2>"$KVT_TMP/err" || fail "store-id under a mounted machine-id: $(cat "$KVT_TMP/err")"
	kvt_grep out "^matches: +yes$"
else
	echo "    skipped: no /etc/machine-id, or no unshare -m (not root, no mount namespaces)"
fi

step "errors: usage, configuration, missing objects, bad names and keys"
kvt_expect 2 "$K" frobnicate
kvt_grep err "^kvtier: unknown command 'frobnicate'"
kvt_expect 2 "$K"
kvt_expect 2 "$K" get models
kvt_grep err "^usage: kvtier get BUCKET KEY FILE$"
kvt_expect 2 "$K" ls --bogus models
kvt_grep err "^kvtier: ls: unknown option '--bogus'$"
kvt_expect 2 "$K" put --meta novalue models k "$T/in.1"
kvt_grep err "expected name=value"
printf '[store]\ndir = %s\ncapacty = 2T\n' "$KVT_DIR" >"$T/bad.conf"
kvt_expect 2 "$K" -c "$T/bad.conf" stat
kvt_grep err "^kvtier: $T/bad.conf:3: unknown key 'capacty' in \[store\]$"
KVTIER_CONF=$T/bad.conf kvt_expect 2 "$K" ls models
kvt_grep err "bad.conf:3: .*'capacty'"
kvt_expect 2 "$K" -c "$T/missing.conf" stat
kvt_grep err "missing.conf"
kvt_write_config "$T/nostore.conf" "$T/nostore"
kvt_expect 1 "$K" -c "$T/nostore.conf" ls models
kvt_grep err "^kvtier: ls: no store in '$T/nostore' \(run 'kvtier init' first\)$"
[ ! -e "$T/nostore" ] || fail "a command other than init created a store"
kvt_expect 1 "$K" get models no/such/key "$T/nokey"
kvt_grep err "^kvtier: get: no such object 'models/no/such/key'$"
[ ! -e "$T/nokey" ] || fail "get of a missing key created its output file"
kvt_expect 1 "$K" get nobucket key -
kvt_grep err "^kvtier: get: no such bucket 'nobucket'$"
kvt_expect 2 "$K" mb Bad_Name
kvt_grep err "^kvtier: mb: invalid bucket name 'Bad_Name'"
kvt_expect 2 "$K" mb ab
kvt_grep err "invalid bucket name 'ab'"
long=$(head -c 1025 /dev/zero | tr '\0' k)
kvt_expect 2 "$K" put models "$long" "$T/in.1"
kvt_grep err "^kvtier: put: key too long \(1025 bytes, at most 1024\)$"
kvt_expect 0 "$K" put models "$(head -c 1024 /dev/zero | tr '\0' k)" "$T/in.1"
kvt_expect 2 "$K" put models "$(printf 'bad\377key')" "$T/in.1"
kvt_grep err "not valid UTF-8"
kvt_expect 1 "$K" put models k "$T/no/such/file"
kvt_grep err "^kvtier: put: cannot open '$T/no/such/file': "
kvt_expect 0 "$K" --version
kvt_grep out "^kvtier [0-9]"
kvt_expect 0 "$K" help
kvt_grep out "^  fsck "

echo "PASS: test_cli.sh"
