// The online softmax's per-row arithmetic, shared by the sm80 and sm90 kernels: max and sum over the 4 threads
// (lanes 4g..4g+3) that share a row of an MMA accumulator fragment (the layout of mma.sync m16n8k16 and of
// wgmma's accumulators alike), exp2 on the special-function unit, and the exponents' shift and cap.
#pragma once

#include <cmath>

namespace flashtile::cuda {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 2^x on the special-function unit (relative error ~2^-22; exact 0 for -inf). exp2f without fast math adds
// instructions for denormal results, which a probability that small does not need.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Huge logits. An exponent is one FFMA, S * scale_log2 - shift, whose product is exact while the shift is the row
// max's product rounded: the max's own exponent is not 0 but that rounding error r. Rounded to nearest, |r| reaches
// half a unit in the last place of max * scale_log2: from ~2^31 (|S| ~ 1e10 at D = 64..128) 2^r overflows (r >= 128:
// O = inf / inf) or flushes the whole row to 0 (r < -126: O = 0 / 0), from ~2^29 P = 2^r is inf in fp16 (r >= 16),
// and where the max did not move a rescale factor of 2^r compounds tile after tile: NaN rows from finite inputs.
// Hence the shift rounded down (softmax_shift: r >= 0) and, where the shift is that large, the exponents capped
// (exp2_capped, shift_needs_cap); the backward instead reads an LSE raised above its rounding (sm80::lse_log2).

// The shift of a row's exponents: max * scale_log2 rounded down (FMUL.RM, no dearer than the FMUL), so that the
// max's own exponent r is >= 0 and the row's sum l >= 1: never 0, and its LSE, max * scale_log2 + log2(l), is
// finite. A row with no key yet takes 0 (its scores are all -inf, and -inf - -inf would be NaN).
__device__ __forceinline__ float softmax_shift(float row_max, float scale_log2) {
  return __fmul_rd(row_max == -INFINITY ? 0.0f : row_max, scale_log2);
}

// The forward's cap on an exponent (exp2_capped). Above 0 lie only the max's own exponent (r, below a unit of
// max * scale_log2), those of the scores a unit of S below it (below half that: a unit of S is worth at least half a
// unit of max * scale_log2) and, under lazy rescaling, up to 8 (kRescaleThreshold) more, against a trailing max. So
// the cap acts only from |max * scale_log2| >= 2^26, where a unit of S is worth >= 4 in the exponent and fp32 S
// cannot weigh near ties to better than a factor 2^2 anyway. 15, not more: P enters P V in the input dtype, and
// fp16's largest value is 65504 < 2^16. 2^15 times up to 2^31 keys keeps the fp32 row sum far from overflow.
constexpr float kMaxExponent = 15.0f;

// Whether a row's exponents, from its shift, can exceed kMaxExponent and need exp2_capped: from 2^24. Below, the
// max's own exponent is under a unit in the last place of the shift (<= 1), and lazy rescaling (the sm90 forward)
// adds at most 8: P < 2^10. The forward kernels vote on it over the warp, so that their choice between the capped
// and the plain exponents is a uniform branch: always capped, the FMNMX a score cost the sm90 forward 3.5% over
// grid A's head dims (session 53, docs/perf-log.md). (The FA1 kernel, the v1 baseline, caps always.)
__device__ __forceinline__ bool shift_needs_cap(float shift) { return fabsf(shift) >= 16777216.0f; }

// 2^min(x, cap). min.NaN keeps a NaN exponent NaN (a NaN score must reach O and the LSE); fminf would give the
// cap. The caps: kMaxExponent for the forward's P; 0 for the forward's rescale factor 2^(old max * scale_log2 -
// shift), at most 1, whose max only grows (with the shift rounded down, a max that did not move has exponent
// r >= 0 and would scale O and l by 2^r tile after tile). The backward's P = 2^(S * scale_log2 - LSE) is kept <= 1
// by the LSE it reads instead (sm80::lse_log2).
__device__ __forceinline__ float exp2_capped(float x, float cap) {
  float y;
  asm("min.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(x), "f"(cap));
  return exp2_approx(y);
}

}  // namespace flashtile::cuda
