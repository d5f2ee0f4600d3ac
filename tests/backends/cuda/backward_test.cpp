// The CUDA backward against the float64 oracle with the TESTING.md rule (3x the same-precision baseline for dQ,
// dK, dV), in the default mode (dQ by fp32 atomics or TMA adds) and the deterministic one: CudaBackward runs the
// sm80 kernels by name (on a Hopper GPU auto would give most calls to the sm90 ones), CudaBackwardSm90 the sm90
// kernels by name and auto's choice. Without a usable GPU, or without the sm90 kernels, the tests report
// themselves skipped, with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

class CudaBackward : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!verify::cuda_available(&why)) GTEST_SKIP() << "needs a CUDA GPU: " << why;
  }
};

Problem make_problem(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, DType dtype) {
  Problem p;
  p.batch = batch, p.seqlen_q = sq, p.seqlen_k = sk, p.heads_q = hq, p.heads_kv = hkv;
  p.head_dim = p.head_dim_v = d;
  p.dtype = dtype;
  return p;
}

void expect_pass(const Problem& p, uint64_t seed, Backend backend = Backend::kCudaSm80) {
  const verify::CheckResult r = verify::check(p, seed, backend, /*with_backward=*/true, Device::kCUDA);
  EXPECT_TRUE(r.pass()) << p.describe() << " seed " << seed << ": " << r.summary();
}

TEST_F(CudaBackward, HeadDimsAndSeqlens) {
  uint64_t seed = 11000;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t d : {8, 40, 64, 96, 128, 136, 192, 256})  // 8..136 pad up to 64, 128 or 192
      for (int64_t s : {1, 17, 64, 129, 255}) expect_pass(make_problem(2, s, s, 2, 2, d, dt), seed++);
}

// The masks and softcaps of the MasksGqaSoftcapLayouts tests (sm80 and sm90): causal, a window on either side or
// both, a softcap alone and with the causal mask.
struct MaskCase {
  bool causal;
  int64_t left, right;
  float softcap;
  void apply(Problem& p) const {
    p.options.causal = causal;
    p.options.window_left = left;
    p.options.window_right = right;
    p.options.softcap = softcap;
  }
};
constexpr MaskCase kMaskCases[] = {{true, -1, -1, 0}, {false, 32, -1, 0}, {false, -1, 7, 0},
                                   {false, 20, 5, 0}, {false, -1, -1, 30}, {true, -1, -1, 5}};

TEST_F(CudaBackward, MasksGqaSoftcapLayouts) {
  uint64_t seed = 12000;
  for (const MaskCase& m : kMaskCases)
    for (Layout layout : {Layout::kContiguous, Layout::kHeadsFirst, Layout::kPadded}) {
      Problem p = make_problem(2, 97, 130, 6, seed % 2 ? 2 : 3, 64, seed % 2 ? DType::kBFloat16 : DType::kFloat16);
      m.apply(p);
      p.layout = layout;
      p.inputs = seed % 3 == 0 ? Inputs::kPeaked : Inputs::kNormal;
      expect_pass(p, seed++);
    }
}

// Rows with no visible key (causal, Sq > Sk) must get gradients of exactly 0, keys no row sees too. D = 256 runs
// the dK/dV kernel's one-barrier step loop (kOneBarrier), the others the two-barrier one, each over several
// steps of a GQA group; the compute-sanitizer round (scripts/gpu_round.sh sanitize) runs this test.
TEST_F(CudaBackward, RowsAndKeysNobodySees) {
  Problem p = make_problem(1, 300, 40, 2, 1, 64, DType::kBFloat16);
  p.options.causal = true;
  expect_pass(p, 13000);
  p = make_problem(1, 40, 300, 2, 2, 128, DType::kFloat16);
  p.options.window_left = 3;
  p.options.window_right = 0;  // keys before the window of the first row are seen by nobody
  expect_pass(p, 13001);
  p = make_problem(1, 300, 130, 2, 1, 256, DType::kBFloat16);
  p.options.causal = true;
  expect_pass(p, 13002);
}

// An odd number of query rows (batch x heads x seqlen_q) puts the dQ accumulator right after an odd count of D
// floats unless the workspace pads it: its 8-byte reductions must stay aligned. Empty sequences: no query row
// (dK = dV = 0) and no key (dQ = 0).
TEST_F(CudaBackward, OddRowCountsAndEmptySequences) {
  uint64_t seed = 13500;
  for (bool deterministic : {false, true})
    for (int64_t s : {1, 17, 255}) {
      Problem p = make_problem(1, s, s, 1, 1, 64, DType::kBFloat16);
      p.deterministic = deterministic;
      expect_pass(p, seed++);
    }
  expect_pass(make_problem(2, 0, 33, 2, 2, 64, DType::kBFloat16), seed++);
  expect_pass(make_problem(2, 33, 0, 2, 2, 64, DType::kFloat16), seed++);
}

// Deterministic mode (no atomics: S and dP recomputed per query block) over the same kinds of problems.
TEST_F(CudaBackward, DeterministicModeMatchesOracle) {
  uint64_t seed = 16000;
  for (int64_t d : {40, 128}) {
    Problem p = make_problem(2, 129, 97, 4, 2, d, seed % 2 ? DType::kBFloat16 : DType::kFloat16);
    p.deterministic = true;
    p.options.causal = d == 40;
    p.options.softcap = d == 128 ? 20.0f : 0.0f;
    p.layout = d == 128 ? Layout::kPadded : Layout::kContiguous;
    expect_pass(p, seed++);
  }
  Problem p = make_problem(1, 300, 40, 2, 1, 64, DType::kBFloat16);  // rows with no visible key
  p.deterministic = true;
  p.options.causal = true;
  expect_pass(p, seed++);
}

// Deterministic mode's gradients are bitwise equal across reruns: no kernel adds into another's output.
TEST_F(CudaBackward, BitwiseDeterministicOver50Runs) {
  Problem p = make_problem(64, 200, 200, 4, 2, 64, DType::kBFloat16);  // batch >= 60: many CTAs in flight
  p.deterministic = true;
  p.options.causal = true;
  verify::Case c = verify::Case::make(p, 14000, true);  // inputs made once, outputs poisoned before each run
  ASSERT_TRUE(verify::run_forward_backward(c, Backend::kCudaSm80, Device::kCUDA).ok());
  const std::vector<double> dq = c.dq.to_doubles(), dk = c.dk.to_doubles(), dv = c.dv.to_doubles();
  for (int run = 1; run < 50; ++run) {
    for (verify::HostTensor* out : {&c.out, &c.lse, &c.dq, &c.dk, &c.dv}) out->poison();
    ASSERT_TRUE(verify::run_forward_backward(c, Backend::kCudaSm80, Device::kCUDA).ok());
    ASSERT_EQ(c.dq.to_doubles(), dq) << "run " << run;
    ASSERT_EQ(c.dk.to_doubles(), dk) << "run " << run;
    ASSERT_EQ(c.dv.to_doubles(), dv) << "run " << run;
  }
}

// backward_workspace_size() is what the call needs on this backend: a caller workspace of exactly that size works
// in both modes, one float less or an address off 16 bytes is refused before anything runs, and the results equal
// a call that allocates its own (dQ up to the order of its adds, outside the deterministic mode). The size is D and
// the LSE, 70 rows padded to 128 a head (room for the sm90 kernels' layout whichever family runs), the sm90 main
// kernel's tile counter (a 1 KB slot), the fp32 dQ accumulator, its 70 rows padded to 80 a head (the sm80 fragment
// order, dq_accum.hpp), and in the deterministic mode the sm90 kernels' turn counts, one per 64 of the 128 rows.
void expect_caller_workspace_works(Backend backend, int64_t head_dim, uint64_t seed) {
  for (bool deterministic : {false, true}) {
    Problem p = make_problem(2, 70, 90, 4, 2, head_dim, DType::kBFloat16);
    p.deterministic = deterministic;
    verify::Case c = verify::Case::make(p, seed, true);
    verify::DeviceMirror mirror;
    ForwardParams f = c.forward_params(Backend::kAuto);
    f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
    f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
    ASSERT_TRUE(forward(f).ok());
    BackwardParams b = c.backward_params(backend);
    b.q = f.q, b.k = f.k, b.v = f.v, b.out = f.out, b.lse = f.lse, b.dout = mirror.view(c.dout);
    b.dq = mirror.view(c.dq), b.dk = mirror.view(c.dk), b.dv = mirror.view(c.dv);

    size_t bytes = 0;
    ASSERT_TRUE(backward_workspace_size(b, &bytes).ok());
    const size_t rows = 2 * 4 * 80, stats = 2 * 2 * 4 * 128 + 256, turns = 2 * 4 * 2;
    EXPECT_EQ(bytes, (stats + rows * head_dim + (deterministic ? turns : 0)) * sizeof(float))
        << "deterministic " << deterministic;
    ASSERT_TRUE(backward(b).ok());  // the library allocates
    std::string error;
    ASSERT_TRUE(mirror.copy_back(&error)) << error;
    const std::vector<double> dq = c.dq.to_doubles(), dk = c.dk.to_doubles(), dv = c.dv.to_doubles();

    verify::HostTensor workspace(DType::kFloat32, {static_cast<int64_t>(bytes / sizeof(float))});
    b.workspace = mirror.view(workspace).data;
    b.workspace_size = bytes - sizeof(float);
    EXPECT_EQ(backward(b).code, StatusCode::kInvalidArgument) << "a workspace one float short";
    b.workspace_size = bytes;
    void* const aligned = b.workspace;
    b.workspace = static_cast<char*>(aligned) + sizeof(float);  // the size is right, the address 4 bytes off
    EXPECT_EQ(backward(b).code, StatusCode::kInvalidArgument) << "a workspace not 16-byte aligned";
    b.workspace = aligned;
    ASSERT_TRUE(backward(b).ok());
    ASSERT_TRUE(mirror.copy_back(&error)) << error;
    if (deterministic) {
      EXPECT_EQ(c.dq.to_doubles(), dq);
      EXPECT_EQ(c.dk.to_doubles(), dk);
      EXPECT_EQ(c.dv.to_doubles(), dv);
    } else {  // dK and dV have no atomics; dQ's adds may land in another order, so only its rounding may move
      EXPECT_EQ(c.dk.to_doubles(), dk);
      EXPECT_EQ(c.dv.to_doubles(), dv);
      const std::vector<double> dq2 = c.dq.to_doubles();
      double worst = 0, scale = 0;
      for (size_t i = 0; i < dq.size(); ++i)
        worst = std::max(worst, std::fabs(dq2[i] - dq[i])), scale = std::max(scale, std::fabs(dq[i]));
      EXPECT_LE(worst, 0.02 * scale) << "dQ with a caller workspace differs beyond rounding";
    }
  }
}

TEST_F(CudaBackward, CallerWorkspaceOfTheReportedSize) {
  expect_caller_workspace_works(Backend::kCudaSm80, 64, 17000);
}

// The dK/dV rows for GPUs with 99 KB of shared memory per block (consumer Ampere and Ada; bwd_config.hpp), run
// on a larger GPU by lowering the limit flashtile plans for: scripts/gpu_round.sh (stage smallsmem) runs this
// test with FLASHTILE_CUDA_SMEM_LIMIT=101376. Without it the test reports itself skipped.
TEST_F(CudaBackward, SmallSharedMemoryRows) {
  const char* limit = std::getenv("FLASHTILE_CUDA_SMEM_LIMIT");
  if (limit == nullptr || std::atol(limit) <= 0 || std::atol(limit) > 101376)
    GTEST_SKIP() << "set FLASHTILE_CUDA_SMEM_LIMIT=101376 (99 KB) to run the rows of 99 KB GPUs";
  uint64_t seed = 17000;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t d : {40, 64, 96, 128})
      for (int64_t s : {17, 129, 255}) expect_pass(make_problem(2, s, s, 2, 2, d, dt), seed++);
  for (bool deterministic : {false, true}) {  // masks, GQA and a padded layout on the small D = 128 row
    Problem p = make_problem(2, 97, 130, 6, 2, 128, DType::kBFloat16);
    p.options.causal = true;
    p.options.softcap = deterministic ? 20.0f : 0.0f;
    p.layout = Layout::kPadded;
    p.deterministic = deterministic;
    expect_pass(p, seed++);
  }
  // Above 128 no row fits in 99 KB: a clear refusal that names the shared memory, not a failed launch.
  const verify::CheckResult r =
      verify::check(make_problem(1, 64, 64, 2, 2, 256, DType::kBFloat16), seed, Backend::kAuto, true, Device::kCUDA);
  EXPECT_NE(r.error.find("shared memory"), std::string::npos) << r.error;
}

// The sm90 backward by name (cuda-sm90: every head dim, both modes); skipped on a build without it or
// a GPU that is not sm_90.
class CudaBackwardSm90 : public CudaBackward {
 protected:
  void SetUp() override {
    CudaBackward::SetUp();
    if (IsSkipped()) return;
    Backend chosen = Backend::kAuto;
    const Status s = select(make_problem(1, 64, 64, 1, 1, 128, DType::kBFloat16), Backend::kCudaSm90, &chosen);
    if (s.code == StatusCode::kUnsupported) GTEST_SKIP() << s.message;
    ASSERT_TRUE(s.ok()) << s.message;
  }

  // select_backward_backend for a problem with device tensors (the selector checks where they live).
  static Status select(const Problem& p, Backend backend, Backend* chosen) {
    verify::Case c = verify::Case::make(p, 1, true);
    verify::DeviceMirror mirror;
    BackwardParams b = c.backward_params(backend);
    b.q = mirror.view(c.q), b.k = mirror.view(c.k), b.v = mirror.view(c.v), b.out = mirror.view(c.out);
    b.lse = mirror.view(c.lse), b.dout = mirror.view(c.dout);
    b.dq = mirror.view(c.dq), b.dk = mirror.view(c.dk), b.dv = mirror.view(c.dv);
    return select_backward_backend(b, chosen);
  }
};

// Auto takes the sm90 backward (every head dim up to 256, either mode) unless FLASHTILE_CUDA_BACKWARD_KERNELS=sm80;
// another value of the variable is refused.
TEST_F(CudaBackwardSm90, AutoTakesItWhereItCovers) {
  ScopedEnv unset("FLASHTILE_CUDA_BACKWARD_KERNELS", nullptr);  // auto's own choice, whatever the caller's shell sets
  Backend chosen = Backend::kAuto;
  ASSERT_TRUE(select(make_problem(1, 64, 64, 2, 2, 128, DType::kBFloat16), Backend::kAuto, &chosen).ok());
  EXPECT_EQ(chosen, Backend::kCudaSm90);
  ASSERT_TRUE(select(make_problem(1, 64, 64, 2, 2, 104, DType::kFloat16), Backend::kAuto, &chosen).ok());
  EXPECT_EQ(chosen, Backend::kCudaSm90);
  ASSERT_TRUE(select(make_problem(1, 64, 64, 2, 2, 136, DType::kBFloat16), Backend::kAuto, &chosen).ok());
  EXPECT_EQ(chosen, Backend::kCudaSm90);  // padded up to 192
  ASSERT_TRUE(select(make_problem(1, 64, 64, 2, 2, 256, DType::kFloat16), Backend::kAuto, &chosen).ok());
  EXPECT_EQ(chosen, Backend::kCudaSm90);
  Problem deterministic = make_problem(1, 64, 64, 2, 2, 64, DType::kBFloat16);
  deterministic.deterministic = true;
  ASSERT_TRUE(select(deterministic, Backend::kAuto, &chosen).ok());
  EXPECT_EQ(chosen, Backend::kCudaSm90);
  {
    ScopedEnv env("FLASHTILE_CUDA_BACKWARD_KERNELS", "sm80");
    ASSERT_TRUE(select(make_problem(1, 64, 64, 2, 2, 128, DType::kBFloat16), Backend::kAuto, &chosen).ok());
    EXPECT_EQ(chosen, Backend::kCudaSm80);
    ASSERT_TRUE(select(make_problem(1, 64, 64, 2, 2, 128, DType::kBFloat16), Backend::kCudaSm90, &chosen).ok());
    EXPECT_EQ(chosen, Backend::kCudaSm90);  // a family asked by name does not read the variable
  }
  ScopedEnv env("FLASHTILE_CUDA_BACKWARD_KERNELS", "hopper");
  const Status refused = select(make_problem(1, 64, 64, 2, 2, 128, DType::kBFloat16), Backend::kAuto, &chosen);
  EXPECT_EQ(refused.code, StatusCode::kInvalidArgument) << refused.message;
  EXPECT_NE(refused.message.find("FLASHTILE_CUDA_BACKWARD_KERNELS"), std::string::npos) << refused.message;
}

TEST_F(CudaBackwardSm90, HeadDimsAndSeqlens) {
  uint64_t seed = 18000;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t d : {40, 64, 96, 104, 128, 160, 192, 256})  // 40, 104, 160 pad up: the descriptors zero-fill
                                                                // and clip the rest
      for (int64_t s : {1, 17, 64, 129, 255, 300})
        expect_pass(make_problem(2, s, s, 2, 2, d, dt), seed++, Backend::kCudaSm90);
  expect_pass(make_problem(3, 700, 500, 4, 4, 128, DType::kBFloat16), seed++, Backend::kCudaSm90);  // Sq != Sk
  // Padded columns on masked tiles, with GQA and a softcap.
  Problem p = make_problem(2, 150, 260, 4, 2, 104, DType::kFloat16);
  p.options.causal = true;
  p.options.softcap = 15.0f;
  expect_pass(p, seed++, Backend::kCudaSm90);
  // Several steps per head from a first row above 0 (causal, Sq > Sk), walking a group of two heads, with steps
  // of 64 rows (D = 128) and of 128 (D = 64, whose last step's second dQ box lies past the sequence's end).
  for (int64_t d : {128, 64, 192, 256}) {
    p = make_problem(1, 400, 200, 4, 2, d, DType::kBFloat16);
    p.options.causal = true;
    expect_pass(p, seed++, Backend::kCudaSm90);
  }
  // A sliding window over many 128-row steps at D = 64: the rows of a step past the window's last one (row_end)
  // go through the masked path with their keys hidden.
  p = make_problem(2, 600, 600, 2, 1, 64, DType::kFloat16);
  p.options.window_left = 100;
  p.options.window_right = 30;
  expect_pass(p, seed++, Backend::kCudaSm90);
}

TEST_F(CudaBackwardSm90, MasksGqaSoftcapLayouts) {
  // dQ split by columns (128; wide, through the Q and dO buffers: 256, 192), by rows (64) and by keys (96)
  const int64_t head_dims[] = {128, 64, 96, 256, 192};
  uint64_t seed = 18500;
  int mask_index = 0;
  for (const MaskCase& m : kMaskCases)
    for (Layout layout : {Layout::kContiguous, Layout::kHeadsFirst, Layout::kPadded}) {
      Problem p = make_problem(2, 97, 230, 6, seed % 2 ? 2 : 3, head_dims[(mask_index + seed) % 5],
                               seed % 2 ? DType::kBFloat16 : DType::kFloat16);
      m.apply(p);
      p.layout = layout;
      p.inputs = seed % 3 == 0 ? Inputs::kPeaked : Inputs::kNormal;
      expect_pass(p, seed++, Backend::kCudaSm90);
      if (layout == Layout::kPadded) ++mask_index;
    }
}

// Rows with no visible key get gradients of exactly 0, keys no row sees too; empty sequences (which the sm80
// kernels run: a TMA descriptor cannot have an extent of 0).
TEST_F(CudaBackwardSm90, RowsAndKeysNobodySeesAndEmptySequences) {
  // Masked cases (window -1: unbounded): D = 128 (dQ split by columns); the wide kernels (dQ staged in the Q and
  // dO buffers); dQ split by rows (D = 64) and by keys (D = 96), each over several steps of a GQA group. This test
  // is the sanitizers' subset, so it walks every barrier pattern of the step loop.
  struct Masked {
    int64_t sq, sk, hkv, d;
    DType dtype;
    bool causal;
    int64_t left, right;
  };
  const Masked cases[] = {
      {300, 40, 1, 128, DType::kBFloat16, true, -1, -1}, {40, 300, 2, 128, DType::kFloat16, false, 3, 0},
      {300, 40, 1, 192, DType::kBFloat16, true, -1, -1}, {40, 300, 2, 256, DType::kFloat16, false, 3, 0},
      {300, 200, 1, 64, DType::kBFloat16, true, -1, -1}, {300, 200, 1, 96, DType::kFloat16, false, 50, -1},
  };
  uint64_t seed = 19000;
  for (const Masked& m : cases) {
    Problem p = make_problem(1, m.sq, m.sk, 2, m.hkv, m.d, m.dtype);
    p.options.causal = m.causal;
    p.options.window_left = m.left;
    p.options.window_right = m.right;
    expect_pass(p, seed++, Backend::kCudaSm90);
  }
  expect_pass(make_problem(2, 0, 33, 2, 2, 128, DType::kBFloat16), seed++, Backend::kCudaSm90);
  expect_pass(make_problem(2, 33, 0, 2, 2, 128, DType::kFloat16), seed++, Backend::kCudaSm90);
}

// The main kernel is persistent (a CTA per SM, taking tiles of kBlockN keys of one batch and K/V head from a
// counter): with 384 tiles a call each of an H200's 132 CTAs takes about three, so the tile slots, K and V's
// barriers, the ring of step buffers and the step barriers run on from one tile to the next, in every dQ split,
// with tiles that no query sees among them (the window case: two of each head's three key blocks), GQA, a softcap
// and the deterministic mode. The other tests' problems have fewer tiles than SMs.
// A problem of many tiles (SeveralTilesPerCta, DeterministicModeOverManyTiles); window -1: unbounded.
struct ManyTiles {
  int64_t batch, sq, sk, hq, hkv, d;
  DType dtype;
  bool causal, deterministic;
  int64_t left, right;
  float softcap;
  Problem problem() const {
    Problem p = make_problem(batch, sq, sk, hq, hkv, d, dtype);
    p.options.causal = causal;
    p.options.window_left = left;
    p.options.window_right = right;
    p.options.softcap = softcap;
    p.deterministic = deterministic;
    return p;
  }
};

TEST_F(CudaBackwardSm90, SeveralTilesPerCta) {
  const ManyTiles cases[] = {
      {8, 100, 100, 48, 48, 128, DType::kBFloat16, false, true, -1, -1, 0},  // 1 key block x 8 x 48, deterministic
      {4, 40, 300, 64, 32, 128, DType::kFloat16, false, false, 3, 0, 0},     // 3 x 4 x 32, 256 without steps
      {8, 150, 150, 48, 24, 64, DType::kBFloat16, true, false, -1, -1, 0},   // 2 x 8 x 24, 128-row steps
      {6, 130, 130, 32, 32, 96, DType::kFloat16, false, false, 50, -1, 0},   // 2 x 6 x 32, dQ split by keys
      {4, 130, 130, 32, 32, 256, DType::kBFloat16, true, false, -1, -1, 0},  // 3 x 4 x 32 (64-key blocks)
      {4, 130, 130, 32, 32, 192, DType::kFloat16, false, false, -1, -1, 20}, // 3 x 4 x 32, softcap
      // 5 x 4 x 32 causal tiles of unequal length: the first 22 heads' in key block order, the last 106 heads'
      // key block major (launch_bwd's tail_heads on 132 SMs), the boundary between them inside a batch
      {4, 400, 520, 32, 32, 64, DType::kFloat16, true, false, -1, -1, 0},
  };
  uint64_t seed = 19400;
  for (const ManyTiles& m : cases) expect_pass(m.problem(), seed++, Backend::kCudaSm90);
}

// D = 256's rotated sweeps (sm90/bwd_kernel.cuh, BwdTile::next_step): a block of keys whose sweep covers all of
// its head's query rows, with >= 16 steps of 64 rows a head, starts at its own row block and wraps round; with GQA
// the wrap also moves to the group's next query head. Full rows with Sq not a multiple of 64, Sk != Sq, and a
// causal mask with keys past the queries, whose first nine blocks (sweeps from row 0) rotate and the rest do not.
TEST_F(CudaBackwardSm90, RotatedSweepsAtHeadDim256) {
  Problem rows_cut = make_problem(1, 1030, 1030, 4, 2, 256, DType::kBFloat16);  // 17 steps, GQA group of 2
  Problem longer_keys = make_problem(1, 1024, 1100, 2, 2, 256, DType::kFloat16);
  Problem causal = make_problem(1, 1030, 1500, 2, 1, 256, DType::kBFloat16);   // key offset 470
  causal.options.causal = true;
  uint64_t seed = 19450;
  for (const Problem& p : {rows_cut, longer_keys, causal}) expect_pass(p, seed++, Backend::kCudaSm90);
}

// `runs` runs of the same problem give bitwise-equal gradients (the deterministic mode). The inputs are made
// once (made again for each run, they were the same values); the outputs are poisoned before each run, so an
// element a run leaves unwritten is NaN and fails the comparison.
void expect_bitwise_reruns(const Problem& p, uint64_t seed, int runs) {
  verify::Case c = verify::Case::make(p, seed, true);
  ASSERT_TRUE(verify::run_forward_backward(c, Backend::kCudaSm90, Device::kCUDA).ok());
  const std::vector<double> dq = c.dq.to_doubles(), dk = c.dk.to_doubles(), dv = c.dv.to_doubles();
  for (int run = 1; run < runs; ++run) {
    for (verify::HostTensor* out : {&c.out, &c.lse, &c.dq, &c.dk, &c.dv}) out->poison();
    ASSERT_TRUE(verify::run_forward_backward(c, Backend::kCudaSm90, Device::kCUDA).ok());
    ASSERT_EQ(c.dq.to_doubles(), dq) << p.describe() << " run " << run;
    ASSERT_EQ(c.dk.to_doubles(), dk) << p.describe() << " run " << run;
    ASSERT_EQ(c.dv.to_doubles(), dv) << p.describe() << " run " << run;
  }
}

// The deterministic mode (dQ added in key block order: the turn counts, sm90/bwd_kernel.cuh) against the oracle,
// and bitwise equal over 50 reruns: causal tiles of two key blocks, and full rows with more tiles than SMs at
// D = 96, where both consumers add into one box in turn.
TEST_F(CudaBackwardSm90, DeterministicMode) {
  uint64_t seed = 19500;
  for (int64_t d : {64, 96, 128, 192, 256})
    for (bool softcap : {false, true}) {
      Problem p = make_problem(2, 129, 97, 4, 2, d, softcap ? DType::kFloat16 : DType::kBFloat16);
      p.deterministic = true;
      p.options.causal = !softcap;
      p.options.softcap = softcap ? 20.0f : 0.0f;
      p.layout = d == 96 ? Layout::kPadded : Layout::kContiguous;
      expect_pass(p, seed++, Backend::kCudaSm90);
    }
  Problem causal = make_problem(64, 200, 200, 4, 2, 128, DType::kBFloat16);  // batch >= 60: many CTAs in flight
  causal.options.causal = true;
  Problem full = make_problem(8, 600, 600, 8, 4, 96, DType::kFloat16);  // 5 key blocks x 8 x 4 = 160 tiles
  for (Problem p : {causal, full}) {
    p.deterministic = true;
    expect_pass(p, seed, Backend::kCudaSm90);
    expect_bitwise_reruns(p, seed++, 50);
  }
}

// The deterministic mode's order under every mask and dQ split, over several tiles a CTA (more tiles than SMs),
// with GQA, each against the oracle and bitwise over 10 reruns: the first block of keys to reach a block of rows
// is not block 0 under a left window. The last problem (no oracle: too long for it) has fewer heads than SMs, so
// a head's blocks run at once and wait for each other in a chain.
TEST_F(CudaBackwardSm90, DeterministicModeOverManyTiles) {
  const ManyTiles cases[] = {
      {4, 700, 700, 16, 16, 128, DType::kBFloat16, false, true, -1, -1, 0},  // 6 key blocks x 4 x 16, full
      {8, 520, 400, 32, 8, 64, DType::kFloat16, true, true, -1, -1, 0},      // causal, Sq > Sk, 128-row steps, GQA
      {6, 600, 600, 16, 8, 96, DType::kBFloat16, false, true, 130, 20, 0},   // window: the first block moves
      {4, 300, 300, 16, 16, 256, DType::kFloat16, true, true, -1, -1, 0},    // 64-key blocks, dK, dV by dim rows
      {4, 260, 260, 16, 8, 192, DType::kBFloat16, false, true, 70, -1, 0},   // left window only
  };
  uint64_t seed = 19550;
  for (const ManyTiles& m : cases) {
    const Problem p = m.problem();
    expect_pass(p, seed, Backend::kCudaSm90);
    expect_bitwise_reruns(p, seed++, 10);
  }
  Problem chains = make_problem(1, 4500, 4500, 4, 2, 256, DType::kBFloat16);  // 71 key blocks x 2 K/V heads
  chains.deterministic = true;
  expect_bitwise_reruns(chains, seed, 10);
}

TEST_F(CudaBackwardSm90, CallerWorkspaceOfTheReportedSize) {
  expect_caller_workspace_works(Backend::kCudaSm90, 128, 19600);
}

// SPEC.md allows any stride: dK written with its keys back to front (a negative row stride) is dK reversed. Up to
// D = 128 the sm90 backward stores dK and dV by TMA, whose descriptors cannot hold such a stride: cuda-sm90 refuses
// the call and names the reason, and auto then takes the sm80 kernels.
TEST_F(CudaBackwardSm90, NegativeGradientStrides) {
  const int64_t Sk = 150;
  const Problem p = make_problem(2, 120, Sk, 4, 2, 128, DType::kBFloat16);
  verify::Case c = verify::Case::make(p, 18900, true);
  verify::DeviceMirror mirror;
  ForwardParams f = c.forward_params(Backend::kAuto);
  f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
  f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
  ASSERT_TRUE(forward(f).ok());
  BackwardParams b = c.backward_params(Backend::kCudaSm90);
  b.q = f.q, b.k = f.k, b.v = f.v, b.out = f.out, b.lse = f.lse, b.dout = mirror.view(c.dout);
  b.dq = mirror.view(c.dq), b.dk = mirror.view(c.dk), b.dv = mirror.view(c.dv);
  ASSERT_TRUE(backward(b).ok());
  std::string error;
  ASSERT_TRUE(mirror.copy_back(&error)) << error;
  const std::vector<double> ahead = c.dk.to_doubles();

  BackwardParams backwards = b;  // dK's keys Sk - 1, Sk - 2, ..., 0
  backwards.dk.data =
      static_cast<char*>(b.dk.data) + (Sk - 1) * b.dk.stride[1] * static_cast<int64_t>(sizeof(uint16_t));
  backwards.dk.stride[1] = -b.dk.stride[1];
  Status s = backward(backwards);
  EXPECT_EQ(s.code, StatusCode::kUnsupported) << s.message;
  EXPECT_NE(s.message.find("TMA"), std::string::npos) << s.message;
  backwards.backend = Backend::kAuto;
  s = backward(backwards);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(mirror.copy_back(&error)) << error;
  const std::vector<double> reversed = c.dk.to_doubles();
  const test::ReversalError e = test::reversal_error(reversed, ahead, p.batch, Sk, p.heads_kv * p.head_dim);
  EXPECT_LE(e.worst, 0.02 * e.scale) << "dK written backwards is not dK reversed";
}

// What auto runs, whatever the GPU: on a Hopper GPU with the sm90 kernels, both sm90 families, and with
// FLASHTILE_CUDA_BACKWARD_KERNELS=sm80 the sm90 forward's out and LSE into the sm80 backward.
TEST_F(CudaBackward, AutoAcrossFamilies) {
  uint64_t seed = 15500;
  for (bool sm80_backward : {false, true}) {
    ScopedEnv env("FLASHTILE_CUDA_BACKWARD_KERNELS", sm80_backward ? "sm80" : "");
    for (int64_t d : {128, 192}) {
      Problem p = make_problem(2, 130, 130, 4, 2, d, DType::kBFloat16);
      p.options.causal = true;
      expect_pass(p, seed++, Backend::kAuto);
    }
  }
}

// Scale 0: P is uniform over the visible keys, and dQ and dK are exactly 0 (dS carries the scale); a negative
// scale with a softcap. Both kernel families (a negative scale without a softcap is refused: forward_test.cpp).
void expect_zero_and_negative_scale_pass(Backend backend, uint64_t seed) {
  for (bool causal : {false, true})
    for (int64_t d : {64, 128, 256}) {
      Problem p = make_problem(2, 97, 130, 4, 2, d, causal ? DType::kFloat16 : DType::kBFloat16);
      p.options.causal = causal;
      p.options.softmax_scale = 0.0f;
      expect_pass(p, seed++, backend);
      p.options.softmax_scale = -0.1f;
      p.options.softcap = 20.0f;
      expect_pass(p, seed++, backend);
    }
}

TEST_F(CudaBackward, ZeroAndNegativeScale) { expect_zero_and_negative_scale_pass(Backend::kCudaSm80, 15100); }

TEST_F(CudaBackwardSm90, ZeroAndNegativeScale) { expect_zero_and_negative_scale_pass(Backend::kCudaSm90, 15200); }

// Gradients at huge logits (support/large_logits.hpp; forward_test.cpp, LargeLogitsRowsComeOutRight). The
// backward rebuilds P = 2^(S * scale_log2 - LSE) with the exact product, against an LSE rounded to fp32 (twice:
// stored in natural units): for a row's largest score P came out 2^r, r up to a few units in the last place of the
// LSE in log2 units (hundreds at |S| ~ 1e10), far above 1: dV and dS inf or NaN. There the LSE is now read raised
// above its rounding (sm80::lse_log2), so P <= 1. No precision is promised at such logits: there the rebuilt P of
// the largest score can come out anywhere in [0, 1] (dV off by that row's dO), and dQ and dK carry the rounding of
// D = rowsum(dO * O) times the scale and |K| or |Q|. What holds: O and the LSE match the oracle, no gradient is inf or NaN, and each
// P <= 1 bounds |dV[j, d]| by the sum over the rows of |dO[i, d]|.
void expect_large_logit_gradients_bounded(const Problem& p, uint64_t seed, Backend backend) {
  for (test::LargeLogitCase& lc : test::large_logit_cases(p, seed, /*with_backward=*/true)) {
    const verify::Case& c = lc.c;
    const std::string what = p.describe() + " seed " + std::to_string(seed) + ", q and k x" + std::to_string(lc.factor);
    const verify::CheckResult r = test::check_large_logit_case(lc.c, backend, /*with_backward=*/true);
    ASSERT_TRUE(r.error.empty()) << what << ": " << r.error;
    for (const verify::Verdict& v : r.verdicts) {
      const bool forward = v.name == "out" || v.name == "lse";
      EXPECT_TRUE(forward ? v.pass : v.nonfinite == 0) << what << ": " << v.summary();
    }
    const int64_t group = p.heads_q / p.heads_kv;
    int64_t above = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t hk = 0; hk < p.heads_kv; ++hk)
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          double bound = 0;
          for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
            for (int64_t i = 0; i < p.seqlen_q; ++i) bound += std::fabs(c.dout.get({b, i, h, d}));
          for (int64_t j = 0; j < p.seqlen_k; ++j) above += std::fabs(c.dv.get({b, j, hk, d})) > 1.01 * bound;
        }
    EXPECT_EQ(above, 0) << what << ": elements of dV above the sum of |dO| over the rows";
  }
}

TEST_F(CudaBackward, LargeLogitsGradientsStayFiniteAndBounded) {
  uint64_t seed = 15700;
  struct Mode {
    int64_t head_dim;
    bool deterministic;  // the deterministic mode's dQ kernel (bwd_dq_kernel) rebuilds P too
  };
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (const Mode m : {Mode{64, false}, Mode{128, false}, Mode{256, false}, Mode{128, true}})
      for (bool causal : {false, true}) {
        Problem p = make_problem(1, 300, 300, 2, 2, m.head_dim, dt);
        p.options.causal = causal;
        p.deterministic = m.deterministic;
        expect_large_logit_gradients_bounded(p, seed++, Backend::kCudaSm80);
      }
}

// D = 256 outside the deterministic mode runs on pairs of CTAs (bwd_pair_kernel.cuh), the others on bwd_kernel.
TEST_F(CudaBackwardSm90, LargeLogitsGradientsStayFiniteAndBounded) {
  uint64_t seed = 15800;
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true}) {
        Problem p = make_problem(1, 300, 300, 2, 2, d, dt);
        p.options.causal = causal;
        expect_large_logit_gradients_bounded(p, seed++, Backend::kCudaSm90);
      }
}

TEST_F(CudaBackward, UnsupportedHeadDimIsRefused) {
  const verify::CheckResult r =
      verify::check(make_problem(1, 64, 64, 2, 2, 264, DType::kBFloat16), 15000, Backend::kAuto, true, Device::kCUDA);
  EXPECT_NE(r.error.find("at most 256"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace flashtile
