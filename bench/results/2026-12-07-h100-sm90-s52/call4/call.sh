#!/usr/bin/env bash
# Session 52, call 4: v48a and v48c against main's kernels, the deterministic mode's cost with the pair, and the GPU
# tests of both candidates together.
#   0. the base library is cand-pairhfull (main's kernels, every head dim and dtype), unpacked into build-device;
#   1. A/B at D = 256 bf16 over grid A's lengths (S = 512 .. 16k, B x S = 16k, H = 8), both masks, 2 verified rows a
#      shape: cand-p48a (v48a: the pair's dQ reductions without a branch between them; narrowed: D = 256, bf16);
#   2. A/B at D = 128 bf16, same lengths (H = 16): cand-p48c (v48c: the LSE pairs loaded before S^T's wait;
#      narrowed: D = 128, bf16);
#   3. the deterministic mode's cost at D = 256 with the pair as the default (--deterministic against the default,
#      S = 512, 4k, 16k, both masks), on the base;
#   4. the GPU tests (backward, then the sm90 forward) on cand-acllfull (v48a + v48c + the large-logits candidate).
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  .device/cand-pairhfull/libflashtile.so.0.1.0.xz build-device/libflashtile.so.0.1.0
ln -sf libflashtile.so.0.1.0 build-device/libflashtile.so.0
ab() {  # <candidate> <tag> <shapes>: the A/B's summary lines; sets ratio (backward, candidate / base)
  AB_CANDS=$1 AB_TAG=$2 \
    AB_ARGS="--shapes $3 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    timeout 200 bash scripts/gpu_round.sh ab > "$OUT/ab-$2.txt" 2>&1
  grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-$2.txt" | head -8
  ratio=$(grep -A3 "== A/B $1 / base" "$OUT/ab-$2.txt" | sed -n 's/.*bwd_tflops: candidate \/ base geometric mean \([0-9.]*\).*/\1/p')
}
ab p48a a "32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256"
ra=$ratio; echo "p48a: ${ra:-none}; done at $SECONDS s"
ab p48c c "32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128"
rc=$ratio; echo "p48c: ${rc:-none}; done at $SECONDS s"
for det in "" --deterministic; do
  timeout 90 build-device/tools/flashtile bench --shapes "32,512,8,256;4,4k,8,256;1,16k,8,256" --causal both \
    --backends cuda-sm90 --dtype bf16 --backward $det --repeats 5 --verify-rows 1 -o "$OUT/det${det:+-on}.jsonl" \
    > /dev/null 2>&1
done
python3 bench/ab_table.py "$OUT/det.jsonl" "$OUT/det-on.jsonl" | tail -9
echo "det done at $SECONDS s"
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl ab-*.txt det*.jsonl && rm -f ab-*.jsonl ab-*.txt det*.jsonl)
# The GPU tests on cand-acllfull: v48a + v48c + the large-logits candidate (bench/candidates/
# cuda-large-logits-clamp.patch), every head dim and dtype, with its own test binaries (which add the LargeLogits
# tests): the backward suite, then the sm90 forward's if time is left.
if [ $((SECONDS + 90)) -lt "$limit" ]; then
  TEST_CAND=acllfull TEST_RUNS=backward TEST_BRIEF=0 TEST_TIMEOUT=$((limit - SECONDS - 10)) bash scripts/gpu_round.sh tests 2>&1 | tail -4
fi
echo "backward tests done at $SECONDS s"
if [ $((SECONDS + 90)) -lt "$limit" ]; then
  TEST_CAND=acllfull TEST_RUNS=forward-sm90 TEST_TIMEOUT=$((limit - SECONDS - 10)) bash scripts/gpu_round.sh tests 2>&1 | tail -4
fi
echo "forward tests done at $SECONDS s"
