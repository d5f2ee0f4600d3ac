// Launches the sm90 forward for one (dtype, head dim) instantiation: picks its variant (FwdConfig), builds the
// TMA descriptors of q, k, v and o from the call's shapes and strides, then the kernel. Included only by the
// generated translation units (cmake/cuda_instantiations.cmake), so each kernel compiles once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/device_sms.hpp"
#include "backends/cuda/sm90/fwd_kernel.cuh"
#include "backends/cuda/sm90/fwd_launch.hpp"
#include "backends/cuda/sm90/fwd_variant.hpp"
#include "backends/cuda/sm90/tma_strides.hpp"
#include "backends/cuda/tile_counter.hpp"

namespace flashtile::cuda::sm90 {

// One variant's launch: the tile count for its kBlockM (the caller's m_blocks is for the registry's block_m),
// the TMA descriptors of q, k, v and o from the call's shapes and strides, then the kernel. kWithSoftcap = false
// leaves the softcap kernel out of a variant that never runs one (use_long_variant).
template <typename Traits, int kSchedule, bool kWithSoftcap = true>
cudaError_t launch_variant(const FwdKernelParams& f, int sms, cudaStream_t stream) {
  const int heads_kv = f.heads_q / f.group;
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
  tma_safe_strides(f.q_stride, f.batch, f.seqlen_q, f.heads_q, q_stride);
  tma_safe_strides(f.o_stride, f.batch, f.seqlen_q, f.heads_q, o_stride);
  tma_safe_strides(f.k_stride, f.batch, f.seqlen_k, heads_kv, k_stride);
  tma_safe_strides(f.v_stride, f.batch, f.seqlen_k, heads_kv, v_stride);
  // With no keys (O = 0, LSE = -inf) the kernel loads no K/V tile, but a descriptor must still be valid: an
  // extent of 0 or a null K/V (an empty tensor may have one) is refused, so K and V get one row of Q's memory.
  const bool no_keys = f.seqlen_k == 0;
  const void* k_data = no_keys ? f.q : f.k;
  const void* v_data = no_keys ? f.q : f.v;
  const int kv_rows = no_keys ? 1 : f.seqlen_k;
  if (no_keys)
    for (int d = 0; d < 3; ++d) k_stride[d] = v_stride[d] = q_stride[d];
  const auto kv_layout = cute::take<0, 2>(typename Traits::SmemLayoutKV{});
  FwdKernelParams ordered = f;
  set_query_blocks(ordered, (f.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM);
  // One CTA per SM (the kernel's registers allow no more), each taking tiles while there are any: the first by
  // its number, the next ones from a counter (tile_counter.hpp; without one, in rounds: fwd_tile_order.cuh's
  // snake), in the chunked order (fwd_tile_chunks.hpp), which under a mask goes longest first within chunks of
  // heads, so that the CTAs finish together and the chunk's K and V stay in L2.
  const int64_t tiles = static_cast<int64_t>(ordered.m_blocks) * f.batch * f.heads_q;
  if (tiles > INT32_MAX - sms) return cudaErrorInvalidValue;  // tile numbers are ints, counted up to tiles + CTAs
  const int64_t ctas = std::min<int64_t>(tiles, sms);
  const typename Traits::Params p{
      cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                          Traits::gmem_tensor(f.q, f.seqlen_q, f.head_dim, f.heads_q, f.batch, q_stride),
                          typename Traits::SmemLayoutQ{}),
      cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                          Traits::gmem_tensor(k_data, kv_rows, f.head_dim, heads_kv, f.batch, k_stride), kv_layout),
      cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                          Traits::gmem_tensor(v_data, kv_rows, f.head_dim, heads_kv, f.batch, v_stride), kv_layout),
      cute::make_tma_copy(cute::SM90_TMA_STORE{},
                          Traits::gmem_tensor_out(f.o, f.seqlen_q, f.head_dim, f.heads_q, f.batch, o_stride),
                          typename Traits::SmemLayoutO{}),
      ordered, TileChunks::of(ordered, sizeof(typename Traits::Element)), claim_tile_counter(stream)};
  auto kernel = fwd_kernel<Traits, false, kSchedule>;
  if (f.softcap > 0) {
    if constexpr (!kWithSoftcap) return cudaErrorInvalidValue;  // never a silent call without the cap
    else kernel = fwd_kernel<Traits, true, kSchedule>;
  }
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
      err != cudaSuccess)
    return err;
  kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int kHeadDim, int kSchedule>
cudaError_t launch_fwd(const FwdKernelParams& f, cudaStream_t stream) {
  using Element = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, cutlass::bfloat16_t, cutlass::half_t>;
  constexpr int kConsumers = FwdConfig<kHeadDim>::kConsumers, kConsumersLong = FwdConfig<kHeadDim>::kConsumersLong;
  int sms = 0;
  if (cudaError_t err = current_device_sms(&sms); err != cudaSuccess) return err;
  using Ordinary = FwdTraits<Element, kHeadDim, kConsumers>;
  if constexpr (kConsumersLong != kConsumers && kSchedule != Schedule::kPingPong) {  // ping-pong pairs two
    using Long = FwdTraits<Element, kHeadDim, kConsumersLong>;
    if (use_long_variant(f, sms, Ordinary::kBlockM, Long::kBlockM))
      return launch_variant<Long, kSchedule, false>(f, sms, stream);
  }
  return launch_variant<Ordinary, kSchedule>(f, sms, stream);
}

}  // namespace flashtile::cuda::sm90
