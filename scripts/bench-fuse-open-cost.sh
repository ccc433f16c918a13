#!/bin/sh
# Counts the fcntl(2) calls kvtier-fuse makes for 1000 opens (open, read
# 4 KiB, close) of 200 small files: the cost of kvt_reader_hold on the open
# path. Run: sh scripts/bench-fuse-open-cost.sh (needs strace); NOSTRACE=1 times them only.
# SRC: a built checkout (e.g. a build of the commit before, to compare);
# by default the one this script is in.
set -u
SRC=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
top_srcdir=$SRC top_builddir=$SRC
. "$SRC/tests/lib.sh"
. "$SRC/tests/fuse/lib.sh"
fuse_setup
cat >"$KVTIER_CONF" <<EOC
[store]
dir = $KVT_DIR
capacity = 256M
segment_size = 16M
EOC
"$K" init >/dev/null || exit 1
"$K" mb costs >/dev/null
fuse_mount "$KVTIER_CONF" "$M"
python3 -c "
import os
for i in range(200):
    open('$M/costs/f%d' % i, 'wb').write(b'x' * 65536)
"
[ -n "${NOSTRACE:-}" ] || { strace -f -c -e trace=fcntl -p "$FUSE_PID" -o "$T/strace.out" & sp=$!; sleep 1; }
python3 -c "
import os, time
t = time.time()
for r in range(5):
    for i in range(200):
        fd = os.open('$M/costs/f%d' % i, os.O_RDONLY); os.read(fd, 4096); os.close(fd)
print('1000 opens: %.1f us each' % ((time.time() - t) * 1e3))
"
[ -n "${NOSTRACE:-}" ] || { kill -INT $sp; wait $sp; cat "$T/strace.out"; }
fuse_umount "$M"
