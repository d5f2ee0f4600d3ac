// Mirrors HostTensors to CUDA device memory and back, whole allocations at a time (guard bands and poison
// included), so that GPU runs go through the same checks as CPU runs. Built without CUDA, available() is false.
#pragma once

#include <map>
#include <string>

#include "verify/verify.hpp"

namespace flashtile::verify {

class DeviceMirror {
 public:
  static bool available(std::string* why);
  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror();
  // The device view of t; its allocation is copied to the device on first use (views sharing an allocation,
  // like packed qkv, share one device copy).
  Tensor view(const HostTensor& t);
  // Waits for the device and copies every mirrored allocation back over its host copy. False on a CUDA error.
  bool copy_back(std::string* error);

 private:
  struct Mirror {
    std::shared_ptr<std::vector<uint8_t>> host;
    void* device = nullptr;
  };
  std::map<const void*, Mirror> mirrors_;
};

}  // namespace flashtile::verify
