// What the tool does with the CUDA runtime itself; device copies and the question "is a GPU usable" are
// verify's (DeviceMirror, cuda_available). Built from gpu_cuda.cpp with FLASHTILE_ENABLE_CUDA=ON, else from
// gpu_none.cpp, whose answers say that CUDA is not built in.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashtile/flashtile.hpp"

namespace flashtile::tool::gpu {

// The name of GPU 0, where verify::DeviceMirror puts tensors ("NVIDIA H200"); empty without CUDA.
std::string device_name();

// Bytes of GPU 0's L2 cache; 0 without CUDA.
int64_t l2_bytes();

// Milliseconds of each of `count` calls, call(0) .. call(count - 1), from CUDA events recorded around each on
// the default stream. The calls are queued back to back and waited for once at the end, so the host's work in
// one call (validation, the selector) overlaps the previous call's kernel instead of being counted as GPU time.
// Stops at the first call that fails.
Status time_calls(const std::function<Status(int)>& call, int count, std::vector<double>* ms);

// The seeds' ablation: the sm80 v2 forward, v2 with one of its changes undone, and the FA1 schedule built from
// the same pieces. The library never dispatches these, so the tool launches them itself (bf16, head dim 128).
enum class FwdVariant {
  kV2,
  kRescaleEveryStep,   // FA1's per-step normalisation of O by the running sum
  kSequentialQBlocks,  // FA1's grid: one CTA per (batch, head) walks all its query blocks
  kFlash1,             // FA1 itself: K/V outer loop, O/m/l rescaled through global memory every step
};

// Runs `variant` on params, whose tensors are on GPU 0 and already accepted by select_forward_backend for
// cuda-sm80. Asynchronous, on params.stream, like flashtile::forward.
Status forward_variant(FwdVariant variant, const ForwardParams& params);

}  // namespace flashtile::tool::gpu
