// The sm90 backward as the host sees it: which instantiations this build has, and how to launch one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/bwd_kernel_params.hpp"
#include "backends/cuda/sm80/fwd_launch.hpp"  // BwdKernelInfo, BwdLauncher
#include "flashtile/flashtile.hpp"

namespace flashtile::cuda::sm90 {

// Defined in bwd_launch.cuh; explicitly instantiated once per generated translation unit.
template <typename T, int kHeadDim>
cudaError_t launch_bwd(const BwdKernelParams& params, cudaStream_t stream);

using sm80::BwdKernelInfo;

// The instantiation for exactly this head dim (the head dim the sm80 table pads the call's to), or launch = null:
// none in this build (FLASHTILE_CUDA_SM90=OFF, FLASHTILE_CUDA_BACKWARD=OFF, or the head dim / dtype lists left it
// out). Generated:
// fwd_sm90_registry.cu (which lists the sm90 forward and backward kernels).
BwdKernelInfo find_bwd(DType dtype, int head_dim);

// The sm90 backward's LSE and D (bwd_prep_kernel) lie in the workspace as rows padded to a multiple of this per
// (batch, head), so that a step's rows of each (64 or 128, from a multiple of its own count) are one bulk copy.
constexpr int kBwdStatsRowAlign = 128;

// Workspace rows per (batch, head) of the padded LSE and D.
inline __host__ __device__ int64_t bwd_padded_rows(int64_t seqlen_q) {
  return (seqlen_q + kBwdStatsRowAlign - 1) / kBwdStatsRowAlign * kBwdStatsRowAlign;
}

// Floats of workspace the padded LSE and D take, together, and after them the main kernel's tile counter (one
// int, in a slot of 1 KB, so that the dQ accumulator behind it keeps the alignment it has from the padded rows:
// its boxes' rows and the warps' reductions start on cache lines).
constexpr int64_t kBwdTileCounterFloats = 256;
inline int64_t bwd_stats_floats(int64_t batch, int64_t heads_q, int64_t seqlen_q) {
  return 2 * batch * heads_q * bwd_padded_rows(seqlen_q) + kBwdTileCounterFloats;
}

// The deterministic mode's counts of dQ additions (BwdKernelParams::dq_turns): one int per 64 padded rows of each
// (batch, query head), whichever block of rows (64 or 128) the kernel steps by.
constexpr int kBwdTurnRows = 64;
inline __host__ __device__ int64_t bwd_turns(int64_t batch, int64_t heads_q, int64_t seqlen_q) {
  return batch * heads_q * (bwd_padded_rows(seqlen_q) / kBwdTurnRows);
}

}  // namespace flashtile::cuda::sm90
