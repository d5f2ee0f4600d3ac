#include "verify/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>

#include "backends/cpu/reference.hpp"
#include "common/numeric.hpp"
#include "common/problem.hpp"
#include "verify/device_mirror.hpp"

namespace flashtile::verify {

namespace {

constexpr int64_t kGuard = 64;  // NaN elements on each side of every buffer

uint32_t nan_pattern(DType d) { return d == DType::kFloat32 ? 0x7fc00000u : d == DType::kFloat16 ? 0x7e00u : 0x7fc0u; }

std::vector<int64_t> strides_for(const std::vector<int64_t>& shape, Layout layout, int64_t* storage_offset) {
  const size_t n = shape.size();
  std::vector<int64_t> st(n, 1);
  *storage_offset = 0;
  auto dim = [&](size_t i) { return std::max<int64_t>(shape[i], 1); };
  if (layout == Layout::kHeadsFirst && n == 4) {  // memory order B, H, S, D
    st[3] = 1;
    st[1] = dim(3);
    st[2] = dim(1) * dim(3);
    st[0] = dim(2) * dim(1) * dim(3);
    return st;
  }
  // Padding and offset are 8 elements: rows stay 16-byte aligned, as the CUDA kernels require.
  const int64_t pad = layout == Layout::kPadded ? 8 : 0;
  for (int i = static_cast<int>(n) - 2; i >= 0; --i) st[i] = st[i + 1] * dim(i + 1) + pad;
  if (layout == Layout::kPadded) *storage_offset = 8;
  return st;
}

// SplitMix64's output function: decorrelates the seeds of neighbouring chunks (fill_normal).
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Lexicographic walk over a logical shape.
template <typename Fn>
void for_each_index(const std::vector<int64_t>& shape, Fn&& fn) {
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    fn(idx);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

flashtile::Problem to_internal(const Problem& p, bool with_lse) {
  flashtile::Problem q;
  q.batch = p.batch, q.seqlen_q = p.seqlen_q, q.seqlen_k = p.seqlen_k, q.heads_q = p.heads_q;
  q.heads_kv = p.heads_kv, q.head_dim = p.head_dim, q.head_dim_v = p.head_dim_v, q.dtype = p.dtype;
  q.scale =
      std::isnan(p.options.softmax_scale) ? 1.0f / std::sqrt(static_cast<float>(p.head_dim)) : p.options.softmax_scale;
  q.softcap = p.options.softcap;
  q.keys.seqlen_q = p.seqlen_q;
  q.keys.seqlen_k = p.seqlen_k;
  q.keys.offset = p.seqlen_k - p.seqlen_q;
  const int64_t widest = p.seqlen_q + p.seqlen_k;
  auto clamp_bound = [&](int64_t w) { return w < 0 ? int64_t{-1} : std::min(w, widest); };
  q.keys.left = clamp_bound(p.options.window_left);
  q.keys.right = clamp_bound(p.options.window_right);
  if (p.options.causal) q.keys.right = q.keys.right < 0 ? 0 : std::min<int64_t>(q.keys.right, 0);
  q.with_lse = with_lse;
  return q;
}

// ---- the same-precision baseline -------------------------------------------------------------------------

struct BaselineMath {
  const Case& c;
  flashtile::Problem p;
  DType dt;
  float rd(float x) const { return round_to(dt, x); }
  // Row (b, s, h) of a (B, S, H, D) input, element d (the last dimension is dense, as SPEC.md requires).
  struct Row {
    const void* data;
    DType dtype;
    int64_t offset;
    float operator[](int64_t d) const { return load_as_float(data, dtype, offset + d); }
  };
  static Row row(const HostTensor& a, int64_t b, int64_t s, int64_t h) {
    const Tensor t = a.view();
    return {t.data, t.dtype, offset_bshd(t, b, s, h)};
  }
  float dot(const HostTensor& a, int64_t b, int64_t s, int64_t h, const HostTensor& x, int64_t s2, int64_t h2,
            int64_t n) const {
    const Row ar = row(a, b, s, h), xr = row(x, b, s2, h2);
    float acc = 0;
    for (int64_t d = 0; d < n; ++d) acc += ar[d] * xr[d];
    return acc;
  }
  // The (soft-capped) score of row i and key j as the baseline rounds it; th, when given, receives
  // tanh(score / softcap), which the softcap's gradient needs.
  float score(int64_t b, int64_t h, int64_t i, int64_t j, float* th = nullptr) const {
    const float s = rd(p.scale * rd(dot(c.q, b, i, h, c.k, j, h / p.group(), p.head_dim)));
    if (p.softcap <= 0) return s;
    const float t = std::tanh(s / p.softcap);
    if (th) *th = t;
    return rd(p.softcap * t);
  }
  // dL/ds for one score, rounded at each step as a framework's backward would: P (dP - row_dot), times the
  // softcap's derivative, times the softmax scale. row_dot is sum_j P_j dP_j, already rounded.
  float score_grad(float prob, float dp, float row_dot, float th) const {
    float ds = rd(prob * (dp - row_dot));
    if (p.softcap > 0) ds = rd(ds * (1.0f - th * th));
    return rd(ds * p.scale);
  }
  // P row (rounded to dtype) over visible keys [lo, hi], plus the fp32 LSE of the rounded scores.
  void probs(int64_t b, int64_t h, int64_t i, std::vector<float>& prob, std::vector<float>& th, float* lse) const {
    const int64_t lo = p.keys.lo(i), hi = p.keys.hi(i);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j <= hi; ++j) mx = std::max(mx, prob[j] = score(b, h, i, j, &th[j]));
    float sum = 0;
    for (int64_t j = lo; j <= hi; ++j) sum += (prob[j] = std::exp(prob[j] - mx));
    for (int64_t j = lo; j <= hi; ++j) prob[j] = rd(prob[j] / sum);
    *lse = lo > hi ? -std::numeric_limits<float>::infinity() : mx + std::log(sum);
  }
};

}  // namespace

// ---- HostTensor ------------------------------------------------------------------------------------------

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, Layout layout) : shape_(std::move(shape)) {
  int64_t offset = 0;
  std::vector<int64_t> st = strides_for(shape_, layout, &offset);
  int64_t span = 1;
  for (size_t d = 0; d < shape_.size(); ++d) span += std::max<int64_t>(shape_[d] - 1, 0) * st[d];
  if (numel() == 0) span = 0;
  payload_elems_ = offset + span;
  guard_elems_ = kGuard;
  base_ = guard_elems_ + offset;
  storage_ = std::make_shared<std::vector<uint8_t>>((payload_elems_ + 2 * guard_elems_) * dtype_size(dtype));
  view_.dtype = dtype;
  view_.ndim = static_cast<int32_t>(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) view_.shape[d] = shape_[d], view_.stride[d] = st[d];
  view_.data = storage_->data() + base_ * dtype_size(dtype);
  poison();
}

HostTensor HostTensor::view_of(HostTensor& owner, int64_t element_offset, std::vector<int64_t> shape,
                               std::vector<int64_t> strides) {
  HostTensor t;
  t.storage_ = owner.storage_;
  t.guard_elems_ = owner.guard_elems_;
  t.payload_elems_ = owner.payload_elems_;
  t.base_ = owner.base_ + element_offset;
  t.shape_ = std::move(shape);
  t.view_ = owner.view_;
  t.view_.ndim = static_cast<int32_t>(t.shape_.size());
  for (size_t d = 0; d < t.shape_.size(); ++d) t.view_.shape[d] = t.shape_[d], t.view_.stride[d] = strides[d];
  t.view_.data = t.storage_->data() + t.base_ * dtype_size(t.view_.dtype);
  return t;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

float HostTensor::load(int64_t offset) const { return load_as_float(view_.data, view_.dtype, offset); }
void HostTensor::store(int64_t offset, float value) { store_from_float(view_.data, view_.dtype, offset, value); }

std::vector<double> HostTensor::to_doubles() const {
  std::vector<double> out;
  out.reserve(numel());
  for_each_index(shape_, [&](const std::vector<int64_t>& i) { out.push_back(load(offset(i.data(), i.size()))); });
  return out;
}

void HostTensor::fill_normal(std::mt19937_64& rng, float scale) {
  // In chunks of the logical row-major order, each drawn from its own generator (seeded from one draw of rng
  // and the chunk's number), filled in parallel: a grid A case's four inputs are 128 M values, ~3 s on one
  // core, which the GPU benches and tests paid per shape. The values depend on rng alone, not on the threads.
  constexpr int64_t kChunk = int64_t{1} << 16;
  const uint64_t seed = rng();
  const int64_t total = numel(), chunks = (total + kChunk - 1) / kChunk;
  const size_t rank = shape_.size();
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    std::mt19937_64 gen(splitmix64(seed + static_cast<uint64_t>(chunk)));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<int64_t> idx(rank);  // the chunk's first element, unravelled
    for (int64_t d = static_cast<int64_t>(rank) - 1, rest = chunk * kChunk; d >= 0; --d) {
      idx[d] = rest % shape_[d];
      rest /= shape_[d];
    }
    for (int64_t i = chunk * kChunk, end = std::min(total, i + kChunk); i < end; ++i) {
      store(offset(idx.data(), rank), normal(gen) * scale);
      for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0 && ++idx[d] == shape_[d]; --d) idx[d] = 0;
    }
  }
}

void HostTensor::poison() {
  if (!storage_) return;
  const size_t es = dtype_size(view_.dtype), n = storage_->size() / es;
  const uint32_t pat = nan_pattern(view_.dtype);
  for (size_t i = 0; i < n; ++i) std::memcpy(storage_->data() + i * es, &pat, es);
}

bool HostTensor::guards_intact() const {
  if (!storage_) return true;
  const size_t es = dtype_size(view_.dtype);
  const int64_t total = static_cast<int64_t>(storage_->size() / es);
  for (int64_t i = 0; i < total; ++i) {
    if (i >= guard_elems_ && i < total - guard_elems_) continue;
    if (!std::isnan(load_as_float(storage_->data(), view_.dtype, i))) return false;
  }
  return true;
}

int64_t HostTensor::unwritten() const {
  int64_t n = 0;
  for_each_index(shape_,
                 [&](const std::vector<int64_t>& i) { n += std::isnan(load(offset(i.data(), i.size()))) ? 1 : 0; });
  return n;
}

// ---- cases -----------------------------------------------------------------------------------------------

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B" << batch << " Sq" << seqlen_q << " Sk" << seqlen_k << " H" << heads_q << "/" << heads_kv << " D" << head_dim
    << "/" << head_dim_v << " " << dtype_name(dtype);
  if (options.causal) s << " causal";
  if (options.window_left >= 0 || options.window_right >= 0)
    s << " window(" << options.window_left << "," << options.window_right << ")";
  if (options.softcap > 0) s << " softcap" << options.softcap;
  if (!std::isnan(options.softmax_scale)) s << " scale" << options.softmax_scale;
  s << (layout == Layout::kContiguous ? "" : layout == Layout::kHeadsFirst ? " bhsd-view" : " padded");
  s << (inputs == Inputs::kPeaked ? " peaked" : "");
  s << (deterministic ? " deterministic" : "");
  return s.str();
}

Case Case::make(const Problem& pr, uint64_t seed, bool with_backward) {
  Case c;
  c.problem = pr;
  std::mt19937_64 rng(seed);
  const DType dt = pr.dtype;
  c.q = HostTensor(dt, {pr.batch, pr.seqlen_q, pr.heads_q, pr.head_dim}, pr.layout);
  c.k = HostTensor(dt, {pr.batch, pr.seqlen_k, pr.heads_kv, pr.head_dim}, pr.layout);
  c.v = HostTensor(dt, {pr.batch, pr.seqlen_k, pr.heads_kv, pr.head_dim_v}, pr.layout);
  c.out = HostTensor(dt, {pr.batch, pr.seqlen_q, pr.heads_q, pr.head_dim_v}, pr.layout);
  c.lse = HostTensor(DType::kFloat32, {pr.batch, pr.heads_q, pr.seqlen_q}, pr.layout);
  const bool peaked = pr.inputs == Inputs::kPeaked;
  c.q.fill_normal(rng, peaked ? 5.0f : 1.0f);
  c.k.fill_normal(rng, peaked ? 3.0f : 1.0f);
  c.v.fill_normal(rng, 1.0f);
  if (with_backward) {
    // dO gets its own layout, different from O's, as TESTING.md asks.
    const Layout dout_layout = pr.layout == Layout::kContiguous ? Layout::kPadded : Layout::kContiguous;
    c.dout = HostTensor(dt, {pr.batch, pr.seqlen_q, pr.heads_q, pr.head_dim_v}, dout_layout);
    c.dout.fill_normal(rng, 1.0f);
    c.dq = HostTensor(dt, {pr.batch, pr.seqlen_q, pr.heads_q, pr.head_dim}, pr.layout);
    c.dk = HostTensor(dt, {pr.batch, pr.seqlen_k, pr.heads_kv, pr.head_dim}, pr.layout);
    c.dv = HostTensor(dt, {pr.batch, pr.seqlen_k, pr.heads_kv, pr.head_dim_v}, pr.layout);
  }
  return c;
}

ForwardParams Case::forward_params(Backend backend) const {
  ForwardParams f;
  f.q = q.view(), f.k = k.view(), f.v = v.view(), f.out = out.view(), f.lse = lse.view();
  f.options = problem.options;
  f.backend = backend;
  return f;
}

BackwardParams Case::backward_params(Backend backend) const {
  BackwardParams b;
  b.q = q.view(), b.k = k.view(), b.v = v.view(), b.out = out.view(), b.lse = lse.view(), b.dout = dout.view();
  b.dq = dq.view(), b.dk = dk.view(), b.dv = dv.view();
  b.options = problem.options;
  b.deterministic = problem.deterministic;
  b.backend = backend;
  return b;
}

// ---- oracle and baseline over whole tensors --------------------------------------------------------------

Reference oracle(const Case& c, bool with_backward) {
  const Problem& pr = c.problem;
  const flashtile::Problem p = to_internal(pr, true);
  Reference r;
  r.o.assign(pr.batch * pr.seqlen_q * pr.heads_q * pr.head_dim_v, 0.0);
  r.lse.assign(pr.batch * pr.heads_q * pr.seqlen_q, 0.0);
  const Tensor q = c.q.view(), k = c.k.view(), v = c.v.view();
  // Rows are independent: spread them over the cores (the oracle is most of a GPU test's time).
  const int64_t rows = pr.batch * pr.seqlen_q * pr.heads_q;
#pragma omp parallel
  {
    std::vector<double> scratch(std::max<int64_t>(pr.seqlen_k, 1));
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t h = t % pr.heads_q, i = (t / pr.heads_q) % pr.seqlen_q, b = t / (pr.heads_q * pr.seqlen_q);
      cpu::oracle::forward_row(q, k, v, p, b, h, i, &r.o[t * pr.head_dim_v],
                               &r.lse[(b * pr.heads_q + h) * pr.seqlen_q + i], scratch.data());
    }
  }
  if (!with_backward) return r;
  r.dq.assign(pr.batch * pr.seqlen_q * pr.heads_q * pr.head_dim, 0.0);
  r.dk.assign(pr.batch * pr.seqlen_k * pr.heads_kv * pr.head_dim, 0.0);
  r.dv.assign(pr.batch * pr.seqlen_k * pr.heads_kv * pr.head_dim_v, 0.0);
  // Two passes, each spread over the cores by rows or keys (a test problem has few (batch, K/V head) pairs):
  // each row's dq and softmax statistics, then each key's dk and dv from them.
  const Tensor dout = c.dout.view();
  std::vector<cpu::oracle::RowGradStats> stats(rows);  // ((b, h), i), as the LSE
#pragma omp parallel
  {
    std::vector<double> scratch(3 * std::max<int64_t>(pr.seqlen_k, 1));
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t h = t % pr.heads_q, i = (t / pr.heads_q) % pr.seqlen_q, b = t / (pr.heads_q * pr.seqlen_q);
      cpu::oracle::backward_row(q, k, v, dout, p, b, h, i, &r.dq[t * pr.head_dim],
                                &stats[(b * pr.heads_q + h) * pr.seqlen_q + i], scratch.data());
    }
  }
  const int64_t keys = pr.batch * pr.seqlen_k * pr.heads_kv;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t t = 0; t < keys; ++t) {
    const int64_t hk = t % pr.heads_kv, j = (t / pr.heads_kv) % pr.seqlen_k, b = t / (pr.heads_kv * pr.seqlen_k);
    cpu::oracle::backward_key(q, k, v, dout, p, b, hk, j, &stats[(b * pr.heads_q + hk * p.group()) * pr.seqlen_q],
                              &r.dk[t * pr.head_dim], &r.dv[t * pr.head_dim_v]);
  }
  return r;
}

Reference baseline(const Case& c, bool with_backward) {
  const Problem& pr = c.problem;
  const BaselineMath m{c, to_internal(pr, true), pr.dtype};
  const flashtile::Problem& p = m.p;
  const int64_t g = p.group(), D = pr.head_dim, Dv = pr.head_dim_v;
  Reference r;
  r.o.assign(pr.batch * pr.seqlen_q * pr.heads_q * Dv, 0.0);
  r.lse.assign(pr.batch * pr.heads_q * pr.seqlen_q, 0.0);
  if (with_backward) {
    r.dq.assign(pr.batch * pr.seqlen_q * pr.heads_q * D, 0.0);
    r.dk.assign(pr.batch * pr.seqlen_k * pr.heads_kv * D, 0.0);
    r.dv.assign(pr.batch * pr.seqlen_k * pr.heads_kv * Dv, 0.0);
  }
  // Two passes, each spread over the cores by rows or keys, each sum in the order of a framework's backward
  // over one (batch, K/V head): each row's O, LSE and dq; then each key's dk and dv over the group's rows.
  const int64_t rows = pr.batch * pr.seqlen_q * pr.heads_q;
  std::vector<float> row_dot(with_backward ? rows : 0);  // sum_j P_j dP_j rounded, ((b, h), i) as the LSE
#pragma omp parallel
  {
    std::vector<float> prob(std::max<int64_t>(pr.seqlen_k, 1)), th(prob.size()), dp(prob.size()), acc(D);
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t h = t % pr.heads_q, i = (t / pr.heads_q) % pr.seqlen_q, b = t / (pr.heads_q * pr.seqlen_q);
      const int64_t hk = h / g, lo = p.keys.lo(i), hi = p.keys.hi(i), stat = (b * pr.heads_q + h) * pr.seqlen_q + i;
      float lse = 0;
      m.probs(b, h, i, prob, th, &lse);
      r.lse[stat] = lse;
      for (int64_t d = 0; d < Dv; ++d) {
        float o = 0;
        for (int64_t j = lo; j <= hi; ++j) o += prob[j] * m.row(c.v, b, j, hk)[d];
        r.o[t * Dv + d] = m.rd(o);
      }
      if (!with_backward || lo > hi) continue;
      // A framework's backward differentiates its own softmax; a flash backward has only the forward's fp32
      // LSE to rebuild P from, and fp32 holds |LSE| ~ 100 to ~4e-6. The baseline rebuilds P the same way,
      // so for fp32 inputs it carries the rounding of the LSE that SPEC.md fixes as fp32 (for fp16/bf16
      // the P it gets is the same after rounding to the dtype).
      for (int64_t j = lo; j <= hi; ++j) prob[j] = m.rd(std::exp(m.score(b, h, i, j) - lse));
      float sum = 0;
      for (int64_t j = lo; j <= hi; ++j) {
        dp[j] = m.rd(m.dot(c.dout, b, i, h, c.v, j, hk, Dv));
        sum += prob[j] * dp[j];
      }
      row_dot[stat] = m.rd(sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j <= hi; ++j) {
        const float ds = m.score_grad(prob[j], dp[j], row_dot[stat], th[j]);
        const BaselineMath::Row k_row = m.row(c.k, b, j, hk);
        for (int64_t d = 0; d < D; ++d) acc[d] += ds * k_row[d];
      }
      for (int64_t d = 0; d < D; ++d) r.dq[t * D + d] = m.rd(acc[d]);
    }
  }
  if (!with_backward) return r;
  const int64_t keys = pr.batch * pr.seqlen_k * pr.heads_kv;
#pragma omp parallel
  {
    std::vector<float> dk_acc(D), dv_acc(Dv);
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < keys; ++t) {
      const int64_t hk = t % pr.heads_kv, j = (t / pr.heads_kv) % pr.seqlen_k, b = t / (pr.heads_kv * pr.seqlen_k);
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
      for (int64_t h = hk * g; h < (hk + 1) * g; ++h)
        for (int64_t i = 0; i < pr.seqlen_q; ++i) {
          if (!p.keys.visible(i, j)) continue;
          const int64_t stat = (b * pr.heads_q + h) * pr.seqlen_q + i;
          float th = 0;
          const float prob = m.rd(std::exp(m.score(b, h, i, j, &th) - static_cast<float>(r.lse[stat])));
          const float dp = m.rd(m.dot(c.dout, b, i, h, c.v, j, hk, Dv));
          const float ds = m.score_grad(prob, dp, row_dot[stat], th);
          const BaselineMath::Row q_row = m.row(c.q, b, i, h), do_row = m.row(c.dout, b, i, h);
          for (int64_t d = 0; d < D; ++d) dk_acc[d] += ds * q_row[d];
          for (int64_t d = 0; d < Dv; ++d) dv_acc[d] += prob * do_row[d];
        }
      for (int64_t d = 0; d < D; ++d) r.dk[t * D + d] = m.rd(dk_acc[d]);
      for (int64_t d = 0; d < Dv; ++d) r.dv[t * Dv + d] = m.rd(dv_acc[d]);
    }
  }
  return r;
}

// ---- the rule --------------------------------------------------------------------------------------------

std::string Verdict::summary() const {
  std::ostringstream s;
  s << name << (pass ? " ok" : " FAIL") << ": max " << max_err << " (bound " << bound << "), mean " << mean_err
    << " (baseline " << mean_base << ")";
  if (nonfinite) s << ", " << nonfinite << " non-finite";
  return s.str();
}

double max_abs(const std::vector<double>& x) {
  double mx = 0;
  for (double w : x)
    if (std::isfinite(w)) mx = std::max(mx, std::fabs(w));
  return mx;
}

double mean_abs(const std::vector<double>& x) {
  double sum = 0;
  for (double w : x) sum += std::isfinite(w) ? std::fabs(w) : 0.0;
  return x.empty() ? 0.0 : sum / static_cast<double>(x.size());
}

Verdict compare(const std::string& name, const std::vector<double>& got, const std::vector<double>& want,
                const std::vector<double>& base, DType dtype, double multiplier, double magnitude,
                double mean_magnitude) {
  Verdict v;
  v.name = name;
  const size_t n = want.size();
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(want[i])) continue;
    if (!std::isfinite(got[i])) {
      ++v.nonfinite;
      continue;
    }
    const double e = std::fabs(got[i] - want[i]), eb = std::fabs(base[i] - want[i]);
    v.max_err = std::max(v.max_err, e);
    v.max_base = std::max(v.max_base, eb);
    v.mean_err += e;
    v.mean_base += eb;
  }
  if (n) v.mean_err /= n, v.mean_base /= n;
  const double slack = 2.0 * ulp_of(dtype, magnitude >= 0 ? magnitude : max_abs(want));
  v.bound = multiplier * v.max_base + slack;
  // The mean bound gets a floor of 2 ulp at the mean magnitude (of the gradient family, for gradients): where
  // the baseline is exact (a row with one visible key has P = 1 and dS = 0 exactly) a flash backward still
  // carries the rounding of D = rowsum(dO * O), which it must take from O (SPEC.md: O may come from
  // elsewhere), and the rule would otherwise demand zero error.
  const double mean_floor = 2.0 * ulp_of(dtype, mean_magnitude >= 0 ? mean_magnitude : mean_abs(want));
  v.pass = v.nonfinite == 0 && v.max_err <= v.bound && v.mean_err <= 1.5 * v.mean_base + mean_floor;
  return v;
}

Verdict compare_lse(const std::vector<double>& got, const std::vector<double>& want, DType dtype) {
  Verdict v;
  v.name = "lse";
  const double tol = dtype == DType::kFloat32 ? 1e-5 : 1e-3;
  bool ok = true;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) && want[i] < 0) {  // a row with no visible key must say so exactly
      if (!(std::isinf(got[i]) && got[i] < 0)) ++v.nonfinite;
      continue;
    }
    if (!std::isfinite(got[i])) {
      ++v.nonfinite;
      continue;
    }
    const double e = std::fabs(got[i] - want[i]);
    v.max_err = std::max(v.max_err, e);
    v.mean_err += e;
    ok = ok && e <= tol * std::max(1.0, std::fabs(want[i]));
  }
  if (!want.empty()) v.mean_err /= want.size();
  v.bound = tol;
  v.pass = ok && v.nonfinite == 0;
  return v;
}

bool CheckResult::pass() const {
  if (!error.empty()) return false;
  for (const Verdict& v : verdicts)
    if (!v.pass) return false;
  return true;
}

std::string CheckResult::summary() const {
  std::string s = error;
  for (const Verdict& v : verdicts) s += (s.empty() ? "" : "; ") + v.summary();
  return s;
}

namespace {

// Poisoned outputs must all be written and their guards untouched.
void check_written(CheckResult& r, const char* name, const HostTensor& t) {
  if (!t.guards_intact()) r.error += std::string(r.error.empty() ? "" : "; ") + name + ": guard band overwritten";
  if (int64_t n = t.unwritten(); n > 0)
    r.error += std::string(r.error.empty() ? "" : "; ") + name + ": " + std::to_string(n) + " elements left NaN";
}

}  // namespace

bool cuda_available(std::string* why) { return DeviceMirror::available(why); }

CheckResult check(const Problem& problem, uint64_t seed, Backend backend, bool with_backward, Device device) {
  CheckResult r;
  if (device == Device::kCUDA && !cuda_available(&r.error)) return r;  // before making inputs for nothing
  Case c = Case::make(problem, seed, with_backward);
  return check(c, backend, with_backward, device);
}

CheckResult check(Case& c, Backend backend, bool with_backward, Device device) {
  CheckResult r;
  if (device == Device::kCUDA && !cuda_available(&r.error)) return r;
  DeviceMirror mirror;
  auto on = [&](const HostTensor& t) { return device == Device::kCUDA ? mirror.view(t) : t.view(); };
  ForwardParams f = c.forward_params(backend);
  f.q = on(c.q), f.k = on(c.k), f.v = on(c.v), f.out = on(c.out), f.lse = on(c.lse);
  Status s = forward(f);
  if (s.ok() && !mirror.copy_back(&r.error)) return r;
  if (!s.ok()) {
    r.error = std::string("forward: ") + s.message;
    return r;
  }
  check_written(r, "out", c.out);
  check_written(r, "lse", c.lse);
  if (with_backward) {
    BackwardParams b = c.backward_params(backend);
    b.q = on(c.q), b.k = on(c.k), b.v = on(c.v), b.out = on(c.out), b.lse = on(c.lse), b.dout = on(c.dout);
    b.dq = on(c.dq), b.dk = on(c.dk), b.dv = on(c.dv);
    s = flashtile::backward(b);
    if (s.ok() && !mirror.copy_back(&r.error)) return r;
    if (!s.ok()) {
      r.error = std::string("backward: ") + s.message;
      return r;
    }
    check_written(r, "dq", c.dq);
    check_written(r, "dk", c.dk);
    check_written(r, "dv", c.dv);
  }
  const Reference want = oracle(c, with_backward), base = baseline(c, with_backward);
  const DType dt = c.problem.dtype;
  r.verdicts.push_back(compare("out", c.out.to_doubles(), want.o, base.o, dt, 2.0));
  r.verdicts.push_back(compare_lse(c.lse.to_doubles(), want.lse, dt));
  if (with_backward) {
    const double grad_max = std::max({max_abs(want.dq), max_abs(want.dk), max_abs(want.dv)});
    const double grad_mean = std::max({mean_abs(want.dq), mean_abs(want.dk), mean_abs(want.dv)});
    r.verdicts.push_back(compare("dq", c.dq.to_doubles(), want.dq, base.dq, dt, 3.0, grad_max, grad_mean));
    r.verdicts.push_back(compare("dk", c.dk.to_doubles(), want.dk, base.dk, dt, 3.0, grad_max, grad_mean));
    r.verdicts.push_back(compare("dv", c.dv.to_doubles(), want.dv, base.dv, dt, 3.0, grad_max, grad_mean));
  }
  return r;
}

Status run_forward(Case& c, Backend backend, Device device) {
  ForwardParams f = c.forward_params(backend);
  if (device == Device::kCPU) return forward(f);
  DeviceMirror mirror;
  f.q = mirror.view(c.q), f.k = mirror.view(c.k), f.v = mirror.view(c.v);
  f.out = mirror.view(c.out), f.lse = mirror.view(c.lse);
  Status s = forward(f);
  if (!s.ok()) return s;
  std::string error;
  if (!mirror.copy_back(&error)) return {StatusCode::kDeviceError, error};
  return s;
}

Status run_forward_backward(Case& c, Backend backend, Device device) {
  DeviceMirror mirror;
  auto on = [&](const HostTensor& t) { return device == Device::kCUDA ? mirror.view(t) : t.view(); };
  ForwardParams f = c.forward_params(backend);
  f.q = on(c.q), f.k = on(c.k), f.v = on(c.v), f.out = on(c.out), f.lse = on(c.lse);
  if (Status s = forward(f); !s.ok()) return s;
  BackwardParams b = c.backward_params(backend);
  b.q = f.q, b.k = f.k, b.v = f.v, b.out = f.out, b.lse = f.lse, b.dout = on(c.dout);
  b.dq = on(c.dq), b.dk = on(c.dk), b.dv = on(c.dv);
  if (Status s = flashtile::backward(b); !s.ok()) return s;
  std::string error;
  if (!mirror.copy_back(&error)) return {StatusCode::kDeviceError, error};
  return {};
}

std::vector<RowSample> sample_rows(const Problem& p, int count, uint64_t seed) {
  std::vector<RowSample> rows;
  if (p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0) return rows;
  rows.push_back({0, 0, 0});
  rows.push_back({p.batch - 1, p.heads_q - 1, p.seqlen_q - 1});
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i)
    rows.push_back({static_cast<int64_t>(rng() % p.batch), static_cast<int64_t>(rng() % p.heads_q),
                    static_cast<int64_t>(rng() % p.seqlen_q)});
  return rows;
}

CheckResult check_rows(const Case& c, const std::vector<RowSample>& samples) {
  const Problem& pr = c.problem;
  const flashtile::Problem p = to_internal(pr, true);
  const BaselineMath m{c, p, pr.dtype};
  std::vector<double> got, want, base, got_lse, want_lse;
  std::vector<double> o(pr.head_dim_v), scratch(std::max<int64_t>(pr.seqlen_k, 1));
  std::vector<float> prob(scratch.size()), th(scratch.size());
  for (const RowSample& s : samples) {
    double lse = 0;
    cpu::oracle::forward_row(c.q.view(), c.k.view(), c.v.view(), p, s.b, s.h, s.row, o.data(), &lse, scratch.data());
    float base_lse = 0;
    m.probs(s.b, s.h, s.row, prob, th, &base_lse);
    const int64_t hk = s.h / p.group(), lo = p.keys.lo(s.row), hi = p.keys.hi(s.row);
    for (int64_t d = 0; d < pr.head_dim_v; ++d) {
      float acc = 0;
      for (int64_t j = lo; j <= hi; ++j) acc += prob[j] * c.v.get({s.b, j, hk, d});
      got.push_back(c.out.get({s.b, s.row, s.h, d}));
      want.push_back(o[d]);
      base.push_back(m.rd(acc));
    }
    got_lse.push_back(c.lse.get({s.b, s.h, s.row}));
    want_lse.push_back(lse);
  }
  CheckResult r;
  r.verdicts.push_back(compare("out", got, want, base, pr.dtype, 2.0));
  r.verdicts.push_back(compare_lse(got_lse, want_lse, pr.dtype));
  return r;
}

}  // namespace flashtile::verify
