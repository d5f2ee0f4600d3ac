// Bad input (TESTING.md, SPEC.md "Errors"): a call that breaks the contract, or that this CPU-only build cannot
// run, gets the documented status code (kInvalidArgument: the call is wrong; kUnsupported: valid, but no backend
// here runs it), a message that names the argument, and writes nothing: every output keeps its NaN poison and
// its guard bands. select_*_backend() and backward_workspace_size() must refuse it with the same status.
//
// Each case starts from one valid call (B2 Sq5 Sk7 H4/2 D16/8 bf16: every size distinct, so a swapped
// dimension shows) and breaks one thing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kB = 2, kSq = 5, kSk = 7, kHq = 4, kHkv = 2, kD = 16, kDv = 8;
constexpr float kInf = std::numeric_limits<float>::infinity();

verify::Problem valid_problem() { return Spec(kSq, kSk).batch(kB).heads(kHq, kHkv).dims(kD, kDv); }

// Tensors a case puts in place of the valid call's own. Inputs hold finite values, so a call that wrongly
// ran would leave finite numbers, not the poison, in its outputs; outputs are checked for poison afterwards.
class Buffers {
 public:
  Tensor input(DType dtype, std::vector<int64_t> shape) {
    inputs_.emplace_back(dtype, std::move(shape));
    inputs_.back().fill_normal(rng_, 1.0f);
    return inputs_.back().view();
  }
  Tensor output(DType dtype, std::vector<int64_t> shape) {
    outputs_.emplace_back(dtype, std::move(shape));
    return outputs_.back().view();
  }
  const std::vector<verify::HostTensor>& outputs() const { return outputs_; }

 private:
  std::mt19937_64 rng_{7};
  std::vector<verify::HostTensor> inputs_, outputs_;
};

Tensor with_offset_bytes(Tensor t, int bytes) {
  t.data = static_cast<char*>(t.data) + bytes;
  return t;
}

Tensor on_cuda(Tensor t) {
  t.device = Device::kCUDA;
  return t;
}

// A null view of 2^32 x 2^32 x 1 x 8 elements (strides 0 except the last): 2^67 elements, which wrap to 0 in
// int64. Counted naively the tensor looks empty, and an empty tensor may be null.
Tensor overflowing_null_view(DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.ndim = 4;
  t.shape[0] = t.shape[1] = int64_t{1} << 32;
  t.shape[2] = 1;
  t.shape[3] = 8;
  t.stride[3] = 1;
  return t;
}

template <typename Params>
struct BadCall {
  const char* name;
  StatusCode code;
  const char* names;  // what the message must contain: the argument at fault
  std::function<void(Params&, Buffers&)> mutate;
};
using BadForward = BadCall<ForwardParams>;
using BadBackward = BadCall<BackwardParams>;

template <typename Params>
std::ostream& operator<<(std::ostream& os, const BadCall<Params>& c) {
  return os << c.name;
}

void expect_forward_refused(const BadForward& bad) {
  const verify::Problem problem = valid_problem();
  const verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/false);
  ForwardParams params = c.forward_params(Backend::kCpuFlash2);
  Buffers buffers;
  bad.mutate(params, buffers);

  Backend chosen = Backend::kAuto;
  const Status selected = select_forward_backend(params, &chosen);
  const Status s = forward(params);
  EXPECT_EQ(s.code, bad.code) << s.message;
  EXPECT_THAT(s.message, HasSubstr(bad.names));
  EXPECT_EQ(selected.code, s.code) << "select_forward_backend: " << selected.message;
  EXPECT_EQ(selected.message, s.message);
  EXPECT_TRUE(untouched(c.out)) << "out";
  EXPECT_TRUE(untouched(c.lse)) << "lse";
  for (const verify::HostTensor& t : buffers.outputs()) EXPECT_TRUE(untouched(t)) << "replacement output";
}

void expect_backward_refused(const BadBackward& bad) {
  const verify::Problem problem = valid_problem();
  const verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/true);
  ASSERT_TRUE(forward(c.forward_params(Backend::kCpuFlash2)).ok());
  BackwardParams params = c.backward_params(Backend::kCpuFlash2);
  Buffers buffers;
  bad.mutate(params, buffers);

  Backend chosen = Backend::kAuto;
  size_t bytes = 0;
  const Status selected = select_backward_backend(params, &chosen);
  const Status sized = backward_workspace_size(params, &bytes);
  const Status s = backward(params);
  EXPECT_EQ(s.code, bad.code) << s.message;
  EXPECT_THAT(s.message, HasSubstr(bad.names));
  EXPECT_EQ(selected.code, s.code) << "select_backward_backend: " << selected.message;
  EXPECT_EQ(selected.message, s.message);
  EXPECT_EQ(sized.code, s.code) << "backward_workspace_size: " << sized.message;
  EXPECT_TRUE(untouched(c.dq)) << "dq";
  EXPECT_TRUE(untouched(c.dk)) << "dk";
  EXPECT_TRUE(untouched(c.dv)) << "dv";
  for (const verify::HostTensor& t : buffers.outputs()) EXPECT_TRUE(untouched(t)) << "replacement output";
}

constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16, kBF16 = DType::kBFloat16;
constexpr StatusCode kInvalid = StatusCode::kInvalidArgument, kUnsupported = StatusCode::kUnsupported;

const BadForward kBadForward[] = {
    // dtypes
    {"KDtypeDiffersFromQ", kInvalid, "k:", [](auto& p, auto&) { p.k.dtype = kF16; }},
    {"VDtypeDiffersFromQ", kInvalid, "v:", [](auto& p, auto& b) { p.v = b.input(kF32, {kB, kSk, kHkv, kDv}); }},
    {"OutDtypeDiffersFromQ", kInvalid, "out:",
     [](auto& p, auto& b) { p.out = b.output(kF32, {kB, kSq, kHq, kDv}); }},
    {"UnknownDtypeCode", kInvalid, "q:", [](auto& p, auto&) { p.q.dtype = static_cast<DType>(9); }},
    {"UnknownDeviceCode", kInvalid, "q:", [](auto& p, auto&) { p.q.device = static_cast<Device>(5); }},
    // head dims: valid per SPEC.md, beyond the CPU backends' 512
    {"HeadDimAboveCpuLimit", kUnsupported, "head_dim",
     [](auto& p, auto& b) {
       p.q = b.input(kBF16, {kB, kSq, kHq, 520});
       p.k = b.input(kBF16, {kB, kSk, kHkv, 520});
     }},
    {"HeadDimVAboveCpuLimit", kUnsupported, "head_dim_v",
     [](auto& p, auto& b) {
       p.v = b.input(kBF16, {kB, kSk, kHkv, 513});
       p.out = b.output(kBF16, {kB, kSq, kHq, 513});
     }},
    // strides and pointers
    {"QLastDimNotContiguous", kInvalid, "q:", [](auto& p, auto&) { p.q.stride[3] = 2; }},
    {"OutLastDimNotContiguous", kInvalid, "out:", [](auto& p, auto&) { p.out.stride[3] = 2; }},
    {"QMisaligned", kInvalid, "q:", [](auto& p, auto&) { p.q = with_offset_bytes(p.q, 1); }},
    // Strides that stay under 2^63 elements but not bytes, and ones that reach below address 0.
    {"QStridePast2To63Bytes", kInvalid, "q:", [](auto& p, auto&) { p.q.stride[0] = INT64_MAX / 2; }},
    {"KNegativeStrideBelowAddressZero", kInvalid, "k:", [](auto& p, auto&) { p.k.stride[0] = -(INT64_MAX / 4); }},
    {"OutMisaligned", kInvalid, "out:", [](auto& p, auto&) { p.out = with_offset_bytes(p.out, 1); }},
    {"LseMisaligned", kInvalid, "lse:", [](auto& p, auto&) { p.lse = with_offset_bytes(p.lse, 2); }},
    {"QNull", kInvalid, "q:", [](auto& p, auto&) { p.q.data = nullptr; }},
    {"VNull", kInvalid, "v:", [](auto& p, auto&) { p.v.data = nullptr; }},
    {"OutNull", kInvalid, "out:", [](auto& p, auto&) { p.out.data = nullptr; }},
    {"OutStridesOverlap", kInvalid, "out:", [](auto& p, auto&) { p.out.stride[2] = 0; }},
    {"OutSeqlenStrideAliasesHeads", kInvalid, "out:", [](auto& p, auto&) { p.out.stride[1] = kDv; }},
    {"LseStridesOverlap", kInvalid, "lse:", [](auto& p, auto&) { p.lse.stride[2] = 0; }},
    // outputs over inputs or each other (the views stay inside the memory they alias)
    {"OutOverQ", kInvalid, "out: shares memory with q",
     [](auto& p, auto&) {
       p.out = p.q;  // in place: out's head_dim_v columns are q's first ones
       p.out.shape[3] = kDv;
     }},
    {"OutInsideK", kInvalid, "out: shares memory with k",
     [](auto& p, auto&) {
       p.out = p.k;  // k's (kSk x kHkv x kD) rows hold out's (kSq x kHq x kDv) ones
       p.out.shape[1] = kSq, p.out.shape[2] = kHq, p.out.shape[3] = kDv, p.out.stride[2] = kDv;
     }},
    {"LseOverOut", kInvalid, "lse: shares memory with out",
     [](auto& p, auto&) {
       p.lse.data = p.out.data;  // 160 bytes of fp32 over out's 640
       p.lse.stride[0] = kHq * kSq, p.lse.stride[1] = kSq, p.lse.stride[2] = 1;
     }},
    // shapes that disagree
    {"HeadsQNotMultipleOfHeadsKv", kInvalid, "heads_q",
     [](auto& p, auto& b) {
       p.k = b.input(kBF16, {kB, kSk, 3, kD});
       p.v = b.input(kBF16, {kB, kSk, 3, kDv});
     }},
    {"MoreKvHeadsThanQHeads", kInvalid, "heads_q",
     [](auto& p, auto& b) {
       p.k = b.input(kBF16, {kB, kSk, 2 * kHq, kD});
       p.v = b.input(kBF16, {kB, kSk, 2 * kHq, kDv});
     }},
    {"KBatchDiffers", kInvalid, "batch", [](auto& p, auto&) { p.k.shape[0] = 1; }},
    {"VSeqlenDiffersFromK", kInvalid, "v:", [](auto& p, auto&) { p.v.shape[1] = kSk - 1; }},
    {"VHeadsDifferFromK", kInvalid, "v:", [](auto& p, auto&) { p.v.shape[2] = 1; }},
    {"KHeadDimDiffersFromQ", kInvalid, "k:", [](auto& p, auto&) { p.k.shape[3] = kD / 2; }},
    {"QRankNot4", kInvalid, "q:", [](auto& p, auto&) { p.q.ndim = 3; }},
    {"QNegativeSeqlen", kInvalid, "q:", [](auto& p, auto&) { p.q.shape[1] = -kSq; }},
    {"KNegativeHeadDim", kInvalid, "k:", [](auto& p, auto&) { p.k.shape[3] = -kD; }},
    {"QElementCountOverflowsInt64", kInvalid, "q:",
     [](auto& p, auto&) {
       p.q = p.k = overflowing_null_view(kBF16);
       p.v = p.out = overflowing_null_view(kBF16);
       p.lse.data = nullptr;
     }},
    // outputs of the wrong shape
    {"OutBatchDiffers", kInvalid, "out:", [](auto& p, auto&) { p.out.shape[0] = 1; }},
    {"OutSeqlenDiffers", kInvalid, "out:", [](auto& p, auto&) { p.out.shape[1] = kSq - 1; }},
    {"OutHeadsDiffer", kInvalid, "out:", [](auto& p, auto&) { p.out.shape[2] = kHkv; }},
    {"OutHeadDimIsNotHeadDimV", kInvalid, "out:",
     [](auto& p, auto& b) { p.out = b.output(kBF16, {kB, kSq, kHq, kD}); }},
    {"OutRankNot4", kInvalid, "out:", [](auto& p, auto&) { p.out.ndim = 3; }},
    {"LseNotFloat32", kInvalid, "lse:", [](auto& p, auto& b) { p.lse = b.output(kBF16, {kB, kHq, kSq}); }},
    {"LseSeqlenAndHeadsSwapped", kInvalid, "lse:", [](auto& p, auto& b) { p.lse = b.output(kF32, {kB, kSq, kHq}); }},
    {"LseRankNot3", kInvalid, "lse:", [](auto& p, auto& b) { p.lse = b.output(kF32, {kB, kHq, kSq, 1}); }},
    // options
    {"SoftcapNegative", kInvalid, "softcap", [](auto& p, auto&) { p.options.softcap = -1.0f; }},
    {"SoftcapNaN", kInvalid, "softcap", [](auto& p, auto&) { p.options.softcap = std::nanf(""); }},
    {"SoftcapInfinite", kInvalid, "softcap", [](auto& p, auto&) { p.options.softcap = kInf; }},
    {"ScaleInfinite", kInvalid, "softmax_scale", [](auto& p, auto&) { p.options.softmax_scale = kInf; }},
    {"ScaleMinusInfinity", kInvalid, "softmax_scale", [](auto& p, auto&) { p.options.softmax_scale = -kInf; }},
    {"NumThreadsNegative", kInvalid, "num_threads", [](auto& p, auto&) { p.num_threads = -1; }},
    // devices and backends
    {"CudaSm80ForCpuTensors", kInvalid, "backend", [](auto& p, auto&) { p.backend = Backend::kCudaSm80; }},
    {"CudaSm90ForCpuTensors", kInvalid, "backend", [](auto& p, auto&) { p.backend = Backend::kCudaSm90; }},
    {"UnknownBackendCode", kInvalid, "backend", [](auto& p, auto&) { p.backend = static_cast<Backend>(17); }},
    {"CpuBackendForCudaTensors", kInvalid, "backend",
     [](auto& p, auto&) {
       for (Tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.lse}) *t = on_cuda(*t);
     }},
    {"KOnAnotherDevice", kInvalid, "k:", [](auto& p, auto&) { p.k = on_cuda(p.k); }},
    {"OutOnAnotherDevice", kInvalid, "out:", [](auto& p, auto&) { p.out = on_cuda(p.out); }},
    {"LseOnAnotherDevice", kInvalid, "lse:", [](auto& p, auto&) { p.lse = on_cuda(p.lse); }},
};

const BadBackward kBadBackward[] = {
    {"KDtypeDiffersFromQ", kInvalid, "k:", [](auto& p, auto&) { p.k.dtype = kF16; }},
    {"DoutDtypeDiffersFromQ", kInvalid, "dout:", [](auto& p, auto&) { p.dout.dtype = kF16; }},
    {"HeadDimAboveCpuLimit", kUnsupported, "head_dim",
     [](auto& p, auto& b) {
       p.q = b.input(kBF16, {kB, kSq, kHq, 640});
       p.k = b.input(kBF16, {kB, kSk, kHkv, 640});
       p.dq = b.output(kBF16, {kB, kSq, kHq, 640});
       p.dk = b.output(kBF16, {kB, kSk, kHkv, 640});
     }},
    {"OutShapeWrong", kInvalid, "out:", [](auto& p, auto&) { p.out.shape[3] = kD; }},
    {"DoutSeqlenWrong", kInvalid, "dout:", [](auto& p, auto&) { p.dout.shape[1] = kSq + 1; }},
    {"LseMissing", kInvalid, "lse:", [](auto& p, auto&) { p.lse.data = nullptr; }},
    {"LseNotFloat32", kInvalid, "lse:", [](auto& p, auto& b) { p.lse = b.input(kBF16, {kB, kHq, kSq}); }},
    {"DqShapeIsOuts", kInvalid, "dq:", [](auto& p, auto& b) { p.dq = b.output(kBF16, {kB, kSq, kHq, kDv}); }},
    {"DkHasQHeads", kInvalid, "dk:", [](auto& p, auto& b) { p.dk = b.output(kBF16, {kB, kSk, kHq, kD}); }},
    {"DvHeadDimIsD", kInvalid, "dv:", [](auto& p, auto& b) { p.dv = b.output(kBF16, {kB, kSk, kHkv, kD}); }},
    {"DvDtypeDiffers", kInvalid, "dv:", [](auto& p, auto& b) { p.dv = b.output(kF32, {kB, kSk, kHkv, kDv}); }},
    {"DqStridesOverlap", kInvalid, "dq:", [](auto& p, auto&) { p.dq.stride[1] = 0; }},
    {"DqOverQ", kInvalid, "dq: shares memory with q", [](auto& p, auto&) { p.dq = p.q; }},
    {"DkOverLse", kInvalid, "dk: shares memory with lse",
     [](auto& p, auto&) { p.lse.data = p.dk.data; }},  // lse's 160 bytes at the start of dk's 896
    {"DvOverDk", kInvalid, "dv: shares memory with dk",
     [](auto& p, auto& b) {
       // one buffer of kD + kDv columns: dk takes columns [0, kD), dv [kD - kDv, kD), inside dk's
       p.dk = b.output(kBF16, {kB, kSk, kHkv, kD + kDv});
       p.dk.shape[3] = kD;
       p.dv = p.dk;
       p.dv = with_offset_bytes(p.dv, 2 * (kD - kDv));
       p.dv.shape[3] = kDv;
     }},
    {"DvInsideTheWorkspace", kInvalid, "dv: shares memory with the workspace",
     [](auto& p, auto&) {
       p.workspace = static_cast<char*>(p.dv.data) + 6;
       p.workspace_size = 2;
     }},
    {"DkLastDimNotContiguous", kInvalid, "dk:", [](auto& p, auto&) { p.dk.stride[3] = 2; }},
    {"DkMisaligned", kInvalid, "dk:", [](auto& p, auto&) { p.dk = with_offset_bytes(p.dk, 1); }},
    {"DvNull", kInvalid, "dv:", [](auto& p, auto&) { p.dv.data = nullptr; }},
    {"DqOnAnotherDevice", kInvalid, "dq:", [](auto& p, auto&) { p.dq = on_cuda(p.dq); }},
    {"SoftcapNegative", kInvalid, "softcap", [](auto& p, auto&) { p.options.softcap = -2.0f; }},
    {"ScaleInfinite", kInvalid, "softmax_scale", [](auto& p, auto&) { p.options.softmax_scale = kInf; }},
    {"NumThreadsNegative", kInvalid, "num_threads", [](auto& p, auto&) { p.num_threads = -3; }},
    {"Flash1HasNoBackward", kUnsupported, "cpu-flash1", [](auto& p, auto&) { p.backend = Backend::kCpuFlash1; }},
    {"CudaSm90ForCpuTensors", kInvalid, "backend", [](auto& p, auto&) { p.backend = Backend::kCudaSm90; }},
};

class BadForwardCall : public ::testing::TestWithParam<BadForward> {};
TEST_P(BadForwardCall, IsRefusedAndWritesNothing) { expect_forward_refused(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Api, BadForwardCall, ::testing::ValuesIn(kBadForward),
                         [](const auto& info) { return std::string(info.param.name); });

class BadBackwardCall : public ::testing::TestWithParam<BadBackward> {};
TEST_P(BadBackwardCall, IsRefusedAndWritesNothing) { expect_backward_refused(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Api, BadBackwardCall, ::testing::ValuesIn(kBadBackward),
                         [](const auto& info) { return std::string(info.param.name); });

// The harness itself: without a mutation both calls run, so every refusal above comes from its one change.
TEST(Validation, TheUnmodifiedCallsSucceed) {
  const verify::Problem problem = valid_problem();
  const verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/true);
  Status s = forward(c.forward_params(Backend::kCpuFlash2));
  ASSERT_TRUE(s.ok()) << s.message;
  s = backward(c.backward_params(Backend::kCpuFlash2));
  EXPECT_TRUE(s.ok()) << s.message;
}

// Outputs side by side in one buffer, and inputs that alias each other, are not overlaps: dk and dv packed as the
// two column ranges of one (batch, seqlen_k, heads_kv, head_dim + head_dim_v) buffer get the gradients of
// separate buffers, bit for bit.
TEST(Validation, PackedGradientsInOneBufferAreNotAnOverlap) {
  const verify::Problem problem = valid_problem();
  const verify::Case c = verify::Case::make(problem, seed_for(problem), /*with_backward=*/true);
  ASSERT_TRUE(forward(c.forward_params(Backend::kCpuFlash2)).ok());
  BackwardParams params = c.backward_params(Backend::kCpuFlash2);
  Status s = backward(params);
  ASSERT_TRUE(s.ok()) << s.message;
  verify::HostTensor packed(DType::kBFloat16, {kB, kSk, kHkv, kD + kDv});
  const verify::HostTensor dk = verify::HostTensor::view_of(packed, 0, {kB, kSk, kHkv, kD},
                                                            {kSk * kHkv * (kD + kDv), kHkv * (kD + kDv), kD + kDv, 1});
  const verify::HostTensor dv = verify::HostTensor::view_of(packed, kD, {kB, kSk, kHkv, kDv},
                                                            {kSk * kHkv * (kD + kDv), kHkv * (kD + kDv), kD + kDv, 1});
  params.dk = dk.view();
  params.dv = dv.view();
  s = backward(params);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(dk.to_doubles(), c.dk.to_doubles());
  EXPECT_EQ(dv.to_doubles(), c.dv.to_doubles());
}

// Without CUDA compiled in, tensors that claim to be on a GPU are refused as unsupported, naming the build.
TEST(Validation, CudaTensorsInCpuOnlyBuild) {
  if (cuda_backend_compiled()) GTEST_SKIP() << "this build has the CUDA backends";
  expect_forward_refused({"CudaTensors", kUnsupported, "built without CUDA", [](auto& p, auto&) {
                            for (Tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.lse}) *t = on_cuda(*t);
                            p.backend = Backend::kAuto;
                          }});
  expect_backward_refused({"CudaTensors", kUnsupported, "built without CUDA", [](auto& p, auto&) {
                             for (Tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.dout, &p.dq, &p.dk, &p.dv})
                               *t = on_cuda(*t);
                             p.backend = Backend::kAuto;
                           }});
}

}  // namespace
}  // namespace flashtile::test
