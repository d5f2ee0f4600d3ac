// Determinism (SPEC.md "Backward", TESTING.md "Races and memory"): the forward is always bitwise reproducible,
// and the CPU backward is too, whatever `deterministic` says, because no two tasks ever add into the same
// element. Each backend reruns one problem with 1, 2, 3 and 2^31 - 1 threads (requests above the cores run on
// the cores, so those two hand the tasks out as 2 does on the CI's 2 cores; 2^31 - 1 once made OpenMP abort the
// process) and must write the same bits every time.
#include <gtest/gtest.h>

#include <cstdint>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

class Determinism : public ::testing::TestWithParam<Backend> {};

TEST_P(Determinism, EveryRunWritesTheSameBits) {
  const Backend backend = GetParam();
  // Causal with Sq < Sk and GQA: uneven task costs, and dK/dV gathered over the query heads of a group.
  const verify::Problem problem = Spec(200, 300).batch(2).heads(4, 2).dims(64, 32).causal().peaked();
  const uint64_t seed = seed_for(problem);
  const bool with_backward = backend != Backend::kCpuFlash1;

  auto run = [&](int32_t threads, bool deterministic) {
    verify::Case c = verify::Case::make(problem, seed, with_backward);
    ForwardParams f = c.forward_params(backend);
    f.num_threads = threads;
    EXPECT_TRUE(forward(f).ok());
    if (with_backward) {
      BackwardParams b = c.backward_params(backend);
      b.num_threads = threads;
      b.deterministic = deterministic;
      EXPECT_TRUE(backward(b).ok());
    }
    return c;
  };
  const verify::Case first = run(1, false);
  struct Rerun {
    int32_t threads;
    bool deterministic;
  };
  for (const Rerun r : {Rerun{2, false}, Rerun{3, false}, Rerun{1, true}, Rerun{2, true}, Rerun{INT32_MAX, false}}) {
    const verify::Case again = run(r.threads, r.deterministic);
    const std::string what = replay(problem, seed, backend) + ", " + std::to_string(r.threads) + " threads" +
                             (r.deterministic ? ", deterministic" : "") + " vs 1 thread";
    EXPECT_TRUE(same_bits(first.out, again.out)) << "out, " << what;
    EXPECT_TRUE(same_bits(first.lse, again.lse)) << "lse, " << what;
    if (!with_backward) continue;
    EXPECT_TRUE(same_bits(first.dq, again.dq)) << "dq, " << what;
    EXPECT_TRUE(same_bits(first.dk, again.dk)) << "dk, " << what;
    EXPECT_TRUE(same_bits(first.dv, again.dv)) << "dv, " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Determinism,
                         ::testing::Values(Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference),
                         [](const auto& info) { return backend_tag(info.param); });

}  // namespace
}  // namespace flashtile::test
