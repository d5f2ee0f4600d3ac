// Development harness: the sm80 forward kernel under other configurations than the library's (other tile rows,
// written as structs with fwd_config.hpp's fields, or the library's row with one field changed),
// timed side by side on one GPU (sustained: harness::median_ms), each checked against the library's configuration
// for agreement (within 2% of the largest output: other tile shapes round differently). Not part of the library;
// results and decisions go to docs/perf-log.md.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/kernels/sm80_fwd_tiles.cu
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/sm80/fwd_launch.cuh"
#include "harness.hpp"

using namespace flashtile::cuda;
using namespace flashtile::cuda::sm80;

struct Problem {
  int batch, seqlen, heads, dim;
  bool causal;
};

// Any other row, field by field as in fwd_config.hpp.
template <int kBlockN_, int kNWarps_, int kMSlices_, int kStages_, bool kSkipRescale_, bool kKvRing_,
          bool kPersistent_ = false>
struct Row {
  static constexpr int kBlockN = kBlockN_, kNWarps = kNWarps_, kMSlices = kMSlices_, kStages = kStages_;
  static constexpr bool kSkipRescale = kSkipRescale_, kKvRing = kKvRing_, kPersistent = kPersistent_;
};
// A row of the library's table with its kPersistent field set (a persistent CTA hints its own next block, so the
// row's kHintNextWave is kept only for a CTA per block).
template <typename Config, bool kPersistent_>
struct WithPersistent : Config {
  static constexpr bool kPersistent = kPersistent_;
  static constexpr bool kHintNextWave = !kPersistent_ && RowHintNextWave<Config>::value;
};

template <int D, typename Config>
float time_config(const Problem& pr, const void* q, const void* k, const void* v, void* o, float* lse) {
  using Traits = FwdTraits<D, Config>;
  const FwdKernelParams p =
      harness::bshd_params(q, k, v, o, lse, pr.batch, pr.seqlen, pr.heads, pr.dim, pr.causal, Traits::kBlockM);
  return harness::median_ms([&] { CHECK((launch_fwd<__nv_bfloat16, D, kV2, Config>(p, nullptr))); });
}

template <int D, typename Config>
void run(const char* name, const Problem& pr, const void* q, const void* k, const void* v, void* o, float* lse,
         const std::vector<uint16_t>* reference, const uint16_t* reference_dev) {
  using Traits = FwdTraits<D, Config>;
  const size_t n = size_t(pr.batch) * pr.seqlen * pr.heads * pr.dim;
  CHECK(cudaMemset(o, 0xff, n * 2));
  const float ms = time_config<D, Config>(pr, q, k, v, o, lse);
  std::vector<uint16_t> out(n);
  CHECK(cudaMemcpy(out.data(), o, n * 2, cudaMemcpyDeviceToHost));
  size_t differ = 0;
  harness::Agreement agree;
  if (reference) {
    for (size_t i = 0; i < n; ++i) differ += out[i] != (*reference)[i];
    agree = harness::compare(static_cast<const uint16_t*>(o), reference_dev, n);
  }
  const double flops = 4.0 * pr.batch * pr.heads * double(pr.seqlen) * pr.seqlen * pr.dim / (pr.causal ? 2 : 1);
  std::printf("D%-3d S%-5d %-6s %-28s %8.3f ms %7.1f TFLOP/s  smem %3d KB  %s\n", D, pr.seqlen,
              pr.causal ? "causal" : "full", name, ms, flops / ms / 1e9, Traits::kSmemBytes / 1024,
              !reference ? "(the table's config)"
              : !differ  ? "bitwise equal"
              : agree.ok() ? "agrees (rounding order differs)"
                           : "DISAGREES with the table's config");
}

// The library's row for D on the machine this runs on (the H200: FwdConfigHopper) is the reference.
// `sm80_fwd_tiles D S` runs only the sweeps of that head dim and length (to profile one shape); no arguments: all.
int g_only_dim = 0, g_only_seqlen = 0;

template <int D, typename... Configs>
void sweep(const Problem& pr, const char* const* names) {
  if ((g_only_dim && g_only_dim != D) || (g_only_seqlen && g_only_seqlen != pr.seqlen)) return;
  const size_t n = size_t(pr.batch) * pr.seqlen * pr.heads * pr.dim;
  // q, k and v differ, so that S is not symmetric (a transposed product could agree on symmetric scores).
  const std::vector<uint16_t> inputs[3] = {harness::bf16_inputs(n, 12345), harness::bf16_inputs(n, 12346),
                                           harness::bf16_inputs(n, 12347)};
  void *q, *k, *v, *o;
  float* lse;
  for (void** p : {&q, &k, &v, &o}) CHECK(cudaMalloc(p, n * 2));
  CHECK(cudaMalloc(&lse, size_t(pr.batch) * pr.heads * pr.seqlen * 4));
  void* qkv[3] = {q, k, v};
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpy(qkv[i], inputs[i].data(), n * 2, cudaMemcpyHostToDevice));
  run<D, FwdConfigHopper<D>>("table", pr, q, k, v, o, lse, nullptr, nullptr);
  std::vector<uint16_t> ref(n);
  CHECK(cudaMemcpy(ref.data(), o, n * 2, cudaMemcpyDeviceToHost));
  void* ref_dev;
  CHECK(cudaMalloc(&ref_dev, n * 2));
  CHECK(cudaMemcpy(ref_dev, o, n * 2, cudaMemcpyDeviceToDevice));
  int i = 0;
  (run<D, Configs>(names[i++], pr, q, k, v, o, lse, &ref, static_cast<const uint16_t*>(ref_dev)), ...);
  for (void* p : {q, k, v, o, ref_dev}) CHECK(cudaFree(p));
  CHECK(cudaFree(lse));
}

int main(int argc, char** argv) {
  if (argc == 3) g_only_dim = std::atoi(argv[1]), g_only_seqlen = std::atoi(argv[2]);
  // The tile rows were chosen by earlier sweeps of this harness (docs/perf-log.md, bench/results/...-sm80-tiles,
  // ...-sm80-fwd-short, ...-sm80-fwd-power, ...-sm80-fwd-ring, ...-sm80-fwd-persistent). This sweep: the ring's
  // rows with and without a persistent grid (one CTA per SM walking query blocks in turn), where short sequences
  // spend the most on each block's start and end: the table's D = 256 row (persistent) against a CTA per block,
  // its D = 192 row (a CTA per block) against persistent, and D = 128's long row both ways beside the table's
  // 4-warp row, from 512 keys (the long row runs from 1024). Grid A's shapes: B = 16384 / S, H = 2048 / D.
  static const char* const per_block[] = {"a CTA per block (v15)"};
  static const char* const persistent[] = {"persistent"};
  static const char* const long_rows[] = {"long row, a CTA per block", "long row, persistent"};
  for (bool causal : {false, true}) {
    for (int s : {512, 1024, 2048, 16384})
      sweep<256, WithPersistent<FwdConfigHopper<256>, false>>({16384 / s, s, 8, 256, causal}, per_block);
    for (int s : {512, 4096})
      sweep<192, WithPersistent<FwdConfigHopper<192>, true>>({16384 / s, s, 8, 192, causal}, persistent);
  }
  for (int s : {512, 1024, 2048, 16384})
    sweep<128, FwdConfigHopperLong<128>, WithPersistent<FwdConfigHopperLong<128>, true>>(
        {16384 / s, s, 16, 128, false}, long_rows);
  return 0;
}
