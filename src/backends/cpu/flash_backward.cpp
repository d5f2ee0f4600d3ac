// CPU flash backward. P is recomputed from the saved LSE (never stored), and D = rowsum(dO * O) is computed
// per query tile, so no buffer grows with the sequence length. Two passes, each owning what it writes:
//
//  pass 1, one task per (batch, K/V head, block of kBlockN keys): loops over the group's query heads and the
//    query tiles that see the block, accumulating dV += P^T dO and dK += dS^T Q in the task.
//  pass 2, one task per (batch, query head, block of kBlockM rows): loops over the key tiles the rows see,
//    accumulating dQ += dS K.
//
// Pass 2 recomputes S and dP (3 GEMMs on top of pass 1's 4, so 7 instead of FlashAttention-2's 5). In
// exchange no two tasks ever add into the same element: the gradients are bitwise deterministic for any
// thread count, and no fp32 dQ accumulator or atomics are needed.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/parallel.hpp"
#include "backends/cpu/tile_ops.hpp"
#include "common/numeric.hpp"

namespace flashtile::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// Tile sizes for both passes; the working set at head_dim 128 is about 200 KB of fp32 per thread.
struct BackwardTiles {
  static constexpr int64_t kBlockM = 64;
  static constexpr int64_t kBlockN = 64;
  static_assert(kBlockM <= TileMask::kMaxRows, "TileMask holds at most kMaxRows rows");
};

// The tiles of one query block, loaded once and reused against every key tile.
struct QueryTile {
  float* q;      // rows x d
  float* dout;   // rows x dv
  float* delta;  // rows: D_i = sum_d dO_id * O_id
  float* lse;    // rows: the forward's LSE (natural log)
};

struct KeyTile {
  float* k;  // cols x d
  float* v;  // cols x dv
};

class Backward {
 public:
  Backward(const BackwardParams& params, const Problem& p)
      : params_(params),
        p_(p),
        map_(p) {}

  // A thread's workspace: the query tiles, the key tiles, P, dS, tanh, an O tile and the gradient accumulator
  // (dK and dV in pass 1, dQ in pass 2).
  struct Workspace {
    QueryTile qt;
    KeyTile kt;
    float *prob, *ds, *th, *o_scratch, *acc;
  };
  int64_t workspace_floats() const {
    using T = BackwardTiles;
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    return T::kBlockM * (d + 2 * dv + 2) + T::kBlockN * (d + dv) + 3 * T::kBlockM * T::kBlockN +
           std::max(T::kBlockN * (d + dv), T::kBlockM * d);
  }
  Workspace carve(float* w) const {
    using T = BackwardTiles;
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    Workspace ws;
    ws.qt.q = w;
    ws.qt.dout = ws.qt.q + T::kBlockM * d;
    ws.qt.delta = ws.qt.dout + T::kBlockM * dv;
    ws.qt.lse = ws.qt.delta + T::kBlockM;
    ws.kt.k = ws.qt.lse + T::kBlockM;
    ws.kt.v = ws.kt.k + T::kBlockN * d;
    ws.prob = ws.kt.v + T::kBlockN * dv;
    ws.ds = ws.prob + T::kBlockM * T::kBlockN;
    ws.th = ws.ds + T::kBlockM * T::kBlockN;
    ws.o_scratch = ws.th + T::kBlockM * T::kBlockN;
    ws.acc = ws.o_scratch + T::kBlockM * dv;
    return ws;
  }

  void load_query_tile(int64_t b, int64_t h, int64_t row0, int64_t rows, const QueryTile& t, float* o_scratch) const {
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    load_tile(params_.q, b, h, row0, rows, d, 1.0f, t.q);
    load_tile(params_.dout, b, h, row0, rows, dv, 1.0f, t.dout);
    load_tile(params_.out, b, h, row0, rows, dv, 1.0f, o_scratch);
    const float* lse = static_cast<const float*>(params_.lse.data);
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0.0;  // D and the LSE in double: both enter every dS of the row
      for (int64_t c = 0; c < dv; ++c) acc += static_cast<double>(t.dout[r * dv + c]) * o_scratch[r * dv + c];
      t.delta[r] = static_cast<float>(acc);
      t.lse[r] = lse[offset_bhs(params_.lse, b, h, row0 + r)];
    }
  }

  // For one (query tile, key tile) pair: P (rows x cols) in `prob` and, in `ds`, the gradient with respect to
  // the raw products q.k, so that dQ = ds K and dK = ds^T Q need no further scaling:
  //   ds = P * (dP - D) * scale                     (times 1 - tanh^2 with a softcap)
  // Masked entries of both are exactly 0, set rather than multiplied so a NaN stored at a hidden key stays out.
  void probabilities_and_ds(const TileMask& mask, int64_t rows, int64_t cols, const QueryTile& qt, const KeyTile& kt,
                            float* prob, float* ds, float* th) const {
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    // P = exp(S - LSE), S from score_tile as the fp32 and fp16 forward computes it; S - LSE is formed in natural
    // units and only then scaled to log2 units. The bf16 forward sums S's products in another order
    // (gemm_bf16.hpp), and an LSE may come from elsewhere (SPEC.md), so S - LSE can land a rounding above 0
    // where the row's max dominates: P is capped at 1, as exact arithmetic has it. Uncapped, large logits (a
    // rounding of S worth more than 1) made P, and the gradients with it, as large as Inf.
    score_tile(map_, mask, rows, cols, d, {qt.q, d}, {kt.k, d}, prob);
    if (p_.softcap > 0)
      for (int64_t i = 0; i < rows * cols; ++i) th[i] = prob[i] / p_.softcap;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)  // std::min keeps a NaN (its first argument)
        prob[r * cols + c] = std::min((prob[r * cols + c] - qt.lse[r]) * kLog2e, 0.0f);
    exp2_inplace(prob, rows * cols);
    gemm_abt(rows, cols, dv, qt.dout, dv, kt.v, dv, ds, cols, false);  // dP = dO V^T
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t begin = mask.full ? 0 : mask.begin[r], end = mask.full ? cols : mask.end[r];
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const bool visible = c >= begin && c < end;
        float g = prob[i] * (ds[i] - qt.delta[r]);
        if (p_.softcap > 0) g *= 1.0f - th[i] * th[i];
        ds[i] = visible ? g * p_.scale : 0.0f;
        prob[i] = visible ? prob[i] : 0.0f;
      }
    }
  }

  // Pass 1: dK and dV for keys [col0, col0 + cols) of K/V head hk.
  void key_block(int64_t b, int64_t hk, int64_t col0, int64_t cols, float* w) const {
    using T = BackwardTiles;
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    const Workspace ws = carve(w);
    const QueryTile& qt = ws.qt;
    const KeyTile& kt = ws.kt;
    float *dk = ws.acc, *dvacc = ws.acc + T::kBlockN * d;
    std::fill(dk, dk + cols * d, 0.0f);
    std::fill(dvacc, dvacc + cols * dv, 0.0f);
    load_tile(params_.k, b, hk, col0, cols, d, 1.0f, kt.k);
    load_tile(params_.v, b, hk, col0, cols, dv, 1.0f, kt.v);
    const int64_t first = p_.keys.row_begin(col0), last = p_.keys.row_end(col0 + cols);
    for (int64_t g = 0; g < p_.group(); ++g) {
      const int64_t h = hk * p_.group() + g;
      for (int64_t row0 = first; row0 < last; row0 += T::kBlockM) {
        const int64_t rows = std::min(T::kBlockM, last - row0);
        const TileMask mask = make_tile_mask(p_.keys, row0, rows, col0, cols);
        load_query_tile(b, h, row0, rows, qt, ws.o_scratch);
        probabilities_and_ds(mask, rows, cols, qt, kt, ws.prob, ws.ds, ws.th);
        accumulate_wt_in(mask, rows, cols, dv, ws.prob, qt.dout, dvacc);
        accumulate_wt_in(mask, rows, cols, d, ws.ds, qt.q, dk);
      }
    }
    store_tile(params_.dk, b, hk, col0, cols, d, 1.0f, dk);
    store_tile(params_.dv, b, hk, col0, cols, dv, 1.0f, dvacc);
  }

  // Pass 2: dQ for rows [row0, row0 + rows) of query head h.
  void query_block(int64_t b, int64_t h, int64_t row0, int64_t rows, float* w) const {
    using T = BackwardTiles;
    const int64_t d = p_.head_dim, dv = p_.head_dim_v, hk = h / p_.group();
    const Workspace ws = carve(w);
    const QueryTile& qt = ws.qt;
    const KeyTile& kt = ws.kt;
    float* dq = ws.acc;
    std::fill(dq, dq + rows * d, 0.0f);
    const int64_t key_begin = p_.keys.lo(row0), key_end = p_.keys.hi(row0 + rows - 1) + 1;
    if (key_begin < key_end) load_query_tile(b, h, row0, rows, qt, ws.o_scratch);
    for (int64_t col0 = key_begin; col0 < key_end; col0 += T::kBlockN) {
      const int64_t cols = std::min(T::kBlockN, key_end - col0);
      const TileMask mask = make_tile_mask(p_.keys, row0, rows, col0, cols);
      load_tile(params_.k, b, hk, col0, cols, d, 1.0f, kt.k);
      load_tile(params_.v, b, hk, col0, cols, dv, 1.0f, kt.v);
      probabilities_and_ds(mask, rows, cols, qt, kt, ws.prob, ws.ds, ws.th);
      accumulate_w_in(mask, rows, cols, d, ws.ds, {kt.k, d}, dq);
    }
    store_tile(params_.dq, b, h, row0, rows, d, 1.0f, dq);
  }

 private:
  const BackwardParams& params_;
  const Problem& p_;
  ScoreMap map_;
};

}  // namespace

Status flash_backward(const BackwardParams& params, const Problem& p) {
  using T = BackwardTiles;
  const Backward bwd(params, p);
  const int64_t n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
  Status s = parallel_tasks(p.batch * p.heads_kv * n_blocks, params.num_threads, bwd.workspace_floats(),
                            [&](int64_t task, float* w) {
                              const int64_t nb = task % n_blocks, hk = (task / n_blocks) % p.heads_kv,
                                            b = task / (n_blocks * p.heads_kv);
                              const int64_t col0 = nb * T::kBlockN;
                              bwd.key_block(b, hk, col0, std::min(T::kBlockN, p.seqlen_k - col0), w);
                            });
  if (!s.ok()) return s;
  const int64_t m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  return parallel_tasks(p.batch * p.heads_q * m_blocks, params.num_threads, bwd.workspace_floats(),
                        [&](int64_t task, float* w) {
                          const int64_t mb = task % m_blocks, h = (task / m_blocks) % p.heads_q,
                                        b = task / (m_blocks * p.heads_q);
                          const int64_t row0 = mb * T::kBlockM;
                          bwd.query_block(b, h, row0, std::min(T::kBlockM, p.seqlen_q - row0), w);
                        });
}

}  // namespace flashtile::cpu
