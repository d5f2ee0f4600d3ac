// Rows with no visible key (SPEC.md "Masks"): their O row is exactly 0, their LSE exactly -inf, their dQ row
// exactly 0, and nothing anywhere is NaN. Keys that no row sees get dK = dV = 0 exactly. The mask is written
// out again here from SPEC.md, independently of the library's own KeyRange.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

// SPEC.md, bottom-right aligned: row i sees key j when i + (Sk - Sq) - left <= j <= i + (Sk - Sq) + right,
// a negative bound being unbounded; causal caps right at 0.
bool sees(const verify::Problem& p, int64_t i, int64_t j) {
  const AttentionOptions& o = p.options;
  const int64_t diagonal = i + p.seqlen_k - p.seqlen_q;
  int64_t right = o.window_right;
  if (o.causal) right = right < 0 ? 0 : std::min<int64_t>(right, 0);
  return (o.window_left < 0 || j >= diagonal - o.window_left) && (right < 0 || j <= diagonal + right);
}

struct MaskedCase {
  verify::Problem problem;
  Backend backend;
};

void PrintTo(const MaskedCase& c, std::ostream* os) { *os << replay(c.problem, seed_for(c.problem), c.backend); }

std::vector<MaskedCase> masked_cases() {
  const std::vector<verify::Problem> problems = {
      Spec(70, 5).batch(2).heads(4, 2).dims(32).causal(),                       // rows 0..64 see nothing
      Spec(130, 64).heads(2, 1).causal().window(2, -1).peaked(),                // rows 0..65: a 64-row tile and more
      Spec(150, 100).dims(64, 32).dtype(DType::kFloat16).window(3, 1),          // rows 0..48 see nothing
      Spec(40, 200).heads(3, 3).dims(16).dtype(DType::kFloat32).window(10, 0),  // keys 0..149 seen by no row
  };
  std::vector<MaskedCase> out;
  for (const verify::Problem& p : problems)
    for (Backend b : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference}) out.push_back({p, b});
  return out;
}

class MaskedRows : public ::testing::TestWithParam<MaskedCase> {};

TEST_P(MaskedRows, AreExactlyZeroAndNeverNaN) {
  const auto& [p, backend] = GetParam();
  const uint64_t seed = seed_for(p);
  const bool with_backward = backend != Backend::kCpuFlash1;
  const verify::Case c = verify::Case::make(p, seed, with_backward);
  ASSERT_TRUE(forward(c.forward_params(backend)).ok());
  if (with_backward) {
    ASSERT_TRUE(backward(c.backward_params(backend)).ok());
  }

  std::vector<bool> row_sees_any(p.seqlen_q, false), key_seen(p.seqlen_k, false);
  for (int64_t i = 0; i < p.seqlen_q; ++i)
    for (int64_t j = 0; j < p.seqlen_k; ++j)
      if (sees(p, i, j)) row_sees_any[i] = key_seen[j] = true;
  ASSERT_TRUE(std::count(row_sees_any.begin(), row_sees_any.end(), false) > 0 ||
              std::count(key_seen.begin(), key_seen.end(), false) > 0)
      << "the case must hide something";

  // Hidden rows and keys: exactly 0 (LSE exactly -inf). Everywhere: no NaN.
  Violations v;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const float lse = c.lse.get({b, h, i});
        v.expect(row_sees_any[i] ? !std::isnan(lse) : lse == -INFINITY,
                 [&] { return element("lse", b, h, i, -1, lse); });
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const float o = c.out.get({b, i, h, d});
          v.expect(row_sees_any[i] ? !std::isnan(o) : o == 0.0f, [&] { return element("out", b, h, i, d, o); });
        }
        for (int64_t d = 0; with_backward && d < p.head_dim; ++d) {
          const float g = c.dq.get({b, i, h, d});
          v.expect(row_sees_any[i] ? !std::isnan(g) : g == 0.0f, [&] { return element("dq", b, h, i, d, g); });
        }
      }
  for (int64_t b = 0; with_backward && b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < p.seqlen_k; ++j) {
        for (int64_t d = 0; d < p.head_dim; ++d) {
          const float g = c.dk.get({b, j, h, d});
          v.expect(key_seen[j] ? !std::isnan(g) : g == 0.0f, [&] { return element("dk", b, h, j, d, g); });
        }
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const float g = c.dv.get({b, j, h, d});
          v.expect(key_seen[j] ? !std::isnan(g) : g == 0.0f, [&] { return element("dv", b, h, j, d, g); });
        }
      }
  EXPECT_TRUE(v.result()) << replay(p, seed, backend);
}

INSTANTIATE_TEST_SUITE_P(Cpu, MaskedRows, ::testing::ValuesIn(masked_cases()),
                         [](const auto& info) { return param_name(info.param.problem, info.param.backend); });

}  // namespace
}  // namespace flashtile::test
