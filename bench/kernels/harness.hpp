// What the kernel harnesses of this folder share: CUDA error checks, event timing, bf16 inputs, output comparison,
// cp.async row loads and the kernel parameters of a plain BSHD problem. Development code, not part of the library.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/fwd_kernel_params.hpp"

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

namespace harness {

// Sustained timing, as peers.py's do_bench and `flashtile bench` time: a call's time from three, ~50 ms of
// untimed calls, then per-call CUDA events over at least 200 ms (and 20 calls); the median. The GPU then runs at
// the clock its power limit allows under this kernel, as it does for the peers (docs/perf-log.md: a burst of 20
// calls read up to 10% faster than sustained).
template <typename Launch>
float median_ms(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time_one = [&] {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    return t;
  };
  float call_ms = 1e9f;
  for (int i = 0; i < 3; ++i) call_ms = std::min(call_ms, time_one());
  call_ms = std::max(call_ms, 1e-3f);
  for (int i = 0; i < int(50 / call_ms) + 1; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < std::max(20, int(200 / call_ms) + 1); ++i) ms.push_back(time_one());
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// n bf16 values, roughly uniform in [-1.7, 1.7), from a small LCG: no zeros, the same for the same seed.
inline std::vector<uint16_t> bf16_inputs(size_t n, uint32_t seed) {
  std::vector<uint16_t> host(n);
  for (auto& e : host) {
    seed = seed * 1664525u + 1013904223u;
    const float f = (float((seed >> 8) & 0xffff) / 65536.0f - 0.5f) * 3.4f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    e = uint16_t(u >> 16);
  }
  return host;
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Whether two device arrays of n values (bf16 as uint16_t, or fp32) agree: the largest |a - b|, the largest |b|,
// and how many of a are not finite (NaN: never written). They agree within 2% of b's largest value.
struct Agreement {
  double worst = 0, scale = 0;
  size_t non_finite = 0;
  bool ok() const { return non_finite == 0 && worst <= 0.02 * scale; }
};
inline float to_float(float x) { return x; }
inline float to_float(uint16_t bf16) { return bf16_to_float(bf16); }
template <typename A, typename B>
Agreement compare(const A* a_dev, const B* b_dev, size_t n) {
  std::vector<A> a(n);
  std::vector<B> b(n);
  CHECK(cudaMemcpy(a.data(), a_dev, n * sizeof(A), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), b_dev, n * sizeof(B), cudaMemcpyDeviceToHost));
  Agreement r;
  for (size_t i = 0; i < n; ++i) {
    const float fa = to_float(a[i]), fb = to_float(b[i]);
    if (!std::isfinite(fa)) ++r.non_finite;
    r.worst = std::max(r.worst, double(std::fabs(fa - fb)));
    r.scale = std::max(r.scale, double(std::fabs(fb)));
  }
  return r;
}

// Rows [row0, row0 + kRows) of one head (row stride `stride` elements, kHeadDim columns) into the shared tile
// `smem` ((rows, head dim), a CuTe tensor whose layout keeps 16-byte chunks contiguous, as the swizzles do) by
// cp.async from kThreads threads; rows past `rows` become zeros. The caller commits and waits.
template <int kRows, int kHeadDim, int kThreads, class SmemTensor, typename T>
__device__ void load_rows(SmemTensor smem, const T* head, int64_t stride, int row0, int rows) {
  constexpr int kChunks = kHeadDim / 8;
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < rows;
    const T* src = valid ? head + (row0 + r) * stride + c * 8 : head;
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(&smem(r, c * 8)));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
  }
}

// Kernel parameters for q, k, v, o contiguous BSHD (Sq = Sk, no GQA), full or causal, for a kernel of block_m
// query rows per CTA.
inline flashtile::cuda::FwdKernelParams bshd_params(const void* q, const void* k, const void* v, void* o,
                                                    float* lse, int batch, int seqlen, int heads, int dim,
                                                    bool causal, int block_m) {
  flashtile::cuda::FwdKernelParams p{};
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
  const int64_t row = int64_t(heads) * dim;
  for (int64_t* st : {p.q_stride, p.k_stride, p.v_stride, p.o_stride}) st[0] = row * seqlen, st[1] = row, st[2] = dim;
  p.lse_stride[0] = int64_t(heads) * seqlen, p.lse_stride[1] = seqlen, p.lse_stride[2] = 1;
  p.batch = batch, p.heads_q = heads, p.group = 1, p.seqlen_q = p.seqlen_k = seqlen, p.head_dim = dim;
  p.key_offset = 0, p.window_left = 2 * seqlen, p.window_right = causal ? 0 : 2 * seqlen;
  p.scale_log2 = 1.4426950408889634f / std::sqrt(float(dim));
  flashtile::cuda::set_query_blocks(p, (seqlen + block_m - 1) / block_m);
  return p;
}

}  // namespace harness
