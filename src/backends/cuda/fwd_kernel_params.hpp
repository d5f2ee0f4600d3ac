// What a CUDA forward kernel needs, resolved on the host from a validated call. Plain data, passed by value.
#pragma once

#include <cstdint>

#include "backends/cuda/fast_divisor.hpp"
#include "common/problem.hpp"

namespace flashtile::cuda {

struct FwdKernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // nullptr: not written
  // Strides in elements (batch, row, head); the last dim is contiguous.
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
  int64_t lse_stride[3];  // batch, head, row
  int batch, heads_q, group, seqlen_q, seqlen_k, head_dim;
  // Row i sees keys [i + key_offset - window_left, i + key_offset + window_right], clamped to [0, seqlen_k).
  // Unbounded sides hold seqlen_q + seqlen_k, so the kernel needs no branch for them.
  int key_offset, window_left, window_right;
  float scale_log2;       // softmax scale * log2(e); with a softcap, log2(e) (the cap is applied first)
  float softcap;          // 0: off
  float scale_over_cap;   // softmax scale / softcap
  int m_blocks;           // query blocks per (batch, head)
  bool heavy_first;       // tiles longest first across heads (fwd_tile_order.cuh); set by the launchers
  // sm80 rows with kHintNextWave (fwd_config.hpp): the CTAs the SMs hold at once, so that the CTA of tile t hints
  // tile t + l2_ahead's Q rows and first K/V tiles into L2. Set by the launcher.
  int l2_ahead;
  // The FlashAttention-1 kernel's "HBM" state (bench --ablation only; null for every other kernel):
  // O (batch x heads_q x seqlen_q x padded head dim) and the running max and sum (batch x heads_q x seqlen_q).
  float* fa1_o;
  float* fa1_max;
  float* fa1_sum;
  // The divisions that split a work tile's number (fwd_tile_order.cuh): by m_blocks, batch * heads_q, heads_q and
  // group. Set with m_blocks by set_query_blocks.
  FastDivisor by_m_blocks, by_batch_heads, by_heads_q, by_group;
};

// The mask's fields (key_offset, window_left, window_right) from a validated call's KeyRange; an unbounded side
// becomes seqlen_q + seqlen_k, beyond any row's reach. Shared by make_fwd_params and the CPU test of the kernels'
// mask (tests/backends/cuda/visible_keys_test.cpp).
inline void set_key_window(FwdKernelParams& k, const KeyRange& keys) {
  const int64_t unbounded = keys.seqlen_q + keys.seqlen_k;
  k.key_offset = static_cast<int>(keys.offset);
  k.window_left = static_cast<int>(keys.left < 0 ? unbounded : keys.left);
  k.window_right = static_cast<int>(keys.right < 0 ? unbounded : keys.right);
}

// m_blocks and the divisors of a tile's number, once batch, heads_q and group are set.
inline void set_query_blocks(FwdKernelParams& k, int m_blocks) {
  k.m_blocks = m_blocks;
  k.by_m_blocks = FastDivisor::of(m_blocks), k.by_batch_heads = FastDivisor::of(k.batch * k.heads_q);
  k.by_heads_q = FastDivisor::of(k.heads_q), k.by_group = FastDivisor::of(k.group);
}

// Resolves a validated call into kernel parameters for a kernel of `block_m` query rows per CTA
// (cuda_backend.cpp; also used by the tool's ablation, which launches kernel variants directly).
FwdKernelParams make_fwd_params(const ForwardParams& params, const Problem& problem, int block_m);

}  // namespace flashtile::cuda
