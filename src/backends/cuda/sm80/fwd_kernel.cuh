// The sm80 forward kernel, FlashAttention-2 schedule (the seeds' v2):
//   - one CTA per (query block of kBlockM rows, batch x head): parallel over the sequence length (or, for the
//     persistent rows of fwd_config.hpp, one CTA per SM that walks such blocks in turn: fwd_tile_order.cuh);
//   - warps split Q (each owns kMSlices x 16 rows and every key), so a row's max and sum never leave its warp;
//   - K/V tiles are the inner loop, loaded with cp.async while the tensor cores work, in one of three schedules
//     (one stage, two stages, or a ring of two stages handed over through mbarriers: fwd_kv_pipeline.cuh);
//   - the running max and sum stay in registers, O is rescaled only when the max moves, and the division by
//     the sum happens once per row in the epilogue;
//   - scores go to exp2 through one FMA with the softmax scale folded in (scale * log2 e);
//   - tiles the mask hides entirely are never visited (with the ring, a warp also skips those hidden from all of
//     its own rows), and masking code runs only on tiles that need it.
//
// Shared memory (T = bf16 or fp16), rows padded to kRowStride elements:
//   sQ (kBlockM x kHeadDim), sK [kStages] (kBlockN x kHeadDim), sV [kStages] (kBlockN x kHeadDim),
//   then (kKvRing) the ring's mbarriers (KvRingBarriers)
// Registers per thread: acc_o [kMSlices][kHeadDim/8][4] fp32, acc_s [kMSlices][kBlockN/8][4] fp32.
#pragma once

#include <cmath>
#include <type_traits>

#include "backends/cuda/fwd_kernel_params.hpp"
#include "backends/cuda/fwd_tile_order.cuh"
#include "backends/cuda/sm80/fwd_launch.hpp"
#include "backends/cuda/sm80/fwd_kv_pipeline.cuh"
#include "backends/cuda/sm80/fwd_tile.cuh"

namespace flashtile::cuda::sm80 {

template <typename Traits, typename T, bool kSoftcap, int kVariant>
__global__ void __launch_bounds__(Traits::kThreads) fwd_kernel(const FwdKernelParams p) {
  constexpr int kHeadDim = Traits::kHeadDim, kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kMSlices = Traits::kMSlices, kStride = Traits::kRowStride;
  constexpr int kStages = Traits::kStages, kTileElems = kBlockN * kStride;
  constexpr int kNB = kBlockN / 8, kDB = kHeadDim / 8;  // 8-column blocks of S and of O
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kBlockM * kStride;
  T* sV = sK + kStages * kTileElems;
  KvRingBarriers* ring = reinterpret_cast<KvRingBarriers*>(sV + kStages * kTileElems);  // kKvRing rows only
  static_assert(!Traits::kKvRing || !(kVariant & kSequentialQBlocks), "the FA1 grid is an ablation of the barrier rows");
  KvPipeline<Traits, T>::init(ring);

  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair (ptx.cuh, mma_16x8x16)

  // Tiles as fwd_tile_order.cuh numbers them: head by head, heavy query blocks first (with a causal mask the
  // last blocks see the most keys); a persistent CTA takes the snake's, longest first across heads where that
  // order balances better (fwd_launch.cuh).
  const bool heavy_first = Traits::kPersistent && p.heavy_first;
  auto block_of = [&](int tile) {
    return CtaBlock::make<kBlockM, kBlockN, Traits::kLeanBlockEdges>(p, tile, heavy_first);
  };
  auto kv_walk = [&](const CtaBlock& blk) {
    return KvWalk<T>{static_cast<const T*>(p.k) + blk.b * p.k_stride[0] + blk.hk * p.k_stride[2],
                     static_cast<const T*>(p.v) + blk.b * p.v_stride[0] + blk.hk * p.v_stride[2], blk.n_first,
                     blk.n_last};
  };
  auto q_head_of = [&](const CtaBlock& blk) {
    return static_cast<const T*>(p.q) + blk.b * p.q_stride[0] + blk.h * p.q_stride[2];
  };
  KvPipeline<Traits, T> kv{sK, sV, ring, p.k_stride[1], p.v_stride[1], p.seqlen_k, p.head_dim};
  // Persistent rows: the first block after round `round` that has keys (a block without any is empty-handed:
  // O = 0, LSE = -inf, no K/V tile), or one without keys when there is none.
  auto next_block_with_keys = [&](int round) {
    const int n_tiles = p.m_blocks * p.batch * p.heads_q;
    CtaBlock next{0, 0, 0, 0, 0, -1};
    for (int r = round + 1;; ++r) {
      const int tile = persistent_tile(r, n_tiles);
      if (tile == n_tiles) break;
      next = block_of(tile);
      if (next.has_keys()) break;
    }
    return next;
  };

  // kHintNextWave rows (a CTA per block, alone on its SM): the block that the next wave starts in this CTA's
  // slot, p.l2_ahead tiles on (the CTAs the SMs hold; the hardware hands blocks out in order), would read its Q
  // from HBM at its start, and its first K/V tiles too where no CTA at work has its head yet; nothing on the SM
  // hides those round trips. Hinted into L2 a block ahead, they are L2 hits when it starts.
  auto hint_next_wave = [&](int tile) {
    const int64_t ahead = static_cast<int64_t>(tile) + p.l2_ahead;
    if (ahead >= static_cast<int64_t>(p.m_blocks) * p.batch * p.heads_q) return;
    const CtaBlock nb = block_of(static_cast<int>(ahead));
    if (!nb.has_keys()) return;
    prefetch_warp_rows_l2<Traits>(q_head_of(nb), p.q_stride[1], nb.row0, p.seqlen_q, p.head_dim);
    const KvWalk<T> w = kv_walk(nb);
    for (int n = nb.n_first; n <= min(nb.n_first + 1, nb.n_last); ++n) {
      prefetch_rows_l2<Traits, kBlockN>(w.k_head, p.k_stride[1], n * kBlockN, p.seqlen_k, p.head_dim);
      prefetch_rows_l2<Traits, kBlockN>(w.v_head, p.v_stride[1], n * kBlockN, p.seqlen_k, p.head_dim);
    }
  };

  // One query block; `round` counts the CTA's blocks (persistent: the snake's round).
  auto work = [&](int tile, int round) {
    const CtaBlock blk = block_of(tile);
    const int row0 = blk.row0;
    const int row_last = min(row0 + kBlockM, p.seqlen_q) - 1;
    kv.begin(kv_walk(blk));
    const T* q_head = q_head_of(blk);
    T* o_head = static_cast<T*>(p.o) + blk.b * p.o_stride[0] + blk.h * p.o_stride[2];
    // This warp's rows: from the first of its first slice to the last real one of its last slice.
    const int warp_first = row0 + slice_row<Traits>(0);
    const int warp_last = min(row0 + slice_row<Traits>(kMSlices - 1) + 15, p.seqlen_q - 1);

    float acc_o[kMSlices][kDB][4];
    float row_max[kMSlices][2], row_sum[kMSlices][2];  // per fragment row (g, g + 8), in raw score units
#pragma unroll
    for (int s = 0; s < kMSlices; ++s) {
#pragma unroll
      for (int d = 0; d < kDB; ++d) acc_o[s][d][0] = acc_o[s][d][1] = acc_o[s][d][2] = acc_o[s][d][3] = 0.0f;
      row_max[s][0] = row_max[s][1] = -INFINITY;
      row_sum[s][0] = row_sum[s][1] = 0.0f;
    }

    if (blk.has_keys()) {
      if constexpr (Traits::kKvRing) {
        kv.load_q(sQ, q_head, p.q_stride[1], row0, p.seqlen_q);
        // The next block's rows of Q are read once, from HBM: a hint a block ahead brings them into L2 for the
        // copy at its start.
        if constexpr (Traits::kPersistent) {
          const CtaBlock next = next_block_with_keys(round);
          if (next.has_keys())
            prefetch_warp_rows_l2<Traits>(q_head_of(next), p.q_stride[1], next.row0, p.seqlen_q, p.head_dim);
        }
        if (kv.place(blk.n_first) == 0) kv.prologue();
        if constexpr (Traits::kHintNextWave) hint_next_wave(tile);
        kv.wait_q();
      } else {
        if (kVariant & kSequentialQBlocks) __syncthreads();  // sQ is reused by the next query block
        load_rows_async<Traits, kBlockM>(sQ, q_head, p.q_stride[1], row0, p.seqlen_q, p.head_dim);
        kv.prologue();
      }
    }

    for (int n_block = blk.n_first; n_block <= blk.n_last; ++n_block) {
      const int col0 = n_block * kBlockN;
      // A tile that none of this warp's rows sees (a 128-row block's last tiles under a causal mask) changes
      // nothing for them (p = 0, the max stays): with the ring the warp only takes part in the loads and
      // hand-overs, and the time it saves goes to the others. (Behind CTA barriers the warp would wait for the
      // others at the next barrier anyway, and the branch made D = 64's row spill 470 bytes instead of 100.)
      // (kAllTilesVisible rows compute them all: fwd_config.hpp.)
      const bool visible =
          !Traits::kKvRing || Traits::kAllTilesVisible || !tile_hidden<Traits>(p, warp_first, warp_last, col0);
      // One tile, compiled twice: with the mask for the tiles at the mask's edges (for this warp's rows), without
      // it for the rest.
      auto tile_step = [&](auto masked) {
        kv.before_scores(n_block);
        // S = Q K^T for this warp's rows.
        float acc_s[kMSlices][kNB][4];
        if (visible) {
          tile_scores<Traits, T>(sQ, kv.k_tile(n_block), acc_s);
          cap_and_mask<Traits, kSoftcap, decltype(masked)::value>(p, row0, col0, acc_s);
        }
        kv.after_scores(n_block);

        if (visible) {
          // Online softmax. A row's 4 owners (lanes 4g..4g+3) agree on its max through two shuffles.
          float o_scale[kMSlices][2], shift[kMSlices][2], alpha[kMSlices][2];
          bool max_moved = false, huge = false;
#pragma unroll
          for (int s = 0; s < kMSlices; ++s)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              float mx = row_max[s][hr];
#pragma unroll
              for (int n = 0; n < kNB; ++n) mx = fmaxf(mx, fmaxf(acc_s[s][n][2 * hr], acc_s[s][n][2 * hr + 1]));
              mx = quad_max(mx);
              shift[s][hr] = softmax_shift(mx, p.scale_log2);
              alpha[s][hr] = exp2_capped(fmaf(row_max[s][hr], p.scale_log2, -shift[s][hr]), 0.0f);
              row_max[s][hr] = mx;
              huge |= shift_needs_cap(shift[s][hr]);
            }
          auto exponents = [&](auto capped) {
#pragma unroll
            for (int s = 0; s < kMSlices; ++s)
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < kNB; ++n)
#pragma unroll
                  for (int e = 0; e < 2; ++e) {
                    const float x = fmaf(acc_s[s][n][2 * hr + e], p.scale_log2, -shift[s][hr]);
                    const float pe = decltype(capped)::value ? exp2_capped(x, kMaxExponent) : exp2_approx(x);
                    acc_s[s][n][2 * hr + e] = pe;
                    sum += pe;
                  }
                if (kVariant & kRescaleEveryStep) {  // FA1 keeps full sums: reduce across the row's 4 owners now
                  sum = quad_sum(sum);
                }
                // FA1 stores O normalised, so it first multiplies back by the old sum; FA2 only rescales.
                o_scale[s][hr] = (kVariant & kRescaleEveryStep) ? alpha[s][hr] * row_sum[s][hr] : alpha[s][hr];
                max_moved |= o_scale[s][hr] != 1.0f;
                row_sum[s][hr] = row_sum[s][hr] * alpha[s][hr] + sum;
              }
          };
          if (__any_sync(0xffffffffu, huge))  // a warp vote: a uniform branch (shift_needs_cap)
            exponents(std::true_type{});
          else
            exponents(std::false_type{});
          // alpha is exactly 1 for a row whose max did not move, as for most rows once the max has settled: the
          // warp skips the kMSlices * kHeadDim / 2 multiplies unless one of its rows moved (where the table says
          // the vote pays, fwd_config.hpp).
          if (!Traits::kSkipRescale || __any_sync(0xffffffffu, max_moved)) {
#pragma unroll
            for (int s = 0; s < kMSlices; ++s)
#pragma unroll
              for (int d = 0; d < kDB; ++d) {
                acc_o[s][d][0] *= o_scale[s][0], acc_o[s][d][1] *= o_scale[s][0];
                acc_o[s][d][2] *= o_scale[s][1], acc_o[s][d][3] *= o_scale[s][1];
              }
          }
        }

        kv.before_pv(n_block);
        if (visible) {
          // O += P V, with P taken straight from the S accumulators (their layout is the A fragment's).
          tile_accumulate_pv<Traits, T>(acc_s, kv.v_tile(n_block), acc_o);

          if (kVariant & kRescaleEveryStep) {
            // FA1's per-step normalisation: O holds the normalised output after every tile.
#pragma unroll
            for (int s = 0; s < kMSlices; ++s)
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                const float inv = row_sum[s][hr] > 0.0f ? 1.0f / row_sum[s][hr] : 0.0f;
#pragma unroll
                for (int d = 0; d < kDB; ++d) acc_o[s][d][2 * hr] *= inv, acc_o[s][d][2 * hr + 1] *= inv;
              }
          }
        }
        kv.after_pv(n_block);
      };
      // Behind CTA barriers every warp must take the same instantiation (each holds its own __syncthreads), so
      // the test is the block's; the ring lets each warp test its own rows.
      if (Traits::kKvRing ? tile_fully_visible<Traits>(p, warp_first, col0, warp_last)
                          : tile_fully_visible<Traits>(p, row0, col0, row_last))
        tile_step(std::false_type{});
      else
        tile_step(std::true_type{});
    }

    // The next block again, not kept from the prefetch above: live through the tile loop, its fields cost the
    // registers that serialised v16a's MMAs (docs/perf-log.md); the search is a few integer ops a block.
    if constexpr (Traits::kPersistent) {
      if (blk.has_keys()) {
        const CtaBlock next = next_block_with_keys(round);
        if (next.has_keys()) kv.hand_over(kv_walk(next));
      }
    }

    // Epilogue: one division per row, then O and LSE to global memory. Rows that saw no key get O = 0 and
    // LSE = -inf. O goes out through this warp's own rows of sQ, which no other warp reads, so that the global
    // stores are whole 16-byte chunks of a row rather than 4-byte pieces of eight rows.
    T* sO = sQ;
#pragma unroll
    for (int s = 0; s < kMSlices; ++s)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float l = row_sum[s][hr];
        if (!(kVariant & kRescaleEveryStep)) {  // FA2 kept per-thread partial sums
          l = quad_sum(l);
        }
        const bool seen = row_max[s][hr] != -INFINITY || l != 0.0f;  // an all-NaN row sums NaN: it comes out NaN
        const float inv = !seen ? 0.0f : (kVariant & kRescaleEveryStep) ? 1.0f : 1.0f / l;
        const int r = slice_row<Traits>(s) + g + hr * 8;
#pragma unroll
        for (int d = 0; d < kDB; ++d)
          *reinterpret_cast<uint32_t*>(sO + r * kStride + d * 8 + 2 * t) =
              pack2<T>(acc_o[s][d][2 * hr] * inv, acc_o[s][d][2 * hr + 1] * inv);
        if (p.lse != nullptr && t == 0 && row0 + r < p.seqlen_q)
          p.lse[blk.b * p.lse_stride[0] + blk.h * p.lse_stride[1] + (row0 + r) * p.lse_stride[2]] =
              seen ? (row_max[s][hr] * p.scale_log2 + __log2f(l)) * 0.6931471805599453f : -INFINITY;
      }
    __syncwarp();
    if constexpr (Traits::kLeanBlockEdges) {  // a row pass a 64-bit pointer step (fwd_config.hpp)
#pragma unroll
      for (int s = 0; s < kMSlices; ++s) {
        const int r = slice_row<Traits>(s);
        store_rows_by<Traits, 16, 32>(lane, sO + r * kStride, o_head, p.o_stride[1], row0 + r, p.seqlen_q, p.head_dim);
      }
    } else {  // not store_rows_by's general form: with it, ptxas spilled more in D = 128's four-warp loop
      constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
#pragma unroll
      for (int s = 0; s < kMSlices; ++s)
#pragma unroll
        for (int i = lane; i < 16 * kChunks; i += 32) {
          const int r = slice_row<Traits>(s) + i / kChunks, c = i % kChunks;
          if (row0 + r < p.seqlen_q && c * 8 < p.head_dim)
            *reinterpret_cast<uint4*>(o_head + (row0 + r) * p.o_stride[1] + c * 8) =
                *reinterpret_cast<const uint4*>(sO + r * kStride + c * 8);
        }
    }
    if constexpr (Traits::kPersistent) __syncwarp();  // the rows are read before the next block's Q lands in them
  };

  // The CTA's blocks: persistent rows walk the snake (fwd_tile_order.cuh), the FA1 grid's CTA its head's blocks,
  // every other CTA block blockIdx.x alone (without a loop around it: it would cost registers).
  if constexpr (Traits::kPersistent) {
    for_each_persistent_tile(p, work);
  } else if constexpr ((kVariant & kSequentialQBlocks) != 0) {
    for (int mi = 0; mi < p.m_blocks; ++mi) work(static_cast<int>(blockIdx.x) * p.m_blocks + mi, mi);
  } else {
    work(static_cast<int>(blockIdx.x), 0);
  }
}

}  // namespace flashtile::cuda::sm80
