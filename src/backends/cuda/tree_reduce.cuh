// A reduction over a thread's registers in a tree rather than a chain (the sm90 forward's softmax: row max and sum).
#pragma once

namespace flashtile::cuda {

// v[0] = op over v[0..kWidth), as a tree of depth log2(kWidth) rather than a chain of kWidth dependent operations:
// a thread's share of a score row is 16 values at kBlockN = 128, and each FMNMX or FADD of a chain waits out the
// latency of the one before it.
template <int kWidth, class Op>
__device__ __forceinline__ float tree_reduce(float* v, Op op) {
  if constexpr (kWidth > 1) {
    constexpr int kHalf = (kWidth + 1) / 2;
#pragma unroll
    for (int m = 0; m < kWidth / 2; ++m) v[m] = op(v[m], v[m + kHalf]);
    return tree_reduce<kHalf>(v, op);
  } else {
    return v[0];
  }
}

}  // namespace flashtile::cuda
