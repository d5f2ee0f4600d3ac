// CPU flash forward, two schedules built from the same tile pieces (tile_ops.hpp):
//
//  FlashAttention-2: one task per (batch, head, block of kBlockM query rows). K/V tiles are the inner loop;
//    the running max m and sum l stay in the task, the accumulator O is rescaled by exp(m_old - m_new) when
//    the max moves, and the division by l happens once per row at the end.
//  FlashAttention-1: one task per (batch, head). K/V tiles are the outer loop and query tiles the inner one;
//    O, m and l for the whole head live in a per-task buffer (the paper's HBM) and every step reads them,
//    rescales O to the new max and new sum, and writes them back. It exists to measure what v2 changed.
//
// Scores are kept in natural units: the raw product q.k times the softmax scale (one rounding, as a framework
// does it; scaling Q first adds a second one), and s - max goes to exp2 times log2(e): subtracting before
// converting keeps the rounding of large fp32 logits out of P. No buffer grows with seqlen_k; FA2's workspace
// is one set of tiles per thread.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/gemm_bf16.hpp"
#include "backends/cpu/parallel.hpp"
#include "backends/cpu/softmax_avx512.hpp"
#include "backends/cpu/tile_ops.hpp"
#include "common/numeric.hpp"

namespace flashtile::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Tile sizes. kBlockM rows of Q share each K/V tile they load (and, on the bf16 path, its packing into pairs,
// which 128 rows amortise better than 64: docs/perf-log.md, CPU v2); kBlockN keys per K/V tile. With head_dim 128
// the working set (Q, K, V, S and O tiles) is about 320 KB in fp32: it stays in a core's L2.
struct ForwardTiles {
  static constexpr int64_t kBlockM = 256;
  static constexpr int64_t kBlockN = 128;
  static_assert(kBlockM <= TileMask::kMaxRows, "TileMask holds at most kMaxRows rows");
};

// The bf16 fast path (gemm_bf16.hpp): Q, K and V are read in place as bf16, the softmax step runs in one AVX-512
// pass (softmax_bf16.hpp) that rounds P to bf16 once, as the GPU kernels do. Other dtypes take the fp32 path,
// and so does a masked tile whose V rows hold an Inf or NaN: P V as a product would turn a hidden key's 0 * NaN
// into NaN for rows that must not see it (README: NaN reaches exactly the outputs that depend on it).
class Bf16Products {
 public:
  Bf16Products(const ForwardParams& params, const Problem& p)
      : kernel_(p.dtype == DType::kBFloat16 && readable(params.q, p.head_dim) && readable(params.k, p.head_dim) &&
                        readable(params.v, p.head_dim_v)
                    ? bf16_kernel()
                    : Bf16Kernel::kNone),
        params_(params),
        map_(p) {}
  bool enabled() const { return kernel_ != Bf16Kernel::kNone; }
  // Whether the tile of keys [col0, col0 + cols) of K/V head hk, under `mask`, can take this path.
  bool takes(const TileMask& mask, int64_t b, int64_t hk, int64_t col0, int64_t cols, int64_t dv) const {
    return enabled() && (mask.full || bf16_rows_finite(cols, dv, at(params_.v, b, col0, hk), params_.v.stride[1]));
  }

  // Scratch a thread needs, in floats: the pair-packed operand, then P in bf16.
  static int64_t pack_floats(int64_t d, int64_t dv) {
    return std::max(bf16_pack_words(ForwardTiles::kBlockN, d), bf16_pack_words(dv, ForwardTiles::kBlockN));
  }
  static int64_t workspace_floats(int64_t d, int64_t dv) {
    return pack_floats(d, dv) + ForwardTiles::kBlockM * ForwardTiles::kBlockN / 2;
  }

  // The scores of query rows [row0, ..) of head h against keys [col0, ..) of K/V head hk (s: rows x cols), and
  // the online-softmax step over them (m, l, alpha as online_softmax_step's; o's rows times alpha unless o is
  // null), leaving P in bf16 in the scratch for accumulate_pv.
  void probabilities(const TileMask& mask, int64_t b, int64_t h, int64_t hk, int64_t row0, int64_t rows, int64_t col0,
                     int64_t cols, int64_t d, int64_t dv, float* s, float* m, float* l, float* alpha, float* o,
                     float* scratch) const {
    gemm_bf16_abt(kernel_, rows, cols, d, at(params_.q, b, row0, h), params_.q.stride[1], at(params_.k, b, col0, hk),
                  params_.k.stride[1], s, cols, reinterpret_cast<uint32_t*>(scratch));
    float mul = map_.mul;
    if (map_.softcap > 0 || !mask.full) {  // tanh and the mask's -inf on the generic path; the step scales by 1
      finish_scores(map_, mask, rows, cols, s);
      mul = 1.0f;
    }
    online_softmax_step_avx512(rows, cols, s, mul, m, l, alpha, p16(scratch, d, dv), o, dv);
  }

  // o (rows x dv) += P V, with P from probabilities() and V rows [col0, ..) of K/V head hk.
  void accumulate_pv(int64_t b, int64_t hk, int64_t rows, int64_t col0, int64_t cols, int64_t d, int64_t dv, float* o,
                     float* scratch) const {
    gemm_bf16_ab_accumulate(kernel_, rows, dv, cols, p16(scratch, d, dv), cols, at(params_.v, b, col0, hk),
                            params_.v.stride[1], o, dv, reinterpret_cast<uint32_t*>(scratch));
  }

 private:
  static bool readable(const Tensor& t, int64_t dim) { return t.stride[1] >= dim && t.stride[1] <= INT32_MAX; }
  static const uint16_t* at(const Tensor& t, int64_t b, int64_t row, int64_t head) {
    return static_cast<const uint16_t*>(t.data) + offset_bshd(t, b, row, head);
  }
  static uint16_t* p16(float* scratch, int64_t d, int64_t dv) {
    return reinterpret_cast<uint16_t*>(scratch + pack_floats(d, dv));
  }
  Bf16Kernel kernel_;
  const ForwardParams& params_;
  ScoreMap map_;
};

// Turns s into P = exp(s - m_new) row by row and returns, per row, the factor exp(m_old - m_new) that earlier
// partial results must be multiplied by. Rows that have seen no key yet keep m = -inf and get P = 0.
void online_softmax_step(int64_t rows, int64_t cols, float* s, float* m, float* l, float* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * cols;
    float mx = m[r];
    // simd reductions: the compiler may reorder them (max is exact in any order; the sum's order only moves
    // rounding), which lets it vectorise what would otherwise be a serial chain of dependent adds.
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, row[c]);
    const float m_new = mx;
    const float shift = m_new == kNegInf ? 0.0f : m_new;  // an all-masked row: avoid -inf - -inf
    alpha[r] = (m[r] - shift) * kLog2e;
    for (int64_t c = 0; c < cols; ++c) row[c] = (row[c] - shift) * kLog2e;
    m[r] = m_new;
  }
  exp2_inplace(s, rows * cols);
  exp2_inplace(alpha, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * cols;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += row[c];
    l[r] = l[r] * alpha[r] + sum;
  }
}

// The step over finished scores on the generic path: P over s in fp32, and o's rows (dv floats; o may be null)
// times alpha. In one AVX-512 pass where the CPU has it (softmax_avx512.hpp), else in the loops above.
void softmax_step(int64_t rows, int64_t cols, float* s, float* m, float* l, float* alpha, float* o, int64_t dv) {
  if (avx512_softmax_available()) return online_softmax_step_avx512(rows, cols, s, 1.0f, m, l, alpha, nullptr, o, dv);
  online_softmax_step(rows, cols, s, m, l, alpha);
  if (o == nullptr) return;
  for (int64_t r = 0; r < rows; ++r)
    if (alpha[r] != 1.0f)
      for (int64_t c = 0; c < dv; ++c) o[r * dv + c] *= alpha[r];
}

// Writes O rows (o_acc / l, or 0 for rows that see no key) and their LSE in natural-log units. Whether a row
// sees a key is the mask's answer, not the running max's: a row whose visible scores are all NaN (a NaN in its q
// row or in its only key) keeps m = -inf with l = NaN, and one whose scores are all -inf (an Inf in K) keeps
// l = 0; both depend on the input and come out NaN (0 / 0 for the second), as the float64 oracle gives them.
void write_rows(const ForwardParams& params, const Problem& p, int64_t b, int64_t h, int64_t row0, int64_t rows,
                const float* m, const float* l, float* o_acc) {
  const int64_t dv = p.head_dim_v;
  auto sees_keys = [&](int64_t r) { return p.keys.lo(row0 + r) <= p.keys.hi(row0 + r); };
  for (int64_t r = 0; r < rows; ++r) {
    const bool seen = sees_keys(r);
    const float inv = 1.0f / l[r];
    float* o = o_acc + r * dv;
    for (int64_t d = 0; d < dv; ++d) o[d] = seen ? o[d] * inv : 0.0f;
  }
  store_tile(params.out, b, h, row0, rows, dv, 1.0f, o_acc);
  if (!p.with_lse) return;
  float* lse = static_cast<float*>(params.lse.data);
  for (int64_t r = 0; r < rows; ++r)  // m = -inf with l = 0 gives -inf, with l = NaN NaN
    lse[offset_bhs(params.lse, b, h, row0 + r)] =
        sees_keys(r) ? static_cast<float>(m[r] + std::log(static_cast<double>(l[r]))) : kNegInf;
}

Status forward_flash2(const ForwardParams& params, const Problem& p) {
  using T = ForwardTiles;
  const int64_t d = p.head_dim, dv = p.head_dim_v;
  const int64_t m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  // Per thread: Q (M x d), K (N x d), V (N x dv), S (M x N), O (M x dv), m, l, alpha (M each).
  const Bf16Products bf16(params, p);
  const int64_t ws = T::kBlockM * d + T::kBlockN * (d + dv) + T::kBlockM * T::kBlockN + T::kBlockM * dv +
                     3 * T::kBlockM + (bf16.enabled() ? Bf16Products::workspace_floats(d, dv) : 0);
  const ScoreMap map(p);
  return parallel_tasks(p.batch * p.heads_q * m_blocks, params.num_threads, ws, [&](int64_t task, float* w) {
    const int64_t mb = task % m_blocks, h = (task / m_blocks) % p.heads_q, b = task / (m_blocks * p.heads_q);
    const int64_t hk = h / p.group();
    const int64_t row0 = mb * T::kBlockM, rows = std::min(T::kBlockM, p.seqlen_q - row0);
    float *q = w, *k = q + T::kBlockM * d, *v = k + T::kBlockN * d, *s = v + T::kBlockN * dv;
    float *o = s + T::kBlockM * T::kBlockN, *m = o + T::kBlockM * dv, *l = m + T::kBlockM, *alpha = l + T::kBlockM;
    float* scratch = alpha + T::kBlockM;
    std::fill(o, o + rows * dv, 0.0f);
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, 0.0f);
    // Keys seen by any row of the block; tiles outside it are hidden from every row and never touched.
    const int64_t key_begin = p.keys.lo(row0), key_end = p.keys.hi(row0 + rows - 1) + 1;
    // Q as an fp32 tile, made only if a tile takes the fp32 path (the bf16 path reads Q's rows in place).
    TileView qv{nullptr, d};
    auto q_tile = [&] { return qv.data ? qv : (qv = view_tile(params.q, b, h, row0, rows, d, q)); };
    for (int64_t col0 = key_begin; col0 < key_end; col0 += T::kBlockN) {
      const int64_t cols = std::min(T::kBlockN, key_end - col0);
      const TileMask mask = make_tile_mask(p.keys, row0, rows, col0, cols);
      if (bf16.takes(mask, b, hk, col0, cols, dv)) {
        bf16.probabilities(mask, b, h, hk, row0, rows, col0, cols, d, dv, s, m, l, alpha, o, scratch);
        bf16.accumulate_pv(b, hk, rows, col0, cols, d, dv, o, scratch);
        continue;
      }
      score_tile(map, mask, rows, cols, d, q_tile(), view_tile(params.k, b, hk, col0, cols, d, k), s);
      softmax_step(rows, cols, s, m, l, alpha, o, dv);
      accumulate_w_in(mask, rows, cols, dv, s, view_tile(params.v, b, hk, col0, cols, dv, v), o);
    }
    write_rows(params, p, b, h, row0, rows, m, l, o);
  });
}

Status forward_flash1(const ForwardParams& params, const Problem& p) {
  using T = ForwardTiles;
  const int64_t d = p.head_dim, dv = p.head_dim_v, sq = p.seqlen_q;
  // Per thread: the head's O (sq x dv), m and l (sq each), plus Q, K, V, S, a P*V tile and alpha.
  const Bf16Products bf16(params, p);
  const int64_t ws = sq * dv + 2 * sq + T::kBlockM * d + T::kBlockN * (d + dv) + T::kBlockM * T::kBlockN +
                     T::kBlockM * dv + T::kBlockM + (bf16.enabled() ? Bf16Products::workspace_floats(d, dv) : 0);
  const ScoreMap map(p);
  return parallel_tasks(p.batch * p.heads_q, params.num_threads, ws, [&](int64_t task, float* w) {
    const int64_t h = task % p.heads_q, b = task / p.heads_q, hk = h / p.group();
    float *o_all = w, *m_all = o_all + sq * dv, *l_all = m_all + sq;
    float *q = l_all + sq, *k = q + T::kBlockM * d, *v = k + T::kBlockN * d, *s = v + T::kBlockN * dv;
    float *pv = s + T::kBlockM * T::kBlockN, *alpha = pv + T::kBlockM * dv, *scratch = alpha + T::kBlockM;
    std::fill(o_all, o_all + sq * dv, 0.0f);
    std::fill(m_all, m_all + sq, kNegInf);
    std::fill(l_all, l_all + sq, 0.0f);
    for (int64_t col0 = 0; col0 < p.seqlen_k; col0 += T::kBlockN) {
      const int64_t cols = std::min(T::kBlockN, p.seqlen_k - col0);
      // K and V as fp32 tiles, made only if a query tile takes the fp32 path with them.
      TileView kv{nullptr, d}, vv{nullptr, dv};
      auto kv_tiles = [&] {
        if (kv.data) return;
        kv = view_tile(params.k, b, hk, col0, cols, d, k);
        vv = view_tile(params.v, b, hk, col0, cols, dv, v);
      };
      // Query tiles that see at least one key of this K/V tile.
      const int64_t first = p.keys.row_begin(col0), last = p.keys.row_end(col0 + cols);
      if (first >= last) continue;
      for (int64_t row0 = first - first % T::kBlockM; row0 < last; row0 += T::kBlockM) {
        const int64_t rows = std::min(T::kBlockM, sq - row0);
        const TileMask mask = make_tile_mask(p.keys, row0, rows, col0, cols);
        float *o = o_all + row0 * dv, *m = m_all + row0, *l = l_all + row0;
        float l_old[T::kBlockM];
        std::copy(l, l + rows, l_old);
        std::fill(pv, pv + rows * dv, 0.0f);
        if (bf16.takes(mask, b, hk, col0, cols, dv)) {  // the same steps as the FA2 schedule takes
          bf16.probabilities(mask, b, h, hk, row0, rows, col0, cols, d, dv, s, m, l, alpha, nullptr, scratch);
          bf16.accumulate_pv(b, hk, rows, col0, cols, d, dv, pv, scratch);
        } else {
          kv_tiles();
          score_tile(map, mask, rows, cols, d, view_tile(params.q, b, h, row0, rows, d, q), kv, s);
          softmax_step(rows, cols, s, m, l, alpha, nullptr, dv);
          accumulate_w_in(mask, rows, cols, dv, s, vv, pv);
        }
        // O_new = (l_old * alpha * O_old + P V) / l_new: the stored O is normalised after every step.
        for (int64_t r = 0; r < rows; ++r) {
          if (m[r] == kNegInf) continue;
          const float keep = l_old[r] * alpha[r] / l[r], add = 1.0f / l[r];
          for (int64_t c = 0; c < dv; ++c) o[r * dv + c] = o[r * dv + c] * keep + pv[r * dv + c] * add;
        }
      }
    }
    // O is already normalised; write_rows divides by l, so fold l into m (for the LSE) and hand it l = 1.
    for (int64_t r = 0; r < sq; ++r) {
      if (m_all[r] != kNegInf) m_all[r] += std::log(l_all[r]), l_all[r] = 1.0f;
    }
    write_rows(params, p, b, h, 0, sq, m_all, l_all, o_all);
  });
}

}  // namespace

Status flash_forward(const ForwardParams& params, const Problem& p, Schedule schedule) {
  return schedule == Schedule::kFlash2 ? forward_flash2(params, p) : forward_flash1(params, p);
}

}  // namespace flashtile::cpu
