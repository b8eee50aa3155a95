/* kvc_common.cuh - device helpers shared by the KV cache kernels: IEEE fp16 conversions with the exact rounding
 * rules of the packed blocks (kvcache/kv_fp16.h: RNE saturating, round-down / round-up), bf16 RNE rounding, the
 * FWHT of one row in shared memory, and the CUDA error -> omni_status bridge. Every arithmetic step that must
 * match the CPU bit for bit uses explicit _rn intrinsics so that nvcc cannot contract it into an FMA. */
#ifndef OMNI_KVC_COMMON_CUH
#define OMNI_KVC_COMMON_CUH

#ifndef KVC_EMU
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#include "kernels/status.h"
#include "kvcache/kv_fp16.h"

#define KVC_G 32

static inline omni_status kvc_cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return OMNI_OK;
    return omni_fail(OMNI_ERR_RUNTIME, "kv cuda: %s: %s", what, cudaGetErrorString(e));
}

/* fp16 / bf16 with the rounding rules of the packed blocks: kvcache/kv_fp16.h (one definition for host and
 * device); these names are kept for the kernels that use them. */
__device__ __forceinline__ float kvc_h2f(uint16_t h) { return kv_h2f(h); }
__device__ __forceinline__ uint16_t kvc_f2h(float f) { return kv_f2h(f); }
__device__ __forceinline__ uint16_t kvc_f2h_down(float x) { return kv_f2h_down(x); }
__device__ __forceinline__ uint16_t kvc_f2h_up(float x) { return kv_f2h_up(x); }
__device__ __forceinline__ float kvc_bf16_round(float x) { return kv_bf16_round(x); }
__device__ __forceinline__ float kvc_bf2f(uint16_t b) { return kv_bf2f(b); }

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

/* In place FWHT of a D-vector held by a warp (x[j] = element 32 j + lane): the butterflies, stage order and
 * scaling of kvc_fwht_rows (bit-identical), lane stages by shuffles, no barriers. */
template <int D> __device__ __forceinline__ void kvc_fwht_warp(float (&x)[D / 32], int lane) {
#pragma unroll
    for (int h = 1; h < 32; h <<= 1)
#pragma unroll
        for (int j = 0; j < D / 32; j++) {
            const float o = __shfl_xor_sync(0xffffffffu, x[j], h);
            x[j] = lane & h ? __fsub_rn(o, x[j]) : __fadd_rn(x[j], o);
        }
#pragma unroll
    for (int h = 1; h < D / 32; h <<= 1)
#pragma unroll
        for (int j = 0; j < D / 32; j++)
            if (!(j & h)) {
                const float a = x[j], b = x[j + h];
                x[j] = __fadd_rn(a, b), x[j + h] = __fsub_rn(a, b);
            }
    const float sc = (float)(1.0 / sqrt((double)D));
#pragma unroll
    for (int j = 0; j < D / 32; j++) x[j] = __fmul_rn(x[j], sc);
}

#endif
