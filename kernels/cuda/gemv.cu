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
 * its boundary per fusion; the redundant prologue reads a few KB per block from L2.
 * Version 4 (bulk, sm_90; batch 1, no selections, M <= 4, a weight row <= 32 KB): one block per SM streams W
 * through a ring of GB_NS shared-memory stages with the copy engine (cp.async.bulk, completing on an mbarrier per
 * stage); a stage is `sr` whole consecutive rows (<= 32 KB), block b takes stages b, b + grid, ... The block's
 * first GB_NS stages are requested before the PDL wait (W is nobody's output), so W streams from the kernel's first
 * instruction while the kernel before finishes, and the ring keeps GB_NS stages in flight per SM after that
 * (version 1-3 issue one step of loads per warp, then compute: a round trip per step). Per stage the 8 warps split
 * the rows (8 / sr warps per row, lanes on consecutive 16-byte chunks), sum in fp32, reduce over the warp, and the
 * row's partials are added in warp order. OFF by default: OMNI_CUDA_GEMV=4 at the first launch turns it on. Session 7
 * call B (8B bs1/4K, graphs): 8% SLOWER than versions 1-3 (bf16 186.2 vs 203.1 tok/s; bench/NOTES.md). */
#include <stdint.h>
#include <string.h>

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

/* ---- version 4: bulk copies into a shared-memory ring */
#define GB_NS 3           /* stages in flight per block */
#define GB_STAGE 32768    /* bytes per stage (at most; sr whole rows) */
#define GB_HEAD 512       /* mbarriers [GB_NS] (64 bytes) | partial sums [2][GEMV_WARPS][4] f32 (256 bytes) */

#if !defined(KVC_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GB_DEVICE 1
__device__ __forceinline__ uint32_t gb_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void gb_bar_init(uint64_t *bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(gb_smem(bar)) : "memory");
}
/* bytes from global src to shared dst by the copy engine; completes a phase of bar (one arrival + the bytes). */
__device__ __forceinline__ void gb_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(gb_smem(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     gb_smem(dst)),
                 "l"(src), "r"(bytes), "r"(gb_smem(bar))
                 : "memory");
}
/* Wait for the phase of bar with the given parity. A copy that never lands (a bad address) traps after ~2^24 polls
 * (seconds) instead of hanging the stream: the launch fails and the caller sees the error. */
__device__ __forceinline__ void gb_wait(uint64_t *bar, uint32_t parity) {
    for (uint32_t n = 0;; n++) {
        uint32_t done;
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(gb_smem(bar)), "r"(parity)
                     : "memory");
        if (done) return;
        if (n > (1u << 24)) __trap();
    }
}
#else
#define GB_DEVICE 0
#endif

/* Stage i of this block (rows t·sr .. of W, t = blockIdx.x + i·gridDim.x) into ring slot i % GB_NS. */
__device__ __forceinline__ void gb_issue(const omni_gemv_args &a, int sr, int i, uint8_t *ring, uint64_t *bar) {
#if GB_DEVICE
    const int64_t r0 = ((int64_t)blockIdx.x + (int64_t)i * gridDim.x) * sr;
    const int nr = a.N - r0 < sr ? (int)(a.N - r0) : sr;
    gb_copy(ring + (size_t)(i % GB_NS) * GB_STAGE, a.w + r0 * a.K, (uint32_t)nr * a.K * 2, &bar[i % GB_NS]);
#else
    (void)a, (void)sr, (void)i, (void)ring, (void)bar;
#endif
}

template <int M, bool F32OUT, int PRO>
__global__ void __launch_bounds__(GEMV_WARPS * 32, 1) gemv_bulk_kernel(omni_gemv_args a, int sr) {
#if GB_DEVICE
    OMNI_DYN_SMEM(uint8_t, sm);
    uint64_t *bar = (uint64_t *)sm;
    float *red = (float *)(sm + 64);                           /* [2][GEMV_WARPS][M] */
    uint16_t *xs = (uint16_t *)(sm + GB_HEAD);                 /* [M][K] */
    uint8_t *ring = sm + GB_HEAD + (((size_t)M * a.K * 2 + 127) & ~(size_t)127);
    const int K = a.K, nc = K / 8, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t n_st = ((int64_t)a.N + sr - 1) / sr;
    const int mine = (int)((n_st - 1 - blockIdx.x) / gridDim.x) + 1; /* the grid has at most n_st blocks */
    if (tid == 0) {
        for (int i = 0; i < GB_NS; i++) gb_bar_init(&bar[i]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int i = 0; i < GB_NS && i < mine; i++) gb_issue(a, sr, i, ring, bar); /* before the wait: W is constant */
    }
    omni_pdl_wait();
    omni_pdl_trigger();
    if (PRO == 1) gemv_pro_add_norm<M>(a, xs);
    if (PRO == 2) gemv_pro_swiglu<M>(a, xs);
    if (PRO == 0) {
        for (int i = tid; i < M * nc; i += blockDim.x)
            ((uint4 *)xs)[i] = ld_ro((const uint4 *)(a.x + (int64_t)(i / nc) * a.ldx) + i % nc);
        __syncthreads();
    }
    const int wpr = GEMV_WARPS / sr, row = warp / wpr, part = warp % wpr;
    for (int i = 0; i < mine; i++) {
        const int64_t r0 = ((int64_t)blockIdx.x + (int64_t)i * gridDim.x) * sr;
        const int nr = a.N - r0 < sr ? (int)(a.N - r0) : sr;
        float *rd = red + (i & 1) * GEMV_WARPS * M;
        gb_wait(&bar[i % GB_NS], (uint32_t)(i / GB_NS) & 1u);
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) acc[m] = 0.f;
        if (row < nr) {
            const uint4 *wrow = (const uint4 *)(ring + (size_t)(i % GB_NS) * GB_STAGE + (size_t)row * K * 2);
#pragma unroll 4
            for (int c = part * 32 + lane; c < nc; c += 32 * wpr) {
                const uint4 wv = wrow[c];
#pragma unroll
                for (int m = 0; m < M; m++) acc[m] = dot8(acc[m], ((const uint4 *)(xs + (size_t)m * K))[c], wv);
            }
        }
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
        if (lane == 0)
#pragma unroll
            for (int m = 0; m < M; m++) rd[warp * M + m] = acc[m];
        __syncthreads(); /* the slot is read and the partials written */
        if (tid == 0 && i + GB_NS < mine) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            gb_issue(a, sr, i + GB_NS, ring, bar);
        }
        if (tid < sr * M) { /* (row, m): the partials of the row's warps in warp order */
            const int rr = tid / M, m = tid % M;
            if (rr < nr) {
                float v = 0.f;
                for (int p = 0; p < wpr; p++) v += rd[(rr * wpr + p) * M + m];
                if (a.bias) v += __bfloat162float(((const bf16 *)a.bias)[r0 + rr]);
                const int64_t off = (int64_t)m * a.ldy + r0 + rr;
                if (F32OUT)
                    ((float *)a.y)[off] = v;
                else
                    ((bf16 *)a.y)[off] = __float2bfloat16_rn(v);
            }
        }
    }
#else
    (void)a, (void)sr; /* host pass / the emulator: never launched (gb_takes) */
#endif
}

/* Rows per bulk stage for K (0: no bulk path): 8, 4, 2 or 1 whole rows within GB_STAGE. */
static int gb_rows(int K) {
    for (int sr = GEMV_WARPS; sr >= 1; sr /= 2)
        if ((int64_t)sr * K * 2 <= GB_STAGE) return sr;
    return 0;
}

/* The largest dynamic shared memory of a version-4 launch: head, M = 4 rows of the prologue limit, the ring. */
#define GB_SMEM_MAX (GB_HEAD + GEMV_PRO_SMEM + GB_NS * GB_STAGE)

/* Version 4 only with OMNI_CUDA_GEMV=4 (read once per process, like a build option) on an sm_90+ device (a build for
 * several architectures compiles the kernel empty for older ones). */
#ifndef KVC_EMU
static int gb_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("OMNI_CUDA_GEMV");
        int dev = 0, major = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            major = 0;
            (void)cudaGetLastError(); /* no device: the launches report it */
        }
        on = e && !strcmp(e, "4") && major >= 9;
    }
    return on;
}
#endif

template <int M, bool F32OUT, int PRO> static void gb_launch_k(const omni_gemv_args *a, int sr, cudaStream_t s) {
#ifdef KVC_EMU
    (void)a, (void)sr, (void)s; /* not taken under the emulator (gb_takes) */
#else
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t n_st = ((int64_t)a->N + sr - 1) / sr;
    const int grid = (int)(n_st < sms ? n_st : sms > 0 ? sms : 1);
    const size_t smem = GB_HEAD + (((size_t)M * a->K * 2 + 127) & ~(size_t)127) + (size_t)GB_NS * GB_STAGE;
    omni_launch_pdl(gemv_bulk_kernel<M, F32OUT, PRO>, grid, GEMV_WARPS * 32, smem, s, *a, sr);
#endif
}

template <int M, bool F32OUT, int PRO> static int gb_attr_k(void) {
#ifndef KVC_EMU
    return cudaFuncSetAttribute(gemv_bulk_kernel<M, F32OUT, PRO>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                GB_SMEM_MAX) != cudaSuccess ||
           cudaFuncSetAttribute(gemv_bulk_kernel<M, F32OUT, PRO>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                100) != cudaSuccess;
#else
    return 0;
#endif
}

template <int M> static int gb_attr_m(void) {
    return gb_attr_k<M, false, 0>() | gb_attr_k<M, true, 0>() | gb_attr_k<M, false, 1>() | gb_attr_k<M, false, 2>();
}

/* Kernel attributes of version 4 (more than 48 KB of dynamic shared memory; the largest carveout), set once per
 * process before its first launch: omni_cuda_ctx_init calls it, so a launch inside a graph capture finds them set;
 * a launch without a context sets them itself. Idempotent (a second call sets the same values). */
static int g_gb_attr; /* the attributes are set (process-wide, like the kernels they belong to) */
void omni_gemv_init(void) {
#ifndef KVC_EMU
    if (!gb_enabled()) return;
#endif
    if (gb_attr_m<1>() | gb_attr_m<2>() | gb_attr_m<3>() | gb_attr_m<4>())
        (void)cudaGetLastError(); /* no device: the launches fail later with their own message */
    g_gb_attr = 1;
}

template <int M> static void gb_launch_m(const omni_gemv_args *a, int sr, cudaStream_t s) {
    if (a->pro == 1)
        gb_launch_k<M, false, 1>(a, sr, s);
    else if (a->pro == 2)
        gb_launch_k<M, false, 2>(a, sr, s);
    else if (a->f32_out)
        gb_launch_k<M, true, 0>(a, sr, s);
    else
        gb_launch_k<M, false, 0>(a, sr, s);
}

/* 1 when version 4 takes the call (the same answer for a fused linear and the plain one of its shape). */
static int gb_takes(const omni_gemv_args *a) {
#ifdef KVC_EMU
    (void)a;
    return 0;
#else
    return gb_enabled() && a->batch == 1 && !a->wsel && !a->xsel && a->M >= 1 && a->M <= 4 && gb_rows(a->K) > 0 &&
           (size_t)a->M * a->K * 2 <= GEMV_PRO_SMEM;
#endif
}

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
    if (gb_takes(a)) {
        const int sr = gb_rows(a->K);
        if (!g_gb_attr) omni_gemv_init();
        switch (a->M) {
        case 1: gb_launch_m<1>(a, sr, s); break;
        case 2: gb_launch_m<2>(a, sr, s); break;
        case 3: gb_launch_m<3>(a, sr, s); break;
        default: gb_launch_m<4>(a, sr, s); break;
        }
    } else if (a->pro) switch (a->M) { /* the rows come from shared memory: M <= 4 */
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
