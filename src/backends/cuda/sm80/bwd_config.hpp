// Tile sizes of the sm80 backward (bwd_kernels.cuh): 64 x 64 tiles, four warps of 16 rows. The dK/dV kernel
// keeps both accumulators in registers, kOutCols of them per thread: above a head dim of 128 that does not fit,
// so each CTA accumulates one half of the head dim's columns (kColSplits CTAs per key block; S and dP, which
// need every column, are computed by both halves).
#pragma once

#include "backends/cuda/sm80/fwd_config.hpp"

namespace flashtile::cuda::sm80 {

template <int kHeadDim>
struct BwdTiles {
  static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 1, kStages = 1;
  static constexpr int kOutCols = kHeadDim <= 128 ? kHeadDim : kHeadDim / 2;  // gradient columns per CTA
  static constexpr int kColSplits = kHeadDim / kOutCols;
  static_assert(kOutCols % 16 == 0 && kOutCols <= 128, "a CTA's dK and dV columns must fit in registers");
};
template <int kHeadDim>
using BwdTraits = FwdTraits<kHeadDim, BwdTiles<kHeadDim>>;

// Shared memory of the dK/dV and dQ kernels (bwd_kernels.cuh): the two kBlockM-row tiles a CTA keeps (K and V,
// or Q and dO), and per step buffer the two kBlockN-row tiles a step brings (Q and dO, or K and V), all of
// 16-bit elements, plus the dK/dV kernel's per-column LSE and D in fp32. The default mode's dS^T reuses the Q
// tile. Two buffers let the next step's loads overlap this one's products (BwdKernelParams::prefetch).
template <typename Traits>
constexpr int bwd_smem_bytes(int buffers) {
  return (2 * Traits::kBlockM + 2 * buffers * Traits::kBlockN) * Traits::kRowStride * 2 +
         2 * buffers * Traits::kBlockN * 4;
}

}  // namespace flashtile::cuda::sm80
