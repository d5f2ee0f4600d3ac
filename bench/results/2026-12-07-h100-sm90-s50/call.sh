#!/usr/bin/env bash
# Session 50, call 1: session 49's prepared call 2 plus the standing against the peers.
#   1. A/B at D = 256 (S = 4k and 16k, both masks): pairce and pairf (pairce + v47f, dV behind dP^T) against main,
#      2 verified rows a shape;
#   2. peers.py with main as flashtile-sm90 (grids A, L, G, bf16): issue 6's and 7's standing on this card;
#   3. diagnostics fp4 and fds16 onto pairf (unverified; each A/B under a time limit);
#   4. Nsight Compute on pairf at D = 256 if time is left.
# LIMIT (seconds, default 580): the call's time limit; a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
timed="--shapes 4,4k,8,256;1,16k,8,256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10"
ab() {  # <candidates> <tag> <verify rows>
  AB_CANDS=$1 AB_TAG=$2 AB_ARGS="$timed --verify-rows $3" timeout 100 bash scripts/gpu_round.sh ab > "$OUT/ab-$2.txt" 2>&1
  grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-$2.txt" | head -12
  echo "ab $2 done at $SECONDS s"
}
limit=${LIMIT:-580}
ab pairce,pairf f 2
if [ $((SECONDS + 170)) -lt "$limit" ]; then
  PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G timeout $((limit - SECONDS - 5)) bash scripts/gpu_round.sh peers 2>&1 | tail -4
fi
[ $((SECONDS + 60)) -lt "$limit" ] && ab fp4,fds16 g 0
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl ab-*.txt && rm -f ab-*.jsonl ab-*.txt)
echo "peers done at $SECONDS s"
if [ $((SECONDS + 120)) -lt "$limit" ]; then
  PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairf PROFILE90_D=256 timeout $((limit - SECONDS - 5)) \
    bash scripts/gpu_round.sh profilebwd90 2>&1 | grep -E "Duration|SM Frequency|Throughput|==" | head -30
fi
echo "profile done at $SECONDS s"
