// Tile sizes of the sm80 backward (bwd_kernels.cuh).
//
// The dK/dV kernel (BwdDkdvConfig), FlashAttention-2's layout: a CTA of eight warps owns kBlockN keys and walks
// the query rows kBlockM at a time. Each of a step's products splits the eight warps its own way:
//   S, dP   (kBlockM queries x kBlockN keys):  kSdpWarpsM along queries x the rest along keys
//   dK, dV  (kBlockN keys x head dim):          kKvWarpsN along keys x the rest along the columns
//   dQ      (kBlockM queries x head dim):       kDqWarpsM along queries x the rest along the columns
// P and dS go through shared memory in between, so every product reads both operands from there (warp_mma.cuh)
// with near-square warp tiles (S and dP: 32 x 32 at D = 96 and 128, 32 x 64 at D = 64, whose steps take 128
// query rows, 16 x 32 above 128, where a CTA owns 64 keys). D = 64 splits S and dP 4 x 2 as FlashAttention-2 does:
// +1.3-1.8% over 2 x 4 at every shape of the tile harness (v8; the default mode's kernel without softcap went
// from 4 bytes of spills to none, the deterministic mode's dK/dV kernel from none to 52). dK and dV stay in
// registers for the whole loop: kBlockN x kHeadDim x 2 / 256 floats per thread, 128 at D = 128 (kBlockN 128) and
// D = 256 (kBlockN 64).
// With 128 keys per CTA the dQ reductions per FLOP are half those of a 64-key CTA (docs/perf-log.md, sm80
// backward v1: the reductions, not the products, set v1's pace).
//
// kDqAt: where a step's dQ reductions are issued (DqReductionSlot). kBeforeDk: right after dQ's product, before
// dK's (v6; the compiler then interleaves them with dQ's last MMAs, but dK's first shared-memory loads queue
// behind them: MIO and LG throttle were 28% of the stall samples at D = 256 with 8-byte reductions,
// docs/perf-log.md); kAfterDk: after dK's product, so they drain under its last MMAs and the step's end barrier
// (acc_dq stays live through dK). The tile harness (bench/kernels/sm80_bwd_tiles.cu) times both slots for each
// row: kAfterDk is +6.5-8.5% at D = 128 and -1 to -2.5% at D = 64 and 256 (v12, docs/perf-log.md). kUnderDk:
// spread over dK's k-steps, each k-step's share held behind its MMAs (bwd_kernels.cuh): at D = 256 the 16
// reductions in a row held dK's first LDSMs in the MIO queue (ncu, v15: MIO + LG throttle 19% of the stall
// samples against FA2's 5%). Tile harness, same call (v16): D = 256 +3.7-4.8% at every shape; D = 64 -4 to
// -6%, D = 96 -1 to -4%, D = 128 -3 to -7%, D = 192 -2 to -3% (not profiled). Taken at D = 256, and at D = 128
// with the fragment order since v17's epilogue (dK and dV through shared memory): the tile harness then timed
// that pair +1.5-2.7% over kAfterDk with the pair-interleaved order at every D = 128 shape; through the library
// (same-call A/B, v18) +0.8% over grid A's D = 128 rows, +0.6-2.2% at S >= 2048 but -1.5% at S = 512.
// kOneBarrier: one barrier a step instead of two (run_steps, bwd_kernels.cuh), the next step's loads issued after
// it. Same-call A/B of every row with it (v13): D = 256 +1.6-2.7% at S >= 2048, D = 64 -2.7 to +1.5%, D = 128
// -4.5% at every shape (its reductions end the step, and the loads now queue behind them right before S's
// first LDSMs instead of issuing under the barrier's wait); true at D = 256, and at D = 192 since the tile
// harness timed it with the fragment order (2026-12-02: +0.5-2.5% at five of six shapes, -0.6% at S = 512 causal).
// kDqOrder: the dQ accumulator's order (DqAccumOrder, dq_accum.hpp). The tile harness, same call (v14): the
// fragment order +1-2% at D = 64, +5-7% at D = 96 and 192, +3.6-4.3% at D = 256, -0.7 to -2.7% at D = 128 with
// its reductions after dK's product (under dK it wins, above); the small rows keep the pair-interleaved order
// (not timed).
// kPredicatedStats: each step's LSE and D copies written as one predicated cp.async a thread (cp_async_4_if)
// instead of an if / else if. Tried for a branch the D = 256 profile found (ncu, S = 16384: 2% of the stall
// samples, long scoreboard, on the branch after the step's 16-byte copies, which waits until they have read their
// address registers); but in the sm_90a SASS ptxas still branches around the copy, so that wait is not what
// changed. At D = 128 the default kernel's 4 bytes of spills went to 0 and its backward measured +0.8-1.9% in two
// same-call A/B runs (v28, docs/perf-log.md; not profiled); D = 64 even (-0.4 to +0.1%), D = 96 -0.8 to -1.0%,
// D = 256 -3% (the selects made ptxas spill 72 bytes in its loop, 4 before); D = 192 not timed. True at D = 128.
// kStepPointers: the step cursors carry where the step's query head starts in Q, dO, the LSE, D and the dQ
// accumulator, moved by the head strides when the head changes, instead of multiplying the head's 64-bit offsets
// out each step; and the dQ reductions (fragment order) take one 64-bit address a step, the kUnderDk pin OR-ed
// into its low word (bwd_kernels.cuh). Static SASS (sm_90a, bf16) of the D = 256 default kernel's unmasked step:
// 1099 -> 1024 instructions a warp (IMAD 167 -> 130), spills 4 -> 0 bytes (the softcap kernel 60 -> 52); D = 64
// spilled 76 bytes with the cursors (none before). Same-call A/B on the H200 (v29, docs/perf-log.md): D = 256
// +0.7-1.7% at every shape timed (S = 1024-16384, full and causal). True at D = 256 only; where it is false the
// kernels' SASS is main's.
//
// The deterministic mode's dQ kernel (BwdDqTiles): one CTA per 64 query rows, four warps of 16 rows, steps of
// 64 keys, the forward's tile pieces. Above a head dim of 128 each CTA accumulates half the columns
// (kColSplits CTAs per query block; S and dP, which need every column, are computed by both).
#pragma once

#include "backends/cuda/sm80/dq_accum.hpp"
#include "backends/cuda/sm80/fwd_config.hpp"

namespace flashtile::cuda::sm80 {

enum class DqReductionSlot { kBeforeDk, kAfterDk, kUnderDk };

template <int kHeadDim>
struct BwdDkdvConfig;
//                          kHeadDim        kBlockN       kBlockM     kSdpWarpsM     kKvWarpsN     kDqWarpsM                                                   kOneBarrier                                kDqAt                                                     kDqOrder                                          smem, 1 / 2 step buffers (bf16)
template <> struct BwdDkdvConfig<64>  { static constexpr int kBlockN = 128, kBlockM = 128, kSdpWarpsM = 4, kKvWarpsN = 4, kDqWarpsM = 4; static constexpr bool kOneBarrier = false; static constexpr auto kDqAt = DqReductionSlot::kBeforeDk; static constexpr auto kDqOrder = DqAccumOrder::kFragment;         static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = false; };  // 133 / 166 KB
template <> struct BwdDkdvConfig<96>  { static constexpr int kBlockN = 128, kBlockM = 64, kSdpWarpsM = 2, kKvWarpsN = 4, kDqWarpsM = 4; static constexpr bool kOneBarrier = false; static constexpr auto kDqAt = DqReductionSlot::kBeforeDk; static constexpr auto kDqOrder = DqAccumOrder::kFragment;         static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = false; };  // 113 / 139 KB
template <> struct BwdDkdvConfig<128> { static constexpr int kBlockN = 128, kBlockM = 64, kSdpWarpsM = 2, kKvWarpsN = 4, kDqWarpsM = 2; static constexpr bool kOneBarrier = false; static constexpr auto kDqAt = DqReductionSlot::kUnderDk;  static constexpr auto kDqOrder = DqAccumOrder::kFragment;         static constexpr bool kPredicatedStats = true ; static constexpr bool kStepPointers = false; };  // 130 / 163 KB
template <> struct BwdDkdvConfig<192> { static constexpr int kBlockN = 64,  kBlockM = 64, kSdpWarpsM = 4, kKvWarpsN = 2, kDqWarpsM = 2; static constexpr bool kOneBarrier = true ; static constexpr auto kDqAt = DqReductionSlot::kBeforeDk; static constexpr auto kDqOrder = DqAccumOrder::kFragment;         static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = false; };  // 115 / 163 KB
template <> struct BwdDkdvConfig<256> { static constexpr int kBlockN = 64,  kBlockM = 64, kSdpWarpsM = 4, kKvWarpsN = 2, kDqWarpsM = 2; static constexpr bool kOneBarrier = true ; static constexpr auto kDqAt = DqReductionSlot::kUnderDk;  static constexpr auto kDqOrder = DqAccumOrder::kFragment;         static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = true ; };  // 147 / 211 KB

// Rows for GPUs whose blocks cannot have the row above with one step buffer: consumer Ampere and Ada offer 99 KB
// per block. 64 keys per CTA, S and dP on 16 x 32 warp tiles. Head dims 192 and 256 have none: no row of this
// kernel, nor the deterministic mode's dQ kernel (132 KB at D = 256), fits in 99 KB there.
template <int kHeadDim>
struct BwdDkdvConfigSmall;
//                               kHeadDim       kBlockN      kBlockM     kSdpWarpsM     kKvWarpsN     kDqWarpsM                                                   kOneBarrier                                kDqAt                                                     kDqOrder                                          smem, 1 / 2 step buffers (bf16)
template <> struct BwdDkdvConfigSmall<64>  { static constexpr int kBlockN = 64, kBlockM = 64, kSdpWarpsM = 4, kKvWarpsN = 2, kDqWarpsM = 2; static constexpr bool kOneBarrier = false; static constexpr auto kDqAt = DqReductionSlot::kBeforeDk; static constexpr auto kDqOrder = DqAccumOrder::kPairInterleaved; static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = false; };  // 51 / 67 KB
template <> struct BwdDkdvConfigSmall<96>  { static constexpr int kBlockN = 64, kBlockM = 64, kSdpWarpsM = 4, kKvWarpsN = 4, kDqWarpsM = 4; static constexpr bool kOneBarrier = false; static constexpr auto kDqAt = DqReductionSlot::kBeforeDk; static constexpr auto kDqOrder = DqAccumOrder::kPairInterleaved; static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = false; };  // 71 / 97 KB
template <> struct BwdDkdvConfigSmall<128> { static constexpr int kBlockN = 64, kBlockM = 64, kSdpWarpsM = 4, kKvWarpsN = 2, kDqWarpsM = 2; static constexpr bool kOneBarrier = false; static constexpr auto kDqAt = DqReductionSlot::kBeforeDk; static constexpr auto kDqOrder = DqAccumOrder::kPairInterleaved; static constexpr bool kPredicatedStats = false; static constexpr bool kStepPointers = false; };  // 83 / 115 KB
template <int kHeadDim>
inline constexpr bool kHasBwdDkdvConfigSmall = kHeadDim <= 128;

// Everything derived from a row, with the checks that keep a new row honest.
template <int kHeadDim_, typename Config = BwdDkdvConfig<kHeadDim_>>
struct BwdDkdvTraits : Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNWarps = 8, kThreads = kNWarps * 32;
  // Q, dO, K, V rows: unpadded and swizzled where the head dim is a multiple of 64 (SmemTile, warp_mma.cuh), else
  // padded by 16 bytes. Both keep ldmatrix free of bank conflicts; only the swizzled rows put each 128-byte line
  // that cp.async copies into one aligned 128-byte line of shared memory. Into padded rows (7 of 8 rows start
  // mid-line) those copies measured ~10 shared wavefronts per instruction against 4 (ncu, D = 128), and they are
  // the only accesses that can account for the 12% excess wavefronts at D = 256 (docs/perf-log.md).
  static constexpr bool kSwizzled = kHeadDim % 64 == 0;
  static constexpr int kRowStride = kSwizzled ? kHeadDim : kHeadDim + 8;
  static constexpr int kPStride = Config::kBlockN + 8;     // P and dS rows, padded (written by 4-byte stores)
  // Warp tiles of the three product shapes (rows x columns).
  static constexpr int kSdpRows = Config::kBlockM / Config::kSdpWarpsM;
  static constexpr int kSdpCols = Config::kBlockN / (kNWarps / Config::kSdpWarpsM);
  static constexpr int kKvRows = Config::kBlockN / Config::kKvWarpsN;
  static constexpr int kKvCols = kHeadDim / (kNWarps / Config::kKvWarpsN);
  static constexpr int kDqRows = Config::kBlockM / Config::kDqWarpsM;
  static constexpr int kDqCols = kHeadDim / (kNWarps / Config::kDqWarpsM);
  static_assert(kNWarps % Config::kSdpWarpsM == 0 && kNWarps % Config::kKvWarpsN == 0 &&
                    kNWarps % Config::kDqWarpsM == 0,
                "each product's warp grid must use all eight warps");
  static_assert(kSdpRows % 16 == 0 && kSdpCols % 16 == 0 && kKvRows % 16 == 0 && kKvCols % 16 == 0 &&
                    kDqRows % 16 == 0 && kDqCols % 16 == 0,
                "warp tiles are multiples of 16 in both directions (warp_mma)");
  static_assert(kHeadDim % 16 == 0, "the MMA k-step is 16: head dims are padded to a multiple of 16");
  static_assert(kKvRows * kKvCols * 2 / 32 <= 128, "dK and dV would not fit in registers");
  // Shared memory: K and V (kBlockN rows each); per step buffer Q and dO (kBlockM rows each) and the rows' LSE
  // and D (fp32); P and dS (kBlockM x kPStride each). Two buffers let the next step's loads overlap this one's
  // products (BwdKernelParams::prefetch).
  static constexpr int smem_bytes(int buffers) {
    return (2 * Config::kBlockN + 2 * buffers * Config::kBlockM) * kRowStride * 2 +
           2 * Config::kBlockM * kPStride * 2 + 2 * buffers * Config::kBlockM * 4;
  }
};

template <int kHeadDim>
struct BwdDqTiles {
  static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 1, kStages = 1;
  static constexpr bool kKvRing = false, kPersistent = false;  // the forward's K/V ring (fwd_kv_pipeline.cuh) is not used here
  static constexpr int kOutCols = kHeadDim <= 128 ? kHeadDim : kHeadDim / 2;  // gradient columns per CTA
  static constexpr int kColSplits = kHeadDim / kOutCols;
  static_assert(kOutCols % 16 == 0 && kOutCols <= 128, "a CTA's dQ columns must fit in registers");
};
template <int kHeadDim>
using BwdDqTraits = FwdTraits<kHeadDim, BwdDqTiles<kHeadDim>>;

// Shared memory of the dQ kernel: Q and dO (kBlockM rows), and per step buffer K and V (kBlockN rows).
template <typename Traits>
constexpr int bwd_dq_smem_bytes(int buffers) {
  return (2 * Traits::kBlockM + 2 * buffers * Traits::kBlockN) * Traits::kRowStride * 2;
}

// The least shared memory a backward call needs (its smallest row, one step buffer), for the device check.
template <int kHeadDim>
constexpr int bwd_min_smem_bytes() {
  int dkdv = BwdDkdvTraits<kHeadDim>::smem_bytes(1);
  if constexpr (kHasBwdDkdvConfigSmall<kHeadDim>)
    dkdv = BwdDkdvTraits<kHeadDim, BwdDkdvConfigSmall<kHeadDim>>::smem_bytes(1);
  const int dq = bwd_dq_smem_bytes<BwdDqTraits<kHeadDim>>(1);
  return dkdv > dq ? dkdv : dq;
}

}  // namespace flashtile::cuda::sm80
