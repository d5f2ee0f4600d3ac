// Division of non-negative ints by a divisor fixed for a whole call, as a multiply-high and a shift. The CUDA
// forward kernels split each work tile's number into (query block, batch, head) with four such divisions per
// tile (fwd_tile_order.cuh); by a runtime divisor each one compiles to a ~20-instruction sequence (I2F, MUFU.RCP,
// F2I, IMADs, fix-ups), which the sm80 kernel's persistent D = 256 row ran three times a block in every warp
// (docs/perf-log.md, sm80 forward v29). Plain C++ (host and device), so that the CPU test suite checks it against
// / and % (tests/backends/cuda/fast_divisor_test.cpp).
//
// The method: for 0 <= n < 2^31 and 1 <= d < 2^31, with l = ceil(log2 d) and p = 31 + l, the multiplier
// m = ceil(2^p / d) fits in 32 bits, and floor(n * m / 2^p) = floor(n / d): writing m = (2^p + e) / d with
// 0 <= e < d, the error n * e / (d * 2^p) is below 1 / d because n * e < 2^31 * 2^l, and it cannot carry the
// quotient past the next multiple of 1 / d. For d >= 2 (p >= 32) the quotient is the product's high word shifted
// by p - 32; d = 1 (m would be 2^31 with p = 31) is its own case.
#pragma once

#include <cstdint>

#include "backends/cuda/host_device.hpp"

namespace flashtile::cuda {

struct FastDivisor {
  int divisor = 1;
  uint32_t multiplier = 0;  // ceil(2^p / divisor); 0 for divisor 1
  uint32_t shift = 0;       // p - 32

  // d >= 1 (host). d = 0 (the query blocks or heads of an empty problem, which no kernel splits a tile number of)
  // gives a divisor that must not be used.
  static FastDivisor of(int d) {
    FastDivisor f;
    f.divisor = d;
    if (d <= 1) return f;
    int l = 0;
    while ((int64_t{1} << l) < d) ++l;
    const int p = 31 + l;
    const uint64_t divisor = static_cast<uint64_t>(d);
    f.multiplier = static_cast<uint32_t>(((uint64_t{1} << p) + divisor - 1) / divisor);
    f.shift = static_cast<uint32_t>(p - 32);
    return f;
  }

  // n / divisor for 0 <= n < 2^31.
  FLASHTILE_HOST_DEVICE int div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(u, multiplier);
#else
    const uint32_t high = static_cast<uint32_t>((static_cast<uint64_t>(u) * multiplier) >> 32);
#endif
    return multiplier == 0 ? n : static_cast<int>(high >> shift);
  }
  // n % divisor for 0 <= n < 2^31.
  FLASHTILE_HOST_DEVICE int mod(int n) const { return n - div(n) * divisor; }
};

}  // namespace flashtile::cuda
