// The online-softmax step of the CPU forward in AVX-512: one pass over each row of a score tile instead of the
// generic path's five (scale, max, shift, exp2, sum), which also writes P in the format the next product takes
// (bf16 for the bf16 fast path of gemm_bf16.hpp, fp32 in place otherwise) and rescales O. Same arithmetic as
// flash_forward.cpp's online_softmax_step and tile_ops.hpp's exp2_inplace; only the order of the row sum differs.
#pragma once

#include <cstdint>

namespace flashtile::cpu {

// True when this CPU has the AVX-512 subsets the step needs (F, BW, VL, DQ: every AVX-512 CPU since Skylake-SP).
// With p16 given it also needs AVX512-BF16, which every CPU with a bf16 kernel (gemm_bf16.hpp) has.
bool avx512_softmax_available();

// s (rows x cols, `cols` floats apart): raw products of a tile, each times `mul` giving the score in natural
// units (-inf hides a key). Per row r: m[r] becomes max(m[r], the row's scores), alpha[r] = exp(m_old - m_new),
// l[r] = l[r] * alpha[r] + sum of P, with P = exp(s - m_new) written to p16 (rows x cols, bf16, rounded to
// nearest even) or, with p16 null, over s as fp32; and o's row (dv floats; o may be null) multiplied by alpha[r].
// A row that has seen no key keeps m = -inf and gets P = 0; a NaN score gives a NaN P and so a NaN l, as on the
// generic path.
void online_softmax_step_avx512(int64_t rows, int64_t cols, float* s, float mul, float* m, float* l, float* alpha,
                                uint16_t* p16, float* o, int64_t dv);

// The backward's step for one tile pair without a softcap, in one pass: from the raw products s (rows x cols)
// and dP in ds, P = exp(min(s * mul - lse[r], 0)) over s and dS = P * (dP - delta[r]) * scale over ds, both
// exactly 0 outside each row's visible keys [begin[r], end[r]) (begin and end null: every key). The same
// arithmetic as flash_backward.cpp's probabilities_and_ds (a NaN stays NaN where visible).
void backward_probabilities_avx512(int64_t rows, int64_t cols, float* s, float* ds, float mul, const float* lse,
                                   const float* delta, float scale, const int32_t* begin, const int32_t* end);

}  // namespace flashtile::cpu
