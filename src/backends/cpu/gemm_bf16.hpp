// bf16 tile products on CPUs with AVX512-BF16 (vdpbf16ps: two bf16 products per fp32 lane, twice the fp32 FMA
// rate; Cooper Lake, Sapphire Rapids and later, Zen 4 and later). Both operands are read as bf16 (the inputs in
// place, P rounded once, as the GPU kernels do); accumulation is fp32. Used by the bf16 forward on tiles with
// no masking; everything else takes the fp32 path (gemm.hpp).
#pragma once

#include <cstdint>

namespace flashtile::cpu {

// True when this CPU has AVX512-BF16 (checked once).
bool bf16_dot_available();

// Words of `pack` scratch the two products below need for an (m x n) result with inner dimension k.
inline int64_t bf16_pack_words(int64_t n, int64_t k) { return (k + 1) / 2 * n; }

// C (m x n) = A (m x k) * B^T, with B (n x k); A, B bf16 rows, lda/ldb in elements.
void gemm_bf16_abt(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                   float* c, int64_t ldc, uint32_t* pack);
// C (m x n) += A (m x k) * B, with B (k x n); A, B bf16 rows.
void gemm_bf16_ab_accumulate(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                             int64_t ldb, float* c, int64_t ldc, uint32_t* pack);

}  // namespace flashtile::cpu
