#!/usr/bin/env bash
# Session 59, call 2: main with forward v31 (the library of candidate ctr, the same sources) through peers.py:
# on an H200 the issues' standing (grids A, L, G in bf16, then A in fp16); on another card grid A in fp16 (call 1
# measured bf16 A, L, G there).
cd "$(dirname "$0")/../../.."  # the repository root
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  TEST_CAND=ctr bash scripts/gpu_round.sh standing
else
  TEST_CAND=ctr PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers
fi
ls -R "$OUT" | head
