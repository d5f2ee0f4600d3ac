// Views the verify layouts do not produce (SPEC.md "Layout": any int64 strides, last dim contiguous):
//  - packed qkv: one (B, S, 3, H, D) buffer holding q, k and v, the layout of a fused QKV projection, with
//    dq/dk/dv packed the same way in a second buffer;
//  - negative strides: k and v walked back to front along the sequence, out back to front along the heads;
//  - broadcast: k and v with batch stride 0, one set of keys shared by every batch entry.
// Each is checked against the oracle under the TESTING.md rule, with the poison and guard checks.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

using verify::HostTensor;

// Completes a Case whose q, k, v and output views the test has set: allocates lse and a dO of its own layout
// (padded, so its strides differ from O's), fills q, k, v and dO from the seed.
void fill(verify::Case& c, uint64_t seed) {
  const verify::Problem& p = c.problem;
  std::mt19937_64 rng(seed);
  c.q.fill_normal(rng, 1.0f);
  c.k.fill_normal(rng, 1.0f);
  c.v.fill_normal(rng, 1.0f);
  c.lse = HostTensor(DType::kFloat32, {p.batch, p.heads_q, p.seqlen_q});
  c.dout = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_v}, verify::Layout::kPadded);
  c.dout.fill_normal(rng, 1.0f);
}

// q, k and v as the three slices of one (B, S, 3, H, D) buffer; dq, dk and dv the same in another.
verify::Case packed_qkv(const verify::Problem& p, uint64_t seed) {
  const int64_t B = p.batch, S = p.seqlen_q, H = p.heads_q, D = p.head_dim;
  const std::vector<int64_t> shape = {B, S, H, D}, strides = {S * 3 * H * D, 3 * H * D, D, 1};
  verify::Case c;
  c.problem = p;
  HostTensor qkv(p.dtype, {B, S, 3 * H, D}), dqkv(p.dtype, {B, S, 3 * H, D});
  c.q = HostTensor::view_of(qkv, 0, shape, strides);
  c.k = HostTensor::view_of(qkv, H * D, shape, strides);
  c.v = HostTensor::view_of(qkv, 2 * H * D, shape, strides);
  c.dq = HostTensor::view_of(dqkv, 0, shape, strides);
  c.dk = HostTensor::view_of(dqkv, H * D, shape, strides);
  c.dv = HostTensor::view_of(dqkv, 2 * H * D, shape, strides);
  c.out = HostTensor(p.dtype, {B, S, H, p.head_dim_v});
  fill(c, seed);
  return c;
}

// The same elements as a contiguous (B, S, H, D) tensor, with dimension `dim` walked from its last index down.
HostTensor reversed(HostTensor& owner, int dim) {
  const Tensor t = owner.view();
  std::vector<int64_t> strides(t.stride, t.stride + 4);
  strides[dim] = -strides[dim];
  return HostTensor::view_of(owner, (t.shape[dim] - 1) * t.stride[dim], owner.shape(), strides);
}

verify::Case negative_strides(const verify::Problem& p, uint64_t seed) {
  verify::Case c;
  c.problem = p;
  HostTensor k(p.dtype, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim}),
      v(p.dtype, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v}),
      out(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_v});
  c.q = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim});
  c.k = reversed(k, 1);
  c.v = reversed(v, 1);
  c.out = reversed(out, 2);
  c.dq = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim});
  c.dk = HostTensor(p.dtype, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim});
  c.dv = HostTensor(p.dtype, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v});
  fill(c, seed);
  return c;
}

// k and v of shape (B, Sk, Hkv, D) over the memory of one batch entry.
verify::Case broadcast_kv(const verify::Problem& p, uint64_t seed) {
  verify::Case c;
  c.problem = p;
  HostTensor k(p.dtype, {1, p.seqlen_k, p.heads_kv, p.head_dim}), v(p.dtype, {1, p.seqlen_k, p.heads_kv, p.head_dim_v});
  auto broadcast = [&](HostTensor& one) {
    const Tensor t = one.view();
    return HostTensor::view_of(one, 0, {p.batch, t.shape[1], t.shape[2], t.shape[3]},
                               {0, t.stride[1], t.stride[2], t.stride[3]});
  };
  c.q = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim});
  c.k = broadcast(k);
  c.v = broadcast(v);
  c.out = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim_v});
  c.dq = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.head_dim});
  c.dk = HostTensor(p.dtype, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim});
  c.dv = HostTensor(p.dtype, {p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v});
  fill(c, seed);
  return c;
}

struct ViewCase {
  const char* name;
  verify::Case (*make)(const verify::Problem&, uint64_t);
  verify::Problem problem;
  Backend backend;
};

void PrintTo(const ViewCase& c, std::ostream* os) {
  *os << c.name << ", " << replay(c.problem, seed_for(c.problem), c.backend);
}

std::vector<ViewCase> view_cases() {
  // Packed qkv needs Sq = Sk, Hq = Hkv and D = Dv.
  const verify::Problem packed[] = {Spec(97, 97).batch(2).heads(3, 3).causal(),
                                    Spec(130, 130).dims(32).dtype(DType::kFloat16).peaked()};
  const verify::Problem other[] = {Spec(70, 150).batch(2).heads(4, 2).dims(32, 16).window(20, 5),
                                   Spec(129, 64).batch(3).heads(6, 2).dims(64).dtype(DType::kFloat16).causal()};
  std::vector<ViewCase> out;
  for (Backend b : {Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference}) {
    for (const verify::Problem& p : packed) out.push_back({"packed_qkv", packed_qkv, p, b});
    out.push_back({"negative_strides", negative_strides, other[0], b});
    out.push_back({"broadcast_kv", broadcast_kv, other[1], b});
  }
  return out;
}

class StridedViews : public ::testing::TestWithParam<ViewCase> {};

TEST_P(StridedViews, MatchOracle) {
  const ViewCase& v = GetParam();
  const uint64_t seed = seed_for(v.problem);
  const verify::Case c = v.make(v.problem, seed);
  const verify::CheckResult r = check_case(c, v.backend, /*with_backward=*/v.backend != Backend::kCpuFlash1);
  EXPECT_TRUE(r.pass()) << v.name << ", " << replay(v.problem, seed, v.backend) << "\n" << r.summary();
}

INSTANTIATE_TEST_SUITE_P(Cpu, StridedViews, ::testing::ValuesIn(view_cases()), [](const auto& info) {
  return std::string(info.param.name) + "_" + param_name(info.param.problem, info.param.backend);
});

}  // namespace
}  // namespace flashtile::test
