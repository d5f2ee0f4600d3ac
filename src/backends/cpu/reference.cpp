#include "backends/cpu/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

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

// The (soft-capped) score of row and key. When th is given it receives tanh(scale * q.k / softcap), needed by
// the softcap gradient.
double score(const Tensor& q, const Tensor& k, const Problem& p, int64_t b, int64_t h, int64_t row, int64_t key,
             double* th) {
  double x = static_cast<double>(p.scale) *
             dot(q, offset_bshd(q, b, row, h), k, offset_bshd(k, b, key, h / p.group()), p.head_dim);
  if (p.softcap > 0) {
    const double t = std::tanh(x / p.softcap);
    if (th) *th = t;
    x = p.softcap * t;
  }
  return x;
}

// Fills s[j] (and th[j], when given) for the row's visible keys and returns their max; -inf if none is visible.
double scores(const Tensor& q, const Tensor& k, const Problem& p, int64_t b, int64_t h, int64_t row, double* s,
              double* th) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = p.keys.lo(row), hi = p.keys.hi(row); j <= hi; ++j) {
    s[j] = score(q, k, p, b, h, row, j, th ? th + j : nullptr);
    mx = std::max(mx, s[j]);
  }
  return mx;
}

// dL/ds for one score, the softmax scale folded in: P (dP - sum_j P_j dP_j), times the softcap's derivative.
double score_grad(const Problem& p, double prob, double dp, double row_dot, double th) {
  double ds = prob * (dp - row_dot);
  if (p.softcap > 0) ds *= 1.0 - th * th;
  return ds * p.scale;
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

void backward_row(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Problem& p,
                  int64_t b, int64_t h, int64_t row, double* dq, RowGradStats* stats, double* scratch) {
  const int64_t hk = h / p.group(), lo = p.keys.lo(row), hi = p.keys.hi(row);
  std::fill(dq, dq + p.head_dim, 0.0);
  if (lo > hi) return;  // no visible key: every gradient of this row is 0
  double *prob = scratch, *th = scratch + p.seqlen_k, *dp = th + p.seqlen_k;
  const double mx = scores(q, k, p, b, h, row, prob, th);
  double sum = 0.0;
  for (int64_t j = lo; j <= hi; ++j) sum += (prob[j] = std::exp(prob[j] - mx));
  const int64_t do_off = offset_bshd(dout, b, row, h);
  double row_dot = 0.0;
  for (int64_t j = lo; j <= hi; ++j) {
    prob[j] /= sum;
    dp[j] = dot(dout, do_off, v, offset_bshd(v, b, j, hk), p.head_dim_v);
    row_dot += prob[j] * dp[j];
  }
  for (int64_t j = lo; j <= hi; ++j) {
    const double ds = score_grad(p, prob[j], dp[j], row_dot, th[j]);
    const int64_t k_off = offset_bshd(k, b, j, hk);
    for (int64_t d = 0; d < p.head_dim; ++d) dq[d] += ds * load_as_float(k.data, k.dtype, k_off + d);
  }
  *stats = {mx, sum, row_dot};
}

void backward_key(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Problem& p,
                  int64_t b, int64_t hk, int64_t key, const RowGradStats* stats, double* dk, double* dv) {
  std::fill(dk, dk + p.head_dim, 0.0);
  std::fill(dv, dv + p.head_dim_v, 0.0);
  const int64_t v_off = offset_bshd(v, b, key, hk);
  for (int64_t g = 0; g < p.group(); ++g) {
    const int64_t h = hk * p.group() + g;
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      if (!p.keys.visible(i, key)) continue;
      const RowGradStats& row = stats[g * p.seqlen_q + i];
      double th = 0.0;
      const double prob = std::exp(score(q, k, p, b, h, i, key, &th) - row.max) / row.sum;
      const int64_t do_off = offset_bshd(dout, b, i, h), q_off = offset_bshd(q, b, i, h);
      const double ds = score_grad(p, prob, dot(dout, do_off, v, v_off, p.head_dim_v), row.row_dot, th);
      for (int64_t d = 0; d < p.head_dim; ++d) dk[d] += ds * load_as_float(q.data, q.dtype, q_off + d);
      for (int64_t d = 0; d < p.head_dim_v; ++d) dv[d] += prob * load_as_float(dout.data, dout.dtype, do_off + d);
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

// Two passes over every core: each query row's dq and statistics, then each key's dk and dv from them.
Status reference_backward(const BackwardParams& params, const Problem& p) {
  std::vector<oracle::RowGradStats> stats;  // ((b, query head), row), as the first pass's tasks are numbered
  try {
    stats.resize(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "CPU reference backward: cannot allocate the rows' statistics"};
  }
  const Status rows = parallel_tasks<double>(p.batch * p.heads_q * p.seqlen_q, params.num_threads,
                                             3 * p.seqlen_k + p.head_dim, [&](int64_t task, double* w) {
    const int64_t i = task % p.seqlen_q, h = (task / p.seqlen_q) % p.heads_q, b = task / (p.seqlen_q * p.heads_q);
    double* dq = w + 3 * p.seqlen_k;
    oracle::backward_row(params.q, params.k, params.v, params.dout, p, b, h, i, dq, &stats[task], w);
    store_row(params.dq, b, i, h, p.head_dim, dq);
  });
  if (!rows.ok()) return rows;
  return parallel_tasks<double>(p.batch * p.heads_kv * p.seqlen_k, params.num_threads, p.head_dim + p.head_dim_v,
                                [&](int64_t task, double* w) {
    const int64_t j = task % p.seqlen_k, hk = (task / p.seqlen_k) % p.heads_kv, b = task / (p.seqlen_k * p.heads_kv);
    const oracle::RowGradStats* group_rows = &stats[(b * p.heads_q + hk * p.group()) * p.seqlen_q];
    oracle::backward_key(params.q, params.k, params.v, params.dout, p, b, hk, j, group_rows, w, w + p.head_dim);
    store_row(params.dk, b, j, hk, p.head_dim, w);
    store_row(params.dv, b, j, hk, p.head_dim_v, w + p.head_dim);
  });
}

}  // namespace flashtile::cpu
