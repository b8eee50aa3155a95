/* ops_towers.cu - the kernels the vision and audio towers need beyond the dense ops (kernels/ops_cuda.h, section
 * "vision / audio towers"): bilinear position-embedding add, 2D RoPE tables and fp32-math RoPE, 3x3 stride-2
 * im2col, periodic row add, deterministic uniform fill, and the host helpers the towers' weight upload and head
 * padding use. Each kernel has a plain-C reference (kernels/ops.h or the formula in its comment) and is tested in
 * tests/gpu/test_gpu_tower_ops.c.
 * Where the reference's f32 arithmetic must be reproduced to the bit (pos-embed taps and weights, RoPE), products
 * and sums use the _rn intrinsics so that nvcc cannot contract them into fused multiply-adds. */
#include <stdlib.h>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels/ops_cuda.h"

#define IM2COL_THREADS 128

/* ---- bilinear position embedding --------------------------------------------------------------------------- */

/* One axis of op_pos_embed_bilinear's taps (align_corners=True): source index·(side-1)/(size-1) in f32. */
__device__ __forceinline__ void pe_axis(int index, int size, int side, int tap[2], float wt[2]) {
    const float src = __fdiv_rn(__fmul_rn((float)index, (float)(side - 1)), (float)(size - 1 > 1 ? size - 1 : 1));
    const float fl = floorf(src), frac = __fsub_rn(src, fl);
#pragma unroll
    for (int o = 0; o < 2; o++) {
        const int tp = (int)fl + o;
        tap[o] = tp < 0 ? 0 : tp > side - 1 ? side - 1 : tp;
        const float w = __fsub_rn(1.0f, fabsf(__fsub_rn(frac, (float)o)));
        wt[o] = w > 0.0f ? w : 0.0f;
    }
}

/* One block per patch (grid-stride); threads over the D channels. */
__global__ void pos_embed_kernel(uint16_t *x, const uint16_t *table, int side, const int32_t *row, const int32_t *col,
                                 int N, int D, int gh, int gw) {
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        int th[2], tw[2];
        float wh[2], ww[2];
        pe_axis(row[n], gh, side, th, wh);
        pe_axis(col[n], gw, side, tw, ww);
        const uint16_t *e[4];
        float w[4];
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
                e[2 * a + b] = table + (int64_t)(th[a] * side + tw[b]) * D, w[2 * a + b] = __fmul_rn(wh[a], ww[b]);
        uint16_t *xr = x + (int64_t)n * D;
        for (int d = threadIdx.x; d < D; d += blockDim.x) {
            float p = __fmul_rn(ld_bf(e[0], d), w[0]);
            p = __fadd_rn(p, __fmul_rn(ld_bf(e[1], d), w[1]));
            p = __fadd_rn(p, __fmul_rn(ld_bf(e[2], d), w[2]));
            p = __fadd_rn(p, __fmul_rn(ld_bf(e[3], d), w[3]));
            st_bf(xr, d, __fadd_rn(ld_bf(xr, d), bf(p)));
        }
    }
}

extern "C" omni_status omni_cuda_pos_embed_bilinear_bf16(uint16_t *x, const uint16_t *table, int side,
                                                         const int32_t *row, const int32_t *col, int N, int D, int gh,
                                                         int gw, void *stream) {
    if (N < 0 || D <= 0 || side <= 0 || gh <= 0 || gw <= 0)
        return omni_fail(OMNI_ERR_USAGE, "%s: N %d D %d side %d grid %dx%d", __func__, N, D, side, gh, gw);
    if (N == 0) return OMNI_OK;
    if (!x || !table || !row || !col) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    omni_launch(pos_embed_kernel, N < 65535 ? N : 65535, row_threads(D), 0, (cudaStream_t)stream, x, table, side,
                row, col, N, D, gh, gw);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- 2D RoPE ----------------------------------------------------------------------------------------------- */

/* Thread per (token, slot j < D/2): slot j < D/4 takes the row, the rest the column. */
__global__ void rope2d_tables_kernel(float *cs, float *sn, const int32_t *row, const int32_t *col, int T, int D,
                                     const float *inv) {
    const int half = D / 2, nf = D / 4;
    GRID_STRIDE(i, (int64_t)T * half) {
        const int64_t t = i / half;
        const int j = (int)(i % half);
        const float a = __fmul_rn((float)(j < nf ? row[t] : col[t]), inv[j < nf ? j : j - nf]);
        const float c = cosf(a), s = sinf(a);
        cs[t * D + j] = cs[t * D + j + half] = c;
        sn[t * D + j] = sn[t * D + j + half] = s;
    }
}

extern "C" omni_status omni_cuda_rope2d_tables_f32(float *cos, float *sin, const int32_t *row, const int32_t *col,
                                                   int T, int D, const float *inv_freq, void *stream) {
    if (T < 0 || D <= 0 || D % 4) return omni_fail(OMNI_ERR_USAGE, "%s: T %d D %d", __func__, T, D);
    if (T == 0) return OMNI_OK;
    if (!cos || !sin || !row || !col || !inv_freq) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    const int64_t n = (int64_t)T * (D / 2);
    omni_launch(rope2d_tables_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, cos, sin, row, col, T, D,
                inv_freq);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* Thread per (token, head, pair d < D/2). */
__global__ void rope_f32_kernel(uint16_t *x, int T, int H, int D, int64_t ld, const float *cs, const float *sn) {
    const int half = D / 2;
    GRID_STRIDE(i, (int64_t)T * H * half) {
        const int64_t t = i / ((int64_t)H * half);
        const int r = (int)(i % ((int64_t)H * half)), h = r / half, d = r % half;
        uint16_t *v = x + t * ld + (int64_t)h * D;
        const float *c = cs + t * D, *s = sn + t * D;
        const float a = ld_bf(v, d), b = ld_bf(v, d + half);
        st_bf(v, d, __fsub_rn(__fmul_rn(a, c[d]), __fmul_rn(b, s[d])));
        st_bf(v, d + half, __fadd_rn(__fmul_rn(b, c[d + half]), __fmul_rn(a, s[d + half])));
    }
}

extern "C" omni_status omni_cuda_rope_neox_f32_bf16(uint16_t *x, int T, int H, int D, int64_t ld, const float *cos,
                                                    const float *sin, void *stream) {
    if (T < 0 || H < 0 || D <= 0 || D % 2 || ld < (int64_t)H * D)
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d H %d D %d ld %lld", __func__, T, H, D, (long long)ld);
    if (T == 0 || H == 0) return OMNI_OK;
    if (!x || !cos || !sin) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    const int64_t n = (int64_t)T * H * (D / 2);
    omni_launch(rope_f32_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, x, T, H, D, ld, cos, sin);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- im2col 3x3 stride 2 pad 1 ----------------------------------------------------------------------------- */

struct im2col_geom {
    int H, W, C, Ho, Wo, wmajor;
    int64_t ldc;
};

/* Output row r -> image b and output position (ho, wo). */
__device__ __forceinline__ void im2col_pos(const im2col_geom &g, int64_t r, int64_t *b, int *ho, int *wo) {
    const int64_t per = (int64_t)g.Ho * g.Wo;
    *b = r / per;
    const int rem = (int)(r % per);
    if (g.wmajor) *wo = rem / g.Ho, *ho = rem % g.Ho;
    else *ho = rem / g.Wo, *wo = rem % g.Wo;
}

/* The input value of column j (< 9C) of output position (b, ho, wo); 0 outside the image. */
__device__ __forceinline__ uint16_t im2col_val(const im2col_geom &g, const uint16_t *x, int64_t b, int ho, int wo,
                                               int c, int k) {
    const int hi = 2 * ho - 1 + k / 3, wi = 2 * wo - 1 + k % 3;
    if (hi < 0 || hi >= g.H || wi < 0 || wi >= g.W) return 0;
    return x[((b * g.H + hi) * g.W + wi) * g.C + c];
}

/* Few channels (9C < 64): thread per output element. */
__global__ void im2col_small_kernel(uint16_t *col, const uint16_t *x, im2col_geom g, int64_t rows) {
    GRID_STRIDE(i, rows * g.ldc) {
        const int64_t r = i / g.ldc;
        const int j = (int)(i % g.ldc);
        uint16_t v = 0;
        if (j < 9 * g.C) {
            int64_t b;
            int ho, wo;
            im2col_pos(g, r, &b, &ho, &wo);
            v = im2col_val(g, x, b, ho, wo, j / 9, j % 9);
        }
        col[i] = v;
    }
}

/* Many channels: a block per output row (grid-stride) gathers the 9 taps x C channels with reads along c into
 * shared memory in column order, then writes the row contiguously (4-byte stores when ldc is even). */
__global__ void im2col_rows_kernel(uint16_t *col, const uint16_t *x, im2col_geom g, int64_t rows) {
    OMNI_DYN_SMEM(uint16_t, srow); /* [ldc rounded up to even] */
    const int K = 9 * g.C;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t b;
        int ho, wo;
        im2col_pos(g, r, &b, &ho, &wo);
        for (int idx = threadIdx.x; idx < K; idx += blockDim.x) {
            const int k = idx / g.C, c = idx - k * g.C;
            srow[c * 9 + k] = im2col_val(g, x, b, ho, wo, c, k);
        }
        for (int j = K + threadIdx.x; j < g.ldc; j += blockDim.x) srow[j] = 0;
        __syncthreads();
        uint16_t *dst = col + r * g.ldc;
        if ((g.ldc & 1) == 0 && ((uintptr_t)col & 3) == 0) {
            for (int j = threadIdx.x; j < g.ldc / 2; j += blockDim.x)
                ((uint32_t *)dst)[j] = (uint32_t)srow[2 * j] | ((uint32_t)srow[2 * j + 1] << 16);
        } else {
            for (int j = threadIdx.x; j < g.ldc; j += blockDim.x) dst[j] = srow[j];
        }
        __syncthreads(); /* the row is written before the next one overwrites srow */
    }
}

extern "C" omni_status omni_cuda_im2col_3x3s2_bf16(uint16_t *col, int64_t ldc, const uint16_t *x, int nb, int H,
                                                   int W, int C, int wmajor, void *stream) {
    if (nb < 0 || H <= 0 || W <= 0 || C <= 0 || ldc < 9 * (int64_t)C || ldc > 24576)
        return omni_fail(OMNI_ERR_USAGE, "%s: nb %d H %d W %d C %d ldc %lld (9C..24576)", __func__, nb, H, W, C,
                         (long long)ldc);
    if (nb == 0) return OMNI_OK;
    if (!col || !x) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    im2col_geom g = {H, W, C, (H - 1) / 2 + 1, (W - 1) / 2 + 1, wmajor ? 1 : 0, ldc};
    const int64_t rows = (int64_t)nb * g.Ho * g.Wo;
    cudaStream_t s = (cudaStream_t)stream;
    if (9 * C < 64) {
        omni_launch(im2col_small_kernel, ew_blocks(rows * ldc), EW_THREADS, 0, s, col, x, g, rows);
    } else {
        const size_t smem = (size_t)(ldc + 1) / 2 * 2 * sizeof(uint16_t); /* <= 48 KB: no attribute needed */
        const int blocks = (int)(rows < 32768 ? rows : 32768);
        omni_launch(im2col_rows_kernel, blocks, IM2COL_THREADS, smem, s, col, x, g, rows);
    }
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- periodic add, uniform fill ---------------------------------------------------------------------------- */

__global__ void add_periodic_kernel(uint16_t *y, const uint16_t *table, int period, int64_t rows, int dim) {
    GRID_STRIDE(i, rows * dim) {
        const int64_t r = i / dim;
        const int d = (int)(i % dim);
        st_bf(y, i, ld_bf(y, i) + ld_bf(table, (r % period) * dim + d));
    }
}

extern "C" omni_status omni_cuda_add_periodic_bf16(uint16_t *y, const uint16_t *table, int period, int rows, int dim,
                                                   void *stream) {
    if (rows < 0 || dim <= 0 || period <= 0)
        return omni_fail(OMNI_ERR_USAGE, "%s: rows %d dim %d period %d", __func__, rows, dim, period);
    if (rows == 0) return OMNI_OK;
    if (!y || !table) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    omni_launch(add_periodic_kernel, ew_blocks((int64_t)rows * dim), EW_THREADS, 0, (cudaStream_t)stream, y, table,
                period, (int64_t)rows, dim);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(uint16_t *y, int64_t n, uint64_t seed, float lo, float span) {
    GRID_STRIDE(i, n) {
        const float u = (float)(splitmix64(seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull)) >> 40) * 0x1p-24f;
        st_bf(y, i, __fadd_rn(lo, __fmul_rn(span, u)));
    }
}

extern "C" omni_status omni_cuda_fill_uniform_bf16(uint16_t *y, int64_t n, uint64_t seed, float lo, float hi,
                                                   void *stream) {
    if (n < 0 || !(hi >= lo))
        return omni_fail(OMNI_ERR_USAGE, "%s: n %lld range [%g, %g]", __func__, (long long)n, lo, hi);
    if (n == 0) return OMNI_OK;
    if (!y) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    omni_launch(fill_uniform_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, y, n, seed, lo, hi - lo);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- host helpers: uploads, memory info, strided copies ------------------------------------------------------ */

#define UPLOAD_CHUNK ((int64_t)1 << 20) /* values converted per host chunk */

extern "C" omni_status omni_cuda_upload_bf16(uint16_t *dst, const omni_tensor *src, void *stream) {
    if (!dst || !src || !src->data) return omni_fail(OMNI_ERR_USAGE, "%s: NULL pointer", __func__);
    const int64_t n = omni_tensor_numel(src);
    cudaStream_t s = (cudaStream_t)stream;
    if (src->dtype == OMNI_BF16) {
        OMNI_CUDA_TRY(cudaMemcpyAsync(dst, src->data, (size_t)n * 2, cudaMemcpyHostToDevice, s));
        OMNI_CUDA_TRY(cudaStreamSynchronize(s));
        return OMNI_OK;
    }
    if (src->dtype != OMNI_F16 && src->dtype != OMNI_F32)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: dtype %s", __func__, omni_dtype_name(src->dtype));
    uint16_t *buf = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(n < UPLOAD_CHUNK ? n : UPLOAD_CHUNK));
    if (!buf) return omni_fail(OMNI_ERR_NOMEM, "%s: out of host memory", __func__);
    cudaError_t e = cudaSuccess;
    for (int64_t i0 = 0; i0 < n && e == cudaSuccess; i0 += UPLOAD_CHUNK) {
        const int64_t m = n - i0 < UPLOAD_CHUNK ? n - i0 : UPLOAD_CHUNK;
        for (int64_t j = 0; j < m; j++) buf[j] = omni_f32_to_bf16(omni_get_f32(src->data, src->dtype, i0 + j));
        e = cudaMemcpyAsync(dst + i0, buf, (size_t)m * 2, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* buf is refilled next */
    }
    free(buf);
    if (e != cudaSuccess)
        return omni_fail(OMNI_ERR_RUNTIME, "%s: %lld values (%s:%d): %s", __func__, (long long)n, __FILE__, __LINE__,
                         cudaGetErrorString(e));
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    size_t f = 0, t = 0;
    OMNI_CUDA_TRY(cudaMemGetInfo(&f, &t));
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                        size_t height, void *stream) {
    if (!width || !height) return OMNI_OK;
    if (!dst || !src || width > dpitch || width > spitch)
        return omni_fail(OMNI_ERR_USAGE, "%s: width %zu, pitches %zu / %zu", __func__, width, dpitch, spitch);
    OMNI_CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice,
                                    (cudaStream_t)stream));
    return OMNI_OK;
}
