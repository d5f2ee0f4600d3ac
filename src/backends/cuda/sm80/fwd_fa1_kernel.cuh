// The FlashAttention-1 schedule on the sm80 pieces (fwd_tile.cuh), for the seeds' ablation only: the library's
// forward never runs it. As in the FlashAttention paper's first algorithm:
//   - one CTA per (batch, head): no parallelism over the sequence;
//   - K/V tiles are the outer loop, query tiles the inner one;
//   - O, the running max m and the running sum l live in global memory (p.fa1_o / fa1_max / fa1_sum) and every
//     step reads them, rescales O to the new max and sum (O stays normalised), and writes them back;
//   - a final pass turns O into the output dtype and writes the LSE.
// Shared memory: sQ (kBlockM x kHeadDim), sK, sV (kBlockN x kHeadDim); one K/V stage.
#pragma once

#include "backends/cuda/sm80/fwd_tile.cuh"

namespace flashtile::cuda::sm80 {

template <typename Traits, typename T, bool kSoftcap>
__global__ void __launch_bounds__(Traits::kThreads) fwd_fa1_kernel(const FwdKernelParams p) {
  constexpr int kHeadDim = Traits::kHeadDim, kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kMSlices = Traits::kMSlices, kStride = Traits::kRowStride, kDB = kHeadDim / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kBlockM * kStride;
  T* sV = sK + kBlockN * kStride;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  const int bh = blockIdx.x, b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.group;
  const T* q_head = static_cast<const T*>(p.q) + b * p.q_stride[0] + h * p.q_stride[2];
  const T* k_head = static_cast<const T*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[2];
  const T* v_head = static_cast<const T*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[2];
  float* o_all = p.fa1_o + static_cast<int64_t>(bh) * p.seqlen_q * kHeadDim;  // (seqlen_q x kHeadDim), dense
  float* m_all = p.fa1_max + static_cast<int64_t>(bh) * p.seqlen_q;
  float* l_all = p.fa1_sum + static_cast<int64_t>(bh) * p.seqlen_q;

  for (int i = threadIdx.x; i < p.seqlen_q * kHeadDim; i += Traits::kThreads) o_all[i] = 0.0f;
  for (int i = threadIdx.x; i < p.seqlen_q; i += Traits::kThreads) m_all[i] = -INFINITY, l_all[i] = 0.0f;

  for (int col0 = 0; col0 < p.seqlen_k; col0 += kBlockN) {
    // Query rows that see a key of this tile: [row_begin, row_end), as KeyRange::row_begin / row_end.
    const int row_begin = max(0, col0 - p.key_offset - p.window_right);
    const int row_end = min(p.seqlen_q, col0 + kBlockN - p.key_offset + p.window_left);
    if (row_begin >= row_end) continue;
    __syncthreads();  // every warp is done with the previous K/V tile (and with the state it wrote)
    load_rows_async<Traits, kBlockN>(sK, k_head, p.k_stride[1], col0, p.seqlen_k, p.head_dim);
    load_rows_async<Traits, kBlockN>(sV, v_head, p.v_stride[1], col0, p.seqlen_k, p.head_dim);
    cp_async_commit();
    for (int row0 = row_begin / kBlockM * kBlockM; row0 < row_end; row0 += kBlockM) {
      const int row_last = min(row0 + kBlockM, p.seqlen_q) - 1;
      __syncthreads();  // every warp is done with sQ of the previous query tile
      load_rows_async<Traits, kBlockM>(sQ, q_head, p.q_stride[1], row0, p.seqlen_q, p.head_dim);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();

      float acc_s[kMSlices][kBlockN / 8][4];
      tile_scores<Traits, T>(sQ, sK, acc_s);
      cap_and_mask<Traits, kSoftcap>(p, row0, col0, row_last, acc_s);

      // Read O, m and l of this thread's rows back from global memory and rescale: with the new max m' and sum
      // l', O' = (l * e^(m - m') * O + P V) / l'. P is divided by l' before the product, O scaled first.
      float acc_o[kMSlices][kDB][4];
#pragma unroll
      for (int s = 0; s < kMSlices; ++s)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = row0 + slice_row<Traits>(s) + g + hr * 8;
          const bool real = row < p.seqlen_q;
          const float m_old = real ? m_all[row] : -INFINITY, l_old = real ? l_all[row] : 0.0f;
          float mx = m_old;
#pragma unroll
          for (int n = 0; n < kBlockN / 8; ++n) mx = fmaxf(mx, fmaxf(acc_s[s][n][2 * hr], acc_s[s][n][2 * hr + 1]));
          mx = quad_max(mx);
          const float shift = softmax_shift(mx, p.scale_log2);
          const float alpha = exp2_capped(fmaf(m_old, p.scale_log2, -shift), 0.0f);
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pe = exp2_capped(fmaf(acc_s[s][n][2 * hr + e], p.scale_log2, -shift), kMaxExponent);
              acc_s[s][n][2 * hr + e] = pe;
              sum += pe;
            }
          const float l_new = l_old * alpha + quad_sum(sum);
          const float inv = l_new > 0.0f ? 1.0f / l_new : 0.0f;
#pragma unroll
          for (int n = 0; n < kBlockN / 8; ++n) acc_s[s][n][2 * hr] *= inv, acc_s[s][n][2 * hr + 1] *= inv;
          const float keep = l_old * alpha * inv;
#pragma unroll
          for (int d = 0; d < kDB; ++d) {
            const float2 o = real ? *reinterpret_cast<const float2*>(o_all + row * kHeadDim + d * 8 + 2 * t)
                                  : make_float2(0.0f, 0.0f);
            acc_o[s][d][2 * hr] = o.x * keep;
            acc_o[s][d][2 * hr + 1] = o.y * keep;
          }
          if (real && t == 0) m_all[row] = mx, l_all[row] = l_new;  // the quad read both above, before this
        }
      tile_accumulate_pv<Traits, T>(acc_s, sV, acc_o);
#pragma unroll
      for (int s = 0; s < kMSlices; ++s)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = row0 + slice_row<Traits>(s) + g + hr * 8;
          if (row >= p.seqlen_q) continue;
#pragma unroll
          for (int d = 0; d < kDB; ++d)
            *reinterpret_cast<float2*>(o_all + row * kHeadDim + d * 8 + 2 * t) =
                make_float2(acc_o[s][d][2 * hr], acc_o[s][d][2 * hr + 1]);
        }
    }
  }
  __syncthreads();  // the last step's O, m and l are in global memory

  // O to the output dtype; LSE from m and l (rows that saw no key: O = 0, LSE = -inf).
  T* o_head = static_cast<T*>(p.o) + b * p.o_stride[0] + h * p.o_stride[2];
  for (int i = threadIdx.x; i < p.seqlen_q * (p.head_dim / 2); i += Traits::kThreads) {
    const int row = i / (p.head_dim / 2), col = 2 * (i % (p.head_dim / 2));
    const float2 o = *reinterpret_cast<const float2*>(o_all + row * kHeadDim + col);
    *reinterpret_cast<uint32_t*>(o_head + row * p.o_stride[1] + col) = pack2<T>(o.x, o.y);
  }
  if (p.lse != nullptr)
    for (int row = threadIdx.x; row < p.seqlen_q; row += Traits::kThreads)
      p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + row * p.lse_stride[2]] =
          m_all[row] == -INFINITY ? -INFINITY : (m_all[row] * p.scale_log2 + __log2f(l_all[row])) * 0.6931471805599453f;
}

}  // namespace flashtile::cuda::sm80
