// FLASHTILE_HOST_DEVICE: marks a function of a header shared by the CUDA kernels and plain C++ (the host code,
// the CPU test suite) as callable on both sides; empty where no CUDA compiler reads it.
#pragma once

#if defined(__CUDACC__)
#define FLASHTILE_HOST_DEVICE __host__ __device__
#else
#define FLASHTILE_HOST_DEVICE
#endif
