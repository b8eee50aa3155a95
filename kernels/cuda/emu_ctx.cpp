/* emu_ctx.cpp - the first and last sections of kernels/ops_cuda.h (device, contexts, memory, linear) for the CPU
 * emulator build of kernels/cuda (tests/gpu/emu): device memory is host memory there, so the memory helpers call
 * the emulator's runtime functions and the linear runs the GEMV kernel (M <= 8, emulated) or a host loop in place
 * of cuBLAS (fp32 accumulation, bias added in fp32, one rounding: the contract of omni_cuda_linear). Compiled with
 * -DKVC_EMU -include cuda_emu.h, never with nvcc. */
#include <stdlib.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv.cuh"
#include "kernels/ops_cuda.h"

struct omni_cuda_ctx {
    int device;
    cudaStream_t stream;
};

extern "C" omni_status omni_cuda_available(int *n_devices) {
    if (!n_devices) return omni_fail(OMNI_ERR_USAGE, "%s: NULL argument", __func__);
    if (cudaGetDeviceCount(n_devices) != cudaSuccess) *n_devices = 0;
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_ctx_init(omni_cuda_ctx **out, int device) {
    omni_cuda_ctx *c = (omni_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return omni_fail(OMNI_ERR_NOMEM, "%s: out of memory", __func__);
    c->device = device;
    OMNI_CUDA_TRY(cudaStreamCreate(&c->stream));
    *out = c;
    return OMNI_OK;
}

extern "C" void omni_cuda_ctx_free(omni_cuda_ctx *c) {
    if (!c) return;
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" void *omni_cuda_ctx_stream(const omni_cuda_ctx *c) { return c ? (void *)c->stream : NULL; }
extern "C" omni_status omni_cuda_ctx_reserve(omni_cuda_ctx *c, int64_t max_mn) {
    return !c || max_mn < 0 ? omni_fail(OMNI_ERR_USAGE, "%s: bad arguments", __func__) : OMNI_OK;
}
extern "C" omni_status omni_cuda_sync(void *stream) {
    OMNI_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_malloc(void **ptr, size_t bytes) {
    if (!ptr) return omni_fail(OMNI_ERR_USAGE, "%s: NULL argument", __func__);
    *ptr = NULL;
    if (bytes > ((size_t)1 << 40) || cudaMalloc(ptr, bytes ? bytes : 1) != cudaSuccess) {
        *ptr = NULL;
        return omni_fail(OMNI_ERR_NOMEM, "%s: cudaMalloc of %zu bytes: out of memory", __func__, bytes);
    }
    return OMNI_OK;
}
extern "C" void omni_cuda_free(void *p) {
    if (p) cudaFree(p);
}
extern "C" omni_status omni_cuda_h2d(void *d, const void *s, size_t n, void *st) {
    if (n) OMNI_CUDA_TRY(cudaMemcpyAsync(d, s, n, cudaMemcpyHostToDevice, (cudaStream_t)st));
    return OMNI_OK;
}
extern "C" omni_status omni_cuda_d2h(void *d, const void *s, size_t n, void *st) {
    if (n) OMNI_CUDA_TRY(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToHost, (cudaStream_t)st));
    return OMNI_OK;
}
extern "C" omni_status omni_cuda_d2d(void *d, const void *s, size_t n, void *st) {
    if (n) OMNI_CUDA_TRY(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, (cudaStream_t)st));
    return OMNI_OK;
}
extern "C" omni_status omni_cuda_memset(void *d, int byte, size_t n, void *st) {
    if (n) OMNI_CUDA_TRY(cudaMemsetAsync(d, byte, n, (cudaStream_t)st));
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_linear(omni_cuda_ctx *ctx, void *y, omni_dtype y_dtype, const uint16_t *x,
                                        const uint16_t *w, const uint16_t *b, int M, int N, int K) {
    if (!ctx || M < 0 || N < 0 || K < 0) return omni_fail(OMNI_ERR_USAGE, "%s: bad arguments", __func__);
    if (y_dtype != OMNI_BF16 && y_dtype != OMNI_F32)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: output dtype %s", __func__, omni_dtype_name(y_dtype));
    if (M == 0 || N == 0) return OMNI_OK;
    if (!y || !x || !w) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    if (omni_gemv_ok(M, K, x, K, w)) {
        omni_gemv_args a = {y, N, 0, x, K, 0, NULL, 1, w, 0, NULL, b, 0, M, N, K, 1, y_dtype == OMNI_F32};
        return omni_gemv_launch(&a, ctx->stream);
    }
    for (int m = 0; m < M; m++) /* cuBLAS's place: fp32 sums of exact bf16 products */
        for (int n = 0; n < N; n++) {
            float s = 0.f;
            for (int k = 0; k < K; k++)
                s += __bfloat162float(((const bf16 *)x)[(int64_t)m * K + k]) *
                     __bfloat162float(((const bf16 *)w)[(int64_t)n * K + k]);
            if (b) s += __bfloat162float(((const bf16 *)b)[n]);
            if (y_dtype == OMNI_F32)
                ((float *)y)[(int64_t)m * N + n] = s;
            else
                ((bf16 *)y)[(int64_t)m * N + n] = __float2bfloat16_rn(s);
        }
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_linear_batched(omni_cuda_ctx *ctx, uint16_t *y, int64_t sy, const uint16_t *x,
                                                int64_t sx, const uint16_t *w, int64_t sw, int batch, int M, int N,
                                                int K) {
    if (!ctx || batch < 0 || M < 0 || N < 0 || K < 0) return omni_fail(OMNI_ERR_USAGE, "%s: bad arguments", __func__);
    for (int b = 0; b < batch; b++) /* cuBLAS's place: fp32 sums of exact bf16 products, one rounding */
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float s = 0.f;
                for (int k = 0; k < K; k++)
                    s += __bfloat162float(((const bf16 *)x)[b * sx + (int64_t)m * K + k]) *
                         __bfloat162float(((const bf16 *)w)[b * sw + (int64_t)n * K + k]);
                ((bf16 *)y)[b * sy + (int64_t)m * N + n] = __float2bfloat16_rn(s);
            }
    return OMNI_OK;
}
