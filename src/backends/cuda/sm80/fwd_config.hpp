// Tile sizes of the sm80 forward, one row per instantiated head dim. Each warp owns kMSlices slices of 16
// query rows: two slices let every K/V fragment loaded from shared memory feed two MMAs, halving shared
// memory traffic per FLOP, but the O accumulator costs kMSlices * kHeadDim / 2 registers per thread, so the
// large head dims use one slice. kStages = 2 double-buffers K and V, so each tile's load is issued a whole
// iteration before its use; the large head dims keep one stage to fit an A100's 163 KB (and an RTX's 99 KB).
#pragma once

#include <type_traits>

namespace flashtile::cuda::sm80 {

template <int kHeadDim_>
struct FwdConfig;

// Chosen by bench/kernels/sm80_fwd_tiles.cu on the H200 (docs/perf-log.md, 2026-11-29): at D=128 32 keys
// per tile beat 64 by 5-10% (64 spilled 148 bytes on sm_90a), at D=256 four warps beat eight by 9%.
// kSkipRescale: a warp skips O's rescale on a tile where none of its row maxima moved (a vote per tile). The
// A/B of v7 measured +1-3% at D=128 and -5 to -10% at D=256 (causal), so the one-slice head dims rescale always
// (D=192 by analogy with 256, not measured).
// kPersistent (ring rows only): one CTA per SM walks query blocks in turn (fwd_tile_order.cuh), the ring running
// on from block to block (fwd_kv_pipeline.cuh).
//                      kHeadDim     kBlockN   kNWarps      kMSlices      kStages     kSkipRescale   kKvRing   kPersistent   O regs  smem (bf16)
template <> struct FwdConfig<64>  { static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 2, kStages = 2; static constexpr bool kSkipRescale = true, kKvRing = false, kPersistent = false; };   //  64   55 KB
template <> struct FwdConfig<96>  { static constexpr int kBlockN = 32, kNWarps = 4, kMSlices = 2, kStages = 2; static constexpr bool kSkipRescale = true, kKvRing = false, kPersistent = false; };   //  96   53 KB
template <> struct FwdConfig<128> { static constexpr int kBlockN = 32, kNWarps = 4, kMSlices = 2, kStages = 2; static constexpr bool kSkipRescale = true, kKvRing = false, kPersistent = false; };   // 128   68 KB
template <> struct FwdConfig<192> { static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 1, kStages = 1; static constexpr bool kSkipRescale = false, kKvRing = false, kPersistent = false; };  //  96   75 KB
template <> struct FwdConfig<256> { static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 1, kStages = 1; static constexpr bool kSkipRescale = false, kKvRing = false, kPersistent = false; };  // 128   99 KB

// On Hopper (sm_90: H100, H200) a block may take 227 KB of shared memory, so D=128 takes 64 keys per tile and
// D=64 128 keys, double-buffered. Measured by the tile harness on the H200 (docs/perf-log.md): D=128 +9% over the
// table's row; D=64 +8-10% at S=4096, -9% at S=512 causal. D=128 then went to one stage (v9): +3-5% at S <= 2048,
// +1% causal at every length, -1% at S >= 8192 full (the registers hold two CTAs per SM either way; with 68 KB
// per CTA instead of 102 the L1 keeps more of the 100-odd bytes the row spills). D=192 and 256 take 128 query rows
// (eight warps of one slice, alone on the SM) on the K/V ring (fwd_kv_pipeline.cuh): half the K/V bytes per FLOP
// of the 64-row table rows, without their CTA barriers. Tile harness, sustained, same call (docs/perf-log.md,
// v12): D=256 +9-10% at S >= 2048 full and at S=16k causal, +4% at S=2048 causal and S=512 full, even at S=512
// causal; D=192 +20-31%. The same ring loses at D=64 and 128 with their four-warp rows (-3 to -13%). D=256 is
// persistent (v16, same call against a CTA per block): +4-7% causal at S = 512-2048, within 1% elsewhere; D=192
// persistent lost 18-22% (its persistent build spills, and ncu showed its warps stalled twice as long per
// instruction), so it keeps a CTA per block. An RTX (99 KB) or an A100 (163 KB) cannot run these rows. Rows here
// need their head dim in `hopper_rows` of cmake/cuda_instantiations.cmake.
// kRelativeMask (optional, default false): the masked tiles test keys against per-row bounds relative to the
// thread's first key (fwd_tile.cuh, cap_and_mask) instead of absolute keys. Neither form costs much itself, but
// each gives the whole kernel another register allocation: same-call A/B on the H200 (docs/perf-log.md, v17 and
// v18), the relative form on D = 128's Hopper row +1-5% (its spills 184 -> 4 bytes), on the other rows, as
// geometric means, D = 64 -2%, D = 256 -1.5%, D = 128's long row -4% (though its spills went 172 -> 0 bytes).
template <int kHeadDim>
struct FwdConfigHopper : FwdConfig<kHeadDim> {};
//                            kHeadDim      kBlockN    kNWarps      kMSlices      kStages    kSkipRescale   kKvRing   kPersistent   smem (bf16)
template <> struct FwdConfigHopper<64>  { static constexpr int kBlockN = 128, kNWarps = 4, kMSlices = 2, kStages = 2; static constexpr bool kSkipRescale = true, kKvRing = false, kPersistent = false; };  //  90 KB
template <> struct FwdConfigHopper<128> { static constexpr int kBlockN = 64, kNWarps = 4, kMSlices = 2, kStages = 1; static constexpr bool kSkipRescale = true, kKvRing = false, kPersistent = false, kRelativeMask = true; };   //  68 KB
template <> struct FwdConfigHopper<192> { static constexpr int kBlockN = 64, kNWarps = 8, kMSlices = 1, kStages = 2; static constexpr bool kSkipRescale = false, kKvRing = true, kPersistent = false; };   // 150 KB
template <> struct FwdConfigHopper<256> { static constexpr int kBlockN = 64, kNWarps = 8, kMSlices = 1, kStages = 2; static constexpr bool kSkipRescale = false, kKvRing = true, kPersistent = true, kLeanBlockEdges = true; };    // 198 KB

// Hopper rows for calls with no mask and at least kLongKeys keys (fwd_launch.hpp), where a larger block pays: at
// D=128 eight warps of 256 rows on the ring halve the K/V bytes per FLOP again (v16's ring, two calls: +1-3% at
// S = 1024-2048, +4-5.5% at S=16k full), but lose at S=512 (-0.4 to -3%) and under a causal mask (-7% at S=2048:
// the 256-row diagonal). Persistent it lost 8-14% (it spills more), so it keeps a CTA per block.
// kHintNextWave (optional, default false; ring rows with a CTA per block): each CTA hints into L2 the Q rows and
// first two K/V tiles of the block the next wave starts in its slot (fwd_kernel.cuh, hint_next_wave). Same-call
// A/B on the H200 (docs/perf-log.md, v24), two calls: the long row +1.6 / +0.4% at S = 1024, +1.2 / -0.6% at
// 2048, +0.4 / -0.3% at 4096, +0.8 / +0.5% at 16k (within the calls' spread, not a clear gain); D = 192's ring
// row -1.5% in the first, so it does not take it.
// kAllTilesVisible (optional, default false; ring rows): a warp computes every tile of its block, without the
// test for tiles hidden from all its rows (fwd_kernel.cuh). Correct for any call (a hidden tile's probabilities
// are 0; a warp past the last query computes on Q's zero rows and stores nothing), and this table's rows, taken
// only by calls with no mask, have no hidden tile: the test's three branches a tile only split the loop's code,
// and ptxas drains the MMAs before each branch. With kSkipRescale off too (its vote a tile is a fourth branch), the
// sm_90a SASS of the unmasked tile issues the O rescale and some exp2s between P V's MMAs: 1073 -> 1038
// instructions, fixed stall cycles 3112 -> 2803, spill loads in the loop 4 -> 0. Same-call A/B (docs/perf-log.md,
// v25, over v24): +0.3% at S = 1024, +0.4% at 2048, +2.2% at 4096, +1.0% at 16k; with a softcap (spills 196 -> 28
// bytes) +8% at S = 1024.
// kLeanBlockEdges (optional, default false): a block's start and end in fewer instructions. The tile number is
// split by FastDivisor's multiply-high and shift (fast_divisor.hpp) instead of four divisions by runtime values
// (~20 instructions each), and each lane stores O a row pass at a time from one 64-bit pointer instead of
// recomputing each chunk's address behind its own branch. A persistent D = 256 CTA split up to three tile numbers
// a block, and a block of 8 tiles at S = 512 spent ~1800 instructions a warp outside its tiles against ~955 in
// each tile (static SASS, sm_90a). Same-call A/B on the H200, two rounds (docs/perf-log.md, v29): D = 256
// +1.7 / +2.0% at S = 512 full, +2.5-3.4% causal, +1.6-2.8% at S = 1024, within 0.6% at 16k; the long row +3.3%
// at S = 1024 full, +1.0 / +5.0% at 2048, +1.3-1.8% at 16k. The other rows keep the operators and the old store
// loop: with the new forms ptxas spilled more in D = 64's and D = 128's four-warp loops (D = 64 -3 to -5%).
template <int kHeadDim>
struct FwdConfigHopperLong;
template <> struct FwdConfigHopperLong<128> { static constexpr int kBlockN = 64, kNWarps = 8, kMSlices = 2, kStages = 2; static constexpr bool kSkipRescale = false, kKvRing = true, kPersistent = false, kHintNextWave = true, kAllTilesVisible = true, kLeanBlockEdges = true; };   // 136 KB

// A row's optional columns (kRelativeMask, kHintNextWave, kAllTilesVisible, kLeanBlockEdges): false where the row
// does not name them.
#define FLASHTILE_OPTIONAL_ROW_FLAG(Trait, member)                                       \
  template <typename Config, typename = void>                                          \
  struct Trait : std::false_type {};                                                   \
  template <typename Config>                                                           \
  struct Trait<Config, std::void_t<decltype(Config::member)>> : std::bool_constant<Config::member> {};
FLASHTILE_OPTIONAL_ROW_FLAG(RowRelativeMask, kRelativeMask)
FLASHTILE_OPTIONAL_ROW_FLAG(RowHintNextWave, kHintNextWave)
FLASHTILE_OPTIONAL_ROW_FLAG(RowAllTilesVisible, kAllTilesVisible)
FLASHTILE_OPTIONAL_ROW_FLAG(RowLeanBlockEdges, kLeanBlockEdges)
#undef FLASHTILE_OPTIONAL_ROW_FLAG

// Everything derived from a row of the table, with the checks that keep a new row honest. Config defaults to
// the table's row; bench/kernels/ passes others to measure alternatives.
// Shared memory after the K/V buffers for the ring's mbarriers (KvRingBarriers, fwd_kv_pipeline.cuh).
constexpr int kRingBarrierBytes = 128;

template <int kHeadDim_, typename Config = FwdConfig<kHeadDim_>>
struct FwdTraits : Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kThreads = Config::kNWarps * 32;
  static constexpr int kBlockM = Config::kNWarps * Config::kMSlices * 16;
  static constexpr int kRowStride = kHeadDim + 8;  // padded by 16 bytes: ldmatrix rows land in distinct banks
  static constexpr bool kRelativeMask = RowRelativeMask<Config>::value;
  static constexpr bool kHintNextWave = RowHintNextWave<Config>::value;
  static constexpr bool kAllTilesVisible = RowAllTilesVisible<Config>::value;
  static constexpr bool kLeanBlockEdges = RowLeanBlockEdges<Config>::value;
  static constexpr int kSmemBytes = (kBlockM + 2 * Config::kStages * Config::kBlockN) * kRowStride * 2 +
                                    (Config::kKvRing ? kRingBarrierBytes : 0);
  static_assert(kHeadDim % 16 == 0, "the MMA k-step is 16: head dims are padded to a multiple of 16");
  static_assert(Config::kBlockN % 16 == 0, "P is fed to the PV MMA 16 keys at a time");
  static_assert(Config::kMSlices * kHeadDim / 2 <= 128, "the O accumulator would not fit in registers");
  static_assert(Config::kStages == 1 || Config::kStages == 2, "K/V are single- or double-buffered");
  static_assert(!Config::kKvRing || Config::kStages == 2, "the ring hands over two buffers of K and of V");
  static_assert(!Config::kPersistent || Config::kKvRing, "a persistent CTA's warps go from block to block on the ring");
  static_assert(!kHintNextWave || (Config::kKvRing && !Config::kPersistent),
                "the next wave's block is known only to a ring row's CTA per block (a persistent CTA hints its own next)");
  static_assert(!kAllTilesVisible || Config::kKvRing, "only the ring lets a warp skip a tile on its own");
};

}  // namespace flashtile::cuda::sm80
