#!/usr/bin/env bash
# Session 47, call 2: candidate v46 (D = 256's dQ by bulk reductions from the step's own Q / dO stage instead of
# REDGs; a full build onto main 7073cfb), v46b (v46 with dQ in two column halves, the first staged while the
# second runs; D = 128 and 256 bf16 only) and the diagnostic noredg (main without the dQ reductions: the ceiling of
# any dQ route; D = 128 and 256 bf16 only, timed without verification). v46's backward GPU tests, then A/B rounds
# against main at D = 256 (S = 512 .. 16k, both masks) with D = 128 controls, then compute-sanitizer on v46.
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-560}  # the call's seconds: a stage starts only if its usual time fits
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TEST_CAND=v46 TEST_RUNS=backward TEST_TIMEOUT=240 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests-v46.txt 2>&1
cp /tmp/tests-v46.txt "$OUT/tests-v46.txt"
grep -E "PASSED|FAILED|SKIPPED|Failure" /tmp/tests-v46.txt | cut -c1-110 | head -8
ok46=0
grep -q "PASSED" /tmp/tests-v46.txt && ! grep -qE "FAILED|Failure" /tmp/tests-v46.txt && ok46=1
echo "v46 tests done at $SECONDS s (ok=$ok46)"
shapes="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256;8,2k,16,128;2,8k,16,128"
ab() {  # <candidates> <tag> <verify rows>
  AB_CANDS=$1 AB_TAG=$2 \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows $3" \
    bash scripts/gpu_round.sh ab > /tmp/ab-$2.txt 2>&1
  grep -E "== A/B|bwd_tflops|rror|FAIL" /tmp/ab-$2.txt | head -8
  echo "ab $2 done at $SECONDS s"
}
cands=$([ "$ok46" = 1 ] && echo v46,v46b || echo v46b)  # v46b: v46 + dQ in two halves, the first staged while the second runs (narrowed build, no tests of its own)
ab $cands r1 2
ab noredg n1 0
[ "$SECONDS" -lt $((limit - 230)) ] && ab $cands r2 2
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
if [ "$ok46" = 1 ]; then
  for tool in racecheck synccheck memcheck; do
    [ "$SECONDS" -lt $((limit - 60)) ] || break
    TEST_CAND=v46 SANITIZE_TOOLS=$tool SANITIZE_SUITES=backward SANITIZE_TIMEOUT=40 bash scripts/gpu_round.sh sanitize 2>&1 |
      grep -E "ERROR SUMMARY|hazard|exit" | head -3
    echo "v46 $tool done at $SECONDS s"
  done
fi
# cuDNN's forward kernels' SASS with counts (issue 6's D = 128 S = 16k and D = 64 S = 512 rows)
for shape in 128:16384 64:512; do
  [ "$SECONDS" -lt $((limit - 40)) ] || break
  PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CUDNN_SASS=1 PROFILE_CUDNN_PASS=fprop PROFILE90_D=${shape%:*} \
    PROFILE90_S=${shape#*:} bash scripts/gpu_round.sh profilebwd90 > /dev/null 2>&1
  echo "cuDNN fprop SASS D:S = $shape done at $SECONDS s"
done
(cd "$OUT" && tar -cf test-logs.tar gpu-tests-*.txt sanitizer-*.txt 2>/dev/null && rm -f gpu-tests-*.txt sanitizer-*.txt)
echo "end at $SECONDS s"
