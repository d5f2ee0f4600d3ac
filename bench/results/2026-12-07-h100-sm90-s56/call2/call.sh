#!/usr/bin/env bash
# Session 56, call 1: v56n (branch next/sm90-bwd-v56-dq-turns, narrowed to D = 128 bf16: dQ by turns, one consumer
# a step makes the whole 64 x 128 box) against build-device (main f75646d's kernels):
#   1. A/B round 1: D = 128 full and causal S = 512 .. 16k, GQA 32 / 8 heads at 2k, and D = 64 4k (the same kernel
#      in both libraries: the control), bf16, backward, 10 repeats, 2 verified rows a shape;
#   2. `flashtile check` on the candidate's library: random problems on cuda-sm90 (head dims up to 128 pad to the
#      D = 128 kernel; the others are refused by the narrowed library and counted as skipped);
#   3. the deterministic mode's A/B at 2k and 8k, both masks;
#   4. A/B round 2 as round 1, if time is left.
# LIMIT (seconds, default 570): a stage starts only if its usual time fits before it.
cd "$(dirname "$0")/.."
limit=${LIMIT:-570}
mkdir -p "$OUT/tables"
cand=v56n
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
shapes="32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;4,2k,32,128,8;4,4k,32,64"
ab() {  # <tag> <timeout> <extra bench args>
  AB_CANDS=$cand AB_TAG=$1 \
    AB_ARGS="--shapes $shapes --causal both --backends cuda-sm90 --dtype bf16 --backward --repeats 10 --verify-rows 2 $3" \
    timeout "$2" bash scripts/gpu_round.sh ab > "$OUT/ab-$1.txt" 2>&1
  python3 bench/ab_table.py "$OUT/ab-base-$1.jsonl" "$OUT/ab-$cand-$1.jsonl" > "$OUT/tables/$cand-$1.md" 2>&1
  echo "$1: $(grep -c "NOT VERIFIED" "$OUT/tables/$cand-$1.md") rows not verified; $(tail -1 "$OUT/tables/$cand-$1.md")"
  echo "$1 done at $SECONDS s"
}
ab r1 230 ""
lib=/tmp/flashtile-cand-$cand  # unpacked by the ab stage (gpu_round.sh: cand_dir)
LD_LIBRARY_PATH=$lib:$PWD/.device/lib timeout 120 build-device/tools/flashtile check --device cuda --backend cuda-sm90 \
  --cases 400 --max-seqlen 600 --seed 5600 > "$OUT/check.txt" 2>&1
echo "check rc $? at $SECONDS s"; tail -4 "$OUT/check.txt"
shapes="8,2k,16,128;2,8k,16,128"
[ $((SECONDS + 90)) -lt "$limit" ] && ab det 90 "--deterministic"
shapes="32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;4,2k,32,128,8;4,4k,32,64"
[ $((SECONDS + 200)) -lt "$limit" ] && ab r2 $((limit - SECONDS - 5)) ""
(cd "$OUT" && tar -czf ab.tar.gz ab-* && rm -f ab-*.jsonl ab-*.txt)
ls "$OUT" "$OUT/tables"
