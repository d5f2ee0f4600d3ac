#include "backends/cpu/reference.hpp"

#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/parallel.hpp"
#include "common/numeric.hpp"

namespace flashtile::cpu {

namespace oracle {

namespace {

double dot(const Tensor& a, int64_t a_off, const Tensor& b, int64_t b_off, int64_t n) {
  double acc = 0.0;
  for (int64_t d = 0; d < n; ++d)
    acc += static_cast<double>(load_as_float(a.data, a.dtype, a_off + d)) * load_as_float(b.data, b.dtype, b_off + d);
  return acc;
}

// Fills s[j] for visible keys with the (soft-capped) score and returns their max; -inf if none is visible.
// When th is given it receives tanh(scale * q.k / softcap), needed by the softcap gradient.
double scores(const Tensor& q, const Tensor& k, const Problem& p, int64_t b, int64_t h, int64_t row, double* s,
              double* th) {
  const int64_t hk = h / p.group(), lo = p.keys.lo(row), hi = p.keys.hi(row);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = lo; j <= hi; ++j) {
    double x = static_cast<double>(p.scale) * dot(q, offset_bshd(q, b, row, h), k, offset_bshd(k, b, j, hk), p.head_dim);
    if (p.softcap > 0) {
      const double t = std::tanh(x / p.softcap);
      if (th) th[j] = t;
      x = p.softcap * t;
    }
    s[j] = x;
    mx = std::max(mx, x);
  }
  return mx;
}

}  // namespace

void forward_row(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p, int64_t b, int64_t h,
                 int64_t row, double* o, double* lse, double* scratch) {
  const int64_t hk = h / p.group(), lo = p.keys.lo(row), hi = p.keys.hi(row);
  for (int64_t d = 0; d < p.head_dim_v; ++d) o[d] = 0.0;
  if (lo > hi) {
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  const double mx = scores(q, k, p, b, h, row, scratch, nullptr);
  double sum = 0.0;
  for (int64_t j = lo; j <= hi; ++j) sum += (scratch[j] = std::exp(scratch[j] - mx));
  for (int64_t j = lo; j <= hi; ++j) {
    const double pj = scratch[j] / sum;
    const int64_t off = offset_bshd(v, b, j, hk);
    for (int64_t d = 0; d < p.head_dim_v; ++d) o[d] += pj * load_as_float(v.data, v.dtype, off + d);
  }
  *lse = mx + std::log(sum);
}

void backward_group(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Problem& p,
                    int64_t b, int64_t hk, double* dq, double* dk, double* dv, double* scratch) {
  const int64_t d_qk = p.head_dim, d_v = p.head_dim_v;
  std::fill(dq, dq + p.group() * p.seqlen_q * d_qk, 0.0);
  std::fill(dk, dk + p.seqlen_k * d_qk, 0.0);
  std::fill(dv, dv + p.seqlen_k * d_v, 0.0);
  double *prob = scratch, *th = scratch + p.seqlen_k, *dp = th + p.seqlen_k;
  for (int64_t g = 0; g < p.group(); ++g) {
    const int64_t h = hk * p.group() + g;
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      const int64_t lo = p.keys.lo(i), hi = p.keys.hi(i);
      if (lo > hi) continue;  // no visible key: every gradient of this row is 0
      const double mx = scores(q, k, p, b, h, i, prob, th);
      double sum = 0.0;
      for (int64_t j = lo; j <= hi; ++j) sum += (prob[j] = std::exp(prob[j] - mx));
      const int64_t do_off = offset_bshd(dout, b, i, h), q_off = offset_bshd(q, b, i, h);
      double row_dot = 0.0;  // sum_j P_ij dP_ij
      for (int64_t j = lo; j <= hi; ++j) {
        prob[j] /= sum;
        dp[j] = dot(dout, do_off, v, offset_bshd(v, b, j, hk), d_v);
        row_dot += prob[j] * dp[j];
      }
      double* dq_row = dq + (g * p.seqlen_q + i) * d_qk;
      for (int64_t j = lo; j <= hi; ++j) {
        double ds = prob[j] * (dp[j] - row_dot);
        if (p.softcap > 0) ds *= 1.0 - th[j] * th[j];
        ds *= p.scale;
        const int64_t k_off = offset_bshd(k, b, j, hk), v_row = j * d_v;
        for (int64_t d = 0; d < d_qk; ++d) {
          dq_row[d] += ds * load_as_float(k.data, k.dtype, k_off + d);
          dk[j * d_qk + d] += ds * load_as_float(q.data, q.dtype, q_off + d);
        }
        for (int64_t d = 0; d < d_v; ++d) dv[v_row + d] += prob[j] * load_as_float(dout.data, dout.dtype, do_off + d);
      }
    }
  }
}

}  // namespace oracle

namespace {

void store_row(const Tensor& t, int64_t b, int64_t s, int64_t h, int64_t n, const double* x) {
  const int64_t off = offset_bshd(t, b, s, h);
  for (int64_t d = 0; d < n; ++d) store_from_float(t.data, t.dtype, off + d, static_cast<float>(x[d]));
}

}  // namespace

Status reference_forward(const ForwardParams& params, const Problem& p) {
  const int64_t rows = p.batch * p.heads_q * p.seqlen_q;
  return parallel_tasks<double>(rows, params.num_threads, p.seqlen_k + p.head_dim_v, [&](int64_t task, double* w) {
    const int64_t i = task % p.seqlen_q, h = (task / p.seqlen_q) % p.heads_q, b = task / (p.seqlen_q * p.heads_q);
    double lse = 0.0;
    oracle::forward_row(params.q, params.k, params.v, p, b, h, i, w + p.seqlen_k, &lse, w);
    store_row(params.out, b, i, h, p.head_dim_v, w + p.seqlen_k);
    if (p.with_lse) static_cast<float*>(params.lse.data)[offset_bhs(params.lse, b, h, i)] = static_cast<float>(lse);
  });
}

Status reference_backward(const BackwardParams& params, const Problem& p) {
  const int64_t dq_n = p.group() * p.seqlen_q * p.head_dim, dk_n = p.seqlen_k * p.head_dim,
                dv_n = p.seqlen_k * p.head_dim_v;
  return parallel_tasks<double>(p.batch * p.heads_kv, params.num_threads, dq_n + dk_n + dv_n + 3 * p.seqlen_k,
                                [&](int64_t task, double* w) {
    const int64_t hk = task % p.heads_kv, b = task / p.heads_kv;
    double *dq = w, *dk = dq + dq_n, *dv = dk + dk_n;
    oracle::backward_group(params.q, params.k, params.v, params.dout, p, b, hk, dq, dk, dv, dv + dv_n);
    for (int64_t g = 0; g < p.group(); ++g)
      for (int64_t i = 0; i < p.seqlen_q; ++i)
        store_row(params.dq, b, i, hk * p.group() + g, p.head_dim, dq + (g * p.seqlen_q + i) * p.head_dim);
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      store_row(params.dk, b, j, hk, p.head_dim, dk + j * p.head_dim);
      store_row(params.dv, b, j, hk, p.head_dim_v, dv + j * p.head_dim_v);
    }
  });
}

}  // namespace flashtile::cpu
