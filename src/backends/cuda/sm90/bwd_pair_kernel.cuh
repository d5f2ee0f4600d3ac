// The sm90 backward at head dim 256 on clusters of two CTAs (bwd_pair_kernel), which split the five tile products
// by product rather than by keys. At D = 256 a CTA's registers hold dK and dV for 64 keys only, so bwd_kernel's
// tiles are 64 keys wide, and per 64 x 64 (queries x keys) block each CTA reads 64 KB of Q and dO from L2 and adds
// 64 KB of dQ into it: the L2 bounds that kernel (docs/perf-log.md, sm90 backward: the diagnostics of session 47
// and 48; without the dQ additions it ran 1.37x faster, with half of them 1.23x). Here a pair of CTAs takes a
// tile of 128 keys, and each holds one of dK and dV for all 128 (64 keys a consumer warpgroup, 128 floats a
// thread), so each query block's Q and dO are read once per 128 keys, not twice, and dQ is added once per 128
// keys, half of it by each CTA:
//   the scores CTA (rank 0) holds K (128 keys x 256) and a ring of four Q stages, and per step
//     S^T_w = K_w Q^T, P^T_w = exp2(S^T_w * scale - LSE)   (64 keys x 64 queries, consumer w's keys; masked)
//     P^T_w -> the gradient CTA's p_x (in T, by st.async in the accumulator's fragment order; two buffers)
//     dK_w += dS^T_w Q                                      (64 keys x 256; dS^T from the gradient CTA)
//     dQ[:, 64 w : 64 w + 64] += dS K[:, 64 w : 64 w + 64]  (64 queries x 64 columns over all 128 keys)
//   the gradient CTA (rank 1) holds V (128 keys x 256), K's columns 128 .. 255 and a ring of two dO stages:
//     dP^T_w = V_w dO^T                                     (64 keys x 64 queries)
//     dV_w += P^T_w dO                                      (P^T from registers; issued behind dP^T)
//     dS^T_w = P^T_w (dP^T_w - D)  -> its shared memory, and by a bulk copy into the scores CTA's
//     dQ[:, 128 + 64 w : 192 + 64 w] += dS K[:, 128 + 64 w : 192 + 64 w]
// Both CTAs do 2.5 products of 64 x 128 x 256 a step. The scores CTA runs S^T and P^T two steps ahead (those of
// step j + 2 are issued before dK and dQ of step j, which wait for step j's dS^T), so that the exchange's round
// trip (P^T out, dS^T back) runs under products; hence its four Q stages. The scores CTA's producer takes the
// pair's tiles from the counter (bwd_kernel's schedule, 128 keys wide) and publishes each to both CTAs; each CTA
// has its own producer and ring over the same steps (BwdTile).
// The pair's signals between CTAs hand buffers back or say that bytes have landed; every arrival and wait is at
// CTA scope (arrive_peer, wait_peer: at cluster scope each hand-back waited behind the dQ reductions in flight).
// Shared memory (both CTAs, one layout, so that a CTA addresses the other's buffers at its own offsets): keys
// 64 KB, side 32 KB (the gradient CTA's half of K; the scores CTA's two dS^T slots), two ring stages 64 KB, p_x
// 32 KB (the scores CTA's third Q stage), ds 32 KB (the gradient CTA's two dS^T slots; the scores CTA's fourth Q
// stage): 224 KB with the barriers.
// Not here: the softcap (dS needs the capped scores, which the scores CTA holds) and the deterministic mode; both
// run bwd_kernel (bwd_launch.cuh).
#pragma once

#include <cute/arch/cluster_sm90.hpp>

#include "backends/cuda/sm90/bwd_kernel.cuh"

namespace flashtile::cuda::sm90 {

template <typename T>
struct BwdPairTraits {
  using Element = T;
  static constexpr int kHeadDim = 256, kBlockM = 64, kBlockN = 128;  // a step's queries, a pair tile's keys
  static constexpr int kConsumers = 2, kThreads = 128 * (kConsumers + 1);
  static constexpr int kScoresStages = 4, kGradStages = 2;  // the rings of Q (scores CTA) and dO (gradient CTA)
  using M = cute::Int<kBlockM>;
  using N = cute::Int<kBlockN>;
  using D = cute::Int<kHeadDim>;
  using HalfN = cute::Int<kBlockN / 2>;  // a consumer's keys
  using HalfD = cute::Int<kHeadDim / 2>;  // a CTA's columns of dQ
  using DqCols = cute::Int<64>;           // a consumer's columns of dQ
  using RowAtom = cute::GMMA::Layout_K_SW128_Atom<T>;
  using SmemLayoutRows = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<M, D>{}));       // Q, dO (queries, dim)
  using SmemLayoutKeys = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<N, D>{}));       // K, V (keys, dim)
  using SmemLayoutKHalf = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<N, HalfD>{}));  // K[:, 128:256]
  using SmemLayoutDs = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<N, M>{}));         // dS^T (keys, queries)
  using SmemLayoutOut = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<HalfN, D>{}));    // dK_w, dV_w staged
  // Transposed views (MN-major, as the products that read them need): Q^T, dO^T (dim, queries); K^T (dim, keys);
  // dS (queries, keys).
  template <class Layout, class Shape>
  using Transposed = decltype(cute::composition(
      Layout{}, cute::make_ordered_layout(Shape{}, cute::Step<cute::_2, cute::_1>{})));
  using SmemLayoutRowsT = Transposed<SmemLayoutRows, cute::Shape<D, M>>;
  using SmemLayoutKeysT = Transposed<SmemLayoutKeys, cute::Shape<D, N>>;
  using SmemLayoutKHalfT = Transposed<SmemLayoutKHalf, cute::Shape<HalfD, N>>;
  using SmemLayoutDsQK = Transposed<SmemLayoutDs, cute::Shape<M, N>>;

  // S^T_w, dP^T_w: (64 keys, 64 queries) over the 256 dims.
  using MmaScores =
      decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, M, D>>()));
  // dK_w += dS^T_w Q (dS^T from shared memory), dV_w += P^T_w dO (P^T from registers): (64 keys, 256) over the
  // step's 64 queries.
  using MmaDk = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, D, M>,
                                                                         cute::GMMA::Major::K, cute::GMMA::Major::MN>()));
  using MmaDv = decltype(cute::make_tiled_mma(cute::GMMA::rs_op_selector<T, T, float, cute::Shape<cute::_64, D, M>,
                                                                         cute::GMMA::Major::K, cute::GMMA::Major::MN>()));
  // A consumer's dQ box: (64 queries, 64 columns) over the pair's 128 keys.
  using MmaDq = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, DqCols, N>,
                                                                         cute::GMMA::Major::MN, cute::GMMA::Major::MN>()));

  static constexpr int kRowElems = cute::cosize_v<SmemLayoutRows>, kDsElems = cute::cosize_v<SmemLayoutDs>;
  struct SharedStorage {
    alignas(1024) T keys[cute::cosize_v<SmemLayoutKeys>];  // K or V; at a tile's end dV staged (SmemLayoutOut;
                                                           // dK too where the tile had no step)
    alignas(1024) T side[cute::cosize_v<SmemLayoutKHalf>];  // the gradient CTA's K[:, 128:256]; the scores CTA's
                                                            // two dS^T slots (from the gradient CTA), and at a
                                                            // tile's end its consumer 0's dK staged
    alignas(1024) T rows[2 * kRowElems];                    // ring stages 0 and 1 (Q or dO)
    // The scores CTA's P^T for the gradient CTA, in T: consumer w's elements 8 q .. 8 q + 7 of thread t as 16 bytes
    // at [w][q][t] (the first half of p_x[w]); in the scores CTA, its third Q stage.
    alignas(1024) float p_x[kConsumers][8][128][4];
    alignas(1024) T ds[2 * kDsElems];  // the gradient CTA's dS^T, two slots (a step's is copied out from there);
                                       // in the scores CTA, its fourth Q stage
    alignas(16) float stats[kScoresStages][kBlockM];  // per stage: the LSE in log2 units (scores) or D (gradient)
    uint64_t kv_full, kv_empty, full[kScoresStages], empty[kScoresStages];
    uint64_t p_full[kConsumers][2];   // gradient CTA: consumer w's P^T has landed in buffer b of p_x[w]
    uint64_t p_empty[kConsumers][2];  // scores CTA: the gradient CTA's consumer w has read buffer b
    uint64_t ds_full[2];           // scores CTA: a dS^T slot has landed
    uint64_t ds_empty[2];          // gradient CTA: the scores CTA's products are done with a slot
    // The pair's tiles, claimed by the scores CTA's producer and published in two slots of both CTAs: tile_full
    // when a slot holds the next one; the scores CTA's tile_empty when every reader of both CTAs has read it.
    uint64_t tile_full[2], tile_empty[2];
    int tile[2];
  };
  static_assert(sizeof(float) * kConsumers * 8 * 128 * 4 == sizeof(T) * kRowElems, "p_x holds a ring stage");
  static_assert(2 * kDsElems == kRowElems, "ds holds a ring stage");
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "an sm90 block has at most 227 KB of shared memory");
  static constexpr uint32_t kStepBytes = kBlockM * kHeadDim * sizeof(T) + kBlockM * sizeof(float);
  static constexpr uint32_t kPBytes = 4 * 128 * 16;  // a consumer's P^T in T: 4 x 16 bytes a thread
  static constexpr uint32_t kDsBytes = kDsElems * sizeof(T);

  using TmaRows = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{}, BwdTraits<T, kHeadDim>::template rows_tensor<const void>(nullptr, 1, 1, 1, 1, nullptr),
      SmemLayoutRows{}));
  using TmaKeys = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{}, BwdTraits<T, kHeadDim>::template rows_tensor<const void>(nullptr, 1, 1, 1, 1, nullptr),
      SmemLayoutKeys{}));
  using TmaKHalf = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{}, BwdTraits<T, kHeadDim>::template rows_tensor<const void>(nullptr, 1, 1, 1, 1, nullptr),
      SmemLayoutKHalf{}));
  using TmaOut = decltype(cute::make_tma_copy(
      cute::SM90_TMA_STORE{}, BwdTraits<T, kHeadDim>::template rows_tensor<void>(nullptr, 1, 1, 1, 1, nullptr),
      SmemLayoutOut{}));
  struct Params {
    TmaRows tma_q, tma_do;
    TmaKeys tma_k, tma_v;
    TmaKHalf tma_k_half;
    TmaOut tma_dk, tma_dv;
    BwdKernelParams p;
  };
};

// The other CTA's address of a shared-memory object at the same offset (mapa), and what goes through it.
__device__ __forceinline__ uint32_t peer_address(const void* local, uint32_t peer) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(sm80::smem_address(local)), "r"(peer));
  return r;
}
// Arrivals on the peer's mbarriers release at CTA scope (PTX's default), as CUTLASS's cluster pipelines signal
// their remote "empty" barriers. At cluster scope ptxas emits MEMBAR.ALL.GPU before each one, which waits for every
// reduction of dQ the thread still has in flight to the L2 (ERRBAR: 12% of pairf's stall samples, session 50). No
// data crosses under these arrivals: P^T and dS^T go by st.async and the bulk copy, which complete the peer's
// transaction count themselves; the arrivals hand a buffer back once this CTA has read it: its wgmma waited for,
// or the registers loaded from it read by a wgmma (P^T), or, for a tile's number, a tile before it is rewritten.
__device__ __forceinline__ void arrive_peer(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void arrive_expect_tx_peer(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// 16 bytes into the peer's shared memory, completing 16 bytes of its mbarrier's transaction count.
__device__ __forceinline__ void st_async_peer(uint32_t dst, uint4 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   dst),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async_peer(uint32_t dst, int v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(dst), "r"(v), "r"(bar)
               : "memory");
}
// A bulk copy from this CTA's shared memory into the peer's, completing on the peer's mbarrier.
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   dst),
               "r"(sm80::smem_address(src)), "r"(bytes), "r"(bar)
               : "memory");
}
// Waits for the phase of parity `parity` of a local mbarrier that the peer arrives on (or its st.async and bulk
// copies complete), acquiring at CTA scope, like the TMA loads' waits: at cluster scope ptxas invalidates the L1
// (CCTL.IVALL) after every wait.
__device__ __forceinline__ void wait_peer(uint64_t* bar, int parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_PEER:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_PEER;\n"
      "}\n" ::"r"(sm80::smem_address(bar)),
      "r"(parity)
      : "memory");
}

// The k-th tile of the pair as the scores CTA's producer published it (tiles >= the count mean none is left), read
// by a warp (one lane, `reports`, arrives for it) or the gradient CTA's producer thread.
template <typename Traits>
__device__ __forceinline__ int pair_read_tile(typename Traits::SharedStorage& smem, int k, bool scores, bool reports) {
  cutlass::arch::ClusterTransactionBarrier::wait(&smem.tile_full[k % 2], (k / 2) % 2);
  const int tile = ld_shared_int(&smem.tile[k % 2]);
  __syncwarp(__activemask());
  if (reports) {
    if (scores)
      cutlass::arch::ClusterBarrier::arrive(&smem.tile_empty[k % 2]);
    else
      arrive_peer(peer_address(&smem.tile_empty[k % 2], 0));
  }
  return tile;
}

// Ring stage s of a pair's CTA: stages 0 and 1 in rows; the scores CTA's third in p_x and its fourth in ds.
template <typename Traits>
__device__ __forceinline__ typename Traits::Element* pair_stage_rows(typename Traits::SharedStorage& smem, int s) {
  return s < 2 ? smem.rows + s * Traits::kRowElems
               : s == 2 ? reinterpret_cast<typename Traits::Element*>(smem.p_x) : smem.ds;
}

// One consumer warpgroup of a pair's CTA: what the two roles share, and each role's loop over the CTA's tiles.
// ptxas serializes every wgmma of a kernel (C7514, C7517, C7518) where it cannot follow a wgmma from its issue to
// its wait, so: the roles are a template parameter of bwd_pair_cta (the kernel branches once, on its rank), a
// tile's last step is a loop iteration of its own instead of a runtime test around the next step's products, and
// nothing is in flight where a role's tile loop ends. (Out of line instead, as functions, the wgmmas were
// serialized at the calls: C7510.)
template <typename Traits, bool kScores>
struct PairConsumer {
  using T = typename Traits::Element;
  using M = typename Traits::M;
  using N = typename Traits::N;
  using D = typename Traits::D;
  using HalfN = typename Traits::HalfN;
  using DqCols = typename Traits::DqCols;
  using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  static constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  static constexpr int kKvBarrier = 3, kDsBarrier = 4;  // named barriers of both consumers (1 + w: consumer w's own)

  const typename Traits::Params& prm;
  typename Traits::SharedStorage& smem;
  int w;         // this consumer's keys: the tile's w-th 64
  int tid;       // within the warpgroup
  static constexpr int stages = kScores ? Traits::kScoresStages : Traits::kGradStages;  // of this CTA's ring
  int tiles;  // the pair's tile count (a published tile >= it: none left)
  uint32_t peer;  // the other CTA's rank

  __device__ T* stage_rows(int s) const { return pair_stage_rows<Traits>(smem, s); }
  __device__ int read_tile(int k) const { return pair_read_tile<Traits>(smem, k, peer == 1, tid % 32 == 0); }
  __device__ void full_stage(int step) const {
    FullBarrier::wait(&smem.full[step % stages], (step / stages) % 2);
  }
  // Element e of a score accumulator (S^T_w or dP^T_w: 64 keys x 64 queries) is key get<0>(c(e)) of the
  // consumer's and query get<1>(c(e)) of the step's, c = score_coords(); a thread holds keys r and r + 8
  // ((e / 2) % 2 says which) and queries 2t, 2t + 1 (e % 2) of each 8-query block.
  __device__ auto score_coords() const {
    typename Traits::MmaScores mma;
    return mma.get_thread_slice(tid).partition_C(cute::make_identity_tensor(cute::Shape<HalfN, M>{}));
  }
  __device__ int query_of(int e) const { return static_cast<int>(cute::get<1>(score_coords()(e))); }
  static constexpr int kScoreFloats = 32;  // a thread's elements of a 64 x 64 score accumulator: 8 float4s of p_x

  // This consumer's dQ box: 64 rows of the step from row0, 64 columns from col0, by 16-byte reductions into the
  // fragment order (a warp's 16-row band, each thread's four floats of an 8-column block contiguous: the
  // accumulator's registers as they are; bwd_kernel's reductions). A band past the sequence's end, or a block past
  // the head dim, is skipped by predicate: the gradient CTA reduces while a wgmma is in flight.
  template <class Acc>
  __device__ void reduce_dq(const Acc& acc, int b, int h, int row0, int col0) const {
    const FwdKernelParams& f = prm.p.fwd;
    const int band0 = row0 + 16 * (tid / 32);
    const bool band_real = band0 < f.seqlen_q;
    const size_t band = __cvta_generic_to_global(
        prm.p.dq_accum +
        (static_cast<int64_t>(b) * f.heads_q + h) * sm80::dq_accum_fragment_rows(f.seqlen_q) * f.head_dim +
        static_cast<int64_t>(band0) * f.head_dim + col0 * 16 + (tid % 32) * 4);
    CUTE_UNROLL
    for (int block = 0; block < DqCols::value / 8; ++block)
      sm80::red_add_global_if(band + block * 128 * sizeof(float),
                              make_float4(acc[4 * block], acc[4 * block + 1], acc[4 * block + 2], acc[4 * block + 3]),
                              band_real && col0 + 8 * block < f.head_dim);
  }

  // At a tile's end, once this consumer's last products are done: both consumers meet, so that neither stages
  // into what the other's products still read (the keys, the dS^T slots, the last stage); where the tile stages
  // outside the keys buffer (`keys_free`), that buffer is released now, so that the next tile's keys load while
  // this tile's stores go out.
  __device__ void end_products(bool keys_free) const {
    named_sync(kKvBarrier, 2 * 128);
    if (keys_free) EmptyBarrier::arrive(&smem.kv_empty);
  }
  __device__ T* keys_box() const { return smem.keys + w * cute::cosize_v<typename Traits::SmemLayoutOut>; }
  // Then this consumer's dK or dV (64 keys x 256, times `scale`) staged at `box` (a SmemLayoutOut: box w of the
  // keys buffer, or a buffer outside it) and stored to global memory by TMA. Once the store has read the box, the
  // keys buffer is released if the box is in it, and `stage_empty` (a ring stage staged in, or null).
  template <class Mma, class Acc, class Tma>
  __device__ void store_keys(Mma& mma, Acc& acc, float scale, const Tma& tma, const BwdTile& t, T* box,
                             uint64_t* stage_empty) const {
    using namespace cute;
    const FwdKernelParams& f = prm.p.fwd;
    auto sOut = make_tensor(make_smem_ptr(box), typename Traits::SmemLayoutOut{});
    auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, T>{}, mma);
    auto thr_stsm = stsm.get_thread_slice(tid);
    auto r = make_tensor_like<T>(acc);
    CUTE_UNROLL
    for (int e = 0; e < size(acc); ++e) r(e) = T(acc(e) * scale);
    copy(stsm, thr_stsm.retile_S(r), thr_stsm.partition_D(sOut));
    cutlass::arch::fence_view_async_shared();  // the generic-proxy writes above, visible to the TMA unit
    named_sync(1 + w, 128);
    if (tid == 0) {
      const auto kv_shape = make_shape(f.seqlen_k, f.head_dim, prm.p.heads_kv, f.batch);
      auto g = local_tile(tma.get_tma_tensor(kv_shape)(_, _, t.hk, t.b), Shape<HalfN, D>{},
                          make_coord(2 * t.n_block + w, 0));
      auto [tg, ts] = tma_partition(tma, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sOut), group_modes<0, 2>(g));
      copy(tma, ts, tg);
      tma_store_arrive();
      tma_store_wait<0>();
    }
    named_sync(1 + w, 128);
    if (box == keys_box()) EmptyBarrier::arrive(&smem.kv_empty);
    if (stage_empty != nullptr) EmptyBarrier::arrive(stage_empty);
  }

  // The scores CTA (rank 0): per step j, S^T_w and P^T_w of step j + 1 (issued first, so that they run while step
  // j's dS^T is on its way), then dQ and dK of step j. A tile's last step has no next one: it is a loop iteration
  // of its own (kAhead false), so that every wgmma is issued and waited for on paths ptxas can follow (behind a
  // runtime condition it serialized them all: C7514).
  __device__ __forceinline__ void run_scores() {
    using namespace cute;
    const BwdKernelParams& p = prm.p;
    const FwdKernelParams& f = p.fwd;
    auto tScS = score_coords();
    typename Traits::MmaScores mma_s;
    typename Traits::MmaDq mma_dq;
    typename Traits::MmaDk mma_dk;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_dq = mma_dq.get_thread_slice(tid);
    auto thr_dk = mma_dk.get_thread_slice(tid);
    auto sK = make_tensor(make_smem_ptr(smem.keys), typename Traits::SmemLayoutKeys{});
    auto sK_w = local_tile(sK, Shape<HalfN, D>{}, make_coord(w, 0));
    auto sKt = make_tensor(make_smem_ptr(smem.keys), typename Traits::SmemLayoutKeysT{});
    auto sKt_w = local_tile(sKt, Shape<DqCols, N>{}, make_coord(w, 0));  // dQ's columns 64 w .. 64 w + 63
    auto tKrdK = partition_fragment_C(mma_dk, Shape<HalfN, D>{});
    const uint32_t p_dst = peer_address(&smem.p_x[w][0][tid][0], peer);
    const uint32_t p_full_peer = peer_address(&smem.p_full[w][0], peer);  // buffer 1's follows (uint64_t)
    const uint32_t ds_empty_peer = peer_address(&smem.ds_empty[0], peer);  // slot 1's follows (uint64_t)
    auto ds_slot = [&](int slot) { return smem.side + slot * Traits::kDsElems; };
    // S^T of step j (its stage's Q), issued.
    auto issue_scores = [&](int j, auto& acc) {
      full_stage(j);
      auto sQ = make_tensor(make_smem_ptr(stage_rows(j % stages)), typename Traits::SmemLayoutRows{});
      issue_mma(mma_s, thr_s.partition_fragment_A(sK_w), thr_s.partition_fragment_B(sQ), acc, false);
    };
    // Once S^T of step j (rows from row0) is complete: P^T (masked where the block's keys and queries are not all
    // visible to each other), into the gradient CTA's p_x once it has read step j - 1's.
    auto send_probs = [&](int j, int row0, int key_w0, auto& acc) {
      const int s = j % stages;
      const int last_query = min(row0 + kBlockM, f.seqlen_q) - 1;
      const bool full_tile = last_query + f.key_offset - f.window_left <= key_w0 &&
                             row0 + f.key_offset + f.window_right >= key_w0 + 63 && key_w0 + 64 <= f.seqlen_k;
      auto probs = [&](auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
        QueriesSeeingKey seen[2];
        if (kMasked) {
          CUTE_UNROLL
          for (int half = 0; half < 2; ++half)
            seen[half] = QueriesSeeingKey(f, key_w0 + static_cast<int>(get<0>(tScS(2 * half))), row0 + query_of(0));
        }
        CUTE_UNROLL
        for (int pair = 0; pair < kScoreFloats / 4; ++pair) {
          const float2 lse2 = ld_shared_pair(&smem.stats[s][query_of(4 * pair)]);
          CUTE_UNROLL
          for (int e = 4 * pair; e < 4 * pair + 4; ++e) {
            float x = acc(e);
            if (kMasked) x = seen[(e / 2) % 2].sees(query_of(e) - query_of(0)) ? x : -INFINITY;
            acc(e) = exp2_approx(fmaf(x, f.scale_log2, -(e % 2 ? lse2.y : lse2.x)));
          }
        }
      };
      if (full_tile)
        probs(std::false_type{});
      else
        probs(std::true_type{});
      const int b = j % 2;  // P^T of step j goes into buffer j % 2, free once step j - 2's was read
      if (j >= 2) wait_peer(&smem.p_empty[w][b], (j / 2 - 1) % 2);
      using CudaT = typename BwdTraits<T, Traits::kHeadDim>::CudaT;
      auto pk = [&](int e) { return sm80::pack2<CudaT>(acc(e), acc(e + 1)); };
      CUTE_UNROLL
      for (int q = 0; q < kScoreFloats / 8; ++q)
        st_async_peer(p_dst + b * Traits::kPBytes + q * 128 * 16,
                      make_uint4(pk(8 * q), pk(8 * q + 2), pk(8 * q + 4), pk(8 * q + 6)),
                      p_full_peer + b * sizeof(uint64_t));
    };
    // Step j's dQ and dK (rows from row0 of head h), and with kAhead S^T and P^T of step j + 2 (rows from
    // ahead_row0) first. keep_stage: the step's Q stage is not released here (the tile's last step, where consumer
    // 1 stages its dK in it: store_keys releases it).
    auto grads_step = [&](const BwdTile& t, int j, int h, int row0, int ahead_row0, int key_w0, bool keep_stage,
                          auto ahead) {
      constexpr bool kAhead = decltype(ahead)::value;
      auto tSrS = partition_fragment_C(mma_s, Shape<HalfN, M>{});
      if constexpr (kAhead) issue_scores(j + 2, tSrS);
      const int slot = j % 2;
      FullBarrier::wait(&smem.ds_full[slot], (j / 2) % 2);  // step j's dS^T, from the gradient CTA
      auto sDs = make_tensor(make_smem_ptr(ds_slot(slot)), typename Traits::SmemLayoutDs{});
      auto sDsQK = make_tensor(make_smem_ptr(ds_slot(slot)), typename Traits::SmemLayoutDsQK{});
      auto sQt = make_tensor(make_smem_ptr(stage_rows(j % stages)), typename Traits::SmemLayoutRowsT{});
      auto tQrdQ = partition_fragment_C(mma_dq, Shape<M, DqCols>{});
      issue_mma(mma_dq, thr_dq.partition_fragment_A(sDsQK), thr_dq.partition_fragment_B(sKt_w), tQrdQ, false);
      issue_mma(mma_dk, thr_dk.partition_fragment_A(local_tile(sDs, Shape<HalfN, M>{}, make_coord(w, 0))),
                thr_dk.partition_fragment_B(sQt), tKrdK, true);
      if constexpr (kAhead) {
        warpgroup_wait<2>();  // S^T of step j + 2 (committed first)
        warpgroup_fence_operand(tSrS);
        send_probs(j + 2, ahead_row0, key_w0, tSrS);
      }
      warpgroup_wait<1>();  // dQ
      warpgroup_fence_operand(tQrdQ);
      reduce_dq(tQrdQ, t.b, h, row0, 64 * w);
      warpgroup_wait<0>();  // dK: this step's Q stage and dS^T slot are read
      warpgroup_fence_operand(tKrdK);
      if (!keep_stage) EmptyBarrier::arrive(&smem.empty[j % stages]);
      __syncwarp();
      if (tid % 32 == 0) arrive_peer(ds_empty_peer + slot * sizeof(uint64_t));
    };

    int step = 0;  // the CTA's steps over all its tiles (the ring and the exchange's barriers run on across tiles)
    for (int k = 0;; ++k) {
      const int tile = read_tile(k);
      if (tile >= tiles) break;
      const BwdTile t = BwdTile::at<kBlockM, kBlockN, true>(tile, p);
      const int key_w0 = t.key0 + 64 * w;
      clear(tKrdK);
      FullBarrier::wait(&smem.kv_full, k % 2);
      int h = t.hk * f.group, row0 = t.row_start;
      if (t.steps > 0) {
        // S^T and P^T run two steps ahead of dK and dQ (whose dS^T comes from the gradient CTA, which needs the
        // P^T): the tile's first two steps' here, then step j + 2's in step j, and its last two steps are
        // iterations of their own.
        int row1 = row0, h1 = h;  // the rows of the step after the one at hand
        t.next_step<kBlockM, true>(row1, h1);
        for (int first = 0; first < min(t.steps, 2); ++first) {
          auto tSrS = partition_fragment_C(mma_s, Shape<HalfN, M>{});
          issue_scores(step + first, tSrS);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tSrS);
          send_probs(step + first, first == 0 ? row0 : row1, key_w0, tSrS);
        }
        int i = 0;
        for (; i + 2 < t.steps; ++i, ++step) {
          int row2 = row1, h2 = h1;
          t.next_step<kBlockM, true>(row2, h2);
          grads_step(t, step, h, row0, row2, key_w0, false, std::true_type{});
          row0 = row1, h = h1, row1 = row2, h1 = h2;
        }
        for (; i < t.steps; ++i, ++step) {
          grads_step(t, step, h, row0, 0, key_w0, w == 1 && i + 1 == t.steps, std::false_type{});
          row0 = row1, h = h1;
        }
      }
      // dK staged outside K where the tile had steps, so that the next tile's K loads under the stores (the tile
      // start waited for it: session 52's profile, 4.6% of the samples at S = 512): consumer 0's in the two dS^T
      // slots (the gradient CTA sends the next tile's first dS^T only once it has this consumer's first P^T),
      // consumer 1's in the tile's last Q stage (released after the store).
      end_products(t.steps > 0);
      if (t.steps > 0) {
        const int s_last = (step - 1) % stages;
        store_keys(mma_dk, tKrdK, p.scale, prm.tma_dk, t, w == 0 ? smem.side : stage_rows(s_last),
                   w == 0 ? nullptr : &smem.empty[s_last]);
      } else {
        store_keys(mma_dk, tKrdK, p.scale, prm.tma_dk, t, keys_box(), nullptr);
      }
    }
  }

  // The gradient CTA (rank 1): per step, dP^T_w, dV (P^T_w from the scores CTA, loaded before the step, or at a
  // tile's first step behind dP^T's issue; dV issued behind dP^T), dS^T (to shared memory and the scores CTA), dQ.
  // Each step issues its own dP^T, so no wgmma is in flight across steps. A step's dQ is reduced into global memory
  // at the next step's top, behind that step's dP^T and dV, not at its own end: the REDGs read their registers
  // late, and the first instruction that reused one (an address at the next step's top) waited for them before
  // dP^T could be issued, with the tensor cores idle (5.2% of the pair's stall samples, docs/perf-log.md). A tile's
  // last step reduces its own (nothing follows it in the tile).
  __device__ __forceinline__ void run_gradients() {
    using namespace cute;
    const BwdKernelParams& p = prm.p;
    const FwdKernelParams& f = p.fwd;
    typename Traits::MmaScores mma_s;
    typename Traits::MmaDq mma_dq;
    typename Traits::MmaDv mma_dv;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_dq = mma_dq.get_thread_slice(tid);
    auto thr_dv = mma_dv.get_thread_slice(tid);
    auto sV = make_tensor(make_smem_ptr(smem.keys), typename Traits::SmemLayoutKeys{});
    auto sV_w = local_tile(sV, Shape<HalfN, D>{}, make_coord(w, 0));
    auto sKhT = make_tensor(make_smem_ptr(smem.side), typename Traits::SmemLayoutKHalfT{});
    auto sKhT_w = local_tile(sKhT, Shape<DqCols, N>{}, make_coord(w, 0));  // dQ's columns 128 + 64 w ..
    auto tVrdV = partition_fragment_C(mma_dv, Shape<HalfN, D>{});
    auto tSrdP = partition_fragment_C(mma_s, Shape<HalfN, M>{});  // dP^T, issued at each step's top
    auto rP = make_tensor_like<T>(tSrdP);  // P^T of the step at hand (load_probs)
    // dQ's box of the step before, reduced a step later: a copy, because the wgmma's accumulator kept live across
    // steps made ptxas serialize every wgmma (C7520); ptxas leaves the copy in the accumulator's registers.
    cute::array<float, Traits::kBlockM * DqCols::value / 128> dq_prev;
    auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, T>{}, mma_s);
    auto thr_stsm = stsm.get_thread_slice(tid);
    const uint32_t p_empty_peer = peer_address(&smem.p_empty[w][0], peer);  // buffer 1's follows (uint64_t)
    const uint32_t ds_dst = peer_address(smem.side, peer);              // slot 1's follows (kDsBytes)
    const uint32_t ds_full_peer = peer_address(&smem.ds_full[0], peer);  // slot 1's follows (uint64_t)
    const uint4* p_in = reinterpret_cast<const uint4*>(&smem.p_x[w][0][0][0]) + tid;  // elements 8 q .. at p_in[128 q]
    auto issue_dp = [&](int j) {
      full_stage(j);
      auto sdO = make_tensor(make_smem_ptr(stage_rows(j % stages)), typename Traits::SmemLayoutRows{});
      issue_mma(mma_s, thr_s.partition_fragment_A(sV_w), thr_s.partition_fragment_B(sdO), tSrdP, false);
    };
    // P^T of step j from the scores CTA, in T (for dV as it is, and for dS^T in fp32), into rP: loaded at the end
    // of the step before, so that the step's dV is issued right behind its dP^T instead of after the loads' latency
    // (session 53's profile: 2.2% of the samples on the first use of P^T); a tile's first step loads it itself.
    auto load_probs = [&](int j) {
      const int b = j % 2;  // P^T's buffer
      if (tid == 0) FullBarrier::arrive_and_expect_tx(&smem.p_full[w][b], Traits::kPBytes);
      FullBarrier::wait(&smem.p_full[w][b], (j / 2) % 2);
      auto rP_words = recast<uint32_t>(rP);
      CUTE_UNROLL
      for (int q = 0; q < kScoreFloats / 8; ++q) {
        const uint4 v = p_in[b * (Traits::kPBytes / 16) + 128 * q];
        rP_words(4 * q) = v.x, rP_words(4 * q + 1) = v.y, rP_words(4 * q + 2) = v.z, rP_words(4 * q + 3) = v.w;
      }
    };
    // Step j (rows from row0 of head h), its P^T in rP; with kDeferred, the previous step's dQ (rows from prev_row0
    // of head prev_h) is reduced behind dP^T, and this step's is left for the next step. Without (a tile's first
    // step) P^T is loaded here, behind dP^T's issue: at a tile's start the scores CTA is still making it (its S^T
    // waited for the tile's K), so the gradient CTA's dP^T runs meanwhile instead of after it.
    auto grads_step = [&](const BwdTile& t, int j, int h, int row0, int prev_h, int prev_row0, auto deferred) {
      constexpr bool kDeferred = decltype(deferred)::value;
      const int s = j % stages, slot = j % 2;
      issue_dp(j);
      if constexpr (!kDeferred) load_probs(j);
      // dV needs only P^T and the dO stage: issued behind dP^T before waiting for it, so that the tensor cores
      // go from one to the other without draining while dS^T is made. p_x is released once dV's wgmma has been
      // issued: it reads the registers loaded from p_x, so every warp's loads of it have returned.
      auto sdOt = make_tensor(make_smem_ptr(stage_rows(s)), typename Traits::SmemLayoutRowsT{});
      issue_mma(mma_dv, acc_as_a_operand(rP), thr_dv.partition_fragment_B(sdOt), tVrdV, true);
      if (tid % 32 == 0) arrive_peer(p_empty_peer + (j % 2) * sizeof(uint64_t));
      if (kDeferred) reduce_dq(dq_prev, t.b, prev_h, prev_row0, 128 + 64 * w);
      warpgroup_wait<1>();  // dP^T (committed first)
      warpgroup_fence_operand(tSrdP);
      auto rdS = make_tensor_like<T>(tSrdP);
      CUTE_UNROLL
      for (int q = 0; q < kScoreFloats / 4; ++q) {
        const float2 delta = ld_shared_pair(&smem.stats[s][query_of(4 * q)]);
        CUTE_UNROLL
        for (int e = 4 * q; e < 4 * q + 4; ++e)
          rdS(e) = T(static_cast<float>(rP(e)) * (tSrdP(e) - (e % 2 ? delta.y : delta.x)));
      }
      // The slot is free once the scores CTA's products are done with its dS^T of two steps ago (which also means
      // the bulk copy out of this CTA's slot has landed there).
      if (j >= 2) wait_peer(&smem.ds_empty[slot], (j / 2 - 1) % 2);
      T* ds = smem.ds + slot * Traits::kDsElems;
      auto sDs = make_tensor(make_smem_ptr(ds), typename Traits::SmemLayoutDs{});
      copy(stsm, thr_stsm.retile_S(rdS), thr_stsm.partition_D(local_tile(sDs, Shape<HalfN, M>{}, make_coord(w, 0))));
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> the bulk copy and wgmma
      named_sync(kDsBarrier, 2 * 128);            // both consumers' dS^T are in place
      if (w == 0 && tid == 0) {
        arrive_expect_tx_peer(ds_full_peer + slot * sizeof(uint64_t), Traits::kDsBytes);
        bulk_copy_to_peer(ds_dst + slot * Traits::kDsBytes, ds, Traits::kDsBytes, ds_full_peer + slot * sizeof(uint64_t));
      }
      auto tQrdQ = partition_fragment_C(mma_dq, Shape<M, DqCols>{});
      auto sDsQK = make_tensor(make_smem_ptr(ds), typename Traits::SmemLayoutDsQK{});
      issue_mma(mma_dq, thr_dq.partition_fragment_A(sDsQK), thr_dq.partition_fragment_B(sKhT_w), tQrdQ, false);
      warpgroup_wait<0>();  // dV and dQ: this step's dO stage is read
      warpgroup_fence_operand(tVrdV);
      warpgroup_fence_operand(tQrdQ);
      EmptyBarrier::arrive(&smem.empty[s]);
      CUTE_UNROLL
      for (int e = 0; e < size(tQrdQ); ++e) dq_prev[e] = tQrdQ(e);
    };

    int step = 0;
    for (int k = 0;; ++k) {
      const int tile = read_tile(k);
      if (tile >= tiles) break;
      const BwdTile t = BwdTile::at<kBlockM, kBlockN, true>(tile, p);
      clear(tVrdV);
      FullBarrier::wait(&smem.kv_full, k % 2);
      int h = t.hk * f.group, row0 = t.row_start;
      if (t.steps > 0) {
        grads_step(t, step, h, row0, 0, 0, std::false_type{});
        for (int i = 1; i < t.steps; ++i) {
          const int prev_h = h, prev_row0 = row0;
          t.next_step<kBlockM, true>(row0, h);
          load_probs(++step);
          grads_step(t, step, h, row0, prev_h, prev_row0, std::true_type{});
        }
        ++step;
        reduce_dq(dq_prev, t.b, h, row0, 128 + 64 * w);  // the tile's last step's
      }
      end_products(false);
      store_keys(mma_dv, tVrdV, 1.0f, prm.tma_dv, t, keys_box(), nullptr);
    }
  }
};

// One CTA of a pair, the scores CTA (kScores) or the gradient CTA: the barriers, the producer, the consumers.
template <typename Traits, bool kScores>
__device__ __forceinline__ void bwd_pair_cta(const typename Traits::Params& prm) {
  using namespace cute;
  using T = typename Traits::Element;
  using M = typename Traits::M;
  using N = typename Traits::N;
  using D = typename Traits::D;
  using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  const BwdKernelParams& p = prm.p;
  const FwdKernelParams& f = p.fwd;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);

  constexpr bool scores = kScores;
  const uint32_t peer = scores ? 1 : 0;
  constexpr int stages = kScores ? Traits::kScoresStages : Traits::kGradStages;
  const int tiles = p.n_blocks * f.batch * p.heads_kv;
  const int cluster = static_cast<int>(blockIdx.x / 2), clusters = static_cast<int>(gridDim.x / 2);
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = static_cast<int>(threadIdx.x % 128);
  const int64_t padded = bwd_padded_rows(f.seqlen_q);
  auto stage_rows = [&](int s) { return pair_stage_rows<Traits>(smem, s); };

  if (threadIdx.x == 0) {
    FullBarrier::init(&smem.kv_full, 1);
    EmptyBarrier::init(&smem.kv_empty, Traits::kConsumers * 128);
    for (int s = 0; s < Traits::kScoresStages; ++s) {
      FullBarrier::init(&smem.full[s], 1);
      EmptyBarrier::init(&smem.empty[s], Traits::kConsumers * 128);
    }
    for (int w = 0; w < Traits::kConsumers; ++w)
      for (int b = 0; b < 2; ++b) {
        FullBarrier::init(&smem.p_full[w][b], 1);   // the gradient consumer's thread 0 arms it each step
        EmptyBarrier::init(&smem.p_empty[w][b], 4);  // the gradient consumer's four warps
      }
    for (int slot = 0; slot < 2; ++slot) {
      FullBarrier::init(&smem.ds_full[slot], 1);            // armed by the gradient CTA's sender
      EmptyBarrier::init(&smem.ds_empty[slot], 2 * 4);      // the scores CTA's eight consumer warps
      FullBarrier::init(&smem.tile_full[slot], 1);          // the scores CTA's producer
      EmptyBarrier::init(&smem.tile_empty[slot], 2 * (2 * 4) + 1);  // both CTAs' consumer warps, the other producer
    }
    cutlass::arch::fence_barrier_init();
  }
  // Both CTAs' barriers are initialized before either signals the other's.
  cluster_arrive_relaxed();
  cluster_wait();

  if (warpgroup == 0) {  // producer: this CTA's keys once a tile, and its ring of step rows
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x == 0) {
      const auto& tma_rows = scores ? prm.tma_q : prm.tma_do;
      const auto& tma_keys = scores ? prm.tma_k : prm.tma_v;
      const float* stats_src = scores ? p.lse_log2 : p.delta;
      const auto q_shape = make_shape(f.seqlen_q, f.head_dim, f.heads_q, f.batch);
      const auto kv_shape = make_shape(f.seqlen_k, f.head_dim, p.heads_kv, f.batch);
      auto sKeys = make_tensor(make_smem_ptr(smem.keys), typename Traits::SmemLayoutKeys{});
      auto sKHalf = make_tensor(make_smem_ptr(smem.side), typename Traits::SmemLayoutKHalf{});
      int step = 0, s = 0, phase = 0;
      // The scores CTA's producer takes the pair's tiles: the cluster's own first, then each from the counter, asked
      // as the tile before's last step is loaded (as bwd_kernel's producer does), and publishes each in a slot of
      // both CTAs; the gradient CTA's producer reads them there, as the consumers do.
      int tile = cluster;
      for (int k = 0;; ++k) {
        if constexpr (kScores) {
          if (k >= 2) EmptyBarrier::wait(&smem.tile_empty[k % 2], (k / 2 - 1) % 2);  // every reader has tile k - 2
          st_shared_int(&smem.tile[k % 2], tile);
          FullBarrier::arrive(&smem.tile_full[k % 2]);
          const uint32_t full_peer = peer_address(&smem.tile_full[k % 2], peer);
          arrive_expect_tx_peer(full_peer, sizeof(int));
          st_async_peer(peer_address(&smem.tile[k % 2], peer), tile, full_peer);
        } else {
          tile = pair_read_tile<Traits>(smem, k, false, true);
        }
        if (tile >= tiles) break;
        const BwdTile t = BwdTile::at<kBlockM, kBlockN, true>(tile, p);
        auto claim_next = [&] { return atomicAdd(p.tile_counter, 1) + clusters; };
        int next_tile = kScores && t.steps == 0 ? claim_next() : 0;
        auto load_kv = [&] {
          if (k > 0) EmptyBarrier::wait(&smem.kv_empty, (k - 1) % 2);
          const uint32_t bytes = cosize_v<typename Traits::SmemLayoutKeys> * sizeof(T) +
                                 (scores ? 0 : cosize_v<typename Traits::SmemLayoutKHalf> * sizeof(T));
          FullBarrier::arrive_and_expect_tx(&smem.kv_full, bytes);
          auto gKeys = local_tile(tma_keys.get_tma_tensor(kv_shape)(_, _, t.hk, t.b), Shape<N, D>{},
                                  make_coord(t.n_block, 0));
          auto [tg, ts] = tma_partition(tma_keys, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sKeys),
                                        group_modes<0, 2>(gKeys));
          copy(tma_keys.with(smem.kv_full), tg, ts);
          if constexpr (!kScores) {
            auto gK = local_tile(prm.tma_k_half.get_tma_tensor(kv_shape)(_, _, t.hk, t.b),
                                 Shape<N, typename Traits::HalfD>{}, make_coord(t.n_block, 1));
            auto [thg, ths] = tma_partition(prm.tma_k_half, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sKHalf),
                                            group_modes<0, 2>(gK));
            copy(prm.tma_k_half.with(smem.kv_full), thg, ths);
          }
        };
        if (t.steps == 0) load_kv();
        int h = t.hk * f.group, row0 = t.row_start;
        for (int i = 0; i < t.steps; ++i, ++step) {
          if (step >= stages) EmptyBarrier::wait(&smem.empty[s], phase ^ 1);
          if (kScores && i == t.steps - 1) next_tile = claim_next();
          auto sRows = make_tensor(make_smem_ptr(stage_rows(s)), typename Traits::SmemLayoutRows{});
          auto gRows = local_tile(tma_rows.get_tma_tensor(q_shape)(_, _, h, t.b), Shape<M, D>{},
                                  make_coord(row0 / kBlockM, 0));
          auto [tg, ts] = tma_partition(tma_rows, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sRows),
                                        group_modes<0, 2>(gRows));
          FullBarrier::arrive_and_expect_tx(&smem.full[s], Traits::kStepBytes);
          copy(tma_rows.with(smem.full[s]), tg, ts);
          bulk_load(smem.stats[s], stats_src + (static_cast<int64_t>(t.b) * f.heads_q + h) * padded + row0,
                    kBlockM * sizeof(float), &smem.full[s]);
          if (i == 0) load_kv();
          t.next_step<kBlockM, true>(row0, h);
          if (++s == stages) s = 0, phase ^= 1;
        }
        tile = next_tile;
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<240>();
    PairConsumer<Traits, kScores> consumer{prm, smem, warpgroup - 1, tid, tiles, peer};
    if constexpr (kScores)
      consumer.run_scores();
    else
      consumer.run_gradients();
  }
  // Neither CTA leaves while the other may still signal its barriers or write its shared memory.
  cluster_arrive();
  cluster_wait();
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    bwd_pair_kernel(const __grid_constant__ typename Traits::Params prm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (blockIdx.x % 2 == 0)  // the CTA's rank in its cluster (two along x)
    bwd_pair_cta<Traits, true>(prm);
  else
    bwd_pair_cta<Traits, false>(prm);
#endif
}

}  // namespace flashtile::cuda::sm90
