// How the sm80 forward (fwd_kernel.cuh) brings K and V tiles into shared memory and hands them between its
// warps. Every thread copies a share of every tile (cp.async); the three schedules differ in where the loads are
// issued and in how a warp learns that a tile has landed and that a buffer may be overwritten:
//   one stage (kStages = 1): one K and one V buffer. K(n) and V(n) arrive behind CTA barriers (__syncthreads);
//     V(n) loads during Q K^T of tile n, K(n + 1) during P V of tile n.
//   two stages: two buffers each, still behind CTA barriers; K(n + 1) and V(n + 1) load during the whole of
//     tile n.
//   ring (kKvRing): two buffers each, handed over through mbarriers instead. A "full" barrier completes when every
//     thread's share of a tile has landed, an "empty" one when every thread has finished reading its buffer, so a
//     warp waits only for the data it reads and for the slowest warp to leave the buffer it refills: warps may
//     drift up to a tile apart instead of meeting twice a tile. That is what a CTA of eight warps alone on its
//     SM needs (at D = 256 one CTA of 128 rows halves the K/V bytes per FLOP against two CTAs of 64; behind CTA
//     barriers it lost ~10% per clock: docs/perf-log.md, v10). K(n + 1) loads during the softmax and P V of
//     tile n, V(n + 1) during Q K^T and the softmax of tile n + 1; the first two tiles' K and V load at once.
// The kernel calls, for tile n of its walk n_first..n_last: before_scores, (Q K^T), after_scores, (softmax),
// before_pv, (P V), after_pv.
#pragma once

#include <cstdint>

#include "backends/cuda/sm80/fwd_tile.cuh"

namespace flashtile::cuda::sm80 {

// The ring's barriers, after the V buffers in shared memory (FwdTraits::kSmemBytes counts them).
struct KvRingBarriers {
  uint64_t k_full[2], v_full[2];    // kThreads arrivals: each thread's cp.async share has landed
  uint64_t k_empty[2], v_empty[2];  // kThreads arrivals: each thread is done reading the buffer
};

template <typename Traits, typename T>
struct KvPipeline {
  static constexpr int kStages = Traits::kStages, kBlockN = Traits::kBlockN;
  static constexpr int kTileElems = kBlockN * Traits::kRowStride;
  T* sK;  // [kStages] (kBlockN x kRowStride)
  T* sV;  // [kStages] (kBlockN x kRowStride)
  KvRingBarriers* ring;  // kKvRing only
  const T* k_head;
  const T* v_head;
  int64_t k_row_stride, v_row_stride;
  int seqlen_k, head_dim, n_first, n_last;

  // Tile n's buffers.
  __device__ __forceinline__ int stage(int n) const { return kStages == 2 ? (n - n_first) & 1 : 0; }
  __device__ __forceinline__ const T* k_tile(int n) const { return sK + stage(n) * kTileElems; }
  __device__ __forceinline__ const T* v_tile(int n) const { return sV + stage(n) * kTileElems; }

  __device__ __forceinline__ void load_k(int n) const {
    load_rows_async<Traits, kBlockN>(sK + stage(n) * kTileElems, k_head, k_row_stride, n * kBlockN, seqlen_k,
                                     head_dim);
  }
  __device__ __forceinline__ void load_v(int n) const {
    load_rows_async<Traits, kBlockN>(sV + stage(n) * kTileElems, v_head, v_row_stride, n * kBlockN, seqlen_k,
                                     head_dim);
  }
  // Use u of a ring barrier (tile n's is (n - n_first) / 2) waits with parity u & 1.
  __device__ __forceinline__ int parity(int n) const { return ((n - n_first) >> 1) & 1; }

  // Once per CTA, by every thread, before any load: the ring's barriers exist before anyone arrives on them.
  __device__ __forceinline__ static void init(KvRingBarriers* ring) {
    if constexpr (Traits::kKvRing) {
      if (threadIdx.x == 0)
        for (int s = 0; s < 2; ++s) {
          mbarrier_init(&ring->k_full[s], Traits::kThreads), mbarrier_init(&ring->v_full[s], Traits::kThreads);
          mbarrier_init(&ring->k_empty[s], Traits::kThreads), mbarrier_init(&ring->v_empty[s], Traits::kThreads);
        }
      __syncthreads();
    }
  }

  // The first tile's K (and, with two buffers, V), after the caller has issued Q's load: Q lands with K. The ring
  // also fills its second buffers, so the second tile's loads overlap the first's: with one CTA per SM nothing
  // else hides the first round trips, and a short block has few tiles to spread them over (docs/perf-log.md,
  // v14: the prologue is bound by latency).
  __device__ __forceinline__ void prologue() const {
    load_k(n_first);
    if constexpr (Traits::kKvRing) {
      cp_async_arrive(&ring->k_full[0]);  // tracks every earlier copy of this thread, Q's too
      load_v(n_first);
      cp_async_arrive(&ring->v_full[0]);
      if (n_first < n_last) {
        load_k(n_first + 1);
        cp_async_arrive(&ring->k_full[1]);
        load_v(n_first + 1);
        cp_async_arrive(&ring->v_full[1]);
      }
    } else {
      cp_async_commit();
      if constexpr (kStages == 2) {
        load_v(n_first);
        cp_async_commit();
      }
    }
  }

  // K(n) (and Q) readable by this thread.
  __device__ __forceinline__ void before_scores(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_wait(&ring->k_full[stage(n)], parity(n));
    } else if constexpr (kStages == 2) {
      // Groups in flight on entry: [K(n), V(n)]. The other K buffer was last read by Q K^T of tile n - 1,
      // before the barrier of before_pv(n - 1).
      if (n < n_last) load_k(n + 1);
      cp_async_commit();  // possibly empty: keeps the group count the wait relies on
      cp_async_wait<2>();
      __syncthreads();  // K(n) visible to every warp; every warp is done with the V buffer it reuses
    } else {
      cp_async_wait<0>();
      __syncthreads();  // K(n) visible to every warp; every warp is done with V(n - 1)
      load_v(n);
      cp_async_commit();
    }
  }

  // This thread is done with K(n) (ring: release it, then refill the other buffer once every thread has left it).
  // Every thread arrives for its own reads: with one arrival per warp after a __syncwarp, compute-sanitizer's
  // racecheck reported the refill racing with the other lanes' reads (docs/perf-log.md, v15).
  __device__ __forceinline__ void after_scores(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_arrive(&ring->k_empty[stage(n)]);  // release: this thread's reads of K(n) come first
      if (n > n_first && n < n_last) {  // (the second tile's K came with the first's)
        mbarrier_wait(&ring->k_empty[stage(n + 1)], parity(n - 1));
        load_k(n + 1);
        cp_async_arrive(&ring->k_full[stage(n + 1)]);
      }
    }
  }

  // V(n) readable by this thread.
  __device__ __forceinline__ void before_pv(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_wait(&ring->v_full[stage(n)], parity(n));
    } else if constexpr (kStages == 2) {
      // The other V buffer was last read by P V of tile n - 1, before the barrier of before_scores(n).
      if (n < n_last) load_v(n + 1);
      cp_async_commit();
      cp_async_wait<2>();
      __syncthreads();  // V(n) visible to every warp; every warp is done with K(n)
    } else {
      cp_async_wait<0>();
      __syncthreads();  // V(n) visible to every warp; every warp is done with K(n)
      if (n < n_last) {
        load_k(n + 1);
        cp_async_commit();
      }
    }
  }

  // This thread is done with V(n).
  __device__ __forceinline__ void after_pv(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_arrive(&ring->v_empty[stage(n)]);
      if (n > n_first && n < n_last) {
        mbarrier_wait(&ring->v_empty[stage(n + 1)], parity(n - 1));
        load_v(n + 1);
        cp_async_arrive(&ring->v_full[stage(n + 1)]);
      }
    }
  }
};

}  // namespace flashtile::cuda::sm80
