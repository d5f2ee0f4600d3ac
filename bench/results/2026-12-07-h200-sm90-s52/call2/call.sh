#!/usr/bin/env bash
# Session 52, call 2: the standing with the pair backward (cand-pairhfull: every head dim and dtype; its CUDA code
# is main 79214df's), on whichever card comes (the issues' targets are the H200's).
#   1. compute-sanitizer (memcheck, racecheck, synccheck) on the backward subset, whose D = 256 case runs the pair;
#   2. peers.py grids A, L, G in bf16; 3. peers.py grid A in fp16.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
TEST_CAND=pairhfull SANITIZE_SUITES=backward SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_TIMEOUT=100 \
  bash scripts/gpu_round.sh sanitize 2>&1 | grep -E "^==|exit|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK|PASSED|FAILED" | head -20
echo "sanitize done at $SECONDS s"
if [ $((SECONDS + 120)) -lt "$limit" ]; then
  TEST_CAND=pairhfull PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers bf16 done at $SECONDS s"
if [ $((SECONDS + 100)) -lt "$limit" ]; then
  TEST_CAND=pairhfull PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers fp16 done at $SECONDS s"
