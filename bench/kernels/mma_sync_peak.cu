// Development harness: the dense rate of mma.sync m16n8k16 (bf16 in, fp32 accumulate) on this GPU, the
// instruction the sm80 kernels are built on, so that the seeds' "fraction of peak" can be read against the
// instruction's own ceiling rather than cuBLAS's (wgmma on Hopper). Operands stay in registers: no memory
// traffic, only the tensor pipe. Timed sustained (harness::median_ms), like everything it is compared with.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/kernels/mma_sync_peak.cu
#include <cuda_bf16.h>

#include <cstdio>

#include "backends/cuda/sm80/ptx.cuh"
#include "harness.hpp"

using flashtile::cuda::sm80::mma_16x8x16;

constexpr int kChains = 8;   // independent accumulators per warp: enough to cover the MMA's latency
constexpr int kWarps = 8;    // per CTA; two CTAs per SM
constexpr int kIters = 4096;

__global__ void __launch_bounds__(kWarps * 32) mma_peak_kernel(float* sink, uint32_t seed) {
  // Non-zero operands that differ per lane (zeros can run faster than real data: METHOD.md).
  uint32_t a[4], b0 = seed * 2654435761u + threadIdx.x, b1 = b0 ^ 0x3f803f80u;
  for (int i = 0; i < 4; ++i) a[i] = (seed + threadIdx.x * 7 + i) | 0x3c003c00u;
  float acc[kChains][4] = {};
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int c = 0; c < kChains; ++c) mma_16x8x16<__nv_bfloat16>(acc[c], a, b0, b1);
  float total = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) total += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = total;  // keeps the products live
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = 2 * sms;
  float* sink;
  CHECK(cudaMalloc(&sink, sizeof(float) * blocks * kWarps * 32));
  const float ms = harness::median_ms([&] { mma_peak_kernel<<<blocks, kWarps * 32>>>(sink, 12345u); });
  const double flops = double(blocks) * kWarps * kIters * kChains * (2.0 * 16 * 8 * 16);
  std::printf("mma.sync m16n8k16 bf16 (fp32 accumulate): %d CTAs x %d warps, %.3f ms, %.1f TFLOP/s dense\n", blocks,
              kWarps, ms, flops / ms / 1e9);
  CHECK(cudaFree(sink));
  return 0;
}
