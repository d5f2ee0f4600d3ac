// Tile sizes of the sm90 forward (fwd_kernel.cuh), one row per instantiated head dim. A CTA is one producer
// warpgroup (TMA) and two or three consumer warpgroups of 64 query rows each: kBlockM = 128 or 192. Each consumer
// thread keeps S (64 x kBlockN: kBlockN / 2 floats) and O (64 x kHeadDim: kHeadDim / 2 floats) in registers,
// inside the 240 (two consumers) or 160 (three) that setmaxnreg gives it, so kBlockN shrinks as the head dim
// grows. Shared memory: Q (two buffers where they fit: fwd_kernel.cuh, kQStages) plus kStages K and V tiles
// (bf16 / fp16), under the 227 KB a Hopper CTA may take. One persistent CTA per SM at every head dim.
#pragma once

namespace flashtile::cuda::sm90 {

// How a consumer warpgroup orders its products and softmax (fwd_kernel.cuh): in turn; each tile's softmax under
// the previous tile's P V (overlap); and, on top of that, the two consumer warpgroups taking turns at issuing
// their products, so one's softmax runs while the other's products use the tensor cores (ping-pong).
enum Schedule : int { kSerial = 0, kOverlap = 1, kPingPong = 2 };

template <int kHeadDim>
struct FwdConfig;
// kConsumers warpgroups of 64 query rows each (kBlockM = 64 kConsumers). kConsumersLong, where it differs, is a
// second variant the launcher picks for calls whose query rows see many keys (fwd_launch.cuh,
// use_long_variant): at D = 64 three consumers, as FlashAttention-3 has there, give each scheduler a third warp
// to hide the softmax's latencies behind its short products (64 x 128 x 64), at 160 registers a consumer thread
// (S 64 + O 32 + P 32) instead of 240; their 192-row tiles lose where rows see few keys (docs/perf-log.md, v18).
template <> struct FwdConfig<64> {  // S + O: 64 + 32 floats; Q 2 x 16 KB (2 x 24 KB long) + K/V 64 KB
  static constexpr int kBlockN = 128, kStages = 2, kConsumers = 2, kConsumersLong = 3;
};
template <> struct FwdConfig<96> {  // S + O: 64 + 48 floats; Q 2 x 24 KB + K/V 96 KB
  static constexpr int kBlockN = 128, kStages = 2, kConsumers = 2, kConsumersLong = 2;
};
template <> struct FwdConfig<128> {  // S + O: 64 + 64 floats; Q 2 x 32 KB + K/V 128 KB
  static constexpr int kBlockN = 128, kStages = 2, kConsumers = 2, kConsumersLong = 2;
};
template <> struct FwdConfig<192> {  // S + O: 48 + 96 floats; Q 1 x 48 KB + K/V 144 KB
  static constexpr int kBlockN = 96, kStages = 2, kConsumers = 2, kConsumersLong = 2;
};
template <> struct FwdConfig<256> {  // S + O: 32 + 128 floats; Q 1 x 64 KB + K/V 128 KB
  static constexpr int kBlockN = 64, kStages = 2, kConsumers = 2, kConsumersLong = 2;
};

}  // namespace flashtile::cuda::sm90
