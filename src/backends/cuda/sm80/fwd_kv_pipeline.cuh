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
//     Each warp also copies its own rows of Q, behind a barrier of its own, so that a persistent CTA
//     (kPersistent: one per SM, walking query blocks in turn) need not stop all its warps between blocks: the
//     ring runs on from one block's K/V tiles to the next's, whose first tile each thread starts loading as it
//     leaves this block's last (hand_over), before its epilogue.
// The kernel calls, for tile n of a block's walk n_first..n_last: before_scores, (Q K^T), after_scores,
// (softmax), before_pv, (P V), after_pv.
#pragma once

#include <cstdint>

#include "backends/cuda/sm80/fwd_tile.cuh"

namespace flashtile::cuda::sm80 {

// The ring's barriers, after the V buffers in shared memory (FwdTraits::kSmemBytes reserves kRingBarrierBytes).
struct KvRingBarriers {
  static constexpr int kMaxWarps = 8;
  uint64_t k_full[2], v_full[2];    // kThreads arrivals: each thread's cp.async share has landed
  uint64_t k_empty[2], v_empty[2];  // kThreads arrivals: each thread is done reading the buffer
  uint64_t q_full[kMaxWarps];       // 32 arrivals: each lane's share of its warp's rows of Q has landed
};
static_assert(sizeof(KvRingBarriers) <= kRingBarrierBytes, "fwd_config.hpp reserves the ring's barriers");

// A query block's K/V tiles [n_first, n_last] in its heads (none when n_first > n_last).
template <typename T>
struct KvWalk {
  const T* k_head;
  const T* v_head;
  int n_first, n_last;
  __device__ int tiles() const { return n_last - n_first + 1; }
};

template <typename Traits, typename T>
struct KvPipeline {
  static constexpr int kStages = Traits::kStages, kBlockN = Traits::kBlockN;
  static constexpr int kTileElems = kBlockN * Traits::kRowStride;
  static_assert(!Traits::kKvRing || Traits::kNWarps <= KvRingBarriers::kMaxWarps, "a Q barrier per warp");
  T* sK;  // [kStages] (kBlockN x kRowStride)
  T* sV;  // [kStages] (kBlockN x kRowStride)
  KvRingBarriers* ring;  // kKvRing only
  int64_t k_row_stride, v_row_stride;
  int seqlen_k, head_dim;
  KvWalk<T> cur{nullptr, nullptr, 0, -1};  // the block being computed
  int u0 = 0;       // ring: the CTA's K/V tiles before cur's first, since the ring runs on across blocks
  int q_loads = 0;  // ring: this warp's Q copies so far (q_full's phase)

  // Starts block c (its first tile's loads were issued by the prologue or by the previous block's hand_over).
  __device__ __forceinline__ void begin(const KvWalk<T>& c) {
    if constexpr (Traits::kKvRing) u0 += max(cur.tiles(), 0);
    cur = c;
  }

  // Tile n's place in the CTA's walk (behind CTA barriers each block starts afresh), its buffers, and the
  // parity of its use u of a ring barrier, (place / 2) & 1.
  __device__ __forceinline__ int place(int n) const { return u0 + n - cur.n_first; }
  __device__ __forceinline__ int stage(int n) const { return kStages == 2 ? place(n) & 1 : 0; }
  __device__ __forceinline__ int parity(int n) const { return (place(n) >> 1) & 1; }
  __device__ __forceinline__ const T* k_tile(int n) const { return sK + stage(n) * kTileElems; }
  __device__ __forceinline__ const T* v_tile(int n) const { return sV + stage(n) * kTileElems; }

  __device__ __forceinline__ void load_k(const KvWalk<T>& w, int n, int buffer) const {
    load_rows_async<Traits, kBlockN>(sK + buffer * kTileElems, w.k_head, k_row_stride, n * kBlockN, seqlen_k,
                                     head_dim);
  }
  __device__ __forceinline__ void load_v(const KvWalk<T>& w, int n, int buffer) const {
    load_rows_async<Traits, kBlockN>(sV + buffer * kTileElems, w.v_head, v_row_stride, n * kBlockN, seqlen_k,
                                     head_dim);
  }
  __device__ __forceinline__ void load_k(int n) const { load_k(cur, n, stage(n)); }
  __device__ __forceinline__ void load_v(int n) const { load_v(cur, n, stage(n)); }

  // Once per CTA, by every thread, before any load: the ring's barriers exist before anyone arrives on them.
  __device__ __forceinline__ static void init(KvRingBarriers* ring) {
    if constexpr (Traits::kKvRing) {
      if (threadIdx.x == 0) {
        for (int s = 0; s < 2; ++s) {
          mbarrier_init(&ring->k_full[s], Traits::kThreads), mbarrier_init(&ring->v_full[s], Traits::kThreads);
          mbarrier_init(&ring->k_empty[s], Traits::kThreads), mbarrier_init(&ring->v_empty[s], Traits::kThreads);
        }
        for (int w = 0; w < Traits::kNWarps; ++w) mbarrier_init(&ring->q_full[w], 32);
      }
      __syncthreads();
    }
  }

  // Ring: this warp's rows of Q (its kMSlices slices of 16) for the block at row0, copied by its own lanes into
  // the same rows of sQ, which no other warp reads. The warp's previous reads of those rows (the last block's
  // epilogue) must be behind a __syncwarp.
  __device__ __forceinline__ void load_q(T* sQ, const T* q_head, int64_t q_row_stride, int row0, int seqlen_q) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int s = 0; s < Traits::kMSlices; ++s) {
      const int r = slice_row<Traits>(s);
      load_rows_async_by<Traits, 16, 32>(lane, sQ + r * Traits::kRowStride, q_head, q_row_stride, row0 + r,
                                         seqlen_q, head_dim);
    }
    cp_async_arrive(&ring->q_full[threadIdx.x / 32]);
  }
  __device__ __forceinline__ void wait_q() {
    mbarrier_wait(&ring->q_full[threadIdx.x / 32], q_loads & 1);
    ++q_loads;
  }

  // Behind CTA barriers: the first tile's K (and, with two buffers, V), after the caller has issued Q's load, so
  // that Q lands with K. Ring, for the CTA's first block only (place 0): the first two tiles' K and V, so the
  // second tile's loads overlap the first's: with one CTA per SM nothing else hides the first round trips, and a
  // short block has few tiles to spread them over (docs/perf-log.md, v14: the prologue is bound by latency).
  __device__ __forceinline__ void prologue() const {
    load_k(cur.n_first);
    if constexpr (Traits::kKvRing) {
      cp_async_arrive(&ring->k_full[0]);
      load_v(cur.n_first);
      cp_async_arrive(&ring->v_full[0]);
      if (cur.n_first < cur.n_last) {
        load_k(cur.n_first + 1);
        cp_async_arrive(&ring->k_full[1]);
        load_v(cur.n_first + 1);
        cp_async_arrive(&ring->v_full[1]);
      }
    } else {
      cp_async_commit();
      if constexpr (kStages == 2) {
        load_v(cur.n_first);
        cp_async_commit();
      }
    }
  }

  // Ring, persistent: after this thread's last P V of the block, the next block's (nx) first K and V tile, at
  // place u = place(n_last) + 1, into the buffers of place u - 2, which every thread left a tile ago. Issued
  // here rather than from the loop's last tile, so the loop holds no second block's pointers (with them, the
  // compiler serialised the D = 192 row's MMAs: docs/perf-log.md, v16); the epilogue and the next Q copy cover
  // the round trip. The next block's second tile loads from its first, as inside a block.
  __device__ __forceinline__ void hand_over(const KvWalk<T>& nx) const {
    const int u = place(cur.n_last) + 1, buffer = u & 1;
    if (u >= 2) mbarrier_wait(&ring->k_empty[buffer], ((u - 2) >> 1) & 1);
    load_k(nx, nx.n_first, buffer);
    cp_async_arrive(&ring->k_full[buffer]);
    if (u >= 2) mbarrier_wait(&ring->v_empty[buffer], ((u - 2) >> 1) & 1);
    load_v(nx, nx.n_first, buffer);
    cp_async_arrive(&ring->v_full[buffer]);
  }

  // K(n) readable by this thread (behind CTA barriers Q too, which came with the first K; on the ring Q has
  // wait_q).
  __device__ __forceinline__ void before_scores(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_wait(&ring->k_full[stage(n)], parity(n));
    } else if constexpr (kStages == 2) {
      // Groups in flight on entry: [K(n), V(n)]. The other K buffer was last read by Q K^T of tile n - 1,
      // before the barrier of before_pv(n - 1).
      if (n < cur.n_last) load_k(n + 1);
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

  // This thread is done with K(n) (ring: release it, then refill the other buffer with K(n + 1) once every
  // thread has left it). Every thread arrives for its own reads: with one arrival per warp after a
  // __syncwarp, compute-sanitizer's racecheck reported the refill racing with the other lanes' reads
  // (docs/perf-log.md, v15).
  __device__ __forceinline__ void after_scores(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_arrive(&ring->k_empty[stage(n)]);  // release: this thread's reads of K(n) come first
      if (place(n) > 0 && n < cur.n_last) {  // (place 1 came with place 0)
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
      if (n < cur.n_last) load_v(n + 1);
      cp_async_commit();
      cp_async_wait<2>();
      __syncthreads();  // V(n) visible to every warp; every warp is done with K(n)
    } else {
      cp_async_wait<0>();
      __syncthreads();  // V(n) visible to every warp; every warp is done with K(n)
      if (n < cur.n_last) {
        load_k(n + 1);
        cp_async_commit();
      }
    }
  }

  // This thread is done with V(n).
  __device__ __forceinline__ void after_pv(int n) const {
    if constexpr (Traits::kKvRing) {
      mbarrier_arrive(&ring->v_empty[stage(n)]);
      if (place(n) > 0 && n < cur.n_last) {
        mbarrier_wait(&ring->v_empty[stage(n + 1)], parity(n - 1));
        load_v(n + 1);
        cp_async_arrive(&ring->v_full[stage(n + 1)]);
      }
    }
  }
};

}  // namespace flashtile::cuda::sm80
