// The sm90 forward's tile order (src/backends/cuda/sm90/fwd_tile_chunks.hpp), checked on the CPU: the chunked
// numbering visits every (batch x head, query block) once, goes longest first within a chunk and chunk after
// chunk, and the chunk size follows the mask, the K/V bytes and batch x heads.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cuda/sm90/fwd_tile_chunks.hpp"

namespace flashtile {
namespace {

using cuda::FwdKernelParams;
using cuda::sm90::TileChunks;

FwdKernelParams params(int batch, int heads, int group, int seqlen, int head_dim, bool causal) {
  FwdKernelParams f{};
  f.batch = batch, f.heads_q = heads, f.group = group, f.seqlen_q = f.seqlen_k = seqlen, f.head_dim = head_dim;
  const int unbounded = 2 * seqlen;
  f.key_offset = 0, f.window_left = unbounded, f.window_right = causal ? 0 : unbounded;
  cuda::set_query_blocks(f, (seqlen + 127) / 128);
  return f;
}

TEST(TileChunks, EveryTileOnceLongestFirstWithinAChunk) {
  struct Case { int batch, heads, m_blocks, chunk_heads; };
  for (const Case c : {Case{1, 1, 1, 1}, Case{2, 3, 5, 1}, Case{2, 3, 5, 6}, Case{2, 3, 5, 2}, Case{4, 8, 16, 8},
                       Case{1, 16, 256, 1}, Case{7, 5, 3, 35}, Case{3, 4, 9, 4}}) {
    FwdKernelParams f = params(c.batch, c.heads, 1, c.m_blocks * 128, 64, true);
    const TileChunks chunks{cuda::FastDivisor::of(c.chunk_heads)};
    const int n_tiles = f.m_blocks * c.batch * c.heads;
    std::vector<int> seen(n_tiles, 0);
    int last_chunk = 0, last_rank = 0;
    for (int tile = 0; tile < n_tiles; ++tile) {
      const int hbh = chunks.head_by_head(f, tile);
      ASSERT_GE(hbh, 0);
      ASSERT_LT(hbh, n_tiles);
      ++seen[hbh];
      const int bh = hbh / f.m_blocks, rank = hbh % f.m_blocks;  // rank 0: the last query block, the longest
      const int chunk = bh / c.chunk_heads;
      ASSERT_GE(chunk, last_chunk) << "tile " << tile;
      if (chunk == last_chunk) {
        ASSERT_GE(rank, last_rank) << "tile " << tile << ": a longer block after a shorter";
      }
      last_chunk = chunk, last_rank = rank;
    }
    for (int t = 0; t < n_tiles; ++t) ASSERT_EQ(seen[t], 1) << "head-by-head tile " << t;
  }
}

TEST(TileChunks, SizeFollowsMaskBytesAndHeads) {
  // No mask: every tile has the same work, head by head.
  EXPECT_EQ(TileChunks::of(params(8, 32, 1, 2048, 64, false), 2).heads.divisor, 1);
  // Causal: 16 MB of K and V; at S = 2048, D = 64 a head's is 512 KB: 32 heads.
  EXPECT_EQ(TileChunks::of(params(8, 32, 1, 2048, 64, true), 2).heads.divisor, 32);
  // GQA: query heads of a group share K and V (4 x as many heads), within batch x heads (256).
  EXPECT_EQ(TileChunks::of(params(8, 32, 4, 2048, 64, true), 2).heads.divisor, 128);
  EXPECT_EQ(TileChunks::of(params(2, 32, 4, 4096, 128, true), 2).heads.divisor, 32);
  // A divisor of batch x heads (3 x 5 = 15): at most 32, so 15; then 5 where at most 8 fit.
  EXPECT_EQ(TileChunks::of(params(3, 5, 1, 2048, 64, true), 2).heads.divisor, 15);
  EXPECT_EQ(TileChunks::of(params(3, 5, 1, 8192, 64, true), 2).heads.divisor, 5);
  // One head's K and V beyond 16 MB (S = 64k, D = 128): one head a chunk.
  EXPECT_EQ(TileChunks::of(params(1, 16, 1, 65536, 128, true), 2).heads.divisor, 1);
  // A window bounds the keys too.
  FwdKernelParams f = params(4, 4, 1, 1024, 128, false);
  f.window_left = 100;
  EXPECT_EQ(TileChunks::of(f, 2).heads.divisor, 16);
}

}  // namespace
}  // namespace flashtile
