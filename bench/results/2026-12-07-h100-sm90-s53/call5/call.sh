#!/usr/bin/env bash
# Session 53, call 5:
#   1. A/B at D = 256 bf16 over grid A's lengths, both masks: mainn (main d01d49b: v49c; narrowed to D = 256 bf16)
#      and v51n (the same + bench/candidates/sm90-bwd-v51-pair-probs-loaded-before-step.patch: the gradient CTA
#      loads a step's P^T before the step, so that dV is issued right behind dP^T), each against build-device (main
#      c23d54e); v51n / mainn is read from the two files;
#   2. only on an H200: peers.py grids A, L, G in bf16, then A in fp16, on cand-ll2full (main b700780's kernels,
#      the same code as main's now).
# LIMIT (seconds, default 450): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-450}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
d256="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256"
AB_CANDS=mainn,v51n AB_TAG=v51 \
  AB_ARGS="--shapes $d256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 250 bash scripts/gpu_round.sh ab > "$OUT/ab-v51.txt" 2>&1
grep -E "== A/B .* / base|_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-v51.txt" | head -8
echo "== v51n / mainn"
python3 bench/ab_table.py "$OUT/ab-mainn-v51.jsonl" "$OUT/ab-v51n-v51.jsonl" | tail -3
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
echo "ab done at $SECONDS s"
if [[ $gpu == *H200* ]]; then
  if [ $((SECONDS + 120)) -lt "$limit" ]; then
    TEST_CAND=ll2full PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers bf16 done at $SECONDS s"
  if [ $((SECONDS + 100)) -lt "$limit" ]; then
    TEST_CAND=ll2full PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers fp16 done at $SECONDS s"
else
  echo "peers skipped: $gpu is not an H200"
fi
