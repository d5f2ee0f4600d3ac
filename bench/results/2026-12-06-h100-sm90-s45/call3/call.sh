#!/usr/bin/env bash
# Session 45, call 3: main c5e900a (backward v43t merged: dK / dV by TMA stores up to D = 128) through the backward
# GPU tests (with the new NegativeGradientStrides) and compute-sanitizer on the backward subset; peers.py on main
# (grids A, L, G in bf16); two same-call A/B rounds of v44 (D = 256's dK / dV by TMA stores from the last step's Q
# and dO buffers; bf16 D = 256 only) against main; grid A in fp16 through peers.py if time is left.
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-470}  # the call's seconds: a stage starts only if its usual time fits
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TEST_RUNS=backward TEST_TIMEOUT=300 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests.txt 2>&1
grep -E "PASSED|FAILED|SKIPPED|Failure|NegativeGradient" /tmp/tests.txt | cut -c1-110 | head -12
echo "tests done at $SECONDS s"
[ "$SECONDS" -lt $((limit - 250)) ] && SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_SUITES=backward SANITIZE_TIMEOUT=40 \
  bash scripts/gpu_round.sh sanitize 2>&1 | grep -E "ERROR SUMMARY|hazard|exit|==" | head -12
echo "sanitizers done at $SECONDS s"
[ "$SECONDS" -lt $((limit - 120)) ] && PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
echo "peers bf16 done at $SECONDS s"
shapes="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256"
for r in r1 r2; do
  [ "$SECONDS" -lt $((limit - 45)) ] || break
  AB_CANDS=v44n AB_TAG=$r \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    bash scripts/gpu_round.sh ab 2>&1 | grep -E "bwd_tflops|rror|FAIL" | head -4
  echo "ab $r done at $SECONDS s"
done
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
if [ "$SECONDS" -lt $((limit - 70)) ]; then
  PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  echo "peers fp16 done at $SECONDS s"
fi
echo "end at $SECONDS s"
