// Development harness for the Hopper forward (issue 6): the library's sm90 kernel (src/backends/cuda/sm90: TMA
// producer warpgroup, two consumer warpgroups on wgmma) under its three schedules (fwd_config.hpp: serial;
// softmax overlapped with the previous tile's P V, the library's; that plus ping-pong between the warpgroups),
// and a step-0 variant without TMA or a producer (the same consumer math fed by cp.async from every thread),
// each checked against the library's sm80 kernel on the same inputs and timed beside it. A wrong layout shows as
// DIFFER; the columns say what TMA with a producer warpgroup, the overlap and the ping-pong buy. Head dim 128,
// bf16, full or causal attention.
//
// Not part of the library. Build here (CUTLASS headers from the pinned nvidia-cutlass wheel in .deps/):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//        -isystem .deps/cutlass_library/source/include bench/kernels/sm90_fwd_wgmma.cu \
//        -o build-device/sm90_fwd_wgmma
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cuda/sm80/fwd_kernel.cuh"
#include "backends/cuda/sm90/fwd_launch.cuh"
#include "harness.hpp"

namespace sm90_harness {

using namespace cute;
namespace lib = flashtile::cuda::sm90;
using Traits = lib::FwdTraits<cutlass::bfloat16_t, 128>;
using Element = Traits::Element;
constexpr int kHeadDim = Traits::kHeadDim, kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
constexpr int kThreads0 = Traits::kConsumers * 128;  // step 0 has no producer warpgroup
template <int kRows, class SmemTensor>  // all of step 0's threads copy (harness.hpp)
__device__ void load_rows(SmemTensor smem, const Element* head, int64_t stride, int row0, int rows) {
  harness::load_rows<kRows, kHeadDim, kThreads0>(smem, head, stride, row0, rows);
}

struct SharedStorage0 {
  alignas(1024) Element q[cosize_v<Traits::SmemLayoutQ>];
  alignas(1024) Element k[cosize_v<Traits::SmemLayoutKV>];
  alignas(1024) Element v[cosize_v<Traits::SmemLayoutKV>];
};

// Step 0: the library's consumer math (lib::Consumer) fed by cp.async from all threads, no producer, no TMA.
// Full attention or causal with Sq = Sk, no GQA: what the harness runs.
__global__ void __launch_bounds__(kThreads0, 1) fwd_wgmma_kernel(const flashtile::cuda::FwdKernelParams f) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SharedStorage0& smem = *reinterpret_cast<SharedStorage0*>(smem_raw);
  using flashtile::cuda::CtaBlock;
  const CtaBlock blk = CtaBlock::make<kBlockM, kBlockN>(f, static_cast<int>(blockIdx.x), false);  // a tile per CTA
  const Element* q = static_cast<const Element*>(f.q) + blk.b * f.q_stride[0] + blk.h * f.q_stride[2];
  const Element* k = static_cast<const Element*>(f.k) + blk.b * f.k_stride[0] + blk.hk * f.k_stride[2];
  const Element* v = static_cast<const Element*>(f.v) + blk.b * f.v_stride[0] + blk.hk * f.v_stride[2];
  auto sQ = cute::make_tensor(make_smem_ptr(smem.q), Traits::SmemLayoutQ{});
  auto sK = cute::make_tensor(make_smem_ptr(smem.k), Traits::SmemLayoutKV{});
  auto sV = cute::make_tensor(make_smem_ptr(smem.v), Traits::SmemLayoutKV{});
  auto sVt = cute::make_tensor(make_smem_ptr(smem.v), Traits::SmemLayoutVt{});

  load_rows<kBlockM>(sQ, q, f.q_stride[1], blk.row0, f.seqlen_q);
  load_rows<kBlockN>(sK(_, _, 0), k, f.k_stride[1], blk.n_first * kBlockN, f.seqlen_k);
  load_rows<kBlockN>(sV(_, _, 0), v, f.v_stride[1], blk.n_first * kBlockN, f.seqlen_k);
  asm volatile("cp.async.commit_group;\n" ::);

  const int wg = threadIdx.x / 128;
  lib::Consumer<Traits, false> c(threadIdx.x % 128, blk.row0 + 64 * wg);
  auto sQ_wg = local_tile(sQ, Shape<_64, Int<kHeadDim>>{}, make_coord(wg, 0));  // this warpgroup's 64 rows
  for (int n = blk.n_first; n <= blk.n_last; ++n) {
    const int stage = (n - blk.n_first) & 1;
    if (n < blk.n_last) {  // the other stage was last read by tile n - 1, finished before its barrier
      load_rows<kBlockN>(sK(_, _, stage ^ 1), k, f.k_stride[1], (n + 1) * kBlockN, f.seqlen_k);
      load_rows<kBlockN>(sV(_, _, stage ^ 1), v, f.v_stride[1], (n + 1) * kBlockN, f.seqlen_k);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);
    cutlass::arch::fence_view_async_shared();  // generic-proxy writes (cp.async) -> async-proxy reads (wgmma)
    __syncthreads();
    float alpha[2];
    const bool first_half = c.first_half_only(n * kBlockN, f);
    c.issue_scores(sQ_wg, sK(_, _, stage));
    c.template wait<0>();
    c.template softmax<true>(n * kBlockN, f, alpha);  // the mask on every tile: the harness checks, it does not race
    c.rescale_o(alpha);
    c.make_p();
    c.issue_accumulate(sVt(_, _, stage), first_half);
    c.template wait<0>();
    __syncthreads();  // both warpgroups are done with this stage before tile n + 2 loads into it
  }
  // The library's epilogue writes O / l into the tile's Q buffer for a TMA store; here every thread then copies
  // the 128 x D tile to global memory (rows past the sequence end left out), which is simpler and fast enough.
  __syncthreads();  // every product has read sQ
  float inv[2];
  c.finish_rows(f, blk.b, blk.h, inv);
  c.stage_o(sQ_wg, inv, threadIdx.x % 128);
  __syncthreads();
  Element* o = static_cast<Element*>(f.o) + blk.b * f.o_stride[0] + blk.h * f.o_stride[2];
  for (int i = threadIdx.x; i < kBlockM * kHeadDim; i += blockDim.x) {
    const int r = i / kHeadDim, col = i % kHeadDim;
    if (blk.row0 + r < f.seqlen_q) o[(blk.row0 + r) * f.o_stride[1] + col] = sQ(r, col);
  }
}

}  // namespace sm90_harness

// One problem: step 0, the library's sm90 kernel (step 1) and its sm80 kernel (Hopper row) on the same inputs,
// the sm90 outputs compared with the sm80 kernel's.
void run(int batch, int seqlen, int heads, bool causal) {
  using namespace flashtile::cuda;
  namespace h = sm90_harness;
  constexpr int D = h::kHeadDim;
  const size_t n = size_t(batch) * seqlen * heads * D;
  // q, k and v differ: with one tensor for all three, S is symmetric and a transposed product would agree too.
  const std::vector<uint16_t> inputs[3] = {harness::bf16_inputs(n, 2024), harness::bf16_inputs(n, 2025),
                                           harness::bf16_inputs(n, 2026)};
  void *q, *k, *v, *o0, *o1, *o2, *o3, *o80;
  float* lse;
  for (void** ptr : {&q, &k, &v, &o0, &o1, &o2, &o3, &o80}) CHECK(cudaMalloc(ptr, n * 2));
  CHECK(cudaMalloc(&lse, size_t(batch) * heads * seqlen * 4));
  void* qkv[3] = {q, k, v};
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpy(qkv[i], inputs[i].data(), n * 2, cudaMemcpyHostToDevice));
  for (void* ptr : {o0, o1, o2, o3, o80}) CHECK(cudaMemset(ptr, 0xff, n * 2));  // NaN: unwritten outputs show

  FwdKernelParams f = harness::bshd_params(q, k, v, o0, lse, batch, seqlen, heads, D, causal, h::kBlockM);
  const int smem0 = sizeof(h::SharedStorage0);
  CHECK(cudaFuncSetAttribute(h::fwd_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem0));
  const unsigned blocks = unsigned(f.m_blocks) * batch * heads;
  const float ms0 = harness::median_ms([&] { h::fwd_wgmma_kernel<<<blocks, h::kThreads0, smem0>>>(f); });

  f.o = o1;
  const float ms1 = harness::median_ms([&] { CHECK((sm90::launch_fwd<__nv_bfloat16, D, sm90::kSerial>(f, nullptr))); });
  f.o = o2;
  const float ms2 = harness::median_ms([&] { CHECK((sm90::launch_fwd<__nv_bfloat16, D, sm90::kOverlap>(f, nullptr))); });
  f.o = o3;
  const float ms3 = harness::median_ms([&] { CHECK((sm90::launch_fwd<__nv_bfloat16, D, sm90::kPingPong>(f, nullptr))); });

  using Traits80 = sm80::FwdTraits<D, sm80::FwdConfigHopper<D>>;
  f.o = o80;
  set_query_blocks(f, (seqlen + Traits80::kBlockM - 1) / Traits80::kBlockM);
  auto kernel80 = sm80::fwd_kernel<Traits80, __nv_bfloat16, false, sm80::kV2>;
  CHECK(cudaFuncSetAttribute(kernel80, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits80::kSmemBytes));
  const unsigned blocks80 = unsigned(f.m_blocks) * batch * heads;
  const float ms80 =
      harness::median_ms([&] { kernel80<<<blocks80, Traits80::kThreads, Traits80::kSmemBytes>>>(f); });

  const double flops = 4.0 * batch * heads * double(seqlen) * seqlen * D / (causal ? 2 : 1);
  std::printf("B%-2d H%-2d S%-5d D%d %-6s | sm80 %7.3f ms %6.1f TFLOP/s", batch, heads, seqlen, D,
              causal ? "causal" : "full", ms80, flops / ms80 / 1e9);
  const char* names[] = {"step 0 (cp.async)", "sm90 serial", "sm90 overlap (library)", "sm90 ping-pong"};
  const float times[] = {ms0, ms1, ms2, ms3};
  const auto bf16 = [](const void* ptr) { return static_cast<const uint16_t*>(ptr); };
  const uint16_t* outs[] = {bf16(o0), bf16(o1), bf16(o2), bf16(o3)};
  for (int i = 0; i < 4; ++i) {
    const harness::Agreement a = harness::compare(outs[i], bf16(o80), n);
    std::printf(" | %s %7.3f ms %6.1f TFLOP/s %s (max |diff| %.4f of %.3f, %zu non-finite)", names[i], times[i],
                flops / times[i] / 1e9, a.ok() ? "AGREE" : "DIFFER", a.worst, a.scale, a.non_finite);
  }
  std::printf("\n");
  for (void* ptr : {q, k, v, o0, o1, o2, o3, o80}) CHECK(cudaFree(ptr));
  CHECK(cudaFree(lse));
}

int main() {
  for (bool causal : {false, true}) {
    run(1, 200, 2, causal);  // a partial K/V tile and a partial query block
    run(8, 2048, 16, causal);
    run(2, 8192, 16, causal);
  }
  return 0;
}
