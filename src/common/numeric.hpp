// Scalar conversions between the storage dtypes and float, shared by every CPU-side path (backends, oracle,
// tests). Round-to-nearest-even on narrowing, NaN kept NaN, overflow to +-inf, as the hardware does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashtile/flashtile.hpp"

namespace flashtile {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));              // inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));          // normal
  const float sub = static_cast<float>(man) * 5.9604644775390625e-8f;                    // man * 2^-24
  return sign ? -sub : sub;
}
inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                // rounds to >= 65520: inf
  if (a >= 0x38800000u) {                                     // normal half (>= 2^-14)
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return sign | static_cast<uint16_t>(r >> 13);
  }
  // Subnormal half: scale so the integer part is the mantissa, rounding to nearest even.
  const float x = bits_to_float(a) * 16777216.0f;             // * 2^24
  return sign | static_cast<uint16_t>(std::nearbyint(x));
}

inline float load_as_float(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[index];
    case DType::kFloat16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
  return NAN;
}

inline void store_from_float(void* base, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[index] = value; break;
    case DType::kFloat16: static_cast<uint16_t*>(base)[index] = float_to_fp16(value); break;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[index] = float_to_bf16(value); break;
  }
}

// Rounds a float to the precision of dtype (identity for fp32): what storing and reloading would give.
inline float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::kFloat32: return value;
    case DType::kFloat16: return fp16_to_float(float_to_fp16(value));
    case DType::kBFloat16: return bf16_to_float(float_to_bf16(value));
  }
  return NAN;
}

// Distance between adjacent representable values of dtype near |x| (one unit in the last place).
inline double ulp_of(DType dtype, double x) {
  const int mantissa_bits = dtype == DType::kFloat32 ? 23 : dtype == DType::kFloat16 ? 10 : 7;
  const int min_exp = dtype == DType::kFloat32 ? -126 : dtype == DType::kFloat16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mantissa_bits);
}

}  // namespace flashtile
