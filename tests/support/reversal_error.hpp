// How far a tensor written or read with its sequence back to front (a negative row stride, which SPEC.md allows)
// lands from the same tensor in order, reversed. Header-only: the GPU test binaries that the device scripts build
// by hand (scripts/device_options.sh) do not link the test support library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace flashtile::test {

struct ReversalError {
  double worst = 0;  // the largest |reversed - ahead| over matching elements
  double scale = 0;  // the largest |ahead|
};

// reversed and ahead: BSHD data as doubles, (batch, seqlen, row) with `row` elements per sequence position (every
// head's); position s of reversed is compared with position seqlen - 1 - s of ahead.
inline ReversalError reversal_error(const std::vector<double>& reversed, const std::vector<double>& ahead,
                                    int64_t batch, int64_t seqlen, int64_t row) {
  ReversalError e;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seqlen; ++s)
      for (int64_t i = 0; i < row; ++i) {
        const double x = reversed[(b * seqlen + s) * row + i], y = ahead[(b * seqlen + seqlen - 1 - s) * row + i];
        e.worst = std::max(e.worst, std::fabs(x - y));
        e.scale = std::max(e.scale, std::fabs(y));
      }
  return e;
}

}  // namespace flashtile::test
