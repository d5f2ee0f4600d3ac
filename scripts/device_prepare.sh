#!/usr/bin/env bash
# Prepares a GPU round on this machine (the GPU machine has no package registry, so it gets binaries):
#   build-device/  a build whose binaries need no OpenBLAS installed: OpenBLAS linked statically into
#                  libflashtile.so, which the tool and the tests share, kernels for sm_90a only (the H200);
#                  plus the GPU test binaries and the harnesses (bench/kernels/sm80_fwd_tiles.cu, sm80_bwd_tiles.cu,
#                  mma_sync_peak.cu, sm90_fwd_wgmma.cu)
#   .device/       what else travels: libflashtile.so xz-compressed (52 MB -> ~7 MB: the carry limit is 64 MiB;
#                  gpu_round.sh unpacks it), peers.py from ../shared/bench, libgomp, and a flashtile wheel with
#                  the CUDA kernels and OpenBLAS inside, for `pip install` there (gpu_round.sh install)
#                  (WHEEL=1 only); candidate libraries for an A/B go to .device/cand-<name>/ (scripts/candidate_lib.sh)
# Then call the device tool with carry [build-device/tools/flashtile, build-device/cuda_forward_test,
# build-device/cuda_backward_test, build-device/sm80_fwd_tiles, build-device/sm80_bwd_tiles,
# build-device/mma_sync_peak, build-device/sm90_fwd_wgmma, .device] (the tool's 8 paths) and run
# scripts/gpu_round.sh.
# WHEEL=0 skips the wheel (its own incremental build in build-wheel/). SM90=OFF leaves the sm90 kernels out (auto
# then runs the sm80 kernels on the H200).
set -euo pipefail
cd "$(dirname "$0")/.."
# The options (scripts/device_options.sh) also fetch CuTe for the sm90 kernels and the Hopper harnesses: the pinned
# CUTLASS headers from PyPI, unpacked into .deps/ (ignored by git), shared by every build here (pip's isolated
# wheel build cannot fetch them itself); $cutlass is their include directory.
source scripts/device_options.sh
mkdir -p build-device
scripts/setup.sh build-device "${device_cmake_args[@]}" "$@" 2>&1 | tee build-device/prepare.log
scripts/check_wgmma_serialized.sh build-device/prepare.log device_prepare  # stop before timing such a build
build_gpu_tests . build-device  # the GPU test binaries, linked against the library above (device_options.sh)
for harness in sm80_fwd_tiles sm80_bwd_tiles mma_sync_peak; do
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude "bench/kernels/$harness.cu" \
    -o "build-device/$harness"
done
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude -isystem "$cutlass" \
  bench/kernels/sm90_fwd_wgmma.cu -o build-device/sm90_fwd_wgmma
mkdir -p .device/lib
xz -T2 -9e -c build-device/libflashtile.so.0.1.0 > .device/libflashtile.so.0.1.0.xz  # -9e: candidate_lib.sh says why
cp ../shared/bench/peers.py .device/peers.py
cp "$(g++ -print-file-name=libgomp.so.1)" .device/lib/
rm -f .device/flashtile-*.whl  # a wheel of an earlier build must not travel (and it is 20 MB of the 64 MiB carry)
if [ "${WHEEL:-1}" = 1 ]; then  # py3-none wheel (ctypes): built with 3.11 here, installs on the GPU machine's 3.12
  python3 -m pip wheel -q --no-deps -w .device . -Ccmake.define.FLASHTILE_ENABLE_CUDA=ON \
    -Ccmake.define.FLASHTILE_CUDA_ARCHS=90a -Ccmake.define.FLASHTILE_STATIC_BLAS=ON \
    -Ccmake.define.FLASHTILE_CUDA_SM90=${SM90:-ON} -Ccmake.define.FLASHTILE_CUTLASS_DIR="$cutlass" \
    -Cbuild-dir=build-wheel
fi
du -shL build-device/tools/flashtile build-device/cuda_*_test build-device/sm80_fwd_tiles build-device/sm80_bwd_tiles \
  build-device/mma_sync_peak \
  build-device/sm90_fwd_wgmma .device
