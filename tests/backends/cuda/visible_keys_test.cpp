// The masked tiles of the CUDA kernels decide which scores a query row keeps through VisibleKeys
// (src/backends/cuda/visible_keys.hpp): per-row bounds relative to a thread's first key, then two compares per
// element. This checks, on the CPU, for every row, key and fragment offset of a set of shapes, with the mask's
// kernel parameters resolved as the CUDA backend resolves them (set_key_window), that the test equals
//   - the mask's definition (KeyRange, SPEC.md) on the real rows, and
//   - the per-element test on absolute keys it replaced, also on rows past the sequence end, which the kernels
//     mask too (their scores are never stored; the backward's dS of such a row must stay what it was).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backends/cuda/visible_keys.hpp"
#include "common/problem.hpp"

namespace flashtile {
namespace {

cuda::FwdKernelParams kernel_masks(const KeyRange& keys) {
  cuda::FwdKernelParams p{};
  p.seqlen_q = static_cast<int>(keys.seqlen_q), p.seqlen_k = static_cast<int>(keys.seqlen_k);
  cuda::set_key_window(p, keys);  // as make_fwd_params resolves the mask
  return p;
}

// Calls fn(keys, p) for each mask of the shapes: query and key lengths, window (-1: unbounded on that side).
template <typename Fn>
void for_each_mask(Fn&& fn) {
  for (int64_t sq : {1, 3, 8, 17, 64})
    for (int64_t sk : {1, 5, 16, 33, 64})
      for (int64_t left : {-1, 0, 2, 7})
        for (int64_t right : {-1, 0, 3}) {
          const KeyRange keys{sq, sk, sk - sq, left, right};
          fn(keys, kernel_masks(keys));
        }
}

// The per-element test on absolute coordinates, from the kernel parameters.
bool sees_absolute(const cuda::FwdKernelParams& p, int row, int key) {
  return key < p.seqlen_k && key >= row + p.key_offset - p.window_left && key <= row + p.key_offset + p.window_right;
}

std::string where(const KeyRange& keys, int row, int key) {
  return "Sq " + std::to_string(keys.seqlen_q) + " Sk " + std::to_string(keys.seqlen_k) + " window (" +
         std::to_string(keys.left) + ", " + std::to_string(keys.right) + ") row " +
         std::to_string(row) + " key " + std::to_string(key);
}

TEST(VisibleKeys, MatchesTheMaskForEveryRowAndKey) {
  int64_t checked = 0, visible = 0;
  for_each_mask([&](const KeyRange& keys, const cuda::FwdKernelParams& p) {
    for (int row = 0; row < keys.seqlen_q + 20; ++row)
      for (int first_key = 0; first_key < keys.seqlen_k + 8; ++first_key) {
        const cuda::VisibleKeys v(p, row, first_key);
        for (int c = 0; c < 64; ++c) {
          const int key = first_key + c;
          const bool absolute = sees_absolute(p, row, key);
          ASSERT_EQ(v.sees(c), absolute) << where(keys, row, key);
          if (row < keys.seqlen_q) {
            ASSERT_EQ(absolute, key < keys.seqlen_k && keys.visible(row, key)) << where(keys, row, key);
            ++checked, visible += absolute;
          }
        }
      }
  });
  // The shapes must exercise both answers, or the test could not fail.
  EXPECT_GT(visible, 0);
  EXPECT_LT(visible, checked);
}

// The same mask from the key's side (the sm90 backward's transposed scores): for every key, first query and
// fragment offset, QueriesSeeingKey's test equals the absolute one, and keys past the sequence end are seen by no
// query.
TEST(QueriesSeeingKey, MatchesTheMaskForEveryKeyAndQuery) {
  int64_t checked = 0, seen = 0;
  for_each_mask([&](const KeyRange& keys, const cuda::FwdKernelParams& p) {
    for (int key = 0; key < keys.seqlen_k + 20; ++key)
      for (int first_query = 0; first_query < keys.seqlen_q + 8; ++first_query) {
        const cuda::QueriesSeeingKey q(p, key, first_query);
        for (int c = 0; c < 64; ++c) {
          const int row = first_query + c;
          const bool absolute = sees_absolute(p, row, key);
          ASSERT_EQ(q.sees(c), absolute) << where(keys, row, key);
          ASSERT_EQ(absolute, cuda::VisibleKeys(p, row, key).sees(0)) << where(keys, row, key);
          ++checked, seen += absolute;
        }
      }
  });
  EXPECT_GT(seen, 0);
  EXPECT_LT(seen, checked);
}

}  // namespace
}  // namespace flashtile
