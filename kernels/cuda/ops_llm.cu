/* ops_llm.cu - the decoder fusions of kernels/ops_cuda.h: per-head q/k RMSNorm + multi-stream RoPE with the
 * tables made on the device, SwiGLU over a fused gate/up row, embedding gather with substituted rows, scattered
 * residual add (DeepStack), f32 <-> bf16 conversion.
 * The decode-chain kernels (q/k norm + RoPE, SwiGLU, embedding rows) run as programmatic dependent launches
 * (common.cuh: omni_launch_pdl; they wait for the kernel before first).
 * Arithmetic as in ops.cu: bf16 in, fp32 math, round-to-nearest-even to bf16 where PyTorch rounds; IEEE cosf,
 * sinf, expf, rsqrtf (no fast-math). */
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels/ops_cuda.h"

/* ---- q/k norm + RoPE ----------------------------------------------------------------------------------- */

#define QKR_WARPS 8

/* Where the heads of token t come from and go to: q heads (Hq), k heads (Hkv), v heads (copied; Hkv, or 0). */
struct qkr_io {
    const uint16_t *qi, *ki, *vi; /* inputs, row stride ldi */
    uint16_t *qo, *ko, *vo;       /* outputs, row strides ldq / ldk (v: ldk) */
    int64_t ldi, ldq, ldk;
    int Hq, Hkv, Hv;
};

/* Block (t, g): token t, heads g·8 .. g·8+7 of the Hq + Hkv (+ Hv copied) heads, one warp per head. Lane l holds
 * elements [l·VEC, l·VEC + VEC) of the head (D = 32·VEC); its rotation partner (d ± D/2) sits in lane l ^ 16. */
template <int VEC>
__global__ void __launch_bounds__(QKR_WARPS * 32)
qk_norm_rope_kernel(qkr_io io, const uint16_t *qw, const uint16_t *kw, float eps, const int32_t *pos,
                    int64_t pos_stride, const float *inv_freq, const int32_t *slot_stream) {
    constexpr int D = 32 * VEC, HALF = D / 2;
    __shared__ float cs[HALF], sn[HALF];
    const int t = blockIdx.x;
    omni_pdl_wait(); /* programmatic dependent launch: the qkv rows come from the kernel before */
    omni_pdl_trigger();
    for (int j = threadIdx.x; j < HALF; j += blockDim.x) {
        float f = (float)pos[slot_stream[j] * pos_stride + t] * inv_freq[j];
        cs[j] = bf(cosf(f));
        sn[j] = bf(sinf(f));
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, h = blockIdx.y * QKR_WARPS + (threadIdx.x >> 5);
    if (h >= io.Hq + io.Hkv + io.Hv) return;
    if (h >= io.Hq + io.Hkv) { /* v head: copied */
        const int hv = h - io.Hq - io.Hkv;
        typename vec_of<VEC>::T u = ((const typename vec_of<VEC>::T *)(io.vi + (int64_t)t * io.ldi + (int64_t)hv * D))[lane];
        ((typename vec_of<VEC>::T *)(io.vo + (int64_t)t * io.ldk + (int64_t)hv * D))[lane] = u;
        return;
    }
    const int is_q = h < io.Hq, slot0 = (lane * VEC) % HALF, upper = lane >= 16;
    const int64_t hd = (int64_t)(is_q ? h : h - io.Hq) * D;
    const uint16_t *src = (is_q ? io.qi : io.ki) + (int64_t)t * io.ldi + hd;
    uint16_t *dst = is_q ? io.qo + (int64_t)t * io.ldq + hd : io.ko + (int64_t)t * io.ldk + hd;
    float x[VEC], w[VEC], n[VEC], o[VEC];
    load_vec<VEC>(x, src, lane);
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
    store_vec<VEC>(dst, lane, o);
}

static omni_status qkr_launch(const qkr_io *io, int T, int D, const uint16_t *q_w, const uint16_t *k_w, float eps,
                              const int32_t *pos, int64_t pos_stride, const float *inv_freq,
                              const int32_t *slot_stream, void *stream, const char *fn) {
    if (T < 0 || io->Hq < 0 || io->Hkv < 0 || (D != 32 && D != 64 && D != 128 && D != 256) ||
        io->ldi < (int64_t)(io->Hq > io->Hkv ? io->Hq : io->Hkv) * D || pos_stride < T)
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d Hq %d Hkv %d D %d ld %lld pos_stride %lld", fn, T, io->Hq, io->Hkv,
                         D, (long long)io->ldi, (long long)pos_stride);
    const int nh = io->Hq + io->Hkv + io->Hv;
    if (T == 0 || nh == 0) return OMNI_OK;
    const int vec = D / 32;
    const void *ptrs[8] = {io->qi, io->ki, io->vi, io->qo, io->ko, io->vo, q_w, k_w};
    int ok = io->ldi % vec == 0 && io->ldq % vec == 0 && io->ldk % vec == 0;
    for (int i = 0; i < 8; i++) ok = ok && is_aligned(ptrs[i], 2 * vec);
    if (!ok) return omni_fail(OMNI_ERR_USAGE, "%s: rows must be %d-byte aligned", fn, 2 * vec);
    dim3 grid(T, (nh + QKR_WARPS - 1) / QKR_WARPS);
    cudaStream_t s = (cudaStream_t)stream;
    void (*k)(qkr_io, const uint16_t *, const uint16_t *, float, const int32_t *, int64_t, const float *,
              const int32_t *) = D == 32   ? qk_norm_rope_kernel<1>
                                 : D == 64  ? qk_norm_rope_kernel<2>
                                 : D == 128 ? qk_norm_rope_kernel<4>
                                            : qk_norm_rope_kernel<8>;
    omni_launch_pdl(k, grid, QKR_WARPS * 32, 0, s, *io, q_w, k_w, eps, pos, pos_stride, inv_freq, slot_stream);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_qk_norm_rope_bf16(uint16_t *q, uint16_t *k, int T, int64_t ld, int Hq, int Hkv,
                                                  int D, const uint16_t *q_w, const uint16_t *k_w, float eps,
                                                  const int32_t *pos, int64_t pos_stride, const float *inv_freq,
                                                  const int32_t *slot_stream, void *stream) {
    qkr_io io = {q, k, NULL, q, k, NULL, ld, ld, ld, Hq, Hkv, 0};
    return qkr_launch(&io, T, D, q_w, k_w, eps, pos, pos_stride, inv_freq, slot_stream, stream, __func__);
}

extern "C" omni_status omni_cuda_qkv_norm_rope_bf16(const uint16_t *qkv, int64_t ld, uint16_t *q, uint16_t *k,
                                                   uint16_t *v, int T, int Hq, int Hkv, int D, const uint16_t *q_w,
                                                   const uint16_t *k_w, float eps, const int32_t *pos,
                                                   int64_t pos_stride, const float *inv_freq,
                                                   const int32_t *slot_stream, void *stream) {
    if (ld < (int64_t)(Hq + 2 * Hkv) * D) return omni_fail(OMNI_ERR_USAGE, "%s: ld %lld", __func__, (long long)ld);
    const int64_t qd = (int64_t)Hq * D, kd = (int64_t)Hkv * D;
    qkr_io io = {qkv, qkv + qd, qkv + qd + kd, q, k, v, ld, qd, kd, Hq, Hkv, Hkv};
    return qkr_launch(&io, T, D, q_w, k_w, eps, pos, pos_stride, inv_freq, slot_stream, stream, __func__);
}

/* ---- SwiGLU ------------------------------------------------------------------------------------------------ */

/* VEC consecutive outputs per thread; the row of output vector i is i / (I / VEC). */
template <int VEC> __global__ void swiglu_kernel(uint16_t *y, const uint16_t *gu, int64_t nvec, int I) {
    const int per_row = I / VEC;
    omni_pdl_wait();
    omni_pdl_trigger();
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
        omni_launch_pdl(swiglu_kernel<8>, ew_blocks(nv), EW_THREADS, 0, s, y, gu, nv, I);
    } else {
        int64_t nv = (int64_t)rows * I;
        omni_launch_pdl(swiglu_kernel<1>, ew_blocks(nv), EW_THREADS, 0, s, y, gu, nv, I);
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
    omni_pdl_wait();
    omni_pdl_trigger();
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
        omni_launch_pdl(embed_rows_kernel<8>, n, row_threads(dim / 8), 0, s, y, table, vocab, dim, ids, src_row, rows);
    else
        omni_launch_pdl(embed_rows_kernel<1>, n, row_threads(dim), 0, s, y, table, vocab, dim, ids, src_row, rows);
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
    omni_launch(add_rows_kernel, n, row_threads(dim), 0, (cudaStream_t)stream, x, dim, dst_row, src);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- L2 prefetch ------------------------------------------------------------------------------------------- */

__global__ void l2_prefetch_kernel(const char *p, int64_t lines, const int32_t *row_pos, int n, int64_t max_keys) {
    if (row_pos) {
        int64_t keys = 0;
        for (int i = 0; i < n; i++) keys += (int64_t)row_pos[i] + 1;
        if (keys > max_keys) return;
    }
    GRID_STRIDE(i, lines) prefetch_l2(p + i * 128);
}

extern "C" omni_status omni_cuda_l2_prefetch(const void *p, size_t bytes, const int32_t *row_pos, int n,
                                             int64_t max_keys, void *stream) {
    if (!p || n < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %d", __func__, n);
    const int64_t lines = (int64_t)(bytes / 128);
#ifdef KVC_EMU
    return OMNI_OK; /* a hint: nothing to emulate */
#endif
    if (lines == 0) return OMNI_OK;
    omni_launch(l2_prefetch_kernel, 132, 256, 0, (cudaStream_t)stream, (const char *)p, lines, row_pos, n, max_keys);
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
    omni_launch(f32_to_bf16_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, y, x, n);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_bf16_to_f32(float *y, const uint16_t *x, int64_t n, void *stream) {
    if (n < 0) return omni_fail(OMNI_ERR_USAGE, "%s: n %lld", __func__, (long long)n);
    if (n == 0) return OMNI_OK;
    omni_launch(bf16_to_f32_kernel, ew_blocks(n), EW_THREADS, 0, (cudaStream_t)stream, y, x, n);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}
