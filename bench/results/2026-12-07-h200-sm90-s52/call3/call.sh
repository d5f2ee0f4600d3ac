#!/usr/bin/env bash
# Session 52, call 3: where the pair backward's time goes now (v47h on main), and D = 128 beside cuDNN.
#   1. ncu on the pair (cand-pairhfull), D = 256 bf16: B = 8 S = 2k full; B = 32 S = 512 causal (grid A's lowest
#      D = 256 row against cuDNN);
#   2. ncu on the one-CTA kernel at D = 128, B = 4 S = 4k full (0.97x cuDNN in call 2) and cuDNN's kernels there.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
show() { grep -E "^  [a-z_]*bwd|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|==" | head -24; }
PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairhfull PROFILE90_D=256 timeout $((limit - SECONDS - 5)) \
  bash scripts/gpu_round.sh profilebwd90 2>&1 | show
echo "pair 2k full done at $SECONDS s"
if [ $((SECONDS + 70)) -lt "$limit" ]; then
  PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairhfull PROFILE90_D=256 PROFILE90_S=512 PROFILE90_CAUSAL=1 \
    timeout $((limit - SECONDS - 5)) bash scripts/gpu_round.sh profilebwd90 2>&1 | show
fi
echo "pair 512 causal done at $SECONDS s"
if [ $((SECONDS + 120)) -lt "$limit" ]; then
  PROFILE_FLASHTILE=0 PROFILE_CANDS=pairhfull PROFILE90_S=4096 timeout $((limit - SECONDS - 5)) \
    bash scripts/gpu_round.sh profilebwd90 2>&1 | show
fi
echo "D = 128 done at $SECONDS s"
ls -la "$OUT"
