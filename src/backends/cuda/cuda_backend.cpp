// Host side of the CUDA backends: device checks and kernel selection. Kernels live under sm80/ and sm90/.
#include "backends/cuda/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "api/validate.hpp"

namespace flashtile::cuda {

namespace {

struct Named {
  const char* name;
  const Tensor* tensor;
};

Status device_error(const std::string& what, cudaError_t err) {
  return {StatusCode::kDeviceError, what + ": " + cudaGetErrorString(err)};
}

// Every non-empty tensor must be memory the given device can address: device memory of that device, or
// managed memory. A host pointer labelled CUDA is refused here instead of faulting inside a kernel.
Status check_device_pointers(const std::vector<Named>& tensors, int device) {
  for (const Named& n : tensors) {
    if (n.tensor->data == nullptr) continue;
    cudaPointerAttributes attr{};
    cudaError_t err = cudaPointerGetAttributes(&attr, n.tensor->data);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return invalid_argument(std::string(n.name) + ": pointer is not known to CUDA (" + cudaGetErrorString(err) + ")");
    }
    if (attr.type == cudaMemoryTypeManaged) continue;
    if (attr.type != cudaMemoryTypeDevice)
      return invalid_argument(std::string(n.name) + ": labelled as on CUDA device " + std::to_string(device) +
                              " but the pointer is host memory");
    if (attr.device != device)
      return invalid_argument(std::string(n.name) + ": labelled as on CUDA device " + std::to_string(device) +
                              " but the memory belongs to device " + std::to_string(attr.device));
  }
  return {};
}

Status select_common(const std::vector<Named>& tensors, int device, Backend requested, Backend* chosen) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    return device_error("no usable CUDA device", err);
  }
  if (device < 0 || device >= count)
    return invalid_argument("q: CUDA device index " + std::to_string(device) + " does not exist (" +
                            std::to_string(count) + " devices)");
  if (Status s = check_device_pointers(tensors, device); !s.ok()) return s;
  (void)requested;
  (void)chosen;
  return unsupported("no CUDA attention kernel is built into this version of flashtile yet; pass CPU tensors");
}

}  // namespace

bool compiled() { return true; }

Status select(const ForwardParams& params, const Problem&, bool, Backend* chosen) {
  return select_common({{"q", &params.q}, {"k", &params.k}, {"v", &params.v}, {"out", &params.out},
                        {"lse", &params.lse}},
                       params.q.device_index, params.backend, chosen);
}

Status select(const BackwardParams& params, const Problem&, bool, Backend* chosen) {
  return select_common({{"q", &params.q}, {"k", &params.k}, {"v", &params.v}, {"out", &params.out},
                        {"lse", &params.lse}, {"dout", &params.dout}, {"dq", &params.dq}, {"dk", &params.dk},
                        {"dv", &params.dv}},
                       params.q.device_index, params.backend, chosen);
}

Status forward(const ForwardParams&, const Problem&, Backend backend) {
  return unsupported(std::string("backend ") + backend_name(backend) + " has no forward kernel yet");
}

Status backward(const BackwardParams&, const Problem&, Backend backend) {
  return unsupported(std::string("backend ") + backend_name(backend) + " has no backward kernel yet");
}

size_t backward_workspace_size(const Problem&, Backend) { return 0; }

}  // namespace flashtile::cuda
