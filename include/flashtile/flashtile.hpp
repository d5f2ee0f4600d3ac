// flashtile C++ API: exact attention, forward and backward, without an S x S buffer.
//
// The contract (what is computed, layouts, masks, LSE, errors) is SPEC.md; this header is its C++ form.
// Every tensor is a view: a raw pointer, dtype, device, shape and int64 strides in elements. The library
// never owns, allocates or resizes caller tensors. Each operation has one entry point returning a Status;
// it never aborts, and when it refuses a call it has written nothing. An output may not share memory with an
// input, another output or the workspace (refused as an invalid argument); outputs side by side in one buffer
// (dk and dv packed) and inputs that alias each other (q = k = v) are fine.
//
//   q   (batch, seqlen_q,  heads_q,  head_dim)        "BSHD", last dim contiguous
//   k   (batch, seqlen_k,  heads_kv, head_dim)        heads_q % heads_kv == 0 (GQA/MQA)
//   v   (batch, seqlen_k,  heads_kv, head_dim_v)      head_dim_v may differ from head_dim
//   out (batch, seqlen_q,  heads_q,  head_dim_v)
//   lse (batch, heads_q,   seqlen_q)                  fp32, natural log, optional in the forward
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace flashtile {

enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
enum class Device : int32_t { kCPU = 0, kCUDA = 1 };

// Which implementation runs a call. kAuto asks the selector for the best one that supports the call.
enum class Backend : int32_t {
  kAuto = 0,
  kCpuReference = 1,  // float64 oracle; materialises each row of S. Slow, exact.
  kCpuFlash2 = 2,     // FlashAttention-2 schedule on CPU threads (Q blocks outer, deferred normalisation)
  kCpuFlash1 = 3,     // FlashAttention-1 schedule (K/V blocks outer, O/m/l rescaled every step); forward only
  kCudaSm80 = 4,      // mma.sync kernels, Ampere and later
  kCudaSm90 = 5,      // TMA + wgmma kernels, Hopper
};

enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // the call breaks the contract (shapes, strides, dtypes disagree)
  kUnsupported = 2,      // valid per SPEC.md, but the chosen backend (or any, for kAuto) cannot run it
  kOutOfMemory = 3,
  kDeviceError = 4,      // CUDA reported an error
  kInternal = 5,
};

struct Status {
  StatusCode code = StatusCode::kOk;
  std::string message;  // names the argument and what was expected; empty when ok
  bool ok() const { return code == StatusCode::kOk; }
};

// A strided view of up to 4 dimensions. Unused trailing dims are ignored.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kBFloat16;
  Device device = Device::kCPU;
  int32_t device_index = 0;
  int32_t ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};  // in elements, may be any value except that the last dim must be 1
};

// Convenience: a contiguous (row-major) view.
Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::kCPU,
                   int32_t device_index = 0);

// Mask and scaling shared by forward and backward.
struct AttentionOptions {
  float softmax_scale = std::numeric_limits<float>::quiet_NaN();  // NaN: 1/sqrt(head_dim)
  bool causal = false;          // bottom-right aligned: row i sees keys j <= i + (seqlen_k - seqlen_q)
  int64_t window_left = -1;     // sliding window, inclusive, bottom-right aligned; negative: unbounded
  int64_t window_right = -1;    // causal is (left=-1, right=0); causal together with a window takes min(right, 0)
  float softcap = 0.0f;         // > 0: S = softcap * tanh(S / softcap) before the mask; 0: off
};

struct ForwardParams {
  Tensor q, k, v;
  Tensor out;                   // written
  Tensor lse;                   // written when lse.data != nullptr, else not computed
  AttentionOptions options;
  Backend backend = Backend::kAuto;
  int32_t num_threads = 0;      // CPU backends: 0 uses every core; more than the cores runs on the cores
  void* stream = nullptr;       // GPU backends: a cudaStream_t; nullptr is the default stream
};

struct BackwardParams {
  Tensor q, k, v, out, lse, dout;  // out and lse need not come from flashtile (SPEC.md, Backward)
  Tensor dq, dk, dv;               // written; for GQA, dk/dv are summed over the query heads of a group
  AttentionOptions options;
  bool deterministic = false;      // bitwise-identical gradients across runs. The CPU backends always are; on
                                   // CUDA the default adds dQ with fp32 atomics (order varies), and this flag
                                   // makes the sm90 kernels add in a fixed order (key block by key block) and the
                                   // sm80 kernels recompute S and dP per query block instead (slower either way)
  Backend backend = Backend::kAuto;
  int32_t num_threads = 0;
  void* stream = nullptr;
  void* workspace = nullptr;       // GPU backends: caller memory of backward_workspace_size() bytes, 16-byte
  size_t workspace_size = 0;       // aligned, or nullptr to let the library allocate it. One call at a time:
                                   // calls that may overlap (other streams) need workspaces of their own
};

Status forward(const ForwardParams& params);
Status backward(const BackwardParams& params);

// The selector behind kAuto, also answering "is this supported": returns the backend that forward() would
// run, or the reason no backend can. forward()/backward() call exactly this, so they never disagree.
Status select_forward_backend(const ForwardParams& params, Backend* chosen);
Status select_backward_backend(const BackwardParams& params, Backend* chosen);

// Bytes of caller-provided workspace a backward call needs (0 for the CPU backends). On CUDA: 8 bytes per query
// row, the rows of each (batch, head) rounded up to a multiple of 128 (D = rowsum(dO * O) and the LSE, as the sm90
// kernels lay them out; the same size for either kernel family), 1 KB (the sm90 kernel's tile counter), the fp32
// dQ accumulator (4 * head_dim bytes per row, the rows of each (batch, head) rounded up to a multiple of 16), and
// when deterministic 4 bytes per 64 of those 128-rounded rows (the sm90 kernels' counts of dQ additions).
Status backward_workspace_size(const BackwardParams& params, size_t* bytes);

const char* backend_name(Backend backend);
const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
bool cuda_backend_compiled();  // false when built with FLASHTILE_ENABLE_CUDA=OFF
const char* version();
// One line for benchmark records: version, the CPU GEMM library and the kernel family it picked for this CPU
// (OpenBLAS chooses at load time; a virtual machine that hides its CPU model can get a slow generic one), and
// the instructions the bf16 CPU path runs its products on (AMX-BF16, AVX512-BF16, or none: fp32 tiles).
std::string build_info();

}  // namespace flashtile
