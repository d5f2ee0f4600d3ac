#!/usr/bin/env bash
# Session 58, call 3: forward v29 alone (candidate f29n: the tile decode by multiply-high; D = 64 and 128 bf16),
# three same-call rounds against main. (v29 + v30 lost 2%: v30's deferred wait made ptxas move the wgmma
# descriptors into uniform registers before every HGMMA; v29 alone has fewer such moves than main.)
cd "$(dirname "$0")/.."
w=$OUT/w; mkdir -p "$w"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$w/machine.txt"
fwd_shapes="32,512,32,64;16,1k,32,64;8,2k,32,64;4,4k,32,64;32,512,16,128;16,1k,16,128;8,2k,16,128;4,4k,16,128;1,16k,16,128"
for r in ${ROUNDS:-1 2 3}; do
  AB_CANDS=f29n AB_TAG=v29r$r AB_ARGS="--shapes $fwd_shapes --causal both --backends cuda-sm90 --dtype bf16 --repeats 10 --verify-rows 2" \
    OUT=$w timeout 90 bash scripts/gpu_round.sh ab > "$w/ab-v29r$r.txt" 2>&1
  python3 bench/ab_table.py "$w/ab-base-v29r$r.jsonl" "$w/ab-f29n-v29r$r.jsonl" > "$w/table-f29n-v29r$r.txt" 2>&1
  echo "round $r: $(grep -c "NOT VERIFIED" "$w/table-f29n-v29r$r.txt") rows not verified; $(tail -1 "$w/table-f29n-v29r$r.txt") at $SECONDS s"
done
(cd "$OUT" && tar -czf all.tar.gz w && rm -rf w)
