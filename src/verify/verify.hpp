// Correctness tooling shared by the tests and the `flashtile` command (TESTING.md):
//   - HostTensor: a host buffer poisoned with NaN, with NaN guard bands, viewed through any BSHD layout;
//   - random inputs (standard normal, or "peaked": q x5, k x3);
//   - the float64 oracle over whole tensors, or over sampled rows;
//   - the same-precision baseline (a framework's naive math, rounding scores and P to the input dtype);
//   - the pass rule: max|X - oracle| <= m * max|baseline - oracle| + 2 ulp, mean <= 1.5 * baseline's mean,
//     LSE within 1e-3 (fp16/bf16) or 1e-5 (fp32) of max(1, |LSE|), and no NaN where the oracle is finite.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "flashtile/flashtile.hpp"

namespace flashtile::verify {

// How a logical (B, S, H, D) tensor is laid out in memory.
enum class Layout {
  kContiguous,  // BSHD, row-major
  kHeadsFirst,  // stored BHSD, viewed as BSHD (a transposed view)
  kPadded,      // BSHD with every stride padded by 8 elements (rows not adjacent), plus a storage offset of 8
};

// Owns host memory for one tensor: [guard | payload | guard], all NaN until written.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, Layout layout = Layout::kContiguous);
  // A view into memory owned by another HostTensor (packed qkv): shape and strides given explicitly.
  static HostTensor view_of(HostTensor& owner, int64_t element_offset, std::vector<int64_t> shape,
                            std::vector<int64_t> strides);

  Tensor view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const;
  const std::vector<int64_t>& shape() const { return shape_; }

  float get(std::initializer_list<int64_t> index) const { return load(offset(index.begin(), index.size())); }
  void set(std::initializer_list<int64_t> index, float value) { store(offset(index.begin(), index.size()), value); }
  float get(const std::vector<int64_t>& index) const { return load(offset(index.data(), index.size())); }
  void set(const std::vector<int64_t>& index, float value) { store(offset(index.data(), index.size()), value); }
  // Logical elements in row-major order of the logical shape, as doubles.
  std::vector<double> to_doubles() const;
  void fill_normal(std::mt19937_64& rng, float scale);
  // The whole allocation (guards included) and where the view starts in it, for mirroring to a device.
  std::shared_ptr<std::vector<uint8_t>> storage() const { return storage_; }
  int64_t view_byte_offset() const { return base_ * static_cast<int64_t>(dtype_size(view_.dtype)); }
  void poison();                   // every byte of payload and guards NaN
  bool guards_intact() const;      // guards still all NaN
  int64_t unwritten() const;       // logical elements still NaN (call after poison + kernel)

 private:
  int64_t offset(const int64_t* index, size_t n) const {
    int64_t off = 0;
    for (size_t d = 0; d < n; ++d) off += index[d] * view_.stride[d];
    return off;
  }
  float load(int64_t offset) const;
  void store(int64_t offset, float value);
  std::shared_ptr<std::vector<uint8_t>> storage_;
  int64_t guard_elems_ = 0, base_ = 0, payload_elems_ = 0;
  std::vector<int64_t> shape_;
  Tensor view_;
};

enum class Inputs { kNormal, kPeaked };

struct Problem {
  int64_t batch = 1, seqlen_q = 128, seqlen_k = 128, heads_q = 2, heads_kv = 2, head_dim = 64, head_dim_v = 64;
  DType dtype = DType::kBFloat16;
  AttentionOptions options;
  Layout layout = Layout::kContiguous;
  Inputs inputs = Inputs::kNormal;
  bool deterministic = false;  // BackwardParams::deterministic
  std::string describe() const;  // "B1 Sq128 Sk128 H2/2 D64/64 bfloat16 causal ..." for failure messages
};

// Inputs and outputs of one problem, allocated with the problem's layout and filled from `seed`.
struct Case {
  Problem problem;
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  static Case make(const Problem& problem, uint64_t seed, bool with_backward);
  ForwardParams forward_params(Backend backend) const;
  BackwardParams backward_params(Backend backend) const;  // reads out and lse as the forward left them
};

// Oracle and baseline results as dense doubles, logical row-major order: o (B,Sq,Hq,Dv), lse (B,Hq,Sq),
// dq (B,Sq,Hq,D), dk (B,Sk,Hkv,D), dv (B,Sk,Hkv,Dv).
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};
Reference oracle(const Case& c, bool with_backward);
Reference baseline(const Case& c, bool with_backward);

// Oracle for a sample of query rows only (the `run` command's check on large shapes): for each sampled
// (b, h, row), compares out and lse with the oracle's and returns the verdict of the rule against an
// absolute bound derived from the dtype (no baseline is computed at this size).
struct RowSample {
  int64_t b, h, row;
};

struct Verdict {
  std::string name;
  double max_err = 0, mean_err = 0, max_base = 0, mean_base = 0, bound = 0;
  int64_t nonfinite = 0;  // NaN/Inf where the oracle is finite
  bool pass = false;
  std::string summary() const;
};

// The rule for one tensor. `multiplier` is 2 for O and 3 for gradients. The 2-ulp slack of the max bound is
// taken at `magnitude` (default: max |want|), and the mean bound gets a 2-ulp floor at `mean_magnitude`
// (default: mean |want|). Gradients pass the largest over dQ, dK and dV: a gradient whose exact value is 0
// (every row with one visible key makes dS = 0) is still computed from terms of that size.
Verdict compare(const std::string& name, const std::vector<double>& got, const std::vector<double>& want,
                const std::vector<double>& base, DType dtype, double multiplier, double magnitude = -1.0,
                double mean_magnitude = -1.0);
double max_abs(const std::vector<double>& x);
double mean_abs(const std::vector<double>& x);
Verdict compare_lse(const std::vector<double>& got, const std::vector<double>& want, DType dtype);

// Runs forward (and backward) on backend and checks everything against oracle and baseline, including
// that every output element was written and every guard band is intact.
struct CheckResult {
  std::vector<Verdict> verdicts;
  std::string error;  // a status the call returned, or a poisoned/guard failure
  bool pass() const;
  std::string summary() const;
};
// With device = kCUDA, every buffer (guards and poison included) is mirrored to GPU 0 and copied back after
// the call, so the same checks apply; the result's error says so if no CUDA device is usable.
CheckResult check(const Problem& problem, uint64_t seed, Backend backend, bool with_backward,
                  Device device = Device::kCPU);
// The same for a case the caller made and then edited (inputs rescaled, say); its outputs must still hold the
// poison Case::make left in them. The outputs are read back into c.
CheckResult check(Case& c, Backend backend, bool with_backward, Device device = Device::kCPU);

// A usable CUDA device and a build with the CUDA backend; `why` says what is missing otherwise.
bool cuda_available(std::string* why);

// Sampled-row check for large problems: verifies out/lse of `samples` rows against the oracle, with the
// bound 2 * (baseline error of the same rows) + 2 ulp.
CheckResult check_rows(const Case& c, const std::vector<RowSample>& samples);

// Runs forward on `device` for a case whose outputs are then read back into c (used by the `run` command
// and the large-shape GPU tests, which check sampled rows afterwards).
Status run_forward(Case& c, Backend backend, Device device);
// Forward, then backward from that forward's out and lse, on `device`; outputs and gradients read back into c.
Status run_forward_backward(Case& c, Backend backend, Device device);
// Rows spread over a problem: the first and last rows, and `count` more spread over batch, heads, positions.
std::vector<RowSample> sample_rows(const Problem& p, int count, uint64_t seed);

}  // namespace flashtile::verify
