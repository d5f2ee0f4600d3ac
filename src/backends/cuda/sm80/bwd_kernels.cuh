// The sm80 backward, built from the forward's tile pieces (fwd_tile.cuh). Two modes:
//
// Default (BackwardParams::deterministic = false), FlashAttention-2's five tile products:
//   1. bwd_delta_kernel: D = rowsum(dO * O) per query row (fp32), the term every dS needs;
//   2. bwd_dkdv_kernel<kAccumulateDq = true>: one CTA per (key block, batch, K/V head); warps split the keys;
//      loops over the group's query heads and the query blocks that see the keys:
//        S^T = K Q^T, P^T = exp(S^T - LSE), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D) scale,
//        dK += dS^T Q, and dQ += dS K added into an fp32 accumulator with atomics
//        (P is recomputed from the saved LSE, never stored);
//   3. bwd_dq_convert_kernel: dQ = the accumulator, in the input dtype.
// The atomics make dQ's rounding depend on the order the key blocks finish in.
//
// Deterministic: kernel 2 without the dQ part, then
//   3'. bwd_dq_kernel: one CTA per (query block, batch, query head), the forward's shape:
//        S = Q K^T, P = exp(S - LSE), dP = dO V^T, dS = P (dP - D) scale, dQ += dS K.
// Every CTA owns what it writes, so the gradients are bitwise identical from run to run; the price is
// recomputing S and dP (seven tile products instead of five).
//
// Both main kernels prefetch a step's tiles while the previous step's products run, where shared memory allows
// (run_steps, BwdKernelParams::prefetch; bwd_config.hpp, bwd_smem_bytes).
#pragma once

#include <type_traits>

#include "backends/cuda/bwd_kernel_params.hpp"
#include "backends/cuda/sm80/bwd_config.hpp"
#include "backends/cuda/sm80/fwd_tile.cuh"

namespace flashtile::cuda::sm80 {

// The query row of this warp in the one-warp-per-row kernels (D, dQ conversion): rows in (batch, head, row)
// order, the order of the D and dQ workspaces. False for the warps past the last row.
struct WarpRow {
  int64_t index;  // into the workspaces
  int b, h, i;
  __device__ bool find(const FwdKernelParams& f) {
    index = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (index >= static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q) return false;
    i = static_cast<int>(index % f.seqlen_q), h = static_cast<int>((index / f.seqlen_q) % f.heads_q);
    b = static_cast<int>(index / (static_cast<int64_t>(f.seqlen_q) * f.heads_q));
    return true;
  }
};

// D for one query row per warp: lanes stride over the head dim.
template <typename T>
__global__ void bwd_delta_kernel(const BwdKernelParams p) {
  const FwdKernelParams& f = p.fwd;
  WarpRow r;
  if (!r.find(f)) return;
  const int b = r.b, h = r.h, i = r.i;
  const T* o = static_cast<const T*>(f.o) + b * f.o_stride[0] + i * f.o_stride[1] + h * f.o_stride[2];
  const T* d = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + i * p.dout_stride[1] + h * p.dout_stride[2];
  float acc = 0.0f;
  for (int c = threadIdx.x % 32; c < f.head_dim; c += 32) acc += static_cast<float>(o[c]) * static_cast<float>(d[c]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) p.delta[r.index] = acc;
}

// The LSE in log2 units, with rows that saw no key (LSE = -inf) mapped to 0: all their scores are -inf, so P is
// 0 either way, and -inf - -inf would be NaN.
__device__ __forceinline__ float lse_log2(float lse) { return lse == -INFINITY ? 0.0f : lse * 1.4426950408889634f; }

// dS = P (dP - D) scale, times (1 - tanh^2) under a softcap. P = 0 (a hidden key) gives exactly 0, so a NaN
// dP from a NaN stored at a hidden key stays out; a NaN P (NaN inputs the row sees) stays NaN.
template <bool kSoftcap>
__device__ __forceinline__ float grad_score(float prob, float dp, float delta, float capped, const FwdKernelParams& f,
                                            float scale) {
  if (prob == 0.0f) return 0.0f;
  float ds = prob * (dp - delta) * scale;
  if (kSoftcap) {
    const float th = capped / f.softcap;
    ds *= 1.0f - th * th;
  }
  return ds;
}

// dQ += dS K for one step's kBlockN query rows, added into the fp32 accumulator with atomics (default mode).
// dS^T arrives in this warp's registers (its 16 keys x kBlockN queries); it goes through shared memory so that
// each warp can take 16 of the query rows against all kBlockM keys of the CTA, the A operand read transposed.
//   sdS: kBlockM x (kBlockN + 8) of T, over the step's Q tile (its last reader, dK += dS^T Q, is done once the
//   CTA passes the barrier below); sK: the CTA's keys; dq_head: the accumulator of this (batch, head), rows of
//   head_dim floats. The CTA adds the kOutCols columns from col0 (bwd_config.hpp).
template <typename Traits, typename T>
__device__ __forceinline__ void accumulate_dq(const float (&ds_t)[1][Traits::kBlockN / 8][4], T* sdS, const T* sK,
                                              float* dq_head, int row0, int col0, int seqlen_q, int head_dim) {
  constexpr int kKeys = Traits::kBlockM, kQueries = Traits::kBlockN, kDsStride = kQueries + 8;
  constexpr int kStride = Traits::kRowStride, kDB = Traits::kOutCols / 8;
  static_assert(kQueries == Traits::kNWarps * 16, "each warp takes 16 of the step's query rows");
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int key = slice_row<Traits>(0) + g;  // this thread's dS^T rows: key and key + 8
  static_assert(kKeys * kDsStride <= kQueries * kStride, "dS^T must fit in the Q tile it overwrites");
  __syncthreads();  // every warp is done reading the Q tile
#pragma unroll
  for (int n = 0; n < kQueries / 8; ++n) {
    *reinterpret_cast<uint32_t*>(sdS + key * kDsStride + n * 8 + 2 * t) = pack2<T>(ds_t[0][n][0], ds_t[0][n][1]);
    *reinterpret_cast<uint32_t*>(sdS + (key + 8) * kDsStride + n * 8 + 2 * t) =
        pack2<T>(ds_t[0][n][2], ds_t[0][n][3]);
  }
  __syncthreads();  // every warp's dS^T rows are in sdS

  const int q0 = static_cast<int>(threadIdx.x / 32) * 16;  // this warp's query rows within the step
  float acc[kDB][4] = {};
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    // A = dS (queries x keys) from sdS (keys x queries): matrix i of the x4 load is keys +8*(i/2), queries
    // +8*(i%2), each transposed on the way, which is the A fragment's order (ptx.cuh).
    uint32_t a[4];
    const int mi = lane / 8;
    ldmatrix_x4_trans(a, sdS + (kk * 16 + lane % 8 + (mi / 2) * 8) * kDsStride + q0 + (mi % 2) * 8);
#pragma unroll
    for (int d2 = 0; d2 < Traits::kOutCols / 16; ++d2) {
      uint32_t kf[4];  // B = K (keys x head dim), keys down the rows: read as V is in tile_accumulate_pv
      ldmatrix_x4_trans(kf, sK + (kk * 16 + lane % 16) * kStride + col0 + d2 * 16 + (lane / 16) * 8);
      mma_16x8x16<T>(acc[2 * d2], a, kf[0], kf[1]);
      mma_16x8x16<T>(acc[2 * d2 + 1], a, kf[2], kf[3]);
    }
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + q0 + g + hr * 8;
    if (row >= seqlen_q) continue;
    float* dst = dq_head + static_cast<int64_t>(row) * head_dim;
#pragma unroll
    for (int d = 0; d < kDB; ++d) {
      const int col = col0 + d * 8 + 2 * t;
      if (col < head_dim) {
#if __CUDA_ARCH__ >= 900  // one 8-byte reduction (red.global.add.v2.f32) instead of two: half the atomic traffic
        atomicAdd(reinterpret_cast<float2*>(dst + col), make_float2(acc[d][2 * hr], acc[d][2 * hr + 1]));
#else
        atomicAdd(dst + col, acc[d][2 * hr]);
        atomicAdd(dst + col + 1, acc[d][2 * hr + 1]);
#endif
      }
    }
  }
}

// dQ = the fp32 accumulator in the input dtype (default mode), one warp per query row.
template <typename T>
__global__ void bwd_dq_convert_kernel(const BwdKernelParams p) {
  const FwdKernelParams& f = p.fwd;
  WarpRow r;
  if (!r.find(f)) return;
  const float* src = p.dq_accum + r.index * f.head_dim;
  T* dst = static_cast<T*>(p.dq) + r.b * p.dq_stride[0] + r.i * p.dq_stride[1] + r.h * p.dq_stride[2];
  for (int c = 2 * (threadIdx.x % 32); c < f.head_dim; c += 64)
    *reinterpret_cast<uint32_t*>(dst + c) = pack2<T>(src[c], src[c + 1]);
}

// The step loop of both main kernels. A CTA keeps two tiles (K and V, or Q and dO) and walks steps that each
// bring two others (Q and dO, or K and V). With prefetch (BwdKernelParams::prefetch) a step's tiles are loaded
// into one of two buffers while the previous step's products run on the other; without, into the one buffer
// at the top of the step. issue(step, buffer) starts a step's loads and commits them as one cp.async group;
// body(step, buffer) runs its products. Groups committed before the loop (the CTA's own tiles) have landed
// before the first body.
template <typename Issue, typename Body>
__device__ __forceinline__ void run_steps(int n_steps, bool prefetch, Issue&& issue, Body&& body) {
  if (prefetch && n_steps > 0) issue(0, 0);
  for (int step = 0; step < n_steps; ++step) {
    const int buffer = prefetch ? step & 1 : 0;
    __syncthreads();  // every warp is done with the previous step, whose buffer the next loads refill
    const bool ahead = prefetch && step + 1 < n_steps;
    if (ahead)
      issue(step + 1, buffer ^ 1);
    else if (!prefetch)
      issue(step, 0);
    if (ahead)
      cp_async_wait<1>();  // all but the group just issued: this step's tiles
    else
      cp_async_wait<0>();
    __syncthreads();  // every thread's copies of this step's tiles are visible to all
    body(step, buffer);
  }
  cp_async_wait<0>();  // with no step, the CTA's own tiles are still in flight; keep the group count clean
}

template <typename Traits, typename T, bool kSoftcap, bool kAccumulateDq>
__global__ void __launch_bounds__(Traits::kThreads) bwd_dkdv_kernel(const BwdKernelParams p) {
  constexpr int kRows = Traits::kBlockM, kCols = Traits::kBlockN;  // keys per CTA, queries per step
  constexpr int kStride = Traits::kRowStride, kNB = kCols / 8, kDB = Traits::kOutCols / 8;
  constexpr int kTile = kCols * kStride;  // elements of one step's Q or dO tile
  static_assert(Traits::kMSlices == 1, "one 16-row slice per warp");
  const FwdKernelParams& f = p.fwd;
  const int col0 = static_cast<int>(blockIdx.y) * Traits::kOutCols;  // this CTA's dK/dV (and dQ) columns
  const int buffers = p.prefetch ? 2 : 1;
  // Shared memory (bwd_smem_bytes): K, V; then Q [buffers][kCols][kStride], dO likewise, and the per-column
  // LSE (log2) and D of each buffer's step [buffers][kCols].
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kRows * kStride;
  T* sQ = sV + kRows * kStride;
  T* sDO = sQ + buffers * kTile;
  float* sLse2 = reinterpret_cast<float*>(sDO + buffers * kTile);
  float* sDelta = sLse2 + buffers * kCols;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  const int n_block = blockIdx.x % p.n_blocks, bhk = blockIdx.x / p.n_blocks;
  const int b = bhk / p.heads_kv, hk = bhk % p.heads_kv;
  const int key0 = n_block * kRows;
  const T* k_head = static_cast<const T*>(f.k) + b * f.k_stride[0] + hk * f.k_stride[2];
  const T* v_head = static_cast<const T*>(f.v) + b * f.v_stride[0] + hk * f.v_stride[2];
  load_rows_async<Traits, kRows>(sK, k_head, f.k_stride[1], key0, f.seqlen_k, f.head_dim);
  load_rows_async<Traits, kRows>(sV, v_head, f.v_stride[1], key0, f.seqlen_k, f.head_dim);
  cp_async_commit();

  // The steps: each query head of the group, times each block of kCols query rows that sees a key of this
  // block, [row_begin, row_end) (KeyRange::row_begin / row_end).
  const int row_begin = max(0, key0 - f.key_offset - f.window_right);
  const int row_end = min(f.seqlen_q, key0 + kRows - f.key_offset + f.window_left);
  const int row_first = row_begin / kCols * kCols;
  const int per_head = row_begin < row_end ? (row_end - row_first + kCols - 1) / kCols : 0;
  auto head_of = [&](int step) { return hk * f.group + step / per_head; };
  auto row0_of = [&](int step) { return row_first + step % per_head * kCols; };

  auto issue = [&](int step, int buffer) {
    const int h = head_of(step), row0 = row0_of(step);
    const T* q_head = static_cast<const T*>(f.q) + b * f.q_stride[0] + h * f.q_stride[2];
    const T* do_head = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + h * p.dout_stride[2];
    load_rows_async<Traits, kCols>(sQ + buffer * kTile, q_head, f.q_stride[1], row0, f.seqlen_q, f.head_dim);
    load_rows_async<Traits, kCols>(sDO + buffer * kTile, do_head, p.dout_stride[1], row0, f.seqlen_q, f.head_dim);
    cp_async_commit();
    for (int c = threadIdx.x; c < kCols; c += Traits::kThreads) {
      const int row = row0 + c;
      const bool real = row < f.seqlen_q;
      sLse2[buffer * kCols + c] =
          real ? lse_log2(f.lse[b * f.lse_stride[0] + h * f.lse_stride[1] + row * f.lse_stride[2]]) : 0.0f;
      sDelta[buffer * kCols + c] = real ? p.delta[(static_cast<int64_t>(b) * f.heads_q + h) * f.seqlen_q + row] : 0.0f;
    }
  };

  float acc_dk[1][kDB][4] = {}, acc_dv[1][kDB][4] = {};
  auto body = [&](int step, int buffer) {
    const int h = head_of(step), row0 = row0_of(step);
    T* bQ = sQ + buffer * kTile;
    const T* bDO = sDO + buffer * kTile;
    const float* bLse2 = sLse2 + buffer * kCols;
    const float* bDelta = sDelta + buffer * kCols;
    // The step's tile products, compiled with and without the mask (fwd_tile.cuh, cap_and_mask).
    auto products = [&](auto masked) {
      float acc_s[1][kNB][4], capped[1][kNB][4];
      tile_scores<Traits, T>(sK, bQ, acc_s);  // S^T: keys down the rows
      cap_and_mask<Traits, kSoftcap, decltype(masked)::value, /*kKeysAsRows=*/true>(f, key0, row0, acc_s);
#pragma unroll
      for (int n = 0; n < kNB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          capped[0][n][e] = acc_s[0][n][e];
          acc_s[0][n][e] = exp2_approx(fmaf(acc_s[0][n][e], f.scale_log2, -bLse2[n * 8 + 2 * t + e % 2]));
        }
      tile_accumulate_pv<Traits, T, Traits::kOutCols>(acc_s, bDO + col0, acc_dv);  // dV += P^T dO

      float acc_dp[1][kNB][4];
      tile_scores<Traits, T>(sV, bDO, acc_dp);  // dP^T = V dO^T
#pragma unroll
      for (int n = 0; n < kNB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc_s[0][n][e] = grad_score<kSoftcap>(acc_s[0][n][e], acc_dp[0][n][e], bDelta[n * 8 + 2 * t + e % 2],
                                                capped[0][n][e], f, p.scale);
      tile_accumulate_pv<Traits, T, Traits::kOutCols>(acc_s, bQ + col0, acc_dk);  // dK += dS^T Q
      if constexpr (kAccumulateDq) {  // dQ += dS K, atomically (every CTA whose keys these rows see adds)
        float* dq_head = p.dq_accum + (static_cast<int64_t>(b) * f.heads_q + h) * f.seqlen_q * f.head_dim;
        accumulate_dq<Traits, T>(acc_s, bQ, sK, dq_head, row0, col0, f.seqlen_q, f.head_dim);
      }
    };
    if (tile_fully_visible<Traits, /*kKeysAsRows=*/true>(f, key0, row0, min(row0 + kCols, f.seqlen_q) - 1))
      products(std::false_type{});
    else
      products(std::true_type{});
  };
  run_steps(per_head * f.group, p.prefetch, issue, body);

  // dK and dV rows of this block (zeros for keys no query sees).
  T* dk_head = static_cast<T*>(p.dk) + b * p.dk_stride[0] + hk * p.dk_stride[2];
  T* dv_head = static_cast<T*>(p.dv) + b * p.dv_stride[0] + hk * p.dv_stride[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int key = key0 + slice_row<Traits>(0) + g + hr * 8;
    if (key >= f.seqlen_k) continue;
#pragma unroll
    for (int d = 0; d < kDB; ++d) {
      const int col = col0 + d * 8 + 2 * t;
      if (col >= f.head_dim) continue;
      *reinterpret_cast<uint32_t*>(dk_head + key * p.dk_stride[1] + col) =
          pack2<T>(acc_dk[0][d][2 * hr], acc_dk[0][d][2 * hr + 1]);
      *reinterpret_cast<uint32_t*>(dv_head + key * p.dv_stride[1] + col) =
          pack2<T>(acc_dv[0][d][2 * hr], acc_dv[0][d][2 * hr + 1]);
    }
  }
}

template <typename Traits, typename T, bool kSoftcap>
__global__ void __launch_bounds__(Traits::kThreads) bwd_dq_kernel(const BwdKernelParams p) {
  constexpr int kRows = Traits::kBlockM, kCols = Traits::kBlockN;  // queries per CTA, keys per step
  constexpr int kStride = Traits::kRowStride, kNB = kCols / 8, kDB = Traits::kOutCols / 8;
  constexpr int kTile = kCols * kStride;  // elements of one step's K or V tile
  static_assert(Traits::kMSlices == 1, "one 16-row slice per warp");
  const FwdKernelParams& f = p.fwd;
  const int col0 = static_cast<int>(blockIdx.y) * Traits::kOutCols;  // this CTA's dQ columns
  const int buffers = p.prefetch ? 2 : 1;
  // Shared memory: Q, dO; then K [buffers][kCols][kStride] and V likewise.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sDO = sQ + kRows * kStride;
  T* sK = sDO + kRows * kStride;
  T* sV = sK + buffers * kTile;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  const int m_block = f.m_blocks - 1 - blockIdx.x % f.m_blocks, bh = blockIdx.x / f.m_blocks;
  const int b = bh / f.heads_q, h = bh % f.heads_q, hk = h / f.group;
  const int row0 = m_block * kRows, row_last = min(row0 + kRows, f.seqlen_q) - 1;
  const T* q_head = static_cast<const T*>(f.q) + b * f.q_stride[0] + h * f.q_stride[2];
  const T* do_head = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + h * p.dout_stride[2];
  const T* k_head = static_cast<const T*>(f.k) + b * f.k_stride[0] + hk * f.k_stride[2];
  const T* v_head = static_cast<const T*>(f.v) + b * f.v_stride[0] + hk * f.v_stride[2];
  load_rows_async<Traits, kRows>(sQ, q_head, f.q_stride[1], row0, f.seqlen_q, f.head_dim);
  load_rows_async<Traits, kRows>(sDO, do_head, p.dout_stride[1], row0, f.seqlen_q, f.head_dim);
  cp_async_commit();

  float lse2[2], delta[2];  // this thread's fragment rows g and g + 8
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + slice_row<Traits>(0) + g + hr * 8;
    const bool real = row < f.seqlen_q;
    lse2[hr] = real ? lse_log2(f.lse[b * f.lse_stride[0] + h * f.lse_stride[1] + row * f.lse_stride[2]]) : 0.0f;
    delta[hr] = real ? p.delta[(static_cast<int64_t>(b) * f.heads_q + h) * f.seqlen_q + row] : 0.0f;
  }

  // The steps: the blocks of kCols keys that some row of this block sees.
  const int key_begin = max(0, row0 + f.key_offset - f.window_left);
  const int key_end = min(f.seqlen_k, row_last + f.key_offset + f.window_right + 1);
  const int key_first = key_begin / kCols * kCols;
  const int n_steps = key_begin < key_end ? (key_end - key_first + kCols - 1) / kCols : 0;
  auto issue = [&](int step, int buffer) {
    const int key0 = key_first + step * kCols;
    load_rows_async<Traits, kCols>(sK + buffer * kTile, k_head, f.k_stride[1], key0, f.seqlen_k, f.head_dim);
    load_rows_async<Traits, kCols>(sV + buffer * kTile, v_head, f.v_stride[1], key0, f.seqlen_k, f.head_dim);
    cp_async_commit();
  };

  float acc_dq[1][kDB][4] = {};
  auto body = [&](int step, int buffer) {
    const int key0 = key_first + step * kCols;
    const T* bK = sK + buffer * kTile;
    const T* bV = sV + buffer * kTile;
    auto products = [&](auto masked) {
      float acc_s[1][kNB][4], capped[1][kNB][4];
      tile_scores<Traits, T>(sQ, bK, acc_s);
      cap_and_mask<Traits, kSoftcap, decltype(masked)::value>(f, row0, key0, acc_s);
#pragma unroll
      for (int n = 0; n < kNB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          capped[0][n][e] = acc_s[0][n][e];
          acc_s[0][n][e] = exp2_approx(fmaf(acc_s[0][n][e], f.scale_log2, -lse2[e / 2]));
        }
      float acc_dp[1][kNB][4];
      tile_scores<Traits, T>(sDO, bV, acc_dp);  // dP = dO V^T
#pragma unroll
      for (int n = 0; n < kNB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc_s[0][n][e] =
              grad_score<kSoftcap>(acc_s[0][n][e], acc_dp[0][n][e], delta[e / 2], capped[0][n][e], f, p.scale);
      tile_accumulate_pv<Traits, T, Traits::kOutCols>(acc_s, bK + col0, acc_dq);  // dQ += dS K
    };
    if (tile_fully_visible<Traits>(f, row0, key0, row_last))
      products(std::false_type{});
    else
      products(std::true_type{});
  };
  run_steps(n_steps, p.prefetch, issue, body);

  T* dq_head = static_cast<T*>(p.dq) + b * p.dq_stride[0] + h * p.dq_stride[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + slice_row<Traits>(0) + g + hr * 8;
    if (row >= f.seqlen_q) continue;
#pragma unroll
    for (int d = 0; d < kDB; ++d) {
      const int col = col0 + d * 8 + 2 * t;
      if (col < f.head_dim)
        *reinterpret_cast<uint32_t*>(dq_head + row * p.dq_stride[1] + col) =
            pack2<T>(acc_dq[0][d][2 * hr], acc_dq[0][d][2 * hr + 1]);
    }
  }
}

}  // namespace flashtile::cuda::sm80
