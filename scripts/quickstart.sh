#!/bin/sh
# README command one: install what kvtier needs, build it, and run its main
# job on embedded defaults in a scratch directory: scripts/demo.sh replays
# the Mooncake synthetic trace (../shared/traces) through the S3 gateway and
# the FUSE mount with demotion to a file:// G4 and recall, against two
# baselines, and prints the report. Nothing is written outside ./scratch and
# nothing is left running.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec scripts/demo.sh
