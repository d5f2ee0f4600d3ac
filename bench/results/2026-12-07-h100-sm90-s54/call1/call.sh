#!/usr/bin/env bash
# Session 54, call 1:
#   1. A/B at D = 256 over grid A's lengths, both masks, bf16: v52full (main 33e72e1 + bench/candidates/
#      sm90-bwd-v52-pair-first-dp-early.patch: the pair's gradient CTA issues a tile's first dP^T before waiting
#      for its P^T) and v53n (v52 + sm90-bwd-v53-pair-dk-staged-beside-keys.patch: the scores CTA stages a tile's
#      dK outside K, so the next tile's K loads under the stores; narrowed to D = 256 bf16) and v53bn (v53 +
#      sm90-bwd-v53b-pair-dv-staged-beside-keys.patch: the gradient CTA stages dV outside V likewise; narrowed),
#      each against build-device (main 33e72e1); v53n / v52full and v53bn / v53n read from the files;
#   2. the backward GPU tests on v52full (its own test binaries);
#   3. only on an H200: peers.py grids A, L, G in bf16, then A in fp16, on v52full if the A/B's backward geomean
#      is >= 1.003 and its tests passed, else on main's library (the standing).
# LIMIT (seconds, default 560): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-560}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
d256="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256"
AB_CANDS=v52full,v53n,v53bn AB_TAG=v52 \
  AB_ARGS="--shapes $d256 --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 300 bash scripts/gpu_round.sh ab > "$OUT/ab-v52.txt" 2>&1
grep -E "== A/B .* / base|_tflops|rror|FAIL|mismatch|exceed" "$OUT/ab-v52.txt" | head -8
python3 bench/ab_table.py "$OUT/ab-base-v52.jsonl" "$OUT/ab-v52full-v52.jsonl" > "$OUT/table-v52.md" 2>&1
tail -2 "$OUT/table-v52.md"
python3 bench/ab_table.py "$OUT/ab-base-v52.jsonl" "$OUT/ab-v53n-v52.jsonl" > "$OUT/table-v53.md" 2>&1
python3 bench/ab_table.py "$OUT/ab-v52full-v52.jsonl" "$OUT/ab-v53n-v52.jsonl" > "$OUT/table-v53-over-v52.md" 2>&1
python3 bench/ab_table.py "$OUT/ab-v53n-v52.jsonl" "$OUT/ab-v53bn-v52.jsonl" > "$OUT/table-v53b-over-v53.md" 2>&1
echo "== v53n / base"; tail -2 "$OUT/table-v53.md"; echo "== v53n / v52full"; tail -2 "$OUT/table-v53-over-v52.md"
echo "== v53bn / v53n"; tail -2 "$OUT/table-v53b-over-v53.md"
bwd=$(grep -oE "bwd_tflops: candidate / base geometric mean [0-9.]+" "$OUT/table-v52.md" | grep -oE "[0-9.]+$")
echo "ab done at $SECONDS s (bwd geomean '$bwd')"
TEST_CAND=v52full TEST_RUNS=backward TEST_TIMEOUT=220 bash scripts/gpu_round.sh tests > "$OUT/tests-v52.txt" 2>&1
tests_rc=$?
tail -3 "$OUT/tests-v52.txt"
echo "tests done at $SECONDS s (rc $tests_rc)"
lib=
if [ "$tests_rc" = 0 ] && python3 -c "import sys; sys.exit(0 if float('${bwd:-0}') >= 1.003 else 1)" 2>/dev/null; then
  lib=v52full
fi
echo "peers library: ${lib:-main (build-device)}"
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl)
if [[ $gpu == *H200* ]]; then
  if [ $((SECONDS + 130)) -lt "$limit" ]; then
    TEST_CAND=$lib PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers bf16 done at $SECONDS s"
  if [ $((SECONDS + 90)) -lt "$limit" ]; then
    TEST_CAND=$lib PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  fi
  echo "peers fp16 done at $SECONDS s"
else
  echo "peers skipped: $gpu is not an H200"
fi
