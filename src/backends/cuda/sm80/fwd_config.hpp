// Tile sizes of the sm80 forward, one row per instantiated head dim. Each warp owns kMSlices slices of 16
// query rows: two slices let every K/V fragment loaded from shared memory feed two MMAs, halving shared
// memory traffic per FLOP, but the O accumulator costs kMSlices * kHeadDim / 2 registers per thread, so the
// large head dims use one slice and twice the warps.
#pragma once

namespace flashtile::cuda::sm80 {

template <int kHeadDim_>
struct FwdConfig;

//                      kHeadDim  kBlockN  kNWarps  kMSlices        O regs/thread  smem (bf16)
template <> struct FwdConfig<64>  { static constexpr int kBlockN = 128, kNWarps = 4, kMSlices = 2; };  //  64   54 KB
template <> struct FwdConfig<96>  { static constexpr int kBlockN = 64,  kNWarps = 4, kMSlices = 2; };  //  96   52 KB
template <> struct FwdConfig<128> { static constexpr int kBlockN = 64,  kNWarps = 4, kMSlices = 2; };  // 128   68 KB
template <> struct FwdConfig<192> { static constexpr int kBlockN = 64,  kNWarps = 8, kMSlices = 1; };  //  96  100 KB
template <> struct FwdConfig<256> { static constexpr int kBlockN = 64,  kNWarps = 8, kMSlices = 1; };  // 128  132 KB

// Everything derived from a row of the table, with the checks that keep a new row honest.
template <int kHeadDim_>
struct FwdTraits : FwdConfig<kHeadDim_> {
  using Config = FwdConfig<kHeadDim_>;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kThreads = Config::kNWarps * 32;
  static constexpr int kBlockM = Config::kNWarps * Config::kMSlices * 16;
  static constexpr int kRowStride = kHeadDim + 8;  // padded by 16 bytes: ldmatrix rows land in distinct banks
  static constexpr int kSmemBytes = (kBlockM + 2 * Config::kBlockN) * kRowStride * 2;
  static_assert(kHeadDim % 16 == 0, "the MMA k-step is 16: head dims are padded to a multiple of 16");
  static_assert(Config::kBlockN % 16 == 0, "P is fed to the PV MMA 16 keys at a time");
  static_assert(Config::kMSlices * kHeadDim / 2 <= 128, "the O accumulator would not fit in registers");
};

}  // namespace flashtile::cuda::sm80
