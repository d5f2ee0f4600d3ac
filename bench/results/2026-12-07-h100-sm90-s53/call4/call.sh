#!/usr/bin/env bash
# Session 53, call 4, on main b700780's kernels (.device/cand-ll2full, the same code):
#   1. only on an H200: peers.py grids A, L, G in bf16, then A in fp16 (the standing on the issues' card; call 2
#      measured the same library on an H100);
#   2. Nsight Compute on the pair at D = 256, B = 8 S = 2k full (bf16), after v49c: where its time goes now (session
#      52's call 3 has the same profile before v49c).
# LIMIT (seconds, default 400): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-400}
cand=ll2full
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
if [[ $gpu == *H200* ]]; then
  TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  echo "peers bf16 done at $SECONDS s"
  if [ $((SECONDS + 100)) -lt "$limit" ]; then
    TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers fp16 done at $SECONDS s"
else
  echo "peers skipped: $gpu is not an H200"
fi
show() { grep -E "^  [a-z_]*bwd|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|==" | head -24; }
if [ $((SECONDS + 60)) -lt "$limit" ]; then
  PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=$cand PROFILE90_D=256 timeout $((limit - SECONDS - 5)) \
    bash scripts/gpu_round.sh profilebwd90 2>&1 | show
fi
echo "pair 2k full done at $SECONDS s"
ls -la "$OUT"
