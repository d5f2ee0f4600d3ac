// The validated, backend-independent description of one attention call. Validation (src/api/validate.cpp)
// turns the caller's tensors and options into this; every backend reads only this plus the tensor views.
#pragma once

#include <algorithm>
#include <cstdint>

#include "flashtile/flashtile.hpp"

namespace flashtile {

// Which keys a query row sees: one contiguous range [lo(i), hi(i)], empty when lo > hi. Causal and sliding
// windows are both bottom-right aligned (SPEC.md), so with offset = Sk - Sq the diagonal of row i is key
// i + offset. Both bounds are non-decreasing in i, which is what lets a block of rows skip whole key tiles.
struct KeyRange {
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int64_t offset = 0;        // seqlen_k - seqlen_q
  int64_t left = -1;         // negative: unbounded; clamped to <= seqlen_q + seqlen_k by validation
  int64_t right = -1;

  int64_t lo(int64_t row) const { return left < 0 ? 0 : std::max<int64_t>(0, row + offset - left); }
  int64_t hi(int64_t row) const {
    return right < 0 ? seqlen_k - 1 : std::min<int64_t>(seqlen_k - 1, row + offset + right);
  }
  bool visible(int64_t row, int64_t key) const { return key >= lo(row) && key <= hi(row); }

  // The rows that see at least one key of [key_begin, key_end): also a contiguous range, [row_begin, row_end).
  int64_t row_begin(int64_t key_begin) const {
    return right < 0 ? 0 : std::clamp<int64_t>(key_begin - offset - right, 0, seqlen_q);
  }
  int64_t row_end(int64_t key_end) const {
    return left < 0 ? seqlen_q : std::clamp<int64_t>(key_end - offset + left, 0, seqlen_q);
  }
};

struct Problem {
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;
  DType dtype = DType::kBFloat16;
  float scale = 1.0f;      // resolved softmax scale
  float softcap = 0.0f;    // 0: off
  KeyRange keys;
  bool with_lse = false;   // forward: lse requested

  int64_t group() const { return heads_q / heads_kv; }  // query heads per K/V head
  bool empty() const { return batch == 0 || seqlen_q == 0 || heads_q == 0; }
};

// Element offset of (b, s, h, 0) in a BSHD view, and of (b, h, s) in an LSE view. 64-bit throughout.
inline int64_t offset_bshd(const Tensor& t, int64_t b, int64_t s, int64_t h) {
  return b * t.stride[0] + s * t.stride[1] + h * t.stride[2];
}
inline int64_t offset_bhs(const Tensor& t, int64_t b, int64_t h, int64_t s) {
  return b * t.stride[0] + h * t.stride[1] + s * t.stride[2];
}

}  // namespace flashtile
