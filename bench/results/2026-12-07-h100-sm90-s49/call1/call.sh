#!/usr/bin/env bash
# Session 49, call 1: session 48's call 3 (the pair kernel's A/B and its two exchange diagnostics at D = 256,
# S = 4k and 16k, both masks), then main as peers.py's candidate (grids A, L, G, bf16): the current standing
# against cuDNN on this card, then ncu on pairbd if time is left.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
shapes="4,4k,8,256;1,16k,8,256"
ab() {  # <candidates> <tag> <verify rows>
  AB_CANDS=$1 AB_TAG=$2 \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows $3" \
    timeout 90 bash scripts/gpu_round.sh ab > /tmp/ab-$2.txt 2>&1
  grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed" /tmp/ab-$2.txt | head -12
  echo "ab $2 done at $SECONDS s"
  cp /tmp/ab-$2.txt "$OUT/" 2>/dev/null
}
ab pairn,pairb,pairbd,pairce v 2
ab nop,nods d 0
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G timeout 180 bash scripts/gpu_round.sh peers 2>&1 | tail -5
echo "peers done at $SECONDS s"
[ "$SECONDS" -lt 250 ] && PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairbd PROFILE90_D=256 timeout 150 bash scripts/gpu_round.sh profilebwd90 2>&1 |
  grep -E "Duration|Throughput|==" | head -20
echo "profile done at $SECONDS s"
