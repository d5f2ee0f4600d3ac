#!/usr/bin/env bash
# Session 45, call 2: why v43 (dK / dV by TMA stores) lost 3-7% at D = 128 S >= 4k in call 1, where the stores
# are rare. Three same-call A/B rounds of the D = 128 bf16 backward against main b786f40 (this tree's library):
#   v43:  as in call 1 (211 KB of shared memory at D = 128: the 228 KB carveout, 28 KB left to L1);
#   pad:  main with 32 KB of unused shared memory at D = 128 (SASS as main's but for offsets): the carveout alone;
#   v43t: v43 with one staging half at D = 128, which the consumers take in turn (195 KB: the 196 KB carveout).
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
shapes="32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128"
for r in r1 r2 r3; do
  AB_CANDS=v43,pad,v43t AB_TAG=$r \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    bash scripts/gpu_round.sh ab 2>&1 | grep -E "bwd_tflops|rror|FAIL|/ base" | head -12
  echo "ab $r done at $SECONDS s"
  [ "$SECONDS" -gt 400 ] && break
done
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
echo "end at $SECONDS s"
