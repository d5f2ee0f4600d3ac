#!/usr/bin/env bash
# Session 46, call 4 (the last device time): main 8649400 (backward v44 + v45). On an H200: peers.py, grids A, L,
# G in bf16 and grid A in fp16 (issues 6 and 7 ask for the H200). On an H100 (two peers.py runs of this main
# already): the GPU test suites of every family instead.
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-190}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
if [[ $gpu == *H200* ]]; then
  PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -1
  echo "peers bf16 done at $SECONDS s"
  if [ "$SECONDS" -lt $((limit - 75)) ]; then
    PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -1
    echo "peers fp16 done at $SECONDS s"
  fi
else
  for suite in forward-sm90 forward-sm80 backward; do
    [ "$SECONDS" -lt $((limit - 60)) ] || break
    TEST_RUNS=$suite TEST_TIMEOUT=$((limit - SECONDS - 5)) bash scripts/gpu_round.sh tests > /tmp/t-$suite.txt 2>&1
    echo "$suite: $(grep -E 'PASSED|FAILED|SKIPPED \]' /tmp/t-$suite.txt | head -3 | tr '\n' ' ') at $SECONDS s"
  done
fi
echo "end at $SECONDS s"
