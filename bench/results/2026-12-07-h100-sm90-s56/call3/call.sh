#!/usr/bin/env bash
# Session 56, call 2: the sm90 backward's step timeline at D = 128 (candidate `trace`: main's kernels with
# FLASHTILE_BWD_TRACE, narrowed to D = 128 bf16; thread 0 of each consumer in CTAs 0-7 records the SM clock at 13
# points of its first 96 steps), after the issues' standing if the card is an H200: full S = 4k, 2k and 512, causal 4k; then the instrumented library against main's
# at full 4k and 512 (what the trace's stores cost), bf16.
cd "$(dirname "$0")/.."
mkdir -p "$OUT/tables"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
# On an H200 first the issues' standing on main's library (build-device): grids A, L, G in bf16, then A in fp16.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [[ $gpu == *H200* ]]; then
  timeout 300 bash scripts/gpu_round.sh standing 2>&1 | tail -8
  echo "standing done at $SECONDS s"
fi
lib=/tmp/flashtile-cand-trace
mkdir -p $lib
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  .device/cand-trace/libflashtile.so.0.1.0.xz $lib/libflashtile.so.0.1.0 && ln -sf libflashtile.so.0.1.0 $lib/libflashtile.so.0
for shape in "4 4096 --no-causal full-4k" "8 2048 --no-causal full-2k" "32 512 --no-causal full-512" "4 4096 --causal causal-4k"; do
  set -- $shape
  FLASHTILE_BWD_TRACE_FILE=$OUT/trace-$4.bin LD_LIBRARY_PATH=$lib:$PWD/.device/lib timeout 60 \
    build-device/tools/flashtile run -b "$1" -s "$2" --heads 16 --head-dim 128 $3 --backend cuda-sm90 --backward \
    -r 3 --verify-rows 2 > "$OUT/run-$4.txt" 2>&1
  echo "$4: rc $? $(grep -i "backward" "$OUT/run-$4.txt" | head -2 | tr '\n' ' ')"
done
AB_CANDS=trace AB_TAG=t \
  AB_ARGS="--shapes 4,4k,16,128;32,512,16,128 --causal false --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2" \
  timeout 120 bash scripts/gpu_round.sh ab > "$OUT/ab-t.txt" 2>&1
python3 bench/ab_table.py "$OUT/ab-base-t.jsonl" "$OUT/ab-trace-t.jsonl" > "$OUT/tables/trace-t.md" 2>&1
tail -1 "$OUT/tables/trace-t.md"
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
(cd "$OUT" && tar -czf trace.tar.gz trace-*.bin run-*.txt && rm -f trace-*.bin run-*.txt)
echo "done at $SECONDS s"; find "$OUT" -type f | head -20
