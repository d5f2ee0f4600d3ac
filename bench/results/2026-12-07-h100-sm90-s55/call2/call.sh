#!/usr/bin/env bash
# Session 55, call 3: two same-call A/B rounds against build-device (main d3dddd7's kernels) of v55full (call 1's
# long steps: dV after dS^T) and v55bn (dV issued as soon as P^T is made, dS^T from P^T in T; narrowed to D = 128
# bf16): D = 128 full S = 1k .. 16k (the long steps) and, as controls (the same kernel in every library), causal
# 2k and 8k and full 512, bf16.
cd "$(dirname "$0")/.."
mkdir -p "$OUT/tables"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
shapes="16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;32,512,16,128"
for round in ${ROUNDS:-r1 r2}; do
  AB_CANDS=v55bn AB_TAG=$round \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
    timeout 250 bash scripts/gpu_round.sh ab > "$OUT/ab-$round.txt" 2>&1
  for cand in v55bn; do
    python3 bench/ab_table.py "$OUT/ab-base-$round.jsonl" "$OUT/ab-$cand-$round.jsonl" > "$OUT/tables/$cand-$round.md" 2>&1
    echo "$cand $round: $(grep -c "NOT VERIFIED" "$OUT/tables/$cand-$round.md") rows not verified"
    tail -1 "$OUT/tables/$cand-$round.md"
  done
  echo "$round done at $SECONDS s"
done
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
# On an H200, the issues' standing on main's library (build-device): grids A, L, G in bf16, then A in fp16.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [[ $gpu == *H200* ]] && [ "${STANDING:-1}" = 1 ] && [ $((SECONDS + 230)) -lt 590 ]; then
  bash scripts/gpu_round.sh standing 2>&1 | tail -6
  echo "standing done at $SECONDS s"
fi
# The long steps' rows (full, S >= 1k) of v55bn over both rounds: their geometric mean decides whether v55bfull's
# backward GPU tests and sanitizers run here.
gain=$(python3 - "$OUT"/tables/v55bn-r*.md <<'PY'
import math, sys
r = []
for path in sys.argv[1:]:
    for line in open(path):
        c = [x.strip() for x in line.split('|')]
        if len(c) > 10 and c[4] == 'full' and c[3].isdigit() and int(c[3]) >= 1024:
            r.append(float(c[10]))
print(f"{math.exp(sum(map(math.log, r)) / len(r)):.3f}" if r else "0")
PY
)
echo "v55bn long-step rows: geometric mean $gain"
if python3 -c "import sys; sys.exit(0 if float('$gain') >= 1.01 else 1)" && [ -f .device/cand-v55bfull/libflashtile.so.0.1.0.xz ] &&
  [ $((SECONDS + 250)) -lt ${LIMIT:-590} ]; then
  TEST_CAND=v55bfull TEST_RUNS=backward TEST_TIMEOUT=220 bash scripts/gpu_round.sh tests > "$OUT/tests.txt" 2>&1
  echo "tests rc $? at $SECONDS s"; tail -3 "$OUT/tests.txt"
  bin=/tmp/flashtile-cand-v55bfull/cuda_backward_test
  for tool in memcheck synccheck racecheck; do
    LD_LIBRARY_PATH=/tmp/flashtile-cand-v55bfull:$PWD/.device/lib timeout 60 compute-sanitizer --tool $tool \
      --error-exitcode 9 "$bin" --gtest_brief=1 --gtest_filter='*LongStepsAtHeadDim128*' > "$OUT/sanitizer-$tool-long.txt" 2>&1
    echo "$tool exit $? at $SECONDS s"; tail -1 "$OUT/sanitizer-$tool-long.txt"
  done
  (cd "$OUT" && tar -czf sanitizers.tar.gz sanitizer-*-long.txt && rm -f sanitizer-*-long.txt)
fi
ls "$OUT"
