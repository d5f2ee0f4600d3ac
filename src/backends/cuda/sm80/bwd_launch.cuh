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
  const FwdKernelParams& f = p.fwd;
  const bool accumulate_dq = p.dq_accum != nullptr;  // default mode; deterministic mode runs bwd_dq_kernel
  const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
  constexpr int kRowWarps = 8;  // query rows per block of the D and dQ-convert kernels (one warp each)
  const auto row_blocks = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
  if (accumulate_dq)
    if (cudaError_t err = cudaMemsetAsync(p.dq_accum, 0, rows * f.head_dim * sizeof(float), stream); err != cudaSuccess)
      return err;
  bwd_delta_kernel<T><<<row_blocks, kRowWarps * 32, 0, stream>>>(p);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  // Grids flattened into x, as in the forward: (key blocks) x batch x K/V heads, (query blocks) x batch x heads;
  // y is the half of the head dim's columns a CTA accumulates (kColSplits: 2 above a head dim of 128).
  const int64_t dkdv_blocks = static_cast<int64_t>(p.n_blocks) * f.batch * p.heads_kv;
  const dim3 splits(1, Traits::kColSplits);
  const bool softcap = f.softcap > 0;
  auto launch_dkdv = [&](auto kernel, int smem) {
    if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        err != cudaSuccess)
      return err;
    if (dkdv_blocks > 0)
      kernel<<<dim3(static_cast<unsigned>(dkdv_blocks), splits.y), Traits::kThreads, smem, stream>>>(p);
    return cudaGetLastError();
  };
  if (accumulate_dq) {
    constexpr int kSmem = bwd_smem_bytes<Traits, true>();
    cudaError_t err = softcap ? launch_dkdv(bwd_dkdv_kernel<Traits, T, true, true>, kSmem)
                              : launch_dkdv(bwd_dkdv_kernel<Traits, T, false, true>, kSmem);
    if (err != cudaSuccess) return err;
    if (rows > 0) bwd_dq_convert_kernel<T><<<row_blocks, kRowWarps * 32, 0, stream>>>(p);
    return cudaGetLastError();
  }
  constexpr int kSmem = bwd_smem_bytes<Traits, false>();
  cudaError_t err = softcap ? launch_dkdv(bwd_dkdv_kernel<Traits, T, true, false>, kSmem)
                            : launch_dkdv(bwd_dkdv_kernel<Traits, T, false, false>, kSmem);
  if (err != cudaSuccess) return err;
  auto dq = softcap ? bwd_dq_kernel<Traits, T, true> : bwd_dq_kernel<Traits, T, false>;
  if (err = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem); err != cudaSuccess)
    return err;
  const int64_t dq_blocks = static_cast<int64_t>(f.m_blocks) * f.batch * f.heads_q;
  if (dq_blocks > 0) dq<<<dim3(static_cast<unsigned>(dq_blocks), splits.y), Traits::kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashtile::cuda::sm80
