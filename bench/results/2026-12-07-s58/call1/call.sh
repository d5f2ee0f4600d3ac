#!/usr/bin/env bash
# Prepared in session 57 (no device): the A/B of the two D = 128 backward candidates against main, their GPU tests and
# sanitizers. Copy into .device/ and run from there. Build the candidates first (after `WHEEL=0 bash
# scripts/device_prepare.sh` if build-device is missing):
#   CANDIDATE_TREE=ct scripts/candidate_lib.sh bench/candidates/sm90-bwd-v57-st-ahead.patch v57full
#   CANDIDATE_TREE=ct scripts/candidate_lib.sh \
#     bench/candidates/sm90-bwd-v58-dq-writer.patch,bench/candidates/sm90-bwd-v58b-three-stages.patch v58bfull
# (session 58: v58b, v58 with its third Q / dO stage kept, takes v58's place: the carry holds two candidates)
# Stages (STAGES, default "r1 fwd" since session 58; a stage starts only if its usual time fits before LIMIT, default 570 s):
#   r1        A/B round 1 against build-device (main): D = 128 full and causal S = 512 .. 16k, GQA 32 / 8 heads at 2k,
#             D = 64 4k (the control: the same kernel in all), bf16, 10 repeats, 2 verified rows a shape (~300 s);
#   tests     the sm90 backward GPU tests on each candidate's library (~100 s each);
#   sanitize  memcheck, racecheck and synccheck on the tile-boundary tests (~200 s a candidate);
#   r2, fp16  A/B round 2, and fp16 at 2k and 8k full.
#   fwd       (session 58) the forward A/B of f30n (forward v29 + v30, built for D = 64 and 128 bf16 only) against
#             main: D = 64 and 128 at grid A's S = 512 .. 4k and D = 128 16k, both masks, 10 repeats (~150 s).
#             Build it first: CANDIDATE_TREE=cf scripts/candidate_lib.sh \
#               bench/candidates/sm90-fwd-v29-fast-tile-decode.patch,bench/candidates/sm90-fwd-v30-deferred-store-wait.patch \
#               f30n -DFLASHTILE_CUDA_HEAD_DIMS="64;128" -DFLASHTILE_CUDA_DTYPES=bf16
#             The default first call is the two A/Bs (~450 s); the winners' tests and sanitizers follow in a second.
# CANDS (default "v57full v58bfull") picks the backward candidates, e.g. a second call:
#   STAGES="tests sanitize r2 fp16" CANDS=v58bfull bash .device/<this file>
cd "$(dirname "$0")/.."
limit=${LIMIT:-570}
stages=" ${STAGES:-r1 fwd} "
cands=(${CANDS:-v57full v58bfull})
mkdir -p "$OUT/tables"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/machine.txt"
shapes="32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;2,8k,16,128;1,16k,16,128;4,2k,32,128,8;4,4k,32,64"
fits() { [ $((SECONDS + $1)) -lt "$limit" ]; }
ab() {  # <tag> <timeout> <dtype> <shapes> <causal> [--backward] [candidates...] (default: CANDS)
  local list pass=${6:-} abc=("${@:7}")
  [ ${#abc[@]} -gt 0 ] || abc=("${cands[@]}")
  list=$(IFS=,; echo "${abc[*]}")
  AB_CANDS=$list AB_TAG=$1 \
    AB_ARGS="--shapes $4 --causal $5 --backends cuda-sm90 --dtype $3 $pass --repeats 10 --verify-rows 2" \
    timeout "$2" bash scripts/gpu_round.sh ab > "$OUT/ab-$1.txt" 2>&1
  for cand in "${abc[@]}"; do
    python3 bench/ab_table.py "$OUT/ab-base-$1.jsonl" "$OUT/ab-$cand-$1.jsonl" > "$OUT/tables/$cand-$1.md" 2>&1
    echo "$cand $1: $(grep -c "NOT VERIFIED" "$OUT/tables/$cand-$1.md") rows not verified; $(tail -1 "$OUT/tables/$cand-$1.md")"
  done
  echo "$1 done at $SECONDS s"
}
[[ $stages == *" r1 "* ]] && fits 300 && ab r1 $((limit - SECONDS - 10 < 360 ? limit - SECONDS - 10 : 360)) bf16 "$shapes" both --backward
for cand in "${cands[@]}"; do
  if [[ $stages == *" tests "* ]] && fits 120; then
    TEST_CAND=$cand TEST_RUNS=backward-Sm90.* TEST_TIMEOUT=$((limit - SECONDS - 10 < 170 ? limit - SECONDS - 10 : 170)) \
      bash scripts/gpu_round.sh tests > "$OUT/tests-$cand.txt" 2>&1
    echo "$cand tests rc $? at $SECONDS s"; tail -4 "$OUT/tests-$cand.txt"
  fi
done
for cand in "${cands[@]}"; do  # gpu_round.sh's backward subset (the tile-boundary tests) under three tools
  if [[ $stages == *" sanitize "* ]] && fits 200; then
    TEST_CAND=$cand SANITIZE_SUITES=backward SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_TIMEOUT=60 \
      bash scripts/gpu_round.sh sanitize > "$OUT/sanitizer-$cand.txt" 2>&1
    echo "$cand sanitizers rc $? at $SECONDS s"; grep -A2 "^== compute-sanitizer" "$OUT/sanitizer-$cand.txt" | grep -v "^--"
  fi
done
[[ $stages == *" r2 "* ]] && fits 300 && ab r2 $((limit - SECONDS - 60)) bf16 "$shapes" both --backward
[[ $stages == *" fp16 "* ]] && fits 80 && ab f1 70 fp16 "8,2k,16,128;2,8k,16,128" both --backward
fwd_shapes="32,512,32,64;16,1k,32,64;8,2k,32,64;4,4k,32,64;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;1,16k,16,128"
[[ $stages == *" fwd "* ]] && fits 160 && ab fwd 200 bf16 "$fwd_shapes" both "" f30n
(cd "$OUT" && tar -czf logs.tar.gz ab-* tests-*.txt sanitizer-*.txt 2>/dev/null && rm -f ab-*.jsonl ab-*.txt tests-*.txt sanitizer-*.txt)
find "$OUT" -type f
