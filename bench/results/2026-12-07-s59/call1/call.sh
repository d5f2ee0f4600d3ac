#!/usr/bin/env bash
# Session 59, call 1: forward v31 (candidate ctr: the tile counter and the chunked order; branch fwd-tile-counter)
# against main: its GPU tests, a same-call A/B over grid A bf16 (both masks) with L and G, peers.py with the
# candidate (on an H200 this is the issues' bf16 standing), a second A/B round, then sanitizers on the forward.
# Everything is packed into one archive (the device tool brings back 8 files at most).
cd "$(dirname "$0")/../../.."  # the repository root
limit=${LIMIT:-570}
w=$OUT/w; mkdir -p "$w"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$w/machine.txt"
fits() { [ $((SECONDS + $1)) -lt "$limit" ]; }
ab() {  # <tag> <timeout> <shapes>
  AB_CANDS=ctr AB_TAG=$1 AB_ARGS="--shapes $3 --causal both --backends cuda-sm90 --dtype bf16 --repeats 10 --verify-rows 2" \
    OUT=$w timeout "$2" bash scripts/gpu_round.sh ab > "$w/ab-$1.txt" 2>&1
  python3 bench/ab_table.py "$w/ab-base-$1.jsonl" "$w/ab-ctr-$1.jsonl" > "$w/table-ctr-$1.txt" 2>&1
  echo "ctr $1: $(grep -c "NOT VERIFIED" "$w/table-ctr-$1.txt") rows not verified; $(tail -1 "$w/table-ctr-$1.txt") at $SECONDS s"
}
grid_a=""
for d in 64 128 256; do for s in 512 1k 2k 4k 8k 16k; do
  n=${s%k}; [ "$n" != "$s" ] && n=$((n * 1024)); grid_a+="$((16384 / n)),$s,$((2048 / d)),$d;"
done; done
lg="1,32k,16,128;1,64k,16,128;2,4k,32,128,8;2,8k,32,128,8"
# the last round's quantization: grid A's tile counts (4096, 2048, 1024) leave 4, 68 and 100 tiles for a last round
# of 132 CTAs; these shapes have whole rounds (4224 = 32 x 132, 4224, 1056 = 8 x 132) at the same S and D
lg+=";33,512,32,64;1,16k,33,128;33,512,8,256"
TEST_CAND=ctr TEST_RUNS=forward-sm90 TEST_TIMEOUT=150 OUT=$w bash scripts/gpu_round.sh tests > "$w/tests-ctr.txt" 2>&1
echo "ctr tests rc $? at $SECONDS s"; tail -4 "$w/tests-ctr.txt"
# the CUDA graph test (a captured launch takes no counter: the snake) and the other torch tests, on the candidate
FLASHTILE_LIBRARY=/tmp/flashtile-cand-ctr/libflashtile.so.0.1.0 PYTHONPATH=$PWD/python timeout 90 \
  python3 -m pytest tests/python/test_torch.py -q -rs > "$w/pytest-ctr.txt" 2>&1
echo "ctr pytest rc $? at $SECONDS s"; tail -2 "$w/pytest-ctr.txt"
fits 200 && ab r1 200 "${grid_a}${lg}"
if fits 200; then
  TEST_CAND=ctr PEERS_NAME=flashtile-sm90 PEERS_GRIDS=A,L,G OUT=$w timeout 200 bash scripts/gpu_round.sh peers > "$w/peers-ctr.txt" 2>&1
  echo "ctr peers rc $? at $SECONDS s"; tail -3 "$w/peers-ctr.txt"
fi
fits 120 && ab r2 120 "${grid_a%;}"
if fits 100; then
  TEST_CAND=ctr SANITIZE_SUITES=forward-sm90 SANITIZE_TOOLS="memcheck racecheck" SANITIZE_TIMEOUT=$(((limit - SECONDS - 20) / 2)) \
    OUT=$w bash scripts/gpu_round.sh sanitize > "$w/sanitizer-ctr.txt" 2>&1
  echo "ctr sanitizers rc $? at $SECONDS s"; grep -E "^== |ERROR SUMMARY|RACECHECK SUMMARY|exit " "$w/sanitizer-ctr.txt" | head -20
fi
(cd "$OUT" && tar -czf all.tar.gz w && rm -rf w)
ls -la "$OUT"
