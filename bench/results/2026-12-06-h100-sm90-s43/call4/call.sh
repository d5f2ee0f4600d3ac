#!/usr/bin/env bash
# Session 43, call 4: diagnostics of backward v39's loss: v39nc (the finisher counts but does not convert; the
# conversion kernel runs) and v39nf (the finisher only takes and hands back the loader's step slots; no counts,
# no fences; the conversion kernel runs), one A/B round against main's library.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
shapes="32,512,32,64;2,8k,32,64;32,512,16,128;8,2k,16,128;1,16k,16,128;32,512,8,256;1,16k,8,256"
AB_CANDS=v39nc,v39nf AB_TAG=r1 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  bash scripts/gpu_round.sh ab 2>&1 | grep -E "geometric|rror|FAIL" | head -8
echo "ab done at $SECONDS s"
