/* hostsim.c - a host simulation of the device API the GPU towers call (kernels/ops_cuda.h: memory, copies, the
 * dense and tower ops, cuBLAS linear; kvcache/kv_towers.h: kvc_tower_attn), for running the towers' own code
 * (vision/cuda/tower_cuda.c, audio/cuda/tower_cuda.c) on machines without a GPU (CI).
 *
 * "Device memory" is host memory; new buffers are filled with 0xFF bytes (NaN in bf16) so that a read of a value
 * never written shows up as NaN in the outputs. Each op computes with the CPU reference ops (kernels/ops.h) in f32
 * and rounds to bf16 exactly where the CUDA op documents its roundings, so the towers' results here carry the
 * same kind of bf16 error as on the GPU (not the same bits: GEMM and attention summation orders differ).
 * What this checks: the towers' bookkeeping (buffer layouts, strides, chunking, segments, padding, grouping) and
 * the error budget of the bf16 pipeline. What it does not: the CUDA kernels themselves (tests/gpu on a GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/ops_cuda.h"
#include "kvcache/kv_towers.h"

struct omni_cuda_ctx {
    int device;
};

static float bfr(float v) { return omni_bf16_to_f32(omni_f32_to_bf16(v)); }

static float *to_f32(const uint16_t *x, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!f) {
        fprintf(stderr, "hostsim: out of memory\n");
        abort();
    }
    for (int64_t i = 0; i < n; i++) f[i] = omni_bf16_to_f32(x[i]);
    return f;
}

static void store_bf16(uint16_t *y, const float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = omni_f32_to_bf16(f[i]);
}

static omni_tensor vec(const uint16_t *p, int64_t n) { return omni_tensor_make((void *)p, OMNI_BF16, 1, &n); }

/* ---- devices, contexts, memory ---------------------------------------------------------------------------- */

omni_status omni_cuda_available(int *n) {
    *n = 1;
    return OMNI_OK;
}
omni_status omni_cuda_ctx_init(omni_cuda_ctx **ctx, int device) {
    *ctx = calloc(1, sizeof **ctx);
    if (!*ctx) return omni_fail(OMNI_ERR_NOMEM, "hostsim: out of memory");
    (*ctx)->device = device;
    return OMNI_OK;
}
void omni_cuda_ctx_free(omni_cuda_ctx *ctx) { free(ctx); }
void *omni_cuda_ctx_stream(const omni_cuda_ctx *ctx) { return (void *)ctx; }
omni_status omni_cuda_ctx_reserve(omni_cuda_ctx *ctx, int64_t max_mn) { return OMNI_OK; }
omni_status omni_cuda_sync(void *stream) { return OMNI_OK; }
omni_status omni_cuda_malloc(void **ptr, size_t bytes) {
    *ptr = malloc(bytes ? bytes : 1);
    if (!*ptr) return omni_fail(OMNI_ERR_NOMEM, "hostsim: %zu bytes", bytes);
    memset(*ptr, 0xff, bytes);
    return OMNI_OK;
}
void omni_cuda_free(void *ptr) { free(ptr); }
omni_status omni_cuda_h2d(void *dst, const void *src, size_t bytes, void *stream) {
    if (bytes) memcpy(dst, src, bytes);
    return OMNI_OK;
}
omni_status omni_cuda_d2h(void *dst, const void *src, size_t bytes, void *stream) {
    if (bytes) memcpy(dst, src, bytes);
    return OMNI_OK;
}
omni_status omni_cuda_d2d(void *dst, const void *src, size_t bytes, void *stream) {
    if (bytes) memmove(dst, src, bytes);
    return OMNI_OK;
}
omni_status omni_cuda_memset(void *dst, int byte, size_t bytes, void *stream) {
    if (bytes) memset(dst, byte, bytes);
    return OMNI_OK;
}
omni_status omni_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    if (free_bytes) *free_bytes = (size_t)64 << 30;
    if (total_bytes) *total_bytes = (size_t)64 << 30;
    return OMNI_OK;
}
omni_status omni_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                             void *stream) {
    if (width > dpitch || width > spitch) return omni_fail(OMNI_ERR_USAGE, "hostsim copy2d: width %zu", width);
    for (size_t r = 0; r < height; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return OMNI_OK;
}
omni_status omni_cuda_upload_bf16(uint16_t *dst, const omni_tensor *src, void *stream) {
    const int64_t n = omni_tensor_numel(src);
    for (int64_t i = 0; i < n; i++) dst[i] = omni_f32_to_bf16(omni_get_f32(src->data, src->dtype, i));
    return OMNI_OK;
}

/* ---- dense ops ---------------------------------------------------------------------------------------------- */

omni_status omni_cuda_layernorm_bf16(uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b, int rows,
                                     int dim, float eps, void *stream) {
    float *f = to_f32(x, (int64_t)rows * dim);
    omni_tensor wt = vec(w, dim), bt = vec(b, dim);
    op_layernorm(f, f, &wt, b ? &bt : NULL, rows, dim, eps);
    store_bf16(y, f, (int64_t)rows * dim);
    free(f);
    return OMNI_OK;
}

static omni_status act(uint16_t *y, const uint16_t *x, int64_t n, void (*op)(float *, int64_t)) {
    float *f = to_f32(x, n);
    op(f, n);
    store_bf16(y, f, n);
    free(f);
    return OMNI_OK;
}
omni_status omni_cuda_gelu_erf_bf16(uint16_t *y, const uint16_t *x, int64_t n, void *stream) {
    return act(y, x, n, op_gelu_erf);
}
omni_status omni_cuda_gelu_tanh_bf16(uint16_t *y, const uint16_t *x, int64_t n, void *stream) {
    return act(y, x, n, op_gelu_tanh);
}
omni_status omni_cuda_add_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, int64_t n, void *stream) {
    for (int64_t i = 0; i < n; i++) y[i] = omni_f32_to_bf16(omni_bf16_to_f32(a[i]) + omni_bf16_to_f32(b[i]));
    return OMNI_OK;
}
omni_status omni_cuda_f32_to_bf16(uint16_t *y, const float *x, int64_t n, void *stream) {
    store_bf16(y, x, n);
    return OMNI_OK;
}
omni_status omni_cuda_bf16_to_f32(float *y, const uint16_t *x, int64_t n, void *stream) {
    for (int64_t i = 0; i < n; i++) y[i] = omni_bf16_to_f32(x[i]);
    return OMNI_OK;
}

/* y = x·Wᵀ (+ b) in f32 (op_linear), then one rounding for bf16 outputs. */
omni_status omni_cuda_linear(omni_cuda_ctx *ctx, void *y, omni_dtype y_dtype, const uint16_t *x, const uint16_t *w,
                             const uint16_t *b, int M, int N, int K) {
    if (M == 0 || N == 0) return OMNI_OK;
    int64_t ws[2] = {N, K};
    omni_tensor wt = omni_tensor_make((void *)w, OMNI_BF16, 2, ws), bt = vec(b, N);
    float *xf = to_f32(x, (int64_t)M * K), *yf = malloc(sizeof(float) * (size_t)M * N);
    if (!yf) abort();
    op_linear(yf, xf, M, &wt, b ? &bt : NULL);
    if (y_dtype == OMNI_BF16) store_bf16(y, yf, (int64_t)M * N);
    else memcpy(y, yf, sizeof(float) * (size_t)M * N);
    free(xf), free(yf);
    return OMNI_OK;
}

/* ---- tower ops (the contracts of ops_cuda.h's tower section) ------------------------------------------------ */

omni_status omni_cuda_pos_embed_bilinear_bf16(uint16_t *x, const uint16_t *table, int side, const int32_t *row,
                                              const int32_t *col, int N, int D, int gh, int gw, void *stream) {
    float *tf = to_f32(table, (int64_t)side * side * D), *p = calloc((size_t)N * D, sizeof(float));
    if (!p) abort();
    op_pos_embed_bilinear(p, tf, side, row, col, N, D, gh, gw);
    for (int64_t i = 0; i < (int64_t)N * D; i++) x[i] = omni_f32_to_bf16(omni_bf16_to_f32(x[i]) + bfr(p[i]));
    free(tf), free(p);
    return OMNI_OK;
}
omni_status omni_cuda_rope2d_tables_f32(float *cos, float *sin, const int32_t *row, const int32_t *col, int T, int D,
                                        const float *inv_freq, void *stream) {
    op_rope2d_tables(cos, sin, row, col, T, D, inv_freq);
    return OMNI_OK;
}
omni_status omni_cuda_rope_neox_f32_bf16(uint16_t *x, int T, int H, int D, int64_t ld, const float *cos,
                                         const float *sin, void *stream) {
    float *f = malloc(sizeof(float) * (size_t)H * D);
    if (!f) abort();
    for (int t = 0; t < T; t++) {
        uint16_t *r = x + (int64_t)t * ld;
        for (int i = 0; i < H * D; i++) f[i] = omni_bf16_to_f32(r[i]);
        op_rope_neox(f, 1, H, D, (int64_t)H * D, cos + (int64_t)t * D, sin + (int64_t)t * D);
        store_bf16(r, f, (int64_t)H * D);
    }
    free(f);
    return OMNI_OK;
}
omni_status omni_cuda_im2col_3x3s2_bf16(uint16_t *col, int64_t ldc, const uint16_t *x, int nb, int H, int W, int C,
                                        int wmajor, void *stream) {
    if (ldc < 9 * (int64_t)C) return omni_fail(OMNI_ERR_USAGE, "hostsim im2col: ldc %lld", (long long)ldc);
    const int Ho = (H - 1) / 2 + 1, Wo = (W - 1) / 2 + 1, K = 9 * C;
    float *xf = to_f32(x, (int64_t)nb * H * W * C), *cf = malloc(sizeof(float) * (size_t)nb * Ho * Wo * K);
    if (!cf) abort();
    op_im2col_3x3s2(cf, xf, nb, H, W, C);
    for (int b = 0; b < nb; b++)
        for (int ho = 0; ho < Ho; ho++)
            for (int wo = 0; wo < Wo; wo++) {
                const int64_t src = ((int64_t)b * Ho + ho) * Wo + wo;
                const int64_t dst = wmajor ? ((int64_t)b * Wo + wo) * Ho + ho : src;
                for (int64_t j = 0; j < ldc; j++) col[dst * ldc + j] = j < K ? omni_f32_to_bf16(cf[src * K + j]) : 0;
            }
    free(xf), free(cf);
    return OMNI_OK;
}
omni_status omni_cuda_add_periodic_bf16(uint16_t *y, const uint16_t *table, int period, int rows, int dim,
                                        void *stream) {
    for (int64_t r = 0; r < rows; r++)
        for (int d = 0; d < dim; d++) {
            uint16_t *v = y + r * dim + d;
            *v = omni_f32_to_bf16(omni_bf16_to_f32(*v) + omni_bf16_to_f32(table[(r % period) * dim + d]));
        }
    return OMNI_OK;
}
omni_status omni_cuda_fill_uniform_bf16(uint16_t *y, int64_t n, uint64_t seed, float lo, float hi, void *stream) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = (seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull)) + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        y[i] = omni_f32_to_bf16(lo + (hi - lo) * ((float)((z ^ (z >> 31)) >> 40) * 0x1p-24f));
    }
    return OMNI_OK;
}

/* ---- segment attention ------------------------------------------------------------------------------------- */

omni_status kvc_tower_attn(int n_heads, int head_dim, const int32_t *cu_seg, int n_seg, int max_seg,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v, int64_t qkv_row, uint16_t *out,
                           int64_t out_row, float scale, void *stream) {
    if (head_dim <= 0 || head_dim > 128 || head_dim % 2 || out_row < (int64_t)n_heads * head_dim)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda tower attention: %d heads of %d (even, <= 128)", n_heads, head_dim);
    const int hw = n_heads * head_dim;
    for (int s = 0; s < n_seg; s++) {
        const int t0 = cu_seg[s], n = cu_seg[s + 1] - t0;
        if (n > max_seg) return omni_fail(OMNI_ERR_USAGE, "hostsim segments: segment %d of %d > max %d", s, n, max_seg);
        float *qf = malloc(sizeof(float) * (size_t)n * hw * 4);
        if (!qf) abort();
        float *kf = qf + (size_t)n * hw, *vf = kf + (size_t)n * hw, *of = vf + (size_t)n * hw;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < hw; i++) {
                const int64_t src = (int64_t)(t0 + t) * qkv_row + i;
                qf[(size_t)t * hw + i] = omni_bf16_to_f32(q[src]);
                kf[(size_t)t * hw + i] = omni_bf16_to_f32(k[src]);
                vf[(size_t)t * hw + i] = omni_bf16_to_f32(v[src]);
            }
        op_attention(of, hw, qf, hw, kf, hw, vf, hw, n, n, n_heads, n_heads, head_dim, scale, -1);
        for (int t = 0; t < n; t++) store_bf16(out + (int64_t)(t0 + t) * out_row, of + (size_t)t * hw, hw);
        free(qf);
    }
    return OMNI_OK;
}
