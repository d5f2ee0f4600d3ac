#!/usr/bin/env bash
# Session 48, call 3: why the pair kernel (v47) ran 0.69x main at D = 256 (call 2, an H100). Narrowed libraries
# (D = 256 bf16): pairn (v47 itself), pairb (P^T sent in bf16 / fp16 instead of fp32: half the DSMEM bytes one
# way), pairbd (pairb + tiles from the counter, published to both CTAs: the causal rows), and two diagnostics that
# give wrong results on purpose (timed without verification): nop (P^T not sent) and nods (dS^T not sent); pairce:
# pairbd + v47c (S^T two steps ahead) + v47e (the gradient CTA's dP^T in its own step).
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
shapes="4,4k,8,256;1,16k,8,256"
ab() {  # <candidates> <tag> <verify rows>
  AB_CANDS=$1 AB_TAG=$2 \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows $3" \
    timeout 90 bash scripts/gpu_round.sh ab > /tmp/ab-$2.txt 2>&1
  grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed" /tmp/ab-$2.txt | head -12
  echo "ab $2 done at $SECONDS s"
}
ab pairn,pairb,pairbd,pairce v 2
ab nop,nods d 0
cp /tmp/ab-v.txt /tmp/ab-d.txt "$OUT/" 2>/dev/null
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
# Where pairbd's step goes: ncu with SASS samples, B = 8 S = 2k D = 256 full (its main kernel only)
[ "$SECONDS" -lt 60 ] && PROFILE_FLASHTILE=0 PROFILE_CUDNN=0 PROFILE_CANDS=pairbd PROFILE90_D=256 timeout 150 bash scripts/gpu_round.sh profilebwd90 2>&1 |
  grep -E "Duration|Throughput|==" | head -20
echo "profile done at $SECONDS s"
