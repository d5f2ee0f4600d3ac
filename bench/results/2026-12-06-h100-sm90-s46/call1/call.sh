#!/usr/bin/env bash
# Session 46, call 1: candidates v44 (D = 256's dK / dV staged in the tile's last Q / dO stage and stored by TMA)
# and v45 (v44 + D = 256's S and dP split by product between the consumers, dP handed over in shared memory), both
# built in full onto main 28ad3cf (whose launcher, 4d3a6c2, has not yet run on a GPU). v45's backward GPU tests
# (v44's if v45's fail) and compute-sanitizer on the backward subset; two same-call A/B rounds against main at
# D = 256 (bf16, S = 512 .. 16k, both masks); then peers.py (bf16 A, L, G; fp16 A) on the best candidate whose
# tests passed and that read >= 0.995x in both rounds, else on main.
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-570}  # the call's seconds: a stage starts only if its usual time fits
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tests() {  # <candidate>: 0 if its backward GPU tests pass
  TEST_CAND=$1 TEST_RUNS=backward TEST_TIMEOUT=240 TEST_BRIEF=0 bash scripts/gpu_round.sh tests > /tmp/tests-$1.txt 2>&1
  cp /tmp/tests-$1.txt "$OUT/tests-$1.txt"
  grep -E "PASSED|FAILED|SKIPPED|Failure" /tmp/tests-$1.txt | cut -c1-110 | head -8
  grep -q "PASSED" /tmp/tests-$1.txt && ! grep -qE "FAILED|Failure" /tmp/tests-$1.txt
}
ok45=0; ok44=0
tests v45 && ok45=1
echo "v45 tests done at $SECONDS s (ok=$ok45)"
if [ "$ok45" = 0 ]; then tests v44 && ok44=1; echo "v44 tests done at $SECONDS s (ok=$ok44)"; fi
san=$([ "$ok45" = 1 ] && echo v45 || echo v44)
for tool in racecheck synccheck memcheck; do
  [ "$SECONDS" -lt $((limit - 350)) ] || break
  TEST_CAND=$san SANITIZE_TOOLS=$tool SANITIZE_SUITES=backward SANITIZE_TIMEOUT=35 bash scripts/gpu_round.sh sanitize 2>&1 |
    grep -E "ERROR SUMMARY|hazard|exit" | head -3
  echo "$san $tool done at $SECONDS s"
done
shapes="32,512,8,256;16,1k,8,256;8,2k,8,256;4,4k,8,256;2,8k,8,256;1,16k,8,256"
declare -A good=([v44]=0 [v45]=0) sum=([v44]=0 [v45]=0)
for r in r1 r2; do
  [ "$SECONDS" -lt $((limit - 250)) ] || break
  AB_CANDS=v44,v45 AB_TAG=$r \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    bash scripts/gpu_round.sh ab > /tmp/ab-$r.txt 2>&1
  grep -E "== A/B v4. / base|bwd_tflops|rror|FAIL" /tmp/ab-$r.txt | head -8
  for c in v44 v45; do
    g=$(grep -A3 "== A/B $c / base" /tmp/ab-$r.txt | grep -oE "bwd_tflops: candidate / base geometric mean [0-9.]+" | awk '{print $NF}')
    python3 -c "import sys; sys.exit(0 if float('${g:-0}') >= 0.995 else 1)" && good[$c]=$((good[$c] + 1))
    sum[$c]=$(python3 -c "print(${sum[$c]} + float('${g:-0}'))")
  done
  echo "ab $r done at $SECONDS s"
done
(cd "$OUT" && tar -czf ab.tar.gz ab-*.jsonl && rm -f ab-*.jsonl)
cand=""
[ "$ok45" = 1 ] && [ "${good[v44]}" = 2 ] && cand=v44   # v45's tests cover v44's epilogue
[ "$ok44" = 1 ] && [ "${good[v44]}" = 2 ] && cand=v44
[ "$ok45" = 1 ] && [ "${good[v45]}" = 2 ] && python3 -c "import sys; sys.exit(0 if ${sum[v45]} >= ${sum[v44]} or '$cand' == '' else 1)" && cand=v45
echo "peers on: ${cand:-main} (sums v44 ${sum[v44]}, v45 ${sum[v45]})"
if [ "$SECONDS" -lt $((limit - 105)) ]; then
  TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G bash scripts/gpu_round.sh peers 2>&1 | tail -2
  echo "peers bf16 done at $SECONDS s"
fi
if [ "$SECONDS" -lt $((limit - 75)) ]; then
  TEST_CAND=$cand PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A PEERS_DTYPE=fp16 bash scripts/gpu_round.sh peers 2>&1 | tail -2
  echo "peers fp16 done at $SECONDS s"
fi
echo "end at $SECONDS s"
