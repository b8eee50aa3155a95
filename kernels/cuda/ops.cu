/* ops.cu - the dense element-wise, norm, RoPE, softmax, argmax and embedding kernels of kernels/ops_cuda.h.
 *
 * Version 1 (this file): one block per row for row ops (block-wide fp32 reductions through warp shuffles and a
 * 32-float shared array; rmsnorm: 16 or 32 lanes per row up to 1024, 4/16-byte accesses where alignment allows),
 * grid-stride loops for element-wise ops. rmsnorm / add_rmsnorm run as programmatic dependent launches (common.cuh:
 * omni_launch_pdl), as every kernel of the decode chain between the GEMVs.
 * The arithmetic mirrors PyTorch's bf16 kernels: load bf16 -> fp32 math -> round-to-nearest-even to bf16
 * at the points named in ops_cuda.h. No fast-math intrinsics (expf, erff, tanhf, rsqrtf, IEEE division). */
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels/ops_cuda.h"

/* ---- RMSNorm ----------------------------------------------------------------------------------------------- */

/* This thread's share (vectors t0, t0 + stride, ...) of the row's sum of squares; nv = dim / VEC.
 * With a residual ar: first x = bf16(x + a), stored back (the same thread reads it again in rms_write). */
template <int VEC> __device__ float rms_sumsq(uint16_t *xr, const uint16_t *ar, int nv, int t0, int stride) {
    float ss = 0.f, f[VEC], g[VEC];
    for (int i = t0; i < nv; i += stride) {
        load_vec<VEC>(f, xr, i);
        if (ar) {
            load_vec<VEC>(g, ar, i);
#pragma unroll
            for (int k = 0; k < VEC; k++) f[k] = bf(f[k] + g[k]);
            store_vec<VEC>(xr, i, f);
        }
#pragma unroll
        for (int k = 0; k < VEC; k++) ss += f[k] * f[k];
    }
    return ss;
}

/* y = bf16(bf16(x·inv)·w) for this thread's vectors. Each element is read before it is written (y may alias x). */
template <int VEC>
__device__ void rms_write(uint16_t *yr, const uint16_t *xr, const uint16_t *w, int nv, float inv, int t0, int stride) {
    float f[VEC], g[VEC];
    for (int i = t0; i < nv; i += stride) {
        load_vec<VEC>(f, xr, i);
        load_vec<VEC>(g, w, i);
#pragma unroll
        for (int k = 0; k < VEC; k++) f[k] = bf(f[k] * inv) * g[k];
        store_vec<VEC>(yr, i, f);
    }
}

/* Long rows (dim > 1024): one block per row. x is written only when a (residual) is given. */
template <int VEC>
__global__ void rmsnorm_block_kernel(uint16_t *y, uint16_t *x, const uint16_t *a, const uint16_t *w, int dim,
                                     float eps) {
    __shared__ float sh[32];
    omni_pdl_wait();
    omni_pdl_trigger();
    int64_t off = (int64_t)blockIdx.x * dim;
    int nv = dim / VEC;
    float ss = block_sum(rms_sumsq<VEC>(x + off, a ? a + off : NULL, nv, threadIdx.x, blockDim.x), sh);
    rms_write<VEC>(y + off, x + off, w, nv, rsqrtf(ss / (float)dim + eps), threadIdx.x, blockDim.x);
}

/* Short rows (per-head q_norm/k_norm, D = 128): LANES (16 or 32) threads per row, ROW_THREADS / LANES rows per
 * block. Threads past the last row still join the shuffles (a half warp may hold a valid row). */
template <int VEC, int LANES>
__global__ void rmsnorm_lanes_kernel(uint16_t *y, uint16_t *x, const uint16_t *a, const uint16_t *w, int rows, int dim,
                                     float eps) {
    omni_pdl_wait();
    omni_pdl_trigger();
    int row = blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES, lane = threadIdx.x % LANES;
    int64_t off = (int64_t)(row < rows ? row : 0) * dim;
    int nv = row < rows ? dim / VEC : 0;
    float ss = rms_sumsq<VEC>(x + off, a ? a + off : NULL, nv, lane, LANES);
    for (int o = LANES / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    rms_write<VEC>(y + off, x + off, w, nv, rsqrtf(ss / (float)dim + eps), lane, LANES);
}

template <int VEC>
static void rmsnorm_launch(uint16_t *y, uint16_t *x, const uint16_t *a, const uint16_t *w, int rows, int dim,
                           float eps, cudaStream_t s) {
    if (dim > 1024) {
        omni_launch_pdl(rmsnorm_block_kernel<VEC>, rows, row_threads(dim / VEC), 0, s, y, x, a, w, dim, eps);
    } else if (dim / VEC >= 32) {
        omni_launch_pdl(rmsnorm_lanes_kernel<VEC, 32>, (rows + 7) / 8, ROW_THREADS, 0, s, y, x, a, w, rows, dim, eps);
    } else {
        omni_launch_pdl(rmsnorm_lanes_kernel<VEC, 16>, (rows + 15) / 16, ROW_THREADS, 0, s, y, x, a, w, rows, dim, eps);
    }
}

/* Shared by rmsnorm (a == NULL: x is only read) and add_rmsnorm (x += a in place first). */
static omni_status rmsnorm_any(uint16_t *y, uint16_t *x, const uint16_t *a, const uint16_t *w, int rows, int dim,
                               float eps, cudaStream_t s, const char *fn) {
    if (rows < 0 || dim <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: rows %d dim %d", fn, rows, dim);
    if (rows == 0) return OMNI_OK;
    /* 16-byte accesses when every row starts 16-byte aligned, else 4 bytes when 4-byte aligned, else 2 */
    int al16 = is_aligned(x, 16) && is_aligned(y, 16) && is_aligned(w, 16) && is_aligned(a, 16);
    int al4 = is_aligned(x, 4) && is_aligned(y, 4) && is_aligned(w, 4) && is_aligned(a, 4);
    if (dim % 8 == 0 && al16)
        rmsnorm_launch<8>(y, x, a, w, rows, dim, eps, s);
    else if (dim % 2 == 0 && al4)
        rmsnorm_launch<2>(y, x, a, w, rows, dim, eps, s);
    else
        rmsnorm_launch<1>(y, x, a, w, rows, dim, eps, s);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return omni_fail(OMNI_ERR_RUNTIME, "%s: kernel launch (%s:%d): %s", fn, __FILE__, __LINE__,
                         cudaGetErrorString(e));
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_rmsnorm_bf16(uint16_t *y, const uint16_t *x, const uint16_t *w, int rows, int dim,
                                              float eps, void *stream) {
    /* x is not written when no residual is given (the kernels take it non-const for add_rmsnorm) */
    return rmsnorm_any(y, (uint16_t *)x, NULL, w, rows, dim, eps, (cudaStream_t)stream, __func__);
}

extern "C" omni_status omni_cuda_add_rmsnorm_bf16(uint16_t *h, uint16_t *x, const uint16_t *a, const uint16_t *w,
                                                  int rows, int dim, float eps, void *stream) {
    return rmsnorm_any(h, x, a, w, rows, dim, eps, (cudaStream_t)stream, __func__);
}

/* ---- LayerNorm --------------------------------------------------------------------------------------------- */

__global__ void layernorm_kernel(uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b, int dim,
                                 float eps) {
    __shared__ float sh[32];
    const uint16_t *xr = x + (int64_t)blockIdx.x * dim;
    uint16_t *yr = y + (int64_t)blockIdx.x * dim;
    float s = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += ld_bf(xr, i);
    float mean = block_sum(s, sh) / (float)dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = ld_bf(xr, i) - mean;
        ss += d * d;
    }
    float inv = rsqrtf(block_sum(ss, sh) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = (ld_bf(xr, i) - mean) * inv * ld_bf(w, i);
        st_bf(yr, i, b ? v + ld_bf(b, i) : v);
    }
}

extern "C" omni_status omni_cuda_layernorm_bf16(uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                                                int rows, int dim, float eps, void *stream) {
    if (rows < 0 || dim <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: rows %d dim %d", __func__, rows, dim);
    if (rows == 0) return OMNI_OK;
    omni_launch(layernorm_kernel, rows, row_threads(dim), 0, (cudaStream_t)stream, y, x, w, b, dim, eps);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- RoPE -------------------------------------------------------------------------------------------------- */

/* One block per (token, head); thread d rotates the pair (d, d + D/2). */
__global__ void rope_neox_kernel(uint16_t *x, int H, int D, int64_t ld, const float *cos, const float *sin) {
    int t = blockIdx.x / H, h = blockIdx.x % H, half = D / 2;
    uint16_t *v = x + (int64_t)t * ld + (int64_t)h * D;
    const float *c = cos + (int64_t)t * D, *sn = sin + (int64_t)t * D;
    for (int d = threadIdx.x; d < half; d += blockDim.x) {
        float a = ld_bf(v, d), b = ld_bf(v, d + half);
        float c0 = bf(c[d]), s0 = bf(sn[d]), c1 = bf(c[d + half]), s1 = bf(sn[d + half]);
        st_bf(v, d, bf(a * c0) + bf(-b * s0));
        st_bf(v, d + half, bf(b * c1) + bf(a * s1));
    }
}

extern "C" omni_status omni_cuda_rope_neox_bf16(uint16_t *x, int T, int H, int D, int64_t ld, const float *cos,
                                                const float *sin, void *stream) {
    if (T < 0 || H < 0 || D <= 0 || D % 2 || ld < (int64_t)H * D)
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d H %d D %d ld %lld", __func__, T, H, D, (long long)ld);
    if (T == 0 || H == 0) return OMNI_OK;
    int threads = row_threads(D / 2);
    omni_launch(rope_neox_kernel, T * H, threads, 0, (cudaStream_t)stream, x, H, D, ld, cos, sin);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- element-wise ------------------------------------------------------------------------------------------ */

__global__ void silu_mul_kernel(uint16_t *y, const uint16_t *g, const uint16_t *u, int64_t n) {
    GRID_STRIDE(i, n) {
        float a = ld_bf(g, i), b = ld_bf(u, i);
        st_bf(y, i, bf(a / (1.f + expf(-a))) * b);
    }
}

__global__ void gelu_erf_kernel(uint16_t *y, const uint16_t *x, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = ld_bf(x, i);
        st_bf(y, i, 0.5f * v * (1.f + erff(v * 0.70710678118654752f)));
    }
}

__global__ void gelu_tanh_kernel(uint16_t *y, const uint16_t *x, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    GRID_STRIDE(i, n) {
        float v = ld_bf(x, i);
        st_bf(y, i, 0.5f * v * (1.f + tanhf(c * (v + 0.044715f * v * v * v))));
    }
}

__global__ void add_kernel(uint16_t *y, const uint16_t *a, const uint16_t *b, int64_t n) {
    GRID_STRIDE(i, n) st_bf(y, i, ld_bf(a, i) + ld_bf(b, i));
}

#define EW_LAUNCH(kernel, n, stream, ...)                                                                      \
    do {                                                                                                       \
        if ((n) < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %lld", __func__, (long long)(n));                 \
        if ((n) == 0) return OMNI_OK;                                                                          \
        omni_launch(kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)(stream), __VA_ARGS__);                          \
        OMNI_CUDA_LAUNCHED();                                                                                  \
        return OMNI_OK;                                                                                        \
    } while (0)

extern "C" omni_status omni_cuda_silu_mul_bf16(uint16_t *y, const uint16_t *gate, const uint16_t *up, int64_t n,
                                               void *stream) {
    EW_LAUNCH(silu_mul_kernel, n, stream, y, gate, up, n);
}
extern "C" omni_status omni_cuda_gelu_erf_bf16(uint16_t *y, const uint16_t *x, int64_t n, void *stream) {
    EW_LAUNCH(gelu_erf_kernel, n, stream, y, x, n);
}
extern "C" omni_status omni_cuda_gelu_tanh_bf16(uint16_t *y, const uint16_t *x, int64_t n, void *stream) {
    EW_LAUNCH(gelu_tanh_kernel, n, stream, y, x, n);
}
extern "C" omni_status omni_cuda_add_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, int64_t n,
                                          void *stream) {
    EW_LAUNCH(add_kernel, n, stream, y, a, b, n);
}

/* ---- embedding --------------------------------------------------------------------------------------------- */

__global__ void embed_kernel(uint16_t *y, const uint16_t *table, int64_t vocab, int dim, const int32_t *ids) {
    int32_t id = ids[blockIdx.x];
    uint16_t *yr = y + (int64_t)blockIdx.x * dim;
    int ok = id >= 0 && id < vocab;
    const uint16_t *tr = table + (ok ? (int64_t)id * dim : 0);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = ok ? tr[i] : (uint16_t)0;
}

extern "C" omni_status omni_cuda_embed_bf16(uint16_t *y, const uint16_t *table, int64_t vocab, int dim,
                                            const int32_t *ids, int n, void *stream) {
    if (n < 0 || dim <= 0 || vocab < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %d dim %d", __func__, n, dim);
    if (n == 0) return OMNI_OK;
    omni_launch(embed_kernel, n, row_threads(dim), 0, (cudaStream_t)stream, y, table, vocab, dim, ids);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- softmax ----------------------------------------------------------------------------------------------- */

__global__ void softmax_kernel(float *x, int n) {
    __shared__ float sh[32];
    float *r = x + (int64_t)blockIdx.x * n;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, r[i]);
    mx = block_max(mx, sh);
    if (mx == -INFINITY) { /* fully masked row: zeros, as op_softmax */
        for (int i = threadIdx.x; i < n; i += blockDim.x) r[i] = 0.f;
        return;
    }
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(r[i] - mx);
    float inv = 1.f / block_sum(s, sh);
    for (int i = threadIdx.x; i < n; i += blockDim.x) r[i] = expf(r[i] - mx) * inv;
}

extern "C" omni_status omni_cuda_softmax_f32(float *x, int rows, int n, void *stream) {
    if (rows < 0 || n <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: rows %d n %d", __func__, rows, n);
    if (rows == 0) return OMNI_OK;
    omni_launch(softmax_kernel, rows, row_threads(n), 0, (cudaStream_t)stream, x, n);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- argmax ------------------------------------------------------------------------------------------------ */

/* (v, i) beats (bv, bi) if larger, or equal with a lower index (first on ties). */
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__global__ void argmax_kernel(int32_t *idx, const float *x, int n) {
    __shared__ float shv[32];
    __shared__ int shi[32];
    const float *r = x + (int64_t)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = INT32_MAX;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (beats(r[i], i, bv, bi)) bv = r[i], bi = i;
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int j = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(v, j, bv, bi)) bv = v, bi = j;
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) shv[wid] = bv, shi[wid] = bi;
    __syncthreads();
    if (wid) return;
    bv = lane < nw ? shv[lane] : -INFINITY;
    bi = lane < nw ? shi[lane] : INT32_MAX;
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int j = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(v, j, bv, bi)) bv = v, bi = j;
    }
    if (lane == 0) idx[blockIdx.x] = bi == INT32_MAX ? 0 : bi; /* all NaN: index 0, as op_argmax */
}

extern "C" omni_status omni_cuda_argmax_f32(int32_t *idx, const float *x, int rows, int n, void *stream) {
    if (rows < 0 || n <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: rows %d n %d", __func__, rows, n);
    if (rows == 0) return OMNI_OK;
    omni_launch(argmax_kernel, rows, ROW_THREADS, 0, (cudaStream_t)stream, idx, x, n);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}
