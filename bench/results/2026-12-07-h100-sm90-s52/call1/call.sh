#!/usr/bin/env bash
# Prepared in session 50 for the next call (not run there: its device time ran out). Carry .device holding
# cand-pairf, cand-pairh (narrowed: D = 256, bf16) and cand-pairhfull (every head dim and dtype, with its own GPU
# test binaries); move other cand-* aside (the carry limit is 64 MiB).
#   1. A/B at D = 256, S = 4k and 16k, both masks: pairh (pairf + v47h: the pair's arrivals on the peer's
#      mbarriers and its waits at CTA scope, so no MEMBAR.ALL.GPU before each hand-back) and pairf against main,
#      2 verified rows a shape;
#   2. the backward GPU tests on pairhfull's library and its own test binaries (every D = 256 case the suite has
#      runs the pair kernel outside the deterministic mode and the softcap);
#   3. peers.py with pairhfull as flashtile-sm90 (grids A, L, G, bf16), if time is left.
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
AB_CANDS=pairf,pairh AB_TAG=h \
  AB_ARGS="--shapes 4,4k,8,256;1,16k,8,256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 100 bash scripts/gpu_round.sh ab > "$OUT/ab-h.txt" 2>&1
grep -E "== A/B .* / base|bwd_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-h.txt" | head -12
pairh=$(grep -A3 "== A/B pairh / base" "$OUT/ab-h.txt" | sed -n 's/.*bwd_tflops: candidate \/ base geometric mean \([0-9.]*\).*/\1/p')
echo "pairh bwd / main: ${pairh:-none}"
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl ab-*.txt && rm -f ab-*.jsonl ab-*.txt)
echo "ab done at $SECONDS s"
# The tests and peers.py take pairhfull only if pairh is to be merged (its backward >= 1.01x main); else the tests
# are skipped and peers.py times main's library.
peers_cand=
if python3 -c "import sys; sys.exit(0 if float('${pairh:-0}') >= 1.01 else 1)"; then peers_cand=pairhfull; fi
if [ -n "$peers_cand" ] && [ $((SECONDS + 220)) -lt "$limit" ]; then
  TEST_CAND=pairhfull TEST_RUNS=backward TEST_TIMEOUT=$((limit - SECONDS - 30)) bash scripts/gpu_round.sh tests 2>&1 | tail -8
fi
echo "tests done at $SECONDS s"
if [ $((SECONDS + 170)) -lt "$limit" ]; then
  TEST_CAND=$peers_cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G timeout $((limit - SECONDS - 5)) \
    bash scripts/gpu_round.sh peers 2>&1 | tail -4
fi
echo "peers done at $SECONDS s"
