#!/usr/bin/env bash
# Prepared in session 56 for the next session: v57full (bench/candidates/sm90-bwd-v57-st-ahead.patch onto main
# b666f1f, every head dim and dtype, with its own test binaries; `CANDIDATE_TREE=ct scripts/candidate_lib.sh
# bench/candidates/sm90-bwd-v57-st-ahead.patch v57full`):
#   1. A/B round 1 against build-device (main's kernels): D = 128 full and causal S = 512 .. 16k, GQA 32 / 8 heads at
#      2k, D = 64 4k (the control: the same kernel in both), bf16, 10 repeats, 2 verified rows a shape;
#   2. the sm90 backward GPU tests on it, then memcheck, racecheck and synccheck on the tile-boundary tests;
#   3. A/B round 2, and fp16 at 2k and 8k full, if time is left.
# LIMIT (seconds, default 570): a stage starts only if its usual time fits before it (round 1 shrinks to fit a
# LIMIT below 200; the tests, sm90 backward only, need 170 s more). Session 57 had no machine to run it on.
# Superseded by bench/results/2026-12-07-s57-cudnn-bprop-sass/next-call.sh (v57 and v58 in one call).
cd "$(dirname "$0")/.."
limit=${LIMIT:-570}
mkdir -p "$OUT/tables"
cand=v57full
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
shapes="32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;4,2k,32,128,8;4,4k,32,64"
ab() {  # <tag> <timeout> <dtype> <shapes> <causal>
  AB_CANDS=$cand AB_TAG=$1 \
    AB_ARGS="--shapes $4 --causal $5 --backends cuda-sm90 --dtype $3 --backward --repeats 10 --verify-rows 2" \
    timeout "$2" bash scripts/gpu_round.sh ab > "$OUT/ab-$1.txt" 2>&1
  python3 bench/ab_table.py "$OUT/ab-base-$1.jsonl" "$OUT/ab-$cand-$1.jsonl" > "$OUT/tables/$cand-$1.md" 2>&1
  echo "$1: $(grep -c "NOT VERIFIED" "$OUT/tables/$cand-$1.md") rows not verified; $(tail -1 "$OUT/tables/$cand-$1.md")"
  echo "$1 done at $SECONDS s"
}
ab r1 $((limit < 200 ? limit - 10 : 200)) bf16 "$shapes" both
if [ $((SECONDS + 170)) -lt "$limit" ]; then
  TEST_CAND=$cand TEST_RUNS=backward-Sm90.* TEST_TIMEOUT=170 bash scripts/gpu_round.sh tests > "$OUT/tests.txt" 2>&1
  echo "tests rc $? at $SECONDS s"; tail -4 "$OUT/tests.txt"
fi
bin=/tmp/flashtile-cand-$cand/cuda_backward_test
for tool in memcheck racecheck synccheck; do
  if [ $((SECONDS + 70)) -lt "$limit" ]; then
    LD_LIBRARY_PATH=/tmp/flashtile-cand-$cand:$PWD/.device/lib timeout 60 compute-sanitizer --tool $tool \
      --error-exitcode 9 "$bin" --gtest_brief=1 \
      --gtest_filter='CudaBackwardSm90.SeveralTilesPerCta:CudaBackwardSm90.RowsAndKeysNobodySeesAndEmptySequences' \
      > "$OUT/sanitizer-$tool.txt" 2>&1
    echo "$tool exit $? at $SECONDS s"; tail -1 "$OUT/sanitizer-$tool.txt"
  fi
done
[ $((SECONDS + 190)) -lt "$limit" ] && ab r2 $((limit - SECONDS - 60)) bf16 "$shapes" both
[ $((SECONDS + 60)) -lt "$limit" ] && ab f1 55 fp16 "8,2k,16,128;2,8k,16,128" both
(cd "$OUT" && tar -czf logs.tar.gz ab-* tests.txt sanitizer-*.txt 2>/dev/null && rm -f ab-*.jsonl ab-*.txt tests.txt sanitizer-*.txt)
find "$OUT" -type f
