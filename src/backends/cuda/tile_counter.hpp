// The tile counters of the sm90 forward: each launch gets a zeroed int of device memory that its persistent CTAs
// take their next tile from by atomicAdd (fwd_kernel.cuh), so a CTA that finishes early takes more tiles. The
// kernel leaves its counter zeroed again: every CTA takes exactly one number past the last tile, and the CTA that
// takes the very last number (tiles - 1, counting from 0) knows no other CTA will touch the word again and stores
// 0. So the counters need no memset per launch (a memset node costs ~2 us, against a 100 us kernel at S = 512).
//
// The counters are a ring of kTileCounters ints in the module of each translation unit that includes this header
// (one per sm90 forward instantiation: fwd_launch.cuh), which CUDA zeroes when it loads the module on a device,
// again after a cudaDeviceReset: no allocation, nothing to free, nothing left dangling. Launches that may run at
// the same time must not share a counter: each launch takes the next one in turn, so a counter is reused only
// after kTileCounters later launches of the same instantiation, far more than a device queues. A launch captured
// into a CUDA graph gets none (and walks the snake): the graph would keep its counter for every replay, and a
// replay could run beside the launch that reuses it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace flashtile::cuda {

constexpr int kTileCounters = 1 << 16;  // 256 KB of device memory an instantiation

// static: each translation unit has its own ring (and claim_tile_counter its own turn through it).
static __device__ int tile_counter_ring[kTileCounters];

// A zeroed counter for one launch on `stream` (of the current device), or nullptr where none is to be had (the
// stream is being captured, or cannot say): the caller then walks the tiles in a fixed order.
static inline int* claim_tile_counter(cudaStream_t stream) {
  static std::atomic<unsigned> next{0};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. the legacy stream while another stream is captured: not an error of ours
    return nullptr;
  }
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  void* ring = nullptr;
  if (cudaGetSymbolAddress(&ring, tile_counter_ring) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return static_cast<int*>(ring) + next.fetch_add(1, std::memory_order_relaxed) % kTileCounters;
}

}  // namespace flashtile::cuda
