// A forward kernel as the host selects it, whichever architecture's registry it came from (sm80/, sm90/).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/fwd_kernel_params.hpp"

namespace flashtile::cuda {

using FwdLauncher = cudaError_t (*)(const FwdKernelParams&, cudaStream_t);

struct FwdKernelInfo {
  FwdLauncher launch = nullptr;
  int head_dim = 0;  // the instantiated head dim the call is padded up to
  int block_m = 0;   // query rows per CTA (sm90 at D = 64 may launch its 192-row variant, and sets m_blocks itself)
  int smem_bytes = 0;
};

}  // namespace flashtile::cuda
