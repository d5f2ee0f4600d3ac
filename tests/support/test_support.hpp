// Helpers shared by the test binaries: one-line problem tables, replayable seeds, and checks on poisoned
// outputs. The oracle, the baseline and the pass rule themselves live in the verify library (src/verify).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "verify/verify.hpp"

namespace flashtile {

// GoogleTest prints a Backend parameter by its name ("cpu-flash2").
void PrintTo(Backend backend, std::ostream* os);

}  // namespace flashtile

namespace flashtile::test {

// A verify::Problem written on one line: Spec(97, 113).heads(4, 2).dims(64).dtype(DType::kFloat16).causal().
// Fields left alone keep verify::Problem's defaults: B1 H2/2 D64/64 bf16, no mask, contiguous, normal inputs.
class Spec {
 public:
  Spec(int64_t seqlen_q, int64_t seqlen_k);
  Spec& batch(int64_t batch);
  Spec& heads(int64_t heads_q, int64_t heads_kv);
  Spec& dims(int64_t head_dim) { return dims(head_dim, head_dim); }
  Spec& dims(int64_t head_dim, int64_t head_dim_v);
  Spec& dtype(DType dtype);
  Spec& causal();
  Spec& window(int64_t left, int64_t right);  // negative: unbounded on that side
  Spec& softcap(float softcap);
  Spec& scale(float softmax_scale);
  Spec& layout(verify::Layout layout);
  Spec& peaked();
  operator verify::Problem() const { return problem_; }

 private:
  verify::Problem problem_;
};

// The seed of a case: a hash of its description, so each case gets its own inputs and every run, here or on
// another machine, replays the same ones.
uint64_t seed_for(const verify::Problem& problem);

// "cpu-flash2 B1 Sq97 Sk97 ... seed 1234": everything a failure message needs to replay the case.
std::string replay(const verify::Problem& problem, uint64_t seed, Backend backend);

// The CPU bf16 path under each of its kernels: FLASHTILE_CPU_AMX=1 (AMX where the CPU and OS give it) and 0
// (AVX512-BF16). Each problem on each backend, with FLASHTILE_CPU_AMX set to `mode`, against the oracle (the
// TESTING.md rule); a CPU without the kernels runs the fp32 path, which must pass too.
inline const char* const kCpuAmxModes[] = {"1", "0"};
inline std::string cpu_amx_mode_name(const char* mode) { return mode[0] == '1' ? "Amx" : "Avx512"; }
void expect_pass_under_cpu_amx(const char* mode, const std::vector<verify::Problem>& problems,
                               const std::vector<Backend>& backends, bool with_backward);

// One (problem, backend) pair of a parameterised sweep; GoogleTest prints it as its replay line.
struct SweepCase {
  verify::Problem problem;
  Backend backend;
};
void PrintTo(const SweepCase& c, std::ostream* os);

// Oracle work of one case, in multiply-adds: cpu-reference joins a sweep only where it stays well under a second.
int64_t oracle_work(const verify::Problem& p);

// "flash2", "flash1", "reference": a backend's name without the "cpu-" prefix, for test names.
std::string backend_tag(Backend backend);

// A GoogleTest parameter name (letters, digits, underscores) for a problem run on a backend.
std::string param_name(const verify::Problem& problem, Backend backend);

// Every element of t and of its guard bands still holds the NaN poison: nothing was written.
::testing::AssertionResult untouched(const verify::HostTensor& t);

// The logical elements of a and b are equal bit for bit (so +0 and -0 differ, and NaN equals only the same NaN).
::testing::AssertionResult same_bits(const verify::HostTensor& a, const verify::HostTensor& b);

// Counts the elements that break a rule and keeps the description of the first, so a failure prints one line
// rather than thousands; the description is built only for that first one.
class Violations {
 public:
  template <typename Describe>
  void expect(bool ok, Describe&& describe) {
    if (!ok && count_++ == 0) first_ = describe();
  }
  ::testing::AssertionResult result() const;

 private:
  int64_t count_ = 0;
  std::string first_;
};

// "out[b1 h0 row 70 col 3] = nan": one element of a BSHD output (or, with col -1, of the LSE).
std::string element(const char* name, int64_t b, int64_t h, int64_t row, int64_t col, float value);

// verify::check() for a Case the test assembled itself (packed qkv, reversed or broadcast views): runs the
// forward (and the backward) on `backend` and applies the TESTING.md rule to every output, including the
// poison and guard checks. The output tensors must be freshly poisoned.
verify::CheckResult check_case(const verify::Case& c, Backend backend, bool with_backward);

}  // namespace flashtile::test
