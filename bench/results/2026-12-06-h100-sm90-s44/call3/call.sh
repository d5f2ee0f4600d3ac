#!/usr/bin/env bash
# Session 44, call 3: backward v42n (v42's stores from row pointers up to D = 128 only; D = 192 and 256 as main):
# its backward GPU tests with each test's time, one same-call A/B round of the backward against main 020cb1d, then
# Nsight Compute on v42n's main kernel at D = 128 S = 512 full (main's is call 1's), without cuDNN.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
start=$SECONDS
TEST_CAND=v42n TEST_RUNS=backward TEST_TIMEOUT=300 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests.txt 2>&1
grep -E "PASSED|FAILED|SKIPPED|Failure" /tmp/tests.txt | cut -c1-110 | head -12
echo "tests done in $((SECONDS - start)) s"
shapes="32,512,32,64;8,2k,32,64;2,8k,32,64;32,512,12,96;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128"
shapes+=";2,8k,16,128;1,16k,16,128;16,1k,8,192;32,512,8,256;8,2k,8,256;1,16k,8,256"
AB_CANDS=v42n AB_TAG=r1 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  bash scripts/gpu_round.sh ab 2>&1 | grep -E "geometric|rror|FAIL" | head -8
echo "ab done at $SECONDS s"
if [ "$SECONDS" -lt 200 ]; then  # the session's device time: ~400 s left for this call
  PROFILE90_S=512 PROFILE_CANDS=v42n PROFILE_CUDNN=0 bash scripts/gpu_round.sh profilebwd90 2>&1 | grep -E "Duration|Elapsed Cycles" | head -8
fi
echo "done at $SECONDS s"
