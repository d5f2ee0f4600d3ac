// The tile products through OpenBLAS (see gemm.hpp). OpenBLAS picks an AVX2/AVX-512 micro-kernel for the CPU it
// runs on at load time, so one binary serves any x86-64; called from inside flashtile's own parallel region it
// runs on the calling thread alone (parallel.hpp).
#include <cblas.h>

#include "backends/cpu/gemm.hpp"

namespace flashtile::cpu {

namespace {
blasint n32(int64_t x) { return static_cast<blasint>(x); }
}  // namespace

void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n32(m), n32(n), n32(k), 1.0f, a, n32(lda), b, n32(ldb),
              accumulate ? 1.0f : 0.0f, c, n32(ldc));
}

void gemm_ab_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                        float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n32(m), n32(n), n32(k), 1.0f, a, n32(lda), b, n32(ldb),
              1.0f, c, n32(ldc));
}

void gemm_atb_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                         float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n32(m), n32(n), n32(k), 1.0f, a, n32(lda), b, n32(ldb), 1.0f,
              c, n32(ldc));
}

std::string blas_info() {
  std::string config = openblas_get_config();
  while (!config.empty() && config.back() == ' ') config.pop_back();
  return config + ", core " + openblas_get_corename();
}

}  // namespace flashtile::cpu
