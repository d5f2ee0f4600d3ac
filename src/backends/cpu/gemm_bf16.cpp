// The bf16 tile products (gemm_bf16.hpp). B is first packed into pair words, pack[p][j] holding the two bf16
// values of k-indices 2p and 2p+1 for column j (an odd k gets a zero partner): the operand layout of both
// vdpbf16ps and AMX's tdpbf16ps (Intel calls it VNNI). The AVX512-BF16 kernel broadcasts each A row's pair for
// index p from memory and keeps a register block of 8 rows by 32 columns (16 accumulators). The AMX kernel
// keeps a 32 x 32 block of C in four 16 x 16 tiles and multiplies 32-wide slices of A and 16-pair slices of B.
#include "backends/cpu/gemm_bf16.hpp"

// GCC 12's AVX-512 headers build some intrinsics on an "undefined" vector that -Wmaybe-uninitialized then flags
// in every caller (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/numeric.hpp"

namespace flashtile::cpu {

namespace {

// Linux keeps AMX's 8 KB of tile registers out of a process's state until the process asks for them
// (arch/x86/include/uapi/asm/prctl.h; XTILEDATA is state component 18).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool cpu_has_amx_bf16() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 22)) && (edx & (1u << 24));  // AMX-BF16, AMX-TILE
}

bool amx_granted() {
  static const bool granted = cpu_has_amx_bf16() && __builtin_cpu_supports("avx512bf16") &&
                              syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}

}  // namespace

Bf16Kernel bf16_kernel() {
  // AVX512-BF16 and the subsets the kernels and the softmax step use besides (every CPU with it has them; a
  // virtual machine may hide some).
  static const bool avx512_bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (!avx512_bf16) return Bf16Kernel::kNone;
  const char* amx = std::getenv("FLASHTILE_CPU_AMX");
  if ((amx == nullptr || std::strcmp(amx, "0") != 0) && amx_granted()) return Bf16Kernel::kAmx;
  return Bf16Kernel::kAvx512;
}

const char* bf16_kernel_name(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::kNone:
      return "none (fp32 tiles)";
    case Bf16Kernel::kAvx512:
      return "AVX512-BF16";
    case Bf16Kernel::kAmx:
      return "AMX-BF16";
  }
  return "unknown";
}

__attribute__((target("avx512f,avx512bw"))) bool bf16_rows_finite(int64_t rows, int64_t cols, const uint16_t* a,
                                                                  int64_t ld) {
  const __m512i exponent = _mm512_set1_epi16(0x7f80);  // all ones: Inf or NaN
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = a + r * ld;
    for (int64_t c = 0; c < cols; c += 32) {
      const __mmask32 in = cols - c >= 32 ? ~__mmask32{0} : (__mmask32{1} << (cols - c)) - 1;
      const __m512i x = _mm512_and_si512(_mm512_maskz_loadu_epi16(in, row + c), exponent);
      if (_mm512_cmpeq_epi16_mask(x, exponent)) return false;
    }
  }
  return true;
}

namespace {

// The pair of A[row][2p], A[row][2p + 1] as one word; the partner past an odd k is zero.
inline uint32_t a_pair(const uint16_t* row, int64_t p, int64_t k) {
  const uint32_t lo = row[2 * p];
  const uint32_t hi = 2 * p + 1 < k ? row[2 * p + 1] : 0u;
  return lo | (hi << 16);
}

// Transposes 16 rows of 16 words held in registers: out[j] holds word j of every row. A 32-bit and a 64-bit
// interleave within 128-bit lanes, then two stages of 128-bit lane shuffles.
__attribute__((target("avx512f"))) inline void transpose_16x16(const __m512i in[16], __m512i out[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // t[i], t[i+1]: words 4L+0,1 and 4L+2,3 of rows i, i+1, per lane L
    t[i] = _mm512_unpacklo_epi32(in[i], in[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(in[i], in[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // u[g + c], lane L: rows g .. g+3 of word 4L + c
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // word 4L + c of the 16 rows: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    const __m512i lo01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), hi01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i lo23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
                  hi23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    out[c] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(lo01, lo23, 0xdd);
    out[8 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
    out[12 + c] = _mm512_shuffle_i32x4(hi01, hi23, 0xdd);
  }
}

// pack[p][j] = pair p of B's row j (B is n x k): B's rows read as words, transposed. Whole 16 x 16 blocks of
// words go through AVX-512; the edges and an odd k's last pair are copied one word at a time.
__attribute__((target("avx512f"))) void pack_rows_transposed(int64_t n, int64_t k, const uint16_t* b, int64_t ldb,
                                                               uint32_t* pack) {
  const int64_t pairs = (k + 1) / 2, full_pairs = k / 2;
  int64_t j0 = 0;
  for (; j0 + 16 <= n; j0 += 16) {
    int64_t p0 = 0;
    for (; p0 + 16 <= full_pairs; p0 += 16) {
      __m512i r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(b + (j0 + i) * ldb + 2 * p0);
      transpose_16x16(r, t);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(pack + (p0 + i) * n + j0, t[i]);
    }
    for (int64_t j = j0; j < j0 + 16; ++j)
      for (int64_t p = p0; p < pairs; ++p) pack[p * n + j] = a_pair(b + j * ldb, p, k);
  }
  for (int64_t j = j0; j < n; ++j)
    for (int64_t p = 0; p < pairs; ++p) pack[p * n + j] = a_pair(b + j * ldb, p, k);
}

// pack[p][j] = B[2p][j] | B[2p+1][j] << 16 (B is k x n): two rows interleaved element by element, 32 columns a
// step (16-bit interleave within 128-bit lanes, then the lanes put in order); an odd k's last row gets zeros.
__attribute__((target("avx512f,avx512bw"))) void pack_row_pairs(int64_t n, int64_t k, const uint16_t* b, int64_t ldb,
                                                                uint32_t* pack) {
  const int64_t pairs = (k + 1) / 2;
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11),
                second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* lo = b + 2 * p * ldb;
    const uint16_t* hi = 2 * p + 1 < k ? lo + ldb : nullptr;
    uint32_t* out = pack + p * n;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      const __m512i l = _mm512_loadu_si512(lo + j), h = hi ? _mm512_loadu_si512(hi + j) : _mm512_setzero_si512();
      const __m512i x = _mm512_unpacklo_epi16(l, h), y = _mm512_unpackhi_epi16(l, h);
      _mm512_storeu_si512(out + j, _mm512_permutex2var_epi64(x, first, y));
      _mm512_storeu_si512(out + j + 16, _mm512_permutex2var_epi64(x, second, y));
    }
    for (; j < n; ++j) out[j] = lo[j] | (hi ? static_cast<uint32_t>(hi[j]) << 16 : 0u);
  }
}

template <int kRows>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void block(int64_t n, int64_t k, const uint16_t* a,
                                                                           int64_t lda, const uint32_t* pack, float* c,
                                                                           int64_t ldc, bool accumulate) {
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

// The last m % 8 rows: block<kRows> for the count left, chosen at run time.
template <int kRows>
void tail_block(int64_t rows, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* pack, float* c,
                int64_t ldc, bool accumulate) {
  if (rows == kRows) return block<kRows>(n, k, a, lda, pack, c, ldc, accumulate);
  if constexpr (kRows > 1) tail_block<kRows - 1>(rows, n, k, a, lda, pack, c, ldc, accumulate);
}

void avx512_blocks(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* pack, float* c,
                   int64_t ldc, bool accumulate) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) block<8>(n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate);
  if (i < m) tail_block<7>(m - i, n, k, a + i * lda, lda, pack, c + i * ldc, ldc, accumulate);
}

// AMX's tile configuration (palette 1): tiles 0-3 hold C's 32 x 32 block as four 16 x 16 fp32 tiles, 4-5 two
// 16-row slices of A (16 rows x 32 bf16), 6-7 two slices of B (16 pairs x 16 columns). All 16 rows of 64 bytes.
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// The AMX products take m and n in multiples of 32 and k in multiples of 32 (whole tiles only; the callers
// send other shapes to the AVX512-BF16 blocks). The tile registers are configured for the call and released
// after it, so no tile state outlives it on the calling thread.
bool amx_shape(int64_t m, int64_t n, int64_t k) { return m % 32 == 0 && n % 32 == 0 && k % 32 == 0; }

__attribute__((target("amx-tile,amx-bf16"))) void amx_blocks(int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                                             int64_t lda, const uint32_t* pack, float* c, int64_t ldc,
                                                             bool accumulate) {
  static const AmxConfig config;
  _tile_loadconfig(&config);
  const int64_t a_stride = lda * 2, b_stride = n * 4, c_stride = ldc * 4;  // bytes
  for (int64_t i0 = 0; i0 < m; i0 += 32) {
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      float* c00 = c + i0 * ldc + j0;
      float* c10 = c00 + 16 * ldc;
      if (accumulate) {
        _tile_loadd(0, c00, c_stride);
        _tile_loadd(1, c00 + 16, c_stride);
        _tile_loadd(2, c10, c_stride);
        _tile_loadd(3, c10 + 16, c_stride);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k0 = 0; k0 < k; k0 += 32) {
        _tile_loadd(4, a + i0 * lda + k0, a_stride);
        _tile_loadd(5, a + (i0 + 16) * lda + k0, a_stride);
        _tile_loadd(6, pack + k0 / 2 * n + j0, b_stride);
        _tile_loadd(7, pack + k0 / 2 * n + j0 + 16, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c00, c_stride);
      _tile_stored(1, c00 + 16, c_stride);
      _tile_stored(2, c10, c_stride);
      _tile_stored(3, c10 + 16, c_stride);
    }
  }
  _tile_release();
}

void run_blocks(Bf16Kernel kernel, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                const uint32_t* pack, float* c, int64_t ldc, bool accumulate) {
  if (kernel == Bf16Kernel::kAmx && amx_shape(m, n, k))
    amx_blocks(m, n, k, a, lda, pack, c, ldc, accumulate);
  else
    avx512_blocks(m, n, k, a, lda, pack, c, ldc, accumulate);
}

}  // namespace

__attribute__((target("avx512f,avx512bf16"))) void round_to_bf16(int64_t rows, int64_t cols, const float* a,
                                                                   int64_t lda, uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * cols + c),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(a + r * lda + c)));
    for (; c < cols; ++c) out[r * cols + c] = float_to_bf16(a[r * lda + c]);
  }
}

__attribute__((target("avx512f,avx512bf16"))) void transpose_to_bf16(int64_t rows, int64_t cols, const float* a,
                                                                       int64_t lda, uint16_t* out) {
  int64_t r0 = 0;
  for (; r0 + 16 <= rows; r0 += 16) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      __m512i in[16], t[16];
      for (int i = 0; i < 16; ++i) in[i] = _mm512_castps_si512(_mm512_loadu_ps(a + (r0 + i) * lda + c0));
      transpose_16x16(in, t);  // t[j]: column c0 + j of rows r0 .. r0 + 15
      for (int j = 0; j < 16; ++j)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (c0 + j) * rows + r0),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(t[j])));
    }
    for (int64_t c = c0; c < cols; ++c)
      for (int64_t r = r0; r < r0 + 16; ++r) out[c * rows + r] = float_to_bf16(a[r * lda + c]);
  }
  for (int64_t r = r0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = float_to_bf16(a[r * lda + c]);
}

void gemm_bf16_abt(Bf16Kernel kernel, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                   const uint16_t* b, int64_t ldb, float* c, int64_t ldc, uint32_t* pack) {
  pack_rows_transposed(n, k, b, ldb, pack);  // B^T's pairs run along B's rows
  run_blocks(kernel, m, n, k, a, lda, pack, c, ldc, /*accumulate=*/false);
}

void gemm_bf16_ab_accumulate(Bf16Kernel kernel, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                             const uint16_t* b, int64_t ldb, float* c, int64_t ldc, uint32_t* pack) {
  pack_row_pairs(n, k, b, ldb, pack);  // B's pairs run down its columns
  run_blocks(kernel, m, n, k, a, lda, pack, c, ldc, /*accumulate=*/true);
}

}  // namespace flashtile::cpu
