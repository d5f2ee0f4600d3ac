// 64-bit offsets (SPEC.md "Layout", TESTING.md "a tensor over 2^31 elements"). Every tensor of the call lives in
// one sparse anonymous mapping of about 8.6 GB of fp32, and its batch stride is 2^31 + 2^20 elements, so batch
// entry 1 of each tensor starts past element 2^31 (byte 2^33): an index or offset computed in 32 bits points
// elsewhere. The mapping is MAP_NORESERVE, so only the pages the slices touch are ever allocated.
//
// The results must equal, bit for bit, those of the same problem in compact memory: the backends turn every
// tensor into dense fp32 tiles, so where a tensor lies cannot change the arithmetic.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/test_support.hpp"

namespace flashtile::test {
namespace {

constexpr int64_t kFar = (int64_t{1} << 31) + (int64_t{1} << 20);  // the batch stride, in elements
constexpr int64_t kSlot = int64_t{1} << 16;  // elements reserved per tensor slice, guards included
constexpr int64_t kGuard = 16;               // NaN elements before and after each output slice
constexpr int kTensors = 9;                  // q, k, v, out, lse, then for the backward dout, dq, dk, dv
constexpr int kForwardTensors = 5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Private anonymous memory that reserves no swap: pages are allocated when first touched.
class SparseMemory {
 public:
  explicit SparseMemory(size_t bytes) : bytes_(bytes) {
    data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ~SparseMemory() {
    if (ok()) munmap(data_, bytes_);
  }
  SparseMemory(const SparseMemory&) = delete;
  SparseMemory& operator=(const SparseMemory&) = delete;
  bool ok() const { return data_ != MAP_FAILED; }
  float* floats() const { return static_cast<float*>(data_); }

 private:
  size_t bytes_;
  void* data_;
};

// A tensor of `like`'s logical shape placed in the sparse memory: slot `slot` of every batch entry, dense
// inside an entry, entries kFar elements apart.
Tensor far_view(const SparseMemory& memory, int slot, const verify::HostTensor& like) {
  Tensor t = like.view();
  t.data = memory.floats() + slot * kSlot + kGuard;
  t.dtype = DType::kFloat32;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 1; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  t.stride[0] = kFar;
  return t;
}

// Calls fn(far element, compact index) for every logical element of `compact`, 3 or 4 dims.
template <typename Fn>
void for_each_element(const Tensor& far, const verify::HostTensor& compact, Fn&& fn) {
  const std::vector<int64_t>& s = compact.shape();
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t n = 0; n < compact.numel(); ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < s.size(); ++d) offset += idx[d] * far.stride[d];
    fn(static_cast<float*>(far.data)[offset], idx);
    for (int d = static_cast<int>(s.size()) - 1; d >= 0 && ++idx[d] == s[d]; --d) idx[d] = 0;
  }
}

// The kGuard elements before and after each batch slice of an output, set to (or still) NaN.
void set_guards(const Tensor& t, int64_t slice) {
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t g = 1; g <= kGuard; ++g) {
      float* base = static_cast<float*>(t.data) + b * t.stride[0];
      base[-g] = base[slice - 1 + g] = kNaN;
    }
}

bool guards_intact(const Tensor& t, int64_t slice) {
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t g = 1; g <= kGuard; ++g) {
      const float* base = static_cast<const float*>(t.data) + b * t.stride[0];
      if (!std::isnan(base[-g]) || !std::isnan(base[slice - 1 + g])) return false;
    }
  return true;
}

class LargeOffsets : public ::testing::TestWithParam<Backend> {};

TEST_P(LargeOffsets, MatchCompactMemoryBitForBit) {
  const Backend backend = GetParam();
  const bool with_backward = backend != Backend::kCpuFlash1;
  const verify::Problem problem = Spec(70, 130).batch(2).heads(4, 2).dims(32, 16).dtype(DType::kFloat32).causal();
  const uint64_t seed = seed_for(problem);
  const std::string what = replay(problem, seed, backend);

  SparseMemory memory(static_cast<size_t>(kFar + kTensors * kSlot) * sizeof(float));
  if (!memory.ok()) GTEST_SKIP() << "cannot map " << (kFar + kTensors * kSlot) * 4 << " bytes of sparse memory";

  const verify::Case compact = verify::Case::make(problem, seed, with_backward);
  const verify::HostTensor* tensors[kTensors] = {&compact.q,    &compact.k,  &compact.v,  &compact.out, &compact.lse,
                                                 &compact.dout, &compact.dq, &compact.dk, &compact.dv};
  const int used = with_backward ? kTensors : kForwardTensors;
  Tensor far[kTensors];
  for (int i = 0; i < used; ++i) {
    far[i] = far_view(memory, i, *tensors[i]);
    const int64_t slice = tensors[i]->numel() / problem.batch;
    ASSERT_LE(slice + 2 * kGuard, kSlot);
    set_guards(far[i], slice);
    for_each_element(far[i], *tensors[i], [&](float& x, const std::vector<int64_t>& idx) {
      x = tensors[i]->get(idx);  // inputs copied, outputs still NaN
    });
  }
  ASSERT_GT(static_cast<const float*>(far[1].data) + far[1].stride[0] - memory.floats(), int64_t{1} << 31)
      << "batch entry 1 must start past element 2^31";

  ForwardParams f = compact.forward_params(backend);
  ASSERT_TRUE(forward(f).ok()) << what;
  f.q = far[0], f.k = far[1], f.v = far[2], f.out = far[3], f.lse = far[4];
  Status s = forward(f);
  ASSERT_TRUE(s.ok()) << what << ": " << s.message;
  if (with_backward) {
    BackwardParams b = compact.backward_params(backend);
    ASSERT_TRUE(backward(b).ok()) << what;
    b.q = far[0], b.k = far[1], b.v = far[2], b.out = far[3], b.lse = far[4];
    b.dout = far[5], b.dq = far[6], b.dk = far[7], b.dv = far[8];
    s = backward(b);
    ASSERT_TRUE(s.ok()) << what << ": " << s.message;
  }

  const char* names[kTensors] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};
  for (int i : {3, 4, 6, 7, 8}) {  // the outputs
    if (i >= used) break;
    const verify::HostTensor& want = *tensors[i];
    int64_t differ = 0;
    for_each_element(far[i], want, [&](float& x, const std::vector<int64_t>& idx) {
      const float w = want.get(idx);
      differ += std::memcmp(&x, &w, sizeof(float)) != 0 || std::isnan(x);
    });
    EXPECT_EQ(differ, 0) << names[i] << ": elements that differ from the compact run (or were not written), " << what;
    EXPECT_TRUE(guards_intact(far[i], want.numel() / problem.batch)) << names[i] << ": guard overwritten, " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, LargeOffsets,
                         ::testing::Values(Backend::kCpuFlash2, Backend::kCpuFlash1, Backend::kCpuReference),
                         [](const auto& info) { return backend_tag(info.param); });

}  // namespace
}  // namespace flashtile::test
