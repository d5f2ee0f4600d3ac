#!/usr/bin/env bash
# Session 49's call 2 (not run; for the next session): pairf (pairce + v47f: the gradient CTA's dV issued behind
# dP^T) against pairce and main at D = 256; two diagnostics onto pairf that send almost none of one exchange's
# bytes (fp4: P^T 4 bytes a thread instead of 64; fds16: 16 bytes of dS^T instead of 16 KB; both keep every
# barrier's handshake, unlike session 48's nop, which hung); then where pairf's step goes (Nsight Compute with SASS
# samples, B = 8 S = 2k full; main's D = 256 profile: bench/results/2026-12-06-h100-sm90-s46/call2).
# Carry: .device holding cand-pairce, cand-pairf, cand-fp4 and cand-fds16 only (move the others aside: 64 MiB).
# Each A/B has a time limit: a diagnostic that deadlocks must not take the call with it.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timed="--shapes 4,4k,8,256;1,16k,8,256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10"
AB_CANDS=pairce,pairf AB_TAG=f AB_ARGS="$timed --verify-rows 2" timeout 90 bash scripts/gpu_round.sh ab 2>&1 |
  tee "$OUT/ab-f.txt" | grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed"
AB_CANDS=fp4,fds16 AB_TAG=g AB_ARGS="$timed --verify-rows 0" timeout 90 bash scripts/gpu_round.sh ab 2>&1 |
  tee "$OUT/ab-g.txt" | grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed"
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairf PROFILE90_D=256 timeout 150 bash scripts/gpu_round.sh profilebwd90 2>&1 |
  grep -E "Duration|SM Frequency|Throughput|==" | head -30
echo "profile done at $SECONDS s"
