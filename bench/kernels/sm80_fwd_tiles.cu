// Development harness: the sm80 forward kernel under other tile configurations than fwd_config.hpp's, timed
// side by side on one GPU (CUDA events, median of 20 after warm-up), each checked against the library's
// configuration for agreement. Not part of the library; results and decisions go to docs/perf-log.md.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/kernels/sm80_fwd_tiles.cu
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cuda/sm80/fwd_kernel.cuh"

using namespace flashtile::cuda;
using namespace flashtile::cuda::sm80;

template <int kBlockN_, int kNWarps_, int kMSlices_, int kStages_>
struct Tiles {
  static constexpr int kBlockN = kBlockN_, kNWarps = kNWarps_, kMSlices = kMSlices_, kStages = kStages_;
};

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                             \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

struct Problem {
  int batch, seqlen, heads, dim;
  bool causal;
};

template <typename Traits>
float time_variant(const Problem& pr, const void* q, const void* k, const void* v, void* o, float* lse) {
  FwdKernelParams p{};
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
  const int64_t row = int64_t(pr.heads) * pr.dim, batch = row * pr.seqlen;
  for (int64_t* st : {p.q_stride, p.k_stride, p.v_stride, p.o_stride}) st[0] = batch, st[1] = row, st[2] = pr.dim;
  p.lse_stride[0] = int64_t(pr.heads) * pr.seqlen, p.lse_stride[1] = pr.seqlen, p.lse_stride[2] = 1;
  p.batch = pr.batch, p.heads_q = pr.heads, p.group = 1, p.seqlen_q = p.seqlen_k = pr.seqlen, p.head_dim = pr.dim;
  p.key_offset = 0, p.window_left = 2 * pr.seqlen, p.window_right = pr.causal ? 0 : 2 * pr.seqlen;
  p.scale_log2 = 1.4426950408889634f / std::sqrt(float(pr.dim));
  p.m_blocks = (pr.seqlen + Traits::kBlockM - 1) / Traits::kBlockM;
  auto kernel = fwd_kernel<Traits, __nv_bfloat16, false, kV2>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  const unsigned blocks = unsigned(p.m_blocks) * pr.batch * pr.heads;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 25; ++i) {
    CHECK(cudaEventRecord(a));
    kernel<<<blocks, Traits::kThreads, Traits::kSmemBytes>>>(p);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 5) ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <int D, typename Config>
void run(const char* name, const Problem& pr, const void* q, const void* k, const void* v, void* o, float* lse,
         const std::vector<uint16_t>* reference) {
  using Traits = FwdTraits<D, Config>;
  const size_t n = size_t(pr.batch) * pr.seqlen * pr.heads * pr.dim;
  CHECK(cudaMemset(o, 0xff, n * 2));
  const float ms = time_variant<Traits>(pr, q, k, v, o, lse);
  std::vector<uint16_t> out(n);
  CHECK(cudaMemcpy(out.data(), o, n * 2, cudaMemcpyDeviceToHost));
  size_t differ = 0;
  if (reference)
    for (size_t i = 0; i < n; ++i) differ += out[i] != (*reference)[i];
  const double flops = 4.0 * pr.batch * pr.heads * double(pr.seqlen) * pr.seqlen * pr.dim / (pr.causal ? 2 : 1);
  std::printf("D%-3d S%-5d %-6s %-28s %8.3f ms %7.1f TFLOP/s  smem %3d KB  %s\n", D, pr.seqlen,
              pr.causal ? "causal" : "full", name, ms, flops / ms / 1e9, Traits::kSmemBytes / 1024,
              reference ? (differ ? "outputs differ from the table's config (rounding order)" : "bitwise equal")
                        : "(the table's config)");
}

// The library's row for D on the machine this runs on (the H200: FwdConfigHopper) is the reference.
template <int D, typename... Configs>
void sweep(const Problem& pr, const char* const* names) {
  const size_t n = size_t(pr.batch) * pr.seqlen * pr.heads * pr.dim;
  std::vector<uint16_t> host(n);
  uint32_t x = 12345;
  for (auto& h : host) {  // bf16 of a roughly normal value from a small LCG: no zeros
    x = x * 1664525u + 1013904223u;
    const float f = (float((x >> 8) & 0xffff) / 65536.0f - 0.5f) * 3.4f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h = uint16_t(u >> 16);
  }
  void *q, *k, *v, *o;
  float* lse;
  for (void** p : {&q, &k, &v, &o}) CHECK(cudaMalloc(p, n * 2));
  CHECK(cudaMalloc(&lse, size_t(pr.batch) * pr.heads * pr.seqlen * 4));
  for (void* p : {q, k, v}) CHECK(cudaMemcpy(p, host.data(), n * 2, cudaMemcpyHostToDevice));
  run<D, FwdConfigHopper<D>>("table", pr, q, k, v, o, lse, nullptr);
  std::vector<uint16_t> ref(n);
  CHECK(cudaMemcpy(ref.data(), o, n * 2, cudaMemcpyDeviceToHost));
  int i = 0;
  (run<D, Configs>(names[i++], pr, q, k, v, o, lse, &ref), ...);
  for (void* p : {q, k, v, o}) CHECK(cudaFree(p));
  CHECK(cudaFree(lse));
}

int main() {
  static const char* const names128[] = {"N32 4 warps x 2 slices 2 stages", "N64 8 warps x 1 slice 2 stages",
                                         "N32 8 warps x 1 slice 2 stages"};
  for (bool causal : {false, true})
    for (int s : {512, 2048, 16384})
      sweep<128, Tiles<32, 4, 2, 2>, Tiles<64, 8, 1, 2>, Tiles<32, 8, 1, 2>>({16384 / s * 2, s, 16, 128, causal},
                                                                              names128);
  static const char* const names64[] = {"N128 4 warps x 2 slices 2 stages", "N64 8 warps x 1 slice 2 stages"};
  for (bool causal : {false, true})
    for (int s : {512, 4096})
      sweep<64, Tiles<128, 4, 2, 2>, Tiles<64, 8, 1, 2>>({16384 / s * 2, s, 32, 64, causal}, names64);
  static const char* const names256[] = {"N32 4 warps x 1 slice 2 stages", "N64 8 warps x 1 slice 1 stage",
                                         "N64 4 warps x 1 slice 2 stages", "N32 8 warps x 1 slice 2 stages"};
  for (bool causal : {false, true})
    for (int s : {512, 4096, 16384})
      sweep<256, Tiles<32, 4, 1, 2>, Tiles<64, 8, 1, 1>, Tiles<64, 4, 1, 2>, Tiles<32, 8, 1, 2>>(
          {16384 / s, s, 8, 256, causal}, names256);
  return 0;
}
