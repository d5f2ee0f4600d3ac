// Development harness for the Hopper backward (issue 7), step 0b: the sm80 dK/dV kernel's schedule (a CTA of two
// warpgroups owns 128 keys and walks the query rows 64 at a time; P and dS through shared memory; dQ added into
// an fp32 accumulator with atomics) with all five products on wgmma, loads by cp.async from every thread, two
// step buffers (step 0 had one: its loads were exposed), no producer warpgroup. Checked against the library's
// sm80 backward on the same inputs (O and LSE from the library's sm80 forward) and timed beside it. Head dim
// 128, bf16, full or causal attention, Sq = Sk.
//
// Per step and warpgroup w (keys w * 64 .. w * 64 + 63 of the CTA's 128):
//   S_w  = Q K_w^T, dP_w = dO V_w^T     (64 queries x 64 keys; A and B K-major from shared memory)
//   P_w, dS_w -> sP, sdS                (64 queries x 128 keys, keys contiguous)
//   dV_w += P_w^T dO, dK_w += dS_w^T Q  (64 keys x 128 columns; A = the transposed view of sP / sdS and B = the
//                                        transposed view of dO / Q: both MN-major)
//   dQ[:, w * 64 ..] += dS K            (64 queries x 64 columns over all 128 keys; B = K's transposed view)
//
// Not part of the library. Build here (CUTLASS headers from the pinned nvidia-cutlass wheel in .deps/):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//        -isystem .deps/cutlass_library/source/include bench/kernels/sm90_bwd_wgmma.cu \
//        -o build-device/sm90_bwd_wgmma
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "backends/cuda/sm80/bwd_launch.cuh"
#include "backends/cuda/sm80/fwd_launch.cuh"
#include "backends/cuda/sm90/fwd_kernel.cuh"  // CuTe and the wgmma atoms, as the forward includes them
#include "harness.hpp"

namespace sm90_bwd {

using namespace cute;
using Element = cutlass::bfloat16_t;
constexpr int kHeadDim = 128, kBlockN = 128, kBlockM = 64, kThreads = 256;
using D = Int<kHeadDim>;
using N = Int<kBlockN>;
using M = Int<kBlockM>;
using HalfN = Int<kBlockN / 2>;  // a warpgroup's keys
using HalfD = Int<kHeadDim / 2>;  // a warpgroup's dQ columns

using Atom = GMMA::Layout_K_SW128_Atom<Element>;
using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<M, D>{}));  // Q, dO: (queries, head dim)
using SmemLayoutK = decltype(tile_to_shape(Atom{}, Shape<N, D>{}));  // K, V: (keys, head dim)
using SmemLayoutP = decltype(tile_to_shape(Atom{}, Shape<M, N>{}));  // P, dS: (queries, keys)
// Transposed views, MN-major as the products that read them need (as the forward's V for P V).
using SmemLayoutQt = decltype(composition(SmemLayoutQ{}, make_ordered_layout(Shape<D, M>{}, Step<_2, _1>{})));
using SmemLayoutKt = decltype(composition(SmemLayoutK{}, make_ordered_layout(Shape<D, N>{}, Step<_2, _1>{})));
using SmemLayoutPt = decltype(composition(SmemLayoutP{}, make_ordered_layout(Shape<N, M>{}, Step<_2, _1>{})));

// One warpgroup's products.
using MmaSdP = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, HalfN, D>>()));
using MmaKV = decltype(make_tiled_mma(
    GMMA::ss_op_selector<Element, Element, float, Shape<_64, D, M>, GMMA::Major::MN, GMMA::Major::MN>()));
using MmaDQ = decltype(make_tiled_mma(
    GMMA::ss_op_selector<Element, Element, float, Shape<_64, HalfD, N>, GMMA::Major::K, GMMA::Major::MN>()));

struct SharedStorage {
  alignas(1024) Element k[cosize_v<SmemLayoutK>];
  alignas(1024) Element v[cosize_v<SmemLayoutK>];
  alignas(1024) Element q[2][cosize_v<SmemLayoutQ>];  // two step buffers: the next step's rows load during
  alignas(1024) Element dout[2][cosize_v<SmemLayoutQ>];  // this step's products
  alignas(1024) Element p[cosize_v<SmemLayoutP>];
  alignas(1024) Element ds[cosize_v<SmemLayoutP>];
  float lse2[2][kBlockM], delta[2][kBlockM];
};

template <int kRows, class SmemTensor>  // every thread copies (harness.hpp)
__device__ void load_rows(SmemTensor smem, const Element* head, int64_t stride, int row0, int rows) {
  harness::load_rows<kRows, kHeadDim, kThreads>(smem, head, stride, row0, rows);
}

// Issues acc (+)= A B over every k block of the operands, asynchronously.
template <class Mma, class FragA, class FragB, class Acc>
__device__ void issue(Mma& mma, const FragA& a, const FragB& b, Acc& acc, bool accumulate) {
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  mma.accumulate_ = accumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    cute::gemm(mma, a(_, _, kb), b(_, _, kb), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

__global__ void __launch_bounds__(kThreads, 1) bwd_wgmma_kernel(const flashtile::cuda::BwdKernelParams p) {
  const flashtile::cuda::FwdKernelParams& f = p.fwd;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  auto sK = make_tensor(make_smem_ptr(smem.k), SmemLayoutK{});
  auto sV = make_tensor(make_smem_ptr(smem.v), SmemLayoutK{});
  auto sP = make_tensor(make_smem_ptr(smem.p), SmemLayoutP{});
  auto sdS = make_tensor(make_smem_ptr(smem.ds), SmemLayoutP{});
  auto sKt = make_tensor(make_smem_ptr(smem.k), SmemLayoutKt{});
  auto sPt = make_tensor(make_smem_ptr(smem.p), SmemLayoutPt{});
  auto sdSt = make_tensor(make_smem_ptr(smem.ds), SmemLayoutPt{});

  const int n_block = blockIdx.x % p.n_blocks, bh = blockIdx.x / p.n_blocks;
  const int b = bh / f.heads_q, h = bh % f.heads_q;  // no GQA in the harness
  const int key0 = n_block * kBlockN;
  const Element* k_head = static_cast<const Element*>(f.k) + b * f.k_stride[0] + h * f.k_stride[2];
  const Element* v_head = static_cast<const Element*>(f.v) + b * f.v_stride[0] + h * f.v_stride[2];
  const Element* q_head = static_cast<const Element*>(f.q) + b * f.q_stride[0] + h * f.q_stride[2];
  const Element* do_head = static_cast<const Element*>(p.dout) + b * p.dout_stride[0] + h * p.dout_stride[2];
  load_rows<kBlockN>(sK, k_head, f.k_stride[1], key0, f.seqlen_k);
  load_rows<kBlockN>(sV, v_head, f.v_stride[1], key0, f.seqlen_k);

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  MmaSdP mma_sdp;
  MmaKV mma_kv;
  MmaDQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_kv = mma_kv.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);
  // This warpgroup's slices of the shared tiles.
  auto sK_w = local_tile(sK, Shape<HalfN, D>{}, make_coord(wg, 0));
  auto sV_w = local_tile(sV, Shape<HalfN, D>{}, make_coord(wg, 0));
  auto sP_w = local_tile(sP, Shape<M, HalfN>{}, make_coord(0, wg));
  auto sdS_w = local_tile(sdS, Shape<M, HalfN>{}, make_coord(0, wg));
  auto sPt_w = local_tile(sPt, Shape<HalfN, M>{}, make_coord(wg, 0));
  auto sdSt_w = local_tile(sdSt, Shape<HalfN, M>{}, make_coord(wg, 0));
  auto sKt_w = local_tile(sKt, Shape<HalfD, N>{}, make_coord(wg, 0));

  auto tSrS = partition_fragment_C(mma_sdp, Shape<_64, HalfN>{});
  auto tSrdP = partition_fragment_C(mma_sdp, Shape<_64, HalfN>{});
  auto tVrdV = partition_fragment_C(mma_kv, Shape<_64, D>{});
  auto tKrdK = partition_fragment_C(mma_kv, Shape<_64, D>{});
  auto tQrdQ = partition_fragment_C(mma_dq, Shape<_64, HalfD>{});
  clear(tVrdV);
  clear(tKrdK);
  auto tScS = thr_sdp.partition_C(make_identity_tensor(Shape<_64, HalfN>{}));
  auto tSsP = thr_sdp.partition_C(sP_w);
  auto tSsdS = thr_sdp.partition_C(sdS_w);

  const int row_begin = max(0, key0 - f.key_offset - f.window_right);
  const int row_end = min(f.seqlen_q, key0 + kBlockN - f.key_offset + f.window_left);
  const int key_w0 = key0 + wg * (kBlockN / 2);  // this warpgroup's first key
  // One step's Q and dO rows into buffer buf by cp.async (one commit group, which for the first step also holds K
  // and V's copies).
  auto load_step = [&](int row0, int buf) {
    load_rows<kBlockM>(make_tensor(make_smem_ptr(smem.q[buf]), SmemLayoutQ{}), q_head, f.q_stride[1], row0,
                       f.seqlen_q);
    load_rows<kBlockM>(make_tensor(make_smem_ptr(smem.dout[buf]), SmemLayoutQ{}), do_head, p.dout_stride[1], row0,
                       f.seqlen_q);
    asm volatile("cp.async.commit_group;\n" ::);
  };
  // Thread t < kBlockM's row of a step: its LSE (natural log, as stored) and D. Rows past the end get LSE = D = 0:
  // with zero Q and dO rows they add nothing.
  auto row_stats = [&](int row0, float& lse, float& d) {
    const int row = row0 + threadIdx.x;
    const bool real = row < f.seqlen_q;
    lse = real ? f.lse[b * f.lse_stride[0] + h * f.lse_stride[1] + row * f.lse_stride[2]] : 0.0f;
    d = real ? p.delta[(int64_t(b) * f.heads_q + h) * f.seqlen_q + row] : 0.0f;
  };
  auto store_stats = [&](int buf, float lse, float d) {
    smem.lse2[buf][threadIdx.x] = flashtile::cuda::sm80::lse_log2(lse);
    smem.delta[buf][threadIdx.x] = d;
  };
  const int row_first = row_begin / kBlockM * kBlockM;
  if (row_first < row_end) {
    load_step(row_first, 0);
    if (threadIdx.x < kBlockM) {
      float lse, d;
      row_stats(row_first, lse, d);
      store_stats(0, lse, d);
    }
  }
  int buf = 0;
  for (int row0 = row_first; row0 < row_end; row0 += kBlockM, buf ^= 1) {
    // The next step's rows go into the other buffer, which the previous step last read before its closing
    // barrier; then this step's group (the older one) is waited for. The next step's LSE and D are loaded into
    // registers now and stored to shared memory at the end of this step, so nothing waits for those loads.
    const bool has_next = row0 + kBlockM < row_end;
    float next_lse = 0.0f, next_d = 0.0f;
    if (has_next) {
      load_step(row0 + kBlockM, buf ^ 1);
      if (threadIdx.x < kBlockM) row_stats(row0 + kBlockM, next_lse, next_d);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    cutlass::arch::fence_view_async_shared();  // generic-proxy writes (cp.async) -> async-proxy reads (wgmma)
    __syncthreads();
    auto sQ = make_tensor(make_smem_ptr(smem.q[buf]), SmemLayoutQ{});
    auto sdO = make_tensor(make_smem_ptr(smem.dout[buf]), SmemLayoutQ{});
    auto sQt = make_tensor(make_smem_ptr(smem.q[buf]), SmemLayoutQt{});
    auto sdOt = make_tensor(make_smem_ptr(smem.dout[buf]), SmemLayoutQt{});
    const float* lse2 = smem.lse2[buf];
    const float* delta = smem.delta[buf];

    issue(mma_sdp, thr_sdp.partition_fragment_A(sQ), thr_sdp.partition_fragment_B(sK_w), tSrS, false);
    issue(mma_sdp, thr_sdp.partition_fragment_A(sdO), thr_sdp.partition_fragment_B(sV_w), tSrdP, false);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    warpgroup_fence_operand(tSrdP);
    const int last_query = min(row0 + kBlockM, f.seqlen_q) - 1;
    const bool full_tile = last_query + f.key_offset - f.window_left <= key_w0 &&
                           row0 + f.key_offset + f.window_right >= key_w0 + kBlockN / 2 - 1 &&
                           key_w0 + kBlockN / 2 <= f.seqlen_k;
    auto grads = [&](auto masked) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) {
        const int r = get<0>(tScS(i)), query = row0 + r, key = key_w0 + get<1>(tScS(i));
        float x = tSrS(i);
        if (decltype(masked)::value) {
          const bool visible = key < f.seqlen_k && key >= query + f.key_offset - f.window_left &&
                               key <= query + f.key_offset + f.window_right;
          x = visible ? x : -INFINITY;
        }
        const float prob = flashtile::cuda::exp2_approx(fmaf(x, f.scale_log2, -lse2[r]));
        // dS without the softmax scale, as the library's sm80 backward keeps it: the scale is applied once, to dK
        // below and to dQ when the fp32 accumulator is converted
        const float ds = prob == 0.0f ? 0.0f : prob * (tSrdP(i) - delta[r]);
        tSsP(i) = Element(prob);
        tSsdS(i) = Element(ds);
      }
    };
    if (full_tile)
      grads(std::false_type{});
    else
      grads(std::true_type{});
    cutlass::arch::fence_view_async_shared();
    __syncthreads();  // both warpgroups' P and dS are in shared memory

    issue(mma_kv, thr_kv.partition_fragment_A(sPt_w), thr_kv.partition_fragment_B(sdOt), tVrdV, true);
    issue(mma_kv, thr_kv.partition_fragment_A(sdSt_w), thr_kv.partition_fragment_B(sQt), tKrdK, true);
    issue(mma_dq, thr_dq.partition_fragment_A(sdS), thr_dq.partition_fragment_B(sKt_w), tQrdQ, false);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tVrdV);
    warpgroup_fence_operand(tKrdK);
    warpgroup_fence_operand(tQrdQ);
    float* dq_head = p.dq_accum + (int64_t(b) * f.heads_q + h) * f.seqlen_q * f.head_dim;
    auto tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<_64, HalfD>{}));
    CUTE_UNROLL
    for (int i = 0; i < size(tQrdQ); i += 2) {  // elements i, i + 1: columns 2t, 2t + 1 of one row
      const int row = row0 + get<0>(tQcQ(i)), col = wg * (kHeadDim / 2) + get<1>(tQcQ(i));
      if (row < f.seqlen_q)
        atomicAdd(reinterpret_cast<float2*>(dq_head + int64_t(row) * f.head_dim + col),
                  make_float2(tQrdQ(i), tQrdQ(i + 1)));
    }
    if (has_next && threadIdx.x < kBlockM) store_stats(buf ^ 1, next_lse, next_d);
    __syncthreads();  // every read of this step's buffer, P and dS is done before they are refilled
  }

  asm volatile("cp.async.commit_group;\n" ::);  // with no step, K and V's copies are still in flight
  asm volatile("cp.async.wait_group 0;\n" ::);

  // dK and dV rows of this warpgroup's keys.
  Element* dk_head = static_cast<Element*>(p.dk) + b * p.dk_stride[0] + h * p.dk_stride[2];
  Element* dv_head = static_cast<Element*>(p.dv) + b * p.dv_stride[0] + h * p.dv_stride[2];
  auto tKcK = thr_kv.partition_C(make_identity_tensor(Shape<_64, D>{}));
  CUTE_UNROLL
  for (int i = 0; i < size(tKrdK); ++i) {
    const int key = key_w0 + get<0>(tKcK(i)), col = get<1>(tKcK(i));
    if (key < f.seqlen_k) {
      dk_head[key * p.dk_stride[1] + col] = Element(tKrdK(i) * p.scale);
      dv_head[key * p.dv_stride[1] + col] = Element(tVrdV(i));
    }
  }
}

}  // namespace sm90_bwd

void run(int batch, int seqlen, int heads, bool causal) {
  using namespace flashtile::cuda;
  constexpr int kD = sm90_bwd::kHeadDim;
  const size_t n = size_t(batch) * seqlen * heads * kD, rows = size_t(batch) * heads * seqlen;
  // q, k and v differ: with one tensor for all three, S is symmetric and a transposed product would agree too.
  const std::vector<uint16_t> q_in = harness::bf16_inputs(n, 2024), k_in = harness::bf16_inputs(n, 2025),
                              v_in = harness::bf16_inputs(n, 2026), grads = harness::bf16_inputs(n, 77);
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *dk90, *dv90;
  float *lse, *delta, *dq_accum, *dq90;
  for (void** ptr : {&q, &k, &v, &o, &dout, &dq, &dk, &dv, &dk90, &dv90}) CHECK(cudaMalloc(ptr, n * 2));
  for (float** ptr : {&lse, &delta}) CHECK(cudaMalloc(ptr, rows * 4));
  for (float** ptr : {&dq_accum, &dq90}) CHECK(cudaMalloc(ptr, n * 4));
  CHECK(cudaMemcpy(q, q_in.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, k_in.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, v_in.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dout, grads.data(), n * 2, cudaMemcpyHostToDevice));
  for (void* ptr : {dk90, dv90}) CHECK(cudaMemset(ptr, 0xff, n * 2));  // NaN: unwritten outputs show

  // O and LSE from the library's sm80 forward.
  using Fwd80 = sm80::FwdTraits<kD>;
  FwdKernelParams f = harness::bshd_params(q, k, v, o, lse, batch, seqlen, heads, kD, causal, Fwd80::kBlockM);
  CHECK((sm80::launch_fwd<__nv_bfloat16, kD, sm80::kV2, sm80::FwdConfig<kD>>(f, nullptr)));

  BwdKernelParams p{};
  p.fwd = f;
  p.dout = dout, p.dq = dq, p.dk = dk, p.dv = dv;
  for (int64_t* st : {p.dout_stride, p.dq_stride, p.dk_stride, p.dv_stride})
    for (int d = 0; d < 3; ++d) st[d] = f.q_stride[d];
  p.heads_kv = heads;
  p.scale = 1.0f / std::sqrt(float(kD));
  p.delta = delta, p.dq_accum = dq_accum;
  p.smem_limit = 227 * 1024;
  p.fwd.m_blocks = (seqlen + sm80::BwdDqTraits<kD>::kBlockM - 1) / sm80::BwdDqTraits<kD>::kBlockM;
  const float ms80 = harness::median_ms([&] { CHECK((sm80::launch_bwd<__nv_bfloat16, kD>(p, nullptr))); });

  // The same problem through the step-0 kernel; D (delta) is the library's, from the calls above.
  BwdKernelParams p90 = p;
  p90.dk = dk90, p90.dv = dv90, p90.dq_accum = dq90;
  p90.n_blocks = (seqlen + sm90_bwd::kBlockN - 1) / sm90_bwd::kBlockN;
  const int smem = sizeof(sm90_bwd::SharedStorage);
  CHECK(cudaFuncSetAttribute(sm90_bwd::bwd_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const unsigned blocks = unsigned(p90.n_blocks) * batch * heads;
  const float ms90 = harness::median_ms([&] {
    CHECK(cudaMemsetAsync(dq90, 0, n * 4));
    sm90_bwd::bwd_wgmma_kernel<<<blocks, sm90_bwd::kThreads, smem>>>(p90);
  });

  const double flops = 2.5 * 4.0 * batch * heads * double(seqlen) * seqlen * kD / (causal ? 2 : 1);
  // dQ against the library's fp32 accumulator of its last call (the same (batch, head, row, dim) layout, before
  // the conversion to bf16 and BSHD); dK and dV in bf16, BSHD.
  const auto bf16 = [](const void* ptr) { return static_cast<const uint16_t*>(ptr); };
  const harness::Agreement adq = harness::compare(dq90, dq_accum, n),
                           adk = harness::compare(bf16(dk90), bf16(dk), n),
                           adv = harness::compare(bf16(dv90), bf16(dv), n);
  std::printf("B%-2d H%-2d S%-5d D%d %-6s | sm80 backward %7.3f ms %6.1f TFLOP/s | sm90 step 0b (dK/dV kernel "
              "only: no D, no dQ conversion) %7.3f ms %6.1f TFLOP/s | dQ %s (%.4f of %.3f) dK %s (%.4f of %.3f) "
              "dV %s (%.4f of %.3f) %zu non-finite\n",
              batch, heads, seqlen, kD, causal ? "causal" : "full", ms80, flops / ms80 / 1e9, ms90,
              flops / ms90 / 1e9, adq.ok() ? "AGREE" : "DIFFER", adq.worst, adq.scale, adk.ok() ? "AGREE" : "DIFFER",
              adk.worst, adk.scale, adv.ok() ? "AGREE" : "DIFFER", adv.worst, adv.scale,
              adq.non_finite + adk.non_finite + adv.non_finite);
  for (void* ptr : {q, k, v, o, dout, dq, dk, dv, dk90, dv90}) CHECK(cudaFree(ptr));
  for (float* ptr : {lse, delta, dq_accum, dq90}) CHECK(cudaFree(ptr));
}

int main() {
  for (bool causal : {false, true}) {
    run(1, 200, 2, causal);  // a partial key block and a partial query block
    run(8, 2048, 16, causal);
    run(2, 8192, 16, causal);
  }
  return 0;
}
