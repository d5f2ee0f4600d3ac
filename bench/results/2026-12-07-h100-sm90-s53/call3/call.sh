#!/usr/bin/env bash
# Session 53, call 3, on main b700780's kernels (.device/cand-ll2full: the same code, every head dim and dtype, with
# its own test binaries):
#   1. compute-sanitizer (memcheck, racecheck, synccheck) on the backward subset, whose D = 256 case runs the pair
#      (v49c changed its gradient CTA);
#   2. host time of a tiny D = 256 backward (B = H = 1, S = 128, full: the calls wait for the host), main c23d54e's
#      library (build-device) against it: the pair's occupancy cache (call 2's try passed --causal false, which the
#      tool refuses);
#   3. only on an H200 (the issues' targets are the H200's; call 2 measured the same library on an H100): peers.py
#      grids A, L, G in bf16, then A in fp16.
# LIMIT (seconds, default 400): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-400}
cand=ll2full
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
TEST_CAND=$cand SANITIZE_SUITES=backward SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_TIMEOUT=100 \
  bash scripts/gpu_round.sh sanitize 2>&1 | grep -E "^==|exit|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK|PASSED|FAILED" | head -20
echo "sanitize done at $SECONDS s"
lib=/tmp/flashtile-cand-$cand
for round in 1 2; do
  for which in base cand; do
    dir=$PWD/build-device
    [ $which = cand ] && dir=$lib
    LD_LIBRARY_PATH=$dir:$PWD/.device/lib timeout 60 build-device/tools/flashtile bench --shapes "1,128,1,256" \
      --causal off --backends cuda-sm90 --dtype bf16 --backward --repeats 50 --verify-rows 1 \
      -o "$OUT/host-$which-$round.jsonl" >> "$OUT/host.txt" 2>&1 || echo "host $which: exit $?"
  done
  python3 bench/ab_table.py "$OUT/host-base-$round.jsonl" "$OUT/host-cand-$round.jsonl" | tail -4
done
(cd "$OUT" && tar -czf host.tar.gz host* && rm -f host-*.jsonl host.txt)
echo "host done at $SECONDS s"
if [[ $gpu == *H200* ]]; then
  if [ $((SECONDS + 120)) -lt "$limit" ]; then
    TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers bf16 done at $SECONDS s"
  if [ $((SECONDS + 100)) -lt "$limit" ]; then
    TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers fp16 done at $SECONDS s"
else
  echo "peers skipped: $gpu is not an H200"
fi
