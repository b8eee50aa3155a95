/* kvc_common.cuh - device helpers shared by the KV cache kernels: IEEE fp16 conversions with the exact rounding
 * rules of kvcache/kv_quant.c (RNE saturating, round-down / round-up), bf16 RNE rounding, the FWHT of one row in
 * shared memory, and the CUDA error -> omni_status bridge. Every arithmetic step that must match the CPU bit for
 * bit uses explicit _rn intrinsics so that nvcc cannot contract it into an FMA. */
#ifndef OMNI_KVC_COMMON_CUH
#define OMNI_KVC_COMMON_CUH

#ifndef KVC_EMU
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#include "kernels/status.h"

#define KVC_G 32

static inline omni_status kvc_cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return OMNI_OK;
    return omni_fail(OMNI_ERR_RUNTIME, "kv cuda: %s: %s", what, cudaGetErrorString(e));
}

__device__ __forceinline__ float kvc_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (ex == 0) {
        float f = __fmul_rn((float)man, 1.0f / 16777216.0f); /* subnormal: man * 2^-24, exact */
        u = __float_as_uint(f) | sign;
    } else if (ex == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((ex + 112u) << 23) | (man << 13);
    }
    return __uint_as_float(u);
}

/* Round-to-nearest-even, saturating to +-65504; NaN -> 0x7e00 (kvq_f2h). */
__device__ __forceinline__ uint16_t kvc_f2h(float f) {
    uint32_t u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7e00u;
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7bffu);
    if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)rintf(__fmul_rn(__uint_as_float(a), 16777216.0f)));
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

__device__ __forceinline__ uint16_t kvc_h_step_down(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 0x8001u;
    if (h & 0x8000u) return h == 0xfbffu ? h : (uint16_t)(h + 1);
    return (uint16_t)(h - 1);
}
__device__ __forceinline__ uint16_t kvc_h_step_up(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 0x0001u;
    if (h & 0x8000u) return (uint16_t)(h - 1);
    return h == 0x7bffu ? h : (uint16_t)(h + 1);
}
__device__ __forceinline__ uint16_t kvc_f2h_down(float x) {
    uint16_t h = kvc_f2h(x);
    return kvc_h2f(h) > x ? kvc_h_step_down(h) : h;
}
__device__ __forceinline__ uint16_t kvc_f2h_up(float x) {
    uint16_t h = kvc_f2h(x);
    return kvc_h2f(h) < x ? kvc_h_step_up(h) : h;
}

__device__ __forceinline__ float kvc_bf16_round(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xffff0000u);
}

__device__ __forceinline__ float kvc_bf2f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* In place x <- H x for n_rows rows of D floats in shared memory (row r at x + r * stride), normalized Sylvester
 * Walsh-Hadamard, same butterflies and final scaling as kvq_fwht (bit-identical). Called by all nthr threads of
 * the block (thread index tid); contains __syncthreads. */
__device__ __forceinline__ void kvc_fwht_rows(float *x, int n_rows, int stride, int D, int tid, int nthr) {
    const int half = D / 2, total = n_rows * half;
    for (int h = 1; h < D; h <<= 1) {
        __syncthreads();
        for (int t = tid; t < total; t += nthr) {
            int r = t / half, k = t % half, i = (k / h) * 2 * h + (k % h);
            float *row = x + (size_t)r * stride;
            float a = row[i], b = row[i + h];
            row[i] = __fadd_rn(a, b);
            row[i + h] = __fsub_rn(a, b);
        }
    }
    __syncthreads();
    const float s = (float)(1.0 / sqrt((double)D));
    for (int t = tid; t < n_rows * D; t += nthr) {
        float *p = x + (size_t)(t / D) * stride + t % D;
        *p = __fmul_rn(*p, s);
    }
    __syncthreads();
}

#endif
