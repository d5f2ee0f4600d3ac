// One warp's tile product on mma.sync m16n8k16 with both operands in shared memory, in either orientation. The
// backward's five products need all four pairings: S = Q K^T and dP = dO V^T read A and B along their rows;
// dV += P^T dO and dK += dS^T Q read both transposed; dQ += dS K reads A straight and B transposed.
//   acc [kRows / 16][kCols / 8][4]: the warp's kRows x kCols fp32 accumulator in mma fragments (ptx.cuh)
//   a: A (kRows x kK), stored as [row][k] (kATransposed = false) or [k][row] (true)
//   b: B (kK x kCols), stored as [col][k] (kBTransposed = false) or [k][col] (true)
// Each operand is a SmemTile: where the warp's element (0, 0) sits in a stored tile, and the tile's layout.
// Each k-step loads every A fragment once and each B fragment once, so a warp tile of
// kRows x kCols reads (kRows + kCols) / 16 ldmatrix.x4 per kRows * kCols / 128 MMAs: square tiles read least.
#pragma once

#include "backends/cuda/sm80/ptx.cuh"

namespace flashtile::cuda::sm80 {

// A stored tile of 16-bit elements and a warp's corner in it: at(r, c) is the shared-memory address of the
// element r rows below the row ptr points at and col0 + c columns right of the tile's first, c a multiple of 8
// (ldmatrix reads 16-byte chunks). Two layouts:
//   kSwizzled = false: rows `stride` elements apart, padded (stride = columns + 8, so the 16-byte row reads of an
//     8x8 matrix fall in 8 distinct bank groups);
//   kSwizzled = true: unpadded rows (stride = columns, a multiple of 64) whose 16-byte chunks are permuted inside
//     each 128-byte line by the row: chunk c of row r is stored at c ^ (r % 8) (FlashAttention-2's
//     Swizzle<3, 3, 3>). The 8 rows of an ldmatrix matrix still land in 8 distinct bank groups, and a 128-byte
//     global line copied by cp.async lands in one aligned 128-byte line of shared memory (load_rows_async<...,
//     true>, fwd_tile.cuh). ptr must point at a row that is a multiple of 8 of the stored tile.
template <typename T, bool kSwizzled>
struct SmemTile {
  const T* ptr;
  int stride, col0;
  __device__ __forceinline__ uint32_t at(int r, int c) const {
    c += col0;
    if constexpr (kSwizzled) c ^= (r & 7) << 3;
    return smem_address(ptr + r * stride + c);
  }
  // Row r's column col0, which must be a multiple of 64 (a line's first chunk) when swizzled.
  __device__ __forceinline__ uint32_t row_start(int r) const { return smem_address(ptr + r * stride + col0); }
};

// One operand's ldmatrix addresses for this lane, set up once per product so that the k-loop does little or no
// address arithmetic. row_in_16, col_in_16: this lane's row and column inside a 16 x 16 block of the stored tile
// (rows 16 apart keep r % 8, so fragments and transposed k-steps are always compile-time offsets).
//   padded: one base; every fragment and k-step at a compile-time offset.
//   swizzled, read transposed (k down the stored rows): one base per fragment (its columns' XOR), the k-steps
//     16 rows apart.
//   swizzled, read along its rows (k along the stored columns, col0 a multiple of 64): the row's start and this
//     lane's XOR; each k-step costs one LOP3 and one add, shared by the step's fragments (four bases, one per
//     k-step of a line, made the D = 256 kernel spill its accumulators).
template <typename T, int kFrags, bool kTransposed, bool kSwizzled>
struct OperandAddresses {
  static constexpr int kBases = kSwizzled && kTransposed ? kFrags : 1;
  static constexpr int kElem = static_cast<int>(sizeof(T));
  uint32_t base[kBases];
  int stride, x;  // stride in bytes; x: the column bits this lane XORs (swizzled, read along its rows)

  template <typename Tile>
  __device__ __forceinline__ void init(const Tile& tile, int row_in_16, int col_in_16) {
    stride = tile.stride * kElem;
    if constexpr (kSwizzled && !kTransposed) {
      base[0] = tile.row_start(row_in_16);
      x = col_in_16 ^ ((row_in_16 & 7) << 3);
    } else {
#pragma unroll
      for (int f = 0; f < kBases; ++f) base[f] = tile.at(row_in_16, f * 16 + col_in_16);
    }
  }
  // Fragment f (16 rows or columns of the product) at k-step ks.
  __device__ __forceinline__ uint32_t at(int f, int ks) const {
    if constexpr (kTransposed) {
      if constexpr (kSwizzled) return base[f] + ks * 16 * stride;
      else return base[0] + ks * 16 * stride + f * 16 * kElem;
    } else {
      if constexpr (kSwizzled) return base[0] + f * 16 * stride + ((ks / 4) * 64 + (((ks % 4) * 16) ^ x)) * kElem;
      else return base[0] + f * 16 * stride + ks * 16 * kElem;
    }
  }
};

// The k-steps are software-pipelined: step k + 1's fragments load while step k's MMAs issue, so a warp's
// ldmatrix latency (~30 cycles) hides behind its own tensor work, not only behind other warps' (a CTA of eight
// warps leaves two per scheduler). Costs one more set of fragments in registers.
// after_step(ks) runs after k-step ks's MMAs are issued (and k-step ks + 1's loads), ks a compile-time constant
// once unrolled: other work to spread over the product (the backward's dQ reductions, DqReductionSlot::kUnderDk).
struct NoWork {
  __device__ __forceinline__ void operator()(int) const {}
};
template <typename T, int kRows, int kCols, int kK, bool kATransposed, bool kBTransposed, bool kASwizzled,
          bool kBSwizzled, typename AfterStep = NoWork>
__device__ __forceinline__ void warp_mma(float (&acc)[kRows / 16][kCols / 8][4], const SmemTile<T, kASwizzled>& a,
                                         const SmemTile<T, kBSwizzled>& b, AfterStep&& after_step = NoWork{}) {
  static_assert(kRows % 16 == 0 && kCols % 16 == 0 && kK % 16 == 0, "warp tiles are multiples of 16");
  const int lane = threadIdx.x % 32;
  // Matrix i of an x4 load is lanes 8i..8i+7's rows. A's four are (rows +0, k +0), (rows +8, k +0),
  // (rows +0, k +8), (rows +8, k +8): the a[0..3] order. B's are (cols +0, k +0), (cols +0, k +8),
  // (cols +8, k +0), (cols +8, k +8): the b0, b1 of two 8-column blocks.
  OperandAddresses<T, kRows / 16, kATransposed, kASwizzled> pa;
  OperandAddresses<T, kCols / 16, kBTransposed, kBSwizzled> pb;
  if constexpr (kATransposed)
    pa.init(a, lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8);
  else
    pa.init(a, lane % 16, (lane / 16) * 8);
  if constexpr (kBTransposed)
    pb.init(b, lane % 16, (lane / 16) * 8);
  else
    pb.init(b, lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8);
  uint32_t fa[2][kRows / 16][4], fb[2][kCols / 16][4];
  auto load = [&](int ks, int buf) {
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
      if constexpr (kATransposed) ldmatrix_x4_trans(fa[buf][i], pa.at(i, ks));
      else ldmatrix_x4(fa[buf][i], pa.at(i, ks));
    }
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j) {
      if constexpr (kBTransposed) ldmatrix_x4_trans(fb[buf][j], pb.at(j, ks));
      else ldmatrix_x4(fb[buf][j], pb.at(j, ks));
    }
  };
  load(0, 0);
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    if (ks + 1 < kK / 16) load(ks + 1, (ks + 1) % 2);
#pragma unroll
    for (int j = 0; j < kCols / 16; ++j)
#pragma unroll
      for (int i = 0; i < kRows / 16; ++i) {
        mma_16x8x16<T>(acc[i][2 * j], fa[ks % 2][i], fb[ks % 2][j][0], fb[ks % 2][j][1]);
        mma_16x8x16<T>(acc[i][2 * j + 1], fa[ks % 2][i], fb[ks % 2][j][2], fb[ks % 2][j][3]);
      }
    after_step(ks);
  }
}

}  // namespace flashtile::cuda::sm80
