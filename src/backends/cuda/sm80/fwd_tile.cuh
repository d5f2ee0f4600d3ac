// The pieces both sm80 forward schedules are built from (fwd_kernel.cuh: FlashAttention-2;
// fwd_fa1_kernel.cuh: FlashAttention-1): tile loads, the Q K^T product, softcap and mask, and the P V product.
// Fragment layouts follow ptx.cuh (mma_16x8x16): with g = lane / 4 and t = lane % 4, a thread holds rows g and
// g + 8 of each 16-row slice, and columns 2t, 2t + 1 of each 8-column block.
//   acc_s [kMSlices][kBlockN / 8][4]  scores / probabilities of this warp's rows against one K/V tile
//   acc_o [kMSlices][kHeadDim / 8][4] the output accumulator of the same rows
#pragma once

#include <cmath>

#include "backends/cuda/fwd_kernel_params.hpp"
#include "backends/cuda/quad_reduce.cuh"
#include "backends/cuda/sm80/fwd_config.hpp"
#include "backends/cuda/sm80/ptx.cuh"
#include "backends/cuda/visible_keys.hpp"

namespace flashtile::cuda::sm80 {

// Copies rows [row0, row0 + kRows) of one head into shared memory; rows past `rows_valid` and columns past
// `cols_valid` become zeros (so padded head dims and sequence ends contribute nothing). kLoaders threads share
// the copy, `loader` (0 .. kLoaders - 1) being this one: the whole CTA (load_rows_async) or one warp for its own
// rows. The trip count is a compile-time constant, so the loop unrolls: a rolled loop cost ~30 instructions per
// 16-byte copy, a third of the forward's instruction stream (docs/perf-log.md, v5). kSwizzle: the unpadded layout
// whose chunk c of row r sits at c ^ (r % 8) (SmemTile, warp_mma.cuh; Traits::kRowStride is then the head dim, a
// multiple of 64), so each 128-byte line of a row lands in one aligned 128-byte line of shared memory.
template <typename Traits, int kRows, int kLoaders, bool kSwizzle = false, typename T>
__device__ __forceinline__ void load_rows_async_by(unsigned loader, T* smem, const T* head_base, int64_t row_stride,
                                                   int row0, int rows_valid, int cols_valid) {
  constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kTotal = kRows * kChunks;
  static_assert(!kSwizzle || (kChunks % 8 == 0 && Traits::kRowStride == Traits::kHeadDim),
                "the swizzled layout permutes whole 128-byte lines of unpadded rows");
  if constexpr (kSwizzle && kChunks == 24 && kLoaders % 8 == 0 && kRows % (kLoaders / 8) == 0 &&
                (kLoaders / 8) % 8 == 0) {
    // Swizzled rows of three 128-byte lines (D = 192; only the backward's dK/dV kernel copies swizzled rows):
    // eight loaders a line, each taking its chunk q of every line of its row. The swizzle permutes chunks inside a
    // line only (chunk 8 l + q of row r sits at 8 l + (q ^ r % 8)), so a loader's copies of one row are 128 bytes
    // apart in both memories: one global and one shared address a row, the lines at immediate offsets. A warp's
    // copy still reads whole 128-byte lines (four rows, one line each) into four aligned shared lines. The forms
    // below take an address and a select per copy, and at D = 192 (no whole rows per pass) a division: static
    // SASS (sm_90a, bf16) of the backward's unmasked step 946 -> 813 instructions a warp, and the backward +3.7-4.7%
    // (same-call A/B, docs/perf-log.md, backward v23). D = 256 measured -2.3 to -3.0% with it (1099 -> 1021
    // instructions, spills 4 -> 0 bytes; not understood), and D = 128 spilled 12 bytes in its loop, so both keep
    // the row-a-pass form. Where every chunk of the block is real (uniform: every step but a head's last, at the
    // kernel's own head dim) the copies take no predicate or select. Otherwise a copy past rows_valid or
    // cols_valid reads nothing (src-size 0) from an address inside the tensor (its row's first chunk, or
    // head_base's row).
    constexpr int kLines = kChunks / 8, kRowsPerPass = kLoaders / 8;
    const int r = loader / 8, q = loader % 8;
    const T* src = head_base + (row0 + r) * row_stride + q * 8;
    const int64_t src_step = kRowsPerPass * row_stride;
    T* dst = smem + r * Traits::kRowStride + (q ^ (r & 7)) * 8;
    if (row0 + kRows <= rows_valid && cols_valid >= Traits::kHeadDim) {  // uniform: every chunk is real
#pragma unroll
      for (int j = 0; j < kRows / kRowsPerPass; ++j, src += src_step)
#pragma unroll
        for (int l = 0; l < kLines; ++l)
          cp_async_16(dst + j * kRowsPerPass * Traits::kRowStride + l * 64, src + l * 64, 16);
      return;
    }
#pragma unroll
    for (int j = 0; j < kRows / kRowsPerPass; ++j, src += src_step) {
      const bool row_valid = row0 + r + j * kRowsPerPass < rows_valid;
      const T* row_src = row_valid ? src : head_base + q * 8;
#pragma unroll
      for (int l = 0; l < kLines; ++l) {
        const bool valid = row_valid && l * 64 + q * 8 < cols_valid;
        cp_async_16(dst + j * kRowsPerPass * Traits::kRowStride + l * 64, valid ? row_src + l * 64 : row_src,
                    valid ? 16 : 0);
      }
    }
  } else if constexpr (kLoaders % kChunks == 0 && kRows % (kLoaders / kChunks) == 0 &&
                       (!kSwizzle || (kLoaders / kChunks) % 8 == 0)) {
    // One pass of the loaders covers kRowsPerPass whole rows, so each thread keeps its column and steps down
    // (and, swizzled, its row's r % 8: passes of a multiple of 8 rows).
    constexpr int kRowsPerPass = kLoaders / kChunks;
    const int r = loader / kChunks, c = loader % kChunks;  // (unsigned: the divisions are shifts)
    const bool col_valid = c * 8 < cols_valid;
    const T* src = head_base + (row0 + r) * row_stride + c * 8;
    const int64_t src_step = kRowsPerPass * row_stride;
    T* dst = smem + r * Traits::kRowStride + (kSwizzle ? c ^ (r & 7) : c) * 8;
#pragma unroll
    for (int j = 0; j < kRows / kRowsPerPass; ++j, src += src_step) {
      const bool valid = col_valid && row0 + r + j * kRowsPerPass < rows_valid;
      cp_async_16(dst + j * kRowsPerPass * Traits::kRowStride, valid ? src : head_base, valid ? 16 : 0);
    }
  } else {  // head dims whose row of chunks does not divide the loader count (96, 192), or whose passes
           // do not keep r % 8 (swizzled)
#pragma unroll
    for (int j = 0; j < (kTotal + kLoaders - 1) / kLoaders; ++j) {
      const int i = loader + j * kLoaders;
      if (kTotal % kLoaders != 0 && i >= kTotal) break;
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = row0 + r < rows_valid && c * 8 < cols_valid;
      const T* src = valid ? head_base + (row0 + r) * row_stride + c * 8 : head_base;
      cp_async_16(smem + r * Traits::kRowStride + (kSwizzle ? c ^ (r & 7) : c) * 8, src, valid ? 16 : 0);
    }
  }
}
// The same, shared by every thread of the CTA.
template <typename Traits, int kRows, bool kSwizzle = false, typename T>
__device__ __forceinline__ void load_rows_async(T* smem, const T* head_base, int64_t row_stride, int row0,
                                                int rows_valid, int cols_valid) {
  load_rows_async_by<Traits, kRows, Traits::kThreads, kSwizzle>(threadIdx.x, smem, head_base, row_stride, row0,
                                                                rows_valid, cols_valid);
}

// The reverse of load_rows_async_by: rows [row0, rows_valid) and columns [0, cols_valid) of a tile that the
// kStorers storers (the CTA's threads, or a warp for its own rows) have written to shared memory in the same
// layout go to global memory in 16-byte chunks, the storers covering whole 128-byte lines of a row; `storer` is
// this one. As in the copy in, each storer keeps its column and steps down the rows (one 64-bit pointer a pass)
// where a pass covers whole rows.
template <typename Traits, int kRows, int kStorers, bool kSwizzle = false, typename T>
__device__ __forceinline__ void store_rows_by(unsigned storer, const T* smem, T* head_base, int64_t row_stride,
                                              int row0, int rows_valid, int cols_valid) {
  constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kRowsPerPass = kStorers / kChunks;
  if constexpr (kStorers % kChunks == 0 && kRows % kRowsPerPass == 0 && (!kSwizzle || kRowsPerPass % 8 == 0)) {
    const unsigned r = storer / kChunks, c = storer % kChunks;
    if (c * 8 >= static_cast<unsigned>(cols_valid)) return;
    T* dst = head_base + (row0 + static_cast<int>(r)) * row_stride + c * 8;
    const T* src = smem + r * Traits::kRowStride + (kSwizzle ? c ^ (r & 7) : c) * 8;
#pragma unroll
    for (int j = 0; j < kRows / kRowsPerPass; ++j, dst += kRowsPerPass * row_stride)
      if (row0 + static_cast<int>(r) + j * kRowsPerPass < rows_valid)
        *reinterpret_cast<uint4*>(dst) =
            *reinterpret_cast<const uint4*>(src + j * kRowsPerPass * Traits::kRowStride);
  } else {
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int j = 0; j < (kTotal + kStorers - 1) / kStorers; ++j) {
      const int i = static_cast<int>(storer) + j * kStorers;
      if (kTotal % kStorers != 0 && i >= kTotal) break;
      const int r = i / kChunks, c = i % kChunks;
      if (row0 + r < rows_valid && c * 8 < cols_valid)
        *reinterpret_cast<uint4*>(head_base + (row0 + r) * row_stride + c * 8) =
            *reinterpret_cast<const uint4*>(smem + r * Traits::kRowStride + (kSwizzle ? c ^ (r & 7) : c) * 8);
    }
  }
}
template <typename Traits, int kRows, bool kSwizzle = false, typename T>
__device__ __forceinline__ void store_rows(unsigned tid, const T* smem, T* head_base, int64_t row_stride, int row0,
                                           int rows_valid, int cols_valid) {
  store_rows_by<Traits, kRows, Traits::kThreads, kSwizzle>(tid, smem, head_base, row_stride, row0, rows_valid,
                                                           cols_valid);
}

// First row of slice s of this warp, within the CTA's block of kBlockM rows.
template <typename Traits>
__device__ __forceinline__ int slice_row(int s) {
  return (s * Traits::kNWarps + static_cast<int>(threadIdx.x / 32)) * 16;
}

// A hint (prefetch_l2) for the 128-byte lines of this warp's rows (its kMSlices slices of 16, as slice_row
// places them) of the block at row0, columns [0, cols_valid).
template <typename Traits, typename T>
__device__ __forceinline__ void prefetch_warp_rows_l2(const T* head_base, int64_t row_stride, int row0,
                                                      int rows_valid, int cols_valid) {
  constexpr int kLines = (Traits::kHeadDim * sizeof(T) + 127) / 128;  // per row
  constexpr int kLineElems = 128 / sizeof(T);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = lane; i < Traits::kMSlices * 16 * kLines; i += 32) {
    const int row = row0 + slice_row<Traits>(i / (16 * kLines)) + (i / kLines) % 16, c = i % kLines;
    if (row < rows_valid && c * kLineElems < cols_valid) prefetch_l2(head_base + row * row_stride + c * kLineElems);
  }
}

// The same hint for kRows rows from row0 (a K or V tile), spread over the CTA's threads.
template <typename Traits, int kRows, typename T>
__device__ __forceinline__ void prefetch_rows_l2(const T* head_base, int64_t row_stride, int row0, int rows_valid,
                                                 int cols_valid) {
  constexpr int kLines = (Traits::kHeadDim * sizeof(T) + 127) / 128;  // per row
  constexpr int kLineElems = 128 / sizeof(T);
#pragma unroll
  for (int i = threadIdx.x; i < kRows * kLines; i += Traits::kThreads) {
    const int row = row0 + i / kLines, c = i % kLines;
    if (row < rows_valid && c * kLineElems < cols_valid) prefetch_l2(head_base + row * row_stride + c * kLineElems);
  }
}

// acc_s = Q K^T for this warp's rows: sQ (kBlockM x kHeadDim) against one K tile sK (kBlockN x kHeadDim).
template <typename Traits, typename T>
__device__ __forceinline__ void tile_scores(const T* sQ, const T* sK,
                                            float (&acc_s)[Traits::kMSlices][Traits::kBlockN / 8][4]) {
  constexpr int kMSlices = Traits::kMSlices, kNB = Traits::kBlockN / 8, kStride = Traits::kRowStride;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int s = 0; s < kMSlices; ++s)
#pragma unroll
    for (int n = 0; n < kNB; ++n) acc_s[s][n][0] = acc_s[s][n][1] = acc_s[s][n][2] = acc_s[s][n][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < Traits::kHeadDim / 16; ++ks) {
    uint32_t qf[kMSlices][4];
#pragma unroll
    for (int s = 0; s < kMSlices; ++s)
      ldmatrix_x4(qf[s], sQ + (slice_row<Traits>(s) + lane % 16) * kStride + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int n2 = 0; n2 < kNB / 2; ++n2) {
      uint32_t kf[4];
      ldmatrix_x4(kf, sK + (n2 * 16 + lane % 8 + (lane / 16) * 8) * kStride + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int s = 0; s < kMSlices; ++s) {
        mma_16x8x16<T>(acc_s[s][2 * n2], qf[s], kf[0], kf[1]);
        mma_16x8x16<T>(acc_s[s][2 * n2 + 1], qf[s], kf[2], kf[3]);
      }
    }
  }
}

// Whether every query of a tile (up to last_query, the last real one) sees every key of it, so the tile needs no
// mask. Rows are queries [row0, row0 + kBlockM) and columns keys [col0, col0 + kBlockN).
template <typename Traits>
__device__ __forceinline__ bool tile_fully_visible(const FwdKernelParams& p, int row0, int col0, int last_query) {
  return last_query + p.key_offset - p.window_left <= col0 &&
         row0 + p.key_offset + p.window_right >= col0 + Traits::kBlockN - 1 && col0 + Traits::kBlockN <= p.seqlen_k;
}

// Whether no query in [first_query, last_query] sees any key of the tile starting at key col0 (an empty range
// counts as hidden).
template <typename Traits>
__device__ __forceinline__ bool tile_hidden(const FwdKernelParams& p, int first_query, int last_query, int col0) {
  return last_query < first_query || col0 > last_query + p.key_offset + p.window_right ||
         col0 + Traits::kBlockN - 1 < first_query + p.key_offset - p.window_left;
}

// Softcap, then (kMasked) the mask, on a tile of scores; hidden scores become -inf. The mask is tested against
// absolute keys, or (rows with kRelativeMask, fwd_config.hpp) against per-row bounds relative to the thread's
// first key (VisibleKeys); the two compile to different register allocations of the whole kernel. Callers pick
// kMasked with tile_fully_visible and instantiate both: a runtime test inside was if-converted by the compiler
// into ~260 predicated instructions issued on every tile (docs/perf-log.md, v6).
template <typename Traits, bool kSoftcap, bool kMasked>
__device__ __forceinline__ void cap_and_mask(const FwdKernelParams& p, int row0, int col0,
                                             float (&acc_s)[Traits::kMSlices][Traits::kBlockN / 8][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int s = 0; s < Traits::kMSlices; ++s)
#pragma unroll
    for (int n = 0; n < Traits::kBlockN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = acc_s[s][n][e];
        if (kSoftcap) x = p.softcap * tanhf(x * p.scale_over_cap);
        if (kMasked) {  // row g or g + 8 of the slice; this thread's keys start at col0 + 2 t
          const int query = row0 + slice_row<Traits>(s) + g + (e / 2) * 8;
          bool visible;
          if constexpr (Traits::kRelativeMask) {
            visible = VisibleKeys(p, query, col0 + 2 * t).sees(n * 8 + e % 2);
          } else {
            const int key = col0 + n * 8 + 2 * t + e % 2;
            visible = key < p.seqlen_k && key >= query + p.key_offset - p.window_left &&
                      key <= query + p.key_offset + p.window_right;
          }
          x = visible ? x : -INFINITY;
        }
        acc_s[s][n][e] = x;
      }
}

// The same with the choice made at run time, for kernels whose masked and unmasked tiles share one code path.
template <typename Traits, bool kSoftcap>
__device__ __forceinline__ void cap_and_mask(const FwdKernelParams& p, int row0, int col0, int last_query,
                                             float (&acc_s)[Traits::kMSlices][Traits::kBlockN / 8][4]) {
  if (tile_fully_visible<Traits>(p, row0, col0, last_query))
    cap_and_mask<Traits, kSoftcap, false>(p, row0, col0, acc_s);
  else
    cap_and_mask<Traits, kSoftcap, true>(p, row0, col0, acc_s);
}

// acc_o += P V: P from the probabilities in acc_s (their layout is the A fragment's), V from one tile sV
// (kBlockN x kHeadDim, keys down the rows, so it is read through ldmatrix's transpose). kCols < kHeadDim takes
// the kCols columns sV points at (the backward's halves of a large head dim; sV is offset by the caller).
template <typename Traits, typename T, int kCols = Traits::kHeadDim>
__device__ __forceinline__ void tile_accumulate_pv(const float (&acc_s)[Traits::kMSlices][Traits::kBlockN / 8][4],
                                                   const T* sV, float (&acc_o)[Traits::kMSlices][kCols / 8][4]) {
  constexpr int kMSlices = Traits::kMSlices, kStride = Traits::kRowStride;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
    uint32_t pf[kMSlices][4];
#pragma unroll
    for (int s = 0; s < kMSlices; ++s) {
      pf[s][0] = pack2<T>(acc_s[s][2 * kk][0], acc_s[s][2 * kk][1]);
      pf[s][1] = pack2<T>(acc_s[s][2 * kk][2], acc_s[s][2 * kk][3]);
      pf[s][2] = pack2<T>(acc_s[s][2 * kk + 1][0], acc_s[s][2 * kk + 1][1]);
      pf[s][3] = pack2<T>(acc_s[s][2 * kk + 1][2], acc_s[s][2 * kk + 1][3]);
    }
#pragma unroll
    for (int d2 = 0; d2 < kCols / 16; ++d2) {
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, sV + (kk * 16 + lane % 16) * kStride + d2 * 16 + (lane / 16) * 8);
#pragma unroll
      for (int s = 0; s < kMSlices; ++s) {
        mma_16x8x16<T>(acc_o[s][2 * d2], pf[s], vf[0], vf[1]);
        mma_16x8x16<T>(acc_o[s][2 * d2 + 1], pf[s], vf[2], vf[3]);
      }
    }
  }
}

}  // namespace flashtile::cuda::sm80
