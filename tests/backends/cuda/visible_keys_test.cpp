// The masked tiles of the CUDA kernels decide which scores a query row keeps through VisibleKeys
// (src/backends/cuda/visible_keys.hpp): per-row bounds relative to a thread's first key, then two compares per
// element. This checks, on the CPU, for every row, key and fragment offset of a set of shapes, with the mask's
// kernel parameters resolved as the CUDA backend resolves them (set_key_window), that the test equals
//   - the mask's definition (KeyRange, SPEC.md) on the real rows, and
//   - the per-element test on absolute keys it replaced, also on rows past the sequence end, which the kernels
//     mask too (their scores are never stored; the backward's dS of such a row must stay what it was).
#include <gtest/gtest.h>

#include <cstdint>

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

TEST(VisibleKeys, MatchesTheMaskForEveryRowAndKey) {
  int64_t checked = 0, visible = 0;
  for (int64_t sq : {1, 3, 8, 17, 64})
    for (int64_t sk : {1, 5, 16, 33, 64})
      for (int64_t left : {-1, 0, 2, 7})
        for (int64_t right : {-1, 0, 3}) {
          const KeyRange keys{sq, sk, sk - sq, left, right};
          const cuda::FwdKernelParams p = kernel_masks(keys);
          for (int row = 0; row < sq + 20; ++row)
            for (int first_key = 0; first_key < sk + 8; ++first_key) {
              const cuda::VisibleKeys v(p, row, first_key);
              for (int c = 0; c < 64; ++c) {
                const int key = first_key + c;
                const bool absolute = key < p.seqlen_k && key >= row + p.key_offset - p.window_left &&
                                      key <= row + p.key_offset + p.window_right;
                ASSERT_EQ(v.sees(c), absolute) << "Sq " << sq << " Sk " << sk << " window (" << left << ", "
                                               << right << ") row " << row << " key " << key;
                if (row < sq) {
                  ASSERT_EQ(absolute, key < sk && keys.visible(row, key))
                      << "Sq " << sq << " Sk " << sk << " window (" << left << ", " << right << ") row " << row
                      << " key " << key;
                  ++checked, visible += absolute;
                }
              }
            }
        }
  // The shapes must exercise both answers, or the test could not fail.
  EXPECT_GT(visible, 0);
  EXPECT_LT(visible, checked);
}

// The same mask from the key's side (the sm90 backward's transposed scores): for every key, first query and
// fragment offset, QueriesSeeingKey's test equals the absolute one, and keys past the sequence end are seen by no
// query.
TEST(QueriesSeeingKey, MatchesTheMaskForEveryKeyAndQuery) {
  int64_t checked = 0, seen = 0;
  for (int64_t sq : {1, 3, 8, 17, 64})
    for (int64_t sk : {1, 5, 16, 33, 64})
      for (int64_t left : {-1, 0, 2, 7})
        for (int64_t right : {-1, 0, 3}) {
          const KeyRange keys{sq, sk, sk - sq, left, right};
          const cuda::FwdKernelParams p = kernel_masks(keys);
          for (int key = 0; key < sk + 20; ++key)
            for (int first_query = 0; first_query < sq + 8; ++first_query) {
              const cuda::QueriesSeeingKey q(p, key, first_query);
              for (int c = 0; c < 64; ++c) {
                const int row = first_query + c;
                const bool absolute = key < p.seqlen_k && key >= row + p.key_offset - p.window_left &&
                                      key <= row + p.key_offset + p.window_right;
                ASSERT_EQ(q.sees(c), absolute) << "Sq " << sq << " Sk " << sk << " window (" << left << ", "
                                               << right << ") row " << row << " key " << key;
                ASSERT_EQ(absolute, cuda::VisibleKeys(p, row, key).sees(0))
                    << "Sq " << sq << " Sk " << sk << " window (" << left << ", " << right << ") row " << row
                    << " key " << key;
                ++checked, seen += absolute;
              }
            }
        }
  EXPECT_GT(seen, 0);
  EXPECT_LT(seen, checked);
}

}  // namespace
}  // namespace flashtile
