#!/usr/bin/env bash
# One round on the GPU machine, everything in one call (device time is scarce):
#   1. what machine this is (GPU, CPU, versions);
#   2. the GPU tests (TEST_RUNS picks suites: default forward-sm80 forward-sm90 backward; TEST_CAND=<name> runs
#      them, and the stages after, on a candidate's library: see below; TEST_TIMEOUT: seconds per suite, default
#      240, which the backward suite's ~170-200 s on an H100 nears; TEST_BRIEF=0: every test's line and time in
#      the log), then compute-sanitizer
#      (memcheck, racecheck, initcheck, synccheck) on a small subset (SANITIZE_SUITES: default forward backward,
#      forward-sm80 for the sm80 forward's tests alone;
#      SANITIZE_TIMEOUT: seconds per tool and suite, default 300);
#   3. `flashtile run` on the best backend present, verified against the oracle;
#   4. `flashtile bench --grid C` on all CPU cores (FA2 and FA1 schedules);
#   5. peers.py in the same call: the GEMM and copy ceilings and PyTorch's CPU SDPA on grid C;
#   6. grid A forward and backward on the GPU (bf16, fp16), benchAfwd: the forward alone, benchAbwd: the
#      backward alone (default mode), benchAdet: the backward's deterministic mode (both on BWD_BACKENDS, default
#      cuda-sm80; cuda-sm90 for the Hopper backward); peersA: peers.py's grid A (PyTorch flash = FA2, cuDNN).
#   smallsmem: the backward as an A100 (163 KB) and a 99 KB GPU would run it (FLASHTILE_CUDA_SMEM_LIMIT);
#   cpudiag: which OpenBLAS kernels the host CPU gets; tiles: bench/kernels/sm80_fwd_tiles (tile configs) and
#     bench/kernels/mma_sync_peak (mma.sync's dense rate);
#   bwdtiles: bench/kernels/sm80_bwd_tiles (the sm80 backward's dK/dV kernel under other rows of bwd_config.hpp);
#   wgmma: bench/kernels/sm90_fwd_wgmma (the Hopper forward's harness);
#   install: pip install of the wheel WHEEL=1 scripts/device_prepare.sh built, import, the Python suite on it;
#   python: the Python suite (torch, torch.compile, transformers) on this build's library;
#   profile: Nsight Compute on flashtile's sm80 forward and on PyTorch's flash forward (FA2), same problem, with
#     each kernel's SASS and its stall samples (PROFILE_SHAPES as profilebwd);
#   profilebwd: the same for the backward (flashtile's sm80 dK/dV kernel in the default mode, FA2's main kernel);
#     PROFILE_SHAPES="D:S:mask ..." picks grid A shapes;
#   bwdparts: each kernel's time in one backward (BWDPARTS_BACKEND: cuda-sm80, the default, or cuda-sm90) beside
#     FA2's and cuDNN's kernels (ncu, clocks and caches as in a plain run; PROFILE_SHAPES as profilebwd);
#   profilebwd90: Nsight Compute on the sm90 backward's main kernel (with its SASS source counters) and on cuDNN's
#     backward kernels, B=8 S=2048 full, D=128 H=16 (PROFILE90_D=256: D=256 H=8; PROFILE90_S=512: S=512 B=32, as
#     grid A; PROFILE90_CAUSAL=1: causal);
#   ab: this tree's library, then each candidate library of .device/cand-*/ (scripts/candidate_lib.sh <ref> <name>),
#     through the same tool: `flashtile bench $AB_ARGS` (default grid A bf16 forward and backward, sm80) into
#     ab-<name>[-$AB_TAG].jsonl, bench/ab_table.py's summary; AB_CANDS=name,... picks candidates (default all);
#     AB_TESTS=1 also runs the GPU tests against each library;
#   clocks: one forward's speed in a 10-call burst and sustained for 2 s, with the SM clock and board power
#     (flashtile sm80 and sm90, FA2, cuDNN; CLOCK_B, CLOCK_S, CLOCK_D pick the problem; bench/clock_probe.py);
#   overhead: the Python layers' per-call cost at B=1, S=128 beside the C++ call (bench/python_overhead.py);
#   peers: peers.py with flashtile as its candidate (impl name PEERS_NAME, default flashtile-sm80: set
#     flashtile-sm90 when the build's auto forward is the sm90 kernel, or FLASHTILE_CUDA_FORWARD=sm80 to keep the
#     sm80 one) (forward and backward through autograd, grids PEERS_GRIDS, default A,L,G; PEERS_DTYPE=fp16 runs
#     the attention grids in fp16);
#   standing: the issues' standing (issues 6 and 7 are measured on an H200): on an H200, the peers stage with
#     flashtile-sm90 on grids A, L, G in bf16 and then on grid A in fp16; on another card it measures nothing and
#     says so (TEST_CAND picks the library as for the other stages).
# Results land in $OUT (the device tool brings them back, 8 files at most: the test and sanitizer logs go into one
# test-logs.tar); copy them to bench/results/ with the date.
# Prepared by scripts/device_prepare.sh; stages can be chosen: scripts/gpu_round.sh tests sanitize run benchC
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
# An xz-packed file unpacked by Python (the GPU machine has no xz).
unxz_to() {  # <file.xz> <destination>
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"
}
# An xz-packed library (device_prepare.sh, candidate_lib.sh) unpacked into a directory, with its soname link.
unpack_lib() {  # <file.xz> <directory>
  mkdir -p "$2"
  unxz_to "$1" "$2/libflashtile.so.0.1.0" && ln -sf libflashtile.so.0.1.0 "$2/libflashtile.so.0"
}
# A candidate's library (scripts/candidate_lib.sh: .device/cand-<name>/) unpacked into /tmp/flashtile-cand-<name>.
cand_dir() {  # <name>: the directory
  unpack_lib ".device/cand-$1/libflashtile.so.0.1.0.xz" "/tmp/flashtile-cand-$1" && echo "/tmp/flashtile-cand-$1"
}
if [ .device/libflashtile.so.0.1.0.xz -nt build-device/libflashtile.so.0.1.0 ]; then
  unpack_lib .device/libflashtile.so.0.1.0.xz build-device
fi
export LD_LIBRARY_PATH=$PWD/build-device:$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# TEST_CAND=<name>: the stages that load the library through LD_LIBRARY_PATH (tests, sanitize, run, check, the
# benches) use candidate <name>'s (.device/cand-<name>/, scripts/candidate_lib.sh; a full build, not narrowed)
# instead of this tree's: a branch's kernels tested before it is merged; the tests and sanitize stages also run
# the candidate's own GPU tests where it has them (built from its tree), and peers measures it (so a candidate
# meets the peers before it is merged and rebuilt here). ab names its libraries itself.
if [ -n "${TEST_CAND:-}" ]; then
  test_lib=$(cand_dir "$TEST_CAND") || exit 1
  export LD_LIBRARY_PATH=$test_lib:$LD_LIBRARY_PATH
  echo "gpu_round: the library of candidate $TEST_CAND: $(cut -c1-80 ".device/cand-$TEST_CAND/commit.txt")"
fi
test_binary() {  # <forward | backward>: the GPU test binary the tests and sanitize stages run
  local packed=.device/cand-${TEST_CAND:-}/cuda_$1_test.xz
  if [ -n "${TEST_CAND:-}" ] && [ -f "$packed" ]; then
    local binary=$test_lib/cuda_$1_test
    [ -x "$binary" ] || { unxz_to "$packed" "$binary" && chmod +x "$binary"; }
    echo "$binary"
  else
    echo "build-device/cuda_$1_test"
  fi
}
bin=build-device/tools/flashtile
stages=${*:-tests sanitize python run check ablation benchC benchA peersA}
status=0
want() { [[ " $stages " == *" $1 "* ]]; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)|Flags"; } > "$out/machine.txt" 2>&1
cut -c1-300 "$out/machine.txt"

if want cpudiag; then
  echo "== OpenBLAS on this CPU (one fp32 forward, S=2048, per kernel family)" | tee -a "$out/machine.txt"
  for core in "" Haswell SkylakeX Cooperlake SapphireRapids; do
    echo "-- OPENBLAS_CORETYPE=${core:-<detected>}"
    OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$core timeout 60 $bin run -s 2048 --dtype fp32 --no-causal \
      --backend cpu-flash2 2>&1 | grep -E "Core|core|forward|TFLOP" | head -4
  done 2>&1 | tee -a "$out/machine.txt"
fi

if want wgmma; then  # the Hopper harness: wgmma products checked against the sm80 kernel, both timed
  echo "== sm90 wgmma harness"
  timeout 120 build-device/sm90_fwd_wgmma 2>&1 | tee "$out/sm90-wgmma.txt"
fi

if want tiles; then  # the tile rows, then mma.sync's own dense rate (the sm80 kernels' ceiling)
  echo "== sm80 forward tile configurations"
  timeout 300 build-device/sm80_fwd_tiles | tee "$out/sm80-tiles.txt"
  timeout 60 build-device/mma_sync_peak | tee -a "$out/sm80-tiles.txt"
fi

if want bwdtiles; then  # the sm80 backward's dK/dV kernel under other rows, beside the table's (agreement checked)
  echo "== sm80 backward tile rows"
  timeout 400 build-device/sm80_bwd_tiles | tee "$out/sm80-bwd-tiles.txt"
fi

if want tests; then  # the forward families in separate processes: a crash in one cannot poison the other's context
  echo "== GPU tests"
  for run in ${TEST_RUNS:-forward-sm80 forward-sm90 backward}; do  # <binary>[-<family>]
    family=${run#*-}
    [ "$family" = "$run" ] && family=""
    timeout "${TEST_TIMEOUT:-240}" "$(test_binary "${run%%-*}")" --gtest_brief="${TEST_BRIEF:-1}" --gtest_filter="*${family}" 2>&1 |
      tee "$out/gpu-tests-$run.txt" | tail -15 || status=1
  done
fi

if want smallsmem; then  # the backward's rows for smaller GPUs, on this one with its shared-memory limit lowered
  echo "== GPU tests, backward, as an A100 (163 KB: the dK/dV kernel with one step buffer at D = 64 and 256, two at 96, 128, 192)"
  FLASHTILE_CUDA_SMEM_LIMIT=166912 timeout 240 build-device/cuda_backward_test --gtest_brief=1 2>&1 |
    tee "$out/gpu-tests-backward-163KB.txt" | tail -4 || status=1
  echo "== GPU tests, backward, as a 99 KB GPU (RTX 30/40: the small rows)"
  FLASHTILE_CUDA_SMEM_LIMIT=101376 timeout 240 build-device/cuda_backward_test --gtest_brief=1 \
    --gtest_filter='*SmallSharedMemoryRows*' 2>&1 | tee "$out/gpu-tests-backward-99KB.txt" | tail -4 || status=1
fi

if want sanitize; then  # a small subset of each GPU suite under every compute-sanitizer tool
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do  # SANITIZE_TOOLS: a subset
    # forward-sm80 / forward-sm90: the forward subset on one kernel family (racecheck of the sm90 forward's tests
    # runs past 150 s; the sm80 ones take seconds)
    for spec in "forward:*RowsWithNoVisibleKey*:*EmptyProblems*:*RowOfNaNScoresComesOutNaN*" \
      "forward-sm80:*RowsWithNoVisibleKey*/sm80:*EmptyProblems*/sm80" \
      "forward-sm90:*RowsWithNoVisibleKey*/sm90:*EmptyProblems*/sm90:*LongRowsAtHeadDim64*/sm90" \
      "backward:*RowsAndKeysNobodySees*:*SeveralTilesPerCta*"; do  # the second: a persistent CTA's tile hand-over
      suite=${spec%%:*}
      [[ " ${SANITIZE_SUITES:-forward backward} " == *" $suite "* ]] || continue
      echo "== compute-sanitizer --tool $tool ($suite)"
      timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$(test_binary "${suite%%-*}")" \
        --gtest_brief=1 --gtest_filter="${spec#*:}" > "$out/sanitizer-$tool-$suite.txt" 2>&1
      rc=$?; tail -2 "$out/sanitizer-$tool-$suite.txt"; echo "exit $rc"; [ $rc -eq 0 ] || status=1
    done
  done
fi

if want check; then
  echo "== flashtile check --device cuda (randomised sweep against the oracle, CPU backends and the GPU)"
  timeout 200 $bin check --cases 100 --seed 2026 --device cuda 2>&1 | grep -E "^FAIL|passed" | cut -c1-300 | tee "$out/check.txt"
fi

if want ablation; then
  echo "== flashtile bench --ablation"
  timeout 120 $bin bench --ablation --out "$out/flashtile-ablation.jsonl" 2>/dev/null | tail -18 || status=1
fi

# A grid A shape "D:S:mask" (B = 16384 / S, H = 2048 / D): sets pd ps pm pb ph, the tool's mask flag
# (causal_flag) and PyTorch's (causal_py).
grid_a_shape() {
  IFS=: read -r pd ps pm <<< "$1"
  pb=$((16384 / ps)) ph=$((2048 / pd))
  causal_flag=--no-causal causal_py=False
  if [ "$pm" = causal ]; then causal_flag=--causal causal_py=True; fi
}
# PyTorch's flash backend (FA2), or another SDPA backend (CUDNN_ATTENTION), forward and backward <iterations> times
# on the grid_a_shape problem.
sdpa_backward_py() {  # <iterations> [SDPBackend member, default FLASH_ATTENTION]
  echo "
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
q = torch.randn($pb, $ph, $ps, $pd, device='cuda', dtype=torch.bfloat16, requires_grad=True)
with sdpa_kernel(SDPBackend.${2:-FLASH_ATTENTION}):
    for _ in range($1): torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=$causal_py).sum().backward()
torch.cuda.synchronize()"
}

# An ncu report pair ($out/{ft,fa2}-<tag>.ncu-rep) -> ncu-<kind>-{flashtile,fa2}-<tag>.txt (every section) and
# ...-sass.csv.xz (the SASS with its source counters), and the headline lines printed.
ncu_to_text() {  # <kind: fwd or bwd> <tag>
  for who in ft fa2 cudnn; do
    [ -f "$out/$who-$2.ncu-rep" ] || continue
    name=$([ $who = ft ] && echo flashtile || echo $who)
    ncu --import "$out/$who-$2.ncu-rep" --print-details all > "$out/ncu-$1-$name-$2.txt" 2>&1
    ncu --import "$out/$who-$2.ncu-rep" --page source --csv --print-source sass 2>&1 | xz -6 \
      > "$out/ncu-$1-$name-$2-sass.csv.xz"
    rm -f "$out/$who-$2.ncu-rep"
  done
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Executed Ipc A|Executed Instructions  |Warp Cycles Per Issued|Block Size|Grid Size|Dynamic Shared|DRAM Throughput" \
    "$out"/ncu-$1-*-$2.txt
}

if want profile; then  # the sm80 forward and FA2's, grid A shapes: PROFILE_SHAPES="D:S:mask ..." (default
  # 128:4096:full). Per shape: both kernels' second launch, all sections (ncu-fwd-{flashtile,fa2}-dD-sS-mask.txt)
  # and their SASS with the source counters (stall samples per instruction; ...-sass.csv.xz), in ncu-fwd.tar.
  # PROFILE_FWD=sm90: the sm90 forward and cuDNN's instead (cuDNN's kernels of one call, after warm-up).
  fwd_family=${PROFILE_FWD:-sm80}
  for shape in ${PROFILE_SHAPES:-128:4096:full}; do
    grid_a_shape "$shape"
    tag="d$pd-s$ps-$pm"
    ncu_args=(--set full --import-source yes --launch-skip 1 --launch-count 1)
    peer_py="
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn($pb, $ph, $ps, $pd, device='cuda', dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.$([ "$fwd_family" = sm90 ] && echo CUDNN_ATTENTION || echo FLASH_ATTENTION)):
    for i in range(4):  # three tensors, as flashtile run has: one would cut DRAM traffic
        if i == 3: torch.cuda.profiler.start()
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=$causal_py)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()"
    if [ "$fwd_family" = sm90 ]; then
      echo "== ncu: flashtile sm90 forward and cuDNN's forward, B=$pb H=$ph S=$ps D=$pd $pm"
      peer=cudnn peer_args=(--set full --import-source yes --profile-from-start off)
    else
      echo "== ncu: flashtile sm80 forward and PyTorch flash (FA2) forward, B=$pb H=$ph S=$ps D=$pd $pm"
      peer=fa2 peer_args=("${ncu_args[@]}" -k regex:flash_fwd)
    fi
    timeout 200 ncu "${ncu_args[@]}" -k regex:fwd_kernel -o "$out/ft-$tag" $bin run -b $pb --heads $ph -s $ps \
      --head-dim $pd $causal_flag -r 2 --verify-rows 2 --backend cuda-$fwd_family > /dev/null 2>&1 || status=1
    timeout 200 ncu "${peer_args[@]}" -o "$out/$peer-$tag" python3 -c "$peer_py" > /dev/null 2>&1 || status=1
    ncu_to_text fwd "$tag"
  done
  (cd "$out" && tar cf ncu-fwd.tar ncu-fwd-*-d*-s* && rm -f ncu-fwd-*-d*-s*)
fi

if want profilebwd; then  # the sm80 dK/dV kernel (default mode) and FA2's main backward kernel, grid A shapes
  # PROFILE_SHAPES: "D:S:mask ..." (default 128:4096:full). Per shape: both kernels' second launch, all sections
  # (ncu-bwd-{flashtile,fa2}-dD-sS-mask.txt) and their SASS with the source counters (stall samples per
  # instruction; ...-sass.csv.xz), all in ncu-bwd.tar (the device tool brings back 8 files). PROFILE_FA2=0 leaves
  # FA2 out.
  for shape in ${PROFILE_SHAPES:-128:4096:full}; do
    grid_a_shape "$shape"
    tag="d$pd-s$ps-$pm"
    echo "== ncu: flashtile sm80 backward (dK/dV kernel) and FA2's backward, B=$pb H=$ph S=$ps D=$pd $pm"
    ncu_args=(--set full --import-source yes --launch-skip 1 --launch-count 1)
    FLASHTILE_CUDA_BACKWARD_KERNELS=sm80 timeout 200 ncu "${ncu_args[@]}" -k regex:bwd_dkdv -o "$out/ft-$tag" \
      $bin run -b $pb --heads $ph -s $ps --head-dim $pd $causal_flag -r 2 --verify-rows 2 --backward \
      > /dev/null 2>&1 || status=1
    if [ "${PROFILE_FA2:-1}" = 1 ]; then
      timeout 200 ncu "${ncu_args[@]}" -k regex:flash_bwd_dq_dk_dv -o "$out/fa2-$tag" python3 -c "$(sdpa_backward_py 3)" \
        > /dev/null 2>&1 || status=1
    fi
    ncu_to_text bwd "$tag"
  done
  (cd "$out" && tar cf ncu-bwd.tar ncu-bwd-*-d*-s* && rm -f ncu-bwd-*-d*-s*)
fi

if want bwdparts; then  # each kernel's time in one backward: flashtile, FA2 and cuDNN (PROFILE_SHAPES as profilebwd)
  # BWDPARTS_BACKEND=cuda-sm90 times the Hopper backward (its prep kernel, main kernel and dQ conversion); ncu
  # leaves the clocks and caches as they are (a plain run's), so the parts add up to about the call's time.
  kernel_times() {  # ncu's CSV of gpu__time_duration -> one line a kernel launch: its name, its time
    grep gpu__time_duration |
      awk -F'","' '{split($5, k, /[<(]/); v = $NF; gsub(/[",]/, "", v); printf "  %-60s %12s ns\n", substr(k[1], 1, 60), v}'
  }
  ncu_args=(--metrics gpu__time_duration.sum --csv --print-units base --clock-control none --cache-control none)
  parts_backend=${BWDPARTS_BACKEND:-cuda-sm80}
  for shape in ${PROFILE_SHAPES:-128:4096:full}; do
    grid_a_shape "$shape"
    echo "== kernel times (ncu gpu__time_duration), B=$pb H=$ph S=$ps D=$pd $pm: flashtile $parts_backend (one call)"
    # ncu's and the tool's own messages go to a file, shown when no kernel line came out (session 39 got none for
    # flashtile's kernels, with nothing to say why).
    FLASHTILE_CUDA_BACKWARD_KERNELS=${parts_backend#cuda-} timeout 200 ncu "${ncu_args[@]}" $bin run -b $pb \
      --heads $ph -s $ps --head-dim $pd $causal_flag --backend $parts_backend -r 1 --verify-rows 2 --backward \
      > /tmp/bwdparts-ncu.txt 2>&1
    kernel_times < /tmp/bwdparts-ncu.txt | tee /tmp/bwdparts-ft.txt
    [ -s /tmp/bwdparts-ft.txt ] || { echo "  (no flashtile kernel timed; ncu and the tool said:)"; grep -v '^"' /tmp/bwdparts-ncu.txt | tail -8; }
    for peer in FLASH_ATTENTION CUDNN_ATTENTION; do
      echo "   $peer (forward and backward, twice)"
      timeout 200 ncu "${ncu_args[@]}" python3 -c "$(sdpa_backward_py 2 $peer)" 2>/dev/null | kernel_times
    done
  done
fi

if want profilebwd90; then  # the sm90 backward's main kernel and cuDNN's backward, B=8 S=2048 bf16 full
  # PROFILE90_D picks the head dim (default 128; heads 2048 / D, as grid A), PROFILE90_S the length (default 2048;
  # batch 16384 / S, as grid A), PROFILE90_CAUSAL=1 the causal mask; reports of another shape than D = 128, S = 2048
  # full get a -d<D>, -s<S> or -causal suffix. PROFILE_CANDS=name,... also profiles those candidate libraries
  # (.device/cand-<name>, scripts/candidate_lib.sh) into ncu-bwd-sm90<suffix>-<name>.txt (and its SASS samples,
  # -sass.csv.xz), to set beside this tree's; PROFILE_CUDNN=0 leaves cuDNN out; PROFILE_CUDNN_SASS=1 adds cuDNN's
  # bprop kernel's SASS with its counts and samples (ncu-bwd-cudnn<suffix>-sass.csv.xz);
  # PROFILE_FLASHTILE=0 leaves this tree's kernel out (cuDNN alone needs no build here).
  d90=${PROFILE90_D:-128}
  s90=${PROFILE90_S:-2048}
  h90=$((2048 / d90))
  b90=$((16384 / s90))
  causal90=$([ "${PROFILE90_CAUSAL:-0}" = 1 ] && echo --causal || echo --no-causal)
  sfx90=$([ "$d90" = 128 ] || echo "-d$d90")$([ "$s90" = 2048 ] || echo "-s$s90")
  sfx90+=$([ "$causal90" = --causal ] && echo -causal)
  echo "== ncu: flashtile sm90 backward (bwd_kernel or bwd_pair_kernel) and cuDNN's backward kernels, B=$b90 H=$h90 S=$s90 D=$d90 bf16 $causal90"
  profile_bwd90() {  # <report name> [library directory]: the second launch of the main kernel, all sections
    LD_LIBRARY_PATH=${2:+$2:}$LD_LIBRARY_PATH timeout 200 ncu --set full --import-source yes --launch-skip 1 \
      --launch-count 1 -k "regex:^bwd_(pair_)?kernel" -o "$out/$1" $bin run -b "$b90" -s "$s90" --heads "$h90" \
      --head-dim "$d90" $causal90 --backend cuda-sm90 --backward -r 2 --verify-rows 2 > /dev/null 2>&1 || status=1
    ncu --import "$out/$1.ncu-rep" --print-details all > "$out/$1.txt" 2>&1
    ncu --import "$out/$1.ncu-rep" --page source --csv --print-source sass 2>&1 | xz -6 > "$out/$1-sass.csv.xz"
  }
  [ "${PROFILE_FLASHTILE:-1}" = 1 ] && profile_bwd90 "ncu-bwd-sm90$sfx90"
  candidates90=${PROFILE_CANDS:-}  # may be unset (set -u)
  for name in ${candidates90//,/ }; do
    profile_bwd90 "ncu-bwd-sm90$sfx90-$name" "$(cand_dir "$name")"
  done
  rm -f "$out"/ncu-bwd-sm90*.ncu-rep
  # One forward and backward through cuDNN after warm-up; the profiler range is that one step. Three distinct
  # inputs (until session 47 the --print-details report took q as k and v too).
  cudnn_step_py="
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn($b90, $h90, $s90, $d90, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for i in range(4):
        if i == 3: torch.cuda.profiler.start()
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=$([ "$causal90" = --causal ] && echo True || echo False)).sum().backward()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()"
  if [ "${PROFILE_CUDNN:-1}" = 1 ]; then  # cuDNN's kernels of that step, every section
    timeout 240 ncu --set full --profile-from-start off --print-details all python3 -c "$cudnn_step_py" \
      > "$out/ncu-bwd-cudnn$sfx90.txt" 2>&1 || status=1
  fi
  if [ "${PROFILE_CUDNN_SASS:-0}" = 1 ]; then
    # cuDNN's bprop kernel alone (PROFILE_CUDNN_PASS=fprop: its forward kernel, into ncu-fwd-cudnn...), its SASS
    # with each instruction's execution count and stall samples (how many HGMMA of which shape, exponentials,
    # loads and reductions a step: its schedule, for bench/sass_stalls.py --work)
    pass90=${PROFILE_CUDNN_PASS:-bprop}
    rep90=$out/ncu-$([ "$pass90" = fprop ] && echo fwd || echo bwd)-cudnn$sfx90-sass
    timeout 240 ncu --set full --profile-from-start off -k regex:flash_$pass90 --launch-count 1 -o "$rep90" \
      python3 -c "$cudnn_step_py" > /dev/null 2>&1 || status=1
    ncu --import "$rep90.ncu-rep" --page source --csv --print-source sass 2>&1 | xz -6 > "$rep90.csv.xz"
    rm -f "$rep90.ncu-rep"
  fi
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Executed Ipc A|Issue Slots Busy|Shared Memory Throughput|L2 Cache Throughput|Block Size|Grid Size|Dynamic Shared" \
    "$out"/ncu-bwd-*.txt | cut -c1-200
fi

if want install; then  # the wheel from `WHEEL=1 scripts/device_prepare.sh`, installed as a user would, then the suite
  echo "== pip install .device/flashtile-*.whl, import, pytest against the installed copy"
  python3 -m pip install -q --no-index --no-deps --force-reinstall .device/flashtile-*.whl 2>&1 | tail -2
  (cd /tmp && python3 -c "import flashtile, flashtile.torch_api; print('import flashtile', flashtile.__version__)") \
    2>&1 | tee "$out/install.txt" || status=1
  (cd /tmp && FLASHTILE_TEST_INSTALLED=1 timeout 400 python3 -m pytest -q -rs "$OLDPWD/tests/python" 2>&1) \
    | tee -a "$out/install.txt" | tail -6 || status=1
fi

if want python; then  # the Python suite with torch (and transformers) against this build's library
  echo "== pytest tests/python (torch, CUDA)"
  FLASHTILE_LIBRARY=$PWD/build-device/libflashtile.so.0.1.0 PYTHONPATH=$PWD/python timeout 400 \
    python3 -m pytest tests/python -q -rs 2>&1 | tee "$out/pytest.txt" | tail -15 || status=1
fi

if want run; then
  echo "== flashtile run"
  $bin run 2>&1 | tee "$out/run.txt" || status=1
fi

if want benchC; then  # OPENBLAS_CORETYPE, when set by the caller, is recorded in the table below
  echo "== flashtile bench --grid C (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<detected>})"
  timeout 300 $bin bench --grid C --out "$out/flashtile-grid-C.jsonl" 2>/dev/null | tail -14 || status=1
  echo "== peers.py --grids C"
  PYTHONUNBUFFERED=1 python3 .device/peers.py --grids C --out "$out/peersC" > /dev/null 2>&1 || status=1
  grep -E '"kind": "(gemm_bf16|copy|cpu)"' "$out/peersC/peers.jsonl" | cut -c1-200
fi

if want benchA; then
  echo "== flashtile bench --grid A (GPU, forward and backward)"
  timeout 540 $bin bench --grid A --backends cuda-sm80,cuda-sm90 --dtype bf16,fp16 --backward --repeats 20 --verify-rows 4 \
    --out "$out/flashtile-grid-A.jsonl" 2>/dev/null | tail -75 || status=1
fi
if want benchAfwd; then  # the forward alone, both GPU families, both dtypes (shorter than benchA)
  echo "== flashtile bench --grid A (GPU, forward)"
  timeout 360 $bin bench --grid A --backends cuda-sm80,cuda-sm90 --dtype bf16,fp16 --repeats 10 --verify-rows 2 \
    --out "$out/flashtile-grid-A-fwd.jsonl" 2>/dev/null | tail -3 || status=1
fi
if want benchAbwd; then  # the backward's default mode alone (BWD_BACKENDS, default the sm80 kernels), both dtypes
  echo "== flashtile bench --grid A --backward (GPU, ${BWD_BACKENDS:-cuda-sm80}, bf16 and fp16)"
  timeout 420 $bin bench --grid A --backends "${BWD_BACKENDS:-cuda-sm80}" --dtype bf16,fp16 --backward --repeats 10 \
    --verify-rows 2 --out "$out/flashtile-grid-A-bwd.jsonl" 2>/dev/null | tail -30 || status=1
fi
if want benchAdet; then  # the backward's deterministic mode on grid A (BWD_BACKENDS), to set against the default
  echo "== flashtile bench --grid A --backward --deterministic (GPU, ${BWD_BACKENDS:-cuda-sm80}, bf16)"
  timeout 360 $bin bench --grid A --backends "${BWD_BACKENDS:-cuda-sm80}" --dtype bf16 --backward --deterministic \
    --repeats 10 --verify-rows 2 --out "$out/flashtile-grid-A-deterministic.jsonl" 2>/dev/null | tail -40 || status=1
fi
if want peersA; then  # the peers alone on grid A (the `peers` stage below measures them too, beside flashtile)
  echo "== peers.py --grids A"
  PYTHONUNBUFFERED=1 timeout 400 python3 .device/peers.py --grids A --out "$out/peersA" > /dev/null 2>&1 || status=1
  grep -c attn "$out/peersA/peers.jsonl"
fi
if want overhead; then  # the Python layers' per-call cost on a small problem, and the C++ call's
  echo "== Python overhead (B=1, S=128, H=16, D=128, bf16, causal)"
  FLASHTILE_LIBRARY=$PWD/build-device/libflashtile.so.0.1.0 PYTHONPATH=$PWD/python timeout 120 \
    python3 bench/python_overhead.py 2>&1 | tee "$out/overhead.jsonl"
  $bin run -b 1 -s 128 --heads 16 -r 200 --verify-rows 2 2>&1 | grep -iE "ms|backend" | tee -a "$out/overhead-cpp.txt"
fi
if want ab; then  # same-call A/B: this tree's library, then each candidate's (scripts/candidate_lib.sh), same binaries
  ab_args=${AB_ARGS:---grid A --backends cuda-sm80 --dtype bf16 --backward --repeats 10 --verify-rows 2}
  ab_tag=${AB_TAG:+-$AB_TAG}  # AB_TAG names this run's files, so that a second ab run in one call keeps the first's
  libs=("base:$PWD/build-device")
  for xz in .device/cand-*/libflashtile.so.0.1.0.xz; do
    [ -f "$xz" ] || continue
    name=$(basename "$(dirname "$xz")") && name=${name#cand-}
    [[ -z ${AB_CANDS:-} || " ${AB_CANDS//,/ } " == *" $name "* ]] || continue
    libs+=("$name:$(cand_dir "$name")")
  done
  for entry in "${libs[@]}"; do
    name=${entry%%:*} dir=${entry#*:}
    commit=$(cat ".device/cand-$name/commit.txt" 2>/dev/null || git log --oneline -1)
    echo "== A/B $name (${commit:0:72}): bench $ab_args"
    if [ "${AB_TESTS:-0}" = 1 ]; then
      for t in forward backward; do
        LD_LIBRARY_PATH=$dir:$PWD/.device/lib timeout 240 "build-device/cuda_${t}_test" --gtest_brief=1 2>&1 |
          tail -2 | tee -a "$out/ab-tests.txt" || status=1
      done
    fi
    # shellcheck disable=SC2086  # ab_args is a list of options
    LD_LIBRARY_PATH=$dir:$PWD/.device/lib timeout 400 $bin bench $ab_args -o "/tmp/ab-$name.jsonl" 2>/dev/null |
      tail -1 || status=1
    cp "/tmp/ab-$name.jsonl" "$out/ab-$name$ab_tag.jsonl" || status=1
  done
  for entry in "${libs[@]:1}"; do
    echo "== A/B ${entry%%:*} / base"
    python3 bench/ab_table.py "$out/ab-base$ab_tag.jsonl" "$out/ab-${entry%%:*}$ab_tag.jsonl" | tail -3
  done
fi

if want clocks; then  # burst vs sustained speed of one forward, with the SM clock and power (bench/clock_probe.py)
  echo "== clock probe: B=${CLOCK_B:-4} S=${CLOCK_S:-4096} D=${CLOCK_D:-256} bf16 full"
  FLASHTILE_LIBRARY=$PWD/build-device/libflashtile.so.0.1.0 PYTHONPATH=$PWD/python timeout 120 python3 \
    bench/clock_probe.py --batch "${CLOCK_B:-4}" --seqlen "${CLOCK_S:-4096}" --head-dim "${CLOCK_D:-256}" \
    --out "$out/clocks.jsonl" 2>&1 | tail -8 || status=1
fi

# flashtile through its Python API as peers.py's candidate (impl name $1, grids $2, dtype $3): forward and backward,
# one table. fp16: peers.py measures its attention grids in bf16 only; this runs a copy whose attn_case default
# dtype is float16 (one sed; the check below fails the stage if the line moved). Same peers, same timing; the GEMM
# and copy ceilings stay bf16. Results go to peersCandidate/ or peersCandidate-fp16/.
run_peers() {
  local name=$1 grids=$2 dtype=$3 peers_py=.device/peers.py peers_out=$out/peersCandidate
  if [ "$dtype" = fp16 ]; then
    peers_py=.device/peers_fp16.py peers_out=$out/peersCandidate-fp16
    sed 's/^def attn_case(\(.*\)dtype=torch.bfloat16):/def attn_case(\1dtype=torch.float16):/' .device/peers.py > "$peers_py"
    grep -q '^def attn_case(.*dtype=torch.float16):' "$peers_py" || { echo "peers: attn_case's dtype default not found"; status=1; }
  fi
  echo "== peers.py ($dtype) --grids $grids --candidate flashtile:flash_attn_func"
  FLASHTILE_LIBRARY=${test_lib:-$PWD/build-device}/libflashtile.so.0.1.0 PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 timeout 540 \
    python3 "$peers_py" --grids "$grids" --candidate flashtile:flash_attn_func --name "$name" \
    --out "$peers_out" > /dev/null 2>&1 || status=1
  grep -c "$name" "$peers_out/peers.jsonl"
}
if want peers; then
  run_peers "${PEERS_NAME:-flashtile-sm80}" "${PEERS_GRIDS:-A,L,G}" "${PEERS_DTYPE:-bf16}"
fi
if want standing; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  if [[ $gpu_name == *H200* ]]; then
    run_peers flashtile-sm90 A,L,G bf16
    run_peers flashtile-sm90 A fp16
  else
    echo "standing: the GPU (${gpu_name:-none found}) is not an H200, whose numbers the issues' targets are: nothing measured"
  fi
fi
rm -f "$out"/*.md  # the tables are printed above; the JSON lines are the record (8 files come back at most)
# The test and sanitizer logs in one tar, so that they cannot crowd out a stage's results from the 8 files.
logs=$(cd "$out" && ls gpu-tests-*.txt sanitizer-*.txt 2>/dev/null)
if [ -n "$logs" ]; then
  # shellcheck disable=SC2086  # one name per word
  tar -C "$out" -rf "$out/test-logs.tar" $logs && (cd "$out" && rm -f $logs)  # appends: one call, several rounds
fi
exit $status
