// One warp's tile product on mma.sync m16n8k16 with both operands in shared memory, in either orientation. The
// backward's five products need all four pairings: S = Q K^T and dP = dO V^T read A and B along their rows;
// dV += P^T dO and dK += dS^T Q read both transposed; dQ += dS K reads A straight and B transposed.
//   acc [kRows / 16][kCols / 8][4]: the warp's kRows x kCols fp32 accumulator in mma fragments (ptx.cuh)
//   a: A (kRows x kK), stored as [row][k] (kATransposed = false) or [k][row] (true); points at row 0, k 0
//   b: B (kK x kCols), stored as [col][k] (kBTransposed = false) or [k][col] (true); points at col 0, k 0
// Strides are in elements. Each k-step loads every A fragment once and each B fragment once, so a warp tile of
// kRows x kCols reads (kRows + kCols) / 16 ldmatrix.x4 per kRows * kCols / 128 MMAs: square tiles read least.
#pragma once

#include "backends/cuda/sm80/ptx.cuh"

namespace flashtile::cuda::sm80 {

template <typename T, int kRows, int kCols, int kK, bool kATransposed, bool kBTransposed>
__device__ __forceinline__ void warp_mma(float (&acc)[kRows / 16][kCols / 8][4], const T* a, int a_stride,
                                         const T* b, int b_stride) {
  static_assert(kRows % 16 == 0 && kCols % 16 == 0 && kK % 16 == 0, "warp tiles are multiples of 16");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k0 = 0; k0 < kK; k0 += 16) {
    // Matrix i of an x4 load is lanes 8i..8i+7's rows. A's four are (rows +0, k +0), (rows +8, k +0),
    // (rows +0, k +8), (rows +8, k +8): the a[0..3] order. B's are (cols +0, k +0), (cols +0, k +8),
    // (cols +8, k +0), (cols +8, k +8): the b0, b1 of two 8-column blocks.
    uint32_t af[kRows / 16][4];
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
      if constexpr (kATransposed)
        ldmatrix_x4_trans(af[i], a + (k0 + lane % 8 + (lane / 16) * 8) * a_stride + i * 16 + ((lane / 8) % 2) * 8);
      else
        ldmatrix_x4(af[i], a + (i * 16 + lane % 16) * a_stride + k0 + (lane / 16) * 8);
    }
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j) {
      uint32_t bf[4];
      if constexpr (kBTransposed)
        ldmatrix_x4_trans(bf, b + (k0 + lane % 16) * b_stride + j * 16 + (lane / 16) * 8);
      else
        ldmatrix_x4(bf, b + (j * 16 + lane % 8 + (lane / 16) * 8) * b_stride + k0 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int i = 0; i < kRows / 16; ++i) {
        mma_16x8x16<T>(acc[i][2 * j], af[i], bf[0], bf[1]);
        mma_16x8x16<T>(acc[i][2 * j + 1], af[i], bf[2], bf[3]);
      }
    }
  }
}

}  // namespace flashtile::cuda::sm80
