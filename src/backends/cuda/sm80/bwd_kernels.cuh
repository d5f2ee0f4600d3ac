// The sm80 backward: its dK/dV kernel has FlashAttention-2's own layout (bwd_config.hpp, warp_mma.cuh); the
// deterministic mode's dQ kernel is built from the forward's tile pieces (fwd_tile.cuh). Two modes:
//
// Default (BackwardParams::deterministic = false), FlashAttention-2's five tile products:
//   1. bwd_delta_kernel: D = rowsum(dO * O) per query row (fp32), the term every dS needs; it also zeroes the
//      fp32 dQ accumulator;
//   2. bwd_dkdv_kernel<kAccumulateDq = true>: one CTA of eight warps per (key block, batch, K/V head); loops
//      over the group's query heads and the query blocks that see the keys:
//        S = Q K^T, P = exp(S - LSE), dP = dO V^T, dS = P (dP - D) scale  (P and dS / scale to shared memory),
//        dV += P^T dO, dK += dS^T Q, and dQ += dS K added into an fp32 accumulator with atomics
//        (P is recomputed from the saved LSE, never stored in global memory);
//   3. launch_bwd_dq_convert: dQ = the accumulator, in the input dtype (its order: DqAccumOrder, dq_accum.hpp).
// The atomics make dQ's rounding depend on the order the key blocks finish in.
//
// Deterministic: kernel 2 without the dQ part, then
//   3'. bwd_dq_kernel: one CTA per (query block, batch, query head), the forward's shape:
//        S = Q K^T, P = exp(S - LSE), dP = dO V^T, dS = P (dP - D) scale, dQ += dS K.
// Every CTA owns what it writes, so the gradients are bitwise identical from run to run; the price is
// recomputing S and dP (seven tile products instead of five).
//
// Both main kernels prefetch a step's tiles while the previous step's products run, where shared memory allows
// (run_steps, BwdKernelParams::prefetch; bwd_config.hpp).
#pragma once

#include <type_traits>

#include "backends/cuda/bwd_kernel_params.hpp"
#include "backends/cuda/sm80/bwd_config.hpp"
#include "backends/cuda/sm80/fwd_tile.cuh"
#include "backends/cuda/sm80/warp_mma.cuh"
#include "backends/cuda/visible_keys.hpp"

namespace flashtile::cuda::sm80 {

// The row kernels (D, the dQ conversion, and the sm90 backward's preparation) give each query row a group of
// kLanes consecutive lanes, each lane one 16-byte chunk (8 elements) of the row: kLanes = the row's chunks at the
// instantiated head dim, rounded up to a power of two (D = 64: 8, 128: 16, 256: 32). One warp per row, as before,
// issued 2-byte loads and left most lanes idle at D = 64: those two kernels took 2.3x the time of FA2's at D = 64
// and 1.3x at D = 256, for the same bytes (bench/results/2026-12-02-sm80-v17-v18, bwdparts).
constexpr int kRowThreads = 256;  // threads per block of the row kernels

template <int kHeadDim>
struct LaneRow {
  static_assert(kHeadDim % 8 == 0 && kHeadDim <= 256, "a row is at most a warp's 32 chunks of 16 bytes");
  static constexpr int row_lanes() {
    int lanes = 1;
    while (lanes < kHeadDim / 8) lanes *= 2;
    return lanes;
  }
  static constexpr int kLanes = row_lanes();

  static unsigned blocks(int64_t rows) {
    return static_cast<unsigned>((rows * kLanes + kRowThreads - 1) / kRowThreads);
  }

  // The query row of this thread's lane group: rows in (batch, head, row) order with rows_per_head rows a head,
  // the order of the D and dQ workspaces. False past the last row (for whole groups: a group shares its row).
  int64_t index;  // into the workspaces
  int b, h, i;
  int column;  // this lane's first column; at or past the head dim where it is below kHeadDim (no chunk)
  __device__ bool find(const FwdKernelParams& f, int64_t rows_per_head) {
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    index = thread / kLanes, column = static_cast<int>(thread % kLanes) * 8;
    if (index >= static_cast<int64_t>(f.batch) * f.heads_q * rows_per_head) return false;
    i = static_cast<int>(index % rows_per_head), h = static_cast<int>((index / rows_per_head) % f.heads_q);
    b = static_cast<int>(index / (rows_per_head * f.heads_q));
    return true;
  }
  __device__ bool first_lane() const { return column == 0; }
  // The group's lanes, for the shuffles that sum over them.
  __device__ unsigned mask() const {
    return kLanes == 32 ? 0xffffffffu : ((1u << kLanes) - 1) << (threadIdx.x % 32 / kLanes * kLanes);
  }
};

// rowsum(dO * O) of the group's row, in every lane of the group. O and dO rows are 16-byte aligned and the head
// dim a multiple of 8 (cuda_backend.cpp checks both).
template <typename T, int kHeadDim>
__device__ __forceinline__ float row_dot_o_do(const BwdKernelParams& p, const LaneRow<kHeadDim>& r) {
  const FwdKernelParams& f = p.fwd;
  float acc = 0.0f;
  if (r.column < f.head_dim) {
    const T* o = static_cast<const T*>(f.o) + r.b * f.o_stride[0] + r.i * f.o_stride[1] + r.h * f.o_stride[2];
    const T* d =
        static_cast<const T*>(p.dout) + r.b * p.dout_stride[0] + r.i * p.dout_stride[1] + r.h * p.dout_stride[2];
    const uint4 ov = *reinterpret_cast<const uint4*>(o + r.column), dv = *reinterpret_cast<const uint4*>(d + r.column);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 x = unpack2<T>(ow[w]), y = unpack2<T>(dw[w]);
      acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
    }
  }
#pragma unroll
  for (int off = LaneRow<kHeadDim>::kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(r.mask(), acc, off);
  return acc;
}

// Zeroes the dQ accumulator (dq_accum_floats floats, a multiple of 4; 0 in the deterministic mode, which has
// none) from the kernel that computes D, a 16-byte store a thread and round, in its place in memory rather than
// its rows': stores need no wait, so they go out under the loads of O and dO, where a memset before that kernel
// was a pass of its own (FlashAttention-2 zeroes its accumulator in the same kernel). Same-call A/B (sm80 v22,
// docs/perf-log.md): the backward +0.2-1.3% at S = 512, even from S = 4096.
__device__ __forceinline__ void zero_dq_accum(const BwdKernelParams& p, int64_t dq_accum_floats) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < dq_accum_floats / 4; i += threads)
    reinterpret_cast<float4*>(p.dq_accum)[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// D for one query row per lane group, and the dQ accumulator zeroed (zero_dq_accum).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kRowThreads) bwd_delta_kernel(const BwdKernelParams p, int64_t dq_accum_floats) {
  zero_dq_accum(p, dq_accum_floats);
  LaneRow<kHeadDim> r;
  if (!r.find(p.fwd, p.fwd.seqlen_q)) return;
  const float acc = row_dot_o_do<T>(p, r);
  if (r.first_lane()) p.delta[r.index] = acc;  // r.index: rows dense, p.delta_head_stride = seqlen_q
}

// The LSE in log2 units, with rows that saw no key (LSE = -inf) mapped to 0: all their scores are -inf, so P is
// 0 either way, and -inf - -inf would be NaN. From 2^16 (huge logits) it is raised by 4 to 8 units in its last
// place: the LSE came through about three units of rounding (the forward's max times the scale, its sum with
// log2(l), two changes of base), so the largest score's exponent S * scale_log2 - LSE could come out positive by
// that much, P above 1 (from 2^31 P = inf, and NaN gradients). Raised, every P <= 1: the gradients stay finite and
// dV within the column sums of |dO|; P's bias, at most 2^-8 units, is of the order of what the fp32 LSE already
// costs there. Below 2^16 it is the plain product, the oracle's, and the exponents' rounding keeps P within ~1e-6
// of 1 at most (the backward's exponents are not capped: a FMNMX a score cost the D = 128 backward 2.8%).
__device__ __forceinline__ float lse_log2(float lse) {
  if (lse == -INFINITY) return 0.0f;
  const float x = lse * 1.4426950408889634f;
  return fabsf(x) >= 65536.0f ? x + fabsf(x) * 0x1p-21f : x;
}

// dS / scale = P (dP - D), times (1 - tanh^2) under a softcap; the softmax scale is applied once to what dS
// sums into (dK at the end of the dK/dV kernel, dQ at its conversion or the end of the dQ kernel), not to
// every element. kMasked: P = 0 at a hidden key gives exactly 0, so a NaN dP from a NaN stored at a hidden key
// stays out. On a tile with no hidden key a P of 0 is an underflow, and a NaN dP there comes from a NaN the row
// sees, which has made the row's D (and so its every other dS) NaN already: the test is left out.
template <bool kSoftcap, bool kMasked>
__device__ __forceinline__ float grad_score(float prob, float dp, float delta, float capped, const FwdKernelParams& f) {
  if (kMasked && prob == 0.0f) return 0.0f;
  float ds = prob * (dp - delta);
  if (kSoftcap) {
    const float th = capped / f.softcap;
    ds *= 1.0f - th * th;
  }
  return ds;
}

// Whether the 16-column group starting at column group0 (a multiple of 16) is stored pair-interleaved.
__device__ __forceinline__ bool dq_group_interleaved(int group0, int head_dim) { return group0 + 16 <= head_dim; }

// Consecutive floats added into global memory: one vector reduction on sm90 (red.global.add.v2 / .v4.f32),
// one per float before.
__device__ __forceinline__ void red_add(float* at, float2 v) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(at), v);
#else
  atomicAdd(at, v.x), atomicAdd(at + 1, v.y);
#endif
}
__device__ __forceinline__ void red_add(float* at, float4 v) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(at), v);
#else
  atomicAdd(at, v.x), atomicAdd(at + 1, v.y), atomicAdd(at + 2, v.z), atomicAdd(at + 3, v.w);
#endif
}
// The same at a global-space address (__cvta_generic_to_global), for callers that set bits of it (kStepPointers).
__device__ __forceinline__ void red_add_global(size_t at, float4 v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(at), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
#else
  asm volatile(
      "red.global.add.f32 [%0], %1;\n red.global.add.f32 [%0+4], %2;\n red.global.add.f32 [%0+8], %3;\n"
      " red.global.add.f32 [%0+12], %4;\n" ::"l"(at),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
#endif
}
// red_add_global where `add` holds, by a predicate rather than a branch: between a wgmma's issue and its wait a
// branch is a divergent path to ptxas, which then serializes every wgmma of the kernel (C7520).
__device__ __forceinline__ void red_add_global_if(size_t at, float4 v, bool add) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(at),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(static_cast<int>(add)));
#else
  if (add) red_add_global(at, v);
#endif
}

// dQ = the fp32 accumulator (sums of dS / scale times K) times the scale, in the input dtype (default mode), for
// the row order (kPairInterleaved): one query row per lane group, 8 columns a lane (accumulator rows are
// 32-byte aligned: head dims are multiples of 8).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kRowThreads) bwd_dq_convert_rows_kernel(const BwdKernelParams p) {
  const FwdKernelParams& f = p.fwd;
  LaneRow<kHeadDim> r;
  if (!r.find(f, f.seqlen_q) || r.column >= f.head_dim) return;
  T* dst = static_cast<T*>(p.dq) + r.b * p.dq_stride[0] + r.i * p.dq_stride[1] + r.h * p.dq_stride[2] + r.column;
  float2 v[4];  // columns r.column + 2 m and + 1
  const float* src = p.dq_accum + r.index * f.head_dim;
  if (!dq_group_interleaved(r.column / 16 * 16, f.head_dim)) {
    const float4 lo = *reinterpret_cast<const float4*>(src + r.column),
                 hi = *reinterpret_cast<const float4*>(src + r.column + 4);
    v[0] = {lo.x, lo.y}, v[1] = {lo.z, lo.w}, v[2] = {hi.x, hi.y}, v[3] = {hi.z, hi.w};
  } else {
    // This lane's half of the group: its pairs 4 floats apart, starting 2 floats in for the second half.
#pragma unroll
    for (int m = 0; m < 4; ++m)
      v[m] = *reinterpret_cast<const float2*>(src + r.column / 16 * 16 + r.column % 16 / 4 + 4 * m);
  }
  st_global_v4(dst, pack2<T>(v[0].x * p.scale, v[0].y * p.scale), pack2<T>(v[1].x * p.scale, v[1].y * p.scale),
               pack2<T>(v[2].x * p.scale, v[2].y * p.scale), pack2<T>(v[3].x * p.scale, v[3].y * p.scale));
}

// A 4 x 4 transpose over the lanes of each quad: lane t's x[j] becomes what lane j held in x[t]. Two rounds;
// in round m, lanes t and t ^ m swap the two entries whose index differs from their own lane in bit m.
__device__ __forceinline__ void quad_transpose(uint32_t (&x)[4]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int m = 2; m >= 1; m /= 2) {
    const bool upper = (t & m) != 0;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      if (a & m) continue;  // the pair (a, a | m), once
      uint32_t give = upper ? x[a] : x[a | m];
      give = __shfl_xor_sync(0xffffffffu, give, m);
      if (upper)
        x[a] = give;
      else
        x[a | m] = give;
    }
  }
}

// The conversion for the fragment order (dq_accum.hpp): one warp per 16-row band of a head and group of
// kConvertBlocks 8-column blocks. A band is contiguous and each block in it one 512-byte fragment, so lane
// 4g + t reads its own four floats of a block (rows g and g + 8, columns 2t and 2t + 1) with one 16-byte load,
// the warp the whole block. After a transpose over each quad, lane t of quad g holds rows g and g + 8 of block
// t whole, 8 columns each, for two 16-byte stores; a store instruction writes 64 contiguous bytes of each of 8
// rows. Read row by row instead (lanes a block apart, 8-byte loads, each 32-byte sector reached four times), the
// conversion took 98 us at D = 256 where the row orders take 47 for the same bytes (ncu, docs/perf-log.md v15).
constexpr int kConvertBlocks = 4;  // the quad's four lanes, one block each after the transpose

template <typename T>
__global__ void __launch_bounds__(kRowThreads) bwd_dq_convert_fragment_kernel(const BwdKernelParams p) {
  const FwdKernelParams& f = p.fwd;
  const int blocks = f.head_dim / 8;  // 8-column blocks of a row
  const int groups = (blocks + kConvertBlocks - 1) / kConvertBlocks;
  const int64_t bands = dq_accum_fragment_rows(f.seqlen_q) / kDqAccumRowAlign;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= static_cast<int64_t>(f.batch) * f.heads_q * bands * groups) return;  // the whole warp
  const int group = static_cast<int>(warp % groups);
  const int64_t band_index = warp / groups;  // over (batch, head, band): the bands lie one after the other
  const int band = static_cast<int>(band_index % bands);
  const int h = static_cast<int>(band_index / bands % f.heads_q), b = static_cast<int>(band_index / bands / f.heads_q);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float* band_accum = p.dq_accum + band_index * kDqAccumRowAlign * f.head_dim;

  uint32_t lo[kConvertBlocks], hi[kConvertBlocks];  // rows g and g + 8 of block group * 4 + j, columns 2t, 2t + 1
#pragma unroll
  for (int j = 0; j < kConvertBlocks; ++j) {
    const int block = group * kConvertBlocks + j;
    float4 v = {0.0f, 0.0f, 0.0f, 0.0f};
    if (block < blocks) v = *reinterpret_cast<const float4*>(band_accum + block * 128 + 4 * lane);
    lo[j] = pack2<T>(v.x * p.scale, v.y * p.scale), hi[j] = pack2<T>(v.z * p.scale, v.w * p.scale);
  }
  quad_transpose(lo), quad_transpose(hi);  // now block group * 4 + t, columns 2j, 2j + 1

  const int block = group * kConvertBlocks + t, row = band * kDqAccumRowAlign + g;
  if (block >= blocks) return;
  T* dst = static_cast<T*>(p.dq) + b * p.dq_stride[0] + h * p.dq_stride[2] + block * 8;
  if (row < f.seqlen_q) st_global_v4(dst + row * p.dq_stride[1], lo[0], lo[1], lo[2], lo[3]);
  if (row + 8 < f.seqlen_q) st_global_v4(dst + (row + 8) * p.dq_stride[1], hi[0], hi[1], hi[2], hi[3]);
}

// dQ from the accumulator in order kOrder, on `stream`, for a call with at least one query row.
template <typename T, int kHeadDim, DqAccumOrder kOrder>
void launch_bwd_dq_convert(const BwdKernelParams& p, cudaStream_t stream) {
  const FwdKernelParams& f = p.fwd;
  if constexpr (kOrder == DqAccumOrder::kFragment) {
    const int64_t groups = (f.head_dim / 8 + kConvertBlocks - 1) / kConvertBlocks;
    const int64_t warps =
        static_cast<int64_t>(f.batch) * f.heads_q * (dq_accum_fragment_rows(f.seqlen_q) / kDqAccumRowAlign) * groups;
    const int64_t ctas = (warps * 32 + kRowThreads - 1) / kRowThreads;
    bwd_dq_convert_fragment_kernel<T><<<static_cast<unsigned>(ctas), kRowThreads, 0, stream>>>(p);
  } else {
    const int64_t rows = static_cast<int64_t>(f.batch) * f.heads_q * f.seqlen_q;
    bwd_dq_convert_rows_kernel<T, kHeadDim><<<LaneRow<kHeadDim>::blocks(rows), kRowThreads, 0, stream>>>(p);
  }
}

// The step loop of both main kernels. A CTA keeps two tiles (K and V, or Q and dO) and walks steps that each
// bring two others (Q and dO, or K and V). With prefetch (BwdKernelParams::prefetch) a step's tiles are loaded
// into one of two buffers while the previous step's products run on the other; without, into the one buffer
// at the top of the step. issue(step, buffer) starts a step's loads and commits them as one cp.async group;
// body(step, buffer) runs its products; each is called once per step, in step order. Groups committed before
// the loop (the CTA's own tiles) have landed before the first body.
// kOneBarrier (with prefetch): one barrier a step instead of two. Each thread first waits for its copies of this
// step's tiles (the only group in flight), so past the barrier they are visible to all and every warp is done
// with the previous step, whose buffer the next step's loads then refill; those loads issue after the barrier
// instead of before this step's wait (BwdDkdvConfig::kOneBarrier, bwd_config.hpp). Its loops are written out
// apart from the two-barrier loop: each form is the code its A/B measured (merged, the D = 256 kernel's PTX
// changed).
template <bool kOneBarrier, typename Issue, typename Body>
__device__ __forceinline__ void run_steps(int n_steps, bool prefetch, Issue&& issue, Body&& body) {
  if constexpr (kOneBarrier) {
    if (prefetch) {
      if (n_steps > 0) issue(0, 0);
      for (int step = 0; step < n_steps; ++step) {
        cp_async_wait<0>();
        __syncthreads();
        if (step + 1 < n_steps) issue(step + 1, (step + 1) & 1);
        body(step, step & 1);
      }
    } else {
      for (int step = 0; step < n_steps; ++step) {
        __syncthreads();  // every warp is done with the previous step, whose buffer these loads refill
        issue(step, 0);
        cp_async_wait<0>();
        __syncthreads();  // every thread's copies of this step's tiles are visible to all
        body(step, 0);
      }
    }
    cp_async_wait<0>();
    return;
  }
  if (prefetch && n_steps > 0) issue(0, 0);
  for (int step = 0; step < n_steps; ++step) {
    const int buffer = prefetch ? step & 1 : 0;
    __syncthreads();  // every warp is done with the previous step, whose buffer the next loads refill
    const bool ahead = prefetch && step + 1 < n_steps;
    if (ahead)
      issue(step + 1, buffer ^ 1);
    else if (!prefetch)
      issue(step, 0);
    if (ahead)
      cp_async_wait<1>();  // all but the group just issued: this step's tiles
    else
      cp_async_wait<0>();
    __syncthreads();  // every thread's copies of this step's tiles are visible to all
    body(step, buffer);
  }
  cp_async_wait<0>();  // with no step, the CTA's own tiles are still in flight; keep the group count clean
}

// One CTA per (key block, batch, K/V head): Traits is a BwdDkdvTraits (bwd_config.hpp), whose table gives the
// three warp grids. Shared memory (Traits::smem_bytes):
//   sK, sV      [kBlockN][kRowStride]            the CTA's keys, for the whole loop
//   sQ, sDO     [buffers][kBlockM][kRowStride]   one step's query rows (these four swizzled where
//                                                Traits::kSwizzled, SmemTile in warp_mma.cuh)
//   sP, sdS     [kBlockM][kPStride]              the step's P and dS, in the input dtype
//   sLse, sDelta [buffers][kBlockM]              the step's rows' LSE (natural log, as stored) and D
template <typename Traits, typename T, bool kSoftcap, bool kAccumulateDq>
__global__ void __launch_bounds__(Traits::kThreads) bwd_dkdv_kernel(const BwdKernelParams p) {
  constexpr int kN = Traits::kBlockN, kM = Traits::kBlockM, kD = Traits::kHeadDim;
  constexpr int kStride = Traits::kRowStride, kPStride = Traits::kPStride, kTile = kM * kStride;
  constexpr int kSdpRows = Traits::kSdpRows, kSdpCols = Traits::kSdpCols;
  constexpr int kKvRows = Traits::kKvRows, kKvCols = Traits::kKvCols;
  constexpr int kDqRows = Traits::kDqRows, kDqCols = Traits::kDqCols;
  constexpr bool kSwz = Traits::kSwizzled;
  using RowsTile = SmemTile<T, kSwz>;   // Q, dO, K, V
  using ProbTile = SmemTile<T, false>;  // P, dS
  const FwdKernelParams& f = p.fwd;
  const int buffers = p.prefetch ? 2 : 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kN * kStride;
  T* sQ = sV + kN * kStride;
  T* sDO = sQ + buffers * kTile;
  T* sP = sDO + buffers * kTile;
  T* sdS = sP + kM * kPStride;
  float* sLse = reinterpret_cast<float*>(sdS + kM * kPStride);
  float* sDelta = sLse + buffers * kM;

  // Where this warp's tiles sit in each product (bwd_config.hpp), and its fragment coordinates g, t (ptx.cuh).
  const int warp = static_cast<int>(threadIdx.x / 32), lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int sdp_row = warp % Traits::kSdpWarpsM * kSdpRows, sdp_col = warp / Traits::kSdpWarpsM * kSdpCols;
  const int kv_row = warp % Traits::kKvWarpsN * kKvRows, kv_col = warp / Traits::kKvWarpsN * kKvCols;
  const int dq_row = warp % Traits::kDqWarpsM * kDqRows, dq_col = warp / Traits::kDqWarpsM * kDqCols;

  const int n_block = blockIdx.x % p.n_blocks, bhk = blockIdx.x / p.n_blocks;
  const int b = bhk / p.heads_kv, hk = bhk % p.heads_kv;
  const int key0 = n_block * kN;
  const T* k_head = static_cast<const T*>(f.k) + b * f.k_stride[0] + hk * f.k_stride[2];
  const T* v_head = static_cast<const T*>(f.v) + b * f.v_stride[0] + hk * f.v_stride[2];
  load_rows_async<Traits, kN, kSwz>(sK, k_head, f.k_stride[1], key0, f.seqlen_k, f.head_dim);
  load_rows_async<Traits, kN, kSwz>(sV, v_head, f.v_stride[1], key0, f.seqlen_k, f.head_dim);
  cp_async_commit();

  // The steps: each query head of the group, times each block of kM query rows that sees a key of this block,
  // [row_begin, row_end). run_steps calls issue and body once per step each, in step order, so each walks its
  // own cursor forward instead of dividing the step index (a division per call was ~25 instructions).
  const int row_begin = max(0, key0 - f.key_offset - f.window_right);
  const int row_end = min(f.seqlen_q, key0 + kN - f.key_offset + f.window_left);
  const int row_first = row_begin / kM * kM;
  const int per_head = row_begin < row_end ? (row_end - row_first + kM - 1) / kM : 0;
  struct StepCursor {
    int h, row0;  // the step's query head and first row
    __device__ void advance(int first, int end) {
      row0 += kM;
      if (row0 >= end) row0 = first, ++h;
    }
  };
  StepCursor issue_at{hk * f.group, row_first}, body_at = issue_at;
  // kStepPointers (bwd_config.hpp): where the issue cursor's head starts in Q, dO, the LSE and D, and the body
  // cursor's in the dQ accumulator, moved by the head strides when the cursor's head changes. Without, those 64-bit
  // offsets are multiplied out from the head each step (~50 instructions a step at D = 256).
  const int64_t dq_head_floats = dq_accum_rows(f.seqlen_q, Traits::kDqOrder) * f.head_dim;
  struct HeadStarts {
    const T *q, *dout;
    const float *lse, *delta;
    float* dq;
  } starts{static_cast<const T*>(f.q) + b * f.q_stride[0] + issue_at.h * f.q_stride[2],
           static_cast<const T*>(p.dout) + b * p.dout_stride[0] + issue_at.h * p.dout_stride[2],
           f.lse + b * f.lse_stride[0] + issue_at.h * f.lse_stride[1],
           p.delta + (static_cast<int64_t>(b) * f.heads_q + issue_at.h) * p.delta_head_stride,
           kAccumulateDq ? p.dq_accum + (static_cast<int64_t>(b) * f.heads_q + issue_at.h) * dq_head_floats : nullptr};

  static_assert(2 * kM <= Traits::kThreads, "one thread per row for the LSE and one for D");
  auto issue = [&](int, int buffer) {
    const int h = issue_at.h, row0 = issue_at.row0;
    issue_at.advance(row_first, row_end);
    const HeadStarts at = starts;  // kStepPointers: head h's
    if constexpr (Traits::kStepPointers) {
      if (issue_at.h != h) {
        starts.q += f.q_stride[2], starts.dout += p.dout_stride[2];
        starts.lse += f.lse_stride[1], starts.delta += p.delta_head_stride;
      }
    }
    const T* q_head =
        Traits::kStepPointers ? at.q : static_cast<const T*>(f.q) + b * f.q_stride[0] + h * f.q_stride[2];
    const T* do_head =
        Traits::kStepPointers ? at.dout : static_cast<const T*>(p.dout) + b * p.dout_stride[0] + h * p.dout_stride[2];
    load_rows_async<Traits, kM, kSwz>(sQ + buffer * kTile, q_head, f.q_stride[1], row0, f.seqlen_q, f.head_dim);
    load_rows_async<Traits, kM, kSwz>(sDO + buffer * kTile, do_head, p.dout_stride[1], row0, f.seqlen_q,
                                      f.head_dim);
    // Threads [0, kM) copy the rows' LSE, [kM, 2 kM) their D. Rows past the sequence end get LSE = D = 0:
    // their Q and dO rows are zeros, so P is 1 there but dV, dK and dS gain nothing from them. The rows with
    // kPredicatedStats (bwd_config.hpp) write the two copies as one predicated copy a thread.
    const int r = threadIdx.x % kM, row = row0 + r;
    const bool real = row < f.seqlen_q;
    auto lse_src = [&] {
      if constexpr (Traits::kStepPointers) return at.lse + (real ? row * f.lse_stride[2] : 0);
      else return f.lse + b * f.lse_stride[0] + h * f.lse_stride[1] + (real ? row * f.lse_stride[2] : 0);
    };
    auto delta_src = [&] {
      if constexpr (Traits::kStepPointers) return at.delta + (real ? row : 0);
      else return p.delta + (static_cast<int64_t>(b) * f.heads_q + h) * p.delta_head_stride + (real ? row : 0);
    };
    if constexpr (Traits::kPredicatedStats) {
      const bool lse_thread = threadIdx.x < kM;
      cp_async_4_if(threadIdx.x < 2 * kM, (lse_thread ? sLse : sDelta) + buffer * kM + r,
                    lse_thread ? lse_src() : delta_src(), real ? 4 : 0);
    } else if (threadIdx.x < kM) {
      cp_async_4(sLse + buffer * kM + r, lse_src(), real ? 4 : 0);
    } else if (threadIdx.x < 2 * kM) {
      cp_async_4(sDelta + buffer * kM + r, delta_src(), real ? 4 : 0);
    }
    cp_async_commit();
  };

  float acc_dk[kKvRows / 16][kKvCols / 8][4] = {}, acc_dv[kKvRows / 16][kKvCols / 8][4] = {};
  auto body = [&](int, int buffer) {
    const int h = body_at.h, row0 = body_at.row0;
    body_at.advance(row_first, row_end);
    float* const dq_start = starts.dq;  // kStepPointers: head h's accumulator
    if constexpr (Traits::kStepPointers && kAccumulateDq) {
      if (body_at.h != h) starts.dq += dq_head_floats;
    }
    const T* bQ = sQ + buffer * kTile;
    const T* bDO = sDO + buffer * kTile;
    // This thread's S rows (sdp_row + 16 i + g + 8 hr): their LSE in log2 units and D.
    float lse2[kSdpRows / 16][2], delta[kSdpRows / 16][2];
#pragma unroll
    for (int i = 0; i < kSdpRows / 16; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = sdp_row + i * 16 + g + hr * 8;
        lse2[i][hr] = lse_log2(sLse[buffer * kM + r]);
        delta[i][hr] = sDelta[buffer * kM + r];
      }
    // S = Q K^T and dP = dO V^T (queries x keys), then P and dS into shared memory; compiled with and without
    // the mask, which tests each element against its row's visible keys relative to the thread's first column
    // (VisibleKeys, computed once a row after common subexpressions: the three-way test on absolute keys
    // compiled to a branch per element here). Written out rather than shared through a helper taking the
    // params by reference: that form compiled the masked tile ~130 instructions longer (predicates spilled to
    // registers, PRMT).
    auto scores = [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      float acc_s[kSdpRows / 16][kSdpCols / 8][4] = {}, acc_dp[kSdpRows / 16][kSdpCols / 8][4] = {};
      warp_mma<T, kSdpRows, kSdpCols, kD, false, false>(acc_s, RowsTile{bQ + sdp_row * kStride, kStride, 0},
                                                        RowsTile{sK + sdp_col * kStride, kStride, 0});
      warp_mma<T, kSdpRows, kSdpCols, kD, false, false>(acc_dp, RowsTile{bDO + sdp_row * kStride, kStride, 0},
                                                        RowsTile{sV + sdp_col * kStride, kStride, 0});
#pragma unroll
      for (int i = 0; i < kSdpRows / 16; ++i)
#pragma unroll
        for (int j = 0; j < kSdpCols / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = acc_s[i][j][e];
            if (kSoftcap) x = f.softcap * tanhf(x * f.scale_over_cap);
            if (kMasked)
              x = VisibleKeys(f, row0 + sdp_row + i * 16 + g + (e / 2) * 8, key0 + sdp_col + 2 * t).sees(j * 8 + e % 2)
                      ? x
                      : -INFINITY;
            const float prob = exp2_approx(fmaf(x, f.scale_log2, -lse2[i][e / 2]));
            acc_s[i][j][e] = prob;
            acc_dp[i][j][e] = grad_score<kSoftcap, kMasked>(prob, acc_dp[i][j][e], delta[i][e / 2], x, f);
          }
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int at = (sdp_row + i * 16 + g + hr * 8) * kPStride + sdp_col + j * 8 + 2 * t;
            *reinterpret_cast<uint32_t*>(sP + at) = pack2<T>(acc_s[i][j][2 * hr], acc_s[i][j][2 * hr + 1]);
            *reinterpret_cast<uint32_t*>(sdS + at) = pack2<T>(acc_dp[i][j][2 * hr], acc_dp[i][j][2 * hr + 1]);
          }
        }
    };
    if (tile_fully_visible<Traits>(f, row0, key0, min(row0 + kM, f.seqlen_q) - 1))
      scores(std::false_type{});
    else
      scores(std::true_type{});
    __syncthreads();  // every warp's P and dS are in shared memory

    // dV += P^T dO (keys x columns; P read transposed).
    warp_mma<T, kKvRows, kKvCols, kM, true, true>(acc_dv, ProbTile{sP, kPStride, kv_row},
                                                  RowsTile{bDO, kStride, kv_col});
    // dQ += dS K (queries x columns), added atomically: every CTA whose keys these rows see adds its share;
    // and dK += dS^T Q (keys x columns; dS read transposed), with the reductions before or after it (kDqAt,
    // bwd_config.hpp). The reductions hold their registers until the memory pipe has read them, and no branch
    // may stand between them: a branch waits until every reduction before it has read its registers (ncu, v5:
    // the reductions, each behind such a branch, held 11-30% of the kernel's stall samples at D = 64-256). So
    // the column test, uniform over the warp, picks one of two copies of the whole tail, and rows past the
    // sequence end are not branched around: in the fragment order they add into the accumulator's padding, in
    // the pair-interleaved order -0 (x + -0 = x for every x) to the last real row. Their dS is 0 anyway (their Q
    // and dO rows are zeros) unless a K holding inf makes it NaN, so -0 is selected rather than their values
    // trusted.
    auto dk_product = [&](auto&& after_step) {
      warp_mma<T, kKvRows, kKvCols, kM, true, true>(acc_dk, ProbTile{sdS, kPStride, kv_row},
                                                    RowsTile{bQ, kStride, kv_col}, after_step);
    };
    constexpr bool kFragmentOrder = Traits::kDqOrder == DqAccumOrder::kFragment;
    // full: every column of the warp's dQ tile is real, and in the fragment order every 16-row band of it too
    // (rows past the sequence end in a real band add into the padding).
    auto dq_and_dk = [&](auto full) {
      if constexpr (kAccumulateDq) {
        constexpr bool kFull = decltype(full)::value;
        float acc_dq[kDqRows / 16][kDqCols / 8][4] = {};
        warp_mma<T, kDqRows, kDqCols, kN, false, true>(acc_dq, ProbTile{sdS + dq_row * kPStride, kPStride, 0},
                                                       RowsTile{sK, kStride, dq_col});
        float* dq_head =
            Traits::kStepPointers
                ? dq_start
                : p.dq_accum + (static_cast<int64_t>(b) * f.heads_q + h) *
                                   dq_accum_rows(f.seqlen_q, Traits::kDqOrder) * f.head_dim;
        // Pair-interleaved: one address per row, the 16-column groups at immediate offsets from it. Fragment:
        // one address per band, the 8-column blocks 128 floats apart; with kStepPointers one global address a step
        // (this thread's float of the warp's first band; the bands 16 rows apart) with the pin (0, below) OR-ed
        // into its low word: added to the offset, it made ptxas compute the whole 64-bit address again for each
        // k-step's share (~30 instructions a step at D = 256). reduce(lo, hi) issues the reductions numbered
        // [lo, hi) of the warp's kReductions, in the loops' order (compile-time bounds once unrolled: kUnderDk
        // hands each of dK's k-steps its share).
        auto reduce = [&](int lo, int hi, int pin) {
          if constexpr (kFragmentOrder) {
#pragma unroll
            for (int i = 0; i < kDqRows / 16; ++i) {
              const int band0 = row0 + dq_row + i * 16;
              if (!kFull && band0 >= f.seqlen_q) break;  // past the padding (the last block of a head)
              [[maybe_unused]] float* dst =  // (used without kStepPointers)
                  dq_head + static_cast<int64_t>(band0) * f.head_dim + dq_col * 16 + lane * 4 + pin;
#pragma unroll
              for (int j = 0; j < kDqCols / 8; ++j) {
                const int n = i * (kDqCols / 8) + j;
                if (n < lo || n >= hi) continue;
                if (!kFull && dq_col + j * 8 >= f.head_dim) break;
                const float(&frag)[4] = acc_dq[i][j];
                const float4 v = make_float4(frag[0], frag[1], frag[2], frag[3]);
                if constexpr (Traits::kStepPointers) {
                  const float* tile =
                      dq_head + static_cast<int64_t>(row0 + dq_row) * f.head_dim + dq_col * 16 + lane * 4;
                  const size_t band = __cvta_generic_to_global(tile + i * 16 * f.head_dim) | static_cast<uint32_t>(pin);
                  red_add_global(band + j * 128 * sizeof(float), v);
                } else {
                  red_add(dst + j * 128, v);
                }
              }
            }
          } else {
#pragma unroll
            for (int i = 0; i < kDqRows / 16; ++i)
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                const int row = row0 + dq_row + i * 16 + g + hr * 8;
                const bool real = row < f.seqlen_q;
                float* dst = dq_head + static_cast<int64_t>(real ? row : f.seqlen_q - 1) * f.head_dim + dq_col + pin;
                auto value = [&](int j, int e) { return real ? acc_dq[i][j][2 * hr + e] : -0.0f; };
#pragma unroll
                for (int j = 0; j < kDqCols / 8; j += 2) {
                  const int n = (i * 2 + hr) * (kDqCols / 16) + j / 2;
                  if (n < lo || n >= hi) continue;
                  // Head dims are multiples of 8: a 16-column group is real as a whole, in part (the trailing
                  // half group, plain order) or not at all.
                  if (!kFull && dq_col + j * 8 >= f.head_dim) break;
                  if (kFull || dq_group_interleaved(dq_col + j * 8, f.head_dim))
                    red_add(dst + j * 8 + 4 * t,
                            make_float4(value(j, 0), value(j, 1), value(j + 1, 0), value(j + 1, 1)));
                  else
                    red_add(dst + j * 8 + 2 * t, make_float2(value(j, 0), value(j, 1)));
                }
              }
          }
        };
        // Fragment order: one reduction per 16 x 8 block; pair-interleaved: one per row half and 16 columns.
        constexpr int kReductions = kFragmentOrder ? kDqRows / 16 * kDqCols / 8 : kDqRows / 16 * 2 * kDqCols / 16;
        if constexpr (Traits::kDqAt == DqReductionSlot::kBeforeDk) {
          reduce(0, kReductions, 0);
          dk_product(NoWork{});
        } else if constexpr (Traits::kDqAt == DqReductionSlot::kAfterDk) {
          dk_product(NoWork{});
          reduce(0, kReductions, 0);
        } else {
          constexpr int kSteps = kM / 16;  // dK's k-steps
          // ptxas hoists the reductions to right after dQ's product, ahead of dK's (their operands are ready
          // there): each k-step's share takes an address offset of 0 that reads the k-step's last dK
          // accumulator, so it waits for that MMA. `never` is 0 (n_blocks >= 0) where the compiler cannot know it.
          const int never = p.n_blocks >> 31;
          dk_product([&](int ks) {
            const int pin = __float_as_int(acc_dk[kKvRows / 16 - 1][kKvCols / 8 - 1][3]) & never;
            reduce(kReductions * ks / kSteps, kReductions * (ks + 1) / kSteps, pin);
          });
        }
      } else {
        dk_product(NoWork{});
      }
    };
    if (!kAccumulateDq ||
        (dq_col + kDqCols <= f.head_dim && (!kFragmentOrder || row0 + dq_row + kDqRows - 16 < f.seqlen_q)))
      dq_and_dk(std::true_type{});
    else
      dq_and_dk(std::false_type{});
  };
  run_steps<Traits::kOneBarrier>(per_head * f.group, p.prefetch, issue, body);

  // dK and dV rows of this block (zeros for keys no query sees), through sK and sV in their own layout, so that
  // the global stores are whole 16-byte chunks of a row: stored from the fragments, each warp instruction wrote
  // 4 bytes to each of eight rows, eight L1 wavefronts, ~4k a CTA at D = 128 and 256 (~2 us, 3-5% of a CTA's
  // time at S = 512), as FlashAttention-2 stages them too. Measured (v17, docs/perf-log.md): backward +2.0% over
  // grid A, +2.7% at D = 64 and +2.9% at D = 256.
  __syncthreads();  // every warp is done reading sK and sV
#pragma unroll
  for (int i = 0; i < kKvRows / 16; ++i)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = kv_row + i * 16 + g + hr * 8;
#pragma unroll
      for (int j = 0; j < kKvCols / 8; ++j) {
        const int c = kv_col + j * 8;  // a multiple of 8; r % 8 is g
        const int at = r * kStride + (kSwz ? c ^ (g << 3) : c) + 2 * t;
        *reinterpret_cast<uint32_t*>(sK + at) =
            pack2<T>(acc_dk[i][j][2 * hr] * p.scale, acc_dk[i][j][2 * hr + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(sV + at) = pack2<T>(acc_dv[i][j][2 * hr], acc_dv[i][j][2 * hr + 1]);
      }
    }
  __syncthreads();
  T* dk_head = static_cast<T*>(p.dk) + b * p.dk_stride[0] + hk * p.dk_stride[2];
  T* dv_head = static_cast<T*>(p.dv) + b * p.dv_stride[0] + hk * p.dv_stride[2];
  const unsigned tid = thread_index_reread();
  store_rows<Traits, kN, kSwz>(tid, sK, dk_head, p.dk_stride[1], key0, f.seqlen_k, f.head_dim);
  store_rows<Traits, kN, kSwz>(tid, sV, dv_head, p.dv_stride[1], key0, f.seqlen_k, f.head_dim);
}

template <typename Traits, typename T, bool kSoftcap>
__global__ void __launch_bounds__(Traits::kThreads) bwd_dq_kernel(const BwdKernelParams p) {
  constexpr int kRows = Traits::kBlockM, kCols = Traits::kBlockN;  // queries per CTA, keys per step
  constexpr int kStride = Traits::kRowStride, kNB = kCols / 8, kDB = Traits::kOutCols / 8;
  constexpr int kTile = kCols * kStride;  // elements of one step's K or V tile
  static_assert(Traits::kMSlices == 1, "one 16-row slice per warp");
  const FwdKernelParams& f = p.fwd;
  const int col0 = static_cast<int>(blockIdx.y) * Traits::kOutCols;  // this CTA's dQ columns
  const int buffers = p.prefetch ? 2 : 1;
  // Shared memory: Q, dO; then K [buffers][kCols][kStride] and V likewise.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sDO = sQ + kRows * kStride;
  T* sK = sDO + kRows * kStride;
  T* sV = sK + buffers * kTile;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  const int m_block = f.m_blocks - 1 - blockIdx.x % f.m_blocks, bh = blockIdx.x / f.m_blocks;
  const int b = bh / f.heads_q, h = bh % f.heads_q, hk = h / f.group;
  const int row0 = m_block * kRows, row_last = min(row0 + kRows, f.seqlen_q) - 1;
  const T* q_head = static_cast<const T*>(f.q) + b * f.q_stride[0] + h * f.q_stride[2];
  const T* do_head = static_cast<const T*>(p.dout) + b * p.dout_stride[0] + h * p.dout_stride[2];
  const T* k_head = static_cast<const T*>(f.k) + b * f.k_stride[0] + hk * f.k_stride[2];
  const T* v_head = static_cast<const T*>(f.v) + b * f.v_stride[0] + hk * f.v_stride[2];
  load_rows_async<Traits, kRows>(sQ, q_head, f.q_stride[1], row0, f.seqlen_q, f.head_dim);
  load_rows_async<Traits, kRows>(sDO, do_head, p.dout_stride[1], row0, f.seqlen_q, f.head_dim);
  cp_async_commit();

  float lse2[2], delta[2];  // this thread's fragment rows g and g + 8
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + slice_row<Traits>(0) + g + hr * 8;
    const bool real = row < f.seqlen_q;
    lse2[hr] = real ? lse_log2(f.lse[b * f.lse_stride[0] + h * f.lse_stride[1] + row * f.lse_stride[2]]) : 0.0f;
    delta[hr] = real ? p.delta[(static_cast<int64_t>(b) * f.heads_q + h) * p.delta_head_stride + row] : 0.0f;
  }

  // The steps: the blocks of kCols keys that some row of this block sees.
  const int key_begin = max(0, row0 + f.key_offset - f.window_left);
  const int key_end = min(f.seqlen_k, row_last + f.key_offset + f.window_right + 1);
  const int key_first = key_begin / kCols * kCols;
  const int n_steps = key_begin < key_end ? (key_end - key_first + kCols - 1) / kCols : 0;
  auto issue = [&](int step, int buffer) {
    const int key0 = key_first + step * kCols;
    load_rows_async<Traits, kCols>(sK + buffer * kTile, k_head, f.k_stride[1], key0, f.seqlen_k, f.head_dim);
    load_rows_async<Traits, kCols>(sV + buffer * kTile, v_head, f.v_stride[1], key0, f.seqlen_k, f.head_dim);
    cp_async_commit();
  };

  float acc_dq[1][kDB][4] = {};
  auto body = [&](int step, int buffer) {
    const int key0 = key_first + step * kCols;
    const T* bK = sK + buffer * kTile;
    const T* bV = sV + buffer * kTile;
    auto products = [&](auto masked) {
      float acc_s[1][kNB][4], capped[1][kNB][4];
      tile_scores<Traits, T>(sQ, bK, acc_s);
      cap_and_mask<Traits, kSoftcap, decltype(masked)::value>(f, row0, key0, acc_s);
#pragma unroll
      for (int n = 0; n < kNB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          capped[0][n][e] = acc_s[0][n][e];
          acc_s[0][n][e] = exp2_approx(fmaf(acc_s[0][n][e], f.scale_log2, -lse2[e / 2]));
        }
      float acc_dp[1][kNB][4];
      tile_scores<Traits, T>(sDO, bV, acc_dp);  // dP = dO V^T
#pragma unroll
      for (int n = 0; n < kNB; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc_s[0][n][e] =
              grad_score<kSoftcap, decltype(masked)::value>(acc_s[0][n][e], acc_dp[0][n][e], delta[e / 2],
                                                            capped[0][n][e], f);
      tile_accumulate_pv<Traits, T, Traits::kOutCols>(acc_s, bK + col0, acc_dq);  // dQ += dS K
    };
    if (tile_fully_visible<Traits>(f, row0, key0, row_last))
      products(std::false_type{});
    else
      products(std::true_type{});
  };
  run_steps<false>(n_steps, p.prefetch, issue, body);

  T* dq_head = static_cast<T*>(p.dq) + b * p.dq_stride[0] + h * p.dq_stride[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = row0 + slice_row<Traits>(0) + g + hr * 8;
    if (row >= f.seqlen_q) continue;
#pragma unroll
    for (int d = 0; d < kDB; ++d) {
      const int col = col0 + d * 8 + 2 * t;
      if (col < f.head_dim)
        *reinterpret_cast<uint32_t*>(dq_head + row * p.dq_stride[1] + col) =
            pack2<T>(acc_dq[0][d][2 * hr] * p.scale, acc_dq[0][d][2 * hr + 1] * p.scale);
    }
  }
}

}  // namespace flashtile::cuda::sm80
