#include "backends/cpu/softmax_avx512.hpp"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized in their callers (GCC bug 105593; see gemm_bf16.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <initializer_list>
#include <limits>

namespace flashtile::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// 2^x, as exp2_inplace (tile_ops.cpp) computes it: n = round(x), 2^(x - n) by its Taylor series to degree 7,
// n added to the exponent bits; exactly 0 for x <= -125 (-inf included), NaN for NaN. The clamps keep NaN
// (min/max return their second operand when either is NaN).
__attribute__((target("avx512f"))) inline __m512 exp2_vector(__m512 x) {
  const __m512 v = _mm512_min_ps(_mm512_set1_ps(127.0f), x);
  const __m512 r =
      _mm512_roundscale_ps(_mm512_max_ps(_mm512_set1_ps(-125.0f), v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(v, r);
  __m512 p = _mm512_set1_ps(1.52527338040598e-05f);
  for (const float c : {0.000154035303933816f, 0.00133335581464284f, 0.00961812910762848f, 0.0555041086648216f,
                        0.240226506959101f, 0.693147180559945f, 1.0f})
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
  const __m512i bits = _mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(_mm512_cvtps_epi32(r), 23));
  const __mmask16 normal = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-125.0f), _CMP_GT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(normal, _mm512_maskz_mov_ps(nan, v), _mm512_castsi512_ps(bits));
}

inline __mmask16 lanes(int64_t left) { return left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1); }

// The step for one P format: bf16 to p16, or fp32 over s. Its target includes AVX512-BF16 for the first; the
// fp32 instance's code has no bf16 instruction (only the intrinsic below emits one), so CPUs without it run it.
template <bool kBf16>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void step(int64_t rows, int64_t cols,
                                                                                  float* s, float mul, float* m,
                                                                                  float* l, float* alpha,
                                                                                  uint16_t* p16, float* o,
                                                                                  int64_t dv) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m512 scale = _mm512_set1_ps(mul);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * cols;
    // The row's max; a NaN score is skipped (max returns its second operand, the running max, on NaN).
    __m512 mx = _mm512_set1_ps(m[r]);
    for (int64_t c = 0; c < cols; c += 16) {
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(cols - c), row + c), scale);
      mx = _mm512_mask_max_ps(mx, lanes(cols - c), x, mx);
    }
    const float m_new = _mm512_reduce_max_ps(mx);
    const float shift = m_new == kNegInf ? 0.0f : m_new;  // an all-masked row: avoid -inf - -inf
    const __m512 shift_v = _mm512_set1_ps(shift), log2e = _mm512_set1_ps(kLog2e);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += 32) {
      const __mmask16 k0 = lanes(cols - c), k1 = c + 16 < cols ? lanes(cols - c - 16) : 0;
      const __m512 x0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k0, row + c), scale);
      const __m512 x1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(k1, row + c + 16), scale);
      const __m512 p0 = _mm512_maskz_mov_ps(k0, exp2_vector(_mm512_mul_ps(_mm512_sub_ps(x0, shift_v), log2e)));
      const __m512 p1 = _mm512_maskz_mov_ps(k1, exp2_vector(_mm512_mul_ps(_mm512_sub_ps(x1, shift_v), log2e)));
      sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
      if constexpr (kBf16) {
        const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);  // p0's 16 values first
        _mm512_mask_storeu_epi16(p16 + r * cols + c, static_cast<__mmask32>(k0) | static_cast<__mmask32>(k1) << 16,
                                 packed);
      } else {
        _mm512_mask_storeu_ps(row + c, k0, p0);
        _mm512_mask_storeu_ps(row + c + 16, k1, p1);
      }
    }
    const float a = exp2_vector(_mm512_set1_ps((m[r] - shift) * kLog2e))[0];
    alpha[r] = a;
    l[r] = l[r] * a + _mm512_reduce_add_ps(sum);
    m[r] = m_new;
    if (o != nullptr && a != 1.0f) {
      float* orow = o + r * dv;
      const __m512 av = _mm512_set1_ps(a);
      for (int64_t c = 0; c < dv; c += 16)
        _mm512_mask_storeu_ps(orow + c, lanes(dv - c),
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(dv - c), orow + c), av));
    }
  }
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void backward_probabilities_avx512(
    int64_t rows, int64_t cols, float* s, float* ds, float mul, const float* lse, const float* delta, float scale,
    const int32_t* begin, const int32_t* end) {
  const __m512 mul_v = _mm512_set1_ps(mul), scale_v = _mm512_set1_ps(scale), log2e = _mm512_set1_ps(kLog2e);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t r = 0; r < rows; ++r) {
    float *srow = s + r * cols, *dsrow = ds + r * cols;
    const __m512 lse_v = _mm512_set1_ps(lse[r]), delta_v = _mm512_set1_ps(delta[r]);
    const int32_t lo = begin ? begin[r] : 0, hi = end ? end[r] : static_cast<int32_t>(cols);
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 in = lanes(cols - c);
      const __m512i key = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(c)));
      const __mmask16 visible = in & _mm512_cmpge_epi32_mask(key, _mm512_set1_epi32(lo)) &
                                _mm512_cmplt_epi32_mask(key, _mm512_set1_epi32(hi));
      // The scalar path's order: the score rounded (s * mul), then (score - LSE) * log2e, capped at 0.
      const __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(in, srow + c), mul_v), lse_v);
      const __m512 p = exp2_vector(_mm512_min_ps(_mm512_set1_ps(0.0f), _mm512_mul_ps(x, log2e)));
      const __m512 g = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(in, dsrow + c), delta_v));
      _mm512_mask_storeu_ps(srow + c, in, _mm512_maskz_mov_ps(visible, p));
      _mm512_mask_storeu_ps(dsrow + c, in, _mm512_maskz_mov_ps(visible, _mm512_mul_ps(g, scale_v)));
    }
  }
}

bool avx512_softmax_available() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return available;
}

void online_softmax_step_avx512(int64_t rows, int64_t cols, float* s, float mul, float* m, float* l, float* alpha,
                                uint16_t* p16, float* o, int64_t dv) {
  if (p16 != nullptr)
    step<true>(rows, cols, s, mul, m, l, alpha, p16, o, dv);
  else
    step<false>(rows, cols, s, mul, m, l, alpha, nullptr, o, dv);
}

}  // namespace flashtile::cpu
