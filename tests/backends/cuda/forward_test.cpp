// The CUDA forward kernels (sm80, and sm90 where the build and the device have it) against the float64 oracle
// with the TESTING.md rule. Every test runs once per kernel family; without a usable GPU, or for a family the
// build or the device lacks, the test reports itself skipped, with the reason.
//
// Small shapes: whole tensors against oracle and baseline, buffers poisoned with NaN guard bands.
// Large shapes: sampled rows against the oracle (the whole tensor is still checked for unwritten elements).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/large_logits.hpp"
#include "support/reversal_error.hpp"
#include "support/scoped_env.hpp"
#include "verify/device_mirror.hpp"
#include "verify/verify.hpp"

namespace flashtile {
namespace {

using verify::Inputs;
using verify::Layout;
using verify::Problem;

// Every test of this file needs a GPU and the kernel family it is instantiated for (GetParam(): cuda-sm80 or
// cuda-sm90); without them, SetUp reports the test skipped, with the reason.
class CudaForward : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    std::string why;
    if (!verify::cuda_available(&why)) GTEST_SKIP() << "needs a CUDA GPU: " << why;
    if (GetParam() == Backend::kCudaSm90) {  // a build without the sm90 kernels, or a device that is not sm_90
      verify::Problem probe;
      const verify::CheckResult r = verify::check(probe, 1, Backend::kCudaSm90, false, Device::kCUDA);
      if (r.error.find("cuda-sm90") != std::string::npos || r.error.find("sm90 kernel") != std::string::npos)
        GTEST_SKIP() << r.error;
    }
  }
};

struct Shape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
};

Problem make_problem(const Shape& s, DType dtype) {
  Problem p;
  p.batch = s.batch, p.seqlen_q = s.seqlen_q, p.seqlen_k = s.seqlen_k;
  p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.head_dim = p.head_dim_v = s.head_dim;
  p.dtype = dtype;
  return p;
}

void expect_pass(const Problem& p, uint64_t seed, Backend backend) {
  const verify::CheckResult r = verify::check(p, seed, backend, /*with_backward=*/false, Device::kCUDA);
  EXPECT_TRUE(r.pass()) << p.describe() << " seed " << seed << ": " << r.summary();
}

// Every instantiated head dim, padded ones in between, seqlens off the tile grid, both dtypes.
TEST_P(CudaForward, HeadDimsAndSeqlens) {
  uint64_t seed = 1000;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t d : {8, 40, 64, 72, 96, 128, 160, 192, 200, 256})
      for (int64_t s : {1, 17, 129, 255})
        expect_pass(make_problem({2, s, s, 2, 2, d}, dt), seed++, GetParam());
}

TEST_P(CudaForward, MasksAndSoftcap) {
  struct MaskCase {
    bool causal;
    int64_t left, right;
    float softcap;
  };
  const MaskCase masks[] = {{true, -1, -1, 0},  {false, 32, -1, 0}, {false, -1, 7, 0}, {false, 20, 5, 0},
                            {true, 50, -1, 0},  {false, 5000, 5000, 0}, {false, -1, -1, 30.0f}, {true, -1, -1, 5.0f}};
  const Shape shapes[] = {{1, 128, 128, 4, 4, 64}, {2, 97, 300, 4, 2, 128}, {1, 300, 97, 6, 2, 128},
                          {1, 1025, 1023, 2, 1, 256}, {3, 113, 113, 8, 1, 96}};
  uint64_t seed = 2000;
  for (const Shape& sh : shapes)
    for (const MaskCase& m : masks) {
      Problem p = make_problem(sh, seed % 2 ? DType::kBFloat16 : DType::kFloat16);
      p.options.causal = m.causal;
      p.options.window_left = m.left;
      p.options.window_right = m.right;
      p.options.softcap = m.softcap;
      p.inputs = seed % 3 == 0 ? Inputs::kPeaked : Inputs::kNormal;
      expect_pass(p, seed++, GetParam());
    }
}

TEST_P(CudaForward, LayoutsGqaAndScale) {
  uint64_t seed = 3000;
  for (Layout layout : {Layout::kContiguous, Layout::kHeadsFirst, Layout::kPadded})
    for (int64_t group : {1, 2, 3, 4, 8}) {
      Problem p = make_problem({2, 130, 190, 8 * 3, 8 * 3 / group, 128}, DType::kBFloat16);
      p.layout = layout;
      p.options.softmax_scale = 0.05f;
      expect_pass(p, seed++, GetParam());
    }
}

// SPEC.md takes any finite scale. At 0 every visible key weighs the same (partial and masked tiles included,
// where a masked score is -inf); a negative scale runs with a softcap (the cap applies the scale first); without
// one the CUDA kernels refuse it and name softmax_scale (the same attention is |scale| with q negated).
TEST_P(CudaForward, ZeroAndNegativeScale) {
  uint64_t seed = 3100;
  for (bool causal : {false, true})
    for (int64_t d : {64, 128}) {
      Problem p = make_problem({2, 130, 190, 4, 2, d}, causal ? DType::kFloat16 : DType::kBFloat16);
      p.options.causal = causal;
      p.options.softmax_scale = 0.0f;
      expect_pass(p, seed++, GetParam());
      p.options.softmax_scale = -0.1f;
      p.options.softcap = 20.0f;
      expect_pass(p, seed++, GetParam());
    }
  Problem p = make_problem({1, 64, 64, 2, 2, 64}, DType::kBFloat16);
  p.options.softmax_scale = -0.1f;
  const verify::CheckResult r = verify::check(p, seed, GetParam(), false, Device::kCUDA);
  EXPECT_NE(r.error.find("softmax_scale"), std::string::npos) << r.error;
}

// Rows that see no key (causal with Sq > Sk) get O = 0 and LSE = -inf; the rule checks both.
TEST_P(CudaForward, RowsWithNoVisibleKey) {
  Problem p = make_problem({1, 300, 40, 2, 2, 64}, DType::kBFloat16);
  p.options.causal = true;
  expect_pass(p, 4000, GetParam());
  p = make_problem({1, 64, 64, 2, 2, 64}, DType::kFloat16);
  p.options.window_left = 0;
  p.options.window_right = -1;
  p.options.causal = true;  // window (0, 0): each row sees only its diagonal key
  expect_pass(p, 4001, GetParam());
  // D = 256, where sm80's Hopper row hands K/V tiles over through mbarriers and each warp skips the tiles
  // hidden from its rows: whole warps of a 128-row block see no key, and the ring walks several tiles (also
  // under compute-sanitizer, whose subset includes this test).
  p = make_problem({1, 300, 200, 2, 1, 256}, DType::kBFloat16);
  p.options.causal = true;
  expect_pass(p, 4002, GetParam());
  // The same row persistent (one CTA per SM walking blocks): 192 blocks of one K/V tile for 132 CTAs, two of
  // each head's three with no key at all, so a CTA's ring hands over from a block's only tile to the next block
  // with keys, past empty ones.
  p = make_problem({4, 300, 40, 16, 4, 256}, DType::kBFloat16);
  p.options.causal = true;
  expect_pass(p, 4003, GetParam());
}

// A NaN in one q row makes all of that row's scores NaN: O and LSE of that row come out NaN (as the oracle gives
// them), not as a row with no visible key (0 and -inf), and every other row and head stays finite.
TEST_P(CudaForward, RowOfNaNScoresComesOutNaN) {
  for (const int64_t d : {64, 128, 256}) {
    const verify::Problem problem = make_problem({1, 200, 200, 2, 1, d}, DType::kBFloat16);
    verify::Case c = verify::Case::make(problem, 9300 + d, /*with_backward=*/false);
    constexpr int64_t kRow = 77;
    c.q.set({0, kRow, 0, 3}, std::numeric_limits<float>::quiet_NaN());
    verify::DeviceMirror mirror;
    ForwardParams f = c.forward_params(GetParam());
    f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
    f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
    const Status s = forward(f);
    ASSERT_TRUE(s.ok()) << s.message;
    std::string error;
    ASSERT_TRUE(mirror.copy_back(&error)) << error;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 200; ++i) {
        const bool poisoned = h == 0 && i == kRow;
        EXPECT_EQ(std::isnan(c.lse.get({0, h, i})), poisoned) << "D " << d << " head " << h << " lse row " << i;
        for (int64_t j = 0; j < d; ++j)
          ASSERT_EQ(std::isnan(c.out.get({0, i, h, j})), poisoned) << "D " << d << " head " << h << " out row " << i;
      }
  }
}

// Huge logits (support/large_logits.hpp: |S| up to 4e10-6e10 and 3e12-4e12 in bf16, 1e10 in fp16). Each exponent is
// one FFMA, S * scale_log2 - shift, whose product is exact while the shift, the row max's product, was rounded
// to fp32: the row max's own exponent was that rounding error r, up to half a unit in the last place of the
// max's exponent (below 2^33 and 2^39 in bf16: |r| up to 2^8 and 2^14; 2^31 in fp16: up to 2^6). Before the shift
// was rounded down and the exponents capped (quad_reduce.cuh), 2^r overflowed (O = inf / inf) or flushed every
// exponential of the row to 0 (O = 0 / 0, LSE = -inf), alpha = 2^r rescaled O on every later key tile where the
// max stayed, and in fp16 P = 2^r >= 2^16 was inf: rows that see keys came out NaN, a large share of them. Every
// row must now come out finite and right.
TEST_P(CudaForward, LargeLogitsRowsComeOutRight) {
  uint64_t seed = 9600;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t d : {64, 128})  // sm90: 64 rescales at every tile, 128 lazily
      for (bool causal : {false, true}) {
        Problem p = make_problem({1, 300, 300, 2, 2, d}, dt);
        p.options.causal = causal;
        for (test::LargeLogitCase& lc : test::large_logit_cases(p, seed, /*with_backward=*/false)) {
          const verify::CheckResult r = test::check_large_logit_case(lc.c, GetParam(), /*with_backward=*/false);
          EXPECT_TRUE(r.pass()) << p.describe() << " seed " << seed << ", q and k x" << lc.factor << ": "
                                << r.summary();
        }
        ++seed;
      }
}

TEST_P(CudaForward, EmptyProblems) {
  expect_pass(make_problem({0, 64, 64, 2, 2, 64}, DType::kBFloat16), 5000, GetParam());
  expect_pass(make_problem({2, 0, 64, 2, 2, 64}, DType::kBFloat16), 5001, GetParam());
  expect_pass(make_problem({2, 33, 0, 2, 2, 64}, DType::kBFloat16), 5002, GetParam());  // no keys: O = 0, LSE = -inf
}

// The forward is bitwise deterministic: two runs on the same inputs agree in every bit.
// (D = 256 too: the sm80 Hopper row's warps drift apart on its K/V ring, but each one's arithmetic is fixed.)
TEST_P(CudaForward, BitwiseDeterministic) {
  for (int64_t d : {128, 256}) {
    Problem p = make_problem({4, 1000, 1000, 8, 2, d}, DType::kBFloat16);
    p.options.causal = true;
    verify::Case a = verify::Case::make(p, 6000, false), b = verify::Case::make(p, 6000, false);
    ASSERT_TRUE(verify::run_forward(a, GetParam(), Device::kCUDA).ok());
    ASSERT_TRUE(verify::run_forward(b, GetParam(), Device::kCUDA).ok());
    EXPECT_EQ(a.out.to_doubles(), b.out.to_doubles()) << "D = " << d;
    EXPECT_EQ(a.lse.to_doubles(), b.lse.to_doubles()) << "D = " << d;
  }
}

// Large shapes and grid limits: sampled rows against the oracle, every element written.
void expect_large_pass(const Problem& p, uint64_t seed, Backend backend) {
  verify::Case c = verify::Case::make(p, seed, false);
  const Status s = verify::run_forward(c, backend, Device::kCUDA);
  ASSERT_TRUE(s.ok()) << p.describe() << ": " << s.message;
  EXPECT_EQ(c.out.unwritten(), 0) << p.describe();
  const verify::CheckResult r = verify::check_rows(c, verify::sample_rows(p, 48, seed));
  EXPECT_TRUE(r.pass()) << p.describe() << " seed " << seed << ": " << r.summary();
}

// The sm90 forward's CTAs take their tiles from a counter that each launch leaves zeroed for a later launch: a
// ring of 65536 an instantiation (kTileCounters, tile_counter.hpp), so from launch 65537 on each one reuses the
// counter of a launch before. Past a whole turn of the ring, calls with more tiles than SMs (the counter hands out
// numbers), fewer, and the chunked order under a mask must still write every row right: a counter left unreset
// would start a launch's CTAs past its first tiles.
TEST_P(CudaForward, TileCountersReusedAcrossLaunches) {
  if (GetParam() != Backend::kCudaSm90) GTEST_SKIP() << "the tile counters are the sm90 forward's";
  constexpr int kTileCounters = 1 << 16;
  Problem p = make_problem({1, 64, 64, 300, 300, 64}, DType::kBFloat16);  // 300 tiles of one query block
  p.options.causal = true;
  verify::Case c = verify::Case::make(p, 7500, false);
  {
    verify::DeviceMirror mirror;
    ForwardParams f = c.forward_params(GetParam());
    f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
    f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
    for (int i = 0; i < kTileCounters; ++i) {
      const Status s = forward(f);
      ASSERT_TRUE(s.ok()) << "launch " << i << ": " << s.message;
    }
    std::string error;
    ASSERT_TRUE(mirror.copy_back(&error)) << error;
  }
  expect_pass(p, 7501, GetParam());
  expect_pass(make_problem({2, 1000, 1000, 40, 40, 128}, DType::kFloat16), 7502, GetParam());  // 640 tiles
  p = make_problem({3, 700, 700, 10, 5, 64}, DType::kBFloat16);  // causal, GQA: chunks of heads
  p.options.causal = true;
  expect_pass(p, 7503, GetParam());
  expect_pass(make_problem({1, 300, 300, 4, 4, 256}, DType::kBFloat16), 7504, GetParam());  // 12 tiles
  p = make_problem({2, 900, 1400, 24, 8, 192}, DType::kBFloat16);  // a window: chunks, the one-Q-buffer head dim
  p.options.window_left = 200, p.options.window_right = 50;
  expect_large_pass(p, 7505, GetParam());
}

TEST_P(CudaForward, LargeShapes) {
  Problem p = make_problem({2, 4096, 4096, 16, 16, 128}, DType::kBFloat16);
  p.options.causal = true;
  expect_large_pass(p, 7000, GetParam());
  expect_large_pass(make_problem({1, 8192, 8192, 8, 2, 64}, DType::kFloat16), 7001, GetParam());
  // D = 256 over a hundred K/V tiles (the ring's barriers through many phases), causal and with a window that
  // leaves each 128-row block a band of tiles whose first and last ones some warps skip.
  p = make_problem({2, 6000, 6000, 4, 2, 256}, DType::kBFloat16);
  p.options.causal = true;
  expect_large_pass(p, 7002, GetParam());
  p.options.causal = false;
  p.options.window_left = 700, p.options.window_right = 90;
  expect_large_pass(p, 7003, GetParam());
  // No mask and 1024 keys or more: sm80's long row on Hopper (256 query rows a block), also with seqlens off its
  // tiles and GQA, and just below the threshold (the ordinary row).
  expect_large_pass(make_problem({1, 4096, 4096, 8, 8, 128}, DType::kFloat16), 7004, GetParam());
  expect_pass(make_problem({2, 300, 2500, 4, 2, 128}, DType::kBFloat16), 7005, GetParam());
  expect_pass(make_problem({1, 257, 1023, 2, 2, 120}, DType::kBFloat16), 7006, GetParam());
  // D = 64 with rows that see >= 2048 keys: sm90's long variant (192-row tiles), full and causal with GQA.
  expect_large_pass(make_problem({2, 2100, 2100, 40, 40, 64}, DType::kBFloat16), 7007, GetParam());
  p = make_problem({1, 4500, 4600, 48, 12, 64}, DType::kFloat16);
  p.options.causal = true;
  expect_large_pass(p, 7008, GetParam());
  p = make_problem({1, 4600, 4400, 6, 6, 64}, DType::kBFloat16);  // Sq > Sk: the first 200 rows see no key
  p.options.causal = true;
  expect_large_pass(p, 7009, GetParam());
}

// sm90's long variant at D = 64 (three consumer warpgroups, 192-row tiles: fwd_launch.cuh, use_long_variant),
// on shapes small enough for the sanitizers: the middle row sees >= 2048 keys and there is a 192-row tile per
// SM (132 on an H100/H200); a softcap keeps the ordinary variant. On sm80 these are ordinary shapes.
TEST_P(CudaForward, LongRowsAtHeadDim64) {
  expect_large_pass(make_problem({1, 192, 2048, 132, 132, 64}, DType::kBFloat16), 7300, GetParam());
  Problem p = make_problem({1, 384, 2600, 70, 35, 64}, DType::kFloat16);  // keys past the queries: offset 2216
  p.options.causal = true;
  expect_large_pass(p, 7301, GetParam());
  p.options.softcap = 30.0f;
  expect_large_pass(p, 7302, GetParam());
}

// Lazy rescaling (D >= 128 on sm90): O and the sums are rescaled only when a row's max grows by more than 8 in
// log2 units, which normal inputs rarely do after the first key tile. Peaked inputs (q and k scaled 5x and 3x)
// and a large softmax scale move the max by more than that in later tiles too; many key tiles, both masks.
TEST_P(CudaForward, RunningMaxJumpsAcrossKeyTiles) {
  uint64_t seed = 7400;
  for (int64_t d : {128, 192, 256})
    for (bool causal : {false, true}) {
      Problem p = make_problem({1, 300, 2000, 4, 2, d}, d == 192 ? DType::kFloat16 : DType::kBFloat16);
      p.inputs = Inputs::kPeaked;
      p.options.causal = causal;
      expect_pass(p, seed++, GetParam());
      p.inputs = Inputs::kNormal;
      p.options.softmax_scale = 2.0f;
      expect_pass(p, seed++, GetParam());
    }
}

// sm80's ring rows on Hopper over many blocks: D = 256's is persistent (one CTA per SM walks query blocks, its
// K/V ring running on from block to block), D = 192's and D = 128's long row take a CTA per block. Several rounds
// of the walk: blocks with no key between ones with keys (Sq > Sk, causal), GQA, a window, and more than 64
// query blocks a head under a mask (the walk then goes longest first across heads).
TEST_P(CudaForward, PersistentWalks) {
  Problem p = make_problem({3, 1500, 700, 16, 4, 256}, DType::kBFloat16);
  p.options.causal = true;
  expect_large_pass(p, 7100, GetParam());
  p = make_problem({2, 2000, 2000, 24, 24, 192}, DType::kFloat16);
  p.options.window_left = 300, p.options.window_right = 0;
  expect_large_pass(p, 7101, GetParam());
  expect_large_pass(make_problem({2, 3000, 2100, 20, 5, 128}, DType::kBFloat16), 7102, GetParam());
  p = make_problem({1, 9000, 9000, 2, 1, 256}, DType::kBFloat16);
  p.options.causal = true;
  expect_large_pass(p, 7103, GetParam());
}

// More than 65535 CTAs: (query blocks) x batch x heads = 1 x 70000 x 1.
TEST_P(CudaForward, GridAbove65535Blocks) {
  expect_large_pass(make_problem({70000, 16, 16, 1, 1, 64}, DType::kBFloat16), 8000, GetParam());
}

// SPEC.md allows any stride: q read backwards along the sequence (a negative row stride) gives out's rows in
// reverse under full attention. cuda-sm90's TMA descriptors cannot hold such a stride: it refuses the call and
// names the reason, and auto then takes the sm80 kernel.
TEST_P(CudaForward, NegativeStrides) {
  const int64_t S = 200;
  const Problem p = make_problem({2, S, 150, 2, 2, 64}, DType::kBFloat16);
  verify::Case c = verify::Case::make(p, 9100, false);
  verify::DeviceMirror mirror;
  ForwardParams f = c.forward_params(GetParam());
  f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
  f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
  ASSERT_TRUE(forward(f).ok());
  std::string error;
  ASSERT_TRUE(mirror.copy_back(&error)) << error;
  const std::vector<double> ahead = c.out.to_doubles();

  ForwardParams backwards = f;  // q's rows S - 1, S - 2, ..., 0
  backwards.q.data = static_cast<char*>(f.q.data) + (S - 1) * f.q.stride[1] * static_cast<int64_t>(sizeof(uint16_t));
  backwards.q.stride[1] = -f.q.stride[1];
  Status s = forward(backwards);
  if (GetParam() == Backend::kCudaSm90) {
    EXPECT_EQ(s.code, StatusCode::kUnsupported) << s.message;
    EXPECT_NE(s.message.find("TMA"), std::string::npos) << s.message;
    backwards.backend = Backend::kAuto;
    s = forward(backwards);
  }
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(mirror.copy_back(&error)) << error;
  const std::vector<double> reversed = c.out.to_doubles();
  const test::ReversalError e = test::reversal_error(reversed, ahead, p.batch, S, p.heads_q * p.head_dim);
  EXPECT_LE(e.worst, 0.01 * e.scale) << "out with q read backwards is not out reversed";
}

// FLASHTILE_CUDA_FORWARD chooses auto's kernel family: sm80 on every GPU, sm90 on a Hopper GPU with the sm90
// kernels built (SetUp skips that instance elsewhere). The forward auto then runs is checked against the oracle,
// and any other value is refused with the variable's name.
TEST_P(CudaForward, AutoFollowsFlashtileCudaForward) {
  ScopedEnv env("FLASHTILE_CUDA_FORWARD", GetParam() == Backend::kCudaSm90 ? "sm90" : "sm80");
  const Problem p = make_problem({2, 100, 130, 4, 2, 64}, DType::kBFloat16);
  verify::Case c = verify::Case::make(p, 9200, false);
  verify::DeviceMirror mirror;
  ForwardParams f = c.forward_params(Backend::kAuto);
  f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
  f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
  Backend chosen = Backend::kAuto;
  const Status s = select_forward_backend(f, &chosen);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(chosen, GetParam());
  expect_pass(p, 9200, Backend::kAuto);

  env.set("sm75");
  const Status refused = select_forward_backend(f, &chosen);
  EXPECT_EQ(refused.code, StatusCode::kInvalidArgument) << refused.message;
  EXPECT_NE(refused.message.find("FLASHTILE_CUDA_FORWARD"), std::string::npos) << refused.message;
  f.backend = GetParam();  // an explicit family does not read the variable
  EXPECT_TRUE(select_forward_backend(f, &chosen).ok());
}

TEST_P(CudaForward, BadInputsWriteNothing) {
  // fp32 is a CPU-only dtype: the selector refuses it for CUDA tensors, and the output stays poisoned.
  Problem p = make_problem({1, 64, 64, 2, 2, 64}, DType::kFloat32);
  const verify::CheckResult r = verify::check(p, 9000, GetParam(), false, Device::kCUDA);
  EXPECT_NE(r.error.find("float32"), std::string::npos) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaForward, ::testing::Values(Backend::kCudaSm80, Backend::kCudaSm90),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(info.param == Backend::kCudaSm90 ? "sm90" : "sm80");
                         });

}  // namespace
}  // namespace flashtile
