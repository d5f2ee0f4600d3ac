// The order of the sm90 forward's work tiles, whose CTAs take the next tile from a counter when they are free
// (tile_counter.hpp): chunks of (batch x head)s one after another, and within a chunk the heads' last query
// blocks first, then the next ones:
//   tile = (chunk * m_blocks + rank) * heads + head in chunk,  query block m_blocks - 1 - rank.
// One head a chunk is fwd_tile_order.cuh's head by head; every head in one chunk is its heavy_first.
//
// Without a mask every tile has the same work: one head a chunk (head by head: the CTAs at work at one time
// share a few heads' K and V in L2). Under a mask, longest first is what lets CTAs that take tiles as they free
// up finish together (the short tiles fill the end: a simulation of the greedy take puts the busiest CTA
// 0.4-1.8% above the mean at S = 512-2048 causal, grid A, where the snake's head by head is 3.1% above), but across
// all heads it reads each head's K and V from HBM again for every query block (fwd_tile_order.cuh,
// heavy_first_order, says why). So a chunk holds as many heads as keep their K and V within kChunkKvBytes of L2
// (50 MB on the H100 and the H200), a divisor of batch x heads (else one).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cuda/fast_divisor.hpp"
#include "backends/cuda/fwd_kernel_params.hpp"
#include "backends/cuda/host_device.hpp"

namespace flashtile::cuda::sm90 {

struct TileChunks {
  static constexpr int64_t kChunkKvBytes = int64_t{16} << 20;
  static constexpr int kMaxHeads = 1024;  // beyond, a chunk's tiles outnumber the CTAs many times over

  FastDivisor heads;  // (batch x head)s a chunk

  // Host: the chunks for a call (f: batch, heads, group, seqlens, head dim and mask set) in T of element_bytes.
  static TileChunks of(const FwdKernelParams& f, int element_bytes) {
    const int64_t batch_heads = static_cast<int64_t>(f.batch) * f.heads_q;
    const int64_t unbounded = static_cast<int64_t>(f.seqlen_q) + f.seqlen_k;
    int64_t n = 1;
    if (f.window_left < unbounded || f.window_right < unbounded) {
      const int64_t kv_bytes_per_head =  // K and V, shared by a group of query heads
          std::max<int64_t>(1, 2 * static_cast<int64_t>(f.seqlen_k) * f.head_dim * element_bytes / f.group);
      n = std::max<int64_t>(1, std::min<int64_t>({kChunkKvBytes / kv_bytes_per_head, batch_heads, kMaxHeads}));
      while (batch_heads % n != 0) --n;
    }
    return TileChunks{FastDivisor::of(static_cast<int>(n))};
  }

  // Tile `tile` of this order as fwd_tile_order.cuh numbers it head by head (for CtaBlock::make without
  // heavy_first): (batch x head) * m_blocks + rank.
  FLASHTILE_HOST_DEVICE int head_by_head(const FwdKernelParams& f, int tile) const {
    const int q = heads.div(tile), in_chunk = tile - q * heads.divisor;
    const int chunk = f.by_m_blocks.div(q), rank = q - chunk * f.m_blocks;
    return (chunk * heads.divisor + in_chunk) * f.m_blocks + rank;
  }
};

}  // namespace flashtile::cuda::sm90
