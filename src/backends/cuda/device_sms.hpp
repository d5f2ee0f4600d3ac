// The current device's multiprocessor count, which sizes the persistent grids (the sm80 forward's persistent rows,
// the sm90 forward and backward). The launchers ask on every call: an attribute query, well under a microsecond.
#pragma once

#include <cuda_runtime.h>

namespace flashtile::cuda {

inline cudaError_t current_device_sms(int* sms) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
}

}  // namespace flashtile::cuda
