#!/usr/bin/env bash
# Session 49's call 2 (not run; for the next session): pairf (pairce + v47f: the gradient CTA's dV issued behind
# dP^T) against pairce and main at D = 256; two diagnostics onto pairf that send almost none of one exchange's
# bytes (fp4: P^T 4 bytes a thread instead of 64; fds16: 16 bytes of dS^T instead of 16 KB; both keep every
# barrier's handshake, unlike session 48's nop, which hung); then where pairf's step goes (Nsight Compute with SASS
# samples, B = 8 S = 2k full; main's D = 256 profile: bench/results/2026-12-06-h100-sm90-s46/call2).
# Carry: .device holding cand-pairce, cand-pairf, cand-fp4 and cand-fds16 only (move the others aside: 64 MiB).
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
ab pairce,pairf f 2
ab fp4,fds16 g 0
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairf PROFILE90_D=256 timeout 150 bash scripts/gpu_round.sh profilebwd90 2>&1 |
  grep -E "Duration|SM Frequency|Throughput|==" | head -30
echo "profile done at $SECONDS s"
