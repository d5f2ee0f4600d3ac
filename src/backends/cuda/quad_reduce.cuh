// The online softmax's per-row arithmetic, shared by the sm80 and sm90 kernels: max and sum over the 4 threads
// (lanes 4g..4g+3) that share a row of an MMA accumulator fragment (the layout of mma.sync m16n8k16 and of
// wgmma's accumulators alike), and exp2 on the special-function unit.
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

// 2^x on the special-function unit (relative error ~2^-22; exact 0 for -inf). exp2f without fast math adds
// instructions for denormal results, which a probability that small does not need.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flashtile::cuda
