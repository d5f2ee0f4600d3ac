// Inputs for the CUDA tests at huge logits (forward_test.cpp, backward_test.cpp; docs/testing-notes.md, "Large
// logits"): a case's q and k multiplied up until |S| = |q . k| reaches ~1e10 and ~1e12. Header-only:
// scripts/device_prepare.sh builds the GPU test binaries without the test support library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "verify/verify.hpp"

namespace flashtile::test {

// fp16's largest finite value.
constexpr double kFp16Max = 65504.0;

// The factors q and k are multiplied by. With standard normal q and k the kernels' exponent, S * scale * log2 e, is
// ~1.44 q . k / sqrt(D) whatever the head dim, and q . k / sqrt(D) reaches ~5 over 300 x 300 scores. bf16: 2^15
// and 2^18 (powers of 2, so the stored values scale exactly): the largest |S| ~4e10 and ~2.7e12 at D = 64 (8e10 and
// 5e12 at D = 256), exponents up to ~2^33 and ~2^39. fp16 holds no more than 65504, so its one factor is the
// largest that keeps q and k finite, 65504 / max |q|, |k| (1.2e4 to 1.6e4 here): |S| up to ~1e10 at D = 64
// (1.6e10 at D = 256), exponents up to ~2^30.5.
inline std::vector<double> large_logit_factors(const verify::Case& c) {
  if (c.problem.dtype == DType::kBFloat16) return {32768.0, 262144.0};
  double largest = 0;
  for (const verify::HostTensor* t : {&c.q, &c.k})
    for (double x : t->to_doubles()) largest = std::max(largest, std::fabs(x));
  return {kFp16Max / largest};
}

// q and k of c multiplied by factor (rounded to the dtype once more, which a power of 2 leaves exact).
inline void scale_queries_and_keys(verify::Case& c, double factor) {
  for (verify::HostTensor* t : {&c.q, &c.k}) {
    const std::vector<int64_t>& shape = t->shape();  // (B, S, H, D)
    for (int64_t b = 0; b < shape[0]; ++b)
      for (int64_t s = 0; s < shape[1]; ++s)
        for (int64_t h = 0; h < shape[2]; ++h)
          for (int64_t d = 0; d < shape[3]; ++d)
            t->set({b, s, h, d}, static_cast<float>(t->get({b, s, h, d}) * factor));
  }
}

struct LargeLogitCase {
  double factor;
  verify::Case c;
};

// The problem's cases, one per factor, each made from seed (a Case's tensors share their memory when copied, so
// every factor gets inputs of its own).
inline std::vector<LargeLogitCase> large_logit_cases(const verify::Problem& p, uint64_t seed, bool with_backward) {
  std::vector<LargeLogitCase> cases;
  for (double factor : large_logit_factors(verify::Case::make(p, seed, with_backward))) {
    verify::Case c = verify::Case::make(p, seed, with_backward);
    scale_queries_and_keys(c, factor);
    cases.push_back({factor, std::move(c)});
  }
  return cases;
}

// verify::check on the GPU for a large-logit case. In fp16 the baseline, a framework's naive math in fp16, rounds
// q . k to fp16, where |S| > 65504 overflows: its errors are inf or NaN and allow nothing. So there out must match
// the oracle to the rule's 2 units in the last place alone, as if the baseline were exact.
inline verify::CheckResult check_large_logit_case(verify::Case& c, Backend backend, bool with_backward) {
  verify::CheckResult r = verify::check(c, backend, with_backward, Device::kCUDA);
  if (c.problem.dtype == DType::kFloat16 && r.error.empty()) {
    const verify::Reference want = verify::oracle(c, /*with_backward=*/false);
    for (verify::Verdict& v : r.verdicts)
      if (v.name == "out") v = verify::compare("out", c.out.to_doubles(), want.o, want.o, DType::kFloat16, 2.0);
  }
  return r;
}

}  // namespace flashtile::test
