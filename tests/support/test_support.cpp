#include "support/test_support.hpp"

#include <cctype>
#include <cstring>
#include <sstream>
#include <vector>

#include "support/scoped_env.hpp"

namespace flashtile {

void PrintTo(Backend backend, std::ostream* os) { *os << backend_name(backend); }

}  // namespace flashtile

namespace flashtile::test {

Spec::Spec(int64_t seqlen_q, int64_t seqlen_k) {
  problem_.seqlen_q = seqlen_q;
  problem_.seqlen_k = seqlen_k;
}

Spec& Spec::batch(int64_t batch) {
  problem_.batch = batch;
  return *this;
}

Spec& Spec::heads(int64_t heads_q, int64_t heads_kv) {
  problem_.heads_q = heads_q;
  problem_.heads_kv = heads_kv;
  return *this;
}

Spec& Spec::dims(int64_t head_dim, int64_t head_dim_v) {
  problem_.head_dim = head_dim;
  problem_.head_dim_v = head_dim_v;
  return *this;
}

Spec& Spec::dtype(DType dtype) {
  problem_.dtype = dtype;
  return *this;
}

Spec& Spec::causal() {
  problem_.options.causal = true;
  return *this;
}

Spec& Spec::window(int64_t left, int64_t right) {
  problem_.options.window_left = left;
  problem_.options.window_right = right;
  return *this;
}

Spec& Spec::softcap(float softcap) {
  problem_.options.softcap = softcap;
  return *this;
}

Spec& Spec::scale(float softmax_scale) {
  problem_.options.softmax_scale = softmax_scale;
  return *this;
}

Spec& Spec::layout(verify::Layout layout) {
  problem_.layout = layout;
  return *this;
}

Spec& Spec::peaked() {
  problem_.inputs = verify::Inputs::kPeaked;
  return *this;
}

uint64_t seed_for(const verify::Problem& problem) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a: the same on every platform, unlike std::hash
  for (unsigned char c : problem.describe()) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string replay(const verify::Problem& problem, uint64_t seed, Backend backend) {
  return std::string(backend_name(backend)) + " " + problem.describe() + " seed " + std::to_string(seed);
}

std::string backend_tag(Backend backend) {
  const std::string name = backend_name(backend);
  return name.rfind("cpu-", 0) == 0 ? name.substr(4) : name;
}

std::string param_name(const verify::Problem& problem, Backend backend) {
  std::string name = backend_tag(backend) + "_";
  const std::string text = problem.describe();
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (std::isalnum(c))
      name += text[i];
    else if (c == '-' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))
      name += 'm';  // window(-1,8) -> window_m1_8
    else if (name.back() != '_')
      name += '_';
  }
  while (name.back() == '_') name.pop_back();
  return name;
}

::testing::AssertionResult untouched(const verify::HostTensor& t) {
  if (!t.guards_intact()) return ::testing::AssertionFailure() << "a guard band was overwritten";
  if (const int64_t written = t.numel() - t.unwritten(); written > 0)
    return ::testing::AssertionFailure() << written << " of " << t.numel() << " elements were written";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_bits(const verify::HostTensor& a, const verify::HostTensor& b) {
  // to_doubles() widens exactly, so equal doubles' bits mean equal stored bits.
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  if (x.size() != y.size()) return ::testing::AssertionFailure() << x.size() << " vs " << y.size() << " elements";
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " (row-major) differs: " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Violations::result() const {
  if (count_ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count_ << " wrong elements, the first: " << first_;
}

std::string element(const char* name, int64_t b, int64_t h, int64_t row, int64_t col, float value) {
  std::ostringstream s;
  s << name << "[b" << b << " h" << h << " row " << row;
  if (col >= 0) s << " col " << col;
  s << "] = " << value;
  return s.str();
}

namespace {

void check_written(verify::CheckResult& r, const char* name, const verify::HostTensor& t) {
  auto add = [&](const std::string& what) { r.error += (r.error.empty() ? "" : "; ") + std::string(name) + what; };
  if (!t.guards_intact()) add(": guard band overwritten");
  if (const int64_t n = t.unwritten(); n > 0) add(": " + std::to_string(n) + " elements left NaN");
}

}  // namespace

verify::CheckResult check_case(const verify::Case& c, Backend backend, bool with_backward) {
  verify::CheckResult r;
  if (Status s = forward(c.forward_params(backend)); !s.ok()) {
    r.error = "forward: " + s.message;
    return r;
  }
  check_written(r, "out", c.out);
  check_written(r, "lse", c.lse);
  if (with_backward) {
    if (Status s = backward(c.backward_params(backend)); !s.ok()) {
      r.error = "backward: " + s.message;
      return r;
    }
    check_written(r, "dq", c.dq);
    check_written(r, "dk", c.dk);
    check_written(r, "dv", c.dv);
  }
  const verify::Reference want = verify::oracle(c, with_backward), base = verify::baseline(c, with_backward);
  const DType dt = c.problem.dtype;
  r.verdicts.push_back(verify::compare("out", c.out.to_doubles(), want.o, base.o, dt, 2.0));
  r.verdicts.push_back(verify::compare_lse(c.lse.to_doubles(), want.lse, dt));
  if (with_backward) {
    r.verdicts.push_back(verify::compare("dq", c.dq.to_doubles(), want.dq, base.dq, dt, 3.0));
    r.verdicts.push_back(verify::compare("dk", c.dk.to_doubles(), want.dk, base.dk, dt, 3.0));
    r.verdicts.push_back(verify::compare("dv", c.dv.to_doubles(), want.dv, base.dv, dt, 3.0));
  }
  return r;
}

void PrintTo(const SweepCase& c, std::ostream* os) { *os << replay(c.problem, seed_for(c.problem), c.backend); }

int64_t oracle_work(const verify::Problem& p) {
  return p.batch * p.heads_q * p.seqlen_q * p.seqlen_k * (p.head_dim + p.head_dim_v);
}

void expect_pass_under_cpu_amx(const char* mode, const std::vector<verify::Problem>& problems,
                               const std::vector<Backend>& backends, bool with_backward) {
  ScopedEnv amx("FLASHTILE_CPU_AMX", mode);
  for (const verify::Problem& problem : problems)
    for (const Backend backend : backends) {
      const uint64_t seed = seed_for(problem);
      const verify::CheckResult r = verify::check(problem, seed, backend, with_backward);
      EXPECT_TRUE(r.pass()) << "FLASHTILE_CPU_AMX=" << mode << " " << replay(problem, seed, backend) << "\n"
                            << r.summary();
    }
}

}  // namespace flashtile::test
