// Built instead of cuda_backend.cpp when FLASHTILE_ENABLE_CUDA=OFF: CUDA tensors get a clear refusal.
#include "api/validate.hpp"
#include "backends/cuda/cuda_backend.hpp"

namespace flashtile::cuda {

namespace {
Status not_built() {
  return unsupported("q is on a CUDA device, but this flashtile was built without CUDA "
                     "(configure with -DFLASHTILE_ENABLE_CUDA=ON, or pass CPU tensors)");
}
}  // namespace

bool compiled() { return false; }
Status select(const ForwardParams&, const Problem&, bool, Backend*) { return not_built(); }
Status select(const BackwardParams&, const Problem&, bool, Backend*) { return not_built(); }
Status forward(const ForwardParams&, const Problem&, Backend) { return not_built(); }
Status backward(const BackwardParams&, const Problem&, Backend) { return not_built(); }
size_t backward_workspace_size(const Problem&, Backend, bool) { return 0; }

}  // namespace flashtile::cuda
