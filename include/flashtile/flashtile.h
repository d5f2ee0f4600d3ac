/* flashtile C ABI: the same operations as flashtile.hpp, callable from C, Python (ctypes/cffi), Rust and others
 * without compiling against C++. No exception crosses this boundary; every entry point returns a status code
 * and, when given a buffer, a message naming the bad argument.
 *
 * Stability: structs start with struct_size, filled by the ft_*_init functions. A library built against a newer
 * header still accepts older, smaller structs (fields it does not find take their defaults). Enum values never
 * change meaning.
 *
 * Shapes (SPEC.md): q (B, Sq, Hq, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv), out (B, Sq, Hq, Dv),
 * lse (B, Hq, Sq) fp32. Strides are in elements; the last dimension must have stride 1. */
#ifndef FLASHTILE_FLASHTILE_H_
#define FLASHTILE_FLASHTILE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FT_API __declspec(dllexport)
#else
#define FT_API __attribute__((visibility("default")))
#endif

typedef enum { FT_F32 = 0, FT_F16 = 1, FT_BF16 = 2 } ft_dtype;
typedef enum { FT_CPU = 0, FT_CUDA = 1 } ft_device;
typedef enum {
  FT_BACKEND_AUTO = 0,
  FT_BACKEND_CPU_REFERENCE = 1,
  FT_BACKEND_CPU_FLASH2 = 2,
  FT_BACKEND_CPU_FLASH1 = 3,
  FT_BACKEND_CUDA_SM80 = 4,
  FT_BACKEND_CUDA_SM90 = 5
} ft_backend;
typedef enum {
  FT_OK = 0,
  FT_INVALID_ARGUMENT = 1,
  FT_UNSUPPORTED = 2,
  FT_OUT_OF_MEMORY = 3,
  FT_DEVICE_ERROR = 4,
  FT_INTERNAL = 5
} ft_status;

typedef struct {
  void* data;
  int32_t dtype;        /* ft_dtype */
  int32_t device;       /* ft_device */
  int32_t device_index;
  int32_t ndim;
  int64_t shape[4];
  int64_t stride[4];    /* elements */
} ft_tensor;

typedef struct {
  float softmax_scale;  /* NaN: 1/sqrt(head_dim) */
  int32_t causal;       /* bottom-right aligned */
  int64_t window_left;  /* negative: unbounded */
  int64_t window_right;
  float softcap;        /* 0: off */
} ft_options;

typedef struct {
  uint32_t struct_size; /* sizeof(ft_fwd_params), set by ft_fwd_params_init */
  ft_tensor q, k, v, out; /* out and lse may not share memory with q, k, v or each other */
  ft_tensor lse;        /* lse.data == NULL: not computed */
  ft_options options;
  int32_t backend;      /* ft_backend */
  int32_t num_threads;  /* CPU: 0 = all cores; more than the cores runs on the cores */
  void* stream;         /* CUDA: cudaStream_t */
} ft_fwd_params;

typedef struct {
  uint32_t struct_size; /* sizeof(ft_bwd_params), set by ft_bwd_params_init */
  ft_tensor q, k, v, out, lse, dout;
  ft_tensor dq, dk, dv;  /* written; no output may share memory with an input, another output or the workspace */
  ft_options options;
  int32_t deterministic; /* nonzero: bitwise-identical gradients (CUDA: dQ added in a fixed order, slower) */
  int32_t backend;
  int32_t num_threads;
  void* stream;
  void* workspace;      /* NULL: the library allocates; else ft_backward_workspace_size bytes, 16-byte aligned,
                           used by one call at a time (calls that may overlap need workspaces of their own) */
  size_t workspace_size;
} ft_bwd_params;

/* Defaults: no tensors, default scale, no mask, auto backend, all cores. */
FT_API void ft_fwd_params_init(ft_fwd_params* params);
FT_API void ft_bwd_params_init(ft_bwd_params* params);

/* Fills a contiguous view of a tensor with ndim <= 4 dims. */
FT_API void ft_tensor_contiguous(ft_tensor* t, void* data, ft_dtype dtype, int32_t ndim, const int64_t* shape);

/* Each returns FT_OK or an error; on error, message (if non-NULL) receives a NUL-terminated explanation,
 * truncated to message_size bytes, and no output was written. */
FT_API ft_status ft_forward(const ft_fwd_params* params, char* message, size_t message_size);
FT_API ft_status ft_backward(const ft_bwd_params* params, char* message, size_t message_size);

/* The selector: which backend would run this call, or why none can. */
FT_API ft_status ft_select_forward_backend(const ft_fwd_params* params, ft_backend* chosen, char* message,
                                           size_t message_size);
FT_API ft_status ft_backward_workspace_size(const ft_bwd_params* params, size_t* bytes, char* message,
                                            size_t message_size);

FT_API const char* ft_backend_name(ft_backend backend);
FT_API const char* ft_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_FLASHTILE_H_ */
