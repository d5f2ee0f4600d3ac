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

// Exact gradients for one K/V head of one batch and the `group` query heads that read it:
//   dq (group, seqlen_q, head_dim), dk (seqlen_k, head_dim), dv (seqlen_k, head_dim_v), all dense.
// P is recomputed exactly from q and k; O and LSE are not inputs (the true gradient does not depend on them).
// scratch holds 3 * seqlen_k doubles.
void backward_group(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Problem& p,
                    int64_t b, int64_t hk, double* dq, double* dk, double* dv, double* scratch);

}  // namespace flashtile::cpu::oracle
