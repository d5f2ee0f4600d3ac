#!/usr/bin/env bash
# Session 54, call 3: the standing on main d333852's kernels (cand-v53full: the same kernels), only on an H200:
# peers.py grids A, L, G in bf16, then A in fp16. On another card it stops at once (the issues' targets are the
# H200's; the H100 standing of these kernels is call 2's).
# LIMIT (seconds, default 250): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-250}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
if [[ $gpu != *H200* ]]; then
  echo "stopped: $gpu is not an H200"
  exit 0
fi
TEST_CAND=v53full PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
echo "peers bf16 done at $SECONDS s"
if [ $((SECONDS + 90)) -lt "$limit" ]; then
  TEST_CAND=v53full PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers fp16 done at $SECONDS s"
