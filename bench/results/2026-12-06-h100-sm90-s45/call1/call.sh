#!/usr/bin/env bash
# Session 45, call 1: backward v43 (up to D = 128 the tile's dK and dV leave by TMA stores from a staging buffer,
# not 4-byte stores from the accumulators): its backward GPU tests with each test's time, two same-call A/B rounds
# of the backward against main b786f40 (this tree's library), then peers.py (grids A, L, G in bf16) on v43 if its
# tests passed and it gained in both rounds, else on main.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
start=$SECONDS
TEST_CAND=v43 TEST_RUNS=backward TEST_TIMEOUT=300 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests.txt 2>&1
grep -E "^\[       OK \]|PASSED|FAILED|SKIPPED|Failure" /tmp/tests.txt | cut -c1-110 | head -40
echo "tests done in $((SECONDS - start)) s"
shapes="32,512,32,64;8,2k,32,64;2,8k,32,64;32,512,12,96;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128"
shapes+=";2,8k,16,128;1,16k,16,128;16,1k,8,192;32,512,8,256;8,2k,8,256;1,16k,8,256"
ab() {  # <tag>
  AB_CANDS=v43 AB_TAG=$1 \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    bash scripts/gpu_round.sh ab 2>&1 | grep -E "geometric|rror|FAIL" | head -8
  echo "ab $1 done at $SECONDS s"
}
ab r1
ab r2
ratio() { python3 bench/ab_table.py "$OUT/ab-base-$1.jsonl" "$OUT/ab-v43-$1.jsonl" | sed -n "s/.*bwd_tflops: candidate \/ base geometric mean \([0-9.]*\) .*/\1/p"; }
r1=$(ratio r1) r2=$(ratio r2)
lib=""
if grep -q "PASSED" /tmp/tests.txt && ! grep -q "FAILED" /tmp/tests.txt &&
   python3 -c "import sys; sys.exit(0 if float('${r1:-0}') > 1.005 and float('${r2:-0}') > 1.005 else 1)"; then
  lib=v43
fi
echo "backward v43/main: r1 $r1, r2 $r2; peers.py runs ${lib:-main}"
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
if [ "$SECONDS" -lt 330 ]; then
  TEST_CAND=$lib PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "end at $SECONDS s"
