// Tile sizes of the sm80 backward (bwd_kernels.cuh): 64 x 64 tiles, four warps of 16 rows. The dK/dV kernel
// keeps both accumulators in registers, kHeadDim of them per thread, so head dims above 128 are not built.
#pragma once

#include "backends/cuda/sm80/fwd_config.hpp"

namespace flashtile::cuda::sm80 {

template <int kHeadDim>
struct BwdTiles {
  static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 1, kStages = 1;
  static_assert(kHeadDim <= 128, "dK and dV accumulators for head dims above 128 would not fit in registers");
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
