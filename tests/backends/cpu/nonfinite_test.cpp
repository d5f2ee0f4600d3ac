// NaN and Inf in the inputs (TESTING.md "Bad input"). The propagation the CPU backends implement, and which
// these tests pin down:
//
//  - A NaN or Inf stored at a key that the mask hides from every row never reaches an output: every output is
//    finite and that key's dK and dV are exactly 0. (0 * NaN is NaN, so a masked score must be replaced by
//    -inf and a masked P or dS by 0, not multiplied away; a tile holding both visible and hidden keys tests it.)
//  - A NaN in k[b, j, hk, :] makes the score (b, h, i, j) NaN for every row i that sees key j and every query
//    head h reading kv head hk; those rows' whole O row and their LSE are NaN. Other rows, heads and batches
//    are unaffected.
//  - A NaN in v[b, j, hk, d] reaches only column d of O, in the same rows; their LSE stays finite.
//  - Backward, for either: the dQ row of every row that sees key j is NaN (its P or dP row is), the dQ rows
//    of the other rows are finite, and so are dK and dV of every other batch and kv head. dK/dV of the poisoned
//    head fill with NaN wherever a poisoned row reaches, which is not pinned down here.
//  - An Inf at a visible position makes the rows that see it non-finite in ways that depend on signs; only
//    the masked case above is part of the contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Where { kK, kV };

struct Poison {
  Backend backend;
  Where where;
  float value;
};

std::string describe(const Poison& p) {
  const char* value = std::isnan(p.value) ? "NaN" : p.value > 0 ? "Inf" : "MinusInf";
  return backend_tag(p.backend) + (p.where == Where::kK ? "_k_" : "_v_") + value;
}

void PrintTo(const Poison& p, std::ostream* os) { *os << describe(p); }

bool all_finite(const verify::HostTensor& t) {
  for (double x : t.to_doubles())
    if (!std::isfinite(x)) return false;
  return true;
}

// ---- a poisoned key that no row sees -----------------------------------------------------------------------

class HiddenPoison : public ::testing::TestWithParam<Poison> {};

TEST_P(HiddenPoison, ReachesNoOutput) {
  const Poison& poison = GetParam();
  // Row i sees keys [i + 50, i + 200]: keys 0..49 are hidden from every row, and key 10 shares the first K/V
  // tile (flash1's 128 keys, the backward's 64) with keys 50.. that rows do see.
  const verify::Problem p = Spec(100, 300).batch(2).heads(4, 2).dims(32, 16).window(150, 0);
  constexpr int64_t kHiddenKey = 10;
  const uint64_t seed = seed_for(p);
  const bool with_backward = poison.backend != Backend::kCpuFlash1;
  verify::Case c = verify::Case::make(p, seed, with_backward);
  verify::HostTensor& target = poison.where == Where::kK ? c.k : c.v;
  const int64_t dim = poison.where == Where::kK ? p.head_dim : p.head_dim_v;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t d = 0; d < dim; ++d) target.set({b, kHiddenKey, h, d}, poison.value);

  const std::string what = replay(p, seed, poison.backend) + ", " + describe(poison);
  ASSERT_TRUE(forward(c.forward_params(poison.backend)).ok()) << what;
  EXPECT_TRUE(all_finite(c.out)) << what;
  EXPECT_TRUE(all_finite(c.lse)) << what;
  if (!with_backward) return;
  ASSERT_TRUE(backward(c.backward_params(poison.backend)).ok()) << what;
  EXPECT_TRUE(all_finite(c.dq)) << what;
  EXPECT_TRUE(all_finite(c.dk)) << what;
  EXPECT_TRUE(all_finite(c.dv)) << what;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h) {
      for (int64_t d = 0; d < p.head_dim; ++d) EXPECT_EQ(c.dk.get({b, kHiddenKey, h, d}), 0.0f) << what;
      for (int64_t d = 0; d < p.head_dim_v; ++d) EXPECT_EQ(c.dv.get({b, kHiddenKey, h, d}), 0.0f) << what;
    }
}

std::vector<Poison> hidden_cases() {
  std::vector<Poison> out;
  for (Backend b : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference})
    for (Where w : {Where::kK, Where::kV})
      for (float value : {kNaN, kInf, -kInf}) out.push_back({b, w, value});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cpu, HiddenPoison, ::testing::ValuesIn(hidden_cases()),
                         [](const auto& info) { return describe(info.param); });

// ---- a NaN at a key that some rows see ---------------------------------------------------------------------

class VisibleNaN : public ::testing::TestWithParam<Poison> {};

TEST_P(VisibleNaN, PoisonsExactlyTheRowsThatSeeIt) {
  const Poison& poison = GetParam();
  // Causal, Sq = Sk: row i sees key j exactly when j <= i. The NaN sits in batch 1, kv head 0, key 70 (inside
  // the second row tile, and a tile shared with finite keys), column 3.
  const verify::Problem p = Spec(150, 150).batch(2).heads(4, 2).dims(32, 16).causal();
  constexpr int64_t kB = 1, kKvHead = 0, kKey = 70, kCol = 3;
  const uint64_t seed = seed_for(p);
  const bool with_backward = poison.backend != Backend::kCpuFlash1;
  verify::Case c = verify::Case::make(p, seed, with_backward);
  (poison.where == Where::kK ? c.k : c.v).set({kB, kKey, kKvHead, kCol}, kNaN);

  const std::string what = replay(p, seed, poison.backend) + ", " + describe(poison);
  ASSERT_TRUE(forward(c.forward_params(poison.backend)).ok()) << what;
  if (with_backward) {
    ASSERT_TRUE(backward(c.backward_params(poison.backend)).ok()) << what;
  }
  const int64_t group = p.heads_q / p.heads_kv;
  Violations v;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const bool sees_nan = b == kB && h / group == kKvHead && i >= kKey;
        const float lse = c.lse.get({b, h, i});
        v.expect(std::isnan(lse) == (sees_nan && poison.where == Where::kK),
                 [&] { return element("lse", b, h, i, -1, lse); });
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const bool nan_expected = sees_nan && (poison.where == Where::kK || d == kCol);
          const float o = c.out.get({b, i, h, d});
          v.expect(nan_expected ? std::isnan(o) : std::isfinite(o), [&] { return element("out", b, h, i, d, o); });
        }
        for (int64_t d = 0; with_backward && d < p.head_dim; ++d) {
          const float g = c.dq.get({b, i, h, d});
          v.expect(sees_nan ? std::isnan(g) : std::isfinite(g), [&] { return element("dq", b, h, i, d, g); });
        }
      }
  for (int64_t b = 0; with_backward && b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      if (b == kB && hk == kKvHead) continue;
      for (int64_t j = 0; j < p.seqlen_k; ++j) {
        for (int64_t d = 0; d < p.head_dim; ++d) {
          const float g = c.dk.get({b, j, hk, d});
          v.expect(std::isfinite(g), [&] { return element("dk", b, hk, j, d, g); });
        }
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const float g = c.dv.get({b, j, hk, d});
          v.expect(std::isfinite(g), [&] { return element("dv", b, hk, j, d, g); });
        }
      }
    }
  EXPECT_TRUE(v.result()) << what;
}

std::vector<Poison> visible_cases() {
  std::vector<Poison> out;
  for (Backend b : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference})
    for (Where w : {Where::kK, Where::kV}) out.push_back({b, w, kNaN});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cpu, VisibleNaN, ::testing::ValuesIn(visible_cases()),
                         [](const auto& info) { return describe(info.param); });

// ---- a row whose every visible score is NaN -------------------------------------------------------------------

// A NaN in q row 5 makes all of that row's scores NaN, and a NaN in key 0 all of causal row 0's (its only key).
// The running max skips NaN and stays -inf, as for a row that sees no key; such rows must still come out NaN
// (O and LSE), as the oracle gives them, not as the no-visible-key rule's 0 and -inf. The other rows are finite.
TEST(NaNScores, WholeRowComesOutNaN) {
  for (const Backend backend : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference})
    for (const DType dtype : {DType::kBFloat16, DType::kFloat32})
      for (const bool in_k : {false, true}) {
        const verify::Problem problem = in_k ? Spec(40, 40).dims(16).dtype(dtype).causal().window(0, 0)
                                             : Spec(40, 40).dims(16).dtype(dtype);
        verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/false);
        const int64_t row = in_k ? 0 : 5;
        (in_k ? c.k : c.q).set({0, row, 0, 3}, kNaN);
        ASSERT_TRUE(forward(c.forward_params(backend)).ok());
        const std::string what = backend_tag(backend) + " " + dtype_name(dtype) + (in_k ? ", NaN key" : ", NaN q");
        for (int64_t i = 0; i < 40; ++i) {
          EXPECT_EQ(std::isnan(c.lse.get({0, 0, i})), i == row) << what << ", lse row " << i;
          for (int64_t d = 0; d < 16; ++d)
            ASSERT_EQ(std::isnan(c.out.get({0, i, 0, d})), i == row) << what << ", out row " << i;
        }
      }
}

// ---- logits so large that one rounding of S outweighs a unit of the softmax ------------------------------------

// q and k scaled by 3000: scores ~1e7, where fp32 rounds S to steps of ~1. The backward recomputes S and the
// bf16 forward summed its products in another order, so S - LSE came out above 0 and P = exp(S - LSE) above 1:
// gradients up to 1e14 or Inf, where each P <= 1 bounds |dV[j, d]| by the sum over rows of |dO[i, d]|.
// No precision is promised at such logits; finite gradients within that bound are.
TEST(LargeLogits, GradientsStayFiniteAndBounded) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat32})
    for (const bool causal : {false, true}) {
      verify::Problem problem = Spec(200, 200).dims(64).dtype(dtype);
      if (causal) problem = Spec(200, 200).dims(64).dtype(dtype).causal();
      verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/true);
      for (verify::HostTensor* t : {&c.q, &c.k})
        for (int64_t i = 0; i < 200; ++i)
          for (int64_t d = 0; d < 64; ++d) t->set({0, i, 0, d}, t->get({0, i, 0, d}) * 3000.0f);
      ASSERT_TRUE(forward(c.forward_params(Backend::kCpuFlash2)).ok());
      ASSERT_TRUE(backward(c.backward_params(Backend::kCpuFlash2)).ok());
      const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : " full");
      for (int64_t d = 0; d < 64; ++d) {
        double bound = 0;
        for (int64_t i = 0; i < 200; ++i) bound += std::abs(c.dout.get({0, i, 0, d}));
        for (int64_t j = 0; j < 200; ++j) {
          const float dv = c.dv.get({0, j, 0, d}), dq = c.dq.get({0, j, 0, d}), dk = c.dk.get({0, j, 0, d});
          ASSERT_TRUE(std::isfinite(dq) && std::isfinite(dk)) << what << ", row/key " << j << " col " << d;
          ASSERT_LE(std::abs(dv), bound * 1.01) << what << ", dv key " << j << " col " << d;
        }
      }
    }
}

// Scores so large that a unit in the last place of S outweighs the softmax's range. A row's max and its
// exponentials must see the same rounded scores, and the backward must rebuild P from the scores the forward
// rounded; the library is compiled without FMA contraction for it (CMakeLists.txt). With contraction, the bf16
// forward (scale applied inside the fused softmax step) took its max from rounded products and its exponentials
// from exact ones: at |S| ~ 1e10 every exponential of a row could underflow, and rows that see every key came
// out O = NaN, LSE = -inf (the mark of a row without keys). The fp32 backward rebuilt P from exact products
// where the forward had rounded S: dV 3e-4 off at |S| ~ 1e4, 0.4 at 1e7.
TEST(LargeLogits, Bf16RowsThatSeeKeysComeOutRight) {
  for (const Backend backend : {Backend::kCpuFlash2, Backend::kCpuFlash1})
    for (const bool causal : {false, true}) {
      Spec spec = Spec(40, 40).dims(32).dtype(DType::kBFloat16).scale(1e10f);  // |S| ~ 6e10
      if (causal) spec.causal();
      const verify::Problem problem = spec;
      const verify::CheckResult r = verify::check(problem, seed_for(problem), backend, /*with_backward=*/false);
      EXPECT_TRUE(r.pass()) << backend_tag(backend) << (causal ? " causal: " : " full: ") << r.summary();
    }
}

TEST(LargeLogits, Fp32ValueGradientsMatchTheOracle) {
  for (const float logit : {1e4f, 1e6f}) {
    // Standard normal q and k at D = 64: q . k ~ 8, so |S| ~ logit; the softmax is one-hot but for near ties.
    const verify::Problem problem = Spec(64, 64).dims(64).dtype(DType::kFloat32).causal().scale(logit / 8);
    verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/true);
    ASSERT_TRUE(forward(c.forward_params(Backend::kCpuFlash2)).ok());
    ASSERT_TRUE(backward(c.backward_params(Backend::kCpuFlash2)).ok());
    const verify::Reference want = verify::oracle(c, /*with_backward=*/true);
    const std::vector<double> got = c.dv.to_doubles();
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want.dv[i]));
    // fp32's own rounding of P^T dO: ~1e-7 of the largest dV
    EXPECT_LE(err, 1e-5 * verify::max_abs(want.dv)) << "|S| ~ " << logit;
  }
}

}  // namespace
}  // namespace flashtile::test
