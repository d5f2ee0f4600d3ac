// The tile counters of the sm90 forward: each launch gets a zeroed int of device memory that its persistent CTAs
// take their next tile from by atomicAdd (fwd_kernel.cuh), so a CTA that finishes early takes more tiles. The
// kernel leaves its counter zeroed again: every CTA takes exactly one number past the last tile, and the CTA that
// takes the very last number (tiles - 1, counting from 0) knows no other CTA will touch the word again and stores
// 0. So the counters need no memset per launch (a memset node costs ~2 us, against a 100 us kernel at S = 512).
//
// Launches that may run at the same time must not share a counter: each launch takes the next of kTileCounters
// ints of its device in turn (a ring, zeroed once when first used), so a counter is reused only after as many
// later launches, far more than a device queues. A launch captured into a CUDA graph gets none (the snake): the
// graph would keep its counter for every replay, and a replay could run beside the launch that reuses it.
// Header-only: the benchmark harness (bench/kernels/sm90_fwd_wgmma.cu) includes the launcher without the library.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>

namespace flashtile::cuda {

constexpr int kTileCounters = 1 << 16;  // 256 KB a device
constexpr int kMaxCounterDevices = 64;

// A zeroed counter for one launch on `stream` (of the current device), or nullptr where none is to be had: the
// stream is being captured (or cannot say), or the device's ring could not be allocated. The caller then walks
// the tiles in a fixed order.
inline int* claim_tile_counter(cudaStream_t stream) {
  static std::mutex mutex;
  static int* rings[kMaxCounterDevices] = {};
  static std::atomic<unsigned> next[kMaxCounterDevices] = {};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. the legacy stream while another stream is captured: not an error of ours
    return nullptr;
  }
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxCounterDevices) return nullptr;
  int* ring = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (rings[device] == nullptr) {
      // Relaxed: another thread's capture in global mode must not make this allocation fail (and invalidate it).
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      cudaThreadExchangeStreamCaptureMode(&mode);
      int* memory = nullptr;
      cudaStream_t zeroing = nullptr;
      bool ok = cudaMalloc(&memory, kTileCounters * sizeof(int)) == cudaSuccess &&
                cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking) == cudaSuccess &&
                cudaMemsetAsync(memory, 0, kTileCounters * sizeof(int), zeroing) == cudaSuccess &&
                cudaStreamSynchronize(zeroing) == cudaSuccess;
      if (zeroing != nullptr) cudaStreamDestroy(zeroing);
      cudaThreadExchangeStreamCaptureMode(&mode);
      if (!ok) {
        if (memory != nullptr) cudaFree(memory);
        (void)cudaGetLastError();  // no sticky error from a failed allocation: the launch goes on without
        return nullptr;
      }
      rings[device] = memory;  // kept for the process's life
    }
    ring = rings[device];
  }
  return ring + next[device].fetch_add(1, std::memory_order_relaxed) % kTileCounters;
}

}  // namespace flashtile::cuda
