#!/usr/bin/env bash
# Session 53, call 6, on cand-v51full (main d01d49b + bench/candidates/sm90-bwd-v51-pair-probs-loaded-before-step.
# patch, every head dim and dtype, with its own test binaries):
#   1. the backward GPU suite; 2. compute-sanitizer (memcheck, racecheck, synccheck) on the backward subset (its
#   D = 256 case runs the pair);
#   3. only on an H200 and if the tests passed: peers.py grids A, L, G in bf16, then A in fp16 (the standing).
# LIMIT (seconds, default 380): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-380}
cand=v51full
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
TEST_CAND=$cand TEST_RUNS=backward TEST_TIMEOUT=220 bash scripts/gpu_round.sh tests 2>&1 | tail -3
echo "tests done at $SECONDS s"
log=$(tar -xOf "$OUT/test-logs.tar" gpu-tests-backward.txt 2>/dev/null)
passed=0
if grep -q "^\[  PASSED  \]" <<< "$log" && ! grep -q "FAILED" <<< "$log"; then passed=1; fi
TEST_CAND=$cand SANITIZE_SUITES=backward SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_TIMEOUT=60 \
  bash scripts/gpu_round.sh sanitize 2>&1 | grep -E "^==|exit|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK|PASSED|FAILED" | head -20
echo "sanitize done at $SECONDS s"
if [[ $gpu == *H200* && $passed == 1 ]]; then
  if [ $((SECONDS + 110)) -lt "$limit" ]; then
    TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers bf16 done at $SECONDS s"
  if [ $((SECONDS + 80)) -lt "$limit" ]; then
    TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers fp16 done at $SECONDS s"
else
  echo "peers skipped: $gpu, backward suite passed: $passed"
fi
