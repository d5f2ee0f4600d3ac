// The public entry points and the one selector behind them. Every call goes validate -> select -> run, so
// an unsupported call gets the same answer from select_*_backend() as from forward()/backward().
#include <cmath>
#include <string>

#include "api/validate.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/gemm_bf16.hpp"
#include "backends/cpu/tile_ops.hpp"
#include "backends/cuda/cuda_backend.hpp"

namespace flashtile {

namespace {

// Limits of the CPU backends: the per-thread workspace holds tiles of head_dim columns.
constexpr int64_t kCpuMaxHeadDim = 512;

bool is_cpu_backend(Backend b) {
  return b == Backend::kCpuReference || b == Backend::kCpuFlash2 || b == Backend::kCpuFlash1;
}
bool is_cuda_backend(Backend b) { return b == Backend::kCudaSm80 || b == Backend::kCudaSm90; }

Status check_backend_code(Backend b) {
  if (!is_cpu_backend(b) && !is_cuda_backend(b) && b != Backend::kAuto)
    return invalid_argument("backend: unknown code " + std::to_string(static_cast<int>(b)));
  return {};
}

Status select_cpu(const Problem& p, Backend requested, bool backward, Backend* chosen) {
  if (is_cuda_backend(requested))
    return invalid_argument(std::string("backend ") + backend_name(requested) +
                            " needs tensors on a CUDA device, but q is on the CPU");
  if (p.head_dim > kCpuMaxHeadDim || p.head_dim_v > kCpuMaxHeadDim)
    return unsupported("head_dim " + std::to_string(p.head_dim) + " / head_dim_v " + std::to_string(p.head_dim_v) +
                       ": the CPU backends support head dims up to " + std::to_string(kCpuMaxHeadDim));
  if (backward && requested == Backend::kCpuFlash1)
    return unsupported("backend cpu-flash1: the FlashAttention-1 schedule is forward-only; use cpu-flash2");
  *chosen = requested == Backend::kAuto ? Backend::kCpuFlash2 : requested;
  return {};
}

template <typename Params>
Status select(const Params& params, const Problem& p, bool backward, Backend* chosen) {
  if (Status s = check_backend_code(params.backend); !s.ok()) return s;
  if (params.q.device == Device::kCPU) return select_cpu(p, params.backend, backward, chosen);
  if (is_cpu_backend(params.backend))
    return invalid_argument(std::string("backend ") + backend_name(params.backend) +
                            " runs on the CPU, but q is on CUDA device " + std::to_string(params.q.device_index));
  return cuda::select(params, p, backward, chosen);
}

}  // namespace

Status select_forward_backend(const ForwardParams& params, Backend* chosen) {
  Problem p;
  if (Status s = validate_forward(params, &p); !s.ok()) return s;
  return select(params, p, false, chosen);
}

Status select_backward_backend(const BackwardParams& params, Backend* chosen) {
  Problem p;
  if (Status s = validate_backward(params, &p); !s.ok()) return s;
  return select(params, p, true, chosen);
}

Status forward(const ForwardParams& params) {
  Problem p;
  if (Status s = validate_forward(params, &p); !s.ok()) return s;
  Backend chosen = Backend::kAuto;
  if (Status s = select(params, p, false, &chosen); !s.ok()) return s;
  switch (chosen) {
    case Backend::kCpuReference: return cpu::reference_forward(params, p);
    case Backend::kCpuFlash2: return cpu::flash_forward(params, p, cpu::Schedule::kFlash2);
    case Backend::kCpuFlash1: return cpu::flash_forward(params, p, cpu::Schedule::kFlash1);
    default: return cuda::forward(params, p, chosen);
  }
}

Status backward(const BackwardParams& params) {
  Problem p;
  if (Status s = validate_backward(params, &p); !s.ok()) return s;
  Backend chosen = Backend::kAuto;
  if (Status s = select(params, p, true, &chosen); !s.ok()) return s;
  switch (chosen) {
    case Backend::kCpuReference: return cpu::reference_backward(params, p);
    case Backend::kCpuFlash2: return cpu::flash_backward(params, p);
    default: return cuda::backward(params, p, chosen);
  }
}

Status backward_workspace_size(const BackwardParams& params, size_t* bytes) {
  Problem p;
  if (Status s = validate_backward(params, &p); !s.ok()) return s;
  Backend chosen = Backend::kAuto;
  if (Status s = select(params, p, true, &chosen); !s.ok()) return s;
  *bytes = is_cpu_backend(chosen) ? 0 : cuda::backward_workspace_size(p, chosen, params.deterministic);
  return {};
}

Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device,
                   int32_t device_index) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_index = device_index;
  t.ndim = static_cast<int32_t>(std::min<size_t>(shape.size(), 4));
  int d = 0;
  for (int64_t s : shape) {
    if (d == 4) break;
    t.shape[d++] = s;
  }
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.stride[i] = stride;
    stride *= t.shape[i] > 0 ? t.shape[i] : 1;
  }
  return t;
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kCpuReference: return "cpu-reference";
    case Backend::kCpuFlash2: return "cpu-flash2";
    case Backend::kCpuFlash1: return "cpu-flash1";
    case Backend::kCudaSm80: return "cuda-sm80";
    case Backend::kCudaSm90: return "cuda-sm90";
  }
  return "unknown";
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

size_t dtype_size(DType d) { return d == DType::kFloat32 ? 4 : 2; }

bool cuda_backend_compiled() { return cuda::compiled(); }

const char* version() { return FLASHTILE_VERSION; }

std::string build_info() {
  return std::string("flashtile ") + FLASHTILE_VERSION + "; CPU GEMM: " + cpu::blas_info() +
         "; CPU bf16 products: " + cpu::bf16_kernel_name(cpu::bf16_kernel()) +
         "; CUDA backend: " + (cuda::compiled() ? "built" : "not built");
}

}  // namespace flashtile
