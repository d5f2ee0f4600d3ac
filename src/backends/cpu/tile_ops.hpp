// Building blocks of the CPU flash paths: dense fp32 tiles cut from strided BSHD tensors, the tile GEMMs,
// masking, and a vectorised exp2. The forward (both schedules) and the backward are written from these.
//
// Why a BLAS for the tile products: the tile GEMMs are >95% of the FLOPs, and OpenBLAS (gemm.hpp) ran a
// 64x128x128 tile 2.3x faster than -O3 -ffast-math loops (docs/perf-log.md). Everything else (softmax, masks,
// conversions) is O(tile) work per O(tile * head_dim) GEMM work and stays in plain loops.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/gemm.hpp"
#include "common/problem.hpp"

namespace flashtile::cpu {

// Rows of fp32 values, `ld` floats apart: a tile that is either read in place from an fp32 tensor or converted
// into a scratch buffer.
struct TileView {
  const float* data;
  int64_t ld;
};

// Rows [row0, row0 + rows) of head `head` of batch `b`: an fp32 tensor is read in place (no copy: the GEMMs take
// its row stride), other dtypes are widened into `scratch` (rows x dim).
TileView view_tile(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim, float* scratch);

// Rows [row0, row0 + rows) of head `head` of batch `b`, as a dense fp32 tile (rows x dim), each element
// multiplied by `mul`.
void load_tile(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim, float mul,
               float* tile);
// The reverse: tile rows (rows x dim, dense fp32) times `mul`, rounded to t's dtype.
void store_tile(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim, float mul,
                const float* tile);

// x[i] = 2^x[i] for n contiguous floats; exact 0 for x <= -125 (including -inf), NaN for NaN.
// Relative error about 1e-7.
void exp2_inplace(float* x, int64_t n);

// The visible keys of each row of a (rows x cols) tile, in tile coordinates: [begin[r], end[r]). A tile
// with every key visible to every row is "full" and takes the plain GEMM paths; others also do unless a NaN or
// Inf is stored in the tile, which then goes element-wise so that it never reaches an output through a masked
// position (0 * NaN would be NaN).
struct TileMask {
  static constexpr int kMaxRows = 256;
  bool full = true;
  int32_t begin[kMaxRows];
  int32_t end[kMaxRows];
};
TileMask make_tile_mask(const KeyRange& keys, int64_t row0, int64_t rows, int64_t col0, int64_t cols);

// How a raw product q.k becomes a score, in natural units: q.k * scale, or softcap * tanh(q.k * scale / softcap)
// (one rounding after the product, as a framework does it; scaling Q first would add a second). The forward and
// the backward both go through score_tile, so the backward's P matches the LSE the forward wrote.
struct ScoreMap {
  float mul;      // scale, or scale / softcap
  float softcap;  // 0: off
  explicit ScoreMap(const Problem& p) : mul(p.softcap > 0 ? p.scale / p.softcap : p.scale), softcap(p.softcap) {}
};

// s (rows x cols) = scores of the Q tile rows (rows x head_dim) against the K tile rows (cols x head_dim),
// -inf where the mask hides a key.
void score_tile(const ScoreMap& map, const TileMask& mask, int64_t rows, int64_t cols, int64_t head_dim,
                TileView q, TileView k, float* s);
// The part of score_tile after the product: raw products in s become scores (scale, softcap, mask).
void finish_scores(const ScoreMap& map, const TileMask& mask, int64_t rows, int64_t cols, float* s);

// out (rows x dim) += W (rows x cols) * in (cols x dim), counting only each row's visible columns. W must be 0
// where the mask hides a key: a masked tile whose `in` holds no Inf or NaN then runs as one dense GEMM (0 times a
// finite value adds nothing), and only one that does goes element by element.
// The O += P V and dQ += dS K products.
void accumulate_w_in(const TileMask& mask, int64_t rows, int64_t cols, int64_t dim, const float* w, TileView in,
                     float* out);
// out (cols x dim) += W^T (cols x rows) * in (rows x dim), counting only visible (row, col) pairs; W as above.
// The dV += P^T dO and dK += dS^T Q products.
void accumulate_wt_in(const TileMask& mask, int64_t rows, int64_t cols, int64_t dim, const float* w,
                      const float* in, float* out);

}  // namespace flashtile::cpu
