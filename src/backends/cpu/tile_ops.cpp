#include "backends/cpu/tile_ops.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <climits>
#include <limits>

#include "common/numeric.hpp"

namespace flashtile::cpu {

namespace {

template <typename Convert>
void load_rows(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim, float mul,
               float* tile, Convert convert) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = offset_bshd(t, b, row0 + r, head);
    float* dst = tile + r * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d] = convert(base + d) * mul;
  }
}

}  // namespace

void load_tile(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim, float mul,
               float* tile) {
  switch (t.dtype) {
    case DType::kFloat32: {
      const float* p = static_cast<const float*>(t.data);
      load_rows(t, b, head, row0, rows, dim, mul, tile, [p](int64_t i) { return p[i]; });
      break;
    }
    case DType::kBFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(t.data);
      load_rows(t, b, head, row0, rows, dim, mul, tile, [p](int64_t i) { return bf16_to_float(p[i]); });
      break;
    }
    case DType::kFloat16: {
      const uint16_t* p = static_cast<const uint16_t*>(t.data);
      load_rows(t, b, head, row0, rows, dim, mul, tile, [p](int64_t i) { return fp16_to_float(p[i]); });
      break;
    }
  }
}

void store_tile(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim, float mul,
                const float* tile) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = offset_bshd(t, b, row0 + r, head);
    const float* src = tile + r * dim;
    switch (t.dtype) {
      case DType::kFloat32: {
        float* p = static_cast<float*>(t.data) + base;
        for (int64_t d = 0; d < dim; ++d) p[d] = src[d] * mul;
        break;
      }
      case DType::kBFloat16: {
        uint16_t* p = static_cast<uint16_t*>(t.data) + base;
        for (int64_t d = 0; d < dim; ++d) p[d] = float_to_bf16(src[d] * mul);
        break;
      }
      case DType::kFloat16: {
        uint16_t* p = static_cast<uint16_t*>(t.data) + base;
        for (int64_t d = 0; d < dim; ++d) p[d] = float_to_fp16(src[d] * mul);
        break;
      }
    }
  }
}

// 2^x = 2^n * 2^f with n = round(x), f in [-0.5, 0.5]; 2^f = e^(f ln2) by its Taylor series to degree 7,
// whose truncation error, (0.5 ln2)^8 / 8! ~ 5e-9, is under fp32 rounding. The exponent is added as bits.
// Written branch-free so the compiler vectorises it; the clones let one binary use AVX-512 or AVX2+FMA
// where the CPU has them (softmax is the largest non-GEMM cost of the CPU forward).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void exp2_inplace(float* x,
                                                                                                  int64_t n) {
  constexpr float c1 = 0.693147180559945f, c2 = 0.240226506959101f, c3 = 0.0555041086648216f,
                  c4 = 0.00961812910762848f, c5 = 0.00133335581464284f, c6 = 0.000154035303933816f,
                  c7 = 1.52527338040598e-05f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::min(x[i], 127.0f);
    // The polynomial runs on a clamped copy (-inf and NaN become -125), so that the exponent's conversion and
    // shift stay defined; only the select below looks at v itself.
    const float w = v > -125.0f ? v : -125.0f;
    const float r = std::nearbyint(w);
    const float f = w - r;
    const float p = 1.0f + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * (c6 + f * c7))))));
    const uint32_t bits = std::bit_cast<uint32_t>(p) + (static_cast<uint32_t>(static_cast<int32_t>(r)) << 23);
    x[i] = v > -125.0f ? std::bit_cast<float>(bits) : (v != v ? v : 0.0f);  // NaN stays NaN
  }
}

TileMask make_tile_mask(const KeyRange& keys, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  TileMask m;
  // lo/hi are non-decreasing in the row, so checking the two corner rows decides whether all rows see all cols.
  m.full = keys.lo(row0 + rows - 1) <= col0 && keys.hi(row0) >= col0 + cols - 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t lo = std::clamp<int64_t>(keys.lo(row0 + r) - col0, 0, cols);
    const int64_t hi = std::clamp<int64_t>(keys.hi(row0 + r) - col0 + 1, 0, cols);
    m.begin[r] = static_cast<int32_t>(lo);
    m.end[r] = static_cast<int32_t>(std::max(lo, hi));
  }
  return m;
}

TileView view_tile(const Tensor& t, int64_t b, int64_t head, int64_t row0, int64_t rows, int64_t dim,
                   float* scratch) {
  // In place when the GEMM can take the row stride as its leading dimension (at least a row, and a BLAS int).
  if (t.dtype == DType::kFloat32 && (rows <= 1 || (t.stride[1] >= dim && t.stride[1] <= INT32_MAX)))
    return {static_cast<const float*>(t.data) + offset_bshd(t, b, row0, head), rows <= 1 ? dim : t.stride[1]};
  load_tile(t, b, head, row0, rows, dim, 1.0f, scratch);
  return {scratch, dim};
}

void score_tile(const ScoreMap& map, const TileMask& mask, int64_t rows, int64_t cols, int64_t head_dim,
                TileView q, TileView k, float* s) {
  gemm_abt(rows, cols, head_dim, q.data, q.ld, k.data, k.ld, s, cols, /*accumulate=*/false);
  finish_scores(map, mask, rows, cols, s);
}

void finish_scores(const ScoreMap& map, const TileMask& mask, int64_t rows, int64_t cols, float* s) {
  if (map.softcap > 0)
    for (int64_t i = 0; i < rows * cols; ++i) s[i] = map.softcap * std::tanh(s[i] * map.mul);
  else
    for (int64_t i = 0; i < rows * cols; ++i) s[i] *= map.mul;
  if (!mask.full)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * cols;
      std::fill(row, row + mask.begin[r], -std::numeric_limits<float>::infinity());
      std::fill(row + mask.end[r], row + cols, -std::numeric_limits<float>::infinity());
    }
}

namespace {

// True when none of the (rows x dim) tile's values, ld floats apart, is Inf or NaN (all exponent bits set).
bool tile_finite(const float* t, int64_t rows, int64_t dim, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t special = 0;  // an OR over the row, so that the loop vectorises without an early exit
    for (int64_t d = 0; d < dim; ++d)
      special |= (std::bit_cast<uint32_t>(t[r * ld + d]) & 0x7f800000u) == 0x7f800000u;
    if (special) return false;
  }
  return true;
}

}  // namespace

void accumulate_w_in(const TileMask& mask, int64_t rows, int64_t cols, int64_t dim, const float* w, TileView in,
                     float* out) {
  if (mask.full || tile_finite(in.data, cols, dim, in.ld))
    return gemm_ab_accumulate(rows, dim, cols, w, cols, in.data, in.ld, out, dim);
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * dim;
    for (int64_t c = mask.begin[r]; c < mask.end[r]; ++c) {
      const float wc = w[r * cols + c];
      const float* x = in.data + c * in.ld;
      for (int64_t d = 0; d < dim; ++d) o[d] += wc * x[d];
    }
  }
}

void accumulate_wt_in(const TileMask& mask, int64_t rows, int64_t cols, int64_t dim, const float* w,
                      const float* in, float* out) {
  if (mask.full || tile_finite(in, rows, dim, dim))
    return gemm_atb_accumulate(cols, dim, rows, w, cols, in, dim, out, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * dim;
    for (int64_t c = mask.begin[r]; c < mask.end[r]; ++c) {
      const float wc = w[r * cols + c];
      float* o = out + c * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += wc * x[d];
    }
  }
}

}  // namespace flashtile::cpu
