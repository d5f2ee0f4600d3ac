// Device memory for the CUDA backends. The verify tooling keeps every tensor in host memory (the oracle reads
// it there), so a CUDA backend gets device copies of the same strided buffers and its outputs are copied
// back before they are checked. Built from device_cuda.cpp with FLASHTILE_ENABLE_CUDA=ON, else from
// device_none.cpp, whose answers say why no device can be used.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashtile/flashtile.hpp"

namespace flashtile::tool::device {

// True when this build has CUDA and a device is present; otherwise false and *why says which is missing.
bool available(std::string* why);

// The name of device 0, where the tool puts CUDA tensors ("NVIDIA H200"); call only when available().
std::string name();

// Device copies of host tensor views, freed with the object. A copy spans the view's whole strided extent
// (padding included), so the device view keeps the host view's strides.
class Mirror {
 public:
  Mirror() = default;
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;
  ~Mirror();

  // A device tensor holding the contents of `host` (nothing allocated for a view without data).
  Status upload(const Tensor& host, Tensor* on_device);
  // Copies a device tensor made by upload() back into the host view it came from.
  Status download(const Tensor& on_device, const Tensor& host) const;

 private:
  std::vector<void*> buffers_;
};

// Milliseconds `call` takes on the device's default stream, from CUDA events recorded around it.
Status time_ms(const std::function<Status()>& call, double* ms);

}  // namespace flashtile::tool::device
