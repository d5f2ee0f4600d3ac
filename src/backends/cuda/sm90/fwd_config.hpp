// Tile sizes of the sm90 forward (fwd_kernel.cuh), one row per instantiated head dim. A CTA is one producer
// warpgroup (TMA) and two consumer warpgroups of 64 query rows each: kBlockM = 128. Each consumer thread keeps
// S (64 x kBlockN: kBlockN / 2 floats) and O (64 x kHeadDim: kHeadDim / 2 floats) in registers, inside the 240
// that setmaxnreg gives it, so kBlockN shrinks as the head dim grows. Shared memory: Q (two buffers when
// persistent) plus kStages K and V tiles (bf16 / fp16), under the 227 KB a Hopper CTA may take.
#pragma once

namespace flashtile::cuda::sm90 {

// How a consumer warpgroup orders its products and softmax (fwd_kernel.cuh): in turn; each tile's softmax under
// the previous tile's P V (overlap); and, on top of that, the two consumer warpgroups taking turns at issuing
// their products, so one's softmax runs while the other's products use the tensor cores (ping-pong).
enum Schedule : int { kSerial = 0, kOverlap = 1, kPingPong = 2 };

// kPersistent: one CTA per SM walking many tiles, so that a tile's prologue (Q and the first K/V loads) and
// epilogue (O's stores) overlap its neighbours': the next tile's Q loads into a second buffer meanwhile where
// shared memory has room for one (fwd_kernel.cuh, kQStages; not at D = 192 and 256). Otherwise a CTA per tile
// (the same kernel, whose loop then runs once).
template <int kHeadDim>
struct FwdConfig;
//                     kHeadDim      kBlockN    kStages    kPersistent                            S + O regs    smem
template <> struct FwdConfig<64>  { static constexpr int kBlockN = 128, kStages = 2; static constexpr bool kPersistent = true; };   //  64 +  32     96 KB
template <> struct FwdConfig<96>  { static constexpr int kBlockN = 128, kStages = 2; static constexpr bool kPersistent = true; };   //  64 +  48    144 KB
template <> struct FwdConfig<128> { static constexpr int kBlockN = 128, kStages = 2; static constexpr bool kPersistent = true; };   //  64 +  64    192 KB
template <> struct FwdConfig<192> { static constexpr int kBlockN = 96, kStages = 2; static constexpr bool kPersistent = true; };   //  48 +  96    192 KB
template <> struct FwdConfig<256> { static constexpr int kBlockN = 64, kStages = 2; static constexpr bool kPersistent = true; };   //  32 + 128    192 KB

}  // namespace flashtile::cuda::sm90
