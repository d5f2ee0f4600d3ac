// Which work tile (a query block of kBlockM rows of one batch x head) a CUDA forward CTA takes, in what order,
// and the K/V tiles the block's rows see. Shared by the sm90 kernel and the sm80 kernel's persistent rows.
//
// Tiles are numbered 0 .. m_blocks * batch * heads_q - 1, the last query block first:
//   - head by head (the CTAs at work at one time share a few heads' K and V in L2), or
//   - with heavy_first (a mask bounds the keys of long heads, so the last query blocks have the most) the last
//     blocks of every head, then the next, ...: longest first, so the short tiles fill the end.
// A persistent CTA takes, in round r, tile r * gridDim.x + its slot, the CTAs in reverse order on odd rounds (a
// snake: under a causal mask the CTA that took a round's heaviest tile takes the next round's lightest, where
// the rounds line up with the heads' blocks; heavy_first_order picks the order that balances).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cuda/fwd_kernel_params.hpp"

namespace flashtile::cuda {

// n / d and n % d by FastDivisor's multiply-high and shift (kFast), or by the operators. The sm90 kernel and most
// of the sm80 kernel's rows keep the operators (sm80/fwd_config.hpp, kLeanBlockEdges: in the rows with a CTA per
// block, which split one tile number, the other form moved the register allocation and lost up to 5%).
template <bool kFast>
__host__ __device__ __forceinline__ int quotient(const FastDivisor& d, int n) {
  return kFast ? d.div(n) : n / d.divisor;
}
template <bool kFast>
__host__ __device__ __forceinline__ int remainder(const FastDivisor& d, int n) {
  return kFast ? d.mod(n) : n % d.divisor;
}

struct CtaBlock {
  int row0, b, h, hk, n_first, n_last;  // K/V tiles [n_first, n_last]; none when n_first > n_last

  __host__ __device__ bool has_keys() const { return n_first <= n_last; }
  // The tile's (batch x head) index, b * heads_q + h.
  template <bool kFastDivide = false>
  __host__ __device__ static int bh_of(const FwdKernelParams& f, int tile, bool heavy_first) {
    return heavy_first ? remainder<kFastDivide>(f.by_batch_heads, tile) : quotient<kFastDivide>(f.by_m_blocks, tile);
  }
  template <int kBlockM, int kBlockN, bool kFastDivide = false>
  __host__ __device__ static CtaBlock make(const FwdKernelParams& f, int tile, bool heavy_first) {
    CtaBlock c;
    const int m_block = f.m_blocks - 1 - (heavy_first ? quotient<kFastDivide>(f.by_batch_heads, tile)
                                                      : remainder<kFastDivide>(f.by_m_blocks, tile));
    const int bh = bh_of<kFastDivide>(f, tile, heavy_first);
    c.b = quotient<kFastDivide>(f.by_heads_q, bh), c.h = remainder<kFastDivide>(f.by_heads_q, bh);
    c.hk = quotient<kFastDivide>(f.by_group, c.h);
    c.row0 = m_block * kBlockM;
    const int row_end = c.row0 + kBlockM < f.seqlen_q ? c.row0 + kBlockM : f.seqlen_q;
    // Keys seen by any row of the block: [key_begin, key_end).
    const int key_from = c.row0 + f.key_offset - f.window_left;
    const int key_begin = key_from > 0 ? key_from : 0;
    const int key_to = row_end - 1 + f.key_offset + f.window_right + 1;
    const int key_end = key_to < f.seqlen_k ? key_to : f.seqlen_k;
    c.n_first = key_begin / kBlockN;
    c.n_last = key_begin < key_end ? (key_end - 1) / kBlockN : c.n_first - 1;
    return c;
  }
};

// A persistent CTA's tile in round `round`, or n_tiles once it has none left.
__device__ __forceinline__ int persistent_tile(int round, int n_tiles) {
  const int slot = round % 2 == 0 ? blockIdx.x : gridDim.x - 1 - blockIdx.x;
  const int64_t tile = static_cast<int64_t>(round) * gridDim.x + slot;  // grows with the round
  return tile < n_tiles ? static_cast<int>(tile) : n_tiles;
}

// A persistent CTA's walk: work(tile, round) for each of its tiles, round by round.
template <typename Work>
__device__ __forceinline__ void for_each_persistent_tile(const FwdKernelParams& f, Work&& work) {
  const int n_tiles = f.m_blocks * f.batch * f.heads_q;
  for (int round = 0;; ++round) {
    const int tile = persistent_tile(round, n_tiles);
    if (tile == n_tiles) break;
    work(tile, round);
  }
}

// Host: whether the tiles go longest first across all heads (heavy_first) rather than head by head, for a grid
// of `ctas` persistent CTAs walking the snake, or (ctas = 0) a CTA per tile handed out by the hardware in turn.
// Head by head is the better order for L2: longest first makes the CTAs at work at one time each read a different
// head's K and V, and a head's next query block comes rounds later, after more K/V than L2 holds has gone
// through: at S = 512-2048 causal every block re-reads its K/V from HBM (2.5-8x the unique bytes, by an L2
// simulation; docs/perf-log.md, sm90 v6), so tiles go longest first only from kHeavyFirstMinBlocks query blocks
// a head (where the re-reads matter less than the balance). Head by head also balances a persistent grid's work
// only where the blocks' lengths line up with the snake's rounds: with 128 query rows a block, 132 CTAs and 8
// heads, one CTA does 1.54x the mean at S = 8192 causal (64 blocks a head; longest first 1.003x), and the sm80
// D = 256 row ran at 0.79x FA2 there (docs/perf-log.md, v16). So a persistent grid also goes longest first where
// head by head leaves its busiest CTA kImbalanceMargin above longest first's (each order counted in K/V tiles,
// once per call, up to kBalanceCheckTiles tiles; beyond, longest first, whose many rounds even out). Without a
// mask every tile has the same work: head by head.
constexpr int kHeavyFirstMinBlocks = 64;  // S = 8192 at 128 query rows per block
constexpr int kBalanceCheckTiles = 1 << 15;
constexpr double kImbalanceMargin = 1.05;

template <int kBlockM, int kBlockN>
inline bool heavy_first_order(const FwdKernelParams& f, int ctas) {
  const int64_t unbounded = static_cast<int64_t>(f.seqlen_q) + f.seqlen_k;
  if (f.window_left >= unbounded && f.window_right >= unbounded) return false;
  if (f.m_blocks > kHeavyFirstMinBlocks) return true;
  if (ctas <= 0) return false;
  const int64_t n_tiles = static_cast<int64_t>(f.m_blocks) * f.batch * f.heads_q;
  if (n_tiles > kBalanceCheckTiles) return true;
  // The count below walks every tile twice (~20 us a call at 4096 tiles, ~160 us at 32768 on one core: more than
  // the kernel takes at S = 512). Calls in a training or inference loop repeat their shape, so each thread keeps
  // the last answer with what it depends on: the tile count, the CTAs and each query block's K/V tiles.
  struct BalanceKey {
    int m_blocks, batch, heads_q, seqlen_q, seqlen_k, key_offset, window_left, window_right, ctas;
    bool operator==(const BalanceKey& o) const {
      return m_blocks == o.m_blocks && batch == o.batch && heads_q == o.heads_q && seqlen_q == o.seqlen_q &&
             seqlen_k == o.seqlen_k && key_offset == o.key_offset && window_left == o.window_left &&
             window_right == o.window_right && ctas == o.ctas;
    }
  };
  const BalanceKey key{f.m_blocks,   f.batch,       f.heads_q,      f.seqlen_q, f.seqlen_k,
                       f.key_offset, f.window_left, f.window_right, ctas};
  thread_local BalanceKey last_key{};
  thread_local bool last_answer = false, has_last = false;
  if (has_last && last_key == key) return last_answer;
  // A tile's work depends only on its query block.
  std::vector<int> block_tiles(f.m_blocks);
  for (int m = 0; m < f.m_blocks; ++m) {
    const CtaBlock c = CtaBlock::make<kBlockM, kBlockN>(f, f.m_blocks - 1 - m, false);  // tile m of head 0
    block_tiles[m] = c.n_last - c.n_first + 1;
  }
  auto busiest = [&](bool heavy_first) {
    std::vector<int64_t> load(ctas, 0);
    for (int64_t round = 0; round * ctas < n_tiles; ++round)
      for (int c = 0; c < ctas; ++c) {
        const int64_t tile = round * ctas + (round % 2 == 0 ? c : ctas - 1 - c);
        if (tile >= n_tiles) continue;
        const int64_t m = heavy_first ? tile / (static_cast<int64_t>(f.batch) * f.heads_q) : tile % f.m_blocks;
        load[c] += block_tiles[f.m_blocks - 1 - m];
      }
    return *std::max_element(load.begin(), load.end());
  };
  last_answer = busiest(false) > kImbalanceMargin * busiest(true);
  last_key = key, has_last = true;
  return last_answer;
}

}  // namespace flashtile::cuda
