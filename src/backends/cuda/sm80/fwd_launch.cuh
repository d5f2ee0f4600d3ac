// Launches the sm80 forward for one (dtype, head dim) instantiation. Included only by the generated
// translation units (one per instantiation, see cmake/cuda_instantiations.cmake), so each kernel compiles once.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/device_sms.hpp"
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
  // One CTA per (query block, batch x head), flattened into x (up to 2^31 - 1 blocks, unlike y and z); the
  // kernel numbers them in ints. Persistent rows: as many CTAs as the SMs hold at once, each walking its share.
  const int64_t tiles = static_cast<int64_t>(p.m_blocks) * p.batch * p.heads_q;
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  int64_t ctas = (kVariant & kSequentialQBlocks) ? static_cast<int64_t>(p.batch) * p.heads_q : tiles;
  FwdKernelParams ordered = p;  // the persistent walk's order (fwd_tile_order.cuh); a CTA per block: head by head
  if constexpr (Traits::kPersistent || Traits::kHintNextWave) {
    int sms = 0, per_sm = 0;
    if (cudaError_t err = current_device_sms(&sms); err != cudaSuccess) return err;
    if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Traits::kThreads,
                                                                        Traits::kSmemBytes);
        err != cudaSuccess)
      return err;
    const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
    if constexpr (Traits::kPersistent) {
      ctas = std::min<int64_t>(tiles, resident);
    } else {
      ordered.l2_ahead = static_cast<int>(resident);  // fwd_kernel.cuh, hint_next_wave
    }
  }
  ordered.heavy_first =
      Traits::kPersistent && heavy_first_order<Traits::kBlockM, Traits::kBlockN>(p, static_cast<int>(ctas));
  kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSmemBytes, stream>>>(ordered);
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
