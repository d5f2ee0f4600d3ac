// bf16 tile products on CPUs with AVX512-BF16 (vdpbf16ps: two bf16 products per fp32 lane, twice the fp32 FMA
// rate; Cooper Lake, Sapphire Rapids and later, Zen 4 and later) or AMX-BF16 (tdpbf16ps: a 16 x 16 x 32 product
// per instruction, about 16x vdpbf16ps's rate; Sapphire Rapids and later). Both operands are read as bf16 (the
// inputs in place, P rounded once, as the GPU kernels do); accumulation is fp32. Used by the bf16 forward on
// tiles with no masking; everything else takes the fp32 path (gemm.hpp).
#pragma once

#include <cstdint>

namespace flashtile::cpu {

// Which instructions run the products. kAmx products whose m, n and k are not multiples of 32 run on the
// AVX512-BF16 kernel (every AMX CPU has it).
enum class Bf16Kernel { kNone, kAvx512, kAmx };

// The fastest kernel this CPU and process may use: AMX where the CPU has AMX-BF16 and the OS grants its tile
// state (asked once), unless the environment sets FLASHTILE_CPU_AMX=0 (read on every call: A/B timing and
// tests of both kernels); else AVX512-BF16 where present; else kNone.
Bf16Kernel bf16_kernel();
const char* bf16_kernel_name(Bf16Kernel kernel);

// True when none of the rows (rows x cols bf16, ld elements apart) holds an Inf or NaN. Needs AVX-512 (a
// kernel other than kNone).
bool bf16_rows_finite(int64_t rows, int64_t cols, const uint16_t* a, int64_t ld);

// Words of `pack` scratch the two products below need for an (m x n) result with inner dimension k.
inline int64_t bf16_pack_words(int64_t n, int64_t k) { return (k + 1) / 2 * n; }

// out (rows x cols, dense) = a (rows x cols, lda floats apart) rounded to bf16 (to nearest even): an fp32
// operand (P, dS) made ready for the products below. Needs AVX512-BF16 (a kernel other than kNone).
void round_to_bf16(int64_t rows, int64_t cols, const float* a, int64_t lda, uint16_t* out);
// out (cols x rows, dense) = a^T, with a (rows x cols, lda floats apart), rounded to bf16: P^T and dS^T as the
// A operands of dV += P^T dO and dK += dS^T Q.
void transpose_to_bf16(int64_t rows, int64_t cols, const float* a, int64_t lda, uint16_t* out);

// C (m x n) = A (m x k) * B^T, with B (n x k); A, B bf16 rows, lda/ldb in elements. kernel is not kNone.
void gemm_bf16_abt(Bf16Kernel kernel, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                   const uint16_t* b, int64_t ldb, float* c, int64_t ldc, uint32_t* pack);
// C (m x n) += A (m x k) * B, with B (k x n); A, B bf16 rows.
void gemm_bf16_ab_accumulate(Bf16Kernel kernel, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                             const uint16_t* b, int64_t ldb, float* c, int64_t ldc, uint32_t* pack);

}  // namespace flashtile::cpu
