// What the CUDA backward kernels need: the forward's view of q, k, v, o, lse and the mask (FwdKernelParams),
// plus the gradients' tensors and the workspace (D = rowsum(dO * O), the fp32 dQ accumulator, and the counts that
// order its additions in the sm90 kernels' deterministic mode).
#pragma once

#include <cstdint>

#include "backends/cuda/fwd_kernel_params.hpp"

namespace flashtile::cuda {

struct BwdKernelParams {
  FwdKernelParams fwd;  // q, k, v, o, lse (required), strides, sizes, mask, scales
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  int64_t dout_stride[3], dq_stride[3], dk_stride[3], dv_stride[3];  // batch, row, head
  int heads_kv;
  float scale;   // the softmax scale itself: dS carries it into dQ and dK
  float* delta;     // workspace: D = rowsum(dO * O), (batch, heads_q, seqlen_q) dense; for the sm90 kernels
                    // (batch, heads_q, seqlen_q rounded up to 128), as lse_log2 (sm90/bwd_kernel.cuh)
  float* lse_log2;  // workspace, sm90 only: the LSE in log2 units, laid out as delta there
  int64_t delta_head_stride;  // floats from one (batch, head)'s rows of delta to the next, set by the launcher
                              // that lays D out: seqlen_q (sm80), or seqlen_q rounded up to 128 (sm90)
  float* dq_accum;  // workspace: dQ in fp32, (batch, heads_q, rows, head_dim), rows = seqlen_q, or padded to a
                    // multiple of 16 in the sm80 fragment order (sm80/dq_accum.hpp); nullptr in the sm80 kernels'
                    // deterministic mode (their dQ kernel needs none)
  int* dq_turns;    // workspace, the sm90 kernels' deterministic mode: per (batch, heads_q, 64 rows of
                    // bwd_padded_rows) the count of dQ additions done there, so that they happen in key block order
                    // (zeroed by the prep kernel; sm90/bwd_kernel.cuh); nullptr otherwise
  int* tile_counter;  // workspace, sm90 only: the persistent grid's count of tiles handed out (beyond its first
                     // round, except in the deterministic mode; zeroed by the prep kernel; sm90/bwd_kernel.cuh)
  int smem_limit;   // bytes of shared memory a block may use on this device (the launcher picks a row that fits)
  int n_blocks;     // key blocks per (batch, K/V head), set by the launcher from the row it picks
  int tail_heads;   // sm90: how many of the last (batch, K/V head)s have their tiles numbered key block major
                    // (set by the launcher; sm90/bwd_kernel.cuh, BwdTile)
  bool prefetch;    // two step buffers: a step's tiles load while the previous step's products run (set by the
                    // launcher where that keeps the CTAs per SM; sm80/bwd_launch.cuh)
};

// Resolves a validated backward call (bwd_kernel_params for the sm80 kernels, cuda_backend.cpp).
BwdKernelParams make_bwd_params(const BackwardParams& params, const Problem& problem, int block_m, int smem_limit,
                                float* delta, float* dq_accum, int* dq_turns);

}  // namespace flashtile::cuda
