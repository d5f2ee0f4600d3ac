#!/usr/bin/env bash
# Session 43, call 5: backward v40 (three finishers, batches as released, a ring of 64): one A/B round against
# main's library (741c203: the same backward below D = 256); if it wins, v40's sm90 backward GPU tests and the
# race and sync checks on the backward subset.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
shapes="32,512,32,64;8,2k,32,64;2,8k,32,64;32,512,12,96;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128"
shapes+=";2,8k,16,128;1,16k,16,128;16,1k,8,192;32,512,8,256;8,2k,8,256;1,16k,8,256"
AB_CANDS=v40 AB_TAG=r1 \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  bash scripts/gpu_round.sh ab 2>&1 | grep -E "geometric|rror|FAIL" | head -8
echo "ab done at $SECONDS s"
gm=$(python3 bench/ab_table.py "${OUT:-out}/ab-base-r1.jsonl" "${OUT:-out}/ab-v40-r1.jsonl" | grep bwd_tflops | sed 's/.*geometric mean \([0-9.]*\).*/\1/')
echo "v40 bwd geometric mean $gm"
if ! python3 -c "import sys; sys.exit(0 if float('${gm:-0}') > 0.99 else 1)"; then echo "v40 lost: no tests"; exit 0; fi
if [ "$SECONDS" -lt 200 ]; then
  TEST_CAND=v40 TEST_RUNS="backward-Sm90.DqConverted*:*Sm90.SeveralTiles*:*Sm90.RowsAndKeys*" TEST_TIMEOUT=150 \
    bash scripts/gpu_round.sh tests 2>&1 | grep -E "PASSED|FAILED|SKIPPED|tests ran|Failure|rror" | head -20
  echo "tests done at $SECONDS s"
fi
