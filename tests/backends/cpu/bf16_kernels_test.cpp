// The bf16 fast path's pieces (gemm_bf16.hpp, softmax_avx512.hpp), built into this binary from their sources and
// checked one by one against plain loops, under each kernel this CPU has: the AVX512-BF16 products and, where
// the CPU and OS allow it, the AMX ones. Shapes cover whole AMX tiles (multiples of 32), the AVX-512 fallback
// (any other m, n or k, odd k included), the packs' 16 x 16 blocks and their edges, and strided operands. On a
// CPU without AVX512-BF16 every case reports itself skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/gemm_bf16.hpp"
#include "backends/cpu/softmax_avx512.hpp"
#include "common/numeric.hpp"
#include "support/scoped_env.hpp"

namespace flashtile::cpu {
namespace {

// The kernels this CPU runs: AVX512-BF16 always (when it has a bf16 kernel), AMX when granted.
std::vector<Bf16Kernel> kernels() {
  std::vector<Bf16Kernel> out;
  const Bf16Kernel best = bf16_kernel();
  if (best == Bf16Kernel::kNone) return out;
  out.push_back(Bf16Kernel::kAvx512);
  if (best == Bf16Kernel::kAmx) out.push_back(Bf16Kernel::kAmx);
  return out;
}

std::vector<uint16_t> random_bf16(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = float_to_bf16(normal(rng));
  return out;
}

struct Shape {
  int64_t m, n, k;
};

// m, n, k: whole AMX blocks; AMX blocks with a partial pack block; odd k; tiny; the forward's 128 x 128 tiles.
const Shape kShapes[] = {{32, 32, 32},  {64, 128, 128}, {128, 128, 64},  {96, 160, 96}, {32, 64, 256}, {7, 5, 3},
                         {33, 47, 129}, {64, 128, 80},  {128, 100, 128}, {1, 16, 16},   {17, 33, 31}};

TEST(Bf16Kernels, ProductsMatchPlainLoops) {
  if (kernels().empty()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(7);
  for (const Bf16Kernel kernel : kernels()) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(std::string(bf16_kernel_name(kernel)) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                   " k=" + std::to_string(s.k));
      // Operands with padded rows (strides past the row) so that reads past a row's end would be seen.
      const int64_t lda = s.k + 8, ldb_t = s.k + 24, ldb = s.n + 40, ldc = s.n + 16;
      const std::vector<uint16_t> a = random_bf16(s.m * lda, rng);
      const std::vector<uint16_t> bt = random_bf16(s.n * ldb_t, rng);  // B^T operand: n rows of k
      const std::vector<uint16_t> b = random_bf16(s.k * ldb, rng);     // B operand: k rows of n
      std::vector<uint32_t> pack(bf16_pack_words(s.n, s.k) + 16);
      std::vector<float> c(s.m * ldc, -7.0f);
      gemm_bf16_abt(kernel, s.m, s.n, s.k, a.data(), lda, bt.data(), ldb_t, c.data(), ldc, pack.data());
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          if (j >= s.n) {  // columns past n untouched
            ASSERT_EQ(c[i * ldc + j], -7.0f) << "row " << i << " col " << j;
            continue;
          }
          double want = 0, mag = 0;
          for (int64_t p = 0; p < s.k; ++p) {
            const double x = double(bf16_to_float(a[i * lda + p])) * bf16_to_float(bt[j * ldb_t + p]);
            want += x, mag += std::abs(x);
          }
          ASSERT_NEAR(c[i * ldc + j], want, 1e-5 * mag + 1e-30) << "A B^T, row " << i << " col " << j;
        }
      std::vector<float> acc(s.m * ldc);
      for (auto& x : acc) x = float(rng() % 17) - 8.0f;
      const std::vector<float> before = acc;
      gemm_bf16_ab_accumulate(kernel, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, acc.data(), ldc, pack.data());
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          if (j >= s.n) {
            ASSERT_EQ(acc[i * ldc + j], before[i * ldc + j]) << "row " << i << " col " << j;
            continue;
          }
          double want = before[i * ldc + j], mag = std::abs(want);
          for (int64_t p = 0; p < s.k; ++p) {
            const double x = double(bf16_to_float(a[i * lda + p])) * bf16_to_float(b[p * ldb + j]);
            want += x, mag += std::abs(x);
          }
          ASSERT_NEAR(acc[i * ldc + j], want, 1e-5 * mag + 1e-30) << "C += A B, row " << i << " col " << j;
        }
    }
  }
}

TEST(Bf16Kernels, RoundAndTransposeToBf16) {
  if (kernels().empty()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (const Shape& s : kShapes) {  // m x n as rows x cols: whole 16 x 16 blocks and every kind of edge
    const int64_t rows = s.m, cols = s.n, lda = cols + 5;
    std::vector<float> a(rows * lda);
    for (auto& x : a) x = normal(rng);
    a[0] = std::numeric_limits<float>::quiet_NaN();
    std::vector<uint16_t> rounded(rows * cols), transposed(rows * cols);
    round_to_bf16(rows, cols, a.data(), lda, rounded.data());
    transpose_to_bf16(rows, cols, a.data(), lda, transposed.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t want = float_to_bf16(a[r * lda + c]);
        const auto same = [&](uint16_t got) { return r + c == 0 ? std::isnan(bf16_to_float(got)) : got == want; };
        ASSERT_TRUE(same(rounded[r * cols + c])) << rows << " x " << cols << ", rounded (" << r << ", " << c << ")";
        ASSERT_TRUE(same(transposed[c * rows + r])) << rows << " x " << cols << ", transposed (" << r << ", " << c
                                                    << ")";
      }
  }
}

TEST(Bf16Kernels, EnvironmentRulesAmxOut) {
  if (bf16_kernel() != Bf16Kernel::kAmx) GTEST_SKIP() << "this CPU or OS gives no AMX";
  ScopedEnv off("FLASHTILE_CPU_AMX", "0");
  EXPECT_EQ(bf16_kernel(), Bf16Kernel::kAvx512);
  off.set("1");
  EXPECT_EQ(bf16_kernel(), Bf16Kernel::kAmx);
}

TEST(Bf16Kernels, RowsFiniteFindsInfAndNan) {
  if (kernels().empty()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const int64_t rows = 5, cols = 70, ld = 80;
  std::vector<uint16_t> a(rows * ld, float_to_bf16(1.5f));
  EXPECT_TRUE(bf16_rows_finite(rows, cols, a.data(), ld));
  a[2 * ld + 75] = float_to_bf16(std::numeric_limits<float>::quiet_NaN());  // past the row's end: not read
  EXPECT_TRUE(bf16_rows_finite(rows, cols, a.data(), ld));
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()})
    for (const int64_t at : {int64_t{0}, 3 * ld + 33, 4 * ld + 69}) {
      std::vector<uint16_t> x = a;
      x[at] = float_to_bf16(bad);
      EXPECT_FALSE(bf16_rows_finite(rows, cols, x.data(), ld)) << "value " << bad << " at " << at;
    }
}

// The AVX-512 softmax step (softmax_avx512.hpp) writing P as bf16, and as fp32 over the scores.
TEST(Bf16Kernels, SoftmaxStepMatchesItsDefinition) {
  if (!avx512_softmax_available()) GTEST_SKIP() << "this CPU has no AVX-512";
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (const bool bf16 : {true, false}) {
    if (bf16 && kernels().empty()) continue;  // P in bf16 needs AVX512-BF16
    for (const int64_t cols : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{128}}) {
      const int64_t rows = 6, dv = 40;
      const float mul = 0.7f;
      std::vector<float> s(rows * cols);
      for (auto& x : s) x = normal(rng);
      for (int64_t c = 0; c < cols; ++c) s[1 * cols + c] = kNegInf;      // row 1: every key hidden, none seen yet
      s[2 * cols] = kNegInf;                                             // row 2: one key hidden
      s[3 * cols + cols / 2] = std::numeric_limits<float>::quiet_NaN();  // row 3: a NaN score
      std::vector<float> m = {kNegInf, kNegInf, 0.5f, 1.0f, 100.0f, -3.0f}, l = {0, 0, 2.0f, 1.0f, 3.0f, 0.5f};
      std::vector<float> o(rows * dv), alpha(rows);
      for (auto& x : o) x = normal(rng);
      const std::vector<float> s0 = s, m0 = m, l0 = l, o0 = o;
      std::vector<uint16_t> p16(rows * cols, 0xffff);
      online_softmax_step_avx512(rows, cols, s.data(), mul, m.data(), l.data(), alpha.data(),
                                 bf16 ? p16.data() : nullptr, o.data(), dv);
      for (int64_t r = 0; r < rows; ++r) {
        SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + " P, cols " + std::to_string(cols) + " row " +
                     std::to_string(r));
        double mx = m0[r];
        for (int64_t c = 0; c < cols; ++c)
          if (!std::isnan(s0[r * cols + c])) mx = std::max(mx, double(s0[r * cols + c] * mul));
        ASSERT_EQ(m[r], float(mx));
        const double shift = mx == kNegInf ? 0.0 : mx;
        const double a = std::exp(m0[r] - shift);
        ASSERT_NEAR(alpha[r], a, 1e-6 * a);
        double sum = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double p = std::exp(double(s0[r * cols + c] * mul) - shift);
          sum += p;
          const float got = bf16 ? bf16_to_float(p16[r * cols + c]) : s[r * cols + c];
          if (std::isnan(p)) {
            ASSERT_TRUE(std::isnan(got)) << "col " << c;
          } else {  // bf16 keeps 8 bits; fp32 rounds the exponent s - m, up to ~30 here, to ~4e-6 of 1
            ASSERT_NEAR(got, p, (bf16 ? 4e-3 : 8e-6) * p + 1e-30) << "col " << c;
          }
        }
        if (bf16) {
          ASSERT_TRUE(std::equal(s.begin(), s.end(), s0.begin(), [](float x, float y) {
            return x == y || (std::isnan(x) && std::isnan(y));
          })) << "the scores are left as they were";
        }
        const double want_l = l0[r] * a + sum;
        if (std::isnan(want_l)) {
          ASSERT_TRUE(std::isnan(l[r]));
        } else {
          ASSERT_NEAR(l[r], want_l, 1e-6 * want_l + 1e-30);
        }
        for (int64_t d = 0; d < dv; ++d)
          ASSERT_NEAR(o[r * dv + d], o0[r * dv + d] * a, 1e-6 * std::abs(o0[r * dv + d]));
      }
    }
  }
}

// The backward's AVX-512 step (softmax_avx512.hpp): P and dS against their definitions, with per-row visible
// ranges (an empty one, a full one, tails past a multiple of 16), an LSE below a row's max (P capped at 1), and
// NaN in dP at a hidden key (must give 0) and at a visible one (must give NaN).
TEST(Bf16Kernels, BackwardStepMatchesItsDefinition) {
  if (!avx512_softmax_available()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const int64_t cols : {int64_t{5}, int64_t{16}, int64_t{37}, int64_t{128}}) {
    const int64_t rows = 5;
    const float mul = 0.6f, scale = 0.6f;
    std::vector<float> s(rows * cols), dp(rows * cols), lse(rows), delta(rows);
    for (auto& x : s) x = normal(rng);
    for (auto& x : dp) x = normal(rng);
    for (int64_t r = 0; r < rows; ++r) lse[r] = 2.0f + normal(rng), delta[r] = normal(rng);
    lse[3] = -50.0f;  // below every score: S - LSE > 0, P capped at 1
    const int32_t n = static_cast<int32_t>(cols);
    const std::vector<int32_t> begin = {0, 2, 0, 1, 3}, end = {n, n - 1, 0, 4, 3};
    dp[1 * cols + 0] = kNaN;  // row 1 hides key 0
    dp[1 * cols + 2] = kNaN;  // and sees key 2
    std::vector<float> p = s, ds = dp;
    backward_probabilities_avx512(rows, cols, p.data(), ds.data(), mul, lse.data(), delta.data(), scale, begin.data(),
                                  end.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        SCOPED_TRACE("cols " + std::to_string(cols) + " row " + std::to_string(r) + " col " + std::to_string(c));
        if (c < begin[r] || c >= std::max(begin[r], end[r])) {
          ASSERT_EQ(p[i], 0.0f);
          ASSERT_EQ(ds[i], 0.0f);
          continue;
        }
        const double want_p = std::exp(std::min(double(s[i] * mul) - lse[r], 0.0));
        ASSERT_NEAR(p[i], want_p, 8e-6 * want_p);
        const double want_ds = want_p * (double(dp[i]) - delta[r]) * scale;
        if (std::isnan(want_ds)) {
          ASSERT_TRUE(std::isnan(ds[i]));
        } else {
          ASSERT_NEAR(ds[i], want_ds, 2e-5 * std::abs(want_ds) + 1e-6);
        }
      }
  }
}

}  // namespace
}  // namespace flashtile::cpu
