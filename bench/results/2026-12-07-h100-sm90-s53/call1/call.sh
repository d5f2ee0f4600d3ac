#!/usr/bin/env bash
# Session 53, call 1: three candidates against main's kernels (base: build-device, main c23d54e, every head dim and
# dtype), bf16, same call:
#   1. allfull (main + bench/candidates/cuda-large-logits-clamp.patch + sm90-bwd-pair-occupancy-cache.patch +
#      sm90-bwd-v49c-pair-dq-reduced-next-step.patch, every head dim and dtype): the large-logits patch's cost, one
#      FMNMX an exponent, over grid A's head dims at S = 512, 2k, 16k, both masks, forward and backward (at D = 64
#      and 128, and the D = 256 forward, the large-logits patch is the only kernel change; D = 256's backward also
#      has v49c, measured alone in 2);
#   2. v49cn (sm90-bwd-v49c-pair-dq-reduced-next-step.patch; narrowed to D = 256 bf16): the pair's gradient CTA
#      reduces a step's dQ behind the next step's dP^T; D = 256 over grid A's lengths, both masks;
#   3. occn (sm90-bwd-pair-occupancy-cache.patch; narrowed to D = 256 bf16): the pair's occupancy query asked once a
#      device: host time of a tiny backward (B = H = 1, S = 128), where the calls wait for the host, and grid A's
#      S = 512 row;
#   4. the GPU tests on allfull (with its own test binaries, which add the large-logits tests): the backward suite,
#      then the forward suites, as far as the time goes.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
ab() {  # <candidate> <tag> <bench options>: the A/B's summary lines
  AB_CANDS=$1 AB_TAG=$2 AB_ARGS="$3" timeout 300 bash scripts/gpu_round.sh ab > "$OUT/ab-$2.txt" 2>&1
  grep -E "== A/B .* / base|_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-$2.txt" | head -8
  echo "$1 done at $SECONDS s"
}
d256="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256"
ab v49cn pair "--shapes $d256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2"
ab occn occ "--shapes 1,128,1,256;32,512,8,256 --causal false --backends cuda-sm90 --dtype bf16 --backward --repeats 30 --verify-rows 1"
ll="32,512,32,64;8,2k,32,64;1,16k,32,64;32,512,16,128;8,2k,16,128;1,16k,16,128;32,512,8,256;8,2k,8,256;1,16k,8,256"
ab allfull ll "--shapes $ll --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2"
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
for run in backward forward-sm90 forward-sm80; do
  if [ $((SECONDS + 130)) -lt "$limit" ]; then
    TEST_CAND=allfull TEST_RUNS=$run TEST_TIMEOUT=$((limit - SECONDS - 10)) bash scripts/gpu_round.sh tests 2>&1 | tail -4
  fi
  echo "tests $run done at $SECONDS s"
done
(cd "$OUT" && tar -cf test-logs.tar gpu-tests-*.txt 2>/dev/null && rm -f gpu-tests-*.txt)
