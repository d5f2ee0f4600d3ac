// The sm90 backward (H100, H200): FlashAttention-2's five tile products on Hopper's machinery. Three kernels per
// call (bwd_launch.cuh):
//   1. bwd_prep_kernel: per query row, D = rowsum(dO * O) and the LSE in log2 units, into workspace rows padded
//      to a multiple of kBwdStatsRowAlign (128) per head, so the main kernel copies a step's rows of each with one
//      bulk copy;
//   2. bwd_kernel: persistent, a CTA per SM (or per tile, if fewer) taking tiles (BwdTile: a block of kBlockN
//      keys, 128 or 64 above D = 128, of one batch and K/V head) from a counter until none is left; a tile walks
//      the group's query heads and the blocks of kBlockM query rows (128 at D = 64, 64 above) that see its keys
//      (a step):
//      - warpgroup 0 is the producer: it gives its registers away (setmaxnreg), and one thread takes the tiles,
//        publishes each to the others, and loads the tile's K and V (once the consumers are done with the
//        previous tile's), and each step's Q and dO (TMA) and LSE and D (bulk copies) into a ring of kStages
//        buffers (mbarriers: full when the bytes have landed, empty when both consumers are done with them), so a
//        tile's first loads run under the previous tile's last products and dK / dV stores;
//      - warpgroups 1 and 2 are consumers, kBlockN / 2 keys each, meeting only at named barriers. Up to D = 128
//        (BwdTraits::kScoresT) the scores are transposed, keys on the rows:
//          S^T_w = K_w Q^T, dP^T_w = V_w dO^T  (64 keys x kBlockM queries; P^T_w from S^T_w while dP^T_w runs)
//          dV_w += P^T_w dO                  (64 keys x kHeadDim, P^T from registers; issued as soon as P^T is made)
//          dS^T_w in registers, and -> shared memory for dQ (dS without the softmax scale, which dK and dQ get
//                                             once at the end)
//          dK_w += dS^T_w Q                  (dS^T from registers)
//        Above (wide, 32 keys a consumer: below wgmma's 64 rows) they are not:
//          S_w = Q K_w^T, dP_w = dO V_w^T   (kBlockM queries x 32 keys; P_w from S_w while dP_w runs; at
//                                             D = 256 split by product instead: consumer 0's S, consumer 1's dP,
//                                             all 64 keys, dP handed to consumer 0 through shared memory)
//          P_w, dS_w -> shared memory
//          dV_w^T += dO^T P_w, dK_w^T += Q^T dS_w  (kHeadDim x 32 keys, transposed shared views; at D = 256
//                                              split by head-dim rows instead: half w of the dims, all 64 keys)
//        Both then make dQ's part, a 64-row box (DqSplit): at D = 128, dQ[:, w half] = dS K (64 columns over all
//        128 keys, which needs both consumers' dS); at D = 64, dQ[w rows] = dS[w rows] K (every column, all 128
//        keys: both consumers' dS again); at D = 96, dQ += dS_w K_w (every column over the consumer's own 64 keys:
//        the consumers never wait for each other, but a 48-column half of K's transposed view would start inside
//        a swizzle atom, which a wgmma operand cannot)
//        Each thread adds its part of the box to the accumulator in global memory by 16-byte reductions from its
//        registers, into the fragment order (BwdTraits::kDqOrder), while the step's last products run;
//      - dK (times the scale) and dV leave at the end of the tile: up to D = 128 by TMA stores from a staging
//        buffer, wide by stores from registers;
//   3. sm80::launch_bwd_dq_convert: dQ = the accumulator times the scale, in the input dtype.
// The deterministic mode (kOrderedDq) is the same three kernels with dQ's additions in a fixed order: for each
// (batch, query head, block of kBlockM rows) the key blocks that see it add their boxes in key block order, one
// turn each, counted in p.dq_turns; fp32 additions in one order give the same bits on every run. See "Ordered dQ"
// at the reductions.
// The development history of this schedule and what each piece bought: docs/perf-log.md (sm90 backward).
// Registers per consumer thread: dK and dV (kBlockN / 2 x kHeadDim each: kHeadDim / 2 or / 4 floats each), S and
// dP (kBlockM x kBlockN / 2 / 128 each; at D = 256 one of them, 64 x 64 / 128), dQ (DqCols / 2): 224 at D = 64,
// 128 and 256, 208 at 96, 176 at 192, within setmaxnreg's 240; transposed, P^T and dS^T in T besides (a quarter
// of S's each, 16 at D = 96 and 128, 32 at D = 64, where dV is therefore complete before dS^T is made). Above
// D = 128 (wide) dK and dV are (dim, key) tiles (at D = 256 kHeadDim / 2 x kBlockN a consumer:
// BwdTraits::kKvByDims).
#pragma once

#include <cute/tensor.hpp>  // first: the atom headers below expect it
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>
#include <utility>

#include "backends/cuda/bwd_kernel_params.hpp"
#include "backends/cuda/host_device.hpp"
#include "backends/cuda/quad_reduce.cuh"
#include "backends/cuda/sm80/bwd_kernels.cuh"  // grad_score, lse_log2, pack2, the row kernels
#include "backends/cuda/sm80/ptx.cuh"          // smem_address
#include "backends/cuda/sm90/bwd_launch.hpp"    // kBwdStatsRowAlign, bwd_padded_rows
#include "backends/cuda/visible_keys.hpp"

namespace flashtile::cuda::sm90 {

// How the two consumers share a step's dQ (BwdTraits::kDqSplit): each computes one 64 x DqCols box of it, over
// the keys DqKeys.
enum class DqSplit {
  kByColumns,  // D = 128, 192, 256: the step's 64 rows, half the columns each, over all the CTA's keys (both
               // consumers' dS)
  kByKeys,     // D = 96: the step's 64 rows, every column, over the consumer's own 64 keys (both add into one box)
  kByRows,     // D = 64: 64 of the step's 128 rows each, every column, over all 128 keys (both consumers' dS)
};

// Everything one (dtype, head dim) instantiation is made of. T is cutlass::bfloat16_t or cutlass::half_t.
template <typename T, int kHeadDim_>
struct BwdTraits {
  using Element = T;
  using CudaT = std::conditional_t<std::is_same_v<T, cutlass::bfloat16_t>, __nv_bfloat16, __half>;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2, kThreads = 128 * (kConsumers + 1);
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "the sm90 backward's head dims");
  // Above 128 (wide) a CTA takes 64 keys, 32 a consumer, so that dK and dV fit in the registers; they are then
  // computed transposed (dV^T = dO^T P: a product over 32 keys would have 32 rows, below wgmma's 64).
  static constexpr bool kWide = kHeadDim > 128;
  static constexpr int kBlockN = kWide ? 64 : 128;
  // The ring of step buffers (Q, dO, LSE and D): a step's rows load once the step kStages before it is done, so
  // with three they have two steps' time to land. Wide, two: three do not fit beside K, V, P and dS.
  static constexpr int kStages = kWide ? 2 : 3;
  // dK and dV are split between the consumers by keys (each its kBlockN / 2 keys, every head dim), except at
  // D = 256, where they are split by head-dim rows: consumer w's dV^T = dO^T P over dims [128 w, 128 w + 128) and
  // all 64 keys (both consumers' P and dS), so that the products are 64 keys wide, not 32 (a 64x32x16 wgmma
  // reads 3 KB of shared memory for 32 k multiply-adds, a 64x64x16 one 4 KB for 64 k). D = 192's halves (96
  // dims) are not a multiple of wgmma's 64 rows.
  static constexpr bool kKvByDims = kHeadDim == 256;
  static constexpr int kKvKeys = kKvByDims ? kBlockN : kBlockN / 2, kKvDims = kKvByDims ? kHeadDim / 2 : kHeadDim;
  // Up to D = 128 the scores are transposed (kScoresT): S^T_w = K_w Q^T and dP^T_w = V_w dO^T, the consumer's 64
  // keys on wgmma's M side. P^T and dS^T then sit in the accumulator registers in the layout of a register A
  // operand, and dV_w += P^T dO, dK_w += dS^T Q take them from there (FlashAttention-3's split): P never goes to
  // shared memory, only dS^T does (dQ's product reads it there), and dV can start as soon as P is
  // made. Wide keeps S_w = Q K_w^T: a consumer's 32 keys are below wgmma's 64 rows.
  static constexpr bool kScoresT = !kWide;
  // At D = 256 the consumers split the scores by product, not by keys (kSdPByConsumer): consumer 0 computes
  // S = Q K^T and consumer 1 dP = dO V^T, each over all 64 keys, and consumer 1 hands its dP (fp32) to consumer 0
  // through shared memory (dp_x), which makes P and dS. Split by keys each consumer's products were 32 keys wide:
  // a 64x32x16 wgmma with both operands in shared memory reads 3 KB for 32 k multiply-adds, and both consumers
  // read all of Q and dO; a 64x64x16 one reads 4 KB for 64 k, so the step's S and dP read 128 KB instead of
  // 192 KB (at 128 bytes a clock: ~1000 clocks instead of ~1500, against ~1000 of tensor work). D = 192 keeps
  // the split by keys (not in grid A; not tried there).
  static constexpr bool kSdPByConsumer = kKvByDims;
  static constexpr int kScoreKeys = kSdPByConsumer ? kBlockN : kBlockN / 2;  // the keys of a consumer's scores
  // The dQ accumulator's order (sm80/dq_accum.hpp): each thread adds its accumulator registers by 16-byte
  // reductions into the fragment order (a warp's 16-row band, each thread's four floats of an 8-column block
  // contiguous, so the wgmma accumulator's registers go as they are; FlashAttention-3's choice at D = 256). Wide,
  // that replaced staging 64 x 256 floats a step in shared memory for a TMA reduce-add (v13: the hand-off
  // serialized the step); up to D = 128 it replaces staging each consumer's 64 x DqCols box in dQ buffers of its
  // own for a writer thread's TMA reduce-adds (v16: the staging's stores and the TMA's read of them are 64 KB of a
  // D = 128 step's shared-memory traffic, and the buffers 64 KB of shared memory).
  static constexpr sm80::DqAccumOrder kDqOrder = sm80::DqAccumOrder::kFragment;
  // The dQ split, and the query rows of a step: 128 at D = 64, whose products are half as deep as D = 128's, so
  // that a step's fixed costs (barriers, the dQ reductions, the loads' waits) are spread over twice the work;
  // 64 above (the registers: the top of this file).
  static constexpr DqSplit kDqSplit = kHeadDim == 64 ? DqSplit::kByRows
                                      : kHeadDim == 96 ? DqSplit::kByKeys
                                                       : DqSplit::kByColumns;
  static constexpr int kBlockM = kDqSplit == DqSplit::kByRows ? 128 : 64;
  static_assert(kBwdStatsRowAlign % kBlockM == 0, "a step's LSE and D rows lie inside a head's padded rows");

  using M = cute::Int<kBlockM>;
  using N = cute::Int<kBlockN>;
  using D = cute::Int<kHeadDim>;
  using HalfN = cute::Int<kBlockN / 2>;    // a consumer's keys
  using ScoreKeys = cute::Int<kScoreKeys>;
  // A consumer's dQ box: 64 rows, DqCols columns, summed over DqKeys keys.
  using DqCols = cute::Int<kDqSplit == DqSplit::kByColumns ? kHeadDim / 2 : kHeadDim>;
  using DqKeys = cute::Int<kDqSplit == DqSplit::kByKeys ? kBlockN / 2 : kBlockN>;
  // Rows of the head dim swizzled by 128 bytes (64 columns), or by 64 (32 columns) at D = 96 and 192, where a
  // consumer's half of K's transposed view (48 or 96 columns) must start on a swizzle atom; P and dS's rows by the
  // width of a consumer's scores (64 or 32), for the same reason.
  using RowAtom = std::conditional_t<kHeadDim % 64 == 0 && kHeadDim != 192, cute::GMMA::Layout_K_SW128_Atom<T>,
                                     cute::GMMA::Layout_K_SW64_Atom<T>>;
  using PAtom = std::conditional_t<kScoreKeys == 64, cute::GMMA::Layout_K_SW128_Atom<T>,
                                   cute::GMMA::Layout_K_SW64_Atom<T>>;
  using ScoresShape = std::conditional_t<kScoresT, cute::Shape<HalfN, M>, cute::Shape<M, ScoreKeys>>;  // S_w or S^T_w
  using SmemLayoutQ = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<M, D>{}));  // Q, dO: (queries, dim)
  using SmemLayoutQStages = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<M, D, cute::Int<kStages>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<N, D>{}));  // K, V: (keys, dim)
  using SmemLayoutP = decltype(cute::tile_to_shape(PAtom{}, cute::Shape<M, N>{}));  // P, dS: (queries, keys)
  // The stored dS: (queries, keys) as P, or transposed, (keys, queries) with the kBlockM (64 or 128) queries
  // contiguous and swizzled by 128 bytes, so that stmatrix writes it straight from the S^T accumulator layout.
  using SmemLayoutDs = std::conditional_t<
      kScoresT, decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<T>{}, cute::Shape<N, M>{})), SmemLayoutP>;
  // Transposed views, MN-major as the products that read them need.
  using SmemLayoutQt = decltype(cute::composition(
      SmemLayoutQ{}, cute::make_ordered_layout(cute::Shape<D, M>{}, cute::Step<cute::_2, cute::_1>{})));
  using SmemLayoutKt = decltype(cute::composition(
      SmemLayoutK{}, cute::make_ordered_layout(cute::Shape<D, N>{}, cute::Step<cute::_2, cute::_1>{})));
  using SmemLayoutPt = decltype(cute::composition(
      SmemLayoutP{}, cute::make_ordered_layout(cute::Shape<N, M>{}, cute::Step<cute::_2, cute::_1>{})));
  // dQ's operand dS as (queries, keys): the stored tile, or the transposed view of the stored dS^T (MN-major).
  using SmemLayoutDsForDq = std::conditional_t<
      kScoresT,
      decltype(cute::composition(SmemLayoutDs{},
                                 cute::make_ordered_layout(cute::Shape<M, N>{}, cute::Step<cute::_2, cute::_1>{}))),
      SmemLayoutP>;

  // One consumer's products. S_w, dP_w: (64 queries, 32 keys) a wgmma, (64 queries, 64 keys) by product;
  // transposed, (64 keys, kBlockM queries).
  using SdPCols = std::conditional_t<kScoresT, M, ScoreKeys>;
  using MmaSdP =
      decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, SdPCols, D>>()));
  // dV_w += P_w^T dO (64 keys x kHeadDim, P^T from registers), or wide, dV_w^T += dO^T P_w (KvDims x KvKeys:
  // kHeadDim x 32 keys, or by head-dim rows, 128 x 64, both operands transposed shared views); dK likewise.
  using KvKeys = cute::Int<kKvKeys>;
  using KvDims = cute::Int<kKvDims>;
  using MmaKV = std::conditional_t<
      kScoresT,
      decltype(cute::make_tiled_mma(cute::GMMA::rs_op_selector<T, T, float, cute::Shape<cute::_64, D, M>,
                                                               cute::GMMA::Major::K, cute::GMMA::Major::MN>())),
      decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, KvKeys, M>,
                                                               cute::GMMA::Major::MN, cute::GMMA::Major::MN>()))>;
  using DkvShape = std::conditional_t<kWide, cute::Shape<KvDims, KvKeys>, cute::Shape<KvKeys, D>>;  // dK, dV tiles
  using MmaDQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, DqCols, DqKeys>,
                                 kScoresT ? cute::GMMA::Major::MN : cute::GMMA::Major::K, cute::GMMA::Major::MN>()));

  // q, k, v or dO (const void: the loads), or dk or dv (void: the stores) as (seqlen, head dim, heads, batch) over
  // its strides (the call's head dim: TMA zero-fills the columns up to kHeadDim, and clips them from the stores).
  template <class Void>
  static auto rows_tensor(Void* ptr, int seqlen, int head_dim, int heads, int batch, const int64_t* stride) {
    using namespace cute;
    using Pointee = std::conditional_t<std::is_const_v<Void>, const T, T>;
    return make_tensor(make_gmem_ptr(static_cast<Pointee*>(ptr)),
                       make_layout(make_shape(seqlen, head_dim, heads, batch),
                                   make_stride(stride[1], _1{}, stride[2], stride[0])));
  }
  using TmaRows = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                                               rows_tensor<const void>(nullptr, 1, 1, 1, 1, nullptr), SmemLayoutQ{}));
  using TmaKeys = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{},
                                               rows_tensor<const void>(nullptr, 1, 1, 1, 1, nullptr), SmemLayoutK{}));
  // Transposed (kScoresT), dK and dV leave by TMA stores from a staging buffer: each consumer writes its 64 keys
  // of dK there by stmatrix and stores them, then (once the TMA has read them) dV. Four-byte stores straight from
  // the accumulators write 8 rows an instruction, 16 bytes each, and at S = 512 held a quarter of the main
  // kernel's stall samples (docs/perf-log.md, sm90 backward v42, v43). By head-dim rows (D = 256) a consumer's
  // dK^T and dV^T (its 128 dims of the 64 keys) go by stmatrix with transposition into its half of the columns of
  // the tile's last step's Q and dO buffers (which nothing reads any more: that stage is released after the
  // stores), and from there by TMA (kKvOutFromStage; a buffer of their own would not fit at D = 256). D = 192 keeps
  // the stores from registers.
  static constexpr bool kKvOutFromStage = kKvByDims;
  static constexpr bool kKvOutByTma = kScoresT || kKvOutFromStage;  // dk and dv have TMA descriptors (D != 192)
  using SmemLayoutKvOut = decltype(cute::tile_to_shape(RowAtom{}, cute::Shape<KvKeys, KvDims>{}));  // (keys, dim)
  using SmemLayoutKvOutT = decltype(cute::composition(  // (dim, keys): the accumulator's view, MN-major
      SmemLayoutKvOut{}, cute::make_ordered_layout(cute::Shape<KvDims, KvKeys>{}, cute::Step<cute::_2, cute::_1>{})));
  // The buffer holds both consumers' halves, or at D = 128 one, which they take in turn (195 KB in all): with both
  // halves D = 128 measured 3-7% slower at S >= 4k, where the stores are rare, and taking turns about 1%. Not the
  // shared memory's size: main's code with the same 211 KB lost nothing (docs/perf-log.md, sm90 backward v43).
  static constexpr int kOutHalves = kHeadDim == 128 ? 1 : kConsumers;
  static constexpr bool kTakeTurns = kScoresT && kOutHalves == 1;
  using TmaKvOut = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{},
                                                rows_tensor<void>(nullptr, 1, 1, 1, 1, nullptr), SmemLayoutKvOut{}));

  struct SharedStorage {
    alignas(1024) T k[cute::cosize_v<SmemLayoutK>];
    alignas(1024) T v[cute::cosize_v<SmemLayoutK>];
    alignas(1024) T q[cute::cosize_v<SmemLayoutQStages>];
    alignas(1024) T dout[cute::cosize_v<SmemLayoutQStages>];
    alignas(1024) T p[kScoresT ? 8 : cute::cosize_v<SmemLayoutP>];  // transposed: unused (P stays in registers)
    alignas(1024) T ds[cute::cosize_v<SmemLayoutDs>];
    alignas(1024) T kv_out[kScoresT ? kOutHalves * cute::cosize_v<SmemLayoutKvOut> : 8];  // wide: unused
    // By product (kSdPByConsumer): consumer 1's dP for consumer 0, element e of thread t at [e / 4][t][e % 4]
    alignas(16) float dp_x[kSdPByConsumer ? kBlockM * kBlockN : 4];
    alignas(16) float lse2[kStages][kBlockM];  // log2 units (bwd_prep_kernel)
    alignas(16) float delta[kStages][kBlockM];
    uint64_t kv_full, kv_empty, full[kStages], empty[kStages];
    uint64_t tile_full[2], tile_empty[2];  // the tile slots: published by the producer, read by all the others
    int tile[2];
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  // D = 64 takes 181 KB (three stages of 128-row Q and dO, 128 x 128 dS, the 16 KB staging buffer), D = 96
  // 163 KB, D = 128 195 KB, D = 192 162 KB, D = 256 226 KB (16 of them dp_x).
  static_assert(kSmemBytes <= 227 * 1024, "an sm90 block has at most 227 KB of shared memory");
  static constexpr uint32_t kKvBytes = 2 * kBlockN * kHeadDim * sizeof(T);
  static constexpr uint32_t kStepBytes = 2 * kBlockM * kHeadDim * sizeof(T) + 2 * kBlockM * sizeof(float);

  struct Params {
    TmaRows tma_q, tma_do;
    TmaKeys tma_k, tma_v;
    TmaKvOut tma_dk, tma_dv;  // transposed, or from the last stage (see TmaKvOut)
    BwdKernelParams p;
  };
};

// D = rowsum(dO * O) and the LSE in log2 units (lse_log2: rows that saw no key get 0) for one workspace row per
// lane group (sm80::LaneRow), rows (batch, head, padded row); the padding rows get 0 for both (their Q and dO load
// as zeros, so they add nothing to dK and dV, and their dQ is added into the accumulator's padding rows or not
// at all, past them; the conversion reads neither). The dQ accumulator is zeroed in the same pass
// (sm80::zero_dq_accum), and the main kernel's tile counter, and in the deterministic mode the turn counts
// (`turns` of them).
template <typename CudaT, int kHeadDim>
__global__ void __launch_bounds__(sm80::kRowThreads)
    bwd_prep_kernel(const BwdKernelParams p, int64_t dq_accum_floats, int64_t turns) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.tile_counter = 0;
  sm80::zero_dq_accum(p, dq_accum_floats);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < turns;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p.dq_turns[i] = 0;
  const FwdKernelParams& f = p.fwd;
  sm80::LaneRow<kHeadDim> r;
  if (!r.find(f, bwd_padded_rows(f.seqlen_q))) return;
  const bool real = r.i < f.seqlen_q;
  const float acc = real ? sm80::row_dot_o_do<CudaT>(p, r) : 0.0f;  // the group's lanes agree on `real`
  if (!r.first_lane()) return;
  p.delta[r.index] = acc;
  p.lse_log2[r.index] =
      real ? sm80::lse_log2(f.lse[r.b * f.lse_stride[0] + r.h * f.lse_stride[1] + r.i * f.lse_stride[2]]) : 0.0f;
}

// A bulk copy of `bytes` (a multiple of 16) from global to shared memory, completing on an mbarrier's
// transaction count.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
      "l"(gmem_src), "r"(bytes), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}

// Issues acc (+)= A B over every k block of the operands, asynchronously (one wgmma batch). A is shared-memory
// descriptors, or registers (then fenced like the accumulator, so that the compiler neither moves their writes
// past the issue nor reuses them before the wait).
template <class Mma, class FragA, class FragB, class Acc>
__device__ void issue_mma(Mma& mma, FragA&& a, const FragB& b, Acc& acc, bool accumulate) {
  constexpr bool kRegisterA =
      std::is_same_v<typename std::remove_reference_t<FragA>::value_type, typename Mma::ValTypeA>;
  if constexpr (kRegisterA) cute::warpgroup_fence_operand(a);
  cute::warpgroup_fence_operand(acc);
  cute::warpgroup_arrive();
  mma.accumulate_ = accumulate ? cute::GMMA::ScaleOut::One : cute::GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < cute::size<2>(a); ++kb) {
    cute::gemm(mma, a(cute::_, cute::_, kb), b(cute::_, cute::_, kb), acc);
    mma.accumulate_ = cute::GMMA::ScaleOut::One;
  }
  cute::warpgroup_commit_batch();
  if constexpr (kRegisterA) cute::warpgroup_fence_operand(a);
}

// A 64 x N wgmma accumulator fragment ((2, 2, N / 8), 1, 1), in T, as the register A operand of a product over
// its N columns, on the same registers: element e of the accumulator is column 2t + e % 2 of 8-column block
// e / 4, row r + 8 ((e / 2) % 2); k block kb (16 columns) of the A operand is ((2, 2, 2)): the same column pair
// and row, and 8-column block 2 kb or 2 kb + 1. tests/backends/cuda/sm90_bwd_layout_test.cu checks this against
// CuTe's partitions of both products.
template <class Tensor>
CUTE_HOST_DEVICE auto acc_as_a_operand(Tensor&& acc) {
  using namespace cute;
  using Acc = std::remove_reference_t<Tensor>;
  static_assert(size<1>(Acc{}) == 1 && size<2>(Acc{}) == 1 && size<0>(Acc{}) % 8 == 0, "one 64 x N wgmma tile");
  return make_tensor(acc.data(),
                     Layout<Shape<Shape<_2, _2, _2>, _1, Int<size(Acc{}) / 8>>, Stride<Stride<_1, _2, _4>, _0, _8>>{});
}

// Two floats from shared memory in one 8-byte load. As an asm volatile statement it stays where it is written,
// after the wgmma wait that precedes it: plain loads of a step's LSE and D per column pair were all hoisted to
// the top of the step, holding 32 registers more through the products at D = 128.
__device__ __forceinline__ float2 ld_shared_pair(const float* p) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(sm80::smem_address(p)));
  return v;
}

// Named barriers (0 is __syncthreads): 1 + w for consumer w's own threads; where a product reads both consumers'
// dS (dQ split by columns or by rows; at D = 256 dK and dV too, and P), kDsBarrier when both consumers' dS (and P)
// are in shared memory, and kStepBarrier + w when consumer w may overwrite its dS (and, wide, P; it waits there;
// the other consumer arrives once its products of the step before have read them).
// kTurnBarrier + w: consumer w's stores have read the shared staging buffer (BwdTraits::kTakeTurns).
// kDpBarrier: consumer 1's dP is in dp_x (BwdTraits::kSdPByConsumer).
constexpr int kDsBarrier = 3, kStepBarrier = 4, kTurnBarrier = 6, kDpBarrier = 8;
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads));
}

// The deterministic mode's turn counts (p.dq_turns): a relaxed load (which does not hold the thread up until its
// value is used; the fence after it makes it an acquire), the fence, and an increment that releases, at GPU scope.
__device__ __forceinline__ int ld_relaxed_gpu(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
__device__ __forceinline__ void red_release_gpu_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// One tile of the main kernel: kBlockN keys of one (batch, K/V head), and its steps: each query head of the group,
// times each block of kBlockM query rows that sees a key of the block, from a multiple of kBlockM. Tiles are
// numbered key block fastest, so that the CTAs at work at one time share their heads' Q and dO in L2 (and under a
// causal mask the longer tiles of a head come first), except the last p.tail_heads heads' (set where the steps fall
// with the key block: launch_bwd), numbered key block major, so that the grid's last tiles are its shortest and
// the CTAs run dry together (longest first, over a few heads' Q and dO). The deterministic mode numbers every
// head's tiles key block major (p.tail_heads: all heads), so that a head's blocks run a round apart.
struct BwdTile {
  int n_block, b, hk, key0;
  int row_first, row_end;  // the query rows of a head that the steps walk, [row_first, row_end)
  int row_start;           // the first step's row (next_step)
  int steps;               // 0: no query sees the block (dK and dV are zeros)
  // kRotate: a block whose sweep covers all of its head's query rows (row_first 0, row_end seqlen_q: no mask cuts
  // the range) and has at least kRotateMinSteps steps a head starts them at its own row (next_step), not at
  // row_first.
  static constexpr int kRotateMinSteps = 16;
  template <int kBlockM, int kBlockN, bool kRotate>
  __device__ static BwdTile at(int tile, const BwdKernelParams& p) {
    const FwdKernelParams& f = p.fwd;
    const int heads = f.batch * p.heads_kv, in_order = (heads - p.tail_heads) * p.n_blocks;
    int bhk;
    BwdTile t;
    if (tile < in_order) {
      t.n_block = tile % p.n_blocks, bhk = tile / p.n_blocks;
    } else {
      const int r = tile - in_order;
      t.n_block = r / p.tail_heads, bhk = heads - p.tail_heads + r % p.tail_heads;
    }
    t.b = bhk / p.heads_kv, t.hk = bhk % p.heads_kv;
    t.key0 = t.n_block * kBlockN;
    t.row_first = first_row<kBlockM>(t.key0, f);
    t.row_end = end_row<kBlockN>(t.key0, f);
    const int steps_per_head = per_head<kBlockM, kBlockN>(t.key0, f);
    t.steps = steps_per_head * f.group;
    const bool rotate = kRotate && t.row_first == 0 && t.row_end == f.seqlen_q && steps_per_head >= kRotateMinSteps;
    t.row_start = start_row<kBlockM>(t.n_block, t.row_first, steps_per_head, rotate);
    return t;
  }
  template <int kBlockM>
  FLASHTILE_HOST_DEVICE static int start_row(int n_block, int row_first, int steps_per_head, bool rotate) {
    return row_first + (rotate && steps_per_head > 0 ? n_block % steps_per_head : 0) * kBlockM;
  }
  // The step after the one at row0 of query head h. A head's rows run from row_start to row_end, then from
  // row_first up to row_start; then the group's next head. Unrotated (row_start = row_first), the CTAs that run a
  // head's consecutive key blocks side by side walk its rows in step, all adding into the same 64 rows of dQ at
  // the same time; rotated (at(): D = 256, sweeps over all of a head's rows), block n starts at row block n mod the
  // head's steps, so neighbouring blocks add into neighbouring row blocks. The deterministic mode adds in key block
  // order, row block by row block, so it never rotates.
  template <int kBlockM, bool kRotate>
  FLASHTILE_HOST_DEVICE void next_step(int& row0, int& h) const {
    row0 += kBlockM;
    if constexpr (kRotate) {
      if (row0 >= row_end) row0 = row_first;
      if (row0 == row_start) ++h;
    } else if (row0 >= row_end) {
      row0 = row_first, ++h;
    }
  }
  // The query rows a head's steps walk for the block from key0 (both ends grow with key0), and their number of
  // steps (on the host too: launch_bwd's tail_heads).
  template <int kBlockM>
  FLASHTILE_HOST_DEVICE static int first_row(int key0, const FwdKernelParams& f) {
    const int first = key0 - f.key_offset - f.window_right;
    return (first > 0 ? first : 0) / kBlockM * kBlockM;
  }
  template <int kBlockN>
  FLASHTILE_HOST_DEVICE static int end_row(int key0, const FwdKernelParams& f) {
    const int end = key0 + kBlockN - f.key_offset + f.window_left;
    return f.seqlen_q < end ? f.seqlen_q : end;
  }
  // The first key block whose steps reach the block of rows from row0: those that do are a range (both ends of a
  // block's rows grow with it), from the first whose end_row is past row0 (truncation takes a negative quotient
  // to 0 or below, and those to 0).
  template <int kBlockN>
  FLASHTILE_HOST_DEVICE static int first_block_reaching(int row0, const FwdKernelParams& f) {
    const int first = (row0 + f.key_offset - f.window_left) / kBlockN;
    return first > 0 ? first : 0;
  }
  template <int kBlockM, int kBlockN>
  FLASHTILE_HOST_DEVICE static int per_head(int key0, const FwdKernelParams& f) {
    const int first = first_row<kBlockM>(key0, f), end = end_row<kBlockN>(key0, f);
    return first < end ? (end - first + kBlockM - 1) / kBlockM : 0;
  }
};

// The tile slots through which the producer hands the CTA's tiles to the consumers: a 4-byte
// shared store and load as asm volatile statements, so that they stay on their side of the mbarrier arrive and
// wait around them (cutlass's barrier asm has no memory clobber).
__device__ __forceinline__ void st_shared_int(int* p, int v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sm80::smem_address(p)), "r"(v));
}
__device__ __forceinline__ int ld_shared_int(const int* p) {
  int v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(sm80::smem_address(p)));
  return v;
}

template <typename Traits, bool kSoftcap, bool kOrderedDq>
__global__ void __launch_bounds__(Traits::kThreads, 1) bwd_kernel(const __grid_constant__ typename Traits::Params prm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using T = typename Traits::Element;
  using CudaT = typename Traits::CudaT;
  using M = typename Traits::M;
  using N = typename Traits::N;
  using D = typename Traits::D;
  using HalfN = typename Traits::HalfN;
  using DqCols = typename Traits::DqCols;
  // The consumers wait for each other only where a product reads both one's P or dS: dQ split by columns or by
  // rows, and dK and dV split by head-dim rows.
  constexpr DqSplit kDqSplit = Traits::kDqSplit;
  constexpr bool kWide = Traits::kWide, kKvByDims = Traits::kKvByDims;
  constexpr bool kScoresT = Traits::kScoresT;
  constexpr bool kSharedDs = kKvByDims || kDqSplit != DqSplit::kByKeys;
  // Rotated query sweeps (BwdTile::next_step) only where they were measured to pay (docs/perf-log.md, backward
  // v36 and v36w): head dim 256, outside the deterministic mode; full-row blocks at S >= 1k gained 0.4-3%. At
  // D <= 128 they cost 1%, at D = 192 they did not pay.
  constexpr bool kRotateRows = Traits::kHeadDim > 192 && !kOrderedDq;
  using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kStages = Traits::kStages;
  const BwdKernelParams& p = prm.p;
  const FwdKernelParams& f = p.fwd;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);

  // The persistent grid: CTA c runs tile c (BwdTile), then each tile the counter hands it, until the counter has
  // run past the last. The producer takes the tiles and publishes each in a slot of smem.tile; the consumers read
  // them there.
  const int tiles = p.n_blocks * f.batch * p.heads_kv;
  // The warpgroup through a shuffle, so that the compiler knows it is the same in every lane of a warp: the
  // consumer's wgmma descriptors (its halves of K and V) are then built in uniform registers, not moved into
  // them before each wgmma (R2UR 255 -> 23 at D = 128, 323 -> 23 at 64; the forward's v8). At D = 64 it spilled
  // until P and dS went out by stmatrix (docs/perf-log.md, sm90 backward v6 and v8).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = static_cast<int>(threadIdx.x % 128);
  const int64_t padded = bwd_padded_rows(f.seqlen_q);

  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(prm.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(prm.tma_do.get_tma_descriptor());
    prefetch_tma_descriptor(prm.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(prm.tma_v.get_tma_descriptor());
    if constexpr (Traits::kKvOutByTma) {
      prefetch_tma_descriptor(prm.tma_dk.get_tma_descriptor());
      prefetch_tma_descriptor(prm.tma_dv.get_tma_descriptor());
    }
    FullBarrier::init(&smem.kv_full, 1);
    EmptyBarrier::init(&smem.kv_empty, Traits::kConsumers * 128);
    for (int slot = 0; slot < 2; ++slot) {
      EmptyBarrier::init(&smem.tile_full[slot], 1);
      EmptyBarrier::init(&smem.tile_empty[slot], Traits::kConsumers * 128);
    }
    for (int s = 0; s < kStages; ++s) {
      FullBarrier::init(&smem.full[s], 1);
      EmptyBarrier::init(&smem.empty[s], Traits::kConsumers * 128);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  auto sQ = make_tensor(make_smem_ptr(smem.q), typename Traits::SmemLayoutQStages{});  // (M, D, stage)
  auto sdO = make_tensor(make_smem_ptr(smem.dout), typename Traits::SmemLayoutQStages{});
  auto sK = make_tensor(make_smem_ptr(smem.k), typename Traits::SmemLayoutK{});
  auto sV = make_tensor(make_smem_ptr(smem.v), typename Traits::SmemLayoutK{});

  // The k-th tile of this CTA as the producer published it (for the consumers); tiles >= `tiles` mean none is left.
  auto read_tile = [&](int k) {
    EmptyBarrier::wait(&smem.tile_full[k % 2], (k / 2) % 2);
    const int tile = ld_shared_int(&smem.tile[k % 2]);
    EmptyBarrier::arrive(&smem.tile_empty[k % 2]);
    return tile;
  };

  if (warpgroup == 0) {  // producer
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x != 0) return;
    // The loader: for each tile, its first step's Q, dO, LSE and D (their stage frees a step or more before K and
    // V's buffers do), then K and V once both consumers are done with the previous tile's (kv_empty), then the
    // other steps' rows into the ring, which runs on across tiles (`step` counts the CTA's steps). A tile without
    // steps loads nothing but still takes its turn at K and V's barriers (an arrive with no bytes), so that their
    // phases are the tile's number. The next tile is asked of the counter as this one's last step is loaded (its
    // stage free: the consumers are kStages steps from this tile's end), so that the atomic's round trip runs under
    // those loads and the tile is known before the consumers finish this one. Asked earlier, at the tile's first
    // loads, a CTA would hold its next tile for the whole of a long causal tile while others ran dry (v15: causal
    // rows -1 to -7.5%; docs/perf-log.md, sm90 backward v22).
    const auto q_shape = make_shape(f.seqlen_q, f.head_dim, f.heads_q, f.batch);
    const auto kv_shape = make_shape(f.seqlen_k, f.head_dim, p.heads_kv, f.batch);
    // In the deterministic mode every tile is claimed, the first too, so that tiles start in their numbers' order
    // (ordered dQ waits for lower-numbered tiles only); otherwise CTA c starts on tile c without the atomic.
    int tile = kOrderedDq ? atomicAdd(p.tile_counter, 1) : static_cast<int>(blockIdx.x), step = 0;
    for (int k = 0;; ++k) {
      if (k >= 2) EmptyBarrier::wait(&smem.tile_empty[k % 2], (k / 2 - 1) % 2);  // every reader has tile k - 2
      st_shared_int(&smem.tile[k % 2], tile);
      EmptyBarrier::arrive(&smem.tile_full[k % 2]);
      if (tile >= tiles) return;
      const BwdTile t = BwdTile::at<kBlockM, kBlockN, kRotateRows>(tile, p);
      auto claim_next = [&] {
        return atomicAdd(p.tile_counter, 1) + (kOrderedDq ? 0 : static_cast<int>(gridDim.x));
      };
      int next_tile = t.steps == 0 ? claim_next() : 0;
      auto load_kv = [&] {
        if (k > 0) EmptyBarrier::wait(&smem.kv_empty, (k - 1) % 2);
        if (t.steps == 0) {
          FullBarrier::arrive(&smem.kv_full);
          return;
        }
        auto gK = local_tile(prm.tma_k.get_tma_tensor(kv_shape)(_, _, t.hk, t.b), Shape<N, D>{},
                             make_coord(t.n_block, 0));
        auto gV = local_tile(prm.tma_v.get_tma_tensor(kv_shape)(_, _, t.hk, t.b), Shape<N, D>{},
                             make_coord(t.n_block, 0));
        auto [tKg, tKs] =
            tma_partition(prm.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
        auto [tVg, tVs] =
            tma_partition(prm.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
        FullBarrier::arrive_and_expect_tx(&smem.kv_full, Traits::kKvBytes);
        copy(prm.tma_k.with(smem.kv_full), tKg, tKs);
        copy(prm.tma_v.with(smem.kv_full), tVg, tVs);
      };
      if (t.steps == 0) load_kv();
      int h = t.hk * f.group, row0 = t.row_start;  // the step's query head and first row
      for (int i = 0; i < t.steps; ++i, ++step) {
        const int s = step % kStages;
        if (step >= kStages) EmptyBarrier::wait(&smem.empty[s], (step / kStages - 1) % 2);  // step - kStages is done
        if (i == t.steps - 1) next_tile = claim_next();
        auto gQ = local_tile(prm.tma_q.get_tma_tensor(q_shape)(_, _, h, t.b), Shape<M, D>{},
                             make_coord(row0 / kBlockM, 0));
        auto gdO = local_tile(prm.tma_do.get_tma_tensor(q_shape)(_, _, h, t.b), Shape<M, D>{},
                              make_coord(row0 / kBlockM, 0));
        auto [tQg, tQs] = tma_partition(prm.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ(_, _, s)),
                                        group_modes<0, 2>(gQ));
        auto [tdOg, tdOs] = tma_partition(prm.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdO(_, _, s)),
                                          group_modes<0, 2>(gdO));
        FullBarrier::arrive_and_expect_tx(&smem.full[s], Traits::kStepBytes);
        copy(prm.tma_q.with(smem.full[s]), tQg, tQs);
        copy(prm.tma_do.with(smem.full[s]), tdOg, tdOs);
        const int64_t stats = (static_cast<int64_t>(t.b) * f.heads_q + h) * padded + row0;
        bulk_load(smem.lse2[s], p.lse_log2 + stats, kBlockM * sizeof(float), &smem.full[s]);
        bulk_load(smem.delta[s], p.delta + stats, kBlockM * sizeof(float), &smem.full[s]);
        if (i == 0) load_kv();
        t.next_step<kBlockM, kRotateRows>(row0, h);
      }
      tile = next_tile;
    }
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int w = warpgroup - 1;  // this consumer's keys: the CTA's w-th half (kBlockN / 2 keys)
  using ScoresShape = typename Traits::ScoresShape;
  auto sdS = make_tensor(make_smem_ptr(smem.ds), typename Traits::SmemLayoutDs{});
  auto sdS_qk = make_tensor(make_smem_ptr(smem.ds), typename Traits::SmemLayoutDsForDq{});  // (queries, keys)
  auto sKt = make_tensor(make_smem_ptr(smem.k), typename Traits::SmemLayoutKt{});
  typename Traits::MmaSdP mma_sdp;
  typename Traits::MmaKV mma_kv;
  typename Traits::MmaDQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_kv = mma_kv.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);
  // This consumer's slices of the shared tiles: its keys of K and V, and where its dS goes ((queries, its keys),
  // or transposed, (its keys, queries)).
  auto sK_w = local_tile(sK, Shape<HalfN, D>{}, make_coord(w, 0));
  auto sV_w = local_tile(sV, Shape<HalfN, D>{}, make_coord(w, 0));
  // By product (kSdPByConsumer) consumer 0 writes all of P and dS.
  constexpr bool kSdPByConsumer = Traits::kSdPByConsumer;
  auto sdS_w = local_tile(sdS, ScoresShape{}, make_coord(kScoresT ? w : 0, kScoresT || kSdPByConsumer ? 0 : w));
  // Wide, P goes to shared memory too, and dV and dK read P and dS through transposed views: the consumer's own
  // keys and every column, or split by head-dim rows, all the keys and the consumer's half of the columns
  // (dims_kv: of a Q or dO transposed view (D, M); transposed scores take every column).
  using KvKeys = typename Traits::KvKeys;
  auto sP_w = local_tile(make_tensor(make_smem_ptr(smem.p), typename Traits::SmemLayoutP{}),
                         Shape<M, typename Traits::ScoreKeys>{}, make_coord(0, kSdPByConsumer ? 0 : w));
  auto sPt_kv = local_tile(make_tensor(make_smem_ptr(smem.p), typename Traits::SmemLayoutPt{}), Shape<KvKeys, M>{},
                           make_coord(kKvByDims ? 0 : w, 0));
  auto sdSt_kv = local_tile(make_tensor(make_smem_ptr(smem.ds), typename Traits::SmemLayoutPt{}),
                            Shape<KvKeys, M>{}, make_coord(kKvByDims ? 0 : w, 0));
  auto dims_kv = [&](auto tQt) {
    return local_tile(tQt, Shape<typename Traits::KvDims, M>{}, make_coord(kKvByDims ? w : 0, 0));
  };
  // dQ's operands (DqSplit): dS (64 queries x DqKeys) and K's transposed view (DqCols x DqKeys).
  auto sdS_dq = [&] {
    if constexpr (kDqSplit == DqSplit::kByKeys) return local_tile(sdS_qk, Shape<M, HalfN>{}, make_coord(0, w));
    else if constexpr (kDqSplit == DqSplit::kByRows) return local_tile(sdS_qk, Shape<_64, N>{}, make_coord(w, 0));
    else return sdS_qk;
  }();
  auto sKt_dq = [&] {
    if constexpr (kDqSplit == DqSplit::kByKeys) return local_tile(sKt, Shape<D, HalfN>{}, make_coord(0, w));
    else if constexpr (kDqSplit == DqSplit::kByRows) return sKt;
    else return local_tile(sKt, Shape<DqCols, N>{}, make_coord(w, 0));
  }();
  // The box of dQ this consumer adds: its first row within the step, and its first column.
  const int dq_row0 = kDqSplit == DqSplit::kByRows ? 64 * w : 0;
  const int dq_col0 = kDqSplit == DqSplit::kByColumns ? w * DqCols::value : 0;

  // dK and dV live through a tile's steps; S, dP and dQ are declared in the step loop, so that the registers of one
  // step's S and dP are free for its dQ and the next step's S (a wgmma's accumulator is an asm read-write operand:
  // declared out here they would stay live across steps).
  auto tVrdV = partition_fragment_C(mma_kv, typename Traits::DkvShape{});  // (64 keys, D), or wide (KvDims, KvKeys)
  auto tKrdK = partition_fragment_C(mma_kv, typename Traits::DkvShape{});
  // Element e of S, dP (and P, dS) sits at tScS(e) within ScoresShape: in each 64-row block m = e / kPerBlock a
  // thread holds rows r and r + 8 ((e / 2) % 2 says which), columns 2t and 2t + 1 of each 8-column block (e and
  // e + 1, block e % kPerBlock / 4).
  // Transposed, the rows are the consumer's 64 keys and the columns the step's queries. Untransposed (wide), the
  // rows are queries: row_slot(e) numbers a thread's 2 * kBlockM / 64 rows, and slot_row(slot) is the row (within
  // the step) of a slot.
  auto tScS = thr_sdp.partition_C(make_identity_tensor(ScoresShape{}));
  constexpr int kPerBlock = decltype(size<0>(tScS))::value, kRowSlots = 2 * kBlockM / 64;
  auto row_slot = [](int e) { return (e / 2) % 2 + 2 * (e / kPerBlock); };
  auto slot_row = [&](int slot) { return static_cast<int>(get<0>(tScS(2 * (slot % 2) + kPerBlock * (slot / 2)))); };
  auto query_of = [&](int e) { return static_cast<int>(get<1>(tScS(e))); };  // transposed: e's query in the step
  // P and dS leave the registers by stmatrix: four 8 x 8 blocks of a warp per instruction, each lane giving one
  // 16-byte row's address (the swizzle keeps those rows contiguous), instead of a four-byte store per element
  // pair at a swizzled address computed per pair.
  auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, T>{}, mma_sdp);
  auto thr_stsm = stsm.get_thread_slice(tid);
  auto tPsP = thr_stsm.partition_D(sP_w);
  auto tPsdS = thr_stsm.partition_D(sdS_w);
  // Transposed: when dV, issued as soon as P is made, is waited for. Under dS at D = 96 and 128; at D = 64 (twice
  // the queries a step, so S^T, dP^T, P^T and dS^T take twice the registers) before dS is computed; ptxas
  // serializes every wgmma of the kernel (C7512, too few registers) if dV is still in flight when dS goes to
  // shared memory or, at D = 64, while dS is computed.
  constexpr bool kDvDoneBeforeDs = kBlockM == 128;

  // Ordered dQ (the deterministic mode; at the reductions): the count of additions into a (query head, block of
  // rows) of a batch, and the count this consumer's last reductions went to, not yet incremented.
  // release_turn increments turns_done once every thread of the consumer has issued its reductions (the barrier):
  // thread 0's release is cumulative over what the barrier ordered before it, so the other threads need no fence
  // of their own (the pattern of CUTLASS's GenericBarrier; one thread's fence a step instead of 128).
  auto turn_count = [&](int b, int h, int row0) {
    return p.dq_turns + (static_cast<int64_t>(b) * f.heads_q + h) * (padded / kBwdTurnRows) + row0 / kBwdTurnRows;
  };
  int* turns_done = nullptr;
  auto release_turn = [&] {
    named_sync(1 + w, 128);
    if (tid == 0 && turns_done != nullptr) red_release_gpu_add(turns_done, 1);
    turns_done = nullptr;
  };

  // The tiles. `step` counts the CTA's steps over all of them (the ring of Q and dO stages runs on across
  // tiles); `i` is the step within the tile.
  int step = 0, k = 0;
  for (;; ++k) {
    const int tile = read_tile(k);
    if (tile >= tiles) break;
    const BwdTile t = BwdTile::at<kBlockM, kBlockN, kRotateRows>(tile, p);
    const int b = t.b, hk = t.hk, key0 = t.key0, steps = t.steps;
    const int key_w0 = key0 + w * (kBlockN / 2);  // this consumer's first key
    const int score_key0 = kSdPByConsumer ? key0 : key_w0;  // the first key of this consumer's scores
    clear(tVrdV);
    clear(tKrdK);
    // K and V of this tile. Loaded once both consumers were done with the previous tile's (kv_empty, below): so no
    // product of the previous tile still reads dS (or, wide, P) either when the first step rewrites them.
    FullBarrier::wait(&smem.kv_full, k % 2);
    int h = hk * f.group, row0 = t.row_start;
    for (int i = 0; i < steps; ++i, ++step) {
      const int s = step % kStages;
      // Ordered dQ: the count of this step's rows, read early by thread 0 so that its round trip runs under the
      // products (a relaxed load waits for nothing until its value is used, at the reductions).
      int turns_seen = 0;
      if (kOrderedDq && tid == 0) turns_seen = ld_relaxed_gpu(turn_count(b, h, row0));
      FullBarrier::wait(&smem.full[s], (step / kStages) % 2);
      auto sQt = dims_kv(make_tensor(sQ(_, _, s).data(), typename Traits::SmemLayoutQt{}));
      auto sdOt = dims_kv(make_tensor(sdO(_, _, s).data(), typename Traits::SmemLayoutQt{}));
      auto tSrS = partition_fragment_C(mma_sdp, ScoresShape{});  // (MMA, kBlockM / 64, 1), transposed (MMA, 1, 1)
      auto tSrdP = partition_fragment_C(mma_sdp, ScoresShape{});
      if constexpr (kScoresT) {
        issue_mma(mma_sdp, thr_sdp.partition_fragment_A(sK_w), thr_sdp.partition_fragment_B(sQ(_, _, s)), tSrS, false);
        issue_mma(mma_sdp, thr_sdp.partition_fragment_A(sV_w), thr_sdp.partition_fragment_B(sdO(_, _, s)), tSrdP,
                  false);
      } else if constexpr (kSdPByConsumer) {  // consumer 0's S, consumer 1's dP, both into tSrS
        auto sRows = make_tensor(make_smem_ptr(w == 0 ? smem.q : smem.dout), typename Traits::SmemLayoutQStages{});
        auto sKeys = make_tensor(make_smem_ptr(w == 0 ? smem.k : smem.v), typename Traits::SmemLayoutK{});
        issue_mma(mma_sdp, thr_sdp.partition_fragment_A(sRows(_, _, s)), thr_sdp.partition_fragment_B(sKeys), tSrS,
                  false);
      } else {
        issue_mma(mma_sdp, thr_sdp.partition_fragment_A(sQ(_, _, s)), thr_sdp.partition_fragment_B(sK_w), tSrS, false);
        issue_mma(mma_sdp, thr_sdp.partition_fragment_A(sdO(_, _, s)), thr_sdp.partition_fragment_B(sV_w), tSrdP,
                  false);
      }
      const int last_query = min(row0 + kBlockM, f.seqlen_q) - 1;
      constexpr int kScoreKeys = Traits::kScoreKeys;
      const bool full_tile = last_query + f.key_offset - f.window_left <= score_key0 &&
                             row0 + f.key_offset + f.window_right >= score_key0 + kScoreKeys - 1 &&
                             score_key0 + kScoreKeys <= f.seqlen_k;
      auto rP = make_tensor_like<T>(tSrS);
      auto rdS = make_tensor_like<T>(tSrS);
      // Transposed: S^T -> softcap, mask, and (without a softcap) P^T in place while dP^T is still on the tensor
      // cores; then dV is issued on P^T, dS^T computed while it runs (from the fp32 P^T), and dS^T goes to shared
      // memory for dQ once the consumers whose dQ read the previous step's are done (the step barrier where both
      // read it, else the consumer's own). The LSE and
      // D are per column (query): each column pair's in one 8-byte load where it is used (ld_shared_pair).
      auto grads_t = [&](auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
        auto issue_dv = [&] {
          issue_mma(mma_kv, acc_as_a_operand(rP), thr_kv.partition_fragment_B(sdOt), tVrdV, true);
        };
        // The queries that see each of this thread's two keys, relative to its first column (QueriesSeeingKey: two
        // compares per element, as VisibleKeys from the query's side).
        QueriesSeeingKey seen[2];
        if (kMasked) {
          CUTE_UNROLL
          for (int half = 0; half < 2; ++half)
            seen[half] = QueriesSeeingKey(f, key_w0 + static_cast<int>(get<0>(tScS(2 * half))), row0 + query_of(0));
        }
        // At D = 128 the LSE pairs are loaded while S^T is still on the tensor cores: loaded after its wait, their
        // address (the thread index, re-read by S2R) and the loads' latency sat on the step's path (session 52's
        // profile: 7.4% of the stall samples). The 16 registers they hold through the wait spilled at D = 64 and
        // in the deterministic mode.
        constexpr bool kLseEarly = !kSoftcap && !kOrderedDq && Traits::kHeadDim == 128;
        float2 lse2s[size(tSrS) / 4];
        if constexpr (kLseEarly) {
          CUTE_UNROLL
          for (int pair = 0; pair < size(tSrS) / 4; ++pair)
            lse2s[pair] = ld_shared_pair(&smem.lse2[s][query_of(4 * pair)]);
        }
        warpgroup_wait<1>();
        warpgroup_fence_operand(tSrS);
        CUTE_UNROLL
        for (int pair = 0; pair < size(tSrS) / 4; ++pair) {
          const float2 lse2 = kLseEarly ? lse2s[pair] : ld_shared_pair(&smem.lse2[s][query_of(4 * pair)]);
          CUTE_UNROLL
          for (int e = 4 * pair; e < 4 * pair + 4; ++e) {
            float x = tSrS(e);
            if (kSoftcap) x = f.softcap * tanhf(x * f.scale_over_cap);
            if (kMasked) x = seen[(e / 2) % 2].sees(query_of(e) - query_of(0)) ? x : -INFINITY;
            tSrS(e) = kSoftcap ? x : exp2_approx(fmaf(x, f.scale_log2, -(e % 2 ? lse2.y : lse2.x)));
          }
        }
        if constexpr (!kSoftcap) {
          CUTE_UNROLL
          for (int e = 0; e < size(tSrS); ++e) rP(e) = T(tSrS(e));
          issue_dv();
        }
        warpgroup_wait<kSoftcap ? 0 : 1>();  // dP^T (dV may run on)
        warpgroup_fence_operand(tSrdP);
        if constexpr (!kSoftcap && kDvDoneBeforeDs) {
          warpgroup_wait<0>();
          warpgroup_fence_operand(tVrdV);
        }
        CUTE_UNROLL
        for (int pair = 0; pair < size(tSrS) / 4; ++pair) {
          const float2 delta = ld_shared_pair(&smem.delta[s][query_of(4 * pair)]);
          float2 lse2;
          if (kSoftcap) lse2 = ld_shared_pair(&smem.lse2[s][query_of(4 * pair)]);
          CUTE_UNROLL
          for (int e = 4 * pair; e < 4 * pair + 4; ++e) {
            const float x = tSrS(e);
            const float prob = kSoftcap ? exp2_approx(fmaf(x, f.scale_log2, -(e % 2 ? lse2.y : lse2.x))) : x;
            if (kSoftcap) rP(e) = T(prob);
            rdS(e) = T(sm80::grad_score<kSoftcap, kMasked>(prob, tSrdP(e), e % 2 ? delta.y : delta.x, x, f));
          }
        }
        if constexpr (kSoftcap) issue_dv();
        warpgroup_wait<0>();
        warpgroup_fence_operand(tVrdV);
        // dS^T is rewritten once every warp of both consumers (kSharedDs: the step barrier) or of this one is
        // past the previous step's dQ, which read it (a warp's wgmma wait covers its own share only).
        if (i > 0) named_sync(kSharedDs ? kStepBarrier + w : 1 + w, kSharedDs ? 2 * 128 : 128);
        copy(stsm, thr_stsm.retile_S(rdS), tPsdS);
      };
      // Untransposed (wide): S -> softcap, mask, and (without a softcap) P in place while dP is still on the tensor
      // cores; then dS, P and dS in T in registers, and once the products of the previous step that read them are
      // done (the step barrier, or this consumer's own), both into shared memory by stmatrix. Under a softcap S
      // keeps the capped scores until dS, which needs them (grad_score).
      auto grads = [&](auto masked) {
        constexpr bool kMasked = decltype(masked)::value;
        float lse2[kRowSlots], delta[kRowSlots];  // this thread's rows
        CUTE_UNROLL
        for (int slot = 0; slot < kRowSlots; ++slot) {
          lse2[slot] = smem.lse2[s][slot_row(slot)];
          delta[slot] = smem.delta[s][slot_row(slot)];
        }
        // Each of this thread's rows tests its elements against the keys it sees relative to the thread's first
        // column (VisibleKeys), so an element costs two compares against a constant offset (absolute coordinates
        // per element cost more instructions and, at D = 64, registers).
        VisibleKeys visible[kRowSlots];
        if (kMasked) {
          const int key_first = score_key0 + get<1>(tScS(0));
          CUTE_UNROLL
          for (int slot = 0; slot < kRowSlots; ++slot) visible[slot] = VisibleKeys(f, row0 + slot_row(slot), key_first);
        }
        warpgroup_wait<kSdPByConsumer ? 0 : 1>();  // S (by product, the only product in flight)
        warpgroup_fence_operand(tSrS);
        CUTE_UNROLL
        for (int e = 0; e < size(tSrS); ++e) {
          float x = tSrS(e);
          if (kSoftcap) x = f.softcap * tanhf(x * f.scale_over_cap);
          if (kMasked) x = visible[row_slot(e)].sees(get<1>(tScS(e)) - get<1>(tScS(0))) ? x : -INFINITY;
          tSrS(e) = kSoftcap ? x : exp2_approx(fmaf(x, f.scale_log2, -lse2[row_slot(e)]));
        }
        if constexpr (kSdPByConsumer) {
          named_sync(kDpBarrier, 2 * 128);  // consumer 1's dP is in dp_x (pass_dp)
        } else {
          warpgroup_wait<0>();
          warpgroup_fence_operand(tSrdP);
        }
        CUTE_UNROLL
        for (int e0 = 0; e0 < size(tSrS); e0 += 4) {
          float dp[4];
          if constexpr (kSdPByConsumer) {
            const float4 v = reinterpret_cast<const float4*>(smem.dp_x)[e0 / 4 * 128 + tid];
            dp[0] = v.x, dp[1] = v.y, dp[2] = v.z, dp[3] = v.w;
          } else {
            CUTE_UNROLL
            for (int j = 0; j < 4; ++j) dp[j] = tSrdP(e0 + j);
          }
          CUTE_UNROLL
          for (int e = e0; e < e0 + 4; ++e) {
            const float x = tSrS(e);
            const float prob = kSoftcap ? exp2_approx(fmaf(x, f.scale_log2, -lse2[row_slot(e)])) : x;
            rP(e) = T(prob);
            rdS(e) = T(sm80::grad_score<kSoftcap, kMasked>(prob, dp[e - e0], delta[row_slot(e)], x, f));
          }
        }
        if (kSharedDs && i > 0) named_sync(kStepBarrier + w, 2 * 128);
        if (!kSharedDs && i > 0) named_sync(1 + w, 128);
        copy(stsm, thr_stsm.retile_S(rP), tPsP);
        copy(stsm, thr_stsm.retile_S(rdS), tPsdS);
      };
      auto step_grads = [&](auto masked) {
        if constexpr (kScoresT)
          grads_t(masked);
        else
          grads(masked);
      };
      // By product, consumer 1 hands its dP to consumer 0 instead. dp_x is free: consumer 0 read the previous
      // step's before that step's kDsBarrier, which this consumer has passed since.
      auto pass_dp = [&] {
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrS);
        float4* dp_x = reinterpret_cast<float4*>(smem.dp_x) + tid;
        CUTE_UNROLL
        for (int e = 0; e < size(tSrS); e += 4)
          dp_x[e / 4 * 128] = make_float4(tSrS(e), tSrS(e + 1), tSrS(e + 2), tSrS(e + 3));
        asm volatile("bar.arrive %0, %1;\n" ::"r"(kDpBarrier), "r"(2 * 128));
      };
      if (kSdPByConsumer && w == 1)
        pass_dp();
      else if (full_tile)
        step_grads(std::false_type{});
      else
        step_grads(std::true_type{});
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> async-proxy reads (wgmma)
      // The shared tiles the products read are in place. Transposed, only dQ reads dS^T: both consumers' where
      // their dQ needs both (kSharedDs), else this consumer's. Untransposed, dV and dK read this consumer's P and
      // dS (by head-dim rows, both consumers'), and dQ the other's dS too (below).
      // dQ is issued before dK (transposed: from dS^T's registers), or at D = 256 before dV and dK, and waited for
      // alone, so that its reductions below run while they are on the tensor cores (wgmma groups complete in the
      // order they were committed). At D = 192 dQ waits for the other consumer's dS (kDsBarrier), so it goes last.
      auto tQrdQ = partition_fragment_C(mma_dq, Shape<_64, DqCols>{});
      auto issue_dq = [&] {
        issue_mma(mma_dq, thr_dq.partition_fragment_A(sdS_dq), thr_dq.partition_fragment_B(sKt_dq), tQrdQ, false);
      };
      constexpr bool kDqFirst = kScoresT || kKvByDims;
      if constexpr (kScoresT) {
        named_sync(kSharedDs ? kDsBarrier : 1 + w, kSharedDs ? 2 * 128 : 128);
        issue_dq();
        issue_mma(mma_kv, acc_as_a_operand(rdS), thr_kv.partition_fragment_B(sQt), tKrdK, true);
      } else {
        named_sync(kKvByDims ? kDsBarrier : 1 + w, kKvByDims ? 2 * 128 : 128);
        if (kDqFirst) issue_dq();
        issue_mma(mma_kv, thr_kv.partition_fragment_A(sdOt), thr_kv.partition_fragment_B(sPt_kv), tVrdV, true);
        issue_mma(mma_kv, thr_kv.partition_fragment_A(sQt), thr_kv.partition_fragment_B(sdSt_kv), tKrdK, true);
        if (kSharedDs && !kKvByDims) named_sync(kDsBarrier, 2 * 128);
        if (!kDqFirst) issue_dq();
      }
      auto kv_done = [&] {  // dV and dK are complete, so this stage's Q, dO, LSE and D are read
        warpgroup_wait<0>();
        warpgroup_fence_operand(tVrdV);
        warpgroup_fence_operand(tKrdK);
        // kKvOutFromStage: the tile's last stage is released after the stores it stages (the tile's end)
        if (!Traits::kKvOutFromStage || i + 1 < steps) EmptyBarrier::arrive(&smem.empty[s]);
      };
      if constexpr (kDqFirst)
        warpgroup_wait<kScoresT ? 1 : 2>();  // dQ
      else
        kv_done();
      warpgroup_fence_operand(tQrdQ);
      // The other consumer may rewrite its dS (and P) once this consumer's products that read them are done: dQ,
      // and by head-dim rows dV and dK too, which with dQ first are waited for after the reductions.
      constexpr bool kArriveAfterKv = kKvByDims && kDqFirst;
      auto arrive_step = [&] {  // by product, consumer 1 only (consumer 0 writes P and dS)
        if (kSharedDs && i + 1 < steps && !(kSdPByConsumer && w == 0))
          asm volatile("bar.arrive %0, %1;\n" ::"r"(kStepBarrier + 1 - w), "r"(2 * 128));
      };
      if (!kArriveAfterKv) arrive_step();

      // The reductions: this warp's 16 rows of the box (one band of the fragment order; rows past the sequence
      // end within a real band add into its padding), an 8-column block a reduction, the accumulator's four
      // registers of the block as they are (tests/backends/cuda/sm90_bwd_layout_test.cu checks the fragment's
      // order). No branch stands between them: each would wait for the reductions before it to read their
      // registers (the sm80 backward's v5), so a head dim below kHeadDim takes a copy with the column test.
      // Up to D = 128 written as red.global (inline PTX), not atomicAdd: beside the deterministic mode's fences
      // the compiler kept atomicAdd's unused result, an ATOMG each, whose replies each step's first turn read
      // waited for; as REDG that mode ran 1.02x faster at D = 64 and 1.05x at 128, but 0.97x at D = 256 (S = 8k
      // full 0.88x; docs/perf-log.md, backward v26d, not explained), so D = 192 and 256 keep atomicAdd. The
      // default kernels compile to the same SASS either way.
      // Split by keys (D = 96) both consumers add into the same box.
      const int band0 = row0 + dq_row0 + 16 * (tid / 32), col0 = dq_col0;
      float* dq_band = p.dq_accum +
                       (static_cast<int64_t>(b) * f.heads_q + h) * sm80::dq_accum_fragment_rows(f.seqlen_q) *
                           f.head_dim +
                       static_cast<int64_t>(band0) * f.head_dim + col0 * 16 + (tid % 32) * 4;
      auto reduce = [&](auto all_columns) {
        CUTE_UNROLL
        for (int block = 0; block < DqCols::value / 8; ++block) {
          if (!decltype(all_columns)::value && col0 + 8 * block >= f.head_dim) break;
          const float4 v = make_float4(tQrdQ(4 * block), tQrdQ(4 * block + 1), tQrdQ(4 * block + 2),
                                       tQrdQ(4 * block + 3));
          if constexpr (Traits::kHeadDim <= 128)
            sm80::red_add_global(__cvta_generic_to_global(dq_band + block * 128), v);
          else
            sm80::red_add(dq_band + block * 128, v);
        }
      };
      // Ordered dQ (the deterministic mode): the key blocks whose steps reach this block of rows (a range from
      // BwdTile::first_block_reaching) add in key block order, each once the count of this (batch, head, row block)
      // shows the blocks before it done, both consumers of each (2 a block); split by keys, where both consumers add
      // into one box, consumer 1 also waits for consumer 0 (whose increment is not deferred, below). The tiles go key
      // block major (the launcher's tail_heads), so with more heads than CTAs a head's block n starts a round after its
      // block n - 1 and finds its rows done: under a causal mask block n - 1 is also the longer, and a head's blocks
      // running at once would wait for each other in a chain (session 34's v26: 1.6-2.3x the default's time). Thread 0
      // polls the count (its first read was issued at the step's top) while the consumer's barrier holds the others. A
      // step's increment is deferred to the next step's reductions (or the tile's end): by then its own reductions are
      // long done, so the release (thread 0's fence) does not wait for their round trips. A tile waits only for tiles
      // numbered below it, every tile is claimed from the counter (the producer), and a step's increment waits at most
      // for the next step's turn in the same tile, so the lowest unfinished tile never waits: no deadlock, whichever
      // CTAs are resident.
      if constexpr (kOrderedDq) {
        if (tid == 0) {
          const int turn = 2 * (t.n_block - BwdTile::first_block_reaching<kBlockN>(row0, f)) +
                           (kDqSplit == DqSplit::kByKeys ? w : 0);
          while (turns_seen < turn) turns_seen = ld_relaxed_gpu(turn_count(b, h, row0));
          fence_acq_rel_gpu();  // the acquire: the blocks before are done, for the consumer (the barrier below)
        }
        release_turn();
        turns_done = turn_count(b, h, row0);
      }
      if (band0 < f.seqlen_q) {
        if (col0 + DqCols::value <= f.head_dim)
          reduce(std::true_type{});
        else
          reduce(std::false_type{});
      }
      if constexpr (kDqFirst) kv_done();
      // Split by keys consumer 1 adds into consumer 0's box right after it, in the same step: consumer 0's
      // increment cannot wait for its next step then (consumer 1 would run a step behind), so it goes now, after
      // the step's last products (the release waits for its reductions).
      if constexpr (kOrderedDq && kDqSplit == DqSplit::kByKeys)
        if (w == 0) release_turn();
      if (kArriveAfterKv) arrive_step();
      t.next_step<kBlockM, kRotateRows>(row0, h);
    }
    // With the step barriers (kSharedDs), each consumer waits at its own in steps 1 .. steps - 1 and the other
    // arrives there after steps 0 .. steps - 2 (by product, consumer 0 waits and consumer 1 arrives), so none is
    // left open here.
    EmptyBarrier::arrive(&smem.kv_empty);  // every product of this consumer that read K and V is done (kv_done)
    if constexpr (kOrderedDq) release_turn();  // the tile's last step's turn

    // dK (times the softmax scale, which dS left out) and dV of this consumer's keys (by head-dim rows: its half of
    // the columns, of all the CTA's keys).
    // Shared by the TMA store paths: an accumulator times the scale, in T, and one box of dk or dv stored by TMA from
    // its staged copy sOut, at box coordinate `at` of the (batch, K/V head)'s (keys, dim) tensor.
    auto scaled = [](auto& acc, float scale) {
      auto r = make_tensor_like<T>(acc);
      CUTE_UNROLL
      for (int e = 0; e < size(acc); ++e) r(e) = T(acc(e) * scale);
      return r;
    };
    const auto kv_shape = make_shape(f.seqlen_k, f.head_dim, p.heads_kv, f.batch);
    auto tma_store_box = [&](const auto& tma, const auto& sOut, auto at) {
      auto g = local_tile(tma.get_tma_tensor(kv_shape)(_, _, hk, b), product_each(shape(sOut)), at);
      auto [tg, ts] = tma_partition(tma, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sOut), group_modes<0, 2>(g));
      copy(tma, ts, tg);
    };
    if constexpr (kWide) {
      // Two columns per store, where an accumulator's neighbours are two keys of one column, after a shuffle.
      CudaT* dk_head = static_cast<CudaT*>(p.dk) + b * p.dk_stride[0] + hk * p.dk_stride[2];
      CudaT* dv_head = static_cast<CudaT*>(p.dv) + b * p.dv_stride[0] + hk * p.dv_stride[2];
      auto tKcK = thr_kv.partition_C(make_identity_tensor(typename Traits::DkvShape{}));
      // Elements e and e + 1 are one dim's two neighbouring keys, and the lane 4 apart (the accumulator's row r ^ 1:
      // lane = 4 r + t) holds the neighbouring dim's. One shuffle per pair swaps them, so that each thread holds
      // two neighbouring dims of one key and stores them together: the even row's lane key 2t, the odd row's lane
      // key 2t + 1, both at the even dim (head_dim is a multiple of 8, so the pair is inside the row).
      const bool odd_row = (tid / 4) % 2 != 0;
      auto store_pair = [&](CudaT* head, int64_t row_stride, float mine_key0, float mine_key1, float scale, int e) {
        const float theirs = __shfl_xor_sync(0xffffffffu, odd_row ? mine_key0 : mine_key1, 4);
        const int col = (kKvByDims ? w * Traits::kKvDims : 0) + get<0>(tKcK(e)) - (odd_row ? 1 : 0);
        const int key = (kKvByDims ? key0 : key_w0) + get<1>(tKcK(e)) + (odd_row ? 1 : 0);
        if (key < f.seqlen_k && col < f.head_dim)
          *reinterpret_cast<uint32_t*>(head + key * row_stride + col) =
              odd_row ? sm80::pack2<CudaT>(theirs * scale, mine_key1 * scale)
                      : sm80::pack2<CudaT>(mine_key0 * scale, theirs * scale);
      };
      bool staged = false;
      if constexpr (Traits::kKvOutFromStage) {
        if (steps > 0) {
          // From the last step's Q (dK) and dO (dV) buffers, this consumer's columns: stmatrix transposes each 8 x 8
          // block (the accumulators are (dim, key)); one thread stores both boxes and waits until they are read; then
          // the stage is released.
          const int s_last = (step - 1) % kStages;
          auto box = [&](T* buffer) {  // this consumer's (keys, dims) box in the stage's buffer
            return make_smem_ptr(buffer + s_last * cosize_v<typename Traits::SmemLayoutQ> +
                                 w * cosize_v<typename Traits::SmemLayoutKvOut>);
          };
          auto stage_out = [&](auto& acc, float scale, T* buffer) {
            auto sOutT = make_tensor(box(buffer), typename Traits::SmemLayoutKvOutT{});
            auto stsm_t = make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, T>{}, mma_kv);
            auto thr_stsm_t = stsm_t.get_thread_slice(tid);
            copy(stsm_t, thr_stsm_t.retile_S(scaled(acc, scale)), thr_stsm_t.partition_D(sOutT));
          };
          stage_out(tKrdK, p.scale, smem.q);
          stage_out(tVrdV, 1.0f, smem.dout);
          cutlass::arch::fence_view_async_shared();  // the generic-proxy writes above, visible to the TMA unit
          named_sync(1 + w, 128);
          if (tid == 0) {
            using Box = typename Traits::SmemLayoutKvOut;
            tma_store_box(prm.tma_dk, make_tensor(box(smem.q), Box{}), make_coord(t.n_block, w));
            tma_store_box(prm.tma_dv, make_tensor(box(smem.dout), Box{}), make_coord(t.n_block, w));
            tma_store_arrive();
            tma_store_wait<0>();
          }
          named_sync(1 + w, 128);
          EmptyBarrier::arrive(&smem.empty[s_last]);
          staged = true;
        }
      }
      if (!staged) {  // D = 192, or a tile without steps (no stage to stage in: its dK and dV are zeros)
        CUTE_UNROLL
        for (int e = 0; e < size(tKrdK); e += 2) {
          store_pair(dk_head, p.dk_stride[1], tKrdK(e), tKrdK(e + 1), p.scale, e);
          store_pair(dv_head, p.dv_stride[1], tVrdV(e), tVrdV(e + 1), 1.0f, e);
        }
      }
    } else {
      // Transposed: through this consumer's half of the staging buffer (TmaKvOut), dK then dV. The TMA clips keys
      // past seqlen_k and columns past head_dim. The buffer is free once the previous tile's dV store has read it,
      // and dK's store must have read it before dV goes in; the storing thread waits, the barrier holds the others.
      auto sOut = make_tensor(
          make_smem_ptr(smem.kv_out + (Traits::kTakeTurns ? 0 : w) * cosize_v<typename Traits::SmemLayoutKvOut>),
          typename Traits::SmemLayoutKvOut{});
      auto stsm_kv = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, T>{}, mma_kv);
      auto thr_stsm_kv = stsm_kv.get_thread_slice(tid);
      auto tOsOut = thr_stsm_kv.partition_D(sOut);
      auto store = [&](auto& acc, float scale, const auto& tma) {
        if (tid == 0) tma_store_wait<0>();
        named_sync(1 + w, 128);
        copy(stsm_kv, thr_stsm_kv.retile_S(scaled(acc, scale)), tOsOut);
        cutlass::arch::fence_view_async_shared();  // the generic-proxy writes above, visible to the TMA unit
        named_sync(1 + w, 128);
        if (tid == 0) {
          tma_store_box(tma, sOut, make_coord(key_w0 / (kBlockN / 2), 0));
          tma_store_arrive();
        }
      };
      // Taking turns (one half): consumer 1 after consumer 0's stores have read the buffer, consumer 0 after
      // consumer 1's of the previous tile. The storing thread's warp arrives for the consumer (160 threads).
      if constexpr (Traits::kTakeTurns) {
        if (w == 1) named_sync(kTurnBarrier, 128 + 32);
        else if (k > 0) named_sync(kTurnBarrier + 1, 128 + 32);
      }
      store(tKrdK, p.scale, prm.tma_dk);
      store(tVrdV, 1.0f, prm.tma_dv);
      if constexpr (Traits::kTakeTurns) {
        if (tid < 32) {
          if (tid == 0) tma_store_wait<0>();
          __syncwarp();
          asm volatile("bar.arrive %0, %1;\n" ::"r"(kTurnBarrier + w), "r"(128 + 32));
        }
      }
    }
  }
  // The last tile's dV store must have read the staging buffer before the CTA's shared memory goes (taking turns,
  // consumer 0 waits for consumer 1's, so that every arrival has its wait).
  if constexpr (kScoresT) {
    if (tid == 0) tma_store_wait<0>();
    if (Traits::kTakeTurns && w == 0 && k > 0) named_sync(kTurnBarrier + 1, 128 + 32);
  }
#endif
}

}  // namespace flashtile::cuda::sm90
