// The CUDA forward kernels split work-tile numbers with FastDivisor (src/backends/cuda/fast_divisor.hpp): a
// multiply-high and a shift in place of / and %. This checks it on the CPU against the operators, for divisors
// that are powers of two, next to them, primes, the shapes' own (query blocks, batch x heads, heads, GQA groups)
// and the largest ints, each against dividends at both ends of the range, around multiples of the divisor and
// at random.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/cuda/fast_divisor.hpp"
#include "backends/cuda/fwd_kernel_params.hpp"

namespace flashtile {
namespace {

TEST(FastDivisor, MatchesDivisionAndRemainder) {
  std::vector<int> divisors = {1, 2, 3, 5, 7, 8, 12, 16, 24, 32, 33, 64, 96, 127, 128, 132, 255, 256, 257, 1000,
                               4096, 65535, 65536, 65537, 1 << 20, (1 << 20) + 1, 1 << 30, (1 << 30) + 1,
                               INT_MAX - 1, INT_MAX};
  for (int l = 1; l < 31; ++l) divisors.push_back((1 << l) - 1), divisors.push_back((1 << l) + 1);
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> any(0, INT_MAX);
  int64_t checked = 0;
  for (const int d : divisors) {
    const cuda::FastDivisor f = cuda::FastDivisor::of(d);
    std::vector<int> dividends = {0, 1, 2, d - 1, d, INT_MAX, INT_MAX - 1, INT_MAX - d + 1};
    for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}, int64_t{INT_MAX} / d})
      for (int64_t delta : {-1, 0, 1})
        if (k * d + delta >= 0 && k * d + delta <= INT_MAX) dividends.push_back(static_cast<int>(k * d + delta));
    for (int i = 0; i < 20000; ++i) dividends.push_back(any(rng));
    for (const int n : dividends) {
      if (n < 0) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
      ++checked;
    }
  }
  EXPECT_GT(checked, int64_t{1000000});
}

// Every dividend below 2^20 for the small divisors a grid's shape gives (query blocks, heads, groups).
TEST(FastDivisor, ExhaustiveForSmallDivisors) {
  for (int d = 1; d <= 300; ++d) {
    const cuda::FastDivisor f = cuda::FastDivisor::of(d);
    for (int n = 0; n < (1 << 20); n += (d < 20 ? 1 : 7)) {
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
    }
  }
}

// An empty problem (seqlen_q = 0, so no query block) still resolves its kernel parameters: no division by zero.
TEST(FastDivisor, EmptyProblemsResolve) {
  cuda::FwdKernelParams p{};
  p.batch = 2, p.heads_q = 0, p.group = 0;
  cuda::set_query_blocks(p, 0);
  EXPECT_EQ(p.m_blocks, 0);
  EXPECT_EQ(p.by_m_blocks.divisor, 0);
  EXPECT_EQ(p.by_batch_heads.divisor, 0);
}

}  // namespace
}  // namespace flashtile
