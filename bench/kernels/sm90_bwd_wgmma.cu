// Development harness for the Hopper backward (issue 7), step 1e: warp specialization. A CTA owns 128 keys of one
// head and walks the query rows 64 at a time (the sm80 dK/dV kernel's schedule, all five products on wgmma):
//   - warpgroup 0 is the producer: one thread loads K and V once, then each step's Q, dO, LSE and D by TMA into
//     a two-deep ring of buffers (mbarriers: full when the bytes have landed, empty when both consumer
//     warpgroups are done with them); it gives its registers away (setmaxnreg);
//   - warpgroups 1 and 2 are consumers, 64 keys each; they meet only at named barriers (both warpgroups' dS are
//     needed by dQ; P and dS are rewritten only after both have read them);
//   - dQ leaves through shared memory: each warpgroup writes its 64 x 64 fp32 part there (128-byte swizzled, so a
//     warp's stores are conflict-free; two buffers, so a step never waits for the previous add's read) and one
//     thread adds it to the fp32 accumulator in global memory by TMA reduce-add: no atomics on the consumers and
//     one instruction per step (per-row bulk adds compiled to a serial loop: docs/perf-log.md, steps 1 to 1e).
// Checked against the library's sm80 backward on the same inputs (O and LSE from the library's sm80 forward) and
// timed beside it. Head dim 128, bf16, full or causal attention, Sq = Sk, Sq % 4 == 0 (the TMA rows of LSE and D
// are 16-byte aligned).
//
// Per step and consumer warpgroup w (keys w * 64 .. w * 64 + 63 of the CTA's 128):
//   S_w  = Q K_w^T, dP_w = dO V_w^T     (64 queries x 64 keys; A and B K-major from shared memory); P_w from S_w
//                                        while dP_w is still on the tensor cores
//   P_w, dS_w -> sP, sdS                (64 queries x 128 keys, keys contiguous)
//   dV_w += P_w^T dO, dK_w += dS_w^T Q  (64 keys x 128 columns; A = the transposed view of sP / sdS and B = the
//                                        transposed view of dO / Q: both MN-major)
//   dQ[:, w * 64 ..] += dS K            (64 queries x 64 columns over all 128 keys; B = K's transposed view)
// Shared memory: K, V 32 KB each; Q, dO 2 x 16 KB each; P, dS 16 KB each; dQ 2 x 2 x 16 KB (per warpgroup, two
// steps: an add may still be reading one while the next step writes the other); LSE and D 2 x 256 B each.
//
// Not part of the library. Build here (CUTLASS headers from the pinned nvidia-cutlass wheel in .deps/):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//        -isystem .deps/cutlass_library/source/include bench/kernels/sm90_bwd_wgmma.cu \
//        -o build-device/sm90_bwd_wgmma
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cuda/sm80/bwd_launch.cuh"
#include "backends/cuda/sm80/fwd_launch.cuh"
#include "backends/cuda/sm90/fwd_kernel.cuh"  // CuTe and the wgmma atoms, as the forward includes them
#include "harness.hpp"

namespace sm90_bwd {

using namespace cute;
using Element = cutlass::bfloat16_t;
constexpr int kHeadDim = 128, kBlockN = 128, kBlockM = 64, kStages = 2;
constexpr int kThreads = 384;  // the producer warpgroup and two consumers
using D = Int<kHeadDim>;
using N = Int<kBlockN>;
using M = Int<kBlockM>;
using HalfN = Int<kBlockN / 2>;  // a warpgroup's keys
using HalfD = Int<kHeadDim / 2>;  // a warpgroup's dQ columns

using Atom = GMMA::Layout_K_SW128_Atom<Element>;
using SmemLayoutQ = decltype(tile_to_shape(Atom{}, Shape<M, D>{}));  // Q, dO: (queries, head dim)
using SmemLayoutQStages = decltype(tile_to_shape(Atom{}, Shape<M, D, Int<kStages>>{}));
using SmemLayoutK = decltype(tile_to_shape(Atom{}, Shape<N, D>{}));  // K, V: (keys, head dim)
using SmemLayoutP = decltype(tile_to_shape(Atom{}, Shape<M, N>{}));  // P, dS: (queries, keys)
using SmemLayoutRows = Layout<Shape<M, Int<kStages>>>;               // LSE, D: (queries, stage)
// A warpgroup's dQ part, fp32, in 32-column blocks with the 128-byte swizzle: a warp's float2 stores of an
// accumulator (8 rows x 4 pairs of columns) hit every bank once per 128 bytes. The TMA moves it as two boxes.
using SmemLayoutDq = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{}, Shape<M, HalfD>{}));
using SmemLayoutDqBuffers = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{}, Shape<M, HalfD, _2>{}));
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

// The TMA descriptors: q, dO (seqlen, head dim, heads, batch) in 64-row boxes; k, v in 128-row boxes; LSE and D
// (seqlen, heads, batch) in 64-row boxes. Rows past the sequence end arrive as zeros.
auto rows_tensor(const Element* ptr, int seqlen, int heads, int batch, const int64_t* stride) {
  return make_tensor(make_gmem_ptr(ptr), make_layout(make_shape(seqlen, kHeadDim, heads, batch),
                                                     make_stride(stride[1], _1{}, stride[2], stride[0])));
}
auto stats_tensor(const float* ptr, int seqlen, int heads, int batch, int64_t head_stride, int64_t batch_stride) {
  return make_tensor(make_gmem_ptr(ptr),
                     make_layout(make_shape(seqlen, heads, batch), make_stride(_1{}, head_stride, batch_stride)));
}
using TmaRows = decltype(make_tma_copy(SM90_TMA_LOAD{}, rows_tensor(nullptr, 1, 1, 1, nullptr), SmemLayoutQ{}));
using TmaKeys = decltype(make_tma_copy(SM90_TMA_LOAD{}, rows_tensor(nullptr, 1, 1, 1, nullptr), SmemLayoutK{}));
using TmaStats = decltype(make_tma_copy(SM90_TMA_LOAD{}, stats_tensor(nullptr, 1, 1, 1, 1, 1), Layout<M>{}));
// The fp32 dQ accumulator, (seqlen, head dim, heads, batch), rows contiguous: added to in 64 x 64 boxes.
auto dq_tensor(float* ptr, int seqlen, int heads, int batch) {
  const int64_t head = int64_t(seqlen) * kHeadDim;
  return make_tensor(make_gmem_ptr(ptr), make_layout(make_shape(seqlen, kHeadDim, heads, batch),
                                                     make_stride(int64_t(kHeadDim), _1{}, head, head * heads)));
}
using TmaDq = decltype(make_tma_copy(SM90_TMA_REDUCE_ADD{}, dq_tensor(nullptr, 1, 1, 1), SmemLayoutDq{}));
struct Params {
  TmaRows tma_q, tma_do;
  TmaKeys tma_k, tma_v;
  TmaStats tma_lse, tma_delta;
  TmaDq tma_dq;
  flashtile::cuda::BwdKernelParams p;
};

struct SharedStorage {
  alignas(1024) Element k[cosize_v<SmemLayoutK>];
  alignas(1024) Element v[cosize_v<SmemLayoutK>];
  alignas(1024) Element q[cosize_v<SmemLayoutQStages>];
  alignas(1024) Element dout[cosize_v<SmemLayoutQStages>];
  alignas(1024) Element p[cosize_v<SmemLayoutP>];
  alignas(1024) Element ds[cosize_v<SmemLayoutP>];
  alignas(128) float dq[2][cosize_v<SmemLayoutDqBuffers>];  // per consumer warpgroup, two step buffers
  alignas(128) float lse[cosize_v<SmemLayoutRows>];  // natural log, as the forward stores it
  alignas(128) float delta[cosize_v<SmemLayoutRows>];
  uint64_t kv_full, full[kStages], empty[kStages];
};
constexpr uint32_t kStepBytes = 2 * kBlockM * kHeadDim * sizeof(Element) + 2 * kBlockM * sizeof(float);

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

// Named barriers (0 is __syncthreads): 1 + w for consumer warpgroup w's own threads; kDsBarrier when both
// warpgroups' dS are in shared memory; kStepBarrier + w when warpgroup w may overwrite its P and dS (it waits
// there, the other warpgroup arrives once its dQ product of the step before has read them).
constexpr int kDsBarrier = 3, kStepBarrier = 4;
__device__ void named_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads)); }

__global__ void __launch_bounds__(kThreads, 1) bwd_wgmma_kernel(const __grid_constant__ Params prm) {
  const flashtile::cuda::BwdKernelParams& p = prm.p;
  const flashtile::cuda::FwdKernelParams& f = p.fwd;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;

  const int n_block = blockIdx.x % p.n_blocks, bh = blockIdx.x / p.n_blocks;
  const int b = bh / f.heads_q, h = bh % f.heads_q;  // no GQA in the harness
  const int key0 = n_block * kBlockN;
  // The query rows that see any of the CTA's keys, in steps of kBlockM from a multiple of it.
  const int row_first = max(0, key0 - f.key_offset - f.window_right) / kBlockM * kBlockM;
  const int row_end = min(f.seqlen_q, key0 + kBlockN - f.key_offset + f.window_left);
  const int steps = row_first < row_end ? (row_end - row_first + kBlockM - 1) / kBlockM : 0;
  const int warpgroup = threadIdx.x / 128, tid = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    FullBarrier::init(&smem.kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      FullBarrier::init(&smem.full[s], 1);
      EmptyBarrier::init(&smem.empty[s], 2 * 128);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  auto sQ = make_tensor(make_smem_ptr(smem.q), SmemLayoutQStages{});     // (M, D, stage)
  auto sdO = make_tensor(make_smem_ptr(smem.dout), SmemLayoutQStages{});
  auto sK = make_tensor(make_smem_ptr(smem.k), SmemLayoutK{});
  auto sV = make_tensor(make_smem_ptr(smem.v), SmemLayoutK{});
  auto sLse = make_tensor(make_smem_ptr(smem.lse), SmemLayoutRows{});    // (M, stage)
  auto sDelta = make_tensor(make_smem_ptr(smem.delta), SmemLayoutRows{});

  if (warpgroup == 0) {  // producer
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x != 0 || steps == 0) return;
    const auto rows_shape = make_shape(f.seqlen_q, f.head_dim, f.heads_q, f.batch);
    const auto stats_shape = make_shape(f.seqlen_q, f.heads_q, f.batch);
    auto gQ = local_tile(prm.tma_q.get_tma_tensor(rows_shape)(_, _, h, b), Shape<M, D>{}, make_coord(_, 0));
    auto gdO = local_tile(prm.tma_do.get_tma_tensor(rows_shape)(_, _, h, b), Shape<M, D>{}, make_coord(_, 0));
    auto gK = local_tile(prm.tma_k.get_tma_tensor(rows_shape)(_, _, h, b), Shape<N, D>{}, make_coord(n_block, 0));
    auto gV = local_tile(prm.tma_v.get_tma_tensor(rows_shape)(_, _, h, b), Shape<N, D>{}, make_coord(n_block, 0));
    auto gLse = local_tile(prm.tma_lse.get_tma_tensor(stats_shape)(_, h, b), Shape<M>{}, make_coord(_));
    auto gDelta = local_tile(prm.tma_delta.get_tma_tensor(stats_shape)(_, h, b), Shape<M>{}, make_coord(_));
    auto [tQg, tQs] = tma_partition(prm.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    auto [tdOg, tdOs] =
        tma_partition(prm.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
    auto [tKg, tKs] = tma_partition(prm.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVg, tVs] = tma_partition(prm.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    auto [tLg, tLs] = tma_partition(prm.tma_lse, Int<0>{}, Layout<_1>{}, sLse, gLse);
    auto [tDg, tDs] = tma_partition(prm.tma_delta, Int<0>{}, Layout<_1>{}, sDelta, gDelta);
    FullBarrier::arrive_and_expect_tx(&smem.kv_full, 2 * kBlockN * kHeadDim * sizeof(Element));
    copy(prm.tma_k.with(smem.kv_full), tKg, tKs);
    copy(prm.tma_v.with(smem.kv_full), tVg, tVs);
    for (int i = 0; i < steps; ++i) {
      const int s = i % kStages, m = row_first / kBlockM + i;
      if (i >= kStages) EmptyBarrier::wait(&smem.empty[s], (i / kStages - 1) % 2);  // step i - kStages is done
      FullBarrier::arrive_and_expect_tx(&smem.full[s], kStepBytes);
      copy(prm.tma_q.with(smem.full[s]), tQg(_, m), tQs(_, s));
      copy(prm.tma_do.with(smem.full[s]), tdOg(_, m), tdOs(_, s));
      copy(prm.tma_lse.with(smem.full[s]), tLg(_, m), tLs(_, s));
      copy(prm.tma_delta.with(smem.full[s]), tDg(_, m), tDs(_, s));
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int w = warpgroup - 1;  // this consumer's keys: w * 64 .. w * 64 + 63 of the CTA's
  auto sP = make_tensor(make_smem_ptr(smem.p), SmemLayoutP{});
  auto sdS = make_tensor(make_smem_ptr(smem.ds), SmemLayoutP{});
  auto sKt = make_tensor(make_smem_ptr(smem.k), SmemLayoutKt{});
  auto sPt = make_tensor(make_smem_ptr(smem.p), SmemLayoutPt{});
  auto sdSt = make_tensor(make_smem_ptr(smem.ds), SmemLayoutPt{});
  MmaSdP mma_sdp;
  MmaKV mma_kv;
  MmaDQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_kv = mma_kv.get_thread_slice(tid);
  auto thr_dq = mma_dq.get_thread_slice(tid);
  // This warpgroup's slices of the shared tiles.
  auto sK_w = local_tile(sK, Shape<HalfN, D>{}, make_coord(w, 0));
  auto sV_w = local_tile(sV, Shape<HalfN, D>{}, make_coord(w, 0));
  auto sP_w = local_tile(sP, Shape<M, HalfN>{}, make_coord(0, w));
  auto sdS_w = local_tile(sdS, Shape<M, HalfN>{}, make_coord(0, w));
  auto sPt_w = local_tile(sPt, Shape<HalfN, M>{}, make_coord(w, 0));
  auto sdSt_w = local_tile(sdSt, Shape<HalfN, M>{}, make_coord(w, 0));
  auto sKt_w = local_tile(sKt, Shape<HalfD, N>{}, make_coord(w, 0));

  auto tSrS = partition_fragment_C(mma_sdp, Shape<_64, HalfN>{});
  auto tSrdP = partition_fragment_C(mma_sdp, Shape<_64, HalfN>{});
  auto tVrdV = partition_fragment_C(mma_kv, Shape<_64, D>{});
  auto tKrdK = partition_fragment_C(mma_kv, Shape<_64, D>{});
  auto tQrdQ = partition_fragment_C(mma_dq, Shape<_64, HalfD>{});
  clear(tVrdV);
  clear(tKrdK);
  // Element i of S, dP (and P, dS) sits at tScS(i) within (64 queries, the warpgroup's 64 keys): a thread holds
  // rows r and r + 8 ((i / 2) % 2 says which), columns 2t and 2t + 1 of each 8-key block (i and i + 1).
  auto tScS = thr_sdp.partition_C(make_identity_tensor(Shape<_64, HalfN>{}));
  auto tSsP = thr_sdp.partition_C(sP_w);
  auto tSsdS = thr_sdp.partition_C(sdS_w);
  auto tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<_64, HalfD>{}));
  const int key_w0 = key0 + w * (kBlockN / 2);  // this warpgroup's first key
  // This warpgroup's columns of dQ, per step, and the TMA's view of them (issued by thread 0 of the warpgroup).
  auto sdQ = make_tensor(make_smem_ptr(smem.dq[w]), SmemLayoutDqBuffers{});  // (64, 64, buffer)
  auto gdQ = local_tile(prm.tma_dq.get_tma_tensor(make_shape(f.seqlen_q, f.head_dim, f.heads_q, f.batch))(_, _, h, b),
                        Shape<M, HalfD>{}, make_coord(_, w));  // (64, 64, query block)
  auto [tdQg, tdQs] = tma_partition(prm.tma_dq, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdQ), group_modes<0, 2>(gdQ));
  static_assert(sizeof(SharedStorage) <= 227 * 1024, "an sm90 block has at most 227 KB of shared memory");

  if (steps > 0) FullBarrier::wait(&smem.kv_full, 0);
  for (int i = 0; i < steps; ++i) {
    const int s = i % kStages, row0 = row_first + i * kBlockM;
    FullBarrier::wait(&smem.full[s], (i / kStages) % 2);
    auto sQ_s = sQ(_, _, s);
    auto sdO_s = sdO(_, _, s);
    auto sQt = make_tensor(sQ_s.data(), SmemLayoutQt{});
    auto sdOt = make_tensor(sdO_s.data(), SmemLayoutQt{});
    issue(mma_sdp, thr_sdp.partition_fragment_A(sQ_s), thr_sdp.partition_fragment_B(sK_w), tSrS, false);
    issue(mma_sdp, thr_sdp.partition_fragment_A(sdO_s), thr_sdp.partition_fragment_B(sV_w), tSrdP, false);
    float lse2[2], delta[2];  // this thread's two rows
    CUTE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {
      const int r = get<0>(tScS(2 * hr));
      lse2[hr] = sLse(r, s) * 1.4426950408889634f;
      delta[hr] = sDelta(r, s);
    }
    const int last_query = min(row0 + kBlockM, f.seqlen_q) - 1;
    const bool full_tile = last_query + f.key_offset - f.window_left <= key_w0 &&
                           row0 + f.key_offset + f.window_right >= key_w0 + kBlockN / 2 - 1 &&
                           key_w0 + kBlockN / 2 <= f.seqlen_k;
    // P in place of S, while dP is still on the tensor cores.
    warpgroup_wait<1>();
    warpgroup_fence_operand(tSrS);
    auto probs = [&](auto masked) {
      CUTE_UNROLL
      for (int e = 0; e < size(tSrS); ++e) {
        float x = tSrS(e);
        if (decltype(masked)::value) {
          const int query = row0 + get<0>(tScS(e)), key = key_w0 + get<1>(tScS(e));
          const bool visible = key < f.seqlen_k && key >= query + f.key_offset - f.window_left &&
                               key <= query + f.key_offset + f.window_right;
          x = visible ? x : -INFINITY;
        }
        tSrS(e) = flashtile::cuda::exp2_approx(fmaf(x, f.scale_log2, -lse2[(e / 2) % 2]));
      }
    };
    if (full_tile)
      probs(std::false_type{});
    else
      probs(std::true_type{});
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrdP);
    // P and dS (without the softmax scale, as the library's sm80 backward keeps it: the scale is applied once, to
    // dK below and to dQ when the fp32 accumulator is converted) into shared memory, two columns per store. The
    // other warpgroup may still be reading the previous step's dS for its dQ until the step barrier.
    if (i > 0) named_sync(kStepBarrier + w, 2 * 128);
    CUTE_UNROLL
    for (int e = 0; e < size(tSrS); e += 2) {
      const float p0 = tSrS(e), p1 = tSrS(e + 1);
      const float ds0 = p0 == 0.0f ? 0.0f : p0 * (tSrdP(e) - delta[(e / 2) % 2]);
      const float ds1 = p1 == 0.0f ? 0.0f : p1 * (tSrdP(e + 1) - delta[(e / 2) % 2]);
      const __nv_bfloat162 pp = __floats2bfloat162_rn(p0, p1), dd = __floats2bfloat162_rn(ds0, ds1);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(&tSsP(e)))),
                   "r"(*reinterpret_cast<const uint32_t*>(&pp)));
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(&tSsdS(e)))),
                   "r"(*reinterpret_cast<const uint32_t*>(&dd)));
    }
    cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> async-proxy reads (wgmma)
    // Step i writes dQ buffer i % 2, last read by the add of step i - 2: every add but the latest has read its
    // buffer after this wait, and the barrier below passes that on to the warpgroup.
    if (tid == 0) tma_store_wait<1>();
    named_sync(1 + w, 128);  // this warpgroup's P and dS are in place
    issue(mma_kv, thr_kv.partition_fragment_A(sPt_w), thr_kv.partition_fragment_B(sdOt), tVrdV, true);
    issue(mma_kv, thr_kv.partition_fragment_A(sdSt_w), thr_kv.partition_fragment_B(sQt), tKrdK, true);
    named_sync(kDsBarrier, 2 * 128);  // and the other's dS, which dQ reads too
    issue(mma_dq, thr_dq.partition_fragment_A(sdS), thr_dq.partition_fragment_B(sKt_w), tQrdQ, false);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tVrdV);
    warpgroup_fence_operand(tKrdK);
    warpgroup_fence_operand(tQrdQ);
    EmptyBarrier::arrive(&smem.empty[s]);  // Q, dO, LSE and D of this stage are read
    if (i + 1 < steps) asm volatile("bar.arrive %0, %1;\n" ::"r"(kStepBarrier + 1 - w), "r"(2 * 128));

    // dQ into this step's buffer (free since the wait above), then added by TMA; rows past the sequence end are
    // clipped by the descriptor.
    const int dq_buf = i % 2;
    CUTE_UNROLL
    for (int e = 0; e < size(tQrdQ); e += 2) {  // st.shared: through the swizzled layout a plain store went generic
      const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(&sdQ(get<0>(tQcQ(e)), get<1>(tQcQ(e)), dq_buf)));
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(tQrdQ(e)), "f"(tQrdQ(e + 1)));
    }
    cutlass::arch::fence_view_async_shared();  // the TMA reads through the async proxy
    named_sync(1 + w, 128);
    if (tid == 0) {
      copy(prm.tma_dq, tdQs(_, dq_buf), tdQg(_, row0 / kBlockM));
      tma_store_arrive();
    }
  }
  if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // the adds are done before exit

  // Each warpgroup waits at its step barrier in steps 1 .. steps - 1 and the other arrives there after steps
  // 0 .. steps - 2, so none is left open here.
  // dK and dV rows of this warpgroup's keys.
  Element* dk_head = static_cast<Element*>(p.dk) + b * p.dk_stride[0] + h * p.dk_stride[2];
  Element* dv_head = static_cast<Element*>(p.dv) + b * p.dv_stride[0] + h * p.dv_stride[2];
  auto tKcK = thr_kv.partition_C(make_identity_tensor(Shape<_64, D>{}));
  CUTE_UNROLL
  for (int e = 0; e < size(tKrdK); ++e) {
    const int key = key_w0 + get<0>(tKcK(e)), col = get<1>(tKcK(e));
    if (key < f.seqlen_k) {
      dk_head[key * p.dk_stride[1] + col] = Element(tKrdK(e) * p.scale);
      dv_head[key * p.dv_stride[1] + col] = Element(tVrdV(e));
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

  // The same problem through the step-1 kernel; D (delta) is the library's, from the calls above ((batch, head,
  // row), contiguous).
  sm90_bwd::Params prm{};
  prm.p = p;
  prm.p.dk = dk90, prm.p.dv = dv90, prm.p.dq_accum = dq90;
  prm.p.n_blocks = (seqlen + sm90_bwd::kBlockN - 1) / sm90_bwd::kBlockN;
  {
    using namespace cute;
    using sm90_bwd::Element;
    auto rows = [&](const void* ptr, const int64_t* stride) {
      return sm90_bwd::rows_tensor(static_cast<const Element*>(ptr), seqlen, heads, batch, stride);
    };
    prm.tma_q = make_tma_copy(SM90_TMA_LOAD{}, rows(q, f.q_stride), sm90_bwd::SmemLayoutQ{});
    prm.tma_do = make_tma_copy(SM90_TMA_LOAD{}, rows(dout, p.dout_stride), sm90_bwd::SmemLayoutQ{});
    prm.tma_k = make_tma_copy(SM90_TMA_LOAD{}, rows(k, f.k_stride), sm90_bwd::SmemLayoutK{});
    prm.tma_v = make_tma_copy(SM90_TMA_LOAD{}, rows(v, f.v_stride), sm90_bwd::SmemLayoutK{});
    prm.tma_lse = make_tma_copy(
        SM90_TMA_LOAD{}, sm90_bwd::stats_tensor(lse, seqlen, heads, batch, f.lse_stride[1], f.lse_stride[0]),
        Layout<sm90_bwd::M>{});
    prm.tma_delta = make_tma_copy(
        SM90_TMA_LOAD{}, sm90_bwd::stats_tensor(delta, seqlen, heads, batch, seqlen, int64_t(heads) * seqlen),
        Layout<sm90_bwd::M>{});
    prm.tma_dq = make_tma_copy(SM90_TMA_REDUCE_ADD{}, sm90_bwd::dq_tensor(dq90, seqlen, heads, batch),
                               sm90_bwd::SmemLayoutDq{});
  }
  const int smem = sizeof(sm90_bwd::SharedStorage);
  CHECK(cudaFuncSetAttribute(sm90_bwd::bwd_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const unsigned blocks = unsigned(prm.p.n_blocks) * batch * heads;
  const float ms90 = harness::median_ms([&] {
    CHECK(cudaMemsetAsync(dq90, 0, n * 4));
    sm90_bwd::bwd_wgmma_kernel<<<blocks, sm90_bwd::kThreads, smem>>>(prm);
  });

  const double flops = 2.5 * 4.0 * batch * heads * double(seqlen) * seqlen * kD / (causal ? 2 : 1);
  // dQ against the library's fp32 accumulator of its last call (the same (batch, head, row, dim) layout, before
  // the conversion to bf16 and BSHD); dK and dV in bf16, BSHD.
  const auto bf16 = [](const void* ptr) { return static_cast<const uint16_t*>(ptr); };
  const harness::Agreement adq = harness::compare(dq90, dq_accum, n),
                           adk = harness::compare(bf16(dk90), bf16(dk), n),
                           adv = harness::compare(bf16(dv90), bf16(dv), n);
  std::printf("B%-2d H%-2d S%-5d D%d %-6s | sm80 backward %7.3f ms %6.1f TFLOP/s | sm90 step 1e (dK/dV kernel "
              "only: no D, no dQ conversion) %7.3f ms %6.1f TFLOP/s | dQ %s (%.4f of %.3f) dK %s (%.4f of %.3f) "
              "dV %s (%.4f of %.3f) %zu non-finite\n",
              batch, heads, seqlen, kD, causal ? "causal" : "full", ms80, flops / ms80 / 1e9, ms90,
              flops / ms90 / 1e9, adq.ok() ? "AGREE" : "DIFFER", adq.worst, adq.scale, adk.ok() ? "AGREE" : "DIFFER",
              adk.worst, adk.scale, adv.ok() ? "AGREE" : "DIFFER", adv.worst, adv.scale,
              adq.non_finite + adk.non_finite + adv.non_finite);
  for (void* ptr : {q, k, v, o, dout, dq, dk, dv, dk90, dv90}) CHECK(cudaFree(ptr));
  for (float* ptr : {lse, delta, dq_accum, dq90}) CHECK(cudaFree(ptr));
}

// With no arguments, the shapes below; with `B S H full|causal`, that one shape (for a profiler).
int main(int argc, char** argv) {
  if (argc == 5) {
    run(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::strcmp(argv[4], "causal") == 0);
    return 0;
  }
  for (bool causal : {false, true}) {
    run(1, 200, 2, causal);  // a partial key block and a partial query block
    run(8, 2048, 16, causal);
    run(2, 8192, 16, causal);
  }
  return 0;
}
