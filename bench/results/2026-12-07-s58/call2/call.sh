#!/usr/bin/env bash
# Session 58, call 2: forward f30n (v29 + v30) again, twice (call 1 read 0.982x with D = 128 16k, where no tile-start
# change can act, at -2.5%: drift or noise?), backward v58b's second round, its GPU tests and sanitizers.
# Everything is packed into one archive (the device tool brings back 8 files at most).
cd "$(dirname "$0")/.."
limit=${LIMIT:-540}
w=$OUT/w; mkdir -p "$w"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$w/machine.txt"
fits() { [ $((SECONDS + $1)) -lt "$limit" ]; }
ab() {  # <tag> <timeout> <shapes> <extra args> <candidates>
  AB_CANDS=$5 AB_TAG=$1 AB_ARGS="--shapes $3 --causal both --backends cuda-sm90 --dtype bf16 $4 --repeats 10 --verify-rows 2" \
    OUT=$w timeout "$2" bash scripts/gpu_round.sh ab > "$w/ab-$1.txt" 2>&1
  for cand in ${5//,/ }; do
    python3 bench/ab_table.py "$w/ab-base-$1.jsonl" "$w/ab-$cand-$1.jsonl" > "$w/table-$cand-$1.txt" 2>&1
    echo "$cand $1: $(grep -c "NOT VERIFIED" "$w/table-$cand-$1.txt") rows not verified; $(tail -1 "$w/table-$cand-$1.txt")"
  done
  echo "$1 done at $SECONDS s"
}
fwd_shapes="32,512,32,64;16,1k,32,64;8,2k,32,64;4,4k,32,64;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;1,16k,16,128"
bwd_shapes="32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;4,2k,32,128,8;4,4k,32,64"
fits 60 && ab fwd2 80 "$fwd_shapes" "" f30n
fits 60 && ab fwd3 80 "$fwd_shapes" "" f30n
fits 100 && ab r2 140 "$bwd_shapes" --backward v58bfull
if fits 150; then
  TEST_CAND=v58bfull TEST_RUNS=backward-Sm90.* TEST_TIMEOUT=170 OUT=$w bash scripts/gpu_round.sh tests > "$w/tests-v58b.txt" 2>&1
  echo "v58b tests rc $? at $SECONDS s"; tail -4 "$w/tests-v58b.txt"
fi
if fits 200; then
  TEST_CAND=v58bfull SANITIZE_SUITES=backward SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_TIMEOUT=60 \
    OUT=$w bash scripts/gpu_round.sh sanitize > "$w/sanitizer-v58b.txt" 2>&1
  echo "v58b sanitizers rc $? at $SECONDS s"; grep -E "^== |ERROR SUMMARY|RACECHECK SUMMARY|exit " "$w/sanitizer-v58b.txt" | head -20
fi
(cd "$OUT" && tar -czf all.tar.gz w && rm -rf w)
ls -la "$OUT"
