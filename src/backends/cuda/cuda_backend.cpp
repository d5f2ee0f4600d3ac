// Host side of the CUDA backends: device checks and kernel selection. Kernels live under sm80/ and sm90/.
#include "backends/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "backends/cuda/bwd_kernel_params.hpp"
#include "backends/cuda/sm80/dq_accum.hpp"
#include "backends/cuda/sm80/fwd_launch.hpp"
#include "backends/cuda/sm90/bwd_launch.hpp"
#include "backends/cuda/sm90/fwd_launch.hpp"

namespace flashtile::cuda {

namespace {

struct Named {
  const char* name;
  const Tensor* tensor;
};

Status device_error(const std::string& what, cudaError_t err) {
  return {StatusCode::kDeviceError, what + ": " + cudaGetErrorString(err)};
}

// Every non-empty tensor must be memory the given device can address: device memory of that device, or
// managed memory. A host pointer labelled CUDA is refused here instead of faulting inside a kernel.
Status check_device_pointers(const std::vector<Named>& tensors, int device) {
  for (const Named& n : tensors) {
    if (n.tensor->data == nullptr) continue;
    cudaPointerAttributes attr{};
    cudaError_t err = cudaPointerGetAttributes(&attr, n.tensor->data);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return invalid_argument(std::string(n.name) + ": pointer is not known to CUDA (" + cudaGetErrorString(err) + ")");
    }
    if (attr.type == cudaMemoryTypeManaged) continue;
    if (attr.type != cudaMemoryTypeDevice)
      return invalid_argument(std::string(n.name) + ": labelled as on CUDA device " + std::to_string(device) +
                              " but the pointer is host memory");
    if (attr.device != device)
      return invalid_argument(std::string(n.name) + ": labelled as on CUDA device " + std::to_string(device) +
                              " but the memory belongs to device " + std::to_string(attr.device));
  }
  return {};
}

// Makes `device` current for the lifetime of the guard and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// What selection needs to know of a device, read once per device: cudaGetDeviceProperties costs far more
// than a short kernel, so it must not run on every call.
struct DeviceInfo {
  int major = 0, minor = 0;
  int smem_optin = 0;  // bytes of shared memory a block may opt in to (FLASHTILE_CUDA_SMEM_LIMIT may lower it)
  std::string name;
};

// FLASHTILE_CUDA_SMEM_LIMIT=<bytes> makes flashtile plan for less shared memory per block than the device offers,
// as a smaller GPU would: one GPU can then run, and test, the tile rows chosen for another (the backward's 99 KB
// rows on an H200: scripts/gpu_round.sh, stage smallsmem). Unset, empty or not a positive number: no limit.
int smem_limit(int device_optin) {
  const char* env = std::getenv("FLASHTILE_CUDA_SMEM_LIMIT");
  if (env == nullptr) return device_optin;
  char* end = nullptr;
  const long limit = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || limit <= 0) return device_optin;
  return static_cast<int>(std::min<long>(limit, device_optin));
}

Status device_info(int device, const DeviceInfo** info) {
  static std::mutex mutex;
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it == cache.end()) {
    cudaDeviceProp prop{};
    if (cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess)
      return device_error("cudaGetDeviceProperties", err);
    it = cache.emplace(device, DeviceInfo{prop.major, prop.minor,
                                          smem_limit(static_cast<int>(prop.sharedMemPerBlockOptin)), prop.name})
             .first;
  }
  *info = &it->second;
  return {};
}

// The device checks every CUDA call needs, whichever kernel runs it.
Status check_device(const std::vector<Named>& tensors, int device, const DeviceInfo** prop) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    return device_error("no usable CUDA device", err);
  }
  if (device < 0 || device >= count)
    return invalid_argument("q: CUDA device index " + std::to_string(device) + " does not exist (" +
                            std::to_string(count) + " devices)");
  if (Status s = device_info(device, prop); !s.ok()) return s;
  return check_device_pointers(tensors, device);
}

// The kernels load rows with 16-byte copies: every row must start on a 16-byte boundary.
Status check_alignment(const std::vector<Named>& tensors) {
  for (const Named& n : tensors) {
    const Tensor& t = *n.tensor;
    if (t.data == nullptr || t.ndim != 4) continue;
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
      return invalid_argument(std::string(n.name) + ": the CUDA kernels need 16-byte aligned data pointers");
    for (int d = 0; d < 3; ++d)
      if (t.shape[d] > 1 && t.stride[d] % 8 != 0)
        return invalid_argument(std::string(n.name) + ": the CUDA kernels need strides that are multiples of 8 "
                                "elements (16 bytes); stride[" + std::to_string(d) + "] is " +
                                std::to_string(t.stride[d]));
  }
  return {};
}

constexpr int64_t kMaxSeqlen = int64_t{1} << 29;  // keeps the kernels' int row/key arithmetic in range

// What every CUDA kernel (sm80, sm90) needs of a call, forward or backward.
Status check_cuda_problem(const Problem& p, const DeviceInfo& prop, const char* pass) {
  if (prop.major < 8)
    return unsupported("the CUDA kernels need compute capability 8.0 or newer; device " + prop.name + " is " +
                       std::to_string(prop.major) + "." + std::to_string(prop.minor));
  if (p.dtype != DType::kFloat16 && p.dtype != DType::kBFloat16)
    return unsupported(std::string("dtype ") + dtype_name(p.dtype) + ": the CUDA kernels take float16 or bfloat16");
  if (p.head_dim_v != p.head_dim)
    return unsupported("head_dim_v " + std::to_string(p.head_dim_v) + " != head_dim " + std::to_string(p.head_dim) +
                       ": the CUDA " + pass + " needs equal head dims");
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen)
    return unsupported(std::string("seqlen: the CUDA ") + pass + " supports sequences up to 2^29");
  // The kernels take each row's max over the unscaled scores and fold the scale into the exponent, which holds
  // for a scale >= 0 only (below 0 the max would have to be a min, and the mask's -inf would turn to +inf). A
  // softcap applies the scale before the max, so it takes any scale.
  if (p.scale < 0 && p.softcap == 0)
    return unsupported("softmax_scale " + std::to_string(p.scale) + ": the CUDA " + pass +
                       " needs a scale >= 0 without a softcap (the same attention: scale " +
                       std::to_string(-p.scale) + " with q negated; or pass CPU tensors)");
  if (p.head_dim % 8 != 0 || p.head_dim > 256)
    return unsupported("head_dim " + std::to_string(p.head_dim) + ": the CUDA " + pass +
                       " needs a multiple of 8, at most 256 (other head dims: pass CPU tensors)");
  return {};
}

Status check_smem(int needed, int head_dim, const DeviceInfo& prop) {
  if (needed > prop.smem_optin)
    return unsupported("head_dim " + std::to_string(head_dim) + " needs " + std::to_string(needed / 1024) +
                       " KB of shared memory per block; " + prop.name + " offers " +
                       std::to_string(prop.smem_optin / 1024) + " KB");
  return {};
}

// The one place that decides whether the sm80 forward runs a call, and with which instantiation.
Status select_sm80_forward(const Problem& p, const DeviceInfo& prop, sm80::FwdKernelInfo* kernel) {
  if (Status s = check_cuda_problem(p, prop, "forward"); !s.ok()) return s;
  const bool unmasked = p.keys.left < 0 && p.keys.right < 0;
  *kernel = sm80::find_fwd(p.dtype, static_cast<int>(p.head_dim), prop.major, prop.smem_optin,
                           unmasked ? static_cast<int>(p.seqlen_k) : 0);
  if (kernel->launch == nullptr)
    return unsupported("head_dim " + std::to_string(p.head_dim) + " " + dtype_name(p.dtype) +
                       ": this build has no kernel for it (see FLASHTILE_CUDA_HEAD_DIMS / FLASHTILE_CUDA_DTYPES)");
  return check_smem(kernel->smem_bytes, kernel->head_dim, prop);
}

// Whether TMA descriptors can describe the tensors the sm90 kernels copy by TMA (q, k, v and out forward; q, k,
// v, dout, dk and dv backward): a descriptor's strides are positive and below 2^40 bytes, while SPEC.md allows any
// stride (a negative one walks a sequence backwards, a zero one repeats a row).
Status check_tma_strides(const std::vector<Named>& tensors) {
  for (const Named& n : tensors) {
    const Tensor& t = *n.tensor;
    const int64_t max_stride = (int64_t{1} << 40) / static_cast<int64_t>(dtype_size(t.dtype));  // elements
    for (int d = 0; d < t.ndim - 1; ++d) {
      if (t.shape[d] > 1 && (t.stride[d] <= 0 || t.stride[d] >= max_stride))
        return unsupported("backend cuda-sm90: its TMA copies need strides from 1 element to 2^40 bytes; " +
                           std::string(n.name) + ".stride[" + std::to_string(d) + "] is " +
                           std::to_string(t.stride[d]) + " elements (cuda-sm80 takes any stride)");
    }
  }
  return {};
}

// The sm90 kernels (both directions) run on compute capability 9.0 only.
Status check_hopper(const DeviceInfo& prop) {
  if (prop.major == 9) return {};
  return unsupported("backend cuda-sm90: the Hopper kernels need compute capability 9.0 (H100, H200); device " +
                     prop.name + " is " + std::to_string(prop.major) + "." + std::to_string(prop.minor));
}

// The sm90 forward (wgmma, TMA): Hopper devices only, and only in builds with FLASHTILE_CUDA_SM90.
Status select_sm90_forward(const ForwardParams& params, const Problem& p, const DeviceInfo& prop,
                           FwdKernelInfo* kernel) {
  if (Status s = check_cuda_problem(p, prop, "forward"); !s.ok()) return s;
  if (Status s = check_hopper(prop); !s.ok()) return s;
  if (Status s = check_tma_strides({{"q", &params.q}, {"k", &params.k}, {"v", &params.v}, {"out", &params.out}});
      !s.ok())
    return s;
  *kernel = sm90::find_fwd(p.dtype, static_cast<int>(p.head_dim));
  if (kernel->launch == nullptr)
    return unsupported("head_dim " + std::to_string(p.head_dim) + " " + dtype_name(p.dtype) +
                       ": this build has no sm90 kernel for it (configure with -DFLASHTILE_CUDA_SM90=ON and 90a in "
                       "FLASHTILE_CUDA_ARCHS; see also FLASHTILE_CUDA_HEAD_DIMS / FLASHTILE_CUDA_DTYPES)");
  return check_smem(kernel->smem_bytes, kernel->head_dim, prop);
}

// FLASHTILE_CUDA_FORWARD=sm80 (FLASHTILE_CUDA_BACKWARD_KERNELS=sm80 for the backward; not FLASHTILE_CUDA_BACKWARD,
// the CMake option) makes auto take the sm80 kernels on a Hopper GPU too: to compare the two families through an
// API that has no backend argument (flash_attn_func), or to rule the sm90 kernels out when chasing a problem.
// Unset, empty or sm90: auto's own choice. Any other value is refused on every GPU, naming the variable, rather
// than ignored.
Status auto_may_take_sm90(const char* variable, const char* pass, bool* may) {
  const char* env = std::getenv(variable);
  const std::string value = env == nullptr ? "" : env;
  if (value.empty() || value == "sm90") {
    *may = true;
  } else if (value == "sm80") {
    *may = false;
  } else {
    return invalid_argument(std::string(variable) + "=" + value + ": expected sm80 or sm90 (or unset), the kernel " +
                            "family auto takes for the " + pass + " on a Hopper GPU");
  }
  return {};
}

// The kernel for a backend: cuda-sm90 and cuda-sm80 as asked; auto takes the sm90 kernel on a Hopper device when
// the build has one for the call (and FLASHTILE_CUDA_FORWARD allows it), the sm80 kernel otherwise.
Status select_forward_for(Backend backend, const ForwardParams& params, const Problem& p, const DeviceInfo& prop,
                          Backend* chosen, FwdKernelInfo* kernel) {
  bool auto_sm90 = false;
  if (backend == Backend::kAuto)
    if (Status s = auto_may_take_sm90("FLASHTILE_CUDA_FORWARD", "forward", &auto_sm90); !s.ok()) return s;
  if (backend == Backend::kCudaSm90 || (auto_sm90 && prop.major == 9)) {
    const Status s = select_sm90_forward(params, p, prop, kernel);
    if (s.ok() || backend == Backend::kCudaSm90) {
      *chosen = Backend::kCudaSm90;
      return s;
    }
  }
  *chosen = Backend::kCudaSm80;
  return select_sm80_forward(p, prop, kernel);
}

// The same for the backward.
Status select_sm80_backward(const Problem& p, const DeviceInfo& prop, sm80::BwdKernelInfo* kernel) {
  if (Status s = check_cuda_problem(p, prop, "backward"); !s.ok()) return s;
  *kernel = sm80::find_bwd(p.dtype, static_cast<int>(p.head_dim));
  if (kernel->launch == nullptr)
    return unsupported("head_dim " + std::to_string(p.head_dim) + " " + dtype_name(p.dtype) +
                       ": this build has no CUDA backward kernel for it (it was configured with "
                       "-DFLASHTILE_CUDA_BACKWARD=OFF, or FLASHTILE_CUDA_HEAD_DIMS / FLASHTILE_CUDA_DTYPES leave it out)");
  return check_smem(kernel->smem_bytes, kernel->head_dim, prop);
}

// The sm90 backward (wgmma, TMA; sm90/bwd_kernel.cuh): Hopper devices, builds with FLASHTILE_CUDA_SM90 and the
// call's head dim; the sm80 kernels take the rest under auto.
Status select_sm90_backward(const BackwardParams& params, const Problem& p, const DeviceInfo& prop,
                            sm80::BwdKernelInfo* kernel) {
  if (Status s = select_sm80_backward(p, prop, kernel); !s.ok()) return s;  // the head dim it pads to
  if (Status s = check_hopper(prop); !s.ok()) return s;
  if (Status s = check_tma_strides({{"q", &params.q}, {"k", &params.k}, {"v", &params.v}, {"dout", &params.dout},
                                    {"dk", &params.dk}, {"dv", &params.dv}});
      !s.ok())
    return s;
  *kernel = sm90::find_bwd(p.dtype, kernel->head_dim);
  if (kernel->launch == nullptr)
    return unsupported("head_dim " + std::to_string(p.head_dim) + " " + dtype_name(p.dtype) +
                       ": this build has no sm90 backward for it (builds configured with -DFLASHTILE_CUDA_SM90=ON "
                       "and 90a in FLASHTILE_CUDA_ARCHS have one for each head dim in FLASHTILE_CUDA_HEAD_DIMS)");
  return check_smem(kernel->smem_bytes, kernel->head_dim, prop);
}

// The backward's kernels for a backend: cuda-sm90 and cuda-sm80 as asked; auto takes the sm90 kernels on a Hopper
// device when the build has them for the call (and FLASHTILE_CUDA_BACKWARD_KERNELS allows it), the sm80 kernels
// otherwise.
Status select_backward_for(Backend backend, const BackwardParams& params, const Problem& p, const DeviceInfo& prop,
                           Backend* chosen, sm80::BwdKernelInfo* kernel) {
  bool auto_sm90 = false;
  if (backend == Backend::kAuto)
    if (Status s = auto_may_take_sm90("FLASHTILE_CUDA_BACKWARD_KERNELS", "backward", &auto_sm90); !s.ok()) return s;
  if (backend == Backend::kCudaSm90 || (auto_sm90 && prop.major == 9)) {
    const Status s = select_sm90_backward(params, p, prop, kernel);
    if (s.ok() || backend == Backend::kCudaSm90) {
      *chosen = Backend::kCudaSm90;
      return s;
    }
  }
  *chosen = Backend::kCudaSm80;
  return select_sm80_backward(p, prop, kernel);
}

Status select_forward_kernel(const ForwardParams& params, const Problem& p, Backend* chosen,
                             FwdKernelInfo* kernel) {
  const std::vector<Named> tensors{{"q", &params.q}, {"k", &params.k}, {"v", &params.v}, {"out", &params.out},
                                   {"lse", &params.lse}};
  const DeviceInfo* prop = nullptr;
  if (Status s = check_device(tensors, params.q.device_index, &prop); !s.ok()) return s;
  if (Status s = check_alignment(tensors); !s.ok()) return s;
  return select_forward_for(params.backend, params, p, *prop, chosen, kernel);
}

}  // namespace

bool compiled() { return true; }

Status select(const ForwardParams& params, const Problem& p, bool, Backend* chosen) {
  FwdKernelInfo kernel;
  return select_forward_kernel(params, p, chosen, &kernel);
}

Status select_backward_kernel(const BackwardParams& params, const Problem& p, Backend* chosen,
                              sm80::BwdKernelInfo* kernel) {
  const std::vector<Named> tensors{{"q", &params.q},       {"k", &params.k},   {"v", &params.v},
                                   {"out", &params.out},   {"lse", &params.lse}, {"dout", &params.dout},
                                   {"dq", &params.dq},     {"dk", &params.dk}, {"dv", &params.dv}};
  const DeviceInfo* prop = nullptr;
  if (Status s = check_device(tensors, params.q.device_index, &prop); !s.ok()) return s;
  if (Status s = check_alignment(tensors); !s.ok()) return s;
  return select_backward_for(params.backend, params, p, *prop, chosen, kernel);
}

Status select(const BackwardParams& params, const Problem& p, bool, Backend* chosen) {
  sm80::BwdKernelInfo kernel;
  return select_backward_kernel(params, p, chosen, &kernel);
}

FwdKernelParams make_fwd_params(const ForwardParams& params, const Problem& p, int block_m) {
  FwdKernelParams k{};
  k.q = params.q.data, k.k = params.k.data, k.v = params.v.data, k.o = params.out.data;
  k.lse = p.with_lse ? static_cast<float*>(params.lse.data) : nullptr;
  for (int d = 0; d < 3; ++d) {
    k.q_stride[d] = params.q.stride[d], k.k_stride[d] = params.k.stride[d];
    k.v_stride[d] = params.v.stride[d], k.o_stride[d] = params.out.stride[d];
    k.lse_stride[d] = p.with_lse ? params.lse.stride[d] : 0;
  }
  k.batch = static_cast<int>(p.batch), k.heads_q = static_cast<int>(p.heads_q), k.group = static_cast<int>(p.group());
  k.seqlen_q = static_cast<int>(p.seqlen_q), k.seqlen_k = static_cast<int>(p.seqlen_k);
  k.head_dim = static_cast<int>(p.head_dim);
  set_key_window(k, p.keys);
  constexpr float kLog2e = 1.4426950408889634f;
  k.softcap = p.softcap;
  // A scale of 0 (every visible key weighs the same) becomes the smallest normal float: the kernels' exponent
  // scale must be > 0 (a masked score is -inf, and -inf * 0 is NaN), and at 2^-126 every visible score still
  // rounds to exp2(0) = 1. The gradients' scale (BwdKernelParams::scale) stays 0.
  k.scale_log2 = p.softcap > 0 ? kLog2e : std::max(p.scale, std::numeric_limits<float>::min()) * kLog2e;
  k.scale_over_cap = p.softcap > 0 ? p.scale / p.softcap : 0.0f;
  set_query_blocks(k, static_cast<int>((p.seqlen_q + block_m - 1) / block_m));
  return k;
}

// forward() and backward() run only after select() accepted the call (dispatch.cpp), so they look up the kernel
// without repeating the pointer and alignment checks (a few CUDA calls each) on every launch.
Status forward(const ForwardParams& params, const Problem& p, Backend backend) {
  FwdKernelInfo kernel;
  Backend chosen = backend;
  const DeviceInfo* prop = nullptr;
  if (Status s = device_info(params.q.device_index, &prop); !s.ok()) return s;
  if (Status s = select_forward_for(backend, params, p, *prop, &chosen, &kernel); !s.ok()) return s;
  if (p.batch == 0 || p.seqlen_q == 0) return {};
  DeviceGuard guard(params.q.device_index);
  const FwdKernelParams k = make_fwd_params(params, p, kernel.block_m);
  if (cudaError_t err = kernel.launch(k, static_cast<cudaStream_t>(params.stream)); err != cudaSuccess)
    return device_error(chosen == Backend::kCudaSm90 ? "sm90 forward launch" : "sm80 forward launch", err);
  return {};
}

BwdKernelParams make_bwd_params(const BackwardParams& params, const Problem& problem, int block_m, int smem_limit,
                                float* delta, float* dq_accum, int* dq_turns) {
  ForwardParams f;
  f.q = params.q, f.k = params.k, f.v = params.v, f.out = params.out, f.lse = params.lse;
  Problem with_lse = problem;
  with_lse.with_lse = true;  // the backward always reads the LSE
  BwdKernelParams k{};
  k.fwd = make_fwd_params(f, with_lse, block_m);
  k.dout = params.dout.data, k.dq = params.dq.data, k.dk = params.dk.data, k.dv = params.dv.data;
  for (int d = 0; d < 3; ++d) {
    k.dout_stride[d] = params.dout.stride[d], k.dq_stride[d] = params.dq.stride[d];
    k.dk_stride[d] = params.dk.stride[d], k.dv_stride[d] = params.dv.stride[d];
  }
  k.heads_kv = static_cast<int>(problem.heads_kv);
  k.scale = problem.scale;
  k.delta = delta;
  k.dq_accum = dq_accum;
  k.dq_turns = dq_turns;
  k.smem_limit = smem_limit;
  return k;
}

// The workspace: the per-row statistics, the fp32 dQ accumulator, and in the deterministic mode the sm90 kernels'
// turn counts (one int per 64 rows of a head: sm90::bwd_turns). The statistics are D = rowsum(dO * O), one float
// per query row, for the sm80 kernels; D and the LSE in log2 units, each padded to a multiple of 128 rows a head,
// and a 1 KB slot for a tile counter behind them, for the sm90 ones (sm90::bwd_stats_floats, a multiple of 256
// floats). The workspace has room for the larger whichever family runs, so a size asked for one backend fits
// another (the accumulator's rows for the sm80 fragment order too: dq_accum_fragment_rows, and the accumulator
// although the sm80 kernels' deterministic mode has none); and the accumulator stays 16-byte aligned (given an
// aligned workspace): the kernels add into it 8 and 16 bytes at a time.
namespace {
constexpr int64_t kWorkspaceAlignment = 16;
int64_t stats_floats(const Problem& p) { return sm90::bwd_stats_floats(p.batch, p.heads_q, p.seqlen_q); }
int64_t accum_floats(const Problem& p) {
  return p.batch * p.heads_q * sm80::dq_accum_fragment_rows(p.seqlen_q) * p.head_dim;
}
}  // namespace

size_t backward_workspace_size(const Problem& p, Backend, bool deterministic) {
  const int64_t turns = deterministic ? sm90::bwd_turns(p.batch, p.heads_q, p.seqlen_q) : 0;
  static_assert(sizeof(int) == sizeof(float), "the turn counts take a float's room each");
  return static_cast<size_t>(stats_floats(p) + accum_floats(p) + turns) * sizeof(float);
}

Status backward(const BackwardParams& params, const Problem& p, Backend backend) {
  sm80::BwdKernelInfo kernel;
  Backend chosen = backend;
  const DeviceInfo* prop = nullptr;
  if (Status s = device_info(params.q.device_index, &prop); !s.ok()) return s;
  if (Status s = select_backward_for(backend, params, p, *prop, &chosen, &kernel); !s.ok()) return s;
  if (p.batch == 0) return {};
  // With no query rows or no keys there is nothing to load, and a TMA descriptor cannot have an extent of 0:
  // the sm80 kernels write the zeros (dK and dV, or dQ) then.
  const bool sm90_kernel = chosen == Backend::kCudaSm90 && p.seqlen_q > 0 && p.seqlen_k > 0;
  if (chosen == Backend::kCudaSm90 && !sm90_kernel)
    if (Status s = select_sm80_backward(p, *prop, &kernel); !s.ok()) return s;
  const size_t need = backward_workspace_size(p, chosen, params.deterministic);
  if (params.workspace != nullptr && params.workspace_size < need)
    return invalid_argument("workspace: " + std::to_string(params.workspace_size) + " bytes given, " +
                            std::to_string(need) + " needed (backward_workspace_size)");
  if (reinterpret_cast<uintptr_t>(params.workspace) % kWorkspaceAlignment != 0)
    return invalid_argument("workspace: the address must be a multiple of " + std::to_string(kWorkspaceAlignment) +
                            " bytes (cudaMalloc and PyTorch's allocator give 256)");
  DeviceGuard guard(params.q.device_index);
  const cudaStream_t stream = static_cast<cudaStream_t>(params.stream);
  float* delta = static_cast<float*>(params.workspace);
  if (delta == nullptr && need > 0)
    if (cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&delta), need, stream); err != cudaSuccess)
      return {StatusCode::kOutOfMemory, std::string("backward workspace: ") + cudaGetErrorString(err)};
  // Deterministic: the sm90 kernels add dQ in key block order (the turn counts), the sm80 ones run a dQ kernel
  // that needs no accumulator.
  float* dq_accum = params.deterministic && !sm90_kernel ? nullptr : delta + stats_floats(p);
  int* dq_turns = params.deterministic && sm90_kernel
                      ? reinterpret_cast<int*>(delta + stats_floats(p) + accum_floats(p))
                      : nullptr;
  const cudaError_t err = kernel.launch(
      make_bwd_params(params, p, kernel.block_m, prop->smem_optin, delta, dq_accum, dq_turns), stream);
  if (params.workspace == nullptr && delta != nullptr) cudaFreeAsync(delta, stream);
  if (err != cudaSuccess)
    return device_error(chosen == Backend::kCudaSm90 ? "sm90 backward launch" : "sm80 backward launch", err);
  return {};
}

}  // namespace flashtile::cuda
