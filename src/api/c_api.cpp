// The C ABI over the C++ API. Nothing throws across it: every entry point catches, converts and reports.
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

#include "flashtile/flashtile.h"
#include "flashtile/flashtile.hpp"

namespace flashtile {
namespace {

Tensor to_cpp(const ft_tensor& t) {
  Tensor out;
  out.data = t.data;
  out.dtype = static_cast<DType>(t.dtype);
  out.device = static_cast<Device>(t.device);
  out.device_index = t.device_index;
  out.ndim = t.ndim;
  for (int d = 0; d < 4; ++d) out.shape[d] = t.shape[d], out.stride[d] = t.stride[d];
  return out;
}

AttentionOptions to_cpp(const ft_options& o) {
  AttentionOptions out;
  out.softmax_scale = o.softmax_scale;
  out.causal = o.causal != 0;
  out.window_left = o.window_left;
  out.window_right = o.window_right;
  out.softcap = o.softcap;
  return out;
}

// A caller compiled against an older header passes a smaller struct: read what it has, default the rest.
template <typename T, void (*Init)(T*)>
bool read_versioned(const T* in, T* out) {
  Init(out);
  if (in == nullptr || in->struct_size < offsetof(T, q) || in->struct_size > sizeof(T)) return false;
  std::memcpy(out, in, in->struct_size);
  return true;
}

ft_status report(const Status& s, char* message, size_t size) {
  if (message != nullptr && size > 0) {
    const size_t n = std::min(size - 1, s.message.size());
    std::memcpy(message, s.message.data(), n);
    message[n] = '\0';
  }
  return static_cast<ft_status>(s.code);
}

template <typename Fn>
ft_status guarded(char* message, size_t size, Fn&& fn) {
  try {
    return report(fn(), message, size);
  } catch (const std::bad_alloc&) {
    return report({StatusCode::kOutOfMemory, "out of host memory"}, message, size);
  } catch (const std::exception& e) {
    return report({StatusCode::kInternal, std::string("internal error: ") + e.what()}, message, size);
  } catch (...) {
    return report({StatusCode::kInternal, "internal error"}, message, size);
  }
}

ForwardParams to_cpp(const ft_fwd_params& c) {
  ForwardParams p;
  p.q = to_cpp(c.q), p.k = to_cpp(c.k), p.v = to_cpp(c.v), p.out = to_cpp(c.out), p.lse = to_cpp(c.lse);
  p.options = to_cpp(c.options);
  p.backend = static_cast<Backend>(c.backend);
  p.num_threads = c.num_threads;
  p.stream = c.stream;
  return p;
}

BackwardParams to_cpp(const ft_bwd_params& c) {
  BackwardParams p;
  p.q = to_cpp(c.q), p.k = to_cpp(c.k), p.v = to_cpp(c.v), p.out = to_cpp(c.out), p.lse = to_cpp(c.lse);
  p.dout = to_cpp(c.dout), p.dq = to_cpp(c.dq), p.dk = to_cpp(c.dk), p.dv = to_cpp(c.dv);
  p.options = to_cpp(c.options);
  p.deterministic = c.deterministic != 0;
  p.backend = static_cast<Backend>(c.backend);
  p.num_threads = c.num_threads;
  p.stream = c.stream;
  p.workspace = c.workspace;
  p.workspace_size = c.workspace_size;
  return p;
}

const Status kBadStruct{StatusCode::kInvalidArgument,
                        "params: null, or struct_size not set (call ft_fwd_params_init / ft_bwd_params_init first)"};

}  // namespace
}  // namespace flashtile

using namespace flashtile;

extern "C" {

void ft_fwd_params_init(ft_fwd_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof(*p));
  p->struct_size = sizeof(*p);
  p->options.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  p->options.window_left = p->options.window_right = -1;
}

void ft_bwd_params_init(ft_bwd_params* p) {
  if (p == nullptr) return;
  std::memset(p, 0, sizeof(*p));
  p->struct_size = sizeof(*p);
  p->options.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  p->options.window_left = p->options.window_right = -1;
}

void ft_tensor_contiguous(ft_tensor* t, void* data, ft_dtype dtype, int32_t ndim, const int64_t* shape) {
  if (t == nullptr) return;
  std::memset(t, 0, sizeof(*t));
  t->data = data;
  t->dtype = dtype;
  t->device = FT_CPU;
  t->ndim = ndim < 0 ? 0 : ndim > 4 ? 4 : ndim;
  int64_t stride = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    t->shape[d] = shape ? shape[d] : 0;
    t->stride[d] = stride;
    stride *= t->shape[d] > 0 ? t->shape[d] : 1;
  }
}

ft_status ft_forward(const ft_fwd_params* params, char* message, size_t message_size) {
  return guarded(message, message_size, [&] {
    ft_fwd_params c;
    if (!read_versioned<ft_fwd_params, ft_fwd_params_init>(params, &c)) return kBadStruct;
    return forward(to_cpp(c));
  });
}

ft_status ft_backward(const ft_bwd_params* params, char* message, size_t message_size) {
  return guarded(message, message_size, [&] {
    ft_bwd_params c;
    if (!read_versioned<ft_bwd_params, ft_bwd_params_init>(params, &c)) return kBadStruct;
    return backward(to_cpp(c));
  });
}

ft_status ft_select_forward_backend(const ft_fwd_params* params, ft_backend* chosen, char* message,
                                    size_t message_size) {
  return guarded(message, message_size, [&] {
    ft_fwd_params c;
    if (!read_versioned<ft_fwd_params, ft_fwd_params_init>(params, &c)) return kBadStruct;
    Backend b = Backend::kAuto;
    Status s = select_forward_backend(to_cpp(c), &b);
    if (s.ok() && chosen != nullptr) *chosen = static_cast<ft_backend>(b);
    return s;
  });
}

ft_status ft_backward_workspace_size(const ft_bwd_params* params, size_t* bytes, char* message, size_t message_size) {
  return guarded(message, message_size, [&] {
    ft_bwd_params c;
    if (!read_versioned<ft_bwd_params, ft_bwd_params_init>(params, &c)) return kBadStruct;
    size_t n = 0;
    Status s = backward_workspace_size(to_cpp(c), &n);
    if (s.ok() && bytes != nullptr) *bytes = n;
    return s;
  });
}

const char* ft_backend_name(ft_backend backend) { return backend_name(static_cast<Backend>(backend)); }
const char* ft_version(void) { return version(); }

}  // extern "C"
