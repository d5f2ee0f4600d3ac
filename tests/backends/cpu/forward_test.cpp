// The CPU forward against the float64 oracle under the TESTING.md rule (verify::check), over a covering set
// of shapes rather than the full cross product: every seqlen, head dim, head ratio, mask kind, dtype, layout
// and input kind of TESTING.md appears, each paired with different values of the other axes. Each case runs
// on cpu-flash2 and cpu-flash1, and on cpu-reference when it is small (the oracle as a backend is slow).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

using verify::Layout;
constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16;  // bf16 is the default
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();  // a window bound far past any sequence

const std::vector<verify::Problem>& forward_cases() {
  static const std::vector<verify::Problem> cases = {
      // Square seqlens, from one key to just past two tiles (the flash tiles are 256 x 128).
      Spec(1, 1).dtype(kF32),
      Spec(2, 2).heads(4, 2).dims(32).dtype(kF16).causal().layout(Layout::kHeadsFirst),
      Spec(3, 3).heads(3, 1).dims(8).dtype(kF32).window(1, 0).layout(Layout::kPadded).peaked(),
      Spec(17, 17).heads(8, 1).dims(96).window(-1, 2).peaked(),
      Spec(97, 97).heads(6, 2).dims(128).dtype(kF16).window(16, -1).softcap(10).layout(Layout::kHeadsFirst),
      Spec(113, 113).dims(64, 32).dtype(kF32).causal().scale(0.5f).layout(Layout::kPadded),
      Spec(127, 127).heads(4, 1).dims(256).window(8, 8).softcap(5).peaked(),
      Spec(128, 128).heads(16, 2).dims(32).dtype(kF16).scale(0.3f).layout(Layout::kPadded),
      Spec(129, 129).heads(4, 2).window(500, 500).layout(Layout::kHeadsFirst),
      Spec(255, 255).heads(2, 1).dtype(kF32).causal().softcap(30).peaked(),
      Spec(520, 520).heads(2, 1).dims(64).dtype(kF32).causal(),  // three row tiles, the last of 8 rows
      Spec(128, 128).dtype(kF32).softcap(5).scale(1.0f).peaked(),
      Spec(64, 200).dims(256).dtype(kF16).window(-1, 16).layout(Layout::kHeadsFirst),
      Spec(113, 127).heads(3, 1).dims(96).dtype(kF16).causal().peaked(),
      Spec(127, 113).heads(8, 2).dims(128).dtype(kF32).window(5, 5).layout(Layout::kHeadsFirst),
      Spec(97, 97).heads(2, 2).dims(32, 96).window(-1, 3).scale(0.2f).layout(Layout::kPadded),
      // Sq > Sk: with the bottom-right alignment the first rows of a causal or windowed mask see no key.
      Spec(1025, 1023).heads(1, 1).dims(16).causal(),
      Spec(129, 17).heads(4, 2).dims(32).causal().peaked(),
      Spec(200, 64).heads(2, 1).dims(256, 128).dtype(kF32).causal().layout(Layout::kPadded),
      Spec(255, 97).dims(64, 128).dtype(kF16).window(4, 2).layout(Layout::kPadded),
      Spec(97, 17).heads(3, 3).dims(32).dtype(kF32).window(-1, 1000),
      // Sq < Sk.
      Spec(1023, 1025).heads(2, 1).dims(8).dtype(kF16).window(300, 40),
      Spec(17, 129).heads(3, 3).dims(96).dtype(kF16).causal().layout(Layout::kHeadsFirst),
      Spec(3, 255).heads(8, 2).softcap(20).peaked(),
      Spec(113, 1023).heads(2, 1).dims(32).dtype(kF16).window(-1, 0),  // equals causal
      Spec(17, 97).heads(4, 4).dims(8).window(1000, -1).layout(Layout::kPadded),
      Spec(97, 113).heads(4, 4).dims(128, 64).causal().window(32, -1).peaked(),
      // Unusual but valid: a decode step over a KV cache, a single key, odd and maximal head dims, windows at
      // the int64 limit, a zero and a negative scale.
      Spec(1, 1025).heads(8, 1).dtype(kF16).causal(),
      Spec(255, 1).causal(),
      Spec(70, 90).heads(2, 1).dims(5).dtype(kF32),
      Spec(70, 90).dims(33, 80).dtype(kF16).causal(),
      Spec(70, 90).heads(1, 1).dims(512, 1),
      Spec(100, 130).dims(32).window(kUnbounded, kUnbounded),
      Spec(100, 130).dims(32).dtype(kF16).scale(0.0f),
      Spec(100, 130).dims(32).scale(-0.3f).peaked(),
      // batch x heads above 65535, the CUDA grid limit the GPU backends must also handle.
      Spec(2, 3).batch(300).heads(224, 224).dims(8).dtype(kF16).causal(),
  };
  return cases;
}

std::vector<SweepCase> sweep() {
  std::vector<SweepCase> out;
  for (const verify::Problem& p : forward_cases()) {
    out.push_back({p, Backend::kCpuFlash2});
    out.push_back({p, Backend::kCpuFlash1});
    if (oracle_work(p) <= (int64_t{1} << 22)) out.push_back({p, Backend::kCpuReference});
  }
  return out;
}

class ForwardSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(ForwardSweep, MatchesOracle) {
  const auto& [problem, backend] = GetParam();
  const uint64_t seed = seed_for(problem);
  const verify::CheckResult r = verify::check(problem, seed, backend, /*with_backward=*/false);
  EXPECT_TRUE(r.pass()) << replay(problem, seed, backend) << "\n" << r.summary();
}

INSTANTIATE_TEST_SUITE_P(Cpu, ForwardSweep, ::testing::ValuesIn(sweep()),
                         [](const auto& info) { return param_name(info.param.problem, info.param.backend); });

// The LSE is optional: without it the forward writes the same O, bit for bit, and touches no LSE memory.
class ForwardWithoutLse : public ::testing::TestWithParam<Backend> {};

TEST_P(ForwardWithoutLse, WritesTheSameOutput) {
  const verify::Problem problem = Spec(150, 200).heads(4, 2).causal().peaked();
  const uint64_t seed = seed_for(problem);
  const verify::Case with = verify::Case::make(problem, seed, false);
  const verify::Case without = verify::Case::make(problem, seed, false);
  ForwardParams params = without.forward_params(GetParam());
  params.lse.data = nullptr;
  ASSERT_TRUE(forward(with.forward_params(GetParam())).ok());
  const Status s = forward(params);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(same_bits(with.out, without.out)) << replay(problem, seed, GetParam());
  EXPECT_TRUE(untouched(without.lse)) << replay(problem, seed, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cpu, ForwardWithoutLse,
                         ::testing::Values(Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference),
                         [](const auto& info) { return backend_tag(info.param); });

// The bf16 fast path (gemm_bf16.hpp, softmax_avx512.hpp) under each of its kernels. The shapes mix whole AMX
// blocks with row and key tails, masked tiles (causal, windows), a head dim that AMX's products cannot take (80),
// Dv != D, softcap and GQA.
class ForwardBf16Kernels : public ::testing::TestWithParam<const char*> {};

TEST_P(ForwardBf16Kernels, MatchOracle) {
  expect_pass_under_cpu_amx(GetParam(),
                            {Spec(300, 300).heads(4, 2).dims(128).causal(),
                             Spec(260, 390).dims(64, 96).window(100, 20).peaked(),
                             Spec(256, 256).heads(2, 1).dims(80).softcap(20), Spec(129, 257).heads(3, 1).dims(32, 64),
                             Spec(384, 128).dims(256).causal().layout(Layout::kHeadsFirst)},
                            {Backend::kCpuFlash2, Backend::kCpuFlash1}, /*with_backward=*/false);
}

INSTANTIATE_TEST_SUITE_P(Cpu, ForwardBf16Kernels, ::testing::ValuesIn(kCpuAmxModes),
                         [](const auto& info) { return cpu_amx_mode_name(info.param); });

}  // namespace
}  // namespace flashtile::test
