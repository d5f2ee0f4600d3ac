// The CUDA backends as the dispatcher sees them. With FLASHTILE_ENABLE_CUDA=OFF these are answered by
// cuda_disabled.cpp (every CUDA call is refused with a message saying so); with it ON, by cuda_backend.cpp.
#pragma once

#include "common/problem.hpp"

namespace flashtile::cuda {

bool compiled();

// Picks the CUDA kernel for a validated call whose tensors claim to be on a CUDA device, after checking
// that every pointer really is device memory of that device. `params` is a ForwardParams or BackwardParams.
Status select(const ForwardParams& params, const Problem& problem, bool backward, Backend* chosen);
Status select(const BackwardParams& params, const Problem& problem, bool backward, Backend* chosen);

// Run a call select() accepted (the dispatcher always selects first).
Status forward(const ForwardParams& params, const Problem& problem, Backend backend);
Status backward(const BackwardParams& params, const Problem& problem, Backend backend);
size_t backward_workspace_size(const Problem& problem, Backend backend, bool deterministic);

}  // namespace flashtile::cuda
