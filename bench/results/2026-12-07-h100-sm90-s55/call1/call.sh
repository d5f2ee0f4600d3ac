#!/usr/bin/env bash
# Session 55, call 1: v55full (branch next/bwd-long-steps: D = 128's backward in steps of 80 query rows where every
# row sees every key; every head dim and dtype, with its own test binaries):
#   1. A/B against build-device (main d3dddd7's kernels): D = 128 full S = 1k .. 16k (the long steps), causal and
#      S = 512 full (the same kernel in both libraries: the controls), D = 64 4k (control), bf16, then fp16 at 2k and
#      8k full;
#   2. the backward GPU tests on it (LongStepsAtHeadDim128 runs the new kernel);
#   3. compute-sanitizer (memcheck, synccheck, racecheck) on LongStepsAtHeadDim128.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
mkdir -p "$OUT/tables"
cand=v55full
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
shapes="16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;32,512,16,128;4,4k,32,64"
AB_CANDS=$cand AB_TAG=r1 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 220 bash scripts/gpu_round.sh ab > "$OUT/ab-r1.txt" 2>&1
python3 bench/ab_table.py "$OUT/ab-base-r1.jsonl" "$OUT/ab-$cand-r1.jsonl" > "$OUT/tables/$cand-r1.md" 2>&1
tail -2 "$OUT/tables/$cand-r1.md"
echo "NOT VERIFIED rows: $(grep -c "NOT VERIFIED" "$OUT/tables/$cand-r1.md")"
echo "ab bf16 done at $SECONDS s"
if [ $((SECONDS + 60)) -lt "$limit" ]; then
  AB_CANDS=$cand AB_TAG=f1 \
    AB_ARGS="--shapes 8,2k,16,128;2,8k,16,128 --causal none --backends cuda-sm90 --dtype fp16 --backward --repeats 10 --verify-rows 2" \
    timeout 80 bash scripts/gpu_round.sh ab > "$OUT/ab-f1.txt" 2>&1
  python3 bench/ab_table.py "$OUT/ab-base-f1.jsonl" "$OUT/ab-$cand-f1.jsonl" > "$OUT/tables/$cand-f1.md" 2>&1
  tail -2 "$OUT/tables/$cand-f1.md"
fi
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
echo "ab done at $SECONDS s"
TEST_CAND=$cand TEST_RUNS=backward TEST_TIMEOUT=220 bash scripts/gpu_round.sh tests > "$OUT/tests.txt" 2>&1
echo "tests rc $? at $SECONDS s"; tail -4 "$OUT/tests.txt"
# the tests stage unpacked the candidate's library and test binary here (gpu_round.sh: cand_dir, test_binary)
bin=/tmp/flashtile-cand-$cand/cuda_backward_test
export LD_LIBRARY_PATH=/tmp/flashtile-cand-$cand:$PWD/.device/lib
for tool in memcheck synccheck racecheck; do
  if [ $((SECONDS + 60)) -lt "$limit" ]; then
    timeout $((limit - SECONDS - 10)) compute-sanitizer --tool $tool --error-exitcode 9 "$bin" --gtest_brief=1 \
      --gtest_filter='*LongStepsAtHeadDim128*' > "$OUT/sanitizer-$tool-long.txt" 2>&1
    echo "$tool exit $? at $SECONDS s"; tail -2 "$OUT/sanitizer-$tool-long.txt"
  fi
done
(cd "$OUT" && tar -czf sanitizers.tar.gz sanitizer-*-long.txt && rm -f sanitizer-*-long.txt)
ls "$OUT"
