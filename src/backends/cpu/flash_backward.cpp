// CPU flash backward. P is recomputed from the saved LSE (never stored). Three passes, each owning what it writes:
//
//  pass 0, one task per (batch, query head, block of kBlockM rows): D = rowsum(dO * O), kept for every row (a
//    float a row, like the LSE), so that the passes below read it instead of recomputing it for every tile pair.
//  pass 1, one task per (batch, K/V head, block of kBlockN keys): loops over the group's query heads and the
//    query tiles that see the block, accumulating dV += P^T dO and dK += dS^T Q in the task.
//  pass 2, one task per (batch, query head, block of kBlockM rows): loops over the key tiles the rows see,
//    accumulating dQ += dS K.
//
// Pass 2 recomputes S and dP (3 products on top of pass 1's 4, so 7 instead of FlashAttention-2's 5). In
// exchange no two tasks ever add into the same element: the gradients are bitwise deterministic for any
// thread count, and no fp32 dQ accumulator or atomics are needed.
//
// The products run on fp32 tiles (gemm.hpp) or, for bf16 inputs on CPUs with a bf16 kernel, on the inputs' bf16
// rows in place (gemm_bf16.hpp), with P and dS rounded to bf16 for the three accumulating products, as the GPU
// kernels round them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/gemm_bf16.hpp"
#include "backends/cpu/parallel.hpp"
#include "backends/cpu/softmax_avx512.hpp"
#include "backends/cpu/tile_ops.hpp"
#include "common/numeric.hpp"

namespace flashtile::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// Tile sizes for both passes: 128 x 128 ran 1.2-1.3x faster than 64 x 64 (docs/perf-log.md, CPU v4); the
// working set at head_dim 128 is about 600 KB of fp32 per thread, inside a core's L2.
struct BackwardTiles {
  static constexpr int64_t kBlockM = 128;
  static constexpr int64_t kBlockN = 128;
  static_assert(kBlockM <= TileMask::kMaxRows, "TileMask holds at most kMaxRows rows");
};

// The tiles of one query block, loaded once and reused against every key tile.
struct QueryTile {
  float* q;      // rows x d (fp32 products only)
  float* dout;   // rows x dv (fp32 products only)
  float* delta;  // rows: D_i = sum_d dO_id * O_id
  float* lse;    // rows: the forward's LSE (natural log)
};

struct KeyTile {
  float* k;  // cols x d (fp32 products only)
  float* v;  // cols x dv (fp32 products only)
};

class Backward {
 public:
  Backward(const BackwardParams& params, const Problem& p, float* delta)
      : params_(params),
        p_(p),
        map_(p),
        delta_(delta),
        bf16_(p.dtype == DType::kBFloat16 && readable(params.q, p.head_dim) && readable(params.k, p.head_dim) &&
                      readable(params.v, p.head_dim_v) && readable(params.dout, p.head_dim_v)
                  ? bf16_kernel()
                  : Bf16Kernel::kNone) {}

  // A thread's workspace: the query tiles, the key tiles, P, dS, tanh, the gradient accumulator (dK and dV in
  // pass 1, dQ in pass 2) and, on the bf16 path, a bf16 operand and the products' pack.
  struct Workspace {
    QueryTile qt;
    KeyTile kt;
    float *prob, *ds, *th, *acc;
    uint16_t* a16;
    uint32_t* pack;
  };
  int64_t workspace_floats() const {
    using T = BackwardTiles;
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    const int64_t floats = T::kBlockM * (d + dv + 2) + T::kBlockN * (d + dv) + 3 * T::kBlockM * T::kBlockN +
                           std::max(T::kBlockN * (d + dv), T::kBlockM * d);
    if (bf16_ == Bf16Kernel::kNone) return floats;
    const int64_t width = std::max(d, dv), depth = std::max({T::kBlockM, T::kBlockN, width});
    return floats + T::kBlockM * T::kBlockN / 2 + 1 + bf16_pack_words(std::max({T::kBlockN, width}), depth);
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
    ws.acc = ws.th + T::kBlockM * T::kBlockN;
    float* rest = ws.acc + std::max(T::kBlockN * (d + dv), T::kBlockM * d);
    ws.a16 = reinterpret_cast<uint16_t*>(rest);
    ws.pack = reinterpret_cast<uint32_t*>(rest + T::kBlockM * T::kBlockN / 2 + 1);
    return ws;
  }

  // Pass 0: D for rows [row0, row0 + rows) of query head h, in double (it enters every dS of the row).
  void delta_block(int64_t b, int64_t h, int64_t row0, int64_t rows, float* w) const {
    const int64_t dv = p_.head_dim_v;
    float *dout = w, *o = w + BackwardTiles::kBlockM * dv;
    load_tile(params_.dout, b, h, row0, rows, dv, 1.0f, dout);
    load_tile(params_.out, b, h, row0, rows, dv, 1.0f, o);
    float* delta = delta_ + (b * p_.heads_q + h) * p_.seqlen_q + row0;
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0.0;
      for (int64_t c = 0; c < dv; ++c) acc += static_cast<double>(dout[r * dv + c]) * o[r * dv + c];
      delta[r] = static_cast<float>(acc);
    }
  }

  // Pass 1: dK and dV for keys [col0, col0 + cols) of K/V head hk.
  void key_block(int64_t b, int64_t hk, int64_t col0, int64_t cols, float* w) const {
    using T = BackwardTiles;
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    const Workspace ws = carve(w);
    float *dk = ws.acc, *dvacc = ws.acc + T::kBlockN * d;
    std::fill(dk, dk + cols * d, 0.0f);
    std::fill(dvacc, dvacc + cols * dv, 0.0f);
    bool key_tile_loaded = false;  // fp32 copies of K and V, for the pairs that take the fp32 products
    const int64_t first = p_.keys.row_begin(col0), last = p_.keys.row_end(col0 + cols);
    for (int64_t g = 0; g < p_.group(); ++g) {
      const int64_t h = hk * p_.group() + g;
      for (int64_t row0 = first; row0 < last; row0 += T::kBlockM) {
        const int64_t rows = std::min(T::kBlockM, last - row0);
        const TileMask mask = make_tile_mask(p_.keys, row0, rows, col0, cols);
        load_row_stats(b, h, row0, rows, ws.qt);
        // dV and dK take dO's and Q's rows: a masked tile may run as a dense product only if they are finite.
        if (bf16_ != Bf16Kernel::kNone &&
            (mask.full || (bf16_rows_finite(rows, dv, at(params_.dout, b, row0, h), params_.dout.stride[1]) &&
                           bf16_rows_finite(rows, d, at(params_.q, b, row0, h), params_.q.stride[1])))) {
          bf16_scores_and_dp(b, h, hk, row0, rows, col0, cols, ws);
          probabilities_and_ds(mask, rows, cols, ws.qt, ws.prob, ws.ds, ws.th);
          transpose_to_bf16(rows, cols, ws.prob, cols, ws.a16);  // P^T
          gemm_bf16_ab_accumulate(bf16_, cols, dv, rows, ws.a16, rows, at(params_.dout, b, row0, h),
                                  params_.dout.stride[1], dvacc, dv, ws.pack);
          transpose_to_bf16(rows, cols, ws.ds, cols, ws.a16);  // dS^T
          gemm_bf16_ab_accumulate(bf16_, cols, d, rows, ws.a16, rows, at(params_.q, b, row0, h), params_.q.stride[1],
                                  dk, d, ws.pack);
          continue;
        }
        if (!key_tile_loaded) {
          load_tile(params_.k, b, hk, col0, cols, d, 1.0f, ws.kt.k);
          load_tile(params_.v, b, hk, col0, cols, dv, 1.0f, ws.kt.v);
          key_tile_loaded = true;
        }
        load_query_tile(b, h, row0, rows, ws.qt);
        fp32_scores_and_dp(rows, cols, ws);
        probabilities_and_ds(mask, rows, cols, ws.qt, ws.prob, ws.ds, ws.th);
        accumulate_wt_in(mask, rows, cols, dv, ws.prob, ws.qt.dout, dvacc);
        accumulate_wt_in(mask, rows, cols, d, ws.ds, ws.qt.q, dk);
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
    float* dq = ws.acc;
    std::fill(dq, dq + rows * d, 0.0f);
    const int64_t key_begin = p_.keys.lo(row0), key_end = p_.keys.hi(row0 + rows - 1) + 1;
    if (key_begin < key_end) load_row_stats(b, h, row0, rows, ws.qt);
    bool query_tile_loaded = false;  // fp32 copies of Q and dO, for the pairs that take the fp32 products
    for (int64_t col0 = key_begin; col0 < key_end; col0 += T::kBlockN) {
      const int64_t cols = std::min(T::kBlockN, key_end - col0);
      const TileMask mask = make_tile_mask(p_.keys, row0, rows, col0, cols);
      // dQ takes K's rows: a masked tile may run as a dense product only if they are finite.
      if (bf16_ != Bf16Kernel::kNone &&
          (mask.full || bf16_rows_finite(cols, d, at(params_.k, b, col0, hk), params_.k.stride[1]))) {
        bf16_scores_and_dp(b, h, hk, row0, rows, col0, cols, ws);
        probabilities_and_ds(mask, rows, cols, ws.qt, ws.prob, ws.ds, ws.th);
        round_to_bf16(rows, cols, ws.ds, cols, ws.a16);
        gemm_bf16_ab_accumulate(bf16_, rows, d, cols, ws.a16, cols, at(params_.k, b, col0, hk), params_.k.stride[1],
                                dq, d, ws.pack);
        continue;
      }
      if (!query_tile_loaded) {
        load_query_tile(b, h, row0, rows, ws.qt);
        query_tile_loaded = true;
      }
      load_tile(params_.k, b, hk, col0, cols, d, 1.0f, ws.kt.k);
      load_tile(params_.v, b, hk, col0, cols, dv, 1.0f, ws.kt.v);
      fp32_scores_and_dp(rows, cols, ws);
      probabilities_and_ds(mask, rows, cols, ws.qt, ws.prob, ws.ds, ws.th);
      accumulate_w_in(mask, rows, cols, d, ws.ds, {ws.kt.k, d}, dq);
    }
    store_tile(params_.dq, b, h, row0, rows, d, 1.0f, dq);
  }

 private:
  static bool readable(const Tensor& t, int64_t dim) { return t.stride[1] >= dim && t.stride[1] <= INT32_MAX; }
  static const uint16_t* at(const Tensor& t, int64_t b, int64_t row, int64_t head) {
    return static_cast<const uint16_t*>(t.data) + offset_bshd(t, b, row, head);
  }

  // The LSE and D of rows [row0, row0 + rows) of query head h.
  void load_row_stats(int64_t b, int64_t h, int64_t row0, int64_t rows, const QueryTile& t) const {
    const float* lse = static_cast<const float*>(params_.lse.data);
    const float* delta = delta_ + (b * p_.heads_q + h) * p_.seqlen_q + row0;
    for (int64_t r = 0; r < rows; ++r) {
      t.lse[r] = lse[offset_bhs(params_.lse, b, h, row0 + r)];
      t.delta[r] = delta[r];
    }
  }
  // Q and dO of those rows as fp32 tiles, for the fp32 products.
  void load_query_tile(int64_t b, int64_t h, int64_t row0, int64_t rows, const QueryTile& t) const {
    load_tile(params_.q, b, h, row0, rows, p_.head_dim, 1.0f, t.q);
    load_tile(params_.dout, b, h, row0, rows, p_.head_dim_v, 1.0f, t.dout);
  }

  // S = Q K^T (raw products) into prob and dP = dO V^T into ds, from the fp32 tiles or the bf16 rows.
  void fp32_scores_and_dp(int64_t rows, int64_t cols, const Workspace& ws) const {
    const int64_t d = p_.head_dim, dv = p_.head_dim_v;
    gemm_abt(rows, cols, d, ws.qt.q, d, ws.kt.k, d, ws.prob, cols, false);
    gemm_abt(rows, cols, dv, ws.qt.dout, dv, ws.kt.v, dv, ws.ds, cols, false);
  }
  void bf16_scores_and_dp(int64_t b, int64_t h, int64_t hk, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                          const Workspace& ws) const {
    gemm_bf16_abt(bf16_, rows, cols, p_.head_dim, at(params_.q, b, row0, h), params_.q.stride[1],
                  at(params_.k, b, col0, hk), params_.k.stride[1], ws.prob, cols, ws.pack);
    gemm_bf16_abt(bf16_, rows, cols, p_.head_dim_v, at(params_.dout, b, row0, h), params_.dout.stride[1],
                  at(params_.v, b, col0, hk), params_.v.stride[1], ws.ds, cols, ws.pack);
  }

  // For one (query tile, key tile) pair, from the raw products S in `prob` and dP in `ds`: P (rows x cols) in
  // `prob` and, in `ds`, the gradient with respect to the raw products q.k, so that dQ = ds K and dK = ds^T Q
  // need no further scaling:
  //   ds = P * (dP - D) * scale                     (times 1 - tanh^2 with a softcap)
  // Masked entries of both are exactly 0, set rather than multiplied so a NaN stored at a hidden key stays out.
  void probabilities_and_ds(const TileMask& mask, int64_t rows, int64_t cols, const QueryTile& qt, float* prob,
                            float* ds, float* th) const {
    if (p_.softcap == 0 && avx512_softmax_available())  // the same steps in one AVX-512 pass
      return backward_probabilities_avx512(rows, cols, prob, ds, map_.mul, qt.lse, qt.delta, p_.scale,
                                           mask.full ? nullptr : mask.begin, mask.full ? nullptr : mask.end);
    // P = exp(S - LSE), S - LSE formed in natural units and only then scaled to log2 units. The forward may have
    // summed S's products in another order (the bf16 forward, gemm_bf16.hpp; other tile shapes), and an LSE may
    // come from elsewhere (SPEC.md), so S - LSE can land a rounding above 0 where the row's max dominates: P is
    // capped at 1, as exact arithmetic has it. Uncapped, large logits (a rounding of S worth more than 1) made P,
    // and the gradients with it, as large as Inf.
    finish_scores(map_, mask, rows, cols, prob);
    if (p_.softcap > 0)
      for (int64_t i = 0; i < rows * cols; ++i) th[i] = prob[i] / p_.softcap;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)  // std::min keeps a NaN (its first argument)
        prob[r * cols + c] = std::min((prob[r * cols + c] - qt.lse[r]) * kLog2e, 0.0f);
    exp2_inplace(prob, rows * cols);
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

  const BackwardParams& params_;
  const Problem& p_;
  ScoreMap map_;
  float* delta_;  // D of every row, (batch, heads_q, seqlen_q): written by pass 0, read by passes 1 and 2
  Bf16Kernel bf16_;
};

}  // namespace

Status flash_backward(const BackwardParams& params, const Problem& p) {
  using T = BackwardTiles;
  std::vector<float> delta;
  try {
    delta.resize(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q));
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "CPU backward: cannot allocate D for " +
                                          std::to_string(p.batch * p.heads_q * p.seqlen_q) + " rows"};
  }
  const Backward bwd(params, p, delta.data());
  // Passes 0 and 2 run one task per (batch, query head, block of kBlockM rows); pass 1 one per (batch, K/V head,
  // block of kBlockN keys).
  const int64_t m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  auto query_blocks = [&](auto pass) {
    return parallel_tasks(p.batch * p.heads_q * m_blocks, params.num_threads, bwd.workspace_floats(),
                          [&](int64_t task, float* w) {
                            const int64_t mb = task % m_blocks, h = (task / m_blocks) % p.heads_q,
                                          b = task / (m_blocks * p.heads_q);
                            const int64_t row0 = mb * T::kBlockM;
                            (bwd.*pass)(b, h, row0, std::min(T::kBlockM, p.seqlen_q - row0), w);
                          });
  };
  if (Status s = query_blocks(&Backward::delta_block); !s.ok()) return s;
  const int64_t n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
  Status s = parallel_tasks(p.batch * p.heads_kv * n_blocks, params.num_threads, bwd.workspace_floats(),
                            [&](int64_t task, float* w) {
                              const int64_t nb = task % n_blocks, hk = (task / n_blocks) % p.heads_kv,
                                            b = task / (n_blocks * p.heads_kv);
                              const int64_t col0 = nb * T::kBlockN;
                              bwd.key_block(b, hk, col0, std::min(T::kBlockN, p.seqlen_k - col0), w);
                            });
  if (!s.ok()) return s;
  return query_blocks(&Backward::query_block);
}

}  // namespace flashtile::cpu
