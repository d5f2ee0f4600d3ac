// The three dense fp32 products the CPU tiles need, row-major, from one of two implementations chosen when
// flashtile is configured (FLASHTILE_BLAS): gemm_openblas.cpp (the default where OpenBLAS is installed) or
// gemm_builtin.cpp (plain loops the compiler vectorises: about 2.3x slower on a tile, docs/perf-log.md, but
// nothing to install, so the library builds anywhere, e.g. where a Python wheel is built without OpenBLAS).
#pragma once

#include <cstdint>
#include <string>

namespace flashtile::cpu {

// C (m x n) (+)= A (m x k) * B^T, with B (n x k).
void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc, bool accumulate);
// C (m x n) += A (m x k) * B (k x n).
void gemm_ab_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* c, int64_t ldc);
// C (m x n) += A^T * B, with A (k x m) and B (k x n).
void gemm_atb_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                         float* c, int64_t ldc);

// Which implementation this build has, and for OpenBLAS the kernel family it picked for this CPU.
std::string blas_info();

}  // namespace flashtile::cpu
