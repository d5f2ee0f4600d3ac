#!/usr/bin/env bash
# The main job: set up, build, and run `flashtile run` (one verified problem on the best backend present).
#   scripts/run.sh [flashtile run options...]      e.g. scripts/run.sh --seqlen 1024
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/tools/flashtile run "$@"
