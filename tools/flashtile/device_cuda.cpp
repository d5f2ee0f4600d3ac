// Built when FLASHTILE_ENABLE_CUDA=ON: device copies and CUDA-event timing for the CUDA backends.
#include <cuda_runtime.h>

#include "device.hpp"

namespace flashtile::tool::device {

namespace {

Status cuda_error(const std::string& what, cudaError_t err) {
  return {StatusCode::kDeviceError, what + ": " + cudaGetErrorString(err)};
}

// Bytes from a view's first element to one past its last. The tool only builds views with non-negative
// strides (verify::Layout), so the first element is at data.
size_t extent_bytes(const Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) return 0;
    last += (t.shape[d] - 1) * t.stride[d];
  }
  return static_cast<size_t>(last + 1) * dtype_size(t.dtype);
}

}  // namespace

bool available(std::string* why) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("CUDA built in, but no usable device (") + cudaGetErrorString(err) + ")";
    return false;
  }
  if (count == 0) {
    *why = "CUDA built in, but no device";
    return false;
  }
  return true;
}

std::string name() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "unknown";
}

Mirror::~Mirror() {
  for (void* p : buffers_) cudaFree(p);
}

Status Mirror::upload(const Tensor& host, Tensor* on_device) {
  *on_device = host;
  on_device->device = Device::kCUDA;
  on_device->device_index = 0;
  const size_t bytes = extent_bytes(host);
  if (host.data == nullptr || bytes == 0) return {};
  void* p = nullptr;
  if (cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess)
    return cuda_error("cudaMalloc of " + std::to_string(bytes) + " bytes", err);
  buffers_.push_back(p);
  if (cudaError_t err = cudaMemcpy(p, host.data, bytes, cudaMemcpyHostToDevice); err != cudaSuccess)
    return cuda_error("copy to the device", err);
  on_device->data = p;
  return {};
}

Status Mirror::download(const Tensor& on_device, const Tensor& host) const {
  const size_t bytes = extent_bytes(host);
  if (host.data == nullptr || bytes == 0) return {};
  if (cudaError_t err = cudaMemcpy(host.data, on_device.data, bytes, cudaMemcpyDeviceToHost); err != cudaSuccess)
    return cuda_error("copy from the device", err);
  return {};
}

Status time_ms(const std::function<Status()>& call, double* ms) {
  cudaEvent_t start, stop;
  if (cudaError_t err = cudaEventCreate(&start); err != cudaSuccess) return cuda_error("cudaEventCreate", err);
  if (cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess) {
    cudaEventDestroy(start);
    return cuda_error("cudaEventCreate", err);
  }
  cudaEventRecord(start, nullptr);
  Status s = call();
  cudaEventRecord(stop, nullptr);
  cudaError_t err = cudaEventSynchronize(stop);
  float elapsed = 0;
  if (err == cudaSuccess) err = cudaEventElapsedTime(&elapsed, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!s.ok()) return s;
  if (err != cudaSuccess) return cuda_error("timing with CUDA events", err);
  *ms = elapsed;
  return {};
}

}  // namespace flashtile::tool::device
