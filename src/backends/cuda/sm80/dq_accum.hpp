// The sm80 backward's fp32 dQ accumulator (BwdKernelParams::dq_accum, default mode): its orders, and the rows a
// head it takes. Plain C++ (host and device): the workspace (cuda_backend.cpp) is sized from it.
#pragma once

#include <cstdint>

#include "backends/cuda/host_device.hpp"

namespace flashtile::cuda::sm80 {

// The dQ accumulator's order (the column kDqOrder). The sm90 backward adds a thread's wgmma fragments in the
// fragment order (sm90::BwdTraits::kDqOrder). The sm80 dK/dV kernel adds a thread's mma fragments (ptx.cuh):
// lane 4g + t holds rows g and g + 8 of a 16-row block, columns 2t and 2t + 1 of each 8-column block.
//   kPairInterleaved: rows of head_dim floats, each 16-column group with its two 8-column halves interleaved a pair at
//     a time, columns (2t, 2t + 1, 8 + 2t, 9 + 2t) at 4t .. 4t + 3, so that one 16-byte reduction (sm90:
//     red.global.add.v4.f32) adds a thread's four columns of two adjacent blocks, half the instructions of 8-byte
//     ones (the reductions of a step queue in the memory pipe: LG throttle was 13% of the stall samples at
//     D = 256 with 8-byte ones; v11 made the whole backward 4-10% faster, docs/perf-log.md). A trailing half
//     group (head dims that are 8 more than a multiple of 16) stays in the plain order. Its four values come
//     from two fragments, so each is first copied into four consecutive registers (the select of -0 for rows
//     past the sequence end does it), and instructions that reuse those registers wait for the reductions to
//     read them (v13 profile, D = 256).
//   kFragment: each 16-row x 8-column block of a head (rows from a multiple of 16) stored as one fragment, lane
//     4g + t's four floats (rows g, g + 8 of columns 2t, 2t + 1, in the accumulator registers' order) at
//     4 (4g + t), the blocks of a 16-row band in column order: one 16-byte reduction takes a fragment's four
//     accumulator registers as they are. A head's rows are padded to a multiple of 16
//     (dq_accum_fragment_rows, below), so rows past the sequence end add into the padding.
enum class DqAccumOrder { kPairInterleaved, kFragment };

// Rows a head of the accumulator in the fragment order: whole 16-row fragments. The workspace
// (backward_workspace_size) is sized for these, so it fits whichever order runs.
constexpr int64_t kDqAccumRowAlign = 16;
FLASHTILE_HOST_DEVICE constexpr int64_t dq_accum_fragment_rows(int64_t seqlen_q) {
  return (seqlen_q + kDqAccumRowAlign - 1) / kDqAccumRowAlign * kDqAccumRowAlign;
}

// Rows a head of the accumulator in an order: seqlen_q, padded in the fragment order.
FLASHTILE_HOST_DEVICE constexpr int64_t dq_accum_rows(int64_t seqlen_q, DqAccumOrder order) {
  return order == DqAccumOrder::kFragment ? dq_accum_fragment_rows(seqlen_q) : seqlen_q;
}

}  // namespace flashtile::cuda::sm80
