// The float64 oracle (TESTING.md): exact attention from the inputs as stored, materialising one row of S at
// a time. Every other backend is tested against it; the verify library and the reference backend call it.
#pragma once

#include <cstdint>

#include "common/problem.hpp"

namespace flashtile::cpu::oracle {

// One query row: o (head_dim_v doubles) and its LSE (natural log; -inf when the row sees no key).
// scratch holds seqlen_k doubles.
void forward_row(const Tensor& q, const Tensor& k, const Tensor& v, const Problem& p, int64_t b, int64_t h,
                 int64_t row, double* o, double* lse, double* scratch);

// Exact gradients in two passes, so that both spread over every core and each sum keeps its order:
//   backward_row, for each query row: dq (head_dim doubles) and the row's softmax statistics;
//   backward_key, for each key, once every row of its K/V head has its statistics: dk (head_dim) and dv
//   (head_dim_v), summed over the group's query heads in order, and within each over the rows in order.
// P is recomputed exactly from q and k; O and LSE are not inputs (the true gradient does not depend on them).
struct RowGradStats {
  double max = 0, sum = 0, row_dot = 0;  // the scores' max, sum_j exp(s_j - max), and sum_j P_j dP_j
};
// scratch holds 3 * seqlen_k doubles. A row that sees no key gets dq = 0 (its statistics are never read).
void backward_row(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Problem& p,
                  int64_t b, int64_t h, int64_t row, double* dq, RowGradStats* stats, double* scratch);
// stats: the statistics of the rows of K/V head hk's group, (group, seqlen_q), query head hk * group + g at g.
void backward_key(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Problem& p,
                  int64_t b, int64_t hk, int64_t key, const RowGradStats* stats, double* dk, double* dv);

}  // namespace flashtile::cpu::oracle
