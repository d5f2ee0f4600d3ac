#!/usr/bin/env bash
# Session 53, call 2: ll2full (main dc47f9b, with v49c and the pair's occupancy cache, + bench/candidates/
# cuda-large-logits-ll2.patch; every head dim and dtype, with its own test binaries), which is what would be merged:
#   1. the GPU tests: backward, forward-sm90, forward-sm80 (the large-logits tests among them);
#   2. its cost against main c23d54e's kernels (build-device, the base): grid A's head dims at S = 512, 2k, 16k,
#      both masks, forward and backward, bf16 (at D = 64 and 128 the large-logits change is the only kernel change;
#      the D = 256 backward also has v49c, 1.034x in call 1);
#   3. host time of a tiny D = 256 backward (B = H = 1, S = 128: the calls wait for the host), base against it (the
#      occupancy cache; the tool's errors kept this time);
#   4. peers.py on it: grids A, L, G in bf16, then A in fp16 (the standing; the issues' targets are the H200's).
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
cand=ll2full
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
for run in backward forward-sm90 forward-sm80; do
  TEST_CAND=$cand TEST_RUNS=$run TEST_TIMEOUT=200 bash scripts/gpu_round.sh tests 2>&1 | tail -3
  echo "tests $run done at $SECONDS s"
done
ll="32,512,32,64;8,2k,32,64;1,16k,32,64;32,512,16,128;8,2k,16,128;1,16k,16,128;32,512,8,256;8,2k,8,256;1,16k,8,256"
AB_CANDS=$cand AB_TAG=ll2 \
  AB_ARGS="--shapes $ll --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 200 bash scripts/gpu_round.sh ab > "$OUT/ab-ll2.txt" 2>&1
grep -E "== A/B .* / base|_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-ll2.txt" | head -8
echo "ab done at $SECONDS s"
lib=/tmp/flashtile-cand-$cand
for which in base cand; do
  dir=$PWD/build-device
  [ $which = cand ] && dir=$lib
  LD_LIBRARY_PATH=$dir:$PWD/.device/lib timeout 60 build-device/tools/flashtile bench --shapes "1,128,1,256" \
    --causal false --backends cuda-sm90 --dtype bf16 --backward --repeats 50 --verify-rows 1 \
    -o "$OUT/ab-host-$which.jsonl" > "$OUT/ab-host-$which.txt" 2>&1 || echo "host $which: exit $?"
done
python3 bench/ab_table.py "$OUT/ab-host-base.jsonl" "$OUT/ab-host-cand.jsonl" | tail -4
echo "host done at $SECONDS s"
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
if [ $((SECONDS + 120)) -lt "$limit" ]; then
  TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers bf16 done at $SECONDS s"
if [ $((SECONDS + 100)) -lt "$limit" ]; then
  TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers fp16 done at $SECONDS s"
