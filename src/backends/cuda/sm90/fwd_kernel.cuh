// The sm90 forward kernel (H100, H200): the FlashAttention-2 schedule on Hopper's machinery.
//   - persistent: one CTA per SM takes tiles (query block of kBlockM = 64 x consumers rows, batch x head) while
//     there are any, the next one from a counter once it is free (tile_counter.hpp); tiles run head by head when
//     every tile has the same work (the CTAs at work at one time share a few heads' K and V in L2), under a mask
//     longest first within chunks of heads whose K and V fit in L2 (fwd_tile_chunks.hpp), so that the short
//     tiles fill the end.
//     A CTA's producer loads the next tile's first K/V tiles, and its Q where a second Q buffer fits (D <= 128;
//     at D = 192 and 256 once the current tile's O has left the one buffer), while its consumers finish the
//     current tile, so a tile's prologue and epilogue overlap its neighbours' (a fresh CTA per tile would
//     expose them: one CTA fills an SM's registers);
//   - warp specialization: warpgroup 0 is the producer. It gives its registers away (setmaxnreg) and one
//     thread issues every copy: Q once, then K and V tiles by TMA into a kStages-deep mbarrier pipeline
//     (cutlass::PipelineTmaAsync), K/V for GQA from head h / group;
//   - warpgroups 1 and 2 are consumers (also 3 in D = 64's long variant: FwdConfig, fwd_launch.cuh), 64 query
//     rows each: S = Q K^T on wgmma from shared memory, the online softmax in registers (exp2, the scale folded
//     into one FMA, each row's max and sum reduced in a tree, O rescaled under the next product, at D >= 128
//     only when a row's max grew by more than 8 in log2 units (its weight by more than 2^8), one division per
//     row at the end), then O += P V on wgmma with P taken from registers. Each tile's scores are issued before
//     the previous tile's P V, so its softmax runs while the tensor cores work (kOverlap; the harness also
//     measures kPingPong, the two warpgroups taking turns at issuing their products);
//   - masks (causal, sliding window, the sequence end) only on tiles that need them; softcap before the mask;
//     tiles the mask hides entirely are never loaded;
//   - the epilogue writes O into the tile's Q buffer and stores it by TMA, so the consumers start the next tile
//     while the writes land.
// Shared memory (T = bf16 or fp16), rows of the head dim swizzled (128-byte swizzle, 64-byte for D = 96):
//   sQ [kQStages] (kBlockM x kHeadDim), sK [kStages] (kBlockN x kHeadDim), sV [kStages] (kBlockN x kHeadDim,
//   read transposed as kHeadDim x kBlockN: MN-major for P V's B operand)
// Registers per consumer thread: S (64 x kBlockN) kBlockN / 2 floats, O (64 x kHeadDim) kHeadDim / 2 floats.
#pragma once

#include <cute/tensor.hpp>  // first: the atom headers below expect it
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include <cmath>
#include <type_traits>
#include <utility>

#include "backends/cuda/fwd_kernel_params.hpp"
#include "backends/cuda/fwd_tile_order.cuh"
#include "backends/cuda/quad_reduce.cuh"
#include "backends/cuda/sm90/fwd_config.hpp"
#include "backends/cuda/sm90/fwd_tile_chunks.hpp"
#include "backends/cuda/tree_reduce.cuh"
#include "backends/cuda/visible_keys.hpp"

namespace flashtile::cuda::sm90 {

// Everything one kernel variant is made of: dtype (cutlass::bfloat16_t or cutlass::half_t), head dim and
// consumer warpgroups (FwdConfig's kConsumers or kConsumersLong).
template <typename T, int kHeadDim_, int kConsumers_ = FwdConfig<kHeadDim_>::kConsumers>
struct FwdTraits {
  using Element = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = FwdConfig<kHeadDim>::kBlockN, kStages = FwdConfig<kHeadDim>::kStages;
  static constexpr int kConsumers = kConsumers_, kBlockM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // setmaxnreg's share of the SM's 64 K registers: the producer keeps 24 a thread, the consumers split the rest
  // (a multiple of 8): 240 with two consumer warpgroups, 160 with three.
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 64 * 1024, "registers of one CTA per SM");
  // The CTA double-buffers Q where shared memory allows (under the 227 KB of a Hopper CTA, less 1 KB for the
  // barriers), so the next tile's Q loads while the current tile runs; otherwise (D = 192 and 256: 2 x 64 KB of
  // Q and 128 KB of K/V at 256) the next Q loads once the current tile's O, staged in its buffer, has been stored.
  static constexpr int kQBytes = kBlockM * kHeadDim * sizeof(T);
  static constexpr int kKVBytes = 2 * kStages * kBlockN * kHeadDim * sizeof(T);
  static constexpr int kQStages = 2 * kQBytes + kKVBytes <= 226 * 1024 ? 2 : 1;
  static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0, "swizzle atoms span 32 or 64 columns; P V steps 16 keys");

  // Q, K and V stored with the head dim contiguous: K-major for S = Q K^T, and V's transposed view (head dim x
  // keys) is MN-major for P V's B operand.
  using SwizzleAtom = std::conditional_t<kHeadDim % 64 == 0, cute::GMMA::Layout_K_SW128_Atom<T>,
                                         cute::GMMA::Layout_K_SW64_Atom<T>>;
  using M = cute::Int<kBlockM>;
  using N = cute::Int<kBlockN>;
  using D = cute::Int<kHeadDim>;
  using S = cute::Int<kStages>;
  using SmemLayoutQ = decltype(cute::tile_to_shape(SwizzleAtom{}, cute::Shape<M, D>{}));
  using SmemLayoutQStages =
      decltype(cute::tile_to_shape(SwizzleAtom{}, cute::Shape<M, D, cute::Int<kQStages>>{}));
  using SmemLayoutKV = decltype(cute::tile_to_shape(SwizzleAtom{}, cute::Shape<N, D, S>{}));
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutKV{}, cute::make_ordered_layout(cute::Shape<D, N, S>{}, cute::Step<cute::_2, cute::_1, cute::_3>{})));

  // One consumer warpgroup's products: S (64 x kBlockN) from shared memory; O (64 x kHeadDim) from P in
  // registers and V.
  using MmaQK = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, N, D>>()));
  static_assert(kBlockN % 32 == 0, "P V over half a key tile (Consumer::first_half_only) steps 16 keys");
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<T, T, float, cute::Shape<cute::_64, D, N>, cute::GMMA::Major::K,
                                 cute::GMMA::Major::MN>()));

  // q, k or v as (seqlen, head dim, heads, batch) over its strides: what the TMA descriptors describe. The head
  // dim is the call's (columns past it are zero-filled up to kHeadDim).
  static auto gmem_tensor(const void* ptr, int seqlen, int head_dim, int heads, int batch, const int64_t* stride) {
    using namespace cute;
    return cute::make_tensor(make_gmem_ptr(static_cast<const T*>(ptr)),
                       make_layout(make_shape(seqlen, head_dim, heads, batch),
                                   make_stride(stride[1], _1{}, stride[2], stride[0])));
  }
  using GmemTensor = decltype(gmem_tensor(nullptr, 1, 1, 1, 1, nullptr));
  // o likewise, writable: the TMA store of the epilogue, from a warpgroup's rows of a Q buffer.
  static auto gmem_tensor_out(void* ptr, int seqlen, int head_dim, int heads, int batch, const int64_t* stride) {
    using namespace cute;
    return cute::make_tensor(make_gmem_ptr(static_cast<T*>(ptr)),
                             make_layout(make_shape(seqlen, head_dim, heads, batch),
                                         make_stride(stride[1], _1{}, stride[2], stride[0])));
  }
  using GmemTensorOut = decltype(gmem_tensor_out(nullptr, 1, 1, 1, 1, nullptr));
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, std::declval<GmemTensor>(), SmemLayoutQ{}));
  // O leaves by TMA a warpgroup at a time (its 64 rows of the tile's Q buffer), so that neither waits for the
  // other at the tile's end.
  using SmemLayoutO = decltype(cute::tile_to_shape(SwizzleAtom{}, cute::Shape<cute::_64, D>{}));
  using TmaO = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, std::declval<GmemTensorOut>(), SmemLayoutO{}));
  using TmaKV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, std::declval<GmemTensor>(),
                                             cute::take<0, 2>(SmemLayoutKV{})));
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    alignas(1024) T q[cute::cosize_v<SmemLayoutQStages>];
    alignas(1024) T k[cute::cosize_v<SmemLayoutKV>];
    alignas(1024) T v[cute::cosize_v<SmemLayoutKV>];
    // mbarriers per Q buffer: its tile's Q has landed; every consumer thread is done reading it. A CTA's tile
    // number i uses buffer i % kQStages, in phase (i / kQStages) % 2.
    alignas(16) uint64_t q_full[kQStages];
    uint64_t q_empty[kQStages];
    // Per Q buffer, the tile whose Q it holds, decoded by the producer (which takes the tile numbers) and read by
    // the consumers once q_full completes; row0 < 0: the CTA has no more tiles.
    CtaBlock tile[kQStages];
    typename Pipeline::SharedStorage pipeline_k, pipeline_v;
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);

  struct Params {
    TmaQ tma_q;
    TmaKV tma_k, tma_v;
    TmaO tma_o;
    FwdKernelParams f;
    TileChunks chunks;  // the tiles' order (fwd_tile_chunks.hpp)
    // A zeroed int the CTAs take their next tile from, which the kernel leaves zeroed (tile_counter.hpp); null:
    // each CTA walks fwd_tile_order.cuh's snake.
    int* tile_counter;
  };
};

// The shared memory a head dim's launches may take: the larger of its variants' (the registry's figure; so a
// FLASHTILE_CUDA_SMEM_LIMIT between the two refuses the head dim, though the ordinary variant would fit).
template <typename T, int kHeadDim>
constexpr int fwd_smem_bytes() {
  constexpr int a = FwdTraits<T, kHeadDim>::kSmemBytes;
  constexpr int b = FwdTraits<T, kHeadDim, FwdConfig<kHeadDim>::kConsumersLong>::kSmemBytes;
  return a > b ? a : b;
}

// One consumer warpgroup: its accumulators, running max and sum, and the per-tile math. Accumulator element i
// of a thread sits at (row, column) = identity-partition(i) within the warpgroup's 64 rows; a thread holds rows
// r and r + 8 ((i / 2) % 2 says which) and, for each 8-column block, columns 2t and 2t + 1 (i % 2).
template <typename Traits, bool kSoftcap>
struct Consumer {
  using T = typename Traits::Element;
  static constexpr int kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  typename Traits::MmaQK mma_qk;
  typename Traits::MmaPV mma_pv;
  decltype(typename Traits::MmaQK{}.get_thread_slice(0)) thr_qk;
  decltype(typename Traits::MmaPV{}.get_thread_slice(0)) thr_pv;
  decltype(cute::partition_fragment_C(typename Traits::MmaQK{}, cute::Shape<cute::_64, cute::Int<kBlockN>>{})) tSrS;
  decltype(cute::partition_fragment_C(typename Traits::MmaPV{}, cute::Shape<cute::_64, cute::Int<kHeadDim>>{})) tOrO;
  // P, the A operand of O += P V: per 16-key step, (pair, row half, k half) x 1 x (kBlockN / 16 steps).
  decltype(cute::make_tensor<T>(cute::Layout<cute::Shape<cute::Shape<cute::_2, cute::_2, cute::_2>, cute::_1,
                                                         cute::Int<kBlockN / 16>>>{})) rP;
  // row_max: the max the exponentials are taken against (raw score units), which may trail the true running max
  // by up to kRescaleThreshold / scale_log2 (softmax); row_sum: per-thread sums.
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  bool rescale = false;  // the last softmax moved row_max: O must be scaled by its alpha (rescale_o)
  // Lazy rescaling (FlashAttention-4's), at D >= 128: a warp keeps its rows' row_max while no row's max times
  // scale_log2 has grown by more than kRescaleThreshold, so P = exp2(S * scale_log2 - shift) stays <= 2^8 and O
  // and the sums need no rescale. It pays where O's rescale is long (D / 2 FMULs a thread and step: +1.3% at
  // D = 128, +7% at 256); at D = 64 the vote on the softmax's path cost more than its 32 FMULs (docs/perf-log.md,
  // v15).
  static constexpr bool kLazyRescale = kHeadDim >= 128;
  static constexpr float kRescaleThreshold = 8.0f;
  int first_row;  // the warpgroup's first query row

  __device__ Consumer(int thread_in_warpgroup, int first_row_)
      : thr_qk(mma_qk.get_thread_slice(thread_in_warpgroup)),
        thr_pv(mma_pv.get_thread_slice(thread_in_warpgroup)),
        first_row(first_row_) {
    cute::clear(tOrO);
  }

  // The products are issued asynchronously (wgmma) and waited for separately, so the kernel can overlap one
  // tile's softmax with the tensor cores' work on its neighbours (fwd_kernel's Schedule).

  // Whether this warpgroup's 64 rows see none of the second half of the key tile at col0 (a causal or
  // right-bounded window mask, or the sequence's end, passes through its first half: under a causal mask the
  // first warpgroup's diagonal tile). Then P is 0 there (the mask: such a tile is never a full one), and P V runs
  // over the first kBlockN / 2 keys only. Rows past the sequence's end count as rows here, so that their (never
  // stored) scores are masked too. S stays whole: a half-width S into half of its registers made ptxas serialize
  // the kernels' wgmma (C7511, C7515; docs/perf-log.md, sm90 forward v22).
  __device__ bool first_half_only(int col0, const FwdKernelParams& f) const {
    return min(first_row + 63 + f.key_offset + f.window_right, f.seqlen_k - 1) < col0 + kBlockN / 2;
  }

  // Issues S = Q K^T, both operands from shared memory; S is overwritten once it completes.
  template <class SmemQ, class SmemK>
  __device__ void issue_scores(const SmemQ& sQ, const SmemK& sK) {
    using namespace cute;
    auto tSrQ = thr_qk.partition_fragment_A(sQ);
    auto tSrK = thr_qk.partition_fragment_B(sK);
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    mma_qk.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
      cute::gemm(mma_qk, tSrQ(_, _, kb), tSrK(_, _, kb), tSrS);
      mma_qk.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  }

  // Issues O += P V with P from rP (make_p) and V from shared memory, over the whole key tile or its first half
  // (first_half_only).
  template <class SmemVt>
  __device__ void issue_accumulate(const SmemVt& sVt, bool first_half) {
    using namespace cute;
    auto tOrV = thr_pv.partition_fragment_B(sVt);
    auto issue = [&](auto steps) {
      warpgroup_fence_operand(tOrO);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int kb = 0; kb < decltype(steps)::value; ++kb) cute::gemm(mma_pv, rP(_, _, kb), tOrV(_, _, kb), tOrO);
      warpgroup_commit_batch();
    };
    if (first_half)
      issue(Int<kBlockN / 32>{});
    else
      issue(Int<kBlockN / 16>{});
  }

  // Waits until at most kPending issued products are still running (they finish in issue order).
  template <int kPending>
  __device__ void wait() {
    cute::warpgroup_wait<kPending>();
    cute::warpgroup_fence_operand(tSrS);
    if constexpr (kPending == 0) cute::warpgroup_fence_operand(tOrO);  // O is written by the last issued product
  }

  // Softcap, then the mask (kMasked: this tile has keys some of the warpgroup's rows do not see), then
  // P = exp2(S * scale_log2 - shift) in place in S (the shift is row_max * scale_log2 rounded down, softmax_shift;
  // row_max may trail the true max), the running sums, and in alpha the factor O must be scaled by for the change
  // of row_max (rescale_o, once no product writes O any more).
  template <bool kMasked>
  __device__ void softmax(int col0, const FwdKernelParams& f, float (&alpha)[2]) {
    using namespace cute;
    auto tScS = thr_qk.partition_C(make_identity_tensor(Shape<_64, Int<kBlockN>>{}));
    // Each of this thread's two rows (elements with (i / 2) % 2 == hr) tests its elements against the keys it
    // sees relative to the thread's first column (VisibleKeys): two compares against a constant offset and a
    // select per element (the three-way test on absolute keys compiled to branches, ~13 instructions an element).
    VisibleKeys visible[2];
    if (kMasked) {
      const int col_first = col0 + get<1>(tScS(0));
      CUTE_UNROLL
      for (int hr = 0; hr < 2; ++hr) visible[hr] = VisibleKeys(f, first_row + get<0>(tScS(2 * hr)), col_first);
    }
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) {
      float x = tSrS(i);
      if (kSoftcap) x = f.softcap * tanhf(x * f.scale_over_cap);
      if (kMasked) x = visible[(i / 2) % 2].sees(get<1>(tScS(i)) - get<1>(tScS(0))) ? x : -INFINITY;
      tSrS(i) = x;
    }
    // Row hr's elements are i = 2 hr + 4 m + {0, 1}, one pair per 8-key block m; max and sum reduce the pairs
    // in a tree (tree_reduce).
    constexpr int kPairs = kBlockN / 8;
    float mx[2];
    bool grew = false;  // a row's max rose by more than kRescaleThreshold (from -inf: always; -inf to -inf: NaN, no)
    CUTE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {
      float part[kPairs];
      CUTE_UNROLL
      for (int m = 0; m < kPairs; ++m) part[m] = fmaxf(tSrS(2 * hr + 4 * m), tSrS(2 * hr + 4 * m + 1));
      mx[hr] = quad_max(fmaxf(row_max[hr], tree_reduce<kPairs>(part, [](float a, float b) { return fmaxf(a, b); })));
      grew |= (mx[hr] - row_max[hr]) * f.scale_log2 > kRescaleThreshold;
    }
    // warp-uniform, so that rescale_o's test is a uniform branch
    rescale = kLazyRescale ? __any_sync(0xffffffffu, grew) : true;
    float shift[2];
    CUTE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {
      shift[hr] = softmax_shift(rescale ? mx[hr] : row_max[hr], f.scale_log2);
      alpha[hr] = rescale ? exp2_capped(fmaf(row_max[hr], f.scale_log2, -shift[hr]), 0.0f) : 1.0f;
      if (rescale) row_max[hr] = mx[hr];
    }
    auto exponents = [&](auto capped) {
      CUTE_UNROLL
      for (int hr = 0; hr < 2; ++hr) {
        float part[kPairs];
        CUTE_UNROLL
        for (int m = 0; m < kPairs; ++m) {
          const int i = 2 * hr + 4 * m;
          CUTE_UNROLL
          for (int e = i; e < i + 2; ++e) {
            const float x = fmaf(tSrS(e), f.scale_log2, -shift[hr]);
            tSrS(e) = decltype(capped)::value ? exp2_capped(x, kMaxExponent) : exp2_approx(x);
          }
          part[m] = tSrS(i) + tSrS(i + 1);
        }
        row_sum[hr] = row_sum[hr] * alpha[hr] + tree_reduce<kPairs>(part, [](float a, float b) { return a + b; });
      }
    };
    if (__any_sync(0xffffffffu, shift_needs_cap(shift[0]) || shift_needs_cap(shift[1])))  // a uniform branch
      exponents(std::true_type{});
    else
      exponents(std::false_type{});
  }

  // The mask only where the tile needs it: a runtime test inside softmax would be if-converted into predicated
  // instructions on every tile (as it was in the sm80 kernel, docs/perf-log.md v6).
  __device__ void softmax_tile(int col0, const FwdKernelParams& f, float (&alpha)[2]) {
    const int last_row = min(first_row + 63, f.seqlen_q - 1);  // the warpgroup's last real row
    const bool full_tile = last_row + f.key_offset - f.window_left <= col0 &&
                           first_row + f.key_offset + f.window_right >= col0 + kBlockN - 1 &&
                           col0 + kBlockN <= f.seqlen_k;
    if (full_tile)
      softmax<false>(col0, f, alpha);
    else
      softmax<true>(col0, f, alpha);
  }

  __device__ void rescale_o(const float (&alpha)[2]) {
    if (kLazyRescale && !rescale) return;  // alpha is 1 (lazy rescaling: softmax)
    CUTE_UNROLL
    for (int i = 0; i < cute::size(tOrO); ++i) tOrO(i) *= alpha[(i / 2) % 2];
  }

  // P in T from S: the S accumulator's (pair, row half, 8-key block) order is the register A operand's (pair, row
  // half, k half) per 16-key step, so a copy in the same order is the A fragment of O += P V.
  __device__ void make_p() {
    CUTE_UNROLL
    for (int i = 0; i < cute::size(tSrS); ++i) rP(i) = T(tSrS(i));
  }

  // The rows' 1 / l into inv, and their LSE to global memory (f.lse, where asked for); rows that saw no key get
  // 1 / l = 0 (so O = 0) and LSE = -inf. It needs only the sums, so it runs while the tile's last P V does.
  __device__ void finish_rows(const FwdKernelParams& f, int b, int h, float (&inv)[2]) const {
    using namespace cute;
    float lse[2];
    CUTE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {
      const float l = quad_sum(row_sum[hr]);
      // A row whose every visible score is NaN (a NaN in its q row or its only key) keeps row_max at -inf
      // (fmaxf skips NaN) but sums NaN: it depends on the input and comes out NaN, as the oracle gives it.
      const bool seen = row_max[hr] != -INFINITY || l != 0.0f;
      // l >= 1 where the row saw a key (its largest score weighs exp2(>= 0): row_max trails the true max, never
      // leads it, and the shift is rounded down), so the approximate reciprocal (one MUFU.RCP, ~1 ulp) needs none
      // of the IEEE division's denormal paths and branches, which ran with the tensor cores idle (both warpgroups
      // end a tile together).
      inv[hr] = seen ? __fdividef(1.0f, l) : 0.0f;
      lse[hr] = seen ? (row_max[hr] * f.scale_log2 + __log2f(l)) * 0.6931471805599453f : -INFINITY;
    }
    if (f.lse == nullptr) return;
    auto tOcO = thr_pv.partition_C(make_identity_tensor(Shape<_64, Int<kHeadDim>>{}));
    CUTE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {  // element 2 hr sits in row hr of the thread's two, at column 2t
      const int row = first_row + get<0>(tOcO(2 * hr));
      if (row < f.seqlen_q && get<1>(tOcO(2 * hr)) == 0)  // the quad's first thread writes its rows' LSE
        f.lse[b * f.lse_stride[0] + h * f.lse_stride[1] + row * f.lse_stride[2]] = lse[hr];
    }
  }

  // The epilogue's first half: O / l in T into this warpgroup's 64 rows of sO (the tile's Q buffer, which no
  // product reads any more), for the TMA store (fwd_kernel). stmatrix writes four 8 x 8 blocks of a warp per
  // instruction (kHeadDim / 16 a thread, against kHeadDim / 4 four-byte stores), each lane giving one 16-byte
  // row's address, which the swizzle keeps contiguous.
  template <class SmemO>
  __device__ void stage_o(const SmemO& sO, const float (&inv)[2], int thread_in_warpgroup) {
    using namespace cute;
    auto rO = make_tensor_like<T>(tOrO);
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); ++i) rO(i) = T(tOrO(i) * inv[(i / 2) % 2]);
    auto copy_o = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, T>{}, mma_pv);
    auto thr_copy = copy_o.get_thread_slice(thread_in_warpgroup);
    copy(copy_o, thr_copy.retile_S(rO), thr_copy.partition_D(sO));
  }
};

// A tile's CtaBlock as lane 0 of the warp has it, known to the compiler to be the same in every lane.
__device__ __forceinline__ CtaBlock uniform_in_warp(const CtaBlock& in) {
  CtaBlock out;
  out.row0 = __shfl_sync(0xffffffffu, in.row0, 0), out.b = __shfl_sync(0xffffffffu, in.b, 0);
  out.h = __shfl_sync(0xffffffffu, in.h, 0), out.hk = __shfl_sync(0xffffffffu, in.hk, 0);
  out.n_first = __shfl_sync(0xffffffffu, in.n_first, 0), out.n_last = __shfl_sync(0xffffffffu, in.n_last, 0);
  return out;
}

// bar.sync on named barrier kFirst + index for kThreads threads, index < 3 (a consumer warpgroup's): the id stays
// an immediate, as an id from a register makes ptxas reserve all 16 named barriers (docs/perf-log.md, sm90
// forward v16).
template <int kFirst, int kThreads>
__device__ __forceinline__ void consumer_barrier(int index) {
  auto at = [](auto id) { asm volatile("bar.sync %0, %1;\n" ::"n"(decltype(id)::value), "n"(kThreads)); };
  if (index == 0) at(cute::Int<kFirst>{});
  else if (index == 1) at(cute::Int<kFirst + 1>{});
  else at(cute::Int<kFirst + 2>{});
}

// kSchedule (fwd_config.hpp): kOverlap is the library's; the harness also times kSerial and kPingPong (which
// measured slower on top of the overlap: docs/perf-log.md, sm90 v4).
template <typename Traits, bool kSoftcap, int kSchedule>
__global__ void __launch_bounds__(Traits::kThreads, 1) fwd_kernel(const __grid_constant__ typename Traits::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;  // flashtile::Tensor / make_tensor are spelled cute:: where both are visible
  using T = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const FwdKernelParams& f = p.f;
  // Read through a shuffle so that the compiler knows it is the same in every lane of a warp: the consumer's
  // wgmma descriptors (its Q rows' address) are then built in uniform registers, not moved into them before each
  // wgmma (R2UR; 230 such moves in the D = 128 SASS without it).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_o.get_tma_descriptor());
    for (int i = 0; i < Traits::kQStages; ++i) {
      cutlass::arch::ClusterTransactionBarrier::init(&smem.q_full[i], 1);
      cutlass::arch::ClusterBarrier::init(&smem.q_empty[i], Traits::kConsumers * 128);
    }
  }
  typename Pipeline::Params pipe;
  pipe.role = warpgroup == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pipe.is_leader = threadIdx.x == 0;  // the one producer thread that issues the copies
  pipe.num_consumers = Traits::kConsumers * 128;
  pipe.transaction_bytes = kBlockN * kHeadDim * sizeof(T);
  Pipeline pipeline_k(smem.pipeline_k, pipe, Shape<_1, _1, _1>{});
  Pipeline pipeline_v(smem.pipeline_v, pipe, Shape<_1, _1, _1>{});
  __syncthreads();  // barriers initialised before anyone waits on them

  constexpr int kQStages = Traits::kQStages;
  auto sQ = cute::make_tensor(make_smem_ptr(smem.q), typename Traits::SmemLayoutQStages{});  // (M, D, Q buffer)
  auto sK = cute::make_tensor(make_smem_ptr(smem.k), typename Traits::SmemLayoutKV{});
  auto sV = cute::make_tensor(make_smem_ptr(smem.v), typename Traits::SmemLayoutKV{});
  if (warpgroup == 0) {  // producer
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x != 0) return;
    const auto shape_q = make_shape(f.seqlen_q, f.head_dim, f.heads_q, f.batch);
    const auto shape_kv = make_shape(f.seqlen_k, f.head_dim, f.heads_q / f.group, f.batch);
    auto mQ = p.tma_q.get_tma_tensor(shape_q);
    auto mK = p.tma_k.get_tma_tensor(shape_kv);
    auto mV = p.tma_v.get_tma_tensor(shape_kv);
    using TileM = Shape<Int<kBlockM>, Int<kHeadDim>>;
    using TileN = Shape<Int<kBlockN>, Int<kHeadDim>>;
    auto state = cutlass::make_producer_start_state<Pipeline>();
    // The CTA's tiles: the first is its own number, the next ones come from the counter (tile_counter.hpp) or,
    // without one, the snake of fwd_tile_order.cuh. A Q buffer is refilled once the consumers are done with the
    // tile before last's (the K/V pipeline runs on ahead); each tile's CtaBlock travels with its Q (q_full).
    const int n_tiles = f.m_blocks * f.batch * f.heads_q;
    int tile = static_cast<int>(blockIdx.x);
    for (int iteration = 0;; ++iteration) {
      const int qs = iteration % kQStages;
      if (iteration >= kQStages) cutlass::arch::ClusterBarrier::wait(&smem.q_empty[qs], (iteration / kQStages - 1) % 2);
      if (tile >= n_tiles) {
        smem.tile[qs].row0 = -1;
        cutlass::arch::ClusterBarrier::arrive(&smem.q_full[qs]);  // no bytes: the phase completes on the arrival
        break;
      }
      const CtaBlock blk = CtaBlock::make<kBlockM, kBlockN, true>(f, p.chunks.head_by_head(f, tile), false);
      smem.tile[qs] = blk;
      auto gQ = local_tile(mQ(_, _, blk.h, blk.b), TileM{}, make_coord(blk.row0 / kBlockM, 0));  // (M, D)
      auto gK = local_tile(mK(_, _, blk.hk, blk.b), TileN{}, make_coord(_, 0));               // (N, D, n)
      auto gV = local_tile(mV(_, _, blk.hk, blk.b), TileN{}, make_coord(_, 0));
      auto [tQg, tQs] =
          tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ(_, _, qs)), group_modes<0, 2>(gQ));
      auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&smem.q_full[qs], Traits::kQBytes);
      copy(p.tma_q.with(smem.q_full[qs]), tQg, tQs);
      for (int n = blk.n_first; n <= blk.n_last; ++n, ++state) {
        pipeline_k.producer_acquire(state);
        copy(p.tma_k.with(*pipeline_k.producer_get_barrier(state)), tKg(_, n), tKs(_, state.index()));
        pipeline_v.producer_acquire(state);
        copy(p.tma_v.with(*pipeline_v.producer_get_barrier(state)), tVg(_, n), tVs(_, state.index()));
      }
      if (p.tile_counter != nullptr) {
        // The next tile, taken once this one's loads are issued (the producer runs kStages K/V tiles ahead of the
        // consumers, which hides the atomic's round trip; a number taken before the loads and kept through them
        // spilled the producer's 24 registers). Every CTA takes one number past the last tile, so the one that
        // takes the last number (n_tiles - 1: the counter counts from gridDim.x) knows that no other will touch
        // the counter again: it resets it for the next launch.
        const int taken = atomicAdd(p.tile_counter, 1);
        if (taken == n_tiles - 1) *p.tile_counter = 0;
        // Through a shuffle (of the one thread left in the warp), so that the compiler knows the number is
        // warp-uniform: the tile's decode and TMA coordinates then stay in uniform registers (else the producer's
        // 24 registers spilled, and every TMA copy moved its coordinates by R2UR in a loop).
        tile = __shfl_sync(1u, static_cast<int>(gridDim.x) + taken, 0);
      } else {
        tile = persistent_tile(iteration + 1, n_tiles);
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int consumer = warpgroup - 1;
  auto sVt = cute::make_tensor(make_smem_ptr(smem.v), typename Traits::SmemLayoutVt{});
  cutlass::PipelineState<kStages> state_k, state_v;  // V's reads trail K's by one tile when overlapped
  // Ping-pong: before issuing products a warpgroup waits at its own named barrier (ids 1 and 2; 0 is
  // __syncthreads), which completes once the other warpgroup has arrived there, i.e. has issued its products;
  // after issuing it arrives at the other's. Warpgroup 1 arrives once up front, so warpgroup 0 goes first. Both
  // issue the same number of times per tile (the same K/V tiles), so the turns stay paired.
  // Named barriers past ping-pong's 1 and 2: each consumer warpgroup's own before its O store (3 + consumer).
  constexpr int kEpilogueBarrier = 3;
  constexpr bool kTakeTurns = kSchedule == Schedule::kPingPong;
  static_assert(!kTakeTurns || Traits::kConsumers == 2, "ping-pong pairs two consumer warpgroups");
  constexpr int kTurnThreads = 2 * 128;
  auto my_turn = [&] {
    if constexpr (kTakeTurns) asm volatile("bar.sync %0, %1;\n" ::"r"(1 + consumer), "n"(kTurnThreads));
  };
  auto their_turn = [&] {
    if constexpr (kTakeTurns) asm volatile("bar.arrive %0, %1;\n" ::"r"(2 - consumer), "n"(kTurnThreads));
  };
  if (consumer == 1) their_turn();
  for (int iteration = 0;; ++iteration) {  // the CTA's tiles, as the producer hands them over with their Q
    const int qs = iteration % kQStages;
    cutlass::arch::ClusterTransactionBarrier::wait(&smem.q_full[qs], (iteration / kQStages) % 2);
    // Through shuffles, as `warpgroup` above: values the compiler knows to be warp-uniform keep the loop's
    // control and the wgmma descriptors in uniform registers (straight from shared memory, 289 R2UR at D = 128).
    const CtaBlock blk = uniform_in_warp(smem.tile[qs]);
    if (blk.row0 < 0) break;
    Consumer<Traits, kSoftcap> c(static_cast<int>(threadIdx.x % 128), blk.row0 + 64 * consumer);
    auto sQ_wg = local_tile(sQ(_, _, qs), Shape<_64, Int<kHeadDim>>{}, make_coord(consumer, 0));  // this warpgroup's rows
    float alpha[2];
    auto first_half = [&](int n) { return c.first_half_only(n * kBlockN, f); };  // key tile n's
    // One tile's product, issued and waited for, with its stage released: the steps that nothing overlaps.
    auto scores_now = [&] {
      pipeline_k.consumer_wait(state_k);
      my_turn();
      c.issue_scores(sQ_wg, sK(_, _, state_k.index()));
      their_turn();
      c.template wait<0>();
      pipeline_k.consumer_release(state_k);
      ++state_k;
    };
    auto accumulate_now = [&](int n) {
      pipeline_v.consumer_wait(state_v);
      my_turn();
      c.issue_accumulate(sVt(_, _, state_v.index()), first_half(n));
      their_turn();
      c.template wait<0>();
      pipeline_v.consumer_release(state_v);
      ++state_v;
    };
    if constexpr (kSchedule == Schedule::kSerial) {  // each tile's products and softmax in turn
      for (int n = blk.n_first; n <= blk.n_last; ++n) {
        scores_now();
        c.softmax_tile(n * kBlockN, f, alpha);
        c.rescale_o(alpha);
        c.make_p();
        accumulate_now(n);
      }
    } else if (blk.n_first <= blk.n_last) {
      // Tile n's scores are issued before tile n - 1's P V, and its softmax runs while that P V is on the
      // tensor cores: S(n) = Q K(n); rescale O by tile n - 1's alpha; O += P(n - 1) V(n - 1); wait S(n);
      // softmax(n); wait P V; P(n). The rescale sits under S(n)'s product: after P V(n - 1)'s wait the tensor
      // cores have nothing queued until the next S is issued, so what runs there (P's conversion) is exposed.
      scores_now();
      c.softmax_tile(blk.n_first * kBlockN, f, alpha);  // O is still zero: its first rescale changes nothing
      c.make_p();
      for (int n = blk.n_first + 1; n <= blk.n_last; ++n, ++state_k, ++state_v) {
        pipeline_k.consumer_wait(state_k);
        pipeline_v.consumer_wait(state_v);
        my_turn();
        c.issue_scores(sQ_wg, sK(_, _, state_k.index()));
        c.rescale_o(alpha);
        c.issue_accumulate(sVt(_, _, state_v.index()), first_half(n - 1));
        their_turn();
        c.template wait<1>();  // S(n) is done; P V(n - 1) may still run
        pipeline_k.consumer_release(state_k);
        c.softmax_tile(n * kBlockN, f, alpha);
        c.template wait<0>();  // P V(n - 1) is done: P and O are free
        pipeline_v.consumer_release(state_v);
        c.make_p();
      }
      c.rescale_o(alpha);
      pipeline_v.consumer_wait(state_v);  // the last P V, waited for after the rows' sums are finished
      my_turn();
      c.issue_accumulate(sVt(_, _, state_v.index()), first_half(blk.n_last));
      their_turn();
    }
    // The epilogue: the rows' 1 / l and LSE while the last P V runs; then each consumer warpgroup writes its
    // rows of O into the tile's Q buffer, one of its threads stores them by TMA (rows past the sequence end and
    // columns past the head dim are clipped by the descriptor) and waits only until they have been read, and the
    // warpgroup goes on to the next tile while the writes land. The Q buffer is released (q_empty) once every
    // warpgroup's read is done: the barrier completes on the storing threads' arrivals. The batch and head
    // again from shared memory (the producer rewrites the slot only after q_empty) rather than kept live through
    // the loop: at D = 256 the registers are that tight.
    const int b = __shfl_sync(0xffffffffu, smem.tile[qs].b, 0), h = __shfl_sync(0xffffffffu, smem.tile[qs].h, 0);
    float inv[2];
    c.finish_rows(f, b, h, inv);
    // Unconditional (nothing is in flight after the serial schedule or without keys): under a test that ptxas
    // cannot match with the issue's, it serializes the kernel's wgmma (C7514, seen).
    c.template wait<0>();
    if (kSchedule != Schedule::kSerial && blk.n_first <= blk.n_last) {
      pipeline_v.consumer_release(state_v);
      ++state_v;
    }
    c.stage_o(sQ_wg, inv, static_cast<int>(threadIdx.x % 128));
    cutlass::arch::fence_view_async_shared();  // the generic-proxy writes above, visible to the TMA unit
    consumer_barrier<kEpilogueBarrier, 128>(consumer);
    if (threadIdx.x % 128 == 0) {
      auto mO = p.tma_o.get_tma_tensor(make_shape(f.seqlen_q, f.head_dim, f.heads_q, f.batch));
      auto gO = local_tile(mO(_, _, h, b), Shape<_64, Int<kHeadDim>>{}, make_coord(blk.row0 / 64 + consumer, 0));
      auto [tOg, tOs] =
          tma_partition(p.tma_o, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ_wg), group_modes<0, 2>(gO));
      copy(p.tma_o, tOs, tOg);
      tma_store_arrive();
      tma_store_wait<0>();  // the rows have been read; the global writes may still be in flight
    }
    cutlass::arch::ClusterBarrier::arrive(&smem.q_empty[qs]);
  }
#endif
}

}  // namespace flashtile::cuda::sm90
