/* gemv.cu - linears with few rows (decode): stream W once from HBM at close to copy bandwidth.
 *
 * Version 1: a warp owns R consecutive output columns n (R weight rows); its lanes walk K in 16-byte chunks
 * (8 bf16), chunk c = lane, lane + 32, ... with U chunks per lane in flight, W past L1 (no_allocate), x through
 * the read-only cache (every warp of the block reads the same x chunks: L1 hits). fp32 FMA
 * accumulation per lane, then a butterfly sum over the warp and one rounding (bias added in fp32 first), the same
 * numerics class as cuBLAS with fp32 accumulation. 8 warps per block; grid.x covers N, grid.y the batch.
 * Version 2 (decode chain): launched as a programmatic dependent launch; W of the first step in registers and of
 * the second in L2 before the wait for x (see omni_pdl_wait).
 * Version 3 (fused prologues): after the wait each block builds x itself in shared memory from the op before the
 * linear (residual add + RMSNorm, or SwiGLU) with that op's arithmetic, so the decode chain loses a kernel and
 * its boundary per fusion; the redundant prologue reads a few KB per block from L2. */
#include <stdint.h>

#include "common.cuh"
#include "cuda_check.h"
#include "gemv.cuh"
#include "kernels/ops_cuda.h"

#define GEMV_WARPS 8

/* MINB: blocks per SM promised to ptxas. With a loose register budget ptxas interleaves each chunk's loads with
 * the previous chunk's FMAs (one chunk in flight per warp, seen in SASS); MINB 3 (<= 85 registers) makes it issue
 * all U·(R + M) loads of a step first. */
/* Prologue 1: rows m < M of xs = rmsnorm(bf16(pin + padd)) * pnorm, as rmsnorm_block_kernel computes it (ops.cu:
 * thread t sums vectors t, t + blockDim, ... then block_sum; the same shape when K / 8 >= blockDim); block 0 also
 * writes bf16(pin + padd) to pout. All threads of the block. */
template <int M> __device__ void gemv_pro_add_norm(const omni_gemv_args &a, uint16_t *xs) {
    __shared__ float sh[32];
    const int K = a.K, nv = K / 8, t = threadIdx.x, nt = blockDim.x;
    for (int m = 0; m < M; m++) {
        const uint16_t *xi = a.pin + (int64_t)m * K, *ad = a.padd + (int64_t)m * K;
        uint16_t *xr = xs + (int64_t)m * K;
        float ss = 0.f, f[8], g[8];
        for (int i = t; i < nv; i += nt) {
            load_vec<8>(f, xi, i);
            load_vec<8>(g, ad, i);
#pragma unroll
            for (int k = 0; k < 8; k++) f[k] = bf(f[k] + g[k]);
            store_vec<8>(xr, i, f);
            if (blockIdx.x == 0) store_vec<8>(a.pout + (int64_t)m * K, i, f);
#pragma unroll
            for (int k = 0; k < 8; k++) ss += f[k] * f[k];
        }
        const float inv = rsqrtf(block_sum(ss, sh) / (float)K + a.eps);
        for (int i = t; i < nv; i += nt) {
            load_vec<8>(f, xr, i);
            load_vec<8>(g, a.pnorm, i);
#pragma unroll
            for (int k = 0; k < 8; k++) f[k] = bf(f[k] * inv) * g[k];
            store_vec<8>(xr, i, f);
        }
    }
    __syncthreads();
}

/* Prologue 2: rows m < M of xs = bf16(bf16(silu(g)) * u) over pin's rows [gate K | up K] (swiglu_kernel). */
template <int M> __device__ void gemv_pro_swiglu(const omni_gemv_args &a, uint16_t *xs) {
    const int K = a.K, nv = K / 8;
    for (int m = 0; m < M; m++) {
        const uint16_t *g = a.pin + (int64_t)m * 2 * K;
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            float x[8], u[8];
            load_vec<8>(x, g, i);
            load_vec<8>(u, g + K, i);
#pragma unroll
            for (int k = 0; k < 8; k++) x[k] = bf(x[k] / (1.f + expf(-x[k]))) * u[k];
            store_vec<8>(xs + (int64_t)m * K, i, x);
        }
    }
    __syncthreads();
}

/* x chunk c of row m: shared memory (prologue) or global through the read-only path. */
template <int PRO>
__device__ __forceinline__ uint4 gemv_x(const uint16_t *x, const uint16_t *xs, int64_t ldx, int K, int m, int c) {
    if (PRO) return ((const uint4 *)(xs + (int64_t)m * K))[c];
    return ld_ro((const uint4 *)(x + m * ldx) + c);
}

template <int M, int R, int U, int MINB, bool F32OUT, int PRO = 0>
__global__ void __launch_bounds__(GEMV_WARPS * 32, MINB) gemv_kernel(omni_gemv_args a) {
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * R;
    uint16_t *xs = NULL;
    if (PRO) {
        OMNI_DYN_SMEM(uint16_t, dyn);
        xs = dyn;
    }
    if (n0 >= a.N) { /* a prologue needs every thread of the block */
        omni_pdl_wait();
        omni_pdl_trigger();
        if (PRO == 1) gemv_pro_add_norm<M>(a, xs);
        if (PRO == 2) gemv_pro_swiglu<M>(a, xs);
        return;
    }
    const int b = blockIdx.y, K = a.K, nc = K / 8, rows = a.N - n0 < R ? a.N - n0 : R;
    if (a.wsel || a.xsel) omni_pdl_wait(); /* selections (MoE routing) come from an earlier kernel */
    const int64_t we = a.wsel ? a.wsel[b] : b, xr = a.xsel ? a.xsel[b] : b / (a.xdiv > 1 ? a.xdiv : 1);
    const uint16_t *w = a.w + we * a.w_bstride + (int64_t)n0 * K;
    const uint16_t *x = a.x + xr * a.x_bstride;
    float acc[M][R];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[m][r] = 0.f;
    const uint16_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = w + (int64_t)(r < rows ? r : 0) * K; /* rows past N re-read row 0 */
    int c0 = lane;
    /* The weights are nobody's output: the first full step's W is loaded and the second one's prefetched into L2
     * before waiting for the kernel that writes x (programmatic dependent launch), so a decode GEMV streams W while
     * the small kernel before it finishes. */
    uint4 wv[U][R];
    const int full = c0 + 32 * (U - 1) < nc;
    if (full) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = ld_stream((const uint4 *)wr[r] + c0 + 32 * u);
        if (c0 + 32 * (2 * U - 1) < nc && (lane & 7) == 0) /* one lane per 128-byte line */
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++) prefetch_l2((const uint4 *)wr[r] + c0 + 32 * (U + u));
    }
    omni_pdl_wait();
    omni_pdl_trigger();
    if (PRO == 1) gemv_pro_add_norm<M>(a, xs);
    if (PRO == 2) gemv_pro_swiglu<M>(a, xs);
    /* full steps: U chunks per lane, every load issued before the first FMA */
    for (int first = 1; c0 + 32 * (U - 1) < nc; c0 += 32 * U, first = 0) {
        uint4 xv[U][M];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (!first)
#pragma unroll
                for (int r = 0; r < R; r++) wv[u][r] = ld_stream((const uint4 *)wr[r] + c0 + 32 * u);
#pragma unroll
            for (int m = 0; m < M; m++) xv[u][m] = gemv_x<PRO>(x, xs, a.ldx, K, m, c0 + 32 * u);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int r = 0; r < R; r++) acc[m][r] = dot8(acc[m][r], xv[u][m], wv[u][r]);
    }
    for (; c0 < nc; c0 += 32) { /* tail: one chunk at a time */
        uint4 wv[R], xv[M];
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = ld_stream((const uint4 *)wr[r] + c0);
#pragma unroll
        for (int m = 0; m < M; m++) xv[m] = gemv_x<PRO>(x, xs, a.ldx, K, m, c0);
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[m][r] = dot8(acc[m][r], xv[m], wv[r]);
    }
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], o);
    /* every lane holds every sum now: lane m·R + r writes (m, r) */
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (lane != m * R + r || r >= rows) continue;
            float v = acc[m][r];
            if (a.bias) v += __bfloat162float(((const bf16 *)a.bias)[we * a.bias_bstride + n0 + r]);
            const int64_t off = (int64_t)b * a.y_bstride + (int64_t)m * a.ldy + n0 + r;
            if (F32OUT)
                ((float *)a.y)[off] = v;
            else
                ((bf16 *)a.y)[off] = __float2bfloat16_rn(v);
        }
}

/* The prologue's rows in shared memory: at most the default 48 KiB of dynamic shared memory per block. */
#define GEMV_PRO_SMEM 49152

int omni_gemv_ok(int M, int K, const void *x, int64_t ldx, const void *w) {
    return M >= 1 && M <= 8 && K > 0 && K % 8 == 0 && ldx % 8 == 0 && is_aligned(x, 16) && is_aligned(w, 16);
}

template <int M, int R, int U, int MINB>
static void launch_m(const omni_gemv_args *a, cudaStream_t s) {
    dim3 grid((a->N + GEMV_WARPS * R - 1) / (GEMV_WARPS * R), a->batch);
    const size_t smem = (size_t)M * a->K * 2;
    if (a->pro == 1)
        omni_launch_pdl(gemv_kernel<M, R, U, MINB, false, 1>, grid, GEMV_WARPS * 32, smem, s, *a);
    else if (a->pro == 2)
        omni_launch_pdl(gemv_kernel<M, R, U, MINB, false, 2>, grid, GEMV_WARPS * 32, smem, s, *a);
    else if (a->f32_out)
        omni_launch_pdl(gemv_kernel<M, R, U, MINB, true>, grid, GEMV_WARPS * 32, 0, s, *a);
    else
        omni_launch_pdl(gemv_kernel<M, R, U, MINB, false>, grid, GEMV_WARPS * 32, 0, s, *a);
}

omni_status omni_gemv_launch(const omni_gemv_args *a, cudaStream_t s) {
    const int pro_ok = !a->pro || (a->M <= 4 && a->batch == 1 && !a->wsel && !a->xsel && !a->f32_out && !a->bias &&
                                   (size_t)a->M * a->K * 2 <= GEMV_PRO_SMEM && is_aligned(a->pin, 16) &&
                                   (a->pro == 2 || (is_aligned(a->padd, 16) && is_aligned(a->pnorm, 16) &&
                                                    is_aligned(a->pout, 16))));
    if (!omni_gemv_ok(a->M, a->K, a->pro ? a->w : a->x, a->ldx, a->w) || a->N <= 0 || a->batch <= 0 ||
        a->batch > 65535 || !pro_ok)
        return omni_fail(OMNI_ERR_USAGE, "omni_gemv_launch: M %d N %d K %d batch %d prologue %d", a->M, a->N, a->K,
                         a->batch, a->pro);
    if (a->pro) switch (a->M) { /* the rows come from shared memory: M <= 4 */
        case 1: launch_m<1, 2, 4, 3>(a, s); break;
        case 2: launch_m<2, 2, 4, 3>(a, s); break;
        case 3: launch_m<3, 2, 2, 3>(a, s); break;
        default: launch_m<4, 2, 2, 3>(a, s); break;
        }
    else switch (a->M) { /* unroll depth chosen to keep ~4-8 KB of W in flight per warp within the register budget */
    case 1: launch_m<1, 2, 4, 3>(a, s); break;
    case 2: launch_m<2, 2, 4, 3>(a, s); break;
    case 3: launch_m<3, 2, 2, 3>(a, s); break;
    case 4: launch_m<4, 2, 2, 3>(a, s); break;
    case 5: launch_m<5, 2, 2, 2>(a, s); break;
    case 6: launch_m<6, 2, 2, 2>(a, s); break;
    case 7: launch_m<7, 2, 2, 2>(a, s); break;
    default: launch_m<8, 2, 2, 2>(a, s); break;
    }
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

extern "C" int omni_cuda_fused_linear_ok(int M, int K) {
    return M >= 1 && M <= 4 && K > 0 && K % 8 == 0 && (size_t)M * K * 2 <= GEMV_PRO_SMEM;
}

extern "C" omni_status omni_cuda_add_rmsnorm_linear(uint16_t *y, uint16_t *x_out, const uint16_t *x_in,
                                                    const uint16_t *add, const uint16_t *norm_w, float eps,
                                                    const uint16_t *w, int M, int N, int K, void *stream) {
    if (!omni_cuda_fused_linear_ok(M, K) || N <= 0 || !y || !x_out || !x_in || !add || !norm_w || !w ||
        x_out == x_in || x_out == add)
        return omni_fail(OMNI_ERR_USAGE, "%s: M %d N %d K %d (x_out must not alias x_in or add)", __func__, M, N, K);
    omni_gemv_args a = {y, N, 0, NULL, K, 0, NULL, 1, w, 0, NULL, NULL, 0, M, N, K, 1, 0};
    a.pro = 1, a.pin = x_in, a.padd = add, a.pnorm = norm_w, a.pout = x_out, a.eps = eps;
    return omni_gemv_launch(&a, (cudaStream_t)stream);
}

extern "C" omni_status omni_cuda_swiglu_linear(uint16_t *y, const uint16_t *gu, const uint16_t *w, int M, int N,
                                               int K, void *stream) {
    if (!omni_cuda_fused_linear_ok(M, K) || N <= 0 || !y || !gu || !w)
        return omni_fail(OMNI_ERR_USAGE, "%s: M %d N %d K %d", __func__, M, N, K);
    omni_gemv_args a = {y, N, 0, NULL, K, 0, NULL, 1, w, 0, NULL, NULL, 0, M, N, K, 1, 0};
    a.pro = 2, a.pin = gu;
    return omni_gemv_launch(&a, (cudaStream_t)stream);
}
