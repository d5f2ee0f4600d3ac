// The keys one query row sees, in the form the CUDA kernels' masked tiles test them. Plain C++ (host and device),
// so that the CPU test suite checks it against the mask's definition (tests/backends/cuda/visible_keys_test.cpp).
#pragma once

#include "backends/cuda/fwd_kernel_params.hpp"
#include "backends/cuda/host_device.hpp"

namespace flashtile::cuda {

// Query row q sees keys [q + key_offset - window_left, min(q + key_offset + window_right, seqlen_k - 1)]
// (FwdKernelParams). VisibleKeys holds that interval relative to the first key of a thread's fragment, so
// that key first_key + c is visible iff sees(c): two compares against the compile-time column offset c of each
// element, with the row's bounds computed once per row. The three-way test on absolute keys per element cost
// more instructions, and in the sm80 backward compiled to a branch per element (docs/perf-log.md, sm90 forward
// v6b and sm80 backward v7).
struct VisibleKeys {
  int lo, hi;

  VisibleKeys() = default;  // for arrays of rows, filled in on masked tiles only
  FLASHTILE_HOST_DEVICE VisibleKeys(const FwdKernelParams& p, int query, int first_key) {
    const int last = query + p.key_offset + p.window_right;
    lo = query + p.key_offset - p.window_left - first_key;
    hi = (last < p.seqlen_k - 1 ? last : p.seqlen_k - 1) - first_key;
  }
  // Two side-effect-free compares: the compiler makes them predicates, not branches (with & the sm80 backward
  // spilled more, with && as much: ptxas decides).
  FLASHTILE_HOST_DEVICE bool sees(int c) const { return c >= lo && c <= hi; }
};

// The same mask from a key's side, for the sm90 backward's transposed scores (keys on the rows): key k is seen
// by queries [k - key_offset - window_right, k - key_offset + window_left] while k < seqlen_k, and by none past
// it. QueriesSeeingKey holds that interval relative to the first query of a thread's fragment, so that query
// first_query + c sees the key iff sees(c).
struct QueriesSeeingKey {
  int lo, hi;

  QueriesSeeingKey() = default;  // for arrays of keys, filled in on masked tiles only
  FLASHTILE_HOST_DEVICE QueriesSeeingKey(const FwdKernelParams& p, int key, int first_query) {
    lo = key - p.key_offset - p.window_right - first_query;
    hi = key < p.seqlen_k ? key - p.key_offset + p.window_left - first_query : lo - 1;
  }
  FLASHTILE_HOST_DEVICE bool sees(int c) const { return c >= lo && c <= hi; }
};

}  // namespace flashtile::cuda

