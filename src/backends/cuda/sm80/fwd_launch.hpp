// The sm80 forward as the host sees it: which instantiations this build has, and how to launch one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/bwd_kernel_params.hpp"
#include "backends/cuda/fwd_kernel_info.hpp"
#include "flashtile/flashtile.hpp"

namespace flashtile::cuda::sm80 {

// Switches on the v2 kernel for the seeds' ablation (flashtile bench --ablation); the library runs the defaults.
// A bit set, so it can be a template parameter.
enum FwdVariant : int {
  kV2 = 0,
  kRescaleEveryStep = 1,   // FA1-style: O normalised by the running sum after every K/V tile
  kSequentialQBlocks = 2,  // FA1-style grid: one CTA per (batch, head) walks all its query blocks
};

// Defined in fwd_launch.cuh; explicitly instantiated once per generated translation unit. Config is a tile
// table row (fwd_config.hpp: FwdConfig, or FwdConfigHopper for sm_90).
template <typename T, int kHeadDim, int kVariant, typename Config>
cudaError_t launch_fwd(const FwdKernelParams& params, cudaStream_t stream);

using cuda::FwdKernelInfo;
using cuda::FwdLauncher;

// The FlashAttention-1 schedule (fwd_fa1_kernel.cuh), for the ablation only; p.fa1_o / fa1_max / fa1_sum must
// hold fwd_fa1_workspace_floats() floats between them.
template <typename T, int kHeadDim>
cudaError_t launch_fwd_fa1(const FwdKernelParams& params, cudaStream_t stream);

// Keys from which a call with no mask takes FwdConfigHopperLong's row (fwd_config.hpp).
constexpr int kLongKeys = 1024;

// The smallest instantiated head dim >= head_dim for dtype (generated: fwd_registry.cu), with the Hopper tile
// configuration where one exists, the device is sm_90 (cc_major == 9) and a block may take its shared memory
// (smem_optin bytes: FLASHTILE_CUDA_SMEM_LIMIT may lower it below the device's, and the portable row then runs);
// on such a device the long row where one exists and unmasked_keys (the call's keys when it has no mask, else 0)
// is at least kLongKeys. launch is null when this build has none (CMake FLASHTILE_CUDA_HEAD_DIMS /
// FLASHTILE_CUDA_DTYPES left it out).
FwdKernelInfo find_fwd(DType dtype, int head_dim, int cc_major = 8, int smem_optin = 1 << 30, int unmasked_keys = 0);

// The seeds' ablation (bf16, head dim 128 only): v2 with FA1's per-step rescale, or without sequence
// parallelism. null when this build left bf16 / 128 out.
FwdKernelInfo find_fwd_ablation(bool rescale_every_step, bool sequential_q_blocks);

// The FlashAttention-1 kernel of the same ablation (bf16, head dim 128), and the floats of global state it
// needs: O (batch x heads x seqlen_q x head dim) plus the running max and sum (batch x heads x seqlen_q each).
FwdKernelInfo find_fwd_fa1();
inline int64_t fwd_fa1_workspace_floats(int64_t batch, int64_t heads_q, int64_t seqlen_q, int head_dim) {
  return batch * heads_q * seqlen_q * (head_dim + 2);
}

// The sm80 backward (bwd_kernels.cuh): D, then dK/dV, then dQ, all on `stream`. p.delta must hold
// batch x heads_q x seqlen_q floats.
template <typename T, int kHeadDim>
cudaError_t launch_bwd(const BwdKernelParams& params, cudaStream_t stream);

using BwdLauncher = cudaError_t (*)(const BwdKernelParams&, cudaStream_t);

struct BwdKernelInfo {
  BwdLauncher launch = nullptr;
  int head_dim = 0;  // the instantiated head dim the call is padded up to
  int block_m = 0;   // query rows per CTA of the dQ kernel
  int smem_bytes = 0;  // the least the kernels need: the smallest row, one step buffer (bwd_config.hpp)
};

// The smallest instantiated backward head dim >= head_dim, or launch = null.
BwdKernelInfo find_bwd(DType dtype, int head_dim);

}  // namespace flashtile::cuda::sm80
