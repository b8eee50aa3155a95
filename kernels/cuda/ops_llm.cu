/* ops_llm.cu - the decoder fusions of kernels/ops_cuda.h: per-head q/k RMSNorm + multi-stream RoPE with the
 * tables made on the device, SwiGLU over a fused gate/up row, embedding gather with substituted rows, scattered
 * residual add (DeepStack), f32 <-> bf16 conversion.
 * Arithmetic as in ops.cu: bf16 in, fp32 math, round-to-nearest-even to bf16 where PyTorch rounds; IEEE cosf,
 * sinf, expf, rsqrtf (no fast-math). */
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels/ops_cuda.h"

/* ---- q/k norm + RoPE ----------------------------------------------------------------------------------- */

#define QKR_WARPS 8

/* Block (t, g): token t, heads g·8 .. g·8+7 of the Hq + Hkv (q heads first), one warp per head. Lane l holds
 * elements [l·VEC, l·VEC + VEC) of the head (D = 32·VEC); its rotation partner (d ± D/2) sits in lane l ^ 16. */
template <int VEC>
__global__ void __launch_bounds__(QKR_WARPS * 32)
qk_norm_rope_kernel(uint16_t *q, uint16_t *k, int64_t ld, int Hq, int Hkv, const uint16_t *qw, const uint16_t *kw,
                    float eps, const int32_t *pos, int64_t pos_stride, const float *inv_freq,
                    const int32_t *slot_stream) {
    constexpr int D = 32 * VEC, HALF = D / 2;
    __shared__ float cs[HALF], sn[HALF];
    const int t = blockIdx.x;
    for (int j = threadIdx.x; j < HALF; j += blockDim.x) {
        float f = (float)pos[slot_stream[j] * pos_stride + t] * inv_freq[j];
        cs[j] = bf(cosf(f));
        sn[j] = bf(sinf(f));
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, h = blockIdx.y * QKR_WARPS + (threadIdx.x >> 5);
    if (h >= Hq + Hkv) return;
    const int is_q = h < Hq, slot0 = (lane * VEC) % HALF, upper = lane >= 16;
    uint16_t *v = is_q ? q + (int64_t)t * ld + (int64_t)h * D : k + (int64_t)t * ld + (int64_t)(h - Hq) * D;
    float x[VEC], w[VEC], n[VEC], o[VEC];
    load_vec<VEC>(x, v, lane);
    load_vec<VEC>(w, is_q ? qw : kw, lane);
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < VEC; i++) ss += x[i] * x[i];
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
    const float inv = rsqrtf(ss / (float)D + eps);
#pragma unroll
    for (int i = 0; i < VEC; i++) n[i] = bf(bf(x[i] * inv) * w[i]);
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        float p = __shfl_xor_sync(0xffffffffu, n[i], 16), c = cs[slot0 + i], s = sn[slot0 + i];
        o[i] = bf(n[i] * c) + bf((upper ? p : -p) * s);
    }
    store_vec<VEC>(v, lane, o);
}

extern "C" omni_status omni_cuda_qk_norm_rope_bf16(uint16_t *q, uint16_t *k, int T, int64_t ld, int Hq, int Hkv,
                                                  int D, const uint16_t *q_w, const uint16_t *k_w, float eps,
                                                  const int32_t *pos, int64_t pos_stride, const float *inv_freq,
                                                  const int32_t *slot_stream, void *stream) {
    if (T < 0 || Hq < 0 || Hkv < 0 || (D != 32 && D != 64 && D != 128 && D != 256) || ld < (int64_t)Hq * D ||
        ld < (int64_t)Hkv * D || pos_stride < T)
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d Hq %d Hkv %d D %d ld %lld pos_stride %lld", __func__, T, Hq, Hkv,
                         D, (long long)ld, (long long)pos_stride);
    if (T == 0 || Hq + Hkv == 0) return OMNI_OK;
    const int vec = D / 32;
    if (ld % vec || !is_aligned(q, 2 * vec) || !is_aligned(k, 2 * vec) || !is_aligned(q_w, 2 * vec) ||
        !is_aligned(k_w, 2 * vec))
        return omni_fail(OMNI_ERR_USAGE, "%s: rows must be %d-byte aligned (ld %lld)", __func__, 2 * vec,
                         (long long)ld);
    dim3 grid(T, (Hq + Hkv + QKR_WARPS - 1) / QKR_WARPS);
    cudaStream_t s = (cudaStream_t)stream;
    if (D == 32)
        qk_norm_rope_kernel<1><<<grid, QKR_WARPS * 32, 0, s>>>(q, k, ld, Hq, Hkv, q_w, k_w, eps, pos, pos_stride,
                                                               inv_freq, slot_stream);
    else if (D == 64)
        qk_norm_rope_kernel<2><<<grid, QKR_WARPS * 32, 0, s>>>(q, k, ld, Hq, Hkv, q_w, k_w, eps, pos, pos_stride,
                                                               inv_freq, slot_stream);
    else if (D == 128)
        qk_norm_rope_kernel<4><<<grid, QKR_WARPS * 32, 0, s>>>(q, k, ld, Hq, Hkv, q_w, k_w, eps, pos, pos_stride,
                                                               inv_freq, slot_stream);
    else
        qk_norm_rope_kernel<8><<<grid, QKR_WARPS * 32, 0, s>>>(q, k, ld, Hq, Hkv, q_w, k_w, eps, pos, pos_stride,
                                                               inv_freq, slot_stream);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- SwiGLU ------------------------------------------------------------------------------------------------ */

/* VEC consecutive outputs per thread; the row of output vector i is i / (I / VEC). */
template <int VEC> __global__ void swiglu_kernel(uint16_t *y, const uint16_t *gu, int64_t nvec, int I) {
    const int per_row = I / VEC;
    GRID_STRIDE(i, nvec) {
        int64_t r = i / per_row, c = i % per_row;
        const uint16_t *g = gu + r * 2 * I;
        float a[VEC], b[VEC];
        load_vec<VEC>(a, g, (int)c);
        load_vec<VEC>(b, g + I, (int)c);
#pragma unroll
        for (int k = 0; k < VEC; k++) a[k] = bf(a[k] / (1.f + expf(-a[k]))) * b[k];
        store_vec<VEC>(y + r * I, (int)c, a);
    }
}

extern "C" omni_status omni_cuda_swiglu_bf16(uint16_t *y, const uint16_t *gu, int rows, int I, void *stream) {
    if (rows < 0 || I <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: rows %d I %d", __func__, rows, I);
    if (rows == 0) return OMNI_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (I % 8 == 0 && is_aligned(y, 16) && is_aligned(gu, 16)) {
        int64_t nv = (int64_t)rows * I / 8;
        swiglu_kernel<8><<<ew_blocks(nv), EW_THREADS, 0, s>>>(y, gu, nv, I);
    } else {
        int64_t nv = (int64_t)rows * I;
        swiglu_kernel<1><<<ew_blocks(nv), EW_THREADS, 0, s>>>(y, gu, nv, I);
    }
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- embedding with substituted rows, scattered add -------------------------------------------------------- */

/* One block per token; VEC-element vectors when every row is VEC-aligned. */
template <int VEC>
__global__ void embed_rows_kernel(uint16_t *y, const uint16_t *table, int64_t vocab, int dim, const int32_t *ids,
                                  const int32_t *src_row, const uint16_t *rows) {
    typedef typename vec_of<VEC>::T V;
    const int i = blockIdx.x, nv = dim / VEC;
    const int32_t sr = src_row ? src_row[i] : -1, id = ids[i];
    const V *src = sr >= 0 ? (const V *)(rows + (int64_t)sr * dim)
                           : (id >= 0 && id < vocab ? (const V *)(table + (int64_t)id * dim) : NULL);
    V *dst = (V *)(y + (int64_t)i * dim);
    for (int c = threadIdx.x; c < nv; c += blockDim.x) {
        V z{};
        dst[c] = src ? src[c] : z;
    }
}

extern "C" omni_status omni_cuda_embed_rows_bf16(uint16_t *y, const uint16_t *table, int64_t vocab, int dim,
                                                const int32_t *ids, const int32_t *src_row, const uint16_t *rows,
                                                int n, void *stream) {
    if (n < 0 || dim <= 0 || vocab < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %d dim %d", __func__, n, dim);
    if (n == 0) return OMNI_OK;
    cudaStream_t s = (cudaStream_t)stream;
    if (dim % 8 == 0 && is_aligned(y, 16) && is_aligned(table, 16) && is_aligned(rows, 16))
        embed_rows_kernel<8><<<n, row_threads(dim / 8), 0, s>>>(y, table, vocab, dim, ids, src_row, rows);
    else
        embed_rows_kernel<1><<<n, row_threads(dim), 0, s>>>(y, table, vocab, dim, ids, src_row, rows);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

__global__ void add_rows_kernel(uint16_t *x, int dim, const int32_t *dst_row, const uint16_t *src) {
    uint16_t *xr = x + (int64_t)dst_row[blockIdx.x] * dim;
    const uint16_t *sr = src + (int64_t)blockIdx.x * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) st_bf(xr, c, ld_bf(xr, c) + ld_bf(sr, c));
}

extern "C" omni_status omni_cuda_add_rows_bf16(uint16_t *x, int dim, const int32_t *dst_row, const uint16_t *src,
                                              int n, void *stream) {
    if (n < 0 || dim <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %d dim %d", __func__, n, dim);
    if (n == 0) return OMNI_OK;
    add_rows_kernel<<<n, row_threads(dim), 0, (cudaStream_t)stream>>>(x, dim, dst_row, src);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- conversions ------------------------------------------------------------------------------------------- */

__global__ void f32_to_bf16_kernel(uint16_t *y, const float *x, int64_t n) {
    GRID_STRIDE(i, n) st_bf(y, i, x[i]);
}
__global__ void bf16_to_f32_kernel(float *y, const uint16_t *x, int64_t n) {
    GRID_STRIDE(i, n) y[i] = ld_bf(x, i);
}

extern "C" omni_status omni_cuda_f32_to_bf16(uint16_t *y, const float *x, int64_t n, void *stream) {
    if (n < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %lld", __func__, (long long)n);
    if (n == 0) return OMNI_OK;
    f32_to_bf16_kernel<<<ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream>>>(y, x, n);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_bf16_to_f32(float *y, const uint16_t *x, int64_t n, void *stream) {
    if (n < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %lld", __func__, (long long)n);
    if (n == 0) return OMNI_OK;
    bf16_to_f32_kernel<<<ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream>>>(y, x, n);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}
