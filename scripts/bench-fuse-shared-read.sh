#!/bin/bash
# Reads of one open file from several threads, through kvtier-fuse and from
# a plain file on the same disk, with the page cache dropped before each
# read on both sides (disk against disk, not disk against memory as in
# `kvtier bench fuse`). An inference engine's POSIX backend reads one KV
# file from a pool of threads through one descriptor; the kernel hands the
# daemon those reads at once.
#
# Usage (root: it drops the page cache):
#   scripts/bench-fuse-shared-read.sh [BUILD_DIR] [SCRATCH_DIR]
# BUILD_DIR holds kvtier and kvtier-fuse (default: the source tree);
# SCRATCH_DIR (default /var/tmp/kvt-shared-read) is removed first. Prints
# MiB/s for 1 and 4 threads, buffered and O_DIRECT, 5 rounds each, the
# medians, and kvtier over the plain file.
set -eu
bin=$(cd "${1:-$(dirname "$0")/..}" && pwd)
dir=${2:-/var/tmp/kvt-shared-read}
mnt=$dir/mnt
size_mib=256
rounds=5

[ "$(id -u)" = 0 ] || { echo "bench-fuse-shared-read: run as root (drops the page cache)" >&2; exit 1; }
fusermount3 -u "$mnt" 2>/dev/null || true
rm -rf "$dir"
mkdir -p "$mnt" "$dir/plain"
printf '[store]\ndir = %s/data\ncapacity = 4G\nsegment_size = 256M\n' "$dir" > "$dir/kvtier.conf"
"$bin/kvtier" -c "$dir/kvtier.conf" init > /dev/null
"$bin/kvtier" -c "$dir/kvtier.conf" mb bench > /dev/null
"$bin/kvtier-fuse" -f -c "$dir/kvtier.conf" "$mnt" 2> "$dir/fuse.log" &
fuse_pid=$!
trap 'fusermount3 -u "$mnt" 2>/dev/null || true; wait $fuse_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { echo "bench-fuse-shared-read: the mount did not come up" >&2; exit 1; }

dd if=/dev/urandom of="$dir/plain/f" bs=1M count=$size_mib status=none
cp "$dir/plain/f" "$mnt/bench/f"
sync

# One round: threads read 1 MiB chunks, chunk i by thread i mod n.
read_once() {
	sync
	echo 3 > /proc/sys/vm/drop_caches
	python3 - "$@" <<'EOF'
import mmap, os, sys, threading, time
path, n, direct = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "direct"
fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
size, chunk = os.fstat(fd).st_size, 1 << 20
def work(i):
    buf = mmap.mmap(-1, chunk)
    for off in range(i * chunk, size, n * chunk):
        if os.preadv(fd, [buf], off) <= 0:
            raise SystemExit("short read at %d" % off)
t0 = time.monotonic()
ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print("%.0f" % (size / (time.monotonic() - t0) / 2**20))
EOF
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

echo "file: $size_mib MiB; 1 MiB reads; page cache dropped before each round; $rounds rounds"
printf '%-22s %10s %10s %8s   %s\n' "case" "kvtier" "plain" "x plain" "rounds (kvtier/plain MiB/s)"
for threads in 1 4; do
	for mode in buffered direct; do
		k="" p="" per=""
		for _ in $(seq $rounds); do
			a=$(read_once "$mnt/bench/f" $threads $mode)
			b=$(read_once "$dir/plain/f" $threads $mode)
			k="$k $a" p="$p $b" per="$per $a/$b"
		done
		km=$(echo "$k" | median) pm=$(echo "$p" | median)
		printf '%-22s %10s %10s %7.2fx  %s\n' "$threads thread(s), $mode" "$km" "$pm" \
			"$(echo "$km / $pm" | bc -l)" "$per"
	done
done
