#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace flashtile {

Status invalid_argument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
Status unsupported(std::string message) { return {StatusCode::kUnsupported, std::move(message)}; }

namespace {

std::string shape_string(const Tensor& t) {
  std::string s = "(";
  for (int d = 0; d < t.ndim && d < 4; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + ")";
}

bool dtype_valid(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// Element count, or -1 when it does not fit in int64 (check_view refuses such shapes).
int64_t numel(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim && d < 4; ++d)
    if (t.shape[d] == 0) return 0;
  for (int d = 0; d < t.ndim && d < 4; ++d)
    if (__builtin_mul_overflow(n, t.shape[d], &n)) return -1;
  return n;
}

// Checks the parts of a view that do not depend on other tensors: rank, shape signs, last-dim stride,
// pointer, alignment, and that the addressed range fits in int64. `dims` names the dimensions for messages.
Status check_view(const char* name, const Tensor& t, int ndim, const char* dims) {
  const std::string n = name;
  if (t.ndim != ndim)
    return invalid_argument(n + ": expected " + std::to_string(ndim) + " dims " + dims + ", got " +
                            std::to_string(t.ndim));
  if (!dtype_valid(t.dtype))
    return invalid_argument(n + ": unknown dtype code " + std::to_string(static_cast<int>(t.dtype)));
  if (t.device != Device::kCPU && t.device != Device::kCUDA)
    return invalid_argument(n + ": unknown device code " + std::to_string(static_cast<int>(t.device)));
  for (int d = 0; d < ndim; ++d)
    if (t.shape[d] < 0) return invalid_argument(n + ": negative size in shape " + shape_string(t));
  // An empty view addresses nothing, so its strides do not matter (frameworks give them odd values).
  if (numel(t) == 0) return {};
  if (t.shape[ndim - 1] > 1 && t.stride[ndim - 1] != 1)
    return invalid_argument(n + ": the last dimension must be contiguous (stride 1), got stride " +
                            std::to_string(t.stride[ndim - 1]));
  if (numel(t) < 0) return invalid_argument(n + ": shape " + shape_string(t) + " has more than 2^63 elements");
  // The lowest and highest element offsets the view reaches (negative strides reach below data), which must not
  // overflow int64 in bytes nor wrap around the address space.
  int64_t span = 0, lowest = 0, highest = 0;
  for (int d = 0; d < ndim; ++d) {
    if (t.shape[d] <= 1) continue;
    int64_t extent;
    if (t.stride[d] == INT64_MIN || __builtin_mul_overflow(t.shape[d] - 1, std::abs(t.stride[d]), &extent) ||
        __builtin_add_overflow(span, extent, &span))
      return invalid_argument(n + ": strides address more than 2^63 elements");
    if (t.stride[d] < 0)  // each sum's magnitude stays within span's: no overflow
      lowest -= extent;
    else
      highest += extent;
  }
  if (t.data == nullptr) return invalid_argument(n + ": data is null but the shape " + shape_string(t) + " is not empty");
  const int64_t size = static_cast<int64_t>(dtype_size(t.dtype));
  int64_t lowest_byte, end_element, end_byte;  // [data + lowest_byte, data + end_byte)
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  if (__builtin_mul_overflow(lowest, size, &lowest_byte) || lowest_byte == INT64_MIN ||
      __builtin_add_overflow(highest, 1, &end_element) || __builtin_mul_overflow(end_element, size, &end_byte) ||
      static_cast<uintptr_t>(-lowest_byte) > base || UINTPTR_MAX - base < static_cast<uintptr_t>(end_byte))
    return invalid_argument(n + ": strides reach past the ends of the address space (shape " + shape_string(t) +
                            ", " + std::to_string(size) + "-byte elements)");
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
    return invalid_argument(n + ": data pointer is not aligned to its element size (" +
                            std::to_string(dtype_size(t.dtype)) + " bytes)");
  return {};
}

// An output must not write one element twice: sorted by |stride|, each dim must step past everything the
// smaller dims reach. Sufficient, and exact for dense, transposed and packed (qkv) layouts.
Status check_no_self_overlap(const char* name, const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|stride|, size)
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] > 1) dims.emplace_back(std::abs(t.stride[d]), t.shape[d]);
  if (numel(t) == 0) return {};
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;
  for (auto [stride, size] : dims) {
    if (stride <= reach)
      return invalid_argument(std::string(name) + ": output strides overlap (two elements share memory)");
    reach += stride * (size - 1);
  }
  return {};
}

// Where a view's bytes lie: base + the sum of step * c over its terms, each c in [0, count): its dims longer than
// 1 (steps in bytes) and the bytes inside one element. `first` and `last` bound the bytes it reaches.
struct ByteTerm {
  __int128 step;
  int64_t count;
};
struct ByteView {
  static constexpr int kMaxTerms = 5;
  ByteTerm terms[kMaxTerms];
  int n_terms = 0;
  bool empty = true;  // addresses nothing
  __int128 base = 0, first = 0, last = 0;

  void add(__int128 step, int64_t count) {
    terms[n_terms++] = {step, count};
    (step < 0 ? first : last) += step * (count - 1);
  }
};

ByteView byte_view(const Tensor& t) {
  ByteView v;
  if (numel(t) <= 0) return v;
  v.empty = false;
  v.base = v.first = v.last = reinterpret_cast<uintptr_t>(t.data);
  const int64_t size = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 0; d < t.ndim && d < 4; ++d)
    if (t.shape[d] > 1 && t.stride[d] != 0) v.add(static_cast<__int128>(t.stride[d]) * size, t.shape[d]);
  v.add(1, size);
  return v;
}

ByteView byte_range(const void* data, size_t bytes) {
  ByteView v;
  if (data == nullptr || bytes == 0) return v;
  v.empty = false;
  v.base = v.first = v.last = reinterpret_cast<uintptr_t>(data);
  v.add(1, static_cast<int64_t>(std::min<size_t>(bytes, INT64_MAX)));
  return v;
}

// Whether two views share a byte. Where their byte ranges meet (packed layouts such as one buffer holding dk and
// dv side by side), a depth-first search looks for coefficients of a's terms and of b's (negated) that put both
// on one address, largest step first, cutting each branch whose remaining terms cannot close the gap: dense,
// transposed, packed and broadcast layouts leave one or two candidates a level. A search past kMaxNodes
// (adversarial strides) answers no, so that such a call runs as it did before this check existed.
bool views_overlap(const ByteView& a, const ByteView& b) {
  if (a.empty || b.empty || a.last < b.first || b.last < a.first) return false;
  constexpr int kMax = 2 * ByteView::kMaxTerms;
  ByteTerm terms[kMax];
  int n = 0;
  for (int i = 0; i < a.n_terms; ++i) terms[n++] = a.terms[i];
  for (int i = 0; i < b.n_terms; ++i) terms[n++] = {-b.terms[i].step, b.terms[i].count};
  auto magnitude = [](__int128 x) { return x < 0 ? -x : x; };
  for (int i = 1; i < n; ++i)  // largest step first (insertion sort: at most ten terms)
    for (int j = i; j > 0 && magnitude(terms[j].step) > magnitude(terms[j - 1].step); --j)
      std::swap(terms[j], terms[j - 1]);
  __int128 low[kMax + 1] = {}, high[kMax + 1] = {};  // the sums that the terms from i on can reach
  for (int i = n - 1; i >= 0; --i) {
    const __int128 reach = terms[i].step * (terms[i].count - 1);
    low[i] = low[i + 1] + (reach < 0 ? reach : 0);
    high[i] = high[i + 1] + (reach > 0 ? reach : 0);
  }
  auto floor_div = [](__int128 x, __int128 y) {  // y > 0
    const __int128 q = x / y;
    return (x % y != 0 && x < 0) ? q - 1 : q;
  };
  constexpr int64_t kMaxNodes = 1 << 16;
  int64_t nodes = 0;
  // Can the terms from i on sum to rest?
  std::function<bool(int, __int128)> can_sum = [&](int i, __int128 rest) -> bool {
    if (++nodes > kMaxNodes || rest < low[i] || rest > high[i]) return false;
    if (i == n) return rest == 0;
    const __int128 s = terms[i].step, m = magnitude(s);
    // c with rest - s * c within [low[i + 1], high[i + 1]]
    const __int128 below = s > 0 ? rest - high[i + 1] : low[i + 1] - rest;
    const __int128 above = s > 0 ? rest - low[i + 1] : high[i + 1] - rest;
    const __int128 c_first = std::max<__int128>(0, -floor_div(-below, m));
    const __int128 c_last = std::min<__int128>(terms[i].count - 1, floor_div(above, m));
    for (__int128 c = c_first; c <= c_last; ++c)
      if (can_sum(i + 1, rest - s * c)) return true;
    return false;
  };
  // a's byte at a.base + sum equals b's at b.base + sum': all the terms (b's negated) sum to b.base - a.base.
  return can_sum(0, b.base - a.base);
}

// An output must not share memory with another output, an input or the workspace: the kernels read their inputs
// while they write, in no set order. Inputs may alias each other (q = k = v, for self-attention).
Status check_disjoint(const char* name, const ByteView& out,
                      std::initializer_list<std::pair<const char*, ByteView>> others) {
  for (const auto& [other_name, other] : others)
    if (views_overlap(out, other))
      return invalid_argument(std::string(name) + ": shares memory with " + other_name +
                              " (an output may overlap neither another output nor an input)");
  return {};
}

Status check_same(const char* name, const Tensor& t, const Tensor& ref, const char* ref_name) {
  if (t.dtype != ref.dtype)
    return invalid_argument(std::string(name) + ": dtype " + dtype_name(t.dtype) + " differs from " + ref_name +
                            "'s " + dtype_name(ref.dtype));
  if (t.device != ref.device || t.device_index != ref.device_index)
    return invalid_argument(std::string(name) + ": on a different device than " + ref_name);
  return {};
}

Status check_shape(const char* name, const Tensor& t, std::initializer_list<int64_t> expected, const char* dims) {
  int d = 0;
  for (int64_t e : expected) {
    if (t.shape[d] != e) {
      std::string want = "(";
      int i = 0;
      for (int64_t x : expected) want += (i++ ? ", " : "") + std::to_string(x);
      return invalid_argument(std::string(name) + ": shape " + shape_string(t) + ", expected " + want + ") " + dims);
    }
    ++d;
  }
  return {};
}

#define FT_TRY(expr)                 \
  do {                               \
    Status s_ = (expr);              \
    if (!s_.ok()) return s_;         \
  } while (0)

constexpr const char* kBSHD = "(batch, seqlen, heads, head_dim)";
constexpr const char* kBHS = "(batch, heads_q, seqlen_q)";

// Shared by forward and backward: q/k/v shapes, the mask and the scale.
Status resolve_problem(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, Problem* p) {
  FT_TRY(check_view("q", q, 4, kBSHD));
  FT_TRY(check_view("k", k, 4, kBSHD));
  FT_TRY(check_view("v", v, 4, kBSHD));
  FT_TRY(check_same("k", k, q, "q"));
  FT_TRY(check_same("v", v, q, "q"));
  p->batch = q.shape[0];
  p->seqlen_q = q.shape[1];
  p->heads_q = q.shape[2];
  p->head_dim = q.shape[3];
  p->seqlen_k = k.shape[1];
  p->heads_kv = k.shape[2];
  p->head_dim_v = v.shape[3];
  p->dtype = q.dtype;
  if (k.shape[0] != p->batch || v.shape[0] != p->batch)
    return invalid_argument("k, v: batch " + std::to_string(k.shape[0]) + ", " + std::to_string(v.shape[0]) +
                            " must equal q's batch " + std::to_string(p->batch));
  if (v.shape[1] != p->seqlen_k)
    return invalid_argument("v: seqlen " + std::to_string(v.shape[1]) + " must equal k's seqlen " +
                            std::to_string(p->seqlen_k));
  if (v.shape[2] != p->heads_kv)
    return invalid_argument("v: heads " + std::to_string(v.shape[2]) + " must equal k's heads " +
                            std::to_string(p->heads_kv));
  if (k.shape[3] != p->head_dim)
    return invalid_argument("k: head_dim " + std::to_string(k.shape[3]) + " must equal q's head_dim " +
                            std::to_string(p->head_dim));
  if (p->heads_q < 1 || p->heads_kv < 1)
    return invalid_argument("q, k: head counts must be at least 1, got heads_q " + std::to_string(p->heads_q) +
                            ", heads_kv " + std::to_string(p->heads_kv));
  if (p->heads_q % p->heads_kv != 0)
    return invalid_argument("q, k: heads_q (" + std::to_string(p->heads_q) + ") must be a multiple of heads_kv (" +
                            std::to_string(p->heads_kv) + ") for GQA/MQA");
  if (p->head_dim < 1 || p->head_dim_v < 1)
    return invalid_argument("q, v: head dims must be at least 1, got head_dim " + std::to_string(p->head_dim) +
                            ", head_dim_v " + std::to_string(p->head_dim_v));
  if (std::isnan(o.softmax_scale)) {
    p->scale = 1.0f / std::sqrt(static_cast<float>(p->head_dim));
  } else if (!std::isfinite(o.softmax_scale)) {
    return invalid_argument("softmax_scale: must be finite (or NaN for 1/sqrt(head_dim))");
  } else {
    p->scale = o.softmax_scale;
  }
  if (!(o.softcap >= 0.0f) || !std::isfinite(o.softcap))
    return invalid_argument("softcap: must be finite and >= 0 (0 turns it off), got " + std::to_string(o.softcap));
  p->softcap = o.softcap;
  // Windows wider than both sequences are unbounded in effect; clamping keeps index arithmetic in range.
  int64_t widest;  // saturates: an empty batch may carry any two seqlens
  if (__builtin_add_overflow(p->seqlen_q, p->seqlen_k, &widest)) widest = INT64_MAX;
  auto clamp_bound = [&](int64_t w) { return w < 0 ? int64_t{-1} : std::min(w, widest); };
  p->keys.seqlen_q = p->seqlen_q;
  p->keys.seqlen_k = p->seqlen_k;
  p->keys.offset = p->seqlen_k - p->seqlen_q;
  p->keys.left = clamp_bound(o.window_left);
  p->keys.right = clamp_bound(o.window_right);
  if (o.causal) p->keys.right = p->keys.right < 0 ? 0 : std::min<int64_t>(p->keys.right, 0);
  return {};
}

Status check_lse(const char* name, const Tensor& lse, const Tensor& q, const Problem& p) {
  FT_TRY(check_view(name, lse, 3, kBHS));
  if (lse.dtype != DType::kFloat32)
    return invalid_argument(std::string(name) + ": dtype must be float32, got " + dtype_name(lse.dtype));
  if (lse.device != q.device || lse.device_index != q.device_index)
    return invalid_argument(std::string(name) + ": on a different device than q");
  return check_shape(name, lse, {p.batch, p.heads_q, p.seqlen_q}, kBHS);
}

}  // namespace

Status validate_forward(const ForwardParams& params, Problem* p) {
  *p = Problem{};
  FT_TRY(resolve_problem(params.q, params.k, params.v, params.options, p));
  FT_TRY(check_view("out", params.out, 4, kBSHD));
  FT_TRY(check_same("out", params.out, params.q, "q"));
  FT_TRY(check_shape("out", params.out, {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v},
                     "(batch, seqlen_q, heads_q, head_dim_v)"));
  FT_TRY(check_no_self_overlap("out", params.out));
  const ByteView q = byte_view(params.q), k = byte_view(params.k), v = byte_view(params.v),
                 out = byte_view(params.out);
  FT_TRY(check_disjoint("out", out, {{"q", q}, {"k", k}, {"v", v}}));
  p->with_lse = params.lse.data != nullptr;
  if (p->with_lse) {
    FT_TRY(check_lse("lse", params.lse, params.q, *p));
    FT_TRY(check_no_self_overlap("lse", params.lse));
    FT_TRY(check_disjoint("lse", byte_view(params.lse), {{"q", q}, {"k", k}, {"v", v}, {"out", out}}));
  }
  if (params.num_threads < 0) return invalid_argument("num_threads: must be >= 0 (0 uses every core)");
  return {};
}

Status validate_backward(const BackwardParams& params, Problem* p) {
  *p = Problem{};
  FT_TRY(resolve_problem(params.q, params.k, params.v, params.options, p));
  const char* out_dims = "(batch, seqlen_q, heads_q, head_dim_v)";
  FT_TRY(check_view("out", params.out, 4, kBSHD));
  FT_TRY(check_same("out", params.out, params.q, "q"));
  FT_TRY(check_shape("out", params.out, {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v}, out_dims));
  FT_TRY(check_view("dout", params.dout, 4, kBSHD));
  FT_TRY(check_same("dout", params.dout, params.q, "q"));
  FT_TRY(check_shape("dout", params.dout, {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v}, out_dims));
  if (params.lse.data == nullptr && p->batch * p->heads_q * p->seqlen_q > 0)
    return invalid_argument("lse: the backward needs the forward's log-sum-exp (batch, heads_q, seqlen_q)");
  FT_TRY(check_lse("lse", params.lse, params.q, *p));
  struct Grad { const char* name; const Tensor& t; const Tensor& like; const char* like_name; };
  for (const Grad& g : {Grad{"dq", params.dq, params.q, "q"}, Grad{"dk", params.dk, params.k, "k"},
                        Grad{"dv", params.dv, params.v, "v"}}) {
    FT_TRY(check_view(g.name, g.t, 4, kBSHD));
    FT_TRY(check_same(g.name, g.t, params.q, "q"));
    FT_TRY(check_shape(g.name, g.t, {g.like.shape[0], g.like.shape[1], g.like.shape[2], g.like.shape[3]},
                       (std::string("(same as ") + g.like_name + ")").c_str()));
    FT_TRY(check_no_self_overlap(g.name, g.t));
  }
  const ByteView workspace = byte_range(params.workspace, params.workspace_size);
  const ByteView q = byte_view(params.q), k = byte_view(params.k), v = byte_view(params.v),
                 out = byte_view(params.out), lse = byte_view(params.lse), dout = byte_view(params.dout),
                 dq = byte_view(params.dq), dk = byte_view(params.dk), dv = byte_view(params.dv);
  const std::initializer_list<std::pair<const char*, ByteView>> inputs = {
      {"q", q}, {"k", k}, {"v", v}, {"out", out}, {"lse", lse}, {"dout", dout}, {"the workspace", workspace}};
  FT_TRY(check_disjoint("dq", dq, inputs));
  FT_TRY(check_disjoint("dk", dk, inputs));
  FT_TRY(check_disjoint("dv", dv, inputs));
  FT_TRY(check_disjoint("dk", dk, {{"dq", dq}}));
  FT_TRY(check_disjoint("dv", dv, {{"dq", dq}, {"dk", dk}}));
  if (params.num_threads < 0) return invalid_argument("num_threads: must be >= 0 (0 uses every core)");
  return {};
}

}  // namespace flashtile
