#!/usr/bin/env bash
# Session 49, call 2: pairf (pairce + v47f: the gradient CTA's dV issued behind dP^T) against pairce and main at
# D = 256, then where pairf's step goes (Nsight Compute with SASS samples, B = 8 S = 2k full; main's D = 256
# profile: bench/results/2026-12-06-h100-sm90-s46/call2).
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
AB_CANDS=pairce,pairf AB_TAG=f \
  AB_ARGS="--shapes 4,4k,8,256;1,16k,8,256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 60 bash scripts/gpu_round.sh ab > /tmp/ab-f.txt 2>&1
grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed" /tmp/ab-f.txt | head -12
cp /tmp/ab-f.txt "$OUT/"; (cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
echo "ab done at $SECONDS s"
[ "$SECONDS" -lt 70 ] && PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairf PROFILE90_D=256 timeout 110 bash scripts/gpu_round.sh profilebwd90 2>&1 |
  grep -E "Duration|SM Frequency|Throughput|==" | head -30
echo "profile done at $SECONDS s"
