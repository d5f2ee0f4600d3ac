// The AVX512-BF16 tile products (gemm_bf16.hpp). B is first packed into pair words, pack[p][j] holding the
// two bf16 values of k-indices 2p and 2p+1 for column j (an odd k gets a zero partner), which is the operand
// layout vdpbf16ps wants; each A row's pair for index p is broadcast from memory. A register block of 8 rows by
// 32 columns keeps 16 accumulators live.
#include "backends/cpu/gemm_bf16.hpp"

#include <immintrin.h>

#include <cstring>

namespace flashtile::cpu {

bool bf16_dot_available() {
  static const bool available = __builtin_cpu_supports("avx512bf16");
  return available;
}

namespace {

// The pair of A[row][2p], A[row][2p + 1] as one word; the partner past an odd k is zero.
inline uint32_t a_pair(const uint16_t* row, int64_t p, int64_t k) {
  const uint32_t lo = row[2 * p];
  const uint32_t hi = 2 * p + 1 < k ? row[2 * p + 1] : 0u;
  return lo | (hi << 16);
}

template <int kRows>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void block(int64_t n, int64_t k, const uint16_t* a,
                                                                            int64_t lda, const uint32_t* pack,
                                                                            float* c, int64_t ldc, bool accumulate) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += 32) {
    const int64_t left = n - j0;
    const __mmask16 m0 = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? static_cast<__mmask16>((1u << (left - 16)) - 1) : 0;
    __m512 acc0[kRows], acc1[kRows];
    for (int r = 0; r < kRows; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
      const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(m0, pack + p * n + j0);
      const __m512bh b1 = (__m512bh)_mm512_maskz_loadu_epi32(m1, pack + p * n + j0 + 16);
      for (int r = 0; r < kRows; ++r) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_pair(a + r * lda, p, k)));
        acc0[r] = _mm512_dpbf16_ps(acc0[r], av, b0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], av, b1);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float* out = c + r * ldc + j0;
      if (accumulate) {
        acc0[r] = _mm512_add_ps(acc0[r], _mm512_maskz_loadu_ps(m0, out));
        acc1[r] = _mm512_add_ps(acc1[r], _mm512_maskz_loadu_ps(m1, out + 16));
      }
      _mm512_mask_storeu_ps(out, m0, acc0[r]);
      _mm512_mask_storeu_ps(out + 16, m1, acc1[r]);
    }
  }
}

void run_blocks(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* pack, float* c,
                int64_t ldc, bool accumulate) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) block<8>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate);
  switch (m - i) {
    case 7: block<7>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    case 6: block<6>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    case 5: block<5>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    case 4: block<4>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    case 3: block<3>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    case 2: block<2>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    case 1: block<1>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate); break;
    default: break;
  }
}

}  // namespace

void gemm_bf16_abt(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                   float* c, int64_t ldc, uint32_t* pack) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t j = 0; j < n; ++j)  // B^T's pairs run along B's rows
    for (int64_t p = 0; p < pairs; ++p) pack[p * n + j] = a_pair(b + j * ldb, p, k);
  run_blocks(m, n, k, a, lda, pack, c, ldc, /*accumulate=*/false);
}

void gemm_bf16_ab_accumulate(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                             int64_t ldb, float* c, int64_t ldc, uint32_t* pack) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {  // B's pairs run down its columns: interleave two rows
    const uint16_t* lo = b + 2 * p * ldb;
    const uint16_t* hi = 2 * p + 1 < k ? lo + ldb : nullptr;
    for (int64_t j = 0; j < n; ++j) pack[p * n + j] = lo[j] | (hi ? static_cast<uint32_t>(hi[j]) << 16 : 0u);
  }
  run_blocks(m, n, k, a, lda, pack, c, ldc, /*accumulate=*/true);
}

}  // namespace flashtile::cpu
