// Development harness: the sm80 backward's dK/dV kernel (default mode: dQ added into the fp32 accumulator by
// atomics) under other rows than the library's (bwd_config.hpp's fields), timed side by side on one GPU
// (sustained: harness::median_ms), each checked against the library's row for agreement on dK, dV and dQ (dQ
// converted from the accumulator in each row's own order; within 2% of the largest value: other warp splits add
// in other orders). O and the LSE come from the sm80 forward, D from the library's D kernel; only the dK/dV
// kernel is timed. Not part of the library;
// results and decisions go to docs/perf-log.md.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/kernels/sm80_bwd_tiles.cu
// `sm80_bwd_tiles D S` runs only that head dim and length (to profile one shape); no arguments: the sweep.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

#include "backends/cuda/sm80/bwd_launch.cuh"
#include "backends/cuda/sm80/fwd_launch.cuh"
#include "harness.hpp"

using namespace flashtile::cuda;
using namespace flashtile::cuda::sm80;
using T = __nv_bfloat16;

struct Problem {
  int batch, seqlen, heads, dim;
  bool causal;
};

// A table row with its dQ reductions in another slot, or the other number of barriers a step (other fields:
// write a row as bwd_config.hpp does).
template <typename Base, DqReductionSlot kSlot>
struct WithDqSlot : Base {
  static constexpr DqReductionSlot kDqAt = kSlot;
};
template <typename Base>
using DqUnderDk = WithDqSlot<Base, DqReductionSlot::kUnderDk>;  // the reductions spread over dK's k-steps
template <typename Base>
struct OtherBarriers : Base {
  static constexpr bool kOneBarrier = !Base::kOneBarrier;
};
template <typename Base>
struct OtherDqOrder : Base {  // pair-interleaved <-> fragment
  static constexpr DqAccumOrder kDqOrder =
      Base::kDqOrder == DqAccumOrder::kFragment ? DqAccumOrder::kPairInterleaved : DqAccumOrder::kFragment;
};

// One problem's tensors, contiguous BSHD (no GQA), and the backward's parameters over them.
struct Tensors {
  size_t n = 0, rows = 0;  // elements of q (= k, v, o, dO, dK, dV); query rows over all heads
  void *q, *k, *v, *o, *dout, *dk, *dv, *dq;
  float *lse, *delta, *dq_accum;
  size_t accum_n = 0;  // floats of the dQ accumulator: rows padded for the fragment order
  BwdKernelParams p{};

  template <int D>
  void init(const Problem& pr) {
    n = size_t(pr.batch) * pr.seqlen * pr.heads * pr.dim;
    rows = size_t(pr.batch) * pr.heads * pr.seqlen;
    // q, k, v and dO differ, so that no product is symmetric (a transposed read could agree on symmetric data).
    for (void** t : {&q, &k, &v, &o, &dout, &dk, &dv, &dq}) CHECK(cudaMalloc(t, n * 2));
    for (float** t : {&lse, &delta}) CHECK(cudaMalloc(t, rows * 4));
    accum_n = size_t(pr.batch) * pr.heads * dq_accum_fragment_rows(pr.seqlen) * pr.dim;
    CHECK(cudaMalloc(&dq_accum, accum_n * 4));
    uint32_t seed = 12345;
    for (void* t : {q, k, v, dout}) {
      const std::vector<uint16_t> host = harness::bf16_inputs(n, seed++);
      CHECK(cudaMemcpy(t, host.data(), n * 2, cudaMemcpyHostToDevice));
    }
    using Fwd = FwdConfigHopper<D>;
    const FwdKernelParams f = harness::bshd_params(q, k, v, o, lse, pr.batch, pr.seqlen, pr.heads, pr.dim,
                                                   pr.causal, FwdTraits<D, Fwd>::kBlockM);
    CHECK((launch_fwd<T, D, kV2, Fwd>(f, nullptr)));
    p.fwd = f;
    p.dout = dout, p.dq = dq, p.dk = dk, p.dv = dv;
    for (int d = 0; d < 3; ++d) p.dout_stride[d] = p.dq_stride[d] = p.dk_stride[d] = p.dv_stride[d] = f.q_stride[d];
    p.heads_kv = pr.heads;
    p.scale = 1.0f / std::sqrt(float(pr.dim));
    p.delta = delta, p.delta_head_stride = pr.seqlen, p.dq_accum = dq_accum;
    int device = 0;
    CHECK(cudaGetDevice(&device));
    CHECK(cudaDeviceGetAttribute(&p.smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    bwd_delta_kernel<T, D><<<LaneRow<D>::blocks(rows), kRowThreads>>>(p, 0);  // D only: run_row zeroes the accumulator
    CHECK(cudaDeviceSynchronize());
  }
  ~Tensors() {
    for (void* t : {q, k, v, o, dout, dk, dv, dq}) cudaFree(t);
    for (float* t : {lse, delta, dq_accum}) cudaFree(t);
  }
};

// One row's dK/dV kernel on the problem: its time, then one clean run that leaves dK and dV in t's buffers, and
// dQ, converted from the accumulator in the row's order (Config::kDqOrder), so that rows of either order compare.
template <int D, typename Config>
float run_row(Tensors& t) {
  using Traits = BwdDkdvTraits<D, Config>;
  BwdKernelParams p = t.p;
  p.n_blocks = (p.fwd.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  auto launch = [&] {
    CHECK(launch_bwd_kernel(bwd_dkdv_kernel<Traits, T, false, true>, p,
                            int64_t(p.n_blocks) * p.fwd.batch * p.heads_kv, Traits::kThreads, 1,
                            Traits::smem_bytes(1), Traits::smem_bytes(2), nullptr));
  };
  const float ms = harness::median_ms(launch);  // the accumulator grows meanwhile: the time does not depend on it
  CHECK(cudaMemset(t.dq_accum, 0, t.accum_n * 4));
  CHECK(cudaMemset(t.dk, 0xff, t.n * 2));  // NaN: an element the kernel does not write shows
  CHECK(cudaMemset(t.dv, 0xff, t.n * 2));
  CHECK(cudaMemset(t.dq, 0xff, t.n * 2));
  launch();
  launch_bwd_dq_convert<T, D, Config::kDqOrder>(p, nullptr);
  CHECK(cudaDeviceSynchronize());
  return ms;
}

int g_only_dim = 0, g_only_seqlen = 0;

// The table's row for D, then each of Configs, on one problem (grid A: B = 16384 / S, H = 2048 / D).
template <int D, typename... Configs>
void sweep(int seqlen, bool causal, const char* const* names) {
  if ((g_only_dim && g_only_dim != D) || (g_only_seqlen && g_only_seqlen != seqlen)) return;
  const Problem pr{16384 / seqlen, seqlen, 2048 / D, D, causal};
  Tensors t;
  t.init<D>(pr);
  const double flops = 2.5 * 4.0 * pr.batch * pr.heads * double(seqlen) * seqlen * D / (causal ? 2 : 1);
  auto report = [&](const char* name, float ms, const char* verdict) {
    std::printf("D%-3d S%-5d %-6s %-40s %8.3f ms %7.1f TFLOP/s  %s\n", D, seqlen, causal ? "causal" : "full", name,
                ms, flops / ms / 1e9, verdict);
  };
  report("table", run_row<D, BwdDkdvConfig<D>>(t), "(the table's row)");
  // The table row's gradients, kept on the device for harness::compare.
  void *ref_dk, *ref_dv, *ref_dq;
  for (void** r : {&ref_dk, &ref_dv, &ref_dq}) CHECK(cudaMalloc(r, t.n * 2));
  CHECK(cudaMemcpy(ref_dk, t.dk, t.n * 2, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(ref_dv, t.dv, t.n * 2, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(ref_dq, t.dq, t.n * 2, cudaMemcpyDeviceToDevice));
  int i = 0;
  (
      [&] {
        const float ms = run_row<D, Configs>(t);
        using G = const uint16_t*;
        const bool ok = harness::compare(G(t.dk), G(ref_dk), t.n).ok() &&
                        harness::compare(G(t.dv), G(ref_dv), t.n).ok() &&
                        harness::compare(G(t.dq), G(ref_dq), t.n).ok();
        report(names[i++], ms, ok ? "agrees (dK, dV, dQ)" : "DISAGREES with the table's row");
      }(),
      ...);
  for (void* r : {ref_dk, ref_dv, ref_dq}) CHECK(cudaFree(r));
}

int main(int argc, char** argv) {
  if (argc == 3) g_only_dim = std::atoi(argv[1]), g_only_seqlen = std::atoi(argv[2]);
  // Each table row with its dQ reductions spread over dK's k-steps (DqReductionSlot::kUnderDk), alone and with
  // the other number of barriers a step; D = 128 and 256, whose rows have them there (v18, v16), with them
  // where they were before (after dK in the pair-interleaved order; before dK) and with the other barrier
  // count. Earlier sweeps (the other slot, barrier count and order, each alone: v12-v15 in docs/perf-log.md)
  // are in this file's history.
  static const char* const under[] = {"dQ under dK", "dQ under dK, the other barrier count"};
  static const char* const under128[] = {"dQ after dK, pair-interleaved (v17's row)", "the other barrier count"};
  static const char* const under256[] = {"dQ before dK", "the other barrier count"};
  for (bool causal : {false, true})
    for (int s : {512, 1024, 4096}) {
      sweep<64, DqUnderDk<BwdDkdvConfig<64>>, OtherBarriers<DqUnderDk<BwdDkdvConfig<64>>>>(s, causal, under);
      sweep<96, DqUnderDk<BwdDkdvConfig<96>>, OtherBarriers<DqUnderDk<BwdDkdvConfig<96>>>>(s, causal, under);
      sweep<128, OtherDqOrder<WithDqSlot<BwdDkdvConfig<128>, DqReductionSlot::kAfterDk>>,
            OtherBarriers<BwdDkdvConfig<128>>>(s, causal, under128);
      sweep<192, DqUnderDk<BwdDkdvConfig<192>>, OtherBarriers<DqUnderDk<BwdDkdvConfig<192>>>>(s, causal, under);
      sweep<256, WithDqSlot<BwdDkdvConfig<256>, DqReductionSlot::kBeforeDk>, OtherBarriers<BwdDkdvConfig<256>>>(
          s, causal, under256);
    }
  return 0;
}
