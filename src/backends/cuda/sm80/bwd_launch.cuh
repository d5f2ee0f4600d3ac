// Launches the sm80 backward for one (dtype, head dim) instantiation; included only by the generated
// translation units (cmake/cuda_instantiations.cmake).
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "backends/cuda/sm80/bwd_kernels.cuh"
#include "backends/cuda/sm80/fwd_launch.hpp"

namespace flashtile::cuda::sm80 {

// Whether a kernel keeps as many CTAs per SM with two step buffers as with one, on the current device, within
// the shared memory the call may use (BwdKernelParams::smem_limit). On the H200 both kernels do at every head dim
// (the dK/dV kernel runs one CTA per SM, the dQ kernel two up to D = 128); an A100 (163 KB) fits the dK/dV
// kernel's two buffers at D = 96, and, with the swizzled rows (no padding), exactly at D = 128 and 192
// (166912 bytes, the A100's limit: not measured on an A100). The occupancy answer is kept per (kernel, device); an inline function,
// so every translation unit shares the one cache.
inline bool prefetch_keeps_occupancy(const void* kernel, int threads, int smem_one, int smem_two, int smem_limit) {
  if (smem_two > smem_limit) return false;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, bool> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find({kernel, device});
  if (it != known.end()) return it->second;
  int one = 0, two = 0;
  const bool yes =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_two) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&one, kernel, threads, smem_one) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&two, kernel, threads, smem_two) == cudaSuccess && two >= one;
  known.emplace(std::make_pair(kernel, device), yes);
  return yes;
}

// One kernel of the backward on a grid flattened into x, as in the forward ((key blocks) x batch x K/V heads, or
// (query blocks) x batch x heads), y the part of the head dim's columns a CTA accumulates (the dQ kernel's
// kColSplits: 2 above 128); with two step buffers where that keeps the CTAs per SM (sets p.prefetch).
template <typename Kernel>
cudaError_t launch_bwd_kernel(Kernel kernel, BwdKernelParams& p, int64_t blocks, int threads, int col_splits,
                              int smem_one, int smem_two, cudaStream_t stream) {
  p.prefetch =
      prefetch_keeps_occupancy(reinterpret_cast<const void*>(kernel), threads, smem_one, smem_two, p.smem_limit);
  const int smem = p.prefetch ? smem_two : smem_one;
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      err != cudaSuccess)
    return err;
  if (blocks > 0) kernel<<<dim3(static_cast<unsigned>(blocks), col_splits), threads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The deterministic mode's dQ kernel, once D is in p.delta: one CTA per (query block, batch, head), which sets
// p.fwd.m_blocks. The sm90 backward's deterministic mode runs it too (sm90/bwd_launch.cuh).
template <typename T, int kHeadDim>
cudaError_t launch_bwd_dq(BwdKernelParams p, cudaStream_t stream) {
  using DqTraits = BwdDqTraits<kHeadDim>;
  FwdKernelParams& f = p.fwd;
  set_query_blocks(f, (f.seqlen_q + DqTraits::kBlockM - 1) / DqTraits::kBlockM);
  auto kernel = f.softcap > 0 ? bwd_dq_kernel<DqTraits, T, true> : bwd_dq_kernel<DqTraits, T, false>;
  return launch_bwd_kernel(kernel, p, static_cast<int64_t>(f.m_blocks) * f.batch * f.heads_q, DqTraits::kThreads,
                           DqTraits::kColSplits, bwd_dq_smem_bytes<DqTraits>(1), bwd_dq_smem_bytes<DqTraits>(2),
                           stream);
}

// The backward with one row of the dK/dV table (bwd_config.hpp), which sets the key blocks.
template <typename T, int kHeadDim, typename DkdvTraits>
cudaError_t launch_bwd_with(const BwdKernelParams& params, cudaStream_t stream) {
  BwdKernelParams p = params;
  p.n_blocks = static_cast<int>((p.fwd.seqlen_k + DkdvTraits::kBlockN - 1) / DkdvTraits::kBlockN);
  p.delta_head_stride = p.fwd.seqlen_q;  // bwd_delta_kernel below writes D dense
  const FwdKernelParams& f = p.fwd;
  const bool accumulate_dq = p.dq_accum != nullptr;  // default mode; deterministic mode runs bwd_dq_kernel
  const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
  const unsigned row_blocks = LaneRow<kHeadDim>::blocks(rows);  // of the D kernel
  // The accumulator's floats, zeroed by the D kernel (a multiple of 4: head dims are multiples of 8).
  const int64_t accum_floats = accumulate_dq ? static_cast<int64_t>(f.batch) * f.heads_q *
                                                   dq_accum_rows(f.seqlen_q, DkdvTraits::kDqOrder) * f.head_dim
                                             : 0;
  if (rows > 0) bwd_delta_kernel<T, kHeadDim><<<row_blocks, kRowThreads, 0, stream>>>(p, accum_floats);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  auto launch_dkdv = [&](auto kernel) {
    return launch_bwd_kernel(kernel, p, static_cast<int64_t>(p.n_blocks) * f.batch * p.heads_kv,
                             DkdvTraits::kThreads, 1, DkdvTraits::smem_bytes(1), DkdvTraits::smem_bytes(2), stream);
  };
  const bool softcap = f.softcap > 0;
  if (accumulate_dq) {
    cudaError_t err = softcap ? launch_dkdv(bwd_dkdv_kernel<DkdvTraits, T, true, true>)
                              : launch_dkdv(bwd_dkdv_kernel<DkdvTraits, T, false, true>);
    if (err != cudaSuccess) return err;
    if (rows > 0) launch_bwd_dq_convert<T, kHeadDim, DkdvTraits::kDqOrder>(p, stream);
    return cudaGetLastError();
  }
  cudaError_t err = softcap ? launch_dkdv(bwd_dkdv_kernel<DkdvTraits, T, true, false>)
                            : launch_dkdv(bwd_dkdv_kernel<DkdvTraits, T, false, false>);
  if (err != cudaSuccess) return err;
  return launch_bwd_dq<T, kHeadDim>(p, stream);
}

// The main row where one step buffer fits in the call's shared memory, else the small row (99 KB GPUs).
template <typename T, int kHeadDim>
cudaError_t launch_bwd(const BwdKernelParams& params, cudaStream_t stream) {
  using Main = BwdDkdvTraits<kHeadDim>;
  if constexpr (kHasBwdDkdvConfigSmall<kHeadDim>)
    if (Main::smem_bytes(1) > params.smem_limit)
      return launch_bwd_with<T, kHeadDim, BwdDkdvTraits<kHeadDim, BwdDkdvConfigSmall<kHeadDim>>>(params, stream);
  return launch_bwd_with<T, kHeadDim, Main>(params, stream);
}

}  // namespace flashtile::cuda::sm80
