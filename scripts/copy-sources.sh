#!/bin/sh
# Copies the sources of this tree into DIR (made if missing), for builds
# that need their own configuration (scripts/test-sanitizers.sh,
# scripts/fuzz.sh): the source tree is configured in place by
# scripts/build.sh, and automake refuses a VPATH build beside a configured
# source tree. Copied: what git tracks plus new files it does not ignore;
# outside git, everything but the build directories, then distclean.
# Unchanged files are left alone, so make in DIR rebuilds only what changed.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dest=$1
cd "$(dirname "$0")/.."
mkdir -p "$dest"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# Files deleted in the work tree but still in the index are skipped. A
	# file is copied only when its content differs, and then gets the time
	# of the copy: keeping the source's time could leave it older than an
	# object built from the previous copy, and make would not rebuild.
	git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do
			[ -f "$f" ] || continue
			cmp -s "$f" "$0/$f" && continue
			mkdir -p "$0/$(dirname "$f")" && cp "$f" "$0/$f"
		done' "$dest"
else
	tar --exclude=./build-asan --exclude=./build-tsan --exclude=./build-fuzz -cf - . |
		tar -C "$dest" -xf -
	[ ! -f "$dest/config.status" ] || make -C "$dest" distclean >/dev/null
fi
