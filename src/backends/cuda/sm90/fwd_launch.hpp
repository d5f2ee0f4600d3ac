// The sm90 forward as the host sees it: which instantiations this build has, and how to launch one.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/fwd_kernel_info.hpp"
#include "backends/cuda/sm90/fwd_config.hpp"
#include "flashtile/flashtile.hpp"

namespace flashtile::cuda::sm90 {

// Defined in fwd_launch.cuh; explicitly instantiated once per generated translation unit (with the library's
// Schedule (fwd_config.hpp); the Hopper harness also instantiates the others at D = 128, to measure what each
// step buys; kPingPong never takes a head dim's long variant, whose three consumers it cannot pair).
template <typename T, int kHeadDim, int kSchedule = kOverlap>
cudaError_t launch_fwd(const FwdKernelParams& params, cudaStream_t stream);

using cuda::FwdKernelInfo;
using cuda::FwdLauncher;

// The smallest instantiated head dim >= head_dim for dtype (generated: fwd_sm90_registry.cu); launch is null
// when this build has none (FLASHTILE_CUDA_SM90=OFF, or the head dim / dtype lists left it out).
FwdKernelInfo find_fwd(DType dtype, int head_dim);

}  // namespace flashtile::cuda::sm90
