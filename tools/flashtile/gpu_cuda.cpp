// Built when FLASHTILE_ENABLE_CUDA=ON: CUDA-event timing, the GPU's name and L2 size, and the ablation kernels.
#include <cuda_runtime.h>

#include "api/validate.hpp"
#include "backends/cuda/fwd_kernel_params.hpp"
#include "backends/cuda/sm80/fwd_launch.hpp"
#include "gpu.hpp"

namespace flashtile::tool::gpu {

namespace {

Status cuda_error(const std::string& what, cudaError_t err) {
  return {StatusCode::kDeviceError, what + ": " + cudaGetErrorString(err)};
}

// CUDA events, destroyed with the object (a pending event may be destroyed: CUDA frees it once it completes).
class Events {
 public:
  Events() = default;
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  Status create(int count) {
    for (int i = 0; i < count; ++i) {
      cudaEvent_t e;
      if (cudaError_t err = cudaEventCreate(&e); err != cudaSuccess) return cuda_error("cudaEventCreate", err);
      events_.push_back(e);
    }
    return {};
  }
  cudaEvent_t operator[](int i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// The kernel's view of a validated call: a copy of make_fwd_params in src/backends/cuda/cuda_backend.cpp,
// which the library does not export. Keep the two alike until it does.
cuda::FwdKernelParams kernel_params(const ForwardParams& params, const Problem& p, int block_m) {
  cuda::FwdKernelParams k{};
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
  const int64_t unbounded = p.seqlen_q + p.seqlen_k;
  k.key_offset = static_cast<int>(p.keys.offset);
  k.window_left = static_cast<int>(p.keys.left < 0 ? unbounded : p.keys.left);
  k.window_right = static_cast<int>(p.keys.right < 0 ? unbounded : p.keys.right);
  constexpr float kLog2e = 1.4426950408889634f;
  k.softcap = p.softcap;
  k.scale_log2 = p.softcap > 0 ? kLog2e : p.scale * kLog2e;
  k.scale_over_cap = p.softcap > 0 ? p.scale / p.softcap : 0.0f;
  k.m_blocks = static_cast<int>((p.seqlen_q + block_m - 1) / block_m);
  return k;
}

}  // namespace

std::string device_name() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "unknown";
}

int64_t l2_bytes() {
  int bytes = 0;
  return cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, 0) == cudaSuccess ? bytes : 0;
}

Status time_calls(const std::function<Status(int)>& call, int count, std::vector<double>* ms) {
  ms->clear();
  if (count == 0) return {};
  Events events;  // call i runs between events[2i] and events[2i + 1]
  if (Status s = events.create(2 * count); !s.ok()) return s;
  for (int i = 0; i < count; ++i) {
    if (cudaError_t err = cudaEventRecord(events[2 * i], nullptr); err != cudaSuccess)
      return cuda_error("cudaEventRecord", err);
    if (Status s = call(i); !s.ok()) return s;
    if (cudaError_t err = cudaEventRecord(events[2 * i + 1], nullptr); err != cudaSuccess)
      return cuda_error("cudaEventRecord", err);
  }
  if (cudaError_t err = cudaEventSynchronize(events[2 * count - 1]); err != cudaSuccess)
    return cuda_error("waiting for the timed calls", err);
  for (int i = 0; i < count; ++i) {
    float elapsed = 0;
    if (cudaError_t err = cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]); err != cudaSuccess)
      return cuda_error("cudaEventElapsedTime", err);
    ms->push_back(elapsed);
  }
  return {};
}

Status forward_variant(FwdVariant variant, const ForwardParams& params) {
  Problem p;
  if (Status s = validate_forward(params, &p); !s.ok()) return s;
  if (p.dtype != DType::kBFloat16 || p.head_dim != 128 || p.head_dim_v != 128)
    return unsupported("the ablation kernels take bfloat16 with head_dim = head_dim_v = 128");
  const cuda::sm80::FwdKernelInfo kernel = cuda::sm80::find_fwd_ablation(
      variant == FwdVariant::kRescaleEveryStep, variant == FwdVariant::kSequentialQBlocks);
  if (kernel.launch == nullptr)
    return unsupported("this build has no bf16 head-dim-128 kernels (FLASHTILE_CUDA_DTYPES, FLASHTILE_CUDA_HEAD_DIMS)");
  if (p.empty()) return {};
  const cudaStream_t stream = static_cast<cudaStream_t>(params.stream);
  if (cudaError_t err = kernel.launch(kernel_params(params, p, kernel.block_m), stream); err != cudaSuccess)
    return cuda_error("sm80 ablation kernel launch", err);
  return {};
}

}  // namespace flashtile::tool::gpu
