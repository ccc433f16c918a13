#!/bin/sh
# tests/test_chaos.sh - the short form of the chaos test (tests/chaos/):
# gateway, FUSE mount, migrator and CLI on one store with s3rver behind a
# fault proxy as G4, under load, with SIGKILLs (of the FUSE daemon too),
# partner faults and a full hot tier, for KVT_CHAOS_SECONDS (default 45).
# Fails on any wrong byte, lost durable object, damaged G4 object or
# unclean fsck; skips (77) where FUSE, boto3 or s3rver (npm) are missing.
# The long form: tests/chaos/run --minutes 10.
#
# The FUSE daemon is killed here again since branch fusefix (2026-11-29).
# What its kills showed, blocks published cut at their first write(2), was a
# child process's close of a copy of the writer's descriptor publishing the
# file (fixed in fuse/file.c, "Who closes"; tests/test_fuse_race.sh); the
# cold objects lost in runs with and without FUSE kills were reclaim's
# (fixed on main, 4cf655d). With both, six 45 s runs with FUSE kills were
# clean (seeds 1-6, tests/chaos/README).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/chaos/run" --seconds "${KVT_CHAOS_SECONDS:-45}"
