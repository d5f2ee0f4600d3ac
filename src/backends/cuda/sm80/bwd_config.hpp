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

// Shared memory of the dK/dV kernel (the largest of the three): K, V, Q and dO tiles of 16-bit elements,
// per-column LSE and D in fp32, and in the default mode (kAccumulateDq) the step's dS^T, padded by 16 bytes a row.
template <typename Traits, bool kAccumulateDq>
constexpr int bwd_smem_bytes() {
  return (2 * Traits::kBlockM + 2 * Traits::kBlockN) * Traits::kRowStride * 2 + 2 * Traits::kBlockN * 4 +
         (kAccumulateDq ? Traits::kBlockM * (Traits::kBlockN + 8) * 2 : 0);
}

}  // namespace flashtile::cuda::sm80
