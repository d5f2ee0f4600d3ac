#include "verify/device_mirror.hpp"

#if FLASHTILE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashtile::verify {

#if FLASHTILE_WITH_CUDA

bool DeviceMirror::available(std::string* why) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

DeviceMirror::~DeviceMirror() {
  for (auto& [key, m] : mirrors_) cudaFree(m.device);
}

Tensor DeviceMirror::view(const HostTensor& t) {
  Tensor v = t.view();
  auto host = t.storage();
  if (!host) return v;
  auto it = mirrors_.find(host.get());
  if (it == mirrors_.end()) {
    Mirror m{host, nullptr};
    if (cudaMalloc(&m.device, host->size()) != cudaSuccess ||
        cudaMemcpy(m.device, host->data(), host->size(), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaGetLastError();
      return v;  // stays a CPU view: the call under test then fails validation, which the check reports
    }
    it = mirrors_.emplace(host.get(), m).first;
  }
  v.data = static_cast<uint8_t*>(it->second.device) + t.view_byte_offset();
  v.device = Device::kCUDA;
  v.device_index = 0;
  return v;
}

bool DeviceMirror::copy_back(std::string* error) {
  if (mirrors_.empty()) return true;  // nothing went to a device (a CPU run): no CUDA call at all
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    if (error) *error = std::string("CUDA error after the call: ") + cudaGetErrorString(err);
    return false;
  }
  for (auto& [key, m] : mirrors_)
    if (cudaError_t err = cudaMemcpy(m.host->data(), m.device, m.host->size(), cudaMemcpyDeviceToHost);
        err != cudaSuccess) {
      if (error) *error = std::string("copying results back: ") + cudaGetErrorString(err);
      return false;
    }
  return true;
}

#else

bool DeviceMirror::available(std::string* why) {
  if (why) *why = "flashtile was built without CUDA (FLASHTILE_ENABLE_CUDA=OFF)";
  return false;
}
DeviceMirror::~DeviceMirror() = default;
Tensor DeviceMirror::view(const HostTensor& t) { return t.view(); }
bool DeviceMirror::copy_back(std::string*) { return true; }

#endif

}  // namespace flashtile::verify
