// Max and sum over the 4 threads (lanes 4g..4g+3) that share a row of an MMA accumulator fragment: the layout of
// mma.sync m16n8k16 (sm80 kernels) and of wgmma's accumulators (sm90) alike.
#pragma once

namespace flashtile::cuda {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flashtile::cuda
