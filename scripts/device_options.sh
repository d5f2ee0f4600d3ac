# The CMake options of the GPU machine's build, sourced by scripts/device_prepare.sh and scripts/candidate_lib.sh
# from the repository root: OpenBLAS linked statically into libflashtile.so (the GPU machine has no package
# registry), CUDA kernels for sm_90a only (the H200), the backward, the sm90 forward (SM90=OFF leaves it out) with
# the pinned CUTLASS headers unpacked into .deps/.
cutlass=$PWD/.deps/cutlass_library/source/include
[ -d "$cutlass/cute" ] || python3 -m pip install -q --target .deps --no-deps nvidia-cutlass==4.2.0.0
device_cmake_args=(-DFLASHTILE_STATIC_BLAS=ON -DFLASHTILE_ENABLE_CUDA=ON -DFLASHTILE_CUDA_BACKWARD=ON
  "-DFLASHTILE_CUDA_SM90=${SM90:-ON}" "-DFLASHTILE_CUTLASS_DIR=$cutlass" -DFLASHTILE_CUDA_ARCHS=90a
  -DFLASHTILE_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=ON)
# The GPU test binaries (tests/backends/cuda) of a source tree, linked against the library and the verify
# library of its build directory (which a CMake build with tests off leaves out of its own targets).
build_gpu_tests() {  # <source tree> <build directory>
  for t in forward backward; do
    g++ -std=c++20 -O2 -fopenmp "$1/tests/backends/cuda/${t}_test.cpp" -I"$1/src" -I"$1/include" -I"$1/tests" \
      "$2/libflashtile_verify.a" -L"$2" -lflashtile -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt \
      -lgtest -lgtest_main -lpthread -o "$2/cuda_${t}_test"
  done
}
