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
  const cuda::sm80::FwdKernelInfo kernel =
      variant == FwdVariant::kFlash1
          ? cuda::sm80::find_fwd_fa1()
          : cuda::sm80::find_fwd_ablation(variant == FwdVariant::kRescaleEveryStep,
                                          variant == FwdVariant::kSequentialQBlocks);
  if (kernel.launch == nullptr)
    return unsupported("this build has no bf16 head-dim-128 kernels (FLASHTILE_CUDA_DTYPES, FLASHTILE_CUDA_HEAD_DIMS)");
  if (p.empty()) return {};
  cuda::FwdKernelParams k = cuda::make_fwd_params(params, p, kernel.block_m);
  if (variant == FwdVariant::kFlash1) {
    // FA1's O, m and l in global memory. Kept between calls and only grown, so that no allocation (which
    // synchronises the device) falls inside a timed call after the warm-up.
    static float* state = nullptr;
    static int64_t state_floats = 0;
    const int64_t need = cuda::sm80::fwd_fa1_workspace_floats(p.batch, p.heads_q, p.seqlen_q, kernel.head_dim);
    if (need > state_floats) {
      cudaFree(state);
      state = nullptr;
      state_floats = 0;
      if (cudaError_t err = cudaMalloc(&state, need * sizeof(float)); err != cudaSuccess)
        return cuda_error("allocating the FA1 state", err);
      state_floats = need;
    }
    k.fa1_o = state;
    k.fa1_max = state + p.batch * p.heads_q * p.seqlen_q * kernel.head_dim;
    k.fa1_sum = k.fa1_max + p.batch * p.heads_q * p.seqlen_q;
  }
  if (cudaError_t err = kernel.launch(k, static_cast<cudaStream_t>(params.stream)); err != cudaSuccess)
    return cuda_error("sm80 ablation kernel launch", err);
  return {};
}

}  // namespace flashtile::tool::gpu
