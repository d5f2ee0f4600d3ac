// Launches the sm80 backward for one (dtype, head dim) instantiation; included only by the generated
// translation units (cmake/cuda_instantiations.cmake).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/sm80/bwd_kernels.cuh"
#include "backends/cuda/sm80/fwd_launch.hpp"

namespace flashtile::cuda::sm80 {

template <typename T, int kHeadDim>
cudaError_t launch_bwd(const BwdKernelParams& p, cudaStream_t stream) {
  using Traits = BwdTraits<kHeadDim>;
  constexpr int kSmem = bwd_smem_bytes<Traits>();
  const FwdKernelParams& f = p.fwd;
  const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
  constexpr int kDeltaWarps = 8;  // query rows per block of the D kernel
  const auto delta_blocks = static_cast<unsigned>((rows + kDeltaWarps - 1) / kDeltaWarps);
  bwd_delta_kernel<T><<<delta_blocks, kDeltaWarps * 32, 0, stream>>>(p);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  auto dkdv = f.softcap > 0 ? bwd_dkdv_kernel<Traits, T, true> : bwd_dkdv_kernel<Traits, T, false>;
  auto dq = f.softcap > 0 ? bwd_dq_kernel<Traits, T, true> : bwd_dq_kernel<Traits, T, false>;
  for (const void* kernel : {reinterpret_cast<const void*>(dkdv), reinterpret_cast<const void*>(dq)})
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
        err != cudaSuccess)
      return err;
  // Grids flattened into x, as in the forward: (key blocks) x batch x K/V heads, (query blocks) x batch x heads.
  const int64_t dkdv_blocks = static_cast<int64_t>(p.n_blocks) * f.batch * p.heads_kv;
  if (dkdv_blocks > 0) dkdv<<<static_cast<unsigned>(dkdv_blocks), Traits::kThreads, kSmem, stream>>>(p);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  const int64_t dq_blocks = static_cast<int64_t>(f.m_blocks) * f.batch * f.heads_q;
  if (dq_blocks > 0) dq<<<static_cast<unsigned>(dq_blocks), Traits::kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashtile::cuda::sm80
