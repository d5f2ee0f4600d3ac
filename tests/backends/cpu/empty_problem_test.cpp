// Empty problems (SPEC.md "Errors"): batch 0 and seqlen 0 are valid calls. What exists must still be written
// and follow the no-visible-key rule: with seqlen_k 0 every query row sees no key, so O = 0, LSE = -inf and
// dQ = 0; with seqlen_q 0 no row sees any key, so dK = dV = 0. Tensors with no elements are left alone, and
// their guard bands too.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

struct EmptyCase {
  verify::Problem problem;
  Backend backend;
};

void PrintTo(const EmptyCase& c, std::ostream* os) { *os << replay(c.problem, seed_for(c.problem), c.backend); }

std::vector<EmptyCase> empty_cases() {
  const std::vector<verify::Problem> problems = {
      Spec(17, 9).batch(0).heads(4, 2),
      Spec(0, 9).batch(2).heads(4, 2).dims(32, 16).layout(verify::Layout::kPadded),
      Spec(17, 0).batch(2).heads(4, 2).dims(32, 16).causal(),
      Spec(130, 0).heads(3, 1).dtype(DType::kFloat32).window(4, 4).layout(verify::Layout::kHeadsFirst),
      Spec(0, 0).batch(2).heads(4, 2),
      Spec(0, 0).batch(0),
  };
  std::vector<EmptyCase> out;
  for (const verify::Problem& p : problems)
    for (Backend b : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference}) out.push_back({p, b});
  return out;
}

// Every element of t equals `value` (so none was left at the NaN poison), and the guards are intact.
::testing::AssertionResult all_equal(const verify::HostTensor& t, double value) {
  if (!t.guards_intact()) return ::testing::AssertionFailure() << "guard band overwritten";
  const std::vector<double> x = t.to_doubles();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == value)) return ::testing::AssertionFailure() << "element " << i << " is " << x[i];
  return ::testing::AssertionSuccess();
}

class EmptyProblem : public ::testing::TestWithParam<EmptyCase> {};

TEST_P(EmptyProblem, WritesTheNoVisibleKeyRule) {
  const auto& [problem, backend] = GetParam();
  const uint64_t seed = seed_for(problem);
  const bool with_backward = backend != Backend::kCpuFlash1;
  const verify::Case c = verify::Case::make(problem, seed, with_backward);
  Status s = forward(c.forward_params(backend));
  ASSERT_TRUE(s.ok()) << replay(problem, seed, backend) << ": " << s.message;
  EXPECT_TRUE(all_equal(c.out, 0.0)) << "out, " << replay(problem, seed, backend);
  EXPECT_TRUE(all_equal(c.lse, -INFINITY)) << "lse, " << replay(problem, seed, backend);
  if (!with_backward) return;
  s = backward(c.backward_params(backend));
  ASSERT_TRUE(s.ok()) << replay(problem, seed, backend) << ": " << s.message;
  EXPECT_TRUE(all_equal(c.dq, 0.0)) << "dq, " << replay(problem, seed, backend);
  EXPECT_TRUE(all_equal(c.dk, 0.0)) << "dk, " << replay(problem, seed, backend);
  EXPECT_TRUE(all_equal(c.dv, 0.0)) << "dv, " << replay(problem, seed, backend);
}

INSTANTIATE_TEST_SUITE_P(Cpu, EmptyProblem, ::testing::ValuesIn(empty_cases()),
                         [](const auto& info) { return param_name(info.param.problem, info.param.backend); });

// A tensor with no elements addresses no memory, so its data pointer may be null.
TEST(EmptyProblem, TensorsWithoutElementsMayBeNull) {
  const verify::Problem problem = Spec(0, 9).batch(2).heads(4, 2);
  const verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/true);
  ForwardParams f = c.forward_params(Backend::kAuto);
  f.q.data = f.out.data = f.lse.data = nullptr;
  Status s = forward(f);
  EXPECT_TRUE(s.ok()) << s.message;
  BackwardParams b = c.backward_params(Backend::kAuto);
  b.q.data = b.out.data = b.lse.data = b.dout.data = b.dq.data = nullptr;
  s = backward(b);
  EXPECT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(all_equal(c.dk, 0.0)) << "dk";
  EXPECT_TRUE(all_equal(c.dv, 0.0)) << "dv";
}

// An empty batch with sequences of 2^40: nothing to compute, so nothing allocated either (the workspaces of
// cpu-flash1 and cpu-reference grow with seqlen, and once asked for terabytes here).
TEST(EmptyProblem, EmptyBatchOfHugeSequencesAllocatesNothing) {
  const int64_t s = int64_t{1} << 40;
  for (const Backend backend : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference}) {
    ForwardParams f;
    f.q = make_tensor(nullptr, DType::kBFloat16, {0, s, 8, 128});
    f.k = make_tensor(nullptr, DType::kBFloat16, {0, s, 8, 128});
    f.v = make_tensor(nullptr, DType::kBFloat16, {0, s, 8, 128});
    f.out = make_tensor(nullptr, DType::kBFloat16, {0, s, 8, 128});
    f.lse = make_tensor(nullptr, DType::kFloat32, {0, 8, s});
    f.backend = backend;
    Status st = forward(f);
    EXPECT_TRUE(st.ok()) << backend_name(backend) << ": " << st.message;
    if (backend == Backend::kCpuFlash1) continue;  // forward-only
    BackwardParams b;
    b.q = b.k = b.v = b.out = b.dout = b.dq = b.dk = b.dv = f.q;
    b.lse = f.lse;
    b.backend = backend;
    st = backward(b);
    EXPECT_TRUE(st.ok()) << backend_name(backend) << ": " << st.message;
  }
}

}  // namespace
}  // namespace flashtile::test
