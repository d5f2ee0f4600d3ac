// Development harness for the Hopper forward (issue 6), step 0: the FA2 schedule with both tile products on
// wgmma, before TMA, warp specialization and pipelining. It answers two questions on the H200 before the
// library kernel is built around them: are the swizzled shared-memory layouts, the register-A operand for P V
// and the accumulator coordinates right (checked against the library's sm80 kernel on the same inputs), and
// what does wgmma alone buy over mma.sync (both timed side by side).
//
// One CTA: two warpgroups, each owning 64 query rows (kBlockM = 128), K/V tiles of 128 keys, head dim 128, bf16.
// Loads are cp.async into CuTe's 128-byte-swizzled layouts (all 256 threads, two stages, as the sm80 kernel);
// a proxy fence makes them visible to wgmma's asynchronous reads.
//   sQ (128 x 128, K-major), sK [2] (128 keys x 128, K-major), sV [2] (viewed as 128 d x 128 keys, MN-major)
//   per thread: S accumulator 64 floats (64 rows x 128 keys per warpgroup), O accumulator 64 floats
//
// Not part of the library. Build here (CUTLASS headers from the pinned nvidia-cutlass wheel in .deps/):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//        -isystem .deps/cutlass_library/source/include bench/kernels/sm90_fwd_wgmma.cu -o build-device/sm90_fwd_wgmma
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cute/arch/copy_sm80.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include "backends/cuda/sm80/fwd_kernel.cuh"

namespace sm90_harness {

using namespace cute;
using Element = cutlass::bfloat16_t;

constexpr int kHeadDim = 128, kBlockM = 128, kBlockN = 128, kWarpgroups = 2, kThreads = kWarpgroups * 128;

// Shared-memory layouts: Q and K with the head dim contiguous (K-major for S = Q K^T); V stored the same way
// (keys down the rows), which for O = P V's B operand (N = head dim, K = keys) is MN-major.
using SmemLayoutQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
using SmemLayoutK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
using SmemLayoutVt = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, Shape<Int<kHeadDim>, Int<kBlockN>>{}));

// One warpgroup's products: S (64 x kBlockN) from shared Q and K; O (64 x kHeadDim) from P in registers and V.
using MmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>()));
using MmaPV = decltype(make_tiled_mma(
    GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>, GMMA::Major::K,
                         GMMA::Major::MN>()));

struct SharedStorage {
  alignas(1024) Element q[cosize_v<SmemLayoutQ>];
  alignas(1024) Element k[2][cosize_v<SmemLayoutK>];
  alignas(1024) Element v[2][cosize_v<SmemLayoutVt>];
};

struct Params {
  const Element *q, *k, *v;
  Element* o;
  int batch, heads, seqlen;  // BSHD contiguous, Sq = Sk, no GQA
  bool causal;
  float scale_log2;
};

// rows [row0, row0 + kRows) of one head (row stride heads * kHeadDim elements) into `smem` (a tensor over the
// swizzled layout); rows past the end become zeros. 16-byte chunks stay contiguous under the 128-byte swizzle.
template <int kRows, class SmemTensor>
__device__ void load_tile(SmemTensor smem, const Element* head, int row0, int seqlen, int heads) {
  constexpr int kChunks = kHeadDim / 8;
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < seqlen;
    const Element* src = valid ? head + int64_t(row0 + r) * heads * kHeadDim + c * 8 : head;
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(&smem(r, c * 8)));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
  }
}

__device__ __forceinline__ float quad_reduce_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_reduce_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__global__ void __launch_bounds__(kThreads, 1) fwd_wgmma_kernel(const Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  const int m_blocks = (p.seqlen + kBlockM - 1) / kBlockM;
  const int m_block = m_blocks - 1 - blockIdx.x % m_blocks, bh = blockIdx.x / m_blocks;
  const int b = bh / p.heads, h = bh % p.heads;
  const int64_t head_offset = (int64_t(b) * p.seqlen * p.heads + h) * kHeadDim;
  const int row0 = m_block * kBlockM;
  const int n_end = p.causal ? min(p.seqlen, row0 + kBlockM) : p.seqlen;
  const int n_blocks = (n_end + kBlockN - 1) / kBlockN;

  Tensor sQ = make_tensor(make_smem_ptr(smem.q), SmemLayoutQ{});
  // The same K and V storage under two views: rows of keys for the loads, the MMA operand layouts for wgmma.
  auto sK = [&](int stage) { return make_tensor(make_smem_ptr(smem.k[stage]), SmemLayoutK{}); };
  auto sVt = [&](int stage) { return make_tensor(make_smem_ptr(smem.v[stage]), SmemLayoutVt{}); };
  auto sV_rows = [&](int stage) {  // (key, d) -> element, for the loads
    return make_tensor(make_smem_ptr(smem.v[stage]),
                       composition(SmemLayoutVt{}, Layout<Shape<Int<kBlockN>, Int<kHeadDim>>, Stride<Int<kHeadDim>, _1>>{}));
  };

  load_tile<kBlockM>(sQ, p.q + head_offset, row0, p.seqlen, p.heads);
  load_tile<kBlockN>(sK(0), p.k + head_offset, 0, p.seqlen, p.heads);
  load_tile<kBlockN>(sV_rows(0), p.v + head_offset, 0, p.seqlen, p.heads);
  asm volatile("cp.async.commit_group;\n" ::);

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  MmaQK mma_qk;
  MmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(tid);
  auto thr_pv = mma_pv.get_thread_slice(tid);
  Tensor sQ_wg = local_tile(sQ, Shape<_64, Int<kHeadDim>>{}, make_coord(wg, 0));  // this warpgroup's 64 rows
  Tensor tSrQ = thr_qk.partition_fragment_A(sQ_wg);
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<_64, Int<kBlockN>>{});
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<_64, Int<kHeadDim>>{});
  clear(tOrO);
  // (row, column) of every accumulator element, row within the warpgroup's 64: two rows per thread.
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<_64, Int<kBlockN>>{}));
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<_64, Int<kHeadDim>>{}));
  const int my_row0 = get<0>(tScS(0));  // rows my_row0 and my_row0 + 8
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  for (int n = 0; n < n_blocks; ++n) {
    const int stage = n & 1;
    if (n + 1 < n_blocks) {  // the other stage was last read by tile n - 1's products, finished before its barrier
      load_tile<kBlockN>(sK(stage ^ 1), p.k + head_offset, (n + 1) * kBlockN, p.seqlen, p.heads);
      load_tile<kBlockN>(sV_rows(stage ^ 1), p.v + head_offset, (n + 1) * kBlockN, p.seqlen, p.heads);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);
    cutlass::arch::fence_view_async_shared();  // generic-proxy writes (cp.async) -> async-proxy reads (wgmma)
    __syncthreads();

    // S = Q K^T
    Tensor tSrK = thr_qk.partition_fragment_B(sK(stage));
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    mma_qk.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
      cute::gemm(mma_qk, tSrQ(_, _, kb), tSrK(_, _, kb), tSrS);
      mma_qk.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);

    // Mask (causal, sequence end), online softmax; element i is at (tScS(i)): rows my_row0 + 8 * ((i / 2) % 2).
    const int col0 = n * kBlockN;
    const bool need_mask = col0 + kBlockN > p.seqlen || (p.causal && col0 + kBlockN - 1 > row0 + 64 * wg);
    if (need_mask) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) {
        const int row = row0 + 64 * wg + get<0>(tScS(i)), key = col0 + get<1>(tScS(i));
        if (key >= p.seqlen || (p.causal && key > row)) tSrS(i) = -INFINITY;
      }
    }
    float alpha[2];
    CUTE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {
      float mx = row_max[hr];
      CUTE_UNROLL
      for (int i = 2 * hr; i < size(tSrS); i += 4) mx = fmaxf(mx, fmaxf(tSrS(i), tSrS(i + 1)));
      mx = quad_reduce_max(mx);
      const float shift = mx == -INFINITY ? 0.0f : mx * p.scale_log2;
      alpha[hr] = exp2f(row_max[hr] * p.scale_log2 - shift);
      row_max[hr] = mx;
      float sum = 0.0f;
      CUTE_UNROLL
      for (int i = 2 * hr; i < size(tSrS); i += 4) {
        tSrS(i) = exp2f(fmaf(tSrS(i), p.scale_log2, -shift));
        tSrS(i + 1) = exp2f(fmaf(tSrS(i + 1), p.scale_log2, -shift));
        sum += tSrS(i) + tSrS(i + 1);
      }
      row_sum[hr] = row_sum[hr] * alpha[hr] + sum;
    }
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); ++i) tOrO(i) *= alpha[(i / 2) % 2];

    // O += P V with P from registers: the accumulator's (pair, row half, 8-key block) order is the register A
    // operand's (pair, row half, k half) per 16-key step, so a bf16 copy in the same order is the A fragment.
    Tensor rP = make_tensor<Element>(Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBlockN / 16>>>{});
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) rP(i) = Element(tSrS(i));
    Tensor tOrV = thr_pv.partition_fragment_B(sVt(stage));
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(rP); ++kb) cute::gemm(mma_pv, rP(_, _, kb), tOrV(_, _, kb), tOrO);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    __syncthreads();  // every warpgroup is done with this stage before tile n + 1 loads into it... (n + 2)
  }

  // O / l to global memory (the harness does not write the LSE).
  float inv[2];
  CUTE_UNROLL
  for (int hr = 0; hr < 2; ++hr) {
    const float l = quad_reduce_sum(row_sum[hr]);
    inv[hr] = row_max[hr] == -INFINITY ? 0.0f : 1.0f / l;
  }
  CUTE_UNROLL
  for (int i = 0; i < size(tOrO); i += 2) {
    const int row = row0 + 64 * wg + get<0>(tOcO(i)), col = get<1>(tOcO(i));
    if (row >= p.seqlen) continue;
    __nv_bfloat162 v = __floats2bfloat162_rn(tOrO(i) * inv[(i / 2) % 2], tOrO(i + 1) * inv[(i / 2) % 2]);
    *reinterpret_cast<__nv_bfloat162*>(reinterpret_cast<__nv_bfloat16*>(p.o) + head_offset +
                                       int64_t(row) * p.heads * kHeadDim + col) = v;
  }
  (void)my_row0;
}

}  // namespace sm90_harness

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

template <typename Launch>
float median_ms(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 25; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
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

float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One problem: the wgmma kernel and the library's sm80 kernel (Hopper row) on the same inputs, outputs compared.
void run(int batch, int seqlen, int heads, bool causal) {
  using namespace flashtile::cuda;
  constexpr int D = sm90_harness::kHeadDim;
  const size_t n = size_t(batch) * seqlen * heads * D;
  std::vector<uint16_t> host(n);
  uint32_t x = 2024;
  for (auto& h : host) {  // bf16 of roughly uniform values in [-1.7, 1.7): no zeros
    x = x * 1664525u + 1013904223u;
    const float f = (float((x >> 8) & 0xffff) / 65536.0f - 0.5f) * 3.4f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h = uint16_t(u >> 16);
  }
  void *q, *k, *v, *o90, *o80;
  float* lse;
  for (void** ptr : {&q, &k, &v, &o90, &o80}) CHECK(cudaMalloc(ptr, n * 2));
  CHECK(cudaMalloc(&lse, size_t(batch) * heads * seqlen * 4));
  for (void* ptr : {q, k, v}) CHECK(cudaMemcpy(ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
  for (void* ptr : {o90, o80}) CHECK(cudaMemset(ptr, 0xff, n * 2));  // NaN: unwritten outputs show
  const float scale_log2 = 1.4426950408889634f / std::sqrt(float(D));

  sm90_harness::Params p{static_cast<const sm90_harness::Element*>(q), static_cast<const sm90_harness::Element*>(k),
                         static_cast<const sm90_harness::Element*>(v), static_cast<sm90_harness::Element*>(o90),
                         batch, heads, seqlen, causal, scale_log2};
  const int smem90 = sizeof(sm90_harness::SharedStorage);
  CHECK(cudaFuncSetAttribute(sm90_harness::fwd_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem90));
  const unsigned blocks90 = unsigned((seqlen + sm90_harness::kBlockM - 1) / sm90_harness::kBlockM) * batch * heads;
  const float ms90 = median_ms([&] {
    sm90_harness::fwd_wgmma_kernel<<<blocks90, sm90_harness::kThreads, smem90>>>(p);
  });

  using Traits = sm80::FwdTraits<D, sm80::FwdConfigHopper<D>>;
  FwdKernelParams f{};
  f.q = q, f.k = k, f.v = v, f.o = o80, f.lse = lse;
  const int64_t row = int64_t(heads) * D;
  for (int64_t* st : {f.q_stride, f.k_stride, f.v_stride, f.o_stride}) st[0] = row * seqlen, st[1] = row, st[2] = D;
  f.lse_stride[0] = int64_t(heads) * seqlen, f.lse_stride[1] = seqlen, f.lse_stride[2] = 1;
  f.batch = batch, f.heads_q = heads, f.group = 1, f.seqlen_q = f.seqlen_k = seqlen, f.head_dim = D;
  f.key_offset = 0, f.window_left = 2 * seqlen, f.window_right = causal ? 0 : 2 * seqlen;
  f.scale_log2 = scale_log2;
  f.m_blocks = (seqlen + Traits::kBlockM - 1) / Traits::kBlockM;
  auto kernel80 = sm80::fwd_kernel<Traits, __nv_bfloat16, false, sm80::kV2>;
  CHECK(cudaFuncSetAttribute(kernel80, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  const unsigned blocks80 = unsigned(f.m_blocks) * batch * heads;
  const float ms80 = median_ms([&] { kernel80<<<blocks80, Traits::kThreads, Traits::kSmemBytes>>>(f); });

  std::vector<uint16_t> a(n), b(n);
  CHECK(cudaMemcpy(a.data(), o90, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), o80, n * 2, cudaMemcpyDeviceToHost));
  double worst = 0, scale = 0;
  size_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    const float fa = bf16_to_float(a[i]), fb = bf16_to_float(b[i]);
    if (!std::isfinite(fa)) ++non_finite;
    worst = std::max(worst, double(std::fabs(fa - fb)));
    scale = std::max(scale, double(std::fabs(fb)));
  }
  const double flops = 4.0 * batch * heads * double(seqlen) * seqlen * D / (causal ? 2 : 1);
  std::printf("B%-2d H%-2d S%-5d D%d %-6s  wgmma %7.3f ms %6.1f TFLOP/s | sm80 %7.3f ms %6.1f TFLOP/s | "
              "max |diff| %.4f of max |o| %.3f, %zu non-finite: %s\n",
              batch, heads, seqlen, D, causal ? "causal" : "full", ms90, flops / ms90 / 1e9, ms80, flops / ms80 / 1e9,
              worst, scale, non_finite, non_finite == 0 && worst <= 0.02 * scale ? "AGREE" : "DIFFER");
  for (void* ptr : {q, k, v, o90, o80}) CHECK(cudaFree(ptr));
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
