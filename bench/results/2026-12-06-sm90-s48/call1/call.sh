#!/usr/bin/env bash
# Session 47, call 3: how dQ's reduction cost scales with its bytes. Diagnostics noredg (no dQ reductions) and
# halfredg (every other 8-column block's reductions only: half the bytes, as a pair of CTAs summing dQ before it
# leaves would send) and nodoload (dO not loaded: half the step's Q and dO bytes), D = 128 and 256 bf16, timed without verification, one round; then compute-sanitizer's
# initcheck on main's backward subset (the kernels of v44 and v45 never ran under it).
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
shapes="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256;8,2k,16,128;2,8k,16,128"
AB_CANDS=noredg,halfredg,nodoload AB_TAG=h1 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 0" \
  bash scripts/gpu_round.sh ab > /tmp/ab-h1.txt 2>&1
grep -E "== A/B .* / base|bwd_tflops|rror|FAIL" /tmp/ab-h1.txt | head -8
echo "ab h1 done at $SECONDS s"
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
[ "$SECONDS" -lt 100 ] && SANITIZE_TOOLS=initcheck SANITIZE_SUITES=backward SANITIZE_TIMEOUT=60 bash scripts/gpu_round.sh sanitize 2>&1 |
  grep -E "ERROR SUMMARY|== compute|exit" | head -6
echo "end at $SECONDS s"
