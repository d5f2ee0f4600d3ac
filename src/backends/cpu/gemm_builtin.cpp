// The tile products as plain loops (see gemm.hpp), for builds without OpenBLAS. Each innermost loop runs along
// contiguous memory so the compiler vectorises it; the clones let one binary use AVX-512 or AVX2+FMA.
#include <algorithm>

#include "backends/cpu/gemm.hpp"

namespace flashtile::cpu {

#define FLASHTILE_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

FLASHTILE_CPU_CLONES void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                   int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t p = 0; p < k; ++p) acc += a[i * lda + p] * b[j * ldb + p];
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc : acc;
    }
}

FLASHTILE_CPU_CLONES void gemm_ab_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                                             const float* b, int64_t ldb, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const float w = a[i * lda + p];
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += w * b[p * ldb + j];
    }
}

FLASHTILE_CPU_CLONES void gemm_atb_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                                              const float* b, int64_t ldb, float* c, int64_t ldc) {
  for (int64_t p = 0; p < k; ++p)
    for (int64_t i = 0; i < m; ++i) {
      const float w = a[p * lda + i];
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += w * b[p * ldb + j];
    }
}

std::string blas_info() { return "built-in loops (configured without OpenBLAS)"; }

}  // namespace flashtile::cpu
