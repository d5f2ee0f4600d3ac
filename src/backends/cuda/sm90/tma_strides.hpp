// The strides the sm90 launchers give their TMA descriptors. A header of its own so that the backward's
// translation units, which need only this, do not include the forward kernel (an edit of it rebuilt them).
#pragma once

#include <cstdint>

namespace flashtile::cuda::sm90 {

// A TMA descriptor needs every stride to be a multiple of 16 bytes, even where the extent is 1 and the stride
// is never used; the library's checks only cover extents above 1 (cuda_backend.cpp), so those get 8 elements.
// in, out: the (batch, seqlen, heads) strides in elements.
inline void tma_safe_strides(const int64_t (&in)[3], int batch, int seqlen, int heads, int64_t (&out)[3]) {
  const int extent[3] = {batch, seqlen, heads};
  for (int d = 0; d < 3; ++d) out[d] = extent[d] > 1 ? in[d] : 8;
}

}  // namespace flashtile::cuda::sm90
