#!/usr/bin/env bash
# Session 48, call 2: candidate "pair" (sm90-bwd-v47-pair.patch: D = 256's backward on clusters of two CTAs split
# by product). First the D = 256-only GPU test under a short timeout (a hang stops the call there), then the whole
# backward suite, then A/B against main at D = 256 (S = 512 .. 16k, both masks, verified rows) with D = 128
# controls (the kernel is unchanged there), then racecheck and synccheck on the backward subset.
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t() {  # <runs> <timeout> <tag>
  TEST_CAND=pair TEST_RUNS=$1 TEST_TIMEOUT=$2 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests-$3.txt 2>&1
  cp /tmp/tests-$3.txt "$OUT/tests-$3.txt"
  grep -E "PASSED|FAILED|SKIPPED|Failure|Expected|Which is|actual|error" /tmp/tests-$3.txt | cut -c1-160 | head -14
  echo "tests $3 done at $SECONDS s"
}
t backward-RotatedSweepsAtHeadDim256 60 rot
grep -q "PASSED" /tmp/tests-rot.txt || { echo "stopping: the first test did not pass"; exit 0; }
t backward 200 all
shapes="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256;8,2k,16,128;2,8k,16,128"
AB_CANDS=pair AB_TAG=p1 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 200 bash scripts/gpu_round.sh ab > /tmp/ab-p1.txt 2>&1
grep -E "== A/B|bwd_tflops|rror|FAIL|mismatch" /tmp/ab-p1.txt | head -8
echo "ab done at $SECONDS s"
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
for tool in racecheck synccheck; do
  [ "$SECONDS" -lt $((limit - 60)) ] || break
  TEST_CAND=pair SANITIZE_TOOLS=$tool SANITIZE_SUITES=backward SANITIZE_TIMEOUT=50 bash scripts/gpu_round.sh sanitize 2>&1 |
    grep -E "ERROR SUMMARY|hazard|exit" | head -3
  echo "$tool done at $SECONDS s"
done
