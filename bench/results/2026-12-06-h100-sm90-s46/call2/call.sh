#!/usr/bin/env bash
# Session 46, call 2: why v45 (D = 256's S and dP split by product) bought +0.7% over v44 and not the +3-8% its
# shared-memory count predicted, and where D = 256's backward step goes: Nsight Compute on main 6f9783a (v44 + v45)
# and on candidate v44, beside cuDNN's backward, B = 8 H = 8 S = 2048 D = 256 full; then, if time is left, main and
# cuDNN at grid A's lowest D = 256 row (S = 512 causal, B = 32).
cd "$(dirname "$0")/.."
limit=${CALL_LIMIT:-400}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
PROFILE90_D=256 PROFILE_CANDS=v44 bash scripts/gpu_round.sh profilebwd90 2>&1 |
  grep -E "Duration|Shared Memory Throughput|L2 Cache Throughput|Executed Ipc A|bwd_kernel|bprop" | cut -c1-170 | head -24
echo "profile D = 256 S = 2k done at $SECONDS s"
if [ "$SECONDS" -lt $((limit - 150)) ]; then
  PROFILE90_D=256 PROFILE90_S=512 PROFILE90_CAUSAL=1 bash scripts/gpu_round.sh profilebwd90 2>&1 |
    grep -E "Duration|bwd_kernel|bprop" | cut -c1-170 | head -12
  echo "profile D = 256 S = 512 causal done at $SECONDS s"
fi
(cd "$OUT" && tar -czf ncu-bwd90.tar.gz ncu-bwd-* && rm -f ncu-bwd-*)
echo "end at $SECONDS s"
