#!/usr/bin/env bash
# Session 59, call 4: main 4b169bc with the tile counters in module memory (tile_counter.hpp): the sm90 forward GPU
# tests and the torch suite on it, then on an H200 the issues' standing, on another card peers.py bf16 A, L, G.
cd "$(dirname "$0")/../../../.."  # the repository root
w=$OUT/w; mkdir -p "$w"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$w/machine.txt"
TEST_RUNS=forward-sm90 TEST_TIMEOUT=150 OUT=$w bash scripts/gpu_round.sh tests > "$w/tests.txt" 2>&1
echo "tests rc $? at $SECONDS s"; tail -3 "$w/tests.txt"
FLASHTILE_LIBRARY=$PWD/build-device/libflashtile.so.0.1.0 PYTHONPATH=$PWD/python timeout 90 \
  python3 -m pytest tests/python/test_torch.py -q -rs > "$w/pytest.txt" 2>&1
echo "pytest rc $? at $SECONDS s"; tail -1 "$w/pytest.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$w timeout 400 bash scripts/gpu_round.sh standing > "$w/standing.txt" 2>&1
else
  PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G OUT=$w timeout 300 bash scripts/gpu_round.sh peers > "$w/peers.txt" 2>&1
fi
echo "peers rc $? at $SECONDS s"
(cd "$OUT" && tar -czf all.tar.gz w && rm -rf w)
