// The sm90 forward's choice of variant (src/backends/cuda/sm90/fwd_variant.hpp), checked on the CPU with the
// mask's kernel parameters resolved as the CUDA backend resolves them (set_key_window): the long variant (192-row
// tiles at D = 64) exactly where its A/B gained (full S >= 2048, causal S >= 4096), and never without a tile per
// SM or with a softcap.
#include <gtest/gtest.h>

#include <cstdint>

#include "backends/cuda/sm90/fwd_variant.hpp"
#include "common/problem.hpp"

namespace flashtile {
namespace {

constexpr int kSms = 132, kBlockM = 128, kLongBlockM = 192;

// Grid A's shape at sequence length s (batch 16384 / s, 32 heads at D = 64), or the given batch and heads.
cuda::FwdKernelParams params(int64_t sq, int64_t sk, bool causal, int batch, int heads, int64_t left = -1) {
  cuda::FwdKernelParams f{};
  f.batch = batch, f.heads_q = heads, f.group = 1;
  f.seqlen_q = static_cast<int>(sq), f.seqlen_k = static_cast<int>(sk);
  cuda::set_key_window(f, KeyRange{sq, sk, sk - sq, left, causal ? 0 : -1});
  return f;
}

bool long_variant(const cuda::FwdKernelParams& f) {
  return cuda::sm90::use_long_variant(f, kSms, kBlockM, kLongBlockM);
}

TEST(Sm90ForwardVariant, GridAFollowsTheMeasurement) {
  for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384}) {
    const int batch = static_cast<int>(16384 / s);
    EXPECT_EQ(long_variant(params(s, s, false, batch, 32)), s >= 2048) << "full S = " << s;
    EXPECT_EQ(long_variant(params(s, s, true, batch, 32)), s >= 4096) << "causal S = " << s;
  }
}

TEST(Sm90ForwardVariant, MiddleRowKeys) {
  EXPECT_EQ(cuda::sm90::middle_row_keys(params(2048, 2048, false, 1, 1)), 2048);
  EXPECT_EQ(cuda::sm90::middle_row_keys(params(4096, 4096, true, 1, 1)), 2049);  // row 2048 sees keys 0..2048
  EXPECT_EQ(cuda::sm90::middle_row_keys(params(200, 2300, true, 1, 1)), 2201);   // keys end-aligned: offset 2100
  EXPECT_EQ(cuda::sm90::middle_row_keys(params(8192, 8192, true, 1, 1, 3000)), 3001);  // a sliding window
  EXPECT_EQ(cuda::sm90::middle_row_keys(params(16, 0, false, 1, 1)), 0);
  EXPECT_EQ(cuda::sm90::middle_row_keys(params(4096, 4096, true, 1, 1, 0)), 1);  // the diagonal alone
}

TEST(Sm90ForwardVariant, NeedsATilePerSmAndNoSoftcap) {
  EXPECT_TRUE(long_variant(params(16384, 16384, false, 1, 4)));    // 86 tiles a head: 344
  EXPECT_FALSE(long_variant(params(16384, 16384, false, 1, 1)));   // 86 tiles for 132 SMs
  EXPECT_TRUE(long_variant(params(192, 2048, false, 1, 132)));     // one tile a head, one per SM
  EXPECT_FALSE(long_variant(params(192, 2048, false, 1, 131)));
  EXPECT_TRUE(long_variant(params(8192, 8192, true, 2, 16, 3000)));   // a window of 3001 keys
  EXPECT_FALSE(long_variant(params(8192, 8192, true, 2, 16, 1000)));  // of 1001
  cuda::FwdKernelParams capped = params(4096, 4096, false, 4, 32);
  capped.softcap = 30.0f;
  EXPECT_FALSE(long_variant(capped));
  EXPECT_FALSE(long_variant(params(4096, 0, false, 4, 32)));  // no keys
}

// Query rows a 192-row tile would pad far more than 128-row tiles: decode-like calls keep the ordinary tiles.
TEST(Sm90ForwardVariant, KeepsOrdinaryTilesWhereLongOnesWouldPad) {
  EXPECT_FALSE(long_variant(params(1, 8192, false, 64, 32)));      // 192 rows for 1 against 128
  EXPECT_FALSE(long_variant(params(200, 2300, true, 1, 140)));     // 384 against 256
  EXPECT_TRUE(long_variant(params(384, 2600, true, 1, 70)));       // 384 against 384
  EXPECT_TRUE(long_variant(params(2100, 2100, false, 2, 40)));     // 2112 against 2176
  EXPECT_TRUE(long_variant(params(6000, 6000, false, 1, 32)));     // 6144 against 6016: 2% more
  EXPECT_FALSE(long_variant(params(1000, 4096, false, 4, 64)));    // 1152 against 1024: 12.5% more
}

}  // namespace
}  // namespace flashtile
