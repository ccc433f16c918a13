#!/bin/sh
# README command one: install what kvtier needs, build it, and run its main
# job on embedded defaults in a scratch directory. Nothing is written outside
# ./scratch and nothing is left running.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec scripts/demo.sh
