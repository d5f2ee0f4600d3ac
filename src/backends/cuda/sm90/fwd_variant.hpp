// Which variant of its head dim's sm90 forward a call takes (fwd_launch.cuh; the variants: fwd_config.hpp), from
// the call's kernel parameters. Host code in a plain header, so that the rule is checked on the CPU
// (tests/backends/cuda/fwd_variant_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cuda/fwd_kernel_params.hpp"

namespace flashtile::cuda::sm90 {

// The keys the middle query row sees: seqlen_k without a mask, about half of them under a causal mask on a
// square, the window's width under a sliding window.
inline int64_t middle_row_keys(const FwdKernelParams& f) {
  const int64_t mid = f.seqlen_q / 2;
  const int64_t first = std::max<int64_t>(0, mid + f.key_offset - f.window_left);
  const int64_t last = std::min<int64_t>(int64_t{f.seqlen_k} - 1, mid + f.key_offset + f.window_right);
  return std::max<int64_t>(0, last - first + 1);
}

// Whether a call takes its head dim's long variant (FwdConfig::kConsumersLong; at D = 64 three consumer
// warpgroups, `long_block_m` = 192 query rows a tile, against `block_m` = 128): where the middle query row sees
// at least 2048 keys, there is a long tile for every SM, the long tiles pad the query rows by at most 5% more than
// the ordinary ones (a decode-like call, a few query rows against many keys, would run 1.5x the products for the
// same rows), and there is no softcap (the long variant has no softcap kernel: it spilled at 160 registers a
// thread). Measured at D = 64 against the 128-row tiles (grid A bf16, docs/perf-log.md, sm90 forward v18): full
// S >= 2048 +7-15%, causal S >= 4096 +3-13% (where the middle row sees S / 2 keys); full S <= 1024 -1 to -3%,
// causal S <= 2048 -3 to -16%. Padding and tile count are not measured limits: they keep the variant off shapes
// unlike the measured ones.
inline bool use_long_variant(const FwdKernelParams& f, int sms, int block_m, int long_block_m) {
  constexpr int64_t kMinKeys = 2048;
  if (f.softcap > 0) return false;
  const int64_t long_blocks = (int64_t{f.seqlen_q} + long_block_m - 1) / long_block_m;
  const int64_t padded_rows = (int64_t{f.seqlen_q} + block_m - 1) / block_m * block_m;
  const bool little_padding = 20 * long_blocks * long_block_m <= 21 * padded_rows;
  return middle_row_keys(f) >= kMinKeys && little_padding && long_blocks * f.batch * f.heads_q >= sms;
}

}  // namespace flashtile::cuda::sm90
