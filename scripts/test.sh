#!/usr/bin/env bash
# Every test: set up, build with tests, run the C++ suite (ctest) and the Python suite (pytest) against the
# build tree. GPU tests report themselves skipped without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -DFLASHTILE_BUILD_TESTS=ON
ctest --test-dir build --output-on-failure -j "$(nproc)"
python3 -c "import numpy, pytest" 2>/dev/null || python3 -m pip install -q numpy pytest
python3 -m pytest tests/python -q -rs
