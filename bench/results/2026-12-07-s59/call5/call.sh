#!/usr/bin/env bash
# Session 59, call 5: forward v32 (candidate v32: tile numbers taken a tile ahead; branch fwd-atomic-ahead) against
# main 2ef3e3b's library: the sm90 forward GPU tests on it, then a same-call A/B at the short shapes it aims at,
# with D = 128 S = 16k and D = 256 S = 512 beside them.
cd "$(dirname "$0")/../../../.."  # the repository root
w=$OUT/w; mkdir -p "$w"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$w/machine.txt"
TEST_CAND=v32 TEST_RUNS=forward-sm90 TEST_TIMEOUT=100 OUT=$w bash scripts/gpu_round.sh tests > "$w/tests-v32.txt" 2>&1
echo "v32 tests rc $? at $SECONDS s"; tail -2 "$w/tests-v32.txt"
shapes="32,512,32,64;16,1k,32,64;8,2k,32,64;32,512,16,128;16,1k,16,128;8,2k,16,128;1,16k,16,128;32,512,8,256"
AB_CANDS=v32 AB_TAG=r1 AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --repeats 10 --verify-rows 2" \
  OUT=$w timeout 150 bash scripts/gpu_round.sh ab > "$w/ab-r1.txt" 2>&1
python3 bench/ab_table.py "$w/ab-base-r1.jsonl" "$w/ab-v32-r1.jsonl" > "$w/table-v32-r1.txt" 2>&1
echo "v32 r1: $(grep -c "NOT VERIFIED" "$w/table-v32-r1.txt") rows not verified; at $SECONDS s"; cat "$w/table-v32-r1.txt"
(cd "$OUT" && tar -czf all.tar.gz w && rm -rf w)
