#!/usr/bin/env bash
# Session 44, call 2: backward v42 (the tile's dK / dV stores at constant offsets from row pointers, not an address
# computed per store): its backward GPU tests with each test's time, then same-call A/B rounds of the backward
# against main 020cb1d (this tree's library; its kernels are 71d60e3's): v42 over grid A's head dims, and v4142
# (v41's hidden keys on v42; bf16, D = 64, 96, 128 only) over those head dims.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
start=$SECONDS
TEST_CAND=v42 TEST_RUNS=backward TEST_TIMEOUT=300 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests.txt 2>&1
grep -E "^\[       OK \]|PASSED|FAILED|SKIPPED|Failure" /tmp/tests.txt | cut -c1-110 | head -40
echo "tests done in $((SECONDS - start)) s"
narrow="32,512,32,64;8,2k,32,64;2,8k,32,64;32,512,12,96;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128"
narrow+=";2,8k,16,128;1,16k,16,128"
all="$narrow;16,1k,8,192;32,512,8,256;8,2k,8,256;1,16k,8,256"
ab() {  # <candidates> <tag> <shapes>
  AB_CANDS=$1 AB_TAG=$2 \
    AB_ARGS="--shapes $3 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    bash scripts/gpu_round.sh ab 2>&1 | grep -E "geometric|rror|FAIL" | head -8
  echo "ab $1 $2 done at $SECONDS s"
}
ab v42 r1 "$all"
[ -d .device/cand-v4142 ] && ab v4142 n1 "$narrow"
ab v42 r2 "$all"
