#!/usr/bin/env bash
# Session 45, call 4 (the device time left after refused starts: call 3 did not run): main c5e900a (backward v43t
# merged: dK / dV by TMA stores up to D = 128, the consumers taking turns at D = 128's staging half) through the
# backward GPU tests (with the new NegativeGradientStrides), then compute-sanitizer on the backward subset and on
# SeveralTilesPerCta, one tool at a time while the call's time lasts.
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-240}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TEST_RUNS=backward TEST_TIMEOUT=200 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests.txt 2>&1
grep -E "PASSED|FAILED|SKIPPED|Failure|NegativeGradient" /tmp/tests.txt | cut -c1-110 | head -12
echo "tests done at $SECONDS s"
for tool in racecheck synccheck memcheck; do
  [ "$SECONDS" -lt $((limit - 40)) ] || break
  SANITIZE_TOOLS=$tool SANITIZE_SUITES=backward SANITIZE_TIMEOUT=35 bash scripts/gpu_round.sh sanitize 2>&1 |
    grep -E "ERROR SUMMARY|hazard|exit" | head -3
  echo "$tool done at $SECONDS s"
done
export LD_LIBRARY_PATH=$PWD/build-device:$PWD/.device/lib
for tool in synccheck racecheck; do  # many tiles a CTA: the consumers' turns at the staging half across tiles
  [ "$SECONDS" -lt $((limit - 45)) ] || break
  timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 build-device/cuda_backward_test --gtest_brief=1 \
    --gtest_filter='*SeveralTilesPerCta*' > "$OUT/sanitizer-$tool-tiles.txt" 2>&1
  rc=$?; echo "== $tool SeveralTilesPerCta: $(grep -E 'SUMMARY' "$OUT/sanitizer-$tool-tiles.txt" | head -1) exit $rc"
done
echo "end at $SECONDS s"
