#!/usr/bin/env bash
# Every test: set up, build with tests, run the whole suite (GPU tests report themselves skipped without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -DFLASHTILE_BUILD_TESTS=ON
ctest --test-dir build --output-on-failure -j "$(nproc)"
