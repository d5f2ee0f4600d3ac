#!/usr/bin/env bash
# Prepared in session 52 for the next call. Carry .device holding cand-mainfull (main e119621's library: every head
# dim and dtype; the ab stage's base, unpacked into build-device) and cand-llfull (main + bench/candidates/
# cuda-large-logits-clamp.patch, every head dim and dtype, with its own GPU test binaries); move other cand-* aside
# (the carry limit is 64 MiB). Carry build-device/tools/flashtile too.
#   1. the forward GPU suites (forward-sm80, forward-sm90) on llfull: the large-logits patch's forward kernels and
#      its CudaForward.LargeLogitsRowsComeOutRight (its backward suite passed in session 52's call 4);
#   2. A/B of llfull against main over grid A's head dims (bf16, forward and backward, S = 512, 2k, 16k, both masks):
#      the patch's cost, one FMNMX a score (merge if the forward and backward stay >= 0.995x);
#   3. peers.py on main (grids A, L, G in bf16, then A in fp16): the standing after v48c, on the H200 if it came.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  .device/cand-mainfull/libflashtile.so.0.1.0.xz build-device/libflashtile.so.0.1.0
ln -sf libflashtile.so.0.1.0 build-device/libflashtile.so.0
TEST_CAND=llfull TEST_RUNS="forward-sm80 forward-sm90" TEST_TIMEOUT=150 bash scripts/gpu_round.sh tests 2>&1 | tail -8
echo "tests done at $SECONDS s"
shapes="32,512,32,64;8,2k,32,64;1,16k,32,64;32,512,16,128;8,2k,16,128;1,16k,16,128;32,512,8,256;8,2k,8,256;1,16k,8,256"
AB_CANDS=llfull AB_TAG=ll \
  AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 200 bash scripts/gpu_round.sh ab > "$OUT/ab-ll.txt" 2>&1
grep -E "== A/B .* / base|_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-ll.txt" | head -8
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
echo "ab done at $SECONDS s"
if [ $((SECONDS + 110)) -lt "$limit" ]; then
  PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers bf16 done at $SECONDS s"
if [ $((SECONDS + 90)) -lt "$limit" ]; then
  PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
fi
echo "peers fp16 done at $SECONDS s"
