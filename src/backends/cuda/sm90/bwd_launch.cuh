// Launches the sm90 backward for one (dtype, head dim) instantiation: the LSE and D into the padded workspace
// and the dQ accumulator cleared (one prep kernel), the TMA descriptors of q, k, v and dO built
// from the call's shapes and strides, the main kernel, then dQ's conversion. Included only by the generated
// translation units (cmake/cuda_instantiations.cmake), so each kernel compiles once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include "backends/cuda/device_sms.hpp"
#include "backends/cuda/sm80/bwd_launch.cuh"  // launch_bwd_dq_convert
#include "backends/cuda/sm90/bwd_kernel.cuh"
#include "backends/cuda/sm90/bwd_pair_kernel.cuh"
#include "backends/cuda/sm90/bwd_launch.hpp"
#include "backends/cuda/sm90/tma_strides.hpp"

namespace flashtile::cuda::sm90 {

// The tile schedule of a main kernel with tiles of kBlockN keys and steps of kBlockM query rows, run by `workers`
// persistent CTAs (or clusters): sets p.n_blocks and p.tail_heads and returns the number of tiles, or -1 where
// there are too many for the kernel's int tile numbers (the counter runs past the last tile by up to a worker each).
// Where a tile's steps fall with its key block (a causal mask, or any whose rows run to seqlen_q for every key
// block: a block's first row only grows with it), the last heads' tiles go longest first, so that the grid ends
// on short tiles: kTailRounds rounds of the grid's tiles, in whole heads (few enough that their Q and dO stay
// in L2). A count of the hand-out over grid A's causal shapes (steps of equal cost, bench/bwd_tile_balance.py)
// put the last CTA's end 3-7% past the mean's with every head in key-block order, 0.2-2% with this. Under GQA a
// K/V head's tiles walk its `group` query heads, so the rounds are counted in query heads: a tail of whole K/V
// heads `group` times the MHA one would hold `group` times the rows at once (grid G's D = 128 S = 8k, 32 query
// heads on 8: 36 query heads, over half the call, against 12 this way, for a count of the last CTA 4.8% past
// the mean instead of 1.1%). Other masks keep key-block order (under a left-only window the steps grow with the
// block). The deterministic mode numbers every head's tiles that way, whatever the mask (BwdTile, and the
// ordered dQ in bwd_kernel).
template <int kBlockM, int kBlockN>
int64_t schedule_bwd_tiles(BwdKernelParams& p, int64_t workers, bool ordered_dq) {
  const FwdKernelParams& f = p.fwd;
  p.n_blocks = (f.seqlen_k + kBlockN - 1) / kBlockN;
  const int64_t tiles = static_cast<int64_t>(p.n_blocks) * f.batch * p.heads_kv;
  if (tiles + workers > INT32_MAX) return -1;
  constexpr int64_t kTailRounds = 4;
  const int last_key0 = (p.n_blocks - 1) * kBlockN;
  const bool falling = BwdTile::end_row<kBlockN>(0, f) == BwdTile::end_row<kBlockN>(last_key0, f) &&
                       BwdTile::per_head<kBlockM, kBlockN>(0, f) > BwdTile::per_head<kBlockM, kBlockN>(last_key0, f);
  const int64_t heads = static_cast<int64_t>(f.batch) * p.heads_kv;
  const int64_t tail_rows = static_cast<int64_t>(p.n_blocks) * f.group;  // a K/V head's tiles, times its queries
  const int64_t tail_heads =
      std::min<int64_t>(heads, (kTailRounds * std::min(tiles, workers) + tail_rows - 1) / tail_rows);
  p.tail_heads = ordered_dq ? static_cast<int>(heads) : falling ? static_cast<int>(tail_heads) : 0;
  return tiles;
}

// A launch of `ctas` bwd_pair_kernel CTAs in clusters of two (along x); `cluster` holds the attribute the
// configuration points at.
template <typename Pair>
cudaLaunchConfig_t pair_launch_config(int64_t ctas, cudaStream_t stream, cudaLaunchAttribute& cluster) {
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas), 1, 1), config.blockDim = dim3(Pair::kThreads, 1, 1);
  config.dynamicSmemBytes = Pair::kSmemBytes, config.stream = stream;
  config.attrs = &cluster, config.numAttrs = 1;
  return config;
}

// How many clusters of two bwd_pair_kernel CTAs the device holds at once (0: none fit, or the device has no
// clusters). The occupancy answer is kept per device (the kernel is fixed by Pair): cudaOccupancyMaxActiveClusters
// is a much longer host call than a launch's. The shared-memory attribute is set on every call, as the other
// launchers do, so that a reset device still gets it.
template <typename Pair>
cudaError_t pair_clusters_fit(int* clusters) {
  *clusters = 0;
  auto kernel = bwd_pair_kernel<Pair>;
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Pair::kSmemBytes);
      err != cudaSuccess)
    return err;
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::map<int, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) {
    *clusters = it->second;
    return cudaSuccess;
  }
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = pair_launch_config<Pair>(2, nullptr, cluster);
  if (cudaOccupancyMaxActiveClusters(clusters, kernel, &config) != cudaSuccess) {
    *clusters = 0;
    (void)cudaGetLastError();  // not an error of the call: the other kernel runs instead
  }
  known.emplace(device, *clusters);
  return cudaSuccess;
}

// p.delta holds bwd_stats_floats() floats (D, then the LSE in log2 units, then the tile counter); p.dq_accum
// batch x heads_q x dq_accum_rows(seqlen_q, Traits::kDqOrder) x head_dim floats (the workspace has room for the
// fragment order's padded rows); p.dq_turns bwd_turns() ints in the deterministic mode, else nullptr; seqlen_q and
// seqlen_k are not 0 (cuda_backend.cpp runs the sm80 kernels then: there is nothing to load, and a TMA descriptor
// cannot have an extent of 0).
template <typename T, int kHeadDim>
cudaError_t launch_bwd(const BwdKernelParams& params, cudaStream_t stream) {
  using Element = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, cutlass::bfloat16_t, cutlass::half_t>;
  using Traits = BwdTraits<Element, kHeadDim>;
  BwdKernelParams p = params;
  const FwdKernelParams& f = p.fwd;
  if (p.delta == nullptr || p.dq_accum == nullptr || f.seqlen_q == 0 || f.seqlen_k == 0)
    return cudaErrorInvalidValue;  // see above
  const bool ordered_dq = p.dq_turns != nullptr;
  const int64_t padded_rows = static_cast<int64_t>(f.batch) * f.heads_q * bwd_padded_rows(f.seqlen_q);
  p.lse_log2 = p.delta + padded_rows;
  p.tile_counter = reinterpret_cast<int*>(p.lse_log2 + padded_rows);
  p.delta_head_stride = bwd_padded_rows(f.seqlen_q);
  int sms = 0;
  if (cudaError_t err = current_device_sms(&sms); err != cudaSuccess) return err;
  // D = 256 runs on pairs of CTAs (bwd_pair_kernel.cuh) where that kernel covers the call: no softcap, not the
  // deterministic mode, and a cluster of two of its CTAs fits on the device.
  using Pair = BwdPairTraits<Element>;
  int pair_clusters = 0;
  if constexpr (kHeadDim == Pair::kHeadDim) {
    if (!ordered_dq && !(f.softcap > 0)) {
      if (cudaError_t err = pair_clusters_fit<Pair>(&pair_clusters); err != cudaSuccess) return err;
    }
  }
  const bool pair = pair_clusters > 0;
  const int64_t tiles = pair ? schedule_bwd_tiles<Pair::kBlockM, Pair::kBlockN>(p, pair_clusters, false)
                             : schedule_bwd_tiles<Traits::kBlockM, Traits::kBlockN>(p, sms, ordered_dq);
  if (tiles < 0) return cudaErrorInvalidValue;
  // The persistent grid: a CTA per SM (one fits: Traits::kSmemBytes), or a pair per cluster the device holds, each
  // taking tiles until there are none.
  const int64_t ctas = pair ? 2 * std::min<int64_t>(tiles, pair_clusters) : std::min<int64_t>(tiles, sms);

  const int64_t dq_accum_floats =
      static_cast<int64_t>(f.batch) * f.heads_q * sm80::dq_accum_rows(f.seqlen_q, Traits::kDqOrder) * f.head_dim;
  const int64_t turns = ordered_dq ? bwd_turns(f.batch, f.heads_q, f.seqlen_q) : 0;
  using Rows = sm80::LaneRow<kHeadDim>;  // the prep kernel's threads
  bwd_prep_kernel<T, kHeadDim><<<Rows::blocks(padded_rows), sm80::kRowThreads, 0, stream>>>(p, dq_accum_floats, turns);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;

  // A TMA copy (op: a load of q, k, v or dO; a store of dk or dv) of a (seqlen, head dim, heads, batch) tensor in
  // tiles of `layout`.
  auto tma = [&](auto op, auto* ptr, int seqlen, int heads, const int64_t(&stride)[3], auto layout) {
    int64_t safe_stride[3];
    tma_safe_strides(stride, f.batch, seqlen, heads, safe_stride);
    return cute::make_tma_copy(op, Traits::rows_tensor(ptr, seqlen, f.head_dim, heads, f.batch, safe_stride), layout);
  };
  using Load = cute::SM90_TMA_LOAD;
  if constexpr (kHeadDim == Pair::kHeadDim) {
    if (pair) {
      const typename Pair::Params prm{
          tma(Load{}, f.q, f.seqlen_q, f.heads_q, f.q_stride, typename Pair::SmemLayoutRows{}),
          tma(Load{}, p.dout, f.seqlen_q, f.heads_q, p.dout_stride, typename Pair::SmemLayoutRows{}),
          tma(Load{}, f.k, f.seqlen_k, p.heads_kv, f.k_stride, typename Pair::SmemLayoutKeys{}),
          tma(Load{}, f.v, f.seqlen_k, p.heads_kv, f.v_stride, typename Pair::SmemLayoutKeys{}),
          tma(Load{}, f.k, f.seqlen_k, p.heads_kv, f.k_stride, typename Pair::SmemLayoutKHalf{}),
          tma(cute::SM90_TMA_STORE{}, p.dk, f.seqlen_k, p.heads_kv, p.dk_stride, typename Pair::SmemLayoutOut{}),
          tma(cute::SM90_TMA_STORE{}, p.dv, f.seqlen_k, p.heads_kv, p.dv_stride, typename Pair::SmemLayoutOut{}),
          p};
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t config = pair_launch_config<Pair>(ctas, stream, cluster);
      if (cudaError_t err = cudaLaunchKernelEx(&config, bwd_pair_kernel<Pair>, prm); err != cudaSuccess) return err;
      sm80::launch_bwd_dq_convert<T, kHeadDim, Traits::kDqOrder>(p, stream);
      return cudaGetLastError();
    }
  }
  // dk and dv leave by TMA from a consumer's staging box up to D = 128 and at D = 256 (bwd_kernel.cuh: TmaKvOut);
  // at D = 192 their descriptors are never read, so none is built.
  auto tma_out = [&](void* ptr, const int64_t(&stride)[3]) {
    if constexpr (Traits::kKvOutByTma)
      return tma(cute::SM90_TMA_STORE{}, ptr, f.seqlen_k, p.heads_kv, stride, typename Traits::SmemLayoutKvOut{});
    else
      return typename Traits::TmaKvOut{};
  };
  const typename Traits::Params prm{
      tma(Load{}, f.q, f.seqlen_q, f.heads_q, f.q_stride, typename Traits::SmemLayoutQ{}),
      tma(Load{}, p.dout, f.seqlen_q, f.heads_q, p.dout_stride, typename Traits::SmemLayoutQ{}),
      tma(Load{}, f.k, f.seqlen_k, p.heads_kv, f.k_stride, typename Traits::SmemLayoutK{}),
      tma(Load{}, f.v, f.seqlen_k, p.heads_kv, f.v_stride, typename Traits::SmemLayoutK{}),
      tma_out(p.dk, p.dk_stride),
      tma_out(p.dv, p.dv_stride),
      p};
  const bool softcap = f.softcap > 0;
  auto kernel = ordered_dq ? (softcap ? bwd_kernel<Traits, true, true> : bwd_kernel<Traits, false, true>)
                           : (softcap ? bwd_kernel<Traits, true, false> : bwd_kernel<Traits, false, false>);
  if (cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
      err != cudaSuccess)
    return err;
  kernel<<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSmemBytes, stream>>>(prm);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  sm80::launch_bwd_dq_convert<T, kHeadDim, Traits::kDqOrder>(p, stream);
  return cudaGetLastError();
}

}  // namespace flashtile::cuda::sm90
