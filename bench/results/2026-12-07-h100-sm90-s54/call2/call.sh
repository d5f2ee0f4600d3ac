#!/usr/bin/env bash
# Session 54, call 2: v53full (main + bench/candidates/sm90-bwd-v52-pair-first-dp-early.patch +
# sm90-bwd-v53-pair-dk-staged-beside-keys.patch; every head dim and dtype, with its own test binaries), which is
# what would be merged:
#   1. A/B round 2 against build-device (main 33e72e1's kernels): grid A's D = 256 lengths, both masks, and D = 64
#      and 128 at S = 512 and 4k as controls (unchanged kernels), bf16;
#   2. the backward GPU tests on it;
#   3. compute-sanitizer (memcheck, racecheck, synccheck) on the backward subset, whose D = 256 case runs the pair;
#   4. peers.py on it (on main's library if 1 or 2 failed): on an H200 grids A, L, G in bf16, then A in fp16 (the
#      standing); on an H100 grid A in bf16 only.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
cand=v53full
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
shapes="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256;32,512,32,64;4,4k,32,64;32,512,16,128;4,4k,16,128"
AB_CANDS=$cand AB_TAG=r2 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 200 bash scripts/gpu_round.sh ab > "$OUT/ab-r2.txt" 2>&1
python3 bench/ab_table.py "$OUT/ab-base-r2.jsonl" "$OUT/ab-$cand-r2.jsonl" > "$OUT/table-$cand-r2.md" 2>&1
tail -2 "$OUT/table-$cand-r2.md"
grep -c "NOT VERIFIED" "$OUT/table-$cand-r2.md"
bwd=$(grep -oE "bwd_tflops: candidate / base geometric mean [0-9.]+" "$OUT/table-$cand-r2.md" | grep -oE "[0-9.]+$")
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl)
echo "ab done at $SECONDS s (bwd geomean '$bwd')"
TEST_CAND=$cand TEST_RUNS=backward TEST_TIMEOUT=220 bash scripts/gpu_round.sh tests > "$OUT/tests.txt" 2>&1
tests_rc=$?
tail -3 "$OUT/tests.txt"
echo "tests done at $SECONDS s (rc $tests_rc)"
TEST_CAND=$cand SANITIZE_SUITES=backward SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_TIMEOUT=100 \
  bash scripts/gpu_round.sh sanitize 2>&1 | grep -E "^==|exit|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK|PASSED|FAILED" | head -20
echo "sanitize done at $SECONDS s"
lib=
if [ "$tests_rc" = 0 ] && python3 -c "import sys; sys.exit(0 if float('${bwd:-0}') >= 0.995 else 1)" 2>/dev/null; then
  lib=$cand
fi
echo "peers library: ${lib:-main (build-device)}"
if [[ $gpu == *H200* ]]; then
  if [ $((SECONDS + 130)) -lt "$limit" ]; then
    TEST_CAND=$lib PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers bf16 done at $SECONDS s"
  if [ $((SECONDS + 90)) -lt "$limit" ]; then
    TEST_CAND=$lib PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers fp16 done at $SECONDS s"
elif [ $((SECONDS + 110)) -lt "$limit" ]; then
  TEST_CAND=$lib PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A bash scripts/gpu_round.sh peers 2>&1 | tail -2
  echo "peers bf16 (grid A, $gpu) done at $SECONDS s"
fi
