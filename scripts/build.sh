#!/bin/sh
# Builds kvtier in the source tree: autogen (when needed), configure (when
# needed), make. Extra arguments go to configure the first time.
set -eu
cd "$(dirname "$0")/.."
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure "$@"
make -j"$(nproc)"
