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

// The fragments of one k-step: every A fragment (16 rows each) and every B fragment (16 columns each).
template <typename T, int kRows, int kCols, bool kATransposed, bool kBTransposed>
struct WarpFragments {
  uint32_t a[kRows / 16][4], b[kCols / 16][4];

  __device__ __forceinline__ void load(const T* pa, int a_stride, const T* pb, int b_stride, int k0) {
    const int lane = threadIdx.x % 32;
    // Matrix i of an x4 load is lanes 8i..8i+7's rows. A's four are (rows +0, k +0), (rows +8, k +0),
    // (rows +0, k +8), (rows +8, k +8): the a[0..3] order. B's are (cols +0, k +0), (cols +0, k +8),
    // (cols +8, k +0), (cols +8, k +8): the b0, b1 of two 8-column blocks.
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
      if constexpr (kATransposed)
        ldmatrix_x4_trans(a[i], pa + (k0 + lane % 8 + (lane / 16) * 8) * a_stride + i * 16 + ((lane / 8) % 2) * 8);
      else
        ldmatrix_x4(a[i], pa + (i * 16 + lane % 16) * a_stride + k0 + (lane / 16) * 8);
    }
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j) {
      if constexpr (kBTransposed)
        ldmatrix_x4_trans(b[j], pb + (k0 + lane % 16) * b_stride + j * 16 + (lane / 16) * 8);
      else
        ldmatrix_x4(b[j], pb + (j * 16 + lane % 8 + (lane / 16) * 8) * b_stride + k0 + ((lane / 8) % 2) * 8);
    }
  }
};

// The k-steps are software-pipelined: step k + 1's fragments load while step k's MMAs issue, so a warp's
// ldmatrix latency (~30 cycles) hides behind its own tensor work, not only behind other warps' (a CTA of eight
// warps leaves two per scheduler). Costs one more set of fragments in registers.
template <typename T, int kRows, int kCols, int kK, bool kATransposed, bool kBTransposed>
__device__ __forceinline__ void warp_mma(float (&acc)[kRows / 16][kCols / 8][4], const T* a, int a_stride,
                                         const T* b, int b_stride) {
  static_assert(kRows % 16 == 0 && kCols % 16 == 0 && kK % 16 == 0, "warp tiles are multiples of 16");
  WarpFragments<T, kRows, kCols, kATransposed, kBTransposed> frag[2];
  frag[0].load(a, a_stride, b, b_stride, 0);
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    if (ks + 1 < kK / 16) frag[(ks + 1) % 2].load(a, a_stride, b, b_stride, (ks + 1) * 16);
    const auto& f = frag[ks % 2];
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j)
#pragma unroll
      for (int i = 0; i < kRows / 16; ++i) {
        mma_16x8x16<T>(acc[i][2 * j], f.a[i], f.b[j][0], f.b[j][1]);
        mma_16x8x16<T>(acc[i][2 * j + 1], f.a[i], f.b[j][2], f.b[j][3]);
      }
  }
}

}  // namespace flashtile::cuda::sm80
