#!/usr/bin/env bash
# One round on the GPU machine, everything in one call (device time is scarce):
#   1. what machine this is (GPU, CPU, versions);
#   2. the GPU tests, then compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on a small subset;
#   3. `flashtile run` on the best backend present, verified against the oracle;
#   4. `flashtile bench --grid C` on all CPU cores (FA2 and FA1 schedules);
#   5. peers.py in the same call: the GEMM and copy ceilings and PyTorch's CPU SDPA on grid C.
# Results land in $OUT (the device tool brings them back); copy them to bench/results/ with the date.
# Prepared by scripts/device_prepare.sh; stages can be chosen: scripts/gpu_round.sh tests sanitize run benchC
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build-device:$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=build-device/tools/flashtile
stages=${*:-tests sanitize run benchC}
status=0
want() { [[ " $stages " == *" $1 "* ]]; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

if want tests; then
  echo "== GPU tests"
  for t in build-device/cuda_*_test; do
    "$t" --gtest_brief=1 2>&1 | tee "$out/$(basename "$t").txt" | tail -15 || status=1
  done
fi

if want sanitize; then
  for tool in memcheck racecheck initcheck synccheck; do
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 9 build-device/cuda_forward_test --gtest_brief=1 \
      --gtest_filter='*RowsWithNoVisibleKey*:*EmptyProblems*' > "$out/sanitizer-$tool.txt" 2>&1
    rc=$?; tail -3 "$out/sanitizer-$tool.txt"; echo "exit $rc"; [ $rc -eq 0 ] || status=1
  done
fi

if want run; then
  echo "== flashtile run"
  $bin run 2>&1 | tee "$out/run.txt" || status=1
fi

if want benchC; then
  echo "== flashtile bench --grid C"
  $bin bench --grid C --backward --out "$out/flashtile-grid-C.jsonl" 2> "$out/bench-progress.txt" | tail -25 || status=1
  echo "== peers.py --grids C"
  PYTHONUNBUFFERED=1 python3 .device/peers.py --grids C --out "$out" > "$out/peers-log.txt" 2>&1 || status=1
  grep -E '"kind": "(gemm_bf16|copy|cpu)"' "$out/peers-log.txt" | cut -c1-200
fi
exit $status
