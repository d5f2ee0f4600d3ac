// Thin wrappers over the sm80 instructions the forward kernel is built from. Each is one PTX instruction;
// the fragment layouts they produce are described next to mma_16x8x16, which everything else follows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashtile::cuda::sm80 {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses registers. src_bytes < 16 zero-fills the rest (0: all zeros),
// which is how rows past the sequence end and columns past the head dim become zeros in shared memory.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
               "r"(src_bytes));
}
// The same for one 4-byte word (cached in L1 too: the .cg form takes only 16 bytes).
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
               "r"(src_bytes));
}
// The same, issued only where `issue` holds (a predicate in the PTX; ptxas may still branch around the copy).
__device__ __forceinline__ void cp_async_4_if(bool issue, void* smem, const void* gmem, int src_bytes) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.ca.shared.global [%0], [%1], 4, %2;\n}\n" ::"r"(
          smem_address(smem)),
      "l"(gmem), "r"(src_bytes), "r"(static_cast<int>(issue)));
}
// A hint that brings the 128-byte line holding `gmem` into L2 (no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// threadIdx.x read again from its special register. The asm is volatile, so the compiler cannot reuse a copy
// it read before a long loop and keep that copy live in a register through it: for code after the loop (the
// backward's dK/dV epilogue, where the reuse made ptxas spill the D = 64 loop's registers).
__device__ __forceinline__ unsigned thread_index_reread() {
  unsigned tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

// Shared-memory barriers (mbarrier, sm80): a 64-bit counter that completes a phase once `count` arrivals have
// come in, then starts the next. Waiters name the phase by its parity (the k-th use of a barrier waits with
// parity k & 1), so a waiter may lag the barrier by at most one phase.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count));
}
// One arrival, with release semantics: this thread's earlier shared-memory reads and writes happen before the
// phase completes.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared.b64 state, [%0];\n}\n" ::"r"(smem_address(bar))
               : "memory");
}
// One arrival that lands once every cp.async this thread has issued so far is complete (its data then visible
// to the threads that wait on the barrier).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// Waits until the phase of the given parity has completed (acquire: what the arrivals released is visible).
// On sm90 try_wait suspends the warp in hardware until the phase completes or a time limit passes, so that a
// waiting warp spins less (the ncu profile of the ring at D = 256 S = 512 had "branch resolving" at 0.32 cycles
// an instruction against FA2's 0.02; not profiled again). Same-call A/B (v20, docs/perf-log.md): forward
// +0.9% at D = 256, +0.3% over grid A. sm80 has only test_wait, which returns at once.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
#else
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
#endif
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
}

// Four 8x8 b16 matrices from shared memory; lane i supplies the address (smem_address) of row (i % 8) of matrix
// i / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) { ldmatrix_x4(r, smem_address(smem)); }
// The same, each matrix transposed on the way: for an operand stored with the product's k down its rows (V in
// P V; in the backward also P, dS, Q, dO and K).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4_trans(r, smem_address(smem));
}

// D (16x8 fp32) += A (16x16) * B (16x8), fp32 accumulate. With g = lane / 4 and t = lane % 4:
//   A: a[0] = (row g, cols 2t..2t+1), a[1] = (row g+8, same cols), a[2] = (row g, cols 2t+8..), a[3] = (row g+8, ..)
//   B: b[0] = (k 2t..2t+1, col g), b[1] = (k 2t+8..2t+9, col g)
//   D: d[0..1] = (row g, cols 2t, 2t+1), d[2..3] = (row g+8, cols 2t, 2t+1)
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16x8x16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16x8x16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats packed as the 16-bit type, low half first (the A-fragment order).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// One 16-byte global store of four words. A uint4 store of four separately computed words compiled to four 4-byte
// stores (ptxas had the words in registers that are not a consecutive quad).
__device__ __forceinline__ void st_global_v4(void* gmem, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(gmem), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}

// The two 16-bit values of a packed pair as floats (pack2's inverse).
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t v);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t v) {
  return __half22float2(*reinterpret_cast<__half2*>(&v));
}

}  // namespace flashtile::cuda::sm80
