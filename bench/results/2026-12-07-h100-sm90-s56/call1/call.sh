#!/usr/bin/env bash
# Session 55, call 4, on main d3dddd7's library (build-device): on an H200 the issues' standing (gpu_round.sh
# standing: grids A, L, G in bf16, then A in fp16); on another card Nsight Compute on the one-CTA backward at D = 128,
# B = 4 S = 4k full, beside cuDNN's kernels (the last such profile is session 52's, before v48c).
cd "$(dirname "$0")/.."
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
if [[ $gpu == *H200* ]]; then
  timeout 250 bash scripts/gpu_round.sh standing 2>&1 | tail -6
  echo "standing done at $SECONDS s"
else
  show() { grep -E "^  [a-z_]*bwd|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|==" | head -24; }
  PROFILE90_S=4096 timeout 200 bash scripts/gpu_round.sh profilebwd90 2>&1 | show
  echo "profile done at $SECONDS s"
fi
ls -la "$OUT"
