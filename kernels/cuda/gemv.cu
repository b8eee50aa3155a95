/* gemv.cu - linears with few rows (decode): stream W once from HBM at close to copy bandwidth.
 *
 * Version 1: a warp owns R consecutive output columns n (R weight rows); its lanes walk K in 16-byte chunks
 * (8 bf16), chunk c = lane, lane + 32, ... with U chunks per lane in flight, W past L1 (no_allocate), x through
 * the read-only cache (every warp of the block reads the same x chunks: L1 hits). fp32 FMA
 * accumulation per lane, then a butterfly sum over the warp and one rounding (bias added in fp32 first), the same
 * numerics class as cuBLAS with fp32 accumulation. 8 warps per block; grid.x covers N, grid.y the batch.
 * Version 2 (decode chain): launched as a programmatic dependent launch; W of the first step in registers and of
 * the second in L2 before the wait for x (see omni_pdl_wait). */
#include <stdint.h>

#include "common.cuh"
#include "cuda_check.h"
#include "gemv.cuh"

#define GEMV_WARPS 8

/* MINB: blocks per SM promised to ptxas. With a loose register budget ptxas interleaves each chunk's loads with
 * the previous chunk's FMAs (one chunk in flight per warp, seen in SASS); MINB 3 (<= 85 registers) makes it issue
 * all U·(R + M) loads of a step first. */
template <int M, int R, int U, int MINB, bool F32OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32, MINB) gemv_kernel(omni_gemv_args a) {
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * R;
    if (n0 >= a.N) {
        omni_pdl_wait();
        omni_pdl_trigger();
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
    /* full steps: U chunks per lane, every load issued before the first FMA */
    for (int first = 1; c0 + 32 * (U - 1) < nc; c0 += 32 * U, first = 0) {
        uint4 xv[U][M];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (!first)
#pragma unroll
                for (int r = 0; r < R; r++) wv[u][r] = ld_stream((const uint4 *)wr[r] + c0 + 32 * u);
#pragma unroll
            for (int m = 0; m < M; m++) xv[u][m] = ld_ro((const uint4 *)(x + m * a.ldx) + c0 + 32 * u);
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
        for (int m = 0; m < M; m++) xv[m] = ld_ro((const uint4 *)(x + m * a.ldx) + c0);
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

int omni_gemv_ok(int M, int K, const void *x, int64_t ldx, const void *w) {
    return M >= 1 && M <= 8 && K > 0 && K % 8 == 0 && ldx % 8 == 0 && is_aligned(x, 16) && is_aligned(w, 16);
}

template <int M, int R, int U, int MINB>
static void launch_m(const omni_gemv_args *a, cudaStream_t s) {
    dim3 grid((a->N + GEMV_WARPS * R - 1) / (GEMV_WARPS * R), a->batch);
    if (a->f32_out)
        omni_launch_pdl(gemv_kernel<M, R, U, MINB, true>, grid, GEMV_WARPS * 32, 0, s, *a);
    else
        omni_launch_pdl(gemv_kernel<M, R, U, MINB, false>, grid, GEMV_WARPS * 32, 0, s, *a);
}

omni_status omni_gemv_launch(const omni_gemv_args *a, cudaStream_t s) {
    if (!omni_gemv_ok(a->M, a->K, a->x, a->ldx, a->w) || a->N <= 0 || a->batch <= 0 || a->batch > 65535)
        return omni_fail(OMNI_ERR_USAGE, "omni_gemv_launch: M %d N %d K %d batch %d", a->M, a->N, a->K, a->batch);
    switch (a->M) { /* unroll depth chosen to keep ~4-8 KB of W in flight per warp within the register budget */
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
