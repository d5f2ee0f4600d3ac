// Launches the sm80 forward for one (dtype, head dim) instantiation. Included only by the generated
// translation units (one per instantiation, see cmake/cuda_instantiations.cmake), so each kernel compiles once.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/sm80/fwd_fa1_kernel.cuh"
#include "backends/cuda/sm80/fwd_kernel.cuh"

namespace flashtile::cuda::sm80 {

template <typename T, int kHeadDim, int kVariant, typename Config>
cudaError_t launch_fwd(const FwdKernelParams& p, cudaStream_t stream) {
  using Traits = FwdTraits<kHeadDim, Config>;
  auto kernel = p.softcap > 0 ? fwd_kernel<Traits, T, true, kVariant> : fwd_kernel<Traits, T, false, kVariant>;
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
      err != cudaSuccess)
    return err;
  // One CTA per (query block, batch x head), flattened into x (up to 2^31 - 1 blocks, unlike y and z).
  const int64_t blocks = static_cast<int64_t>((kVariant & kSequentialQBlocks) ? 1 : p.m_blocks) * p.batch * p.heads_q;
  kernel<<<static_cast<unsigned>(blocks), Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int kHeadDim>
cudaError_t launch_fwd_fa1(const FwdKernelParams& p, cudaStream_t stream) {
  using Traits = FwdTraits<kHeadDim>;
  auto kernel = p.softcap > 0 ? fwd_fa1_kernel<Traits, T, true> : fwd_fa1_kernel<Traits, T, false>;
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
      err != cudaSuccess)
    return err;
  // One CTA per (batch, head): FA1 has no parallelism over the sequence.
  kernel<<<static_cast<unsigned>(p.batch * p.heads_q), Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashtile::cuda::sm80
