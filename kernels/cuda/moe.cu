/* moe.cu - the sparse MoE MLP on the device (kernels/ops_cuda.h, "sparse MoE" section): router softmax + top-k,
 * grouping of the (token, choice) entries by expert, the grouped tensor-core linear, the per-entry GEMV for decode
 * and the bf16 combine in expert order. Nothing here reads back to the host: every size the kernels need beyond
 * the launch bounds (group sizes, offsets) lives in device memory. */
#include <stdint.h>

#ifndef KVC_EMU
#include <mma.h>
#endif

#include "common.cuh"
#include "cuda_check.h"
#include "gemv.cuh"
#include "kernels/ops_cuda.h"

/* ---- router -------------------------------------------------------------------------------------------------- */

#define ROUTE_WARPS 4
#define MOE_MAX_K 32

/* (v, i) comes before (bv, bi) in top-k order: larger value, or equal value and lower index. */
__device__ __forceinline__ bool before(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/* The routing of one token by one warp: softmax of l[0..E) in fp32, then round j of the top-k picks the first
 * element (in top-k order) after pick j-1, so no "taken" flags are needed. Lane 0 writes sel_e[0..k), sel_w[0..k).
 * l is volatile: the decode router reads logits that other blocks of its grid wrote. pc: NULL, or E floats (shared
 * memory) that keep the probabilities between the rounds instead of recomputing them (the same values; each lane
 * reads back only what it wrote). */
__device__ void route_token(int32_t *sel_e, float *sel_w, const volatile float *l, int E, int k, int norm, int lane,
                            float *pc = NULL) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float s = 0.f;
    for (int e = lane; e < E; e += 32) s += expf(l[e] - mx);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.f / s;
    if (pc)
        for (int e = lane; e < E; e += 32) pc[e] = expf(l[e] - mx) * inv;
    float pv = INFINITY, w[MOE_MAX_K];
    int pi = -1, idx[MOE_MAX_K];
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = INT32_MAX;
        for (int e = lane; e < E; e += 32) {
            const float p = pc ? pc[e] : expf(l[e] - mx) * inv;
            if (before(pv, pi, p, e) && before(p, e, bv, bi)) bv = p, bi = e; /* after the previous pick */
        }
        for (int o = 16; o > 0; o >>= 1) {
            float v = __shfl_xor_sync(0xffffffffu, bv, o);
            int i = __shfl_xor_sync(0xffffffffu, bi, o);
            if (before(v, i, bv, bi)) bv = v, bi = i;
        }
        if (bi >= E) bv = 0.f, bi = j; /* only NaN left (NaN logits): a distinct valid expert, weight 0 */
        w[j] = bv, idx[j] = bi;
        pv = bv, pi = bi;
    }
    if (lane) return;
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += w[j];
    for (int j = 0; j < k; j++) {
        sel_e[j] = idx[j];
        sel_w[j] = bf(norm ? w[j] / sum : w[j]);
    }
}

/* One warp per token. */
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
moe_route_kernel(int32_t *sel_e, float *sel_w, const float *logits, int T, int E, int k, int norm) {
    const int t = blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;
    route_token(sel_e + (int64_t)t * k, sel_w + (int64_t)t * k, logits + (int64_t)t * E, E, k, norm, lane);
}

extern "C" omni_status omni_cuda_moe_route(int32_t *sel_e, float *sel_w, const float *logits, int T, int E, int k,
                                           int norm, void *stream) {
    if (T < 0 || E <= 0 || E > 4096 || k < 1 || k > E || k > MOE_MAX_K)
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d E %d k %d", __func__, T, E, k);
    if (T == 0) return OMNI_OK;
    omni_launch(moe_route_kernel, (T + ROUTE_WARPS - 1) / ROUTE_WARPS, ROUTE_WARPS * 32, 0, (cudaStream_t)stream,
                sel_e, sel_w, logits, T, E, k, norm);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- grouping ------------------------------------------------------------------------------------------------ */

#define GROUP_THREADS 1024
#define GROUP_MAX_E 4096

/* Exclusive prefix sum of v[0..n) in place (one block, n <= 4·blockDim); returns the total. */
__device__ int block_exclusive_scan(int *v, int n, int *warp_sums) {
    const int per = (n + blockDim.x - 1) / blockDim.x, i0 = threadIdx.x * per;
    int local = 0;
    for (int i = i0; i < i0 + per && i < n; i++) local += v[i];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int incl = local;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) warp_sums[wid] = incl;
    __syncthreads();
    if (wid == 0) {
        int ws = lane < nw ? warp_sums[lane] : 0, wi = ws;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += y;
        }
        if (lane < nw) warp_sums[lane] = wi - ws; /* exclusive per warp */
        if (lane == nw - 1) warp_sums[32] = wi;    /* total */
    }
    __syncthreads();
    int run = warp_sums[wid] + incl - local;
    for (int i = i0; i < i0 + per && i < n; i++) {
        int c = v[i];
        v[i] = run;
        run += c;
    }
    __syncthreads();
    return warp_sums[32];
}

__global__ void __launch_bounds__(GROUP_THREADS)
moe_group_kernel(int32_t *offsets, int32_t *perm_tok, int32_t *slot_pos, const int32_t *sel_e, int n, int E, int k) {
    __shared__ int cnt[GROUP_MAX_E];
    __shared__ int wsum[33];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) slot_pos[i] = atomicAdd(&cnt[sel_e[i]], 1); /* rank in group */
    __syncthreads();
    const int total = block_exclusive_scan(cnt, E, wsum);
    for (int e = threadIdx.x; e < E; e += blockDim.x) offsets[e] = cnt[e];
    if (threadIdx.x == 0) offsets[E] = total;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { /* the same thread wrote slot_pos[i] above */
        int r = cnt[sel_e[i]] + slot_pos[i];
        slot_pos[i] = r;
        perm_tok[r] = i / k;
    }
}

extern "C" omni_status omni_cuda_moe_group(int32_t *offsets, int32_t *perm_tok, int32_t *slot_pos,
                                           const int32_t *sel_e, int T, int E, int k, void *stream) {
    const int64_t n = (int64_t)T * k;
    if (T < 0 || E <= 0 || E > GROUP_MAX_E || k < 1 || n > (1 << 20))
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d E %d k %d", __func__, T, E, k);
    omni_launch(moe_group_kernel, 1, GROUP_THREADS, 0, (cudaStream_t)stream, offsets, perm_tok, slot_pos, sel_e,
                (int)n, E, k);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- grouped linear (WMMA bf16, fp32 accumulation) ----------------------------------------------------------- */

#define GM_BM 64
#define GM_BN 64
#define GM_BK 32
#define GM_LDS (GM_BK + 8) /* smem row stride (elements): 80 bytes, fragment rows stay 32-byte aligned */
#define GM_THREADS 128     /* 4 warps, 2 x 2, each 32 x 32 = 2 x 2 fragments of 16 x 16 */

#ifdef KVC_EMU /* the emulator: a plain copy (the wait is then trivially satisfied) */
static inline void cp_async16(void *smem, const void *gmem, bool valid) {
    if (valid)
        memcpy(smem, gmem, 16);
    else
        memset(smem, 0, 16);
}
static inline void cp_async_commit() {}
static inline void cp_async_wait_all() {}
#else
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0; /* 0: fill with zeros */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
#endif

union gm_smem {
    struct {
        bf16 a[2][GM_BM][GM_LDS], b[2][GM_BN][GM_LDS];
    } in;
    float c[GM_BM][GM_BN + 4];
};

/* grid.x: m tiles over the groups (each group padded to GM_BM rows), an upper bound; grid.y: n tiles. */
__global__ void __launch_bounds__(GM_THREADS)
moe_grouped_kernel(uint16_t *y, const uint16_t *x, int64_t ldx, const int32_t *perm, const uint16_t *w,
                   const int32_t *offsets, int E, int N, int K) {
    using namespace nvcuda;
    __shared__ __align__(128) gm_smem sm;
    __shared__ int tile0[GROUP_MAX_E / 4 + 33], s_e, s_m0, s_cnt;
    /* past every tile (the grid is sized by an upper bound: the prefill overflow is mostly empty): leave at once;
     * the tiles number at most total / BM + the non-empty groups */
    const int total = offsets[E] - offsets[0];
    if (blockIdx.x >= (total + GM_BM - 1) / GM_BM + (total < E ? total : E)) return;
    /* which expert and row range this block owns: tiles of expert e start at the prefix of ceil(count / BM) */
    const int nth = blockDim.x;
    int acc = 0, found = 0;
    for (int base = 0; base < E && !found; base += nth) { /* chunks of nth experts */
        int e = base + threadIdx.x;
        int c = e < E ? (offsets[e + 1] - offsets[e] + GM_BM - 1) / GM_BM : 0;
        tile0[threadIdx.x] = c;
        __syncthreads();
        int t = block_exclusive_scan(tile0, nth, tile0 + nth);
        if (e < E && blockIdx.x >= acc + tile0[threadIdx.x] && blockIdx.x < acc + tile0[threadIdx.x] + c)
            s_e = e, s_m0 = offsets[e] + (blockIdx.x - acc - tile0[threadIdx.x]) * GM_BM,
            s_cnt = offsets[e + 1] - s_m0;
        __syncthreads();
        found = blockIdx.x < acc + t;
        acc += t;
        __syncthreads();
    }
    if (!found) return; /* past the last tile */
    const int e = s_e, m0 = s_m0, rows = s_cnt < GM_BM ? s_cnt : GM_BM, n0 = blockIdx.y * GM_BN;
    const uint16_t *we = w + (int64_t)e * N * K;
    /* loader: 2 A chunks and 2 B chunks of 16 bytes per thread per k step */
    const int lr = threadIdx.x >> 2, lc = (threadIdx.x & 3) * 8; /* rows lr and lr + 32, columns lc..lc+7 */
    const uint16_t *arow[2], *brow[2];
    for (int i = 0; i < 2; i++) {
        int r = lr + 32 * i, rr = m0 + (r < rows ? r : 0);
        arow[i] = x + (int64_t)(perm ? perm[rr] : rr) * ldx;
        int n = n0 + r;
        brow[i] = we + (int64_t)(n < N ? n : N - 1) * K;
    }
    auto load = [&](int st, int k0) {
        for (int i = 0; i < 2; i++) {
            int r = lr + 32 * i, kk = k0 + lc;
            bool ok = kk < K;
            cp_async16(&sm.in.a[st][r][lc], arow[i] + (ok ? kk : 0), ok);
            cp_async16(&sm.in.b[st][r][lc], brow[i] + (ok ? kk : 0), ok);
        }
        cp_async_commit();
    };
    const int wm = (threadIdx.x >> 5) >> 1, wn = (threadIdx.x >> 5) & 1;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(c[i][j], 0.f);
    const int nk = (K + GM_BK - 1) / GM_BK;
    load(0, 0);
    for (int ks = 0; ks < nk; ks++) {
        cp_async_wait_all();
        __syncthreads();
        if (ks + 1 < nk) load((ks + 1) & 1, (ks + 1) * GM_BK); /* overlaps this step's MMAs */
        const int st = ks & 1;
        for (int kk = 0; kk < GM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], &sm.in.a[st][wm * 32 + 16 * i][kk], GM_LDS);
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &sm.in.b[st][wn * 32 + 16 * j][kk], GM_LDS);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) wmma::mma_sync(c[i][j], fa[i], fb[j], c[i][j]);
        }
        /* the load issued in the next step writes the stage read here only after that step's barrier */
    }
    __syncthreads(); /* sm.c overlays the input stages */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&sm.c[wm * 32 + 16 * i][wn * 32 + 16 * j], c[i][j], GM_BN + 4, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < GM_BM * GM_BN; i += blockDim.x) {
        int r = i / GM_BN, cc = i % GM_BN;
        if (r < rows && n0 + cc < N) st_bf(y, (int64_t)(m0 + r) * N + n0 + cc, sm.c[r][cc]);
    }
}

extern "C" omni_status omni_cuda_moe_grouped_linear(uint16_t *y, const uint16_t *x, int64_t ldx, const int32_t *perm,
                                                    const uint16_t *w, const int32_t *offsets, int E, int max_rows,
                                                    int N, int K, void *stream) {
    if (E <= 0 || E > GROUP_MAX_E || max_rows < 0 || N <= 0 || K <= 0 || K % 8 || N % 8 || ldx % 8 ||
        !is_aligned(x, 16) || !is_aligned(w, 16))
        return omni_fail(OMNI_ERR_USAGE, "%s: E %d rows %d N %d K %d ldx %lld (K, N, ldx multiples of 8, aligned)",
                         __func__, E, max_rows, N, K, (long long)ldx);
    if (max_rows == 0) return OMNI_OK;
    dim3 grid((max_rows + GM_BM - 1) / GM_BM + E, (N + GM_BN - 1) / GM_BN);
    omni_launch(moe_grouped_kernel, grid, GM_THREADS, 0, (cudaStream_t)stream, y, x, ldx, perm, w, offsets, E, N, K);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- per-entry linear (decode) ------------------------------------------------------------------------------- */

extern "C" omni_status omni_cuda_moe_entry_linear(uint16_t *y, const uint16_t *x, int64_t ldx, int xdiv,
                                                  const uint16_t *w, const int32_t *sel_e, int n, int N, int K,
                                                  void *stream) {
    if (n < 0 || N <= 0 || xdiv < 1 || !omni_gemv_ok(1, K, x, ldx, w))
        return omni_fail(OMNI_ERR_USAGE, "%s: n %d N %d K %d ldx %lld (K, ldx multiples of 8, aligned)", __func__, n,
                         N, K, (long long)ldx);
    if (n == 0) return OMNI_OK;
    omni_gemv_args a = {y, N, N, x, ldx, ldx, NULL, xdiv, w, (int64_t)N * K, sel_e, NULL, 0, 1, N, K, n, 0};
    return omni_gemv_launch(&a, (cudaStream_t)stream);
}

/* ---- combine ------------------------------------------------------------------------------------------------- */

__global__ void moe_combine_kernel(uint16_t *y, const uint16_t *out, const int32_t *slot_pos, const int32_t *sel_e,
                                   const float *sel_w, int k, int H) {
    __shared__ int row[MOE_MAX_K];
    __shared__ float wt[MOE_MAX_K];
    const int t = blockIdx.x;
    if (threadIdx.x == 0) { /* the token's choices in ascending expert order (insertion sort, k <= 32) */
        int ord[MOE_MAX_K];
        for (int j = 0; j < k; j++) {
            int i = j;
            while (i > 0 && sel_e[(int64_t)t * k + ord[i - 1]] > sel_e[(int64_t)t * k + j]) ord[i] = ord[i - 1], i--;
            ord[i] = j;
        }
        for (int j = 0; j < k; j++) {
            int64_t ent = (int64_t)t * k + ord[j];
            row[j] = slot_pos ? slot_pos[ent] : (int)ent;
            wt[j] = sel_w[ent];
        }
    }
    __syncthreads();
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < k; j++) acc = bf(acc + bf(ld_bf(out, (int64_t)row[j] * H + h) * wt[j]));
        st_bf(y, (int64_t)t * H + h, acc);
    }
}

extern "C" omni_status omni_cuda_moe_combine(uint16_t *y, const uint16_t *out, const int32_t *slot_pos,
                                             const int32_t *sel_e, const float *sel_w, int T, int k, int H,
                                             void *stream) {
    if (T < 0 || k < 1 || k > MOE_MAX_K || H <= 0) return omni_fail(OMNI_ERR_USAGE, "%s: T %d k %d H %d", __func__, T, k, H);
    if (T == 0) return OMNI_OK;
    omni_launch(moe_combine_kernel, T, row_threads(H), 0, (cudaStream_t)stream, y, out, slot_pos, sel_e, sel_w, k,
                H);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

/* ---- decode: the whole block in three kernels ------------------------------------------------------------------
 * 1. router: one warp per expert row (every token against it), logits in fp32; the grid's last block (a ticket
 *    that wraps to 0 for the next launch) routes every token (route_token);
 * 2. gate/up: one warp per (entry, intermediate column): the gate and up rows of the entry's expert, SwiGLU;
 * 3. down + combine: one warp per (token, hidden row): the down rows of the token's k experts in ascending expert
 *    order, weighted and summed in bf16 as omni_cuda_moe_combine.
 * Each weight row is streamed once (16-byte loads, all of a warp's loads issued before its FMAs). */

#define DEC_WARPS 8 /* warps per block */
#define DEC_KG 4    /* down rows (entries) per warp and pass */
#define DEC_ROUTE_E 512 /* experts up to which the router's last block routes from shared memory */

/* How warp_dots reads x: X_RO the read-only path (written before this kernel), X_CG past L1 (written by other blocks
 * of the grid), X_SM a plain load (shared memory). */
enum { X_RO, X_CG, X_SM };

/* acc[r] = Σ x_r[c] · w_r[c] in fp32 over nc 16-byte chunks for R (w, x) row pairs; every lane gets the sums.
 * CPL chunks per lane and row per pass (lane + 32u); a pass issues its R·CPL weight loads before its FMAs. Each
 * lane sums its chunks in ascending order whatever CPL is, so the sums do not depend on CPL. XL: how x is read
 * (above). wait (warp-uniform, or NULL): the first pass's weight loads are issued, then lane 0 waits until
 * *wait >= target (wait_geq) before any x is read; PW: the same with omni_pdl_wait (every lane) instead. */
template <int R, int CPL, int XL = X_RO, bool PW = false>
__device__ __forceinline__ void warp_dots(float (&acc)[R], const uint16_t *const (&w)[R], const uint16_t *const (&x)[R],
                                          int nc, int lane, const unsigned *wait = NULL, unsigned target = 0) {
    bool pw = PW;
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int p0 = 0; p0 < nc; p0 += 32 * CPL) {
        uint4 wv[R][CPL];
#pragma unroll
        for (int u = 0; u < CPL; u++) {
            const int c = p0 + lane + 32 * u;
#pragma unroll
            for (int r = 0; r < R; r++) wv[r][u] = c < nc ? ld_stream((const uint4 *)w[r] + c) : make_uint4(0, 0, 0, 0);
        }
        if (wait) {
            if (lane == 0) wait_geq(wait, target);
            __syncwarp();
            wait = NULL;
        }
        if (pw) omni_pdl_wait(), pw = false;
#pragma unroll
        for (int u = 0; u < CPL; u++) {
            const int c = p0 + lane + 32 * u;
            if (c < nc) {
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r] = dot8(acc[r],
                                  XL == X_CG   ? ld_cg((const uint4 *)x[r] + c)
                                  : XL == X_SM ? ((const uint4 *)x[r])[c]
                                               : ld_ro((const uint4 *)x[r] + c),
                                  wv[r][u]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
        for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
}

/* One warp: logits[t, e] = x_t · Wr[e, :] in fp32 for the T tokens (lane 0 stores). */
template <int CPL>
__device__ __forceinline__ void router_row(float *logits, const uint16_t *x, int64_t ldx, const uint16_t *wr, int e,
                                           int T, int E, int H, int lane) {
    const uint16_t *const w[1] = {wr + (int64_t)e * H};
    for (int t = 0; t < T; t++) {
        const uint16_t *const xr[1] = {x + (int64_t)t * ldx};
        float acc[1];
        warp_dots<1, CPL>(acc, w, xr, H / 8, lane);
        if (lane == 0) logits[(int64_t)t * E + e] = acc[0];
    }
}

/* ord[0..k) = the entries 0..k-1 in ascending expert order of se (insertion sort, k <= 32; one thread). */
__device__ __forceinline__ void order_entries(int *ord, const int32_t *se, int k) {
    for (int j = 0; j < k; j++) {
        int q = j;
        while (q > 0 && se[ord[q - 1]] > se[j]) ord[q] = ord[q - 1], q--;
        ord[q] = j;
    }
}

/* One warp: act[j, i] = bf16(bf16(silu(g)) · u) with g, u = the bf16-rounded gate/up rows i of expert e against
 * the x row xr (as omni_cuda_swiglu_bf16 over the rounded linear outputs); lane 0 stores. */
template <int CPL>
__device__ __forceinline__ void gate_up_col(uint16_t *act, const uint16_t *xr, const uint16_t *wgu, int e, int j,
                                            int i, int H, int I, int lane) {
    const uint16_t *wg = wgu + ((int64_t)e * 2 * I + i) * H;
    const uint16_t *const w[2] = {wg, wg + (int64_t)I * H}, *const xs[2] = {xr, xr};
    float acc[2];
    warp_dots<2, CPL>(acc, w, xs, H / 8, lane);
    if (lane == 0) {
        const float g = bf(acc[0]), u = bf(acc[1]);
        st_bf(act, (int64_t)j * I + i, bf(g / (1.f + expf(-g))) * u);
    }
}

/* One warp: y[t, h] = the bf16 sum in ascending expert order of bf16(bf16(act_j · Wd[e_j][h, :]) · w_j) over the
 * token's k entries (se, tw: its experts and weights; ord: order_entries of se; act rows t·k + j); lane 0 stores.
 * XL, PW, wait, target: as warp_dots (how act is read; the wait before the first act read). */
template <int CPL, int XL, bool PW = false>
__device__ __forceinline__ void down_row(uint16_t *y, const uint16_t *act, const uint16_t *wd, const int32_t *se,
                                         const float *tw, const int *ord, int t, int k, int h, int H, int I, int lane,
                                         const unsigned *wait, unsigned target) {
    float acc = 0.f;
    for (int j0 = 0; j0 < k; j0 += DEC_KG) {
        const uint16_t *w[DEC_KG], *xs[DEC_KG];
#pragma unroll
        for (int q = 0; q < DEC_KG; q++) { /* past k: entry j0 again (loaded, not summed) */
            const int j = ord[j0 + q < k ? j0 + q : j0];
            w[q] = wd + ((int64_t)se[j] * H + h) * I;
            xs[q] = act + ((int64_t)t * k + j) * I;
        }
        float o[DEC_KG];
        if (PW && j0 == 0)
            warp_dots<DEC_KG, CPL, XL, true>(o, w, xs, I / 8, lane, wait, target);
        else
            warp_dots<DEC_KG, CPL, XL>(o, w, xs, I / 8, lane, wait, target);
        wait = NULL;
#pragma unroll
        for (int q = 0; q < DEC_KG; q++)
            if (j0 + q < k) acc = bf(acc + bf(bf(o[q]) * tw[ord[j0 + q]]));
    }
    if (lane == 0) st_bf(y, (int64_t)t * H + h, acc);
}

/* After the block's router rows: the grid's last block (a ticket that wraps to 0 for the next launch) routes every
 * token (route_token) from the f32 logits, a warp per token. s_l, s_last: the block's shared memory. */
__device__ void route_last(int32_t *sel_e, float *sel_w, unsigned *ticket, const float *logits,
                           float (*s_l)[DEC_ROUTE_E], int *s_last, int T, int E, int k, int norm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __threadfence(); /* this block's logits reach the whole grid before its ticket */
    __syncthreads();
    if (threadIdx.x == 0) *s_last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1;
    __syncthreads();
    if (!*s_last) return;
    __threadfence();
    for (int t = warp; t < T; t += DEC_WARPS) { /* the k rounds re-read the logits: from shared memory if they fit */
        const volatile float *l = logits + (int64_t)t * E;
        if (E <= DEC_ROUTE_E) {
            for (int e = lane; e < E; e += 32) s_l[warp][e] = l[e];
            __syncwarp();
            l = s_l[warp];
        }
        route_token(sel_e + (int64_t)t * k, sel_w + (int64_t)t * k, l, E, k, norm, lane);
        __syncwarp();
    }
}

template <int CPL>
__global__ void __launch_bounds__(DEC_WARPS * 32)
moe_dec_router_kernel(float *logits, int32_t *sel_e, float *sel_w, unsigned *ticket, const uint16_t *x, int64_t ldx,
                      const uint16_t *wr, int T, int E, int H, int k, int norm) {
    __shared__ int s_last;
    __shared__ float s_l[DEC_WARPS][DEC_ROUTE_E];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, e = blockIdx.x * DEC_WARPS + warp;
    if (e < E) router_row<CPL>(logits, x, ldx, wr, e, T, E, H, lane);
    route_last(sel_e, sel_w, ticket, logits, s_l, &s_last, T, E, k, norm);
}

/* act[j, i] = bf16(bf16(silu(g)) · u) with g, u = the bf16-rounded gate/up rows i of entry j's expert (as
 * omni_cuda_swiglu_bf16 over the rounded linear outputs). grid: (ceil(I / DEC_WARPS), entries). As a programmatic
 * dependent (omni_cuda_moe_decode_res) every block waits for the router kernel, then lets the down kernel launch
 * (that kernel relies on this order: it reads the routing before its own wait). */
template <int CPL>
__global__ void __launch_bounds__(DEC_WARPS * 32)
moe_dec_gate_up_kernel(uint16_t *act, const uint16_t *x, int64_t ldx, const uint16_t *wgu, const int32_t *sel_e, int k,
                       int H, int I) {
    omni_pdl_wait();
    omni_pdl_trigger();
    const int lane = threadIdx.x & 31, i = blockIdx.x * DEC_WARPS + (threadIdx.x >> 5), j = blockIdx.y;
    if (i < I) gate_up_col<CPL>(act, x + (int64_t)(j / k) * ldx, wgu, sel_e[j], j, i, H, I, lane);
}

/* y[t, h] = the bf16 sum in ascending expert order of bf16(bf16(act_j · Wd[e_j][h, :]) · w_j) over the token's
 * entries j. grid: (ceil(H / DEC_WARPS), T). */
template <int CPL>
__global__ void __launch_bounds__(DEC_WARPS * 32)
moe_dec_down_kernel(uint16_t *y, const uint16_t *act, const uint16_t *wd, const int32_t *sel_e, const float *sel_w,
                    int k, int H, int I) {
    __shared__ int s_ord[MOE_MAX_K];
    const int lane = threadIdx.x & 31, h = blockIdx.x * DEC_WARPS + (threadIdx.x >> 5), t = blockIdx.y;
    const int32_t *se = sel_e + (int64_t)t * k;
    if (threadIdx.x == 0) order_entries(s_ord, se, k);
    __syncthreads();
    if (h < H) down_row<CPL, X_RO>(y, act, wd, se, sel_w + (int64_t)t * k, s_ord, t, k, h, H, I, lane, NULL, 0);
}

/* The chunks per lane of one pass over a row of nc chunks: 1, 2, 3, 4 or 8 (longer rows take several passes). */
static int dec_cpl(int nc) {
    const int need = (nc + 31) / 32;
    return need <= 4 ? need : 8;
}

#define DEC_LAUNCH(kern, cpl, grid, ...)                                                                          \
    do {                                                                                                       \
        switch (cpl) {                                                                                         \
        case 1: omni_launch(kern<1>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
        case 2: omni_launch(kern<2>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
        case 3: omni_launch(kern<3>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
        case 4: omni_launch(kern<4>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
        default: omni_launch(kern<8>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                        \
        }                                                                                                      \
        OMNI_CUDA_LAUNCHED();                                                                                  \
    } while (0)

extern "C" omni_status omni_cuda_moe_decode_split(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                                  const uint16_t *gate_up, const uint16_t *down, int T, int E, int k,
                                                  int H, int I, int norm, const omni_cuda_moe_scratch *s,
                                                  void *stream) {
    if (T < 0 || E <= 0 || E > 4096 || k < 1 || k > E || k > MOE_MAX_K || (int64_t)T * k > 65535 || H <= 0 ||
        I <= 0 || H % 8 || I % 8 || ldx % 8 || ldx < H || !is_aligned(x, 16) || !is_aligned(router, 16) ||
        !is_aligned(gate_up, 16) || !is_aligned(down, 16) || !s || !is_aligned(s->act, 16))
        return omni_fail(OMNI_ERR_USAGE,
                         "omni_cuda_moe_decode: T %d E %d k %d H %d I %d ldx %lld (H, I, ldx multiples of 8, 16-byte "
                         "aligned rows)", T, E, k, H, I, (long long)ldx);
    if (T == 0) return OMNI_OK;
    cudaStream_t st = (cudaStream_t)stream;
    const int ch = dec_cpl(H / 8), ci = dec_cpl(I / 8);
    DEC_LAUNCH(moe_dec_router_kernel, ch, dim3((E + DEC_WARPS - 1) / DEC_WARPS), s->logits, s->sel_e, s->sel_w,
               s->ticket, x, ldx, router, T, E, H, k, norm);
    DEC_LAUNCH(moe_dec_gate_up_kernel, ch, dim3((I + DEC_WARPS - 1) / DEC_WARPS, T * k), s->act, x, ldx, gate_up,
               s->sel_e, k, H, I);
    DEC_LAUNCH(moe_dec_down_kernel, ci, dim3((H + DEC_WARPS - 1) / DEC_WARPS, T), y, s->act, down, s->sel_e,
               s->sel_w, k, H, I);
    return OMNI_OK;
}

/* ---- decode: the whole block in one kernel ---------------------------------------------------------------------
 * A grid of at most the resident blocks takes numbered items from a ticket (ctl[0]) in order: the router rows
 * (n_r = ceil(E / DEC_WARPS) items, a warp per expert row as moe_dec_router_kernel), then gate/up + SwiGLU
 * (T·k·ceil(I / DEC_WARPS) items, a warp per (entry, column) as moe_dec_gate_up_kernel), then down + combine
 * (T·ceil(H / DEC_WARPS) items, a warp per (token, hidden row) as moe_dec_down_kernel). A finished item is
 * counted once by its block (its writers fence, the block meets, thread 0 adds to ctl[1] for router items, ctl[2]
 * for gate/up items: one count per warp queued ~6000 atomics on one address, call B4). A block
 * routes every token itself (from the f32 logits into shared memory) before its first gate/up or down item, once
 * ctl[1] says all logits are there; a down warp issues its first weight loads, then waits for ctl[2] (all gate/up
 * columns), so the weight stream goes on across the phase change. Tickets go to running blocks in order and an
 * item only waits for lower tickets, so no residency assumption is needed (graphs, other streams). The last
 * block to leave (ctl[3]) zeroes the counters for the next call. The values are the three-kernel path's bits.
 * ctl[c] is word c·CTL_STRIDE of the scratch's ticket (OMNI_CUDA_MOE_CTL_BYTES). Launched as a programmatic
 * dependent: while the kernel before it finishes, the blocks only pull router rows into L2. */

/* Programmatic dependent launch (sm_90): the kernel may start while the one before it in the stream runs;
 * moe_pdl_wait returns once that kernel has completed and its writes are visible (at once without the attribute
 * or on the emulator); moe_pdl_launch_dependents lets the next kernel be scheduled before this one ends. */
#ifdef KVC_EMU
static inline void moe_pdl_wait() {}
static inline void moe_pdl_launch_dependents() {}
static inline void moe_prefetch_l2(const void *) {}
#else
__device__ __forceinline__ void moe_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void moe_pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void moe_prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
#endif

/* k<<<grid, block, 0, st>>>(args) with programmatic stream serialization (a plain launch on the emulator, whose
 * errors OMNI_CUDA_LAUNCHED reports). */
template <typename... KP, typename... A>
static cudaError_t moe_launch_pdl(void (*k)(KP...), int grid, int block, cudaStream_t st, A... args) {
#ifdef KVC_EMU
    omni_launch(k, grid, block, 0, st, args...);
    return cudaSuccess;
#else
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid), cfg.blockDim = dim3(block), cfg.dynamicSmemBytes = 0, cfg.stream = st;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, (KP)args...);
#endif
}

#define FUSED_MAX_ENTRIES 64 /* T·k up to which the fused kernel runs (routing kept in shared memory) */
#define CTL_STRIDE 32        /* words between the counters: one 128-byte line each (polls beside atomics) */
static_assert(4 * (3 * CTL_STRIDE + 1) <= OMNI_CUDA_MOE_CTL_BYTES, "the four counters fit the scratch's ticket");
#define FUSED_MIN_BLOCKS 2   /* resident blocks per SM asked of ptxas (<= 128 registers) */

template <int CH, int CI>
__global__ void __launch_bounds__(DEC_WARPS * 32, FUSED_MIN_BLOCKS)
moe_dec_fused_kernel(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *wr, const uint16_t *wgu,
                     const uint16_t *wd, float *logits, int32_t *g_sel_e, float *g_sel_w, uint16_t *act,
                     unsigned *ctl, int T, int E, int k, int H, int I, int norm) {
    __shared__ float s_p[DEC_WARPS][DEC_ROUTE_E];
    __shared__ int s_e[FUSED_MAX_ENTRIES], s_ord[FUSED_MAX_ENTRIES];
    __shared__ float s_w[FUSED_MAX_ENTRIES];
    __shared__ int s_item[2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_r = (E + DEC_WARPS - 1) / DEC_WARPS, n_gc = (I + DEC_WARPS - 1) / DEC_WARPS;
    const int n_g = T * k * n_gc, n_hc = (H + DEC_WARPS - 1) / DEC_WARPS, total = n_r + n_g + T * n_hc;
    /* launched as a programmatic dependent: the kernel before (the norm that writes x) may still run. Until it is
     * done only weights are touched: block b pulls router item b's rows into L2 (whoever takes that item later
     * finds them there); the counters, x and every output wait (the call before this one zeroed the counters). */
    if (blockIdx.x < n_r && blockIdx.x * DEC_WARPS + warp < E)
        for (int c = lane * 64; c < H; c += 32 * 64) /* one 128-byte line per lane and step */
            moe_prefetch_l2(wr + (int64_t)(blockIdx.x * DEC_WARPS + warp) * H + c);
    moe_pdl_wait();
    moe_pdl_launch_dependents(); /* the next kernel may become resident; its own wait still covers our writes */
    if (threadIdx.x == 0) s_item[0] = (int)atomicAdd(&ctl[0], 1u);
    __syncthreads();
    int item = s_item[0], par = 0;
    bool routed = false, gu_seen = false;
    while (item < total) {
        unsigned next = 0;
        if (threadIdx.x == 0) next = atomicAdd(&ctl[0], 1u); /* the next item's ticket, in flight meanwhile */
        if (item < n_r) { /* router: expert row e against every token, f32 logits */
            const int e = item * DEC_WARPS + warp;
            if (e < E) router_row<CH>(logits, x, ldx, wr, e, T, E, H, lane);
            if (lane == 0) __threadfence(); /* its logits before the block's count (after the item) */
        } else {
            if (!routed) { /* block-uniform: every token's routing and its ascending expert order */
                if (threadIdx.x == 0) wait_geq(&ctl[CTL_STRIDE], (unsigned)n_r);
                __syncthreads();
                for (int t = warp; t < T; t += DEC_WARPS) {
                    route_token(s_e + t * k, s_w + t * k, logits + (int64_t)t * E, E, k, norm, lane, s_p[warp]);
                    __syncwarp();
                    if (lane == 0) order_entries(s_ord + t * k, s_e + t * k, k);
                    if (item == n_r && lane < k) /* the first gate/up item publishes the routing */
                        g_sel_e[t * k + lane] = s_e[t * k + lane], g_sel_w[t * k + lane] = s_w[t * k + lane];
                    __syncwarp();
                }
                __syncthreads();
                routed = true;
            }
            if (item < n_r + n_g) { /* gate/up + SwiGLU of entry j, column i */
                const int it = item - n_r, j = it / n_gc, i = (it % n_gc) * DEC_WARPS + warp;
                if (i < I) gate_up_col<CH>(act, x + (int64_t)(j / k) * ldx, wgu, s_e[j], j, i, H, I, lane);
                if (lane == 0) __threadfence(); /* its column before the block's count */
            } else { /* down + combine of token t, hidden row h */
                const int it = item - n_r - n_g, t = it / n_hc, h = (it % n_hc) * DEC_WARPS + warp;
                if (h < H) {
                    down_row<CI, X_CG>(y, act, wd, s_e + t * k, s_w + t * k, s_ord + t * k, t, k, h, H, I, lane,
                                       gu_seen ? NULL : &ctl[2 * CTL_STRIDE], (unsigned)n_g);
                    gu_seen = true;
                }
            }
        }
        par ^= 1;
        if (threadIdx.x == 0) s_item[par] = (int)next; /* the slot last read an item ago (one barrier per item) */
        __syncthreads();
        if (threadIdx.x == 0 && item < n_r + n_g) /* one count per finished router / gate/up item */
            atomicAdd(&ctl[(item < n_r ? 1 : 2) * CTL_STRIDE], 1u);
        item = s_item[par];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&ctl[3 * CTL_STRIDE], 1u) == gridDim.x - 1) /* the last block out: reset */
        for (int c = 0; c < 4; c++) atomicExch(&ctl[c * CTL_STRIDE], 0u);
}

/* Resident blocks of the fused kernel on this device (the grid's cap), 0 with the error set. */
template <int CH, int CI> static int fused_blocks(void) {
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, (const void *)moe_dec_fused_kernel<CH, CI>,
                                                      DEC_WARPS * 32, 0) != cudaSuccess)
        return 0;
    return sms * (per > 0 ? per : 1);
}

template <int CH, int CI>
static omni_status fused_launch(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                const uint16_t *gate_up, const uint16_t *down, int T, int E, int k, int H, int I,
                                int norm, const omni_cuda_moe_scratch *s, cudaStream_t st) {
    const int64_t n_r = (E + DEC_WARPS - 1) / DEC_WARPS, n_gc = (I + DEC_WARPS - 1) / DEC_WARPS;
    const int64_t total = n_r + (int64_t)T * k * n_gc + (int64_t)T * ((H + DEC_WARPS - 1) / DEC_WARPS); /* items */
    const int cap = fused_blocks<CH, CI>();
    if (cap <= 0) return omni_fail(OMNI_ERR_RUNTIME, "omni_cuda_moe_decode: occupancy query failed");
    const int grid = (int)(total < cap ? total : cap);
    OMNI_CUDA_TRY(moe_launch_pdl(moe_dec_fused_kernel<CH, CI>, grid, DEC_WARPS * 32, st, y, x, ldx, router, gate_up,
                                 down, s->logits, s->sel_e, s->sel_w, s->act, s->ticket, T, E, k, H, I, norm));
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

extern "C" omni_status omni_cuda_moe_decode(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                            const uint16_t *gate_up, const uint16_t *down, int T, int E, int k, int H,
                                            int I, int norm, const omni_cuda_moe_scratch *s, void *stream) {
    /* the three kernels: faster than the one kernel on the H200 so far (call B4: 42.9 vs 51.4 us at T = 1) */
    return omni_cuda_moe_decode_split(y, x, ldx, router, gate_up, down, T, E, k, H, I, norm, s, stream);
}

extern "C" omni_status omni_cuda_moe_decode_fused(uint16_t *y, const uint16_t *x, int64_t ldx, const uint16_t *router,
                                                  const uint16_t *gate_up, const uint16_t *down, int T, int E, int k,
                                                  int H, int I, int norm, const omni_cuda_moe_scratch *s,
                                                  void *stream) {
    if (T < 1 || (int64_t)T * k > FUSED_MAX_ENTRIES || E > DEC_ROUTE_E || k < 1 || k > E || k > MOE_MAX_K || H <= 0 ||
        I <= 0 || H % 8 || I % 8 || ldx % 8 || ldx < H || !is_aligned(x, 16) || !is_aligned(router, 16) ||
        !is_aligned(gate_up, 16) || !is_aligned(down, 16) || !s || !is_aligned(s->act, 16))
        return omni_cuda_moe_decode_split(y, x, ldx, router, gate_up, down, T, E, k, H, I, norm, s, stream);
    cudaStream_t st = (cudaStream_t)stream;
    const bool wide_h = H / 8 > 128, wide_i = I / 8 > 64; /* chunks per lane: 4 or 8 (gate/up), 2 or 3 (down) */
    if (wide_h)
        return wide_i ? fused_launch<8, 3>(y, x, ldx, router, gate_up, down, T, E, k, H, I, norm, s, st)
                      : fused_launch<8, 2>(y, x, ldx, router, gate_up, down, T, E, k, H, I, norm, s, st);
    return wide_i ? fused_launch<4, 3>(y, x, ldx, router, gate_up, down, T, E, k, H, I, norm, s, st)
                  : fused_launch<4, 2>(y, x, ldx, router, gate_up, down, T, E, k, H, I, norm, s, st);
}

/* ---- decode with the residual adds around the block (omni_cuda_moe_decode_res) ---------------------------------
 * Three kernels as omni_cuda_moe_decode_split, each a programmatic dependent of the kernel before it, and the two
 * add + RMSNorm launches around the block folded in:
 * 1. router: before its wait each warp pulls its router row into L2 (weights only: the o_proj GEMV before it may
 *    still run); then every block forms x1 = x + a and h = rmsnorm(x1)·w_post itself in shared memory (block 0
 *    also stores h for the gate/up kernel), its router rows against h, and the last block routes as before;
 * 2. gate/up + SwiGLU: moe_dec_gate_up_kernel (waits, then lets the down kernel launch);
 * 3. down + combine into s->out: the routing and the first pass of weight loads are issued before the wait (the
 *    router kernel wrote the routing, and it completed before any gate/up block let this kernel launch); the
 *    grid's last block (ticket word CTL_STRIDE) then adds x = x1 + out and h = rmsnorm(x)·w_next.
 * x is written only by that last block (x1 is recomputed there), so the router blocks all read the old x. The sums
 * of squares follow ops.cu's RMSNorm kernels (the same vectors per thread, the same reduction tree), so every value
 * is the unfused sequence's bits. */

#define RES_MAX_H 8192 /* hidden sizes whose bf16 row fits the kernels' shared row */

/* f[0..8) = the 8 bf16 of u */
__device__ __forceinline__ void unpack8(float *f, uint4 u) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) f[2 * i] = __uint_as_float(w[i] << 16), f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
}

/* One row of the residual stream: xs = bf16(x + a), then bf16(xs + b) when b != NULL (xs: H bf16 in shared memory;
 * x, a, b read past L1), and the inverse RMS of xs as ops.cu's add_rmsnorm computes it: thread t < S sums the
 * squares of vectors t, t + S, ... in order, block_sum over the block (every thread gets it). H % 8 == 0. */
__device__ float res_row(uint16_t *xs, const uint16_t *x, const uint16_t *a, const uint16_t *b, int H, int S,
                         float eps, float *sh) {
    float ss = 0.f;
    if ((int)threadIdx.x < S)
        for (int i = threadIdx.x; i < H / 8; i += S) {
            float f[8], g[8];
            unpack8(f, ld_cg((const uint4 *)x + i));
            unpack8(g, ld_cg((const uint4 *)a + i));
#pragma unroll
            for (int q = 0; q < 8; q++) f[q] = bf(f[q] + g[q]);
            if (b) {
                unpack8(g, ld_cg((const uint4 *)b + i));
#pragma unroll
                for (int q = 0; q < 8; q++) f[q] = bf(f[q] + g[q]);
            }
#pragma unroll
            for (int q = 0; q < 8; q++) ss += f[q] * f[q];
            store_vec<8>(xs, i, f);
        }
    return rsqrtf(block_sum(ss, sh) / (float)H + eps); /* block_sum's barriers also publish xs */
}

/* y = bf16(bf16(xs · inv) · w) (y may be xs: each element is read, then written, by one thread). */
__device__ void res_write(uint16_t *y, const uint16_t *xs, const uint16_t *w, int H, float inv) {
    for (int i = threadIdx.x; i < H / 8; i += blockDim.x) {
        float f[8], g[8];
        load_vec<8>(f, xs, i);
        load_vec<8>(g, w, i);
#pragma unroll
        for (int q = 0; q < 8; q++) f[q] = bf(f[q] * inv) * g[q];
        store_vec<8>(y, i, f);
    }
}

template <int CPL>
__global__ void __launch_bounds__(DEC_WARPS * 32)
moe_res_router_kernel(float *logits, int32_t *sel_e, float *sel_w, unsigned *ticket, uint16_t *h, const uint16_t *x,
                      const uint16_t *a, const uint16_t *w_post, float eps, int S, const uint16_t *wr, int T, int E,
                      int H, int k, int norm) {
    __shared__ int s_last;
    __shared__ float s_l[DEC_WARPS][DEC_ROUTE_E], sh[32];
    __shared__ __align__(16) uint16_t s_h[RES_MAX_H];
    const int lane = threadIdx.x & 31, e = blockIdx.x * DEC_WARPS + (threadIdx.x >> 5);
    if (e < E) /* weights only before the wait: one 128-byte line per lane and step */
        for (int c = lane * 64; c < H; c += 32 * 64) prefetch_l2(wr + (int64_t)e * H + c);
    omni_pdl_wait();
    omni_pdl_trigger(); /* the gate/up blocks may become resident (they wait for this grid) */
    for (int t = 0; t < T; t++) {
        const float inv = res_row(s_h, x + (int64_t)t * H, a + (int64_t)t * H, NULL, H, S, eps, sh);
        res_write(s_h, s_h, w_post, H, inv);
        __syncthreads();
        if (blockIdx.x == 0)
            for (int i = threadIdx.x; i < H / 8; i += blockDim.x) ((uint4 *)(h + (int64_t)t * H))[i] = ((const uint4 *)s_h)[i];
        if (e < E) {
            const uint16_t *const w[1] = {wr + (int64_t)e * H}, *const xr[1] = {s_h};
            float acc[1];
            warp_dots<1, CPL, X_SM>(acc, w, xr, H / 8, lane);
            if (lane == 0) logits[(int64_t)t * E + e] = acc[0];
        }
        __syncthreads(); /* s_h is the next token's */
    }
    route_last(sel_e, sel_w, ticket, logits, s_l, &s_last, T, E, k, norm);
}

template <int CPL>
__global__ void __launch_bounds__(DEC_WARPS * 32)
moe_res_down_kernel(uint16_t *out, const uint16_t *act, const uint16_t *wd, const int32_t *sel_e, const float *sel_w,
                    unsigned *ticket, uint16_t *x, uint16_t *h, const uint16_t *a, const uint16_t *w_next, float eps,
                    int S, int T, int k, int H, int I) {
    __shared__ int s_e[MOE_MAX_K], s_ord[MOE_MAX_K], s_last;
    __shared__ float s_w[MOE_MAX_K], sh[32];
    __shared__ __align__(16) uint16_t s_x[RES_MAX_H];
    const int lane = threadIdx.x & 31, row = blockIdx.x * DEC_WARPS + (threadIdx.x >> 5), t = blockIdx.y;
    /* the routing (complete before this grid launched, see above), past L1 */
    if ((int)threadIdx.x < k) {
        s_e[threadIdx.x] = *(const volatile int32_t *)(sel_e + (int64_t)t * k + threadIdx.x);
        s_w[threadIdx.x] = *(const volatile float *)(sel_w + (int64_t)t * k + threadIdx.x);
    }
    __syncthreads();
    if (threadIdx.x == 0) order_entries(s_ord, s_e, k);
    __syncthreads();
    if (row < H) /* the first pass's weight loads, the wait for the gate/up grid, then act (past L1) */
        down_row<CPL, X_CG, true>(out, act, wd, s_e, s_w, s_ord, t, k, row, H, I, lane, NULL, 0);
    else
        omni_pdl_wait();
    omni_pdl_trigger();
    /* the last block: x = x1 + out, h = rmsnorm(x)·w_next (out written by the whole grid) */
    __threadfence();
    __syncthreads();
    const unsigned nb = gridDim.x * gridDim.y;
    if (threadIdx.x == 0) s_last = atomicInc(ticket, nb - 1) == nb - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int r = 0; r < T; r++) {
        const int64_t o = (int64_t)r * H;
        const float inv = res_row(s_x, x + o, a + o, out + o, H, S, eps, sh);
        for (int i = threadIdx.x; i < H / 8; i += blockDim.x) ((uint4 *)(x + o))[i] = ((const uint4 *)s_x)[i];
        if (w_next) res_write(h + o, s_x, w_next, H, inv);
        __syncthreads(); /* s_x is the next row's */
    }
}

/* Threads per row of ops.cu's RMSNorm for a row of H values (16-byte vectors): one block of row_threads past 1024
 * values, else 32 lanes (16 below 32 vectors). */
static int res_stride(int H) {
    const int nv = H / 8;
    return H > 1024 ? row_threads(nv) : nv >= 32 ? 32 : 16;
}

extern "C" omni_status omni_cuda_moe_decode_res(uint16_t *x, uint16_t *h, const uint16_t *a, const uint16_t *w_post,
                                                const uint16_t *w_next, float eps, const uint16_t *router,
                                                const uint16_t *gate_up, const uint16_t *down, int T, int E, int k,
                                                int H, int I, int norm, const omni_cuda_moe_scratch *s,
                                                void *stream) {
    if (T < 0 || E <= 0 || E > 4096 || k < 1 || k > E || k > MOE_MAX_K || (int64_t)T * k > 65535 || H <= 0 ||
        I <= 0 || H % 8 || I % 8 || !x || !h || !a || !w_post || !s || !s->out || !is_aligned(router, 16) ||
        !is_aligned(gate_up, 16) || !is_aligned(down, 16) || !is_aligned(s->act, 16))
        return omni_fail(OMNI_ERR_USAGE,
                         "%s: T %d E %d k %d H %d I %d (H, I multiples of 8, 16-byte aligned weights, scratch with out)",
                         __func__, T, E, k, H, I);
    if (T == 0) return OMNI_OK;
    cudaStream_t st = (cudaStream_t)stream;
    if (H > RES_MAX_H || !is_aligned(x, 16) || !is_aligned(h, 16) || !is_aligned(a, 16) || !is_aligned(w_post, 16) ||
        !is_aligned(w_next, 16) || !is_aligned(s->out, 16)) { /* the unfused sequence */
        omni_status e;
        if ((e = omni_cuda_add_rmsnorm_bf16(h, x, a, w_post, T, H, eps, st))) return e;
        if ((e = omni_cuda_moe_decode_split(s->out, h, H, router, gate_up, down, T, E, k, H, I, norm, s, st))) return e;
        return w_next ? omni_cuda_add_rmsnorm_bf16(h, x, s->out, w_next, T, H, eps, st)
                      : omni_cuda_add_bf16(x, x, s->out, (int64_t)T * H, st);
    }
    const int ch = dec_cpl(H / 8), ci = dec_cpl(I / 8), S = res_stride(H);
    const dim3 gr((E + DEC_WARPS - 1) / DEC_WARPS), gg((I + DEC_WARPS - 1) / DEC_WARPS, T * k),
        gd((H + DEC_WARPS - 1) / DEC_WARPS, T);
#define RES_LAUNCH(kern, cpl, grid, ...)                                                                       \
    switch (cpl) {                                                                                             \
    case 1: omni_launch_pdl(kern<1>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
    RES_CASES_2UP(kern, cpl, grid, __VA_ARGS__)                                                                \
    }                                                                                                          \
    OMNI_CUDA_LAUNCHED()
#define RES_CASES_2UP(kern, cpl, grid, ...)                                                                    \
    case 2: omni_launch_pdl(kern<2>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
    case 3: omni_launch_pdl(kern<3>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
    case 4: omni_launch_pdl(kern<4>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;                         \
    default: omni_launch_pdl(kern<8>, grid, DEC_WARPS * 32, 0, st, __VA_ARGS__); break;
    RES_LAUNCH(moe_res_router_kernel, ch, gr, s->logits, s->sel_e, s->sel_w, s->ticket, h, x, a, w_post, eps, S,
               router, T, E, H, k, norm);
    RES_LAUNCH(moe_dec_gate_up_kernel, ch, gg, s->act, h, (int64_t)H, gate_up, s->sel_e, k, H, I);
    switch (ci) { /* one chunk per lane (I <= 256) runs as two (lanes past the row idle: the same sums) */
    case 1:
    RES_CASES_2UP(moe_res_down_kernel, ci, gd, s->out, s->act, down, s->sel_e, s->sel_w, s->ticket + CTL_STRIDE, x,
                  h, a, w_next, eps, S, T, k, H, I)
    }
    OMNI_CUDA_LAUNCHED();
#undef RES_LAUNCH
#undef RES_CASES_2UP
    return OMNI_OK;
}

/* ---- prefill: batched GEMMs over a fixed capacity per expert, the grouped kernel for the overflow ----------------
 * Each expert's first C rows (C from T only: the mean plus two standard deviations of a uniform routing, a
 * multiple of 16) are gathered into a padded [E][C][H] block (zero rows past the group), multiplied by cuBLAS'
 * strided batched GEMMs; rows past C (skewed routing) go through omni_cuda_moe_grouped_linear's kernel. The row
 * sizes never leave the device. Scratch (one allocation, carved below):
 *   logits [T·E] f32 | sel_e, sel_w, perm, slot, ovf_perm [n] | off, ovf_off [E + 1] | xg [E·C][H] |
 *   go [E·C + n][max(2I, H)] (gate/up out, then down out) | act [E·C + n][I]      (n = T·k) */

static int64_t prefill_cap(int64_t n, int E) {
    const double mean = (double)n / E;
    const int64_t c = (int64_t)ceil(mean + 2 * sqrt(mean));
    return (c + 15) / 16 * 16;
}

typedef struct {
    float *logits, *sel_w;
    int32_t *sel_e, *perm, *slot, *ovf_perm, *off, *ovf_off;
    uint16_t *xg, *go, *act;
} prefill_ws;

/* Carves the scratch (base NULL: sizes only); returns its bytes. */
static size_t prefill_carve(char *base, int64_t T, int E, int k, int H, int I, prefill_ws *w) {
    const int64_t n = T * k, C = prefill_cap(n, E), rows = E * C + n, wide = 2 * I > H ? 2 * I : H;
    size_t off = 0;
    auto take = [&](size_t bytes) -> void * {
        size_t o = (off + 255) / 256 * 256;
        off = o + bytes;
        return base ? base + o : NULL;
    };
    w->logits = (float *)take(4 * (size_t)(T * E));
    w->sel_w = (float *)take(4 * (size_t)n);
    w->sel_e = (int32_t *)take(4 * (size_t)n);
    w->perm = (int32_t *)take(4 * (size_t)n);
    w->slot = (int32_t *)take(4 * (size_t)n);
    w->ovf_perm = (int32_t *)take(4 * (size_t)n);
    w->off = (int32_t *)take(4 * (size_t)(E + 1));
    w->ovf_off = (int32_t *)take(4 * (size_t)(E + 1));
    w->xg = (uint16_t *)take(2 * (size_t)(E * C) * H);
    w->go = (uint16_t *)take(2 * (size_t)rows * wide);
    w->act = (uint16_t *)take(2 * (size_t)rows * I);
    return off;
}

/* xg[e·C + r] = x[perm[off[e] + r]] for r < the group's size, zeros for the rest of the C rows. grid (C, E). */
__global__ void moe_gather_kernel(uint16_t *xg, const uint16_t *x, int64_t ldx, const int32_t *perm,
                                  const int32_t *off, int C, int H) {
    const int r = blockIdx.x, e = blockIdx.y, cnt = off[e + 1] - off[e];
    uint4 *dst = (uint4 *)(xg + ((int64_t)e * C + r) * H);
    const uint4 *src = r < cnt ? (const uint4 *)(x + (int64_t)perm[off[e] + r] * ldx) : NULL;
    for (int c = threadIdx.x; c < H / 8; c += blockDim.x) dst[c] = src ? src[c] : make_uint4(0, 0, 0, 0);
}

/* The overflow: ovf_off[e] = exclusive scan of max(count_e - C, 0); every entry's output row becomes e·C + rank
 * (rank < C) or E·C + ovf_off[e] + rank - C, and ovf_perm[that - E·C] its token. One block. */
__global__ void __launch_bounds__(GROUP_THREADS)
moe_overflow_kernel(int32_t *ovf_off, int32_t *ovf_perm, int32_t *slot, const int32_t *off, const int32_t *sel_e,
                    int n, int E, int C, int k) {
    __shared__ int cnt[GROUP_MAX_E];
    __shared__ int wsum[33];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const int c = off[e + 1] - off[e] - C;
        cnt[e] = c > 0 ? c : 0;
    }
    __syncthreads();
    const int total = block_exclusive_scan(cnt, E, wsum);
    for (int e = threadIdx.x; e < E; e += blockDim.x) ovf_off[e] = cnt[e];
    if (threadIdx.x == 0) ovf_off[E] = total;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = sel_e[i], rank = slot[i] - off[e];
        if (rank < C) {
            slot[i] = e * C + rank;
        } else {
            const int o = cnt[e] + rank - C;
            slot[i] = E * C + o;
            ovf_perm[o] = i / k;
        }
    }
}

/* act = SwiGLU (omni_cuda_swiglu_bf16's numerics) over the first base + *extra rows of go (row stride ld): the
 * padded block and the overflow rows. */
__global__ void moe_swiglu_kernel(uint16_t *act, const uint16_t *go, int64_t ld, int64_t base, const int32_t *extra,
                                  int I) {
    const int64_t rows = base + *extra, nv = rows * (I / 8);
    GRID_STRIDE(i, nv) {
        const int64_t r = i / (I / 8), c = i % (I / 8);
        float a[8], b[8];
        load_vec<8>(a, go + r * ld, (int)c);
        load_vec<8>(b, go + r * ld + I, (int)c);
#pragma unroll
        for (int q = 0; q < 8; q++) a[q] = bf(a[q] / (1.f + expf(-a[q]))) * b[q];
        store_vec<8>(act + r * I, (int)c, a);
    }
}

extern "C" size_t omni_cuda_moe_prefill_scratch(int T, int E, int k, int H, int I) {
    prefill_ws w;
    return prefill_carve(NULL, T, E, k, H, I, &w);
}

extern "C" omni_status omni_cuda_moe_prefill(omni_cuda_ctx *ctx, uint16_t *y, const uint16_t *x, const uint16_t *router,
                                             const uint16_t *gate_up, const uint16_t *down, int T, int E, int k,
                                             int H, int I, int norm, void *scratch, size_t scratch_bytes) {
    prefill_ws w;
    if (!ctx || T < 0 || E <= 0 || E > GROUP_MAX_E || k < 1 || k > E || k > MOE_MAX_K || (int64_t)T * k > (1 << 20) ||
        H <= 0 || I <= 0 || H % 8 || I % 8 || !is_aligned(x, 16) || !is_aligned(gate_up, 16) ||
        !is_aligned(down, 16) || !scratch || scratch_bytes < prefill_carve(NULL, T, E, k, H, I, &w))
        return omni_fail(OMNI_ERR_USAGE, "%s: T %d E %d k %d H %d I %d (multiples of 8), scratch %zu bytes", __func__,
                         T, E, k, H, I, scratch_bytes);
    if (T == 0) return OMNI_OK;
    prefill_carve((char *)scratch, T, E, k, H, I, &w);
    cudaStream_t st = (cudaStream_t)omni_cuda_ctx_stream(ctx);
    const int n = T * k, C = (int)prefill_cap(n, E);
    const int64_t base = (int64_t)E * C; /* rows of the padded block; the overflow rows follow */
    omni_status s;
    if ((s = omni_cuda_linear(ctx, w.logits, OMNI_F32, x, router, NULL, T, E, H))) return s;
    if ((s = omni_cuda_moe_route(w.sel_e, w.sel_w, w.logits, T, E, k, norm, st))) return s;
    if ((s = omni_cuda_moe_group(w.off, w.perm, w.slot, w.sel_e, T, E, k, st))) return s;
    omni_launch(moe_gather_kernel, dim3(C, E), row_threads(H / 8), 0, st, w.xg, x, (int64_t)H, w.perm, w.off, C, H);
    OMNI_CUDA_LAUNCHED();
    omni_launch(moe_overflow_kernel, 1, GROUP_THREADS, 0, st, w.ovf_off, w.ovf_perm, w.slot, w.off, w.sel_e, n, E, C,
                k);
    OMNI_CUDA_LAUNCHED();
    /* gate/up rows [E·C + overflow][2I]: the padded block by cuBLAS, the overflow by the grouped kernel */
    if ((s = omni_cuda_linear_batched(ctx, w.go, (int64_t)C * 2 * I, w.xg, (int64_t)C * H, gate_up,
                                      (int64_t)2 * I * H, E, C, 2 * I, H)))
        return s;
    if ((s = omni_cuda_moe_grouped_linear(w.go + base * 2 * I, x, H, w.ovf_perm, gate_up, w.ovf_off, E, n, 2 * I, H,
                                          st)))
        return s;
    omni_launch(moe_swiglu_kernel, ew_blocks((base + n) * (I / 8)), EW_THREADS, 0, st, w.act, w.go, (int64_t)2 * I,
                base, w.ovf_off + E, I);
    OMNI_CUDA_LAUNCHED();
    /* down rows [E·C + overflow][H], over the gate/up rows (dead after the SwiGLU) */
    if ((s = omni_cuda_linear_batched(ctx, w.go, (int64_t)C * H, w.act, (int64_t)C * I, down, (int64_t)H * I, E, C,
                                      H, I)))
        return s;
    if ((s = omni_cuda_moe_grouped_linear(w.go + base * H, w.act + base * I, I, NULL, down, w.ovf_off, E, n, H, I,
                                          st)))
        return s;
    return omni_cuda_moe_combine(y, w.go, w.slot, w.sel_e, w.sel_w, T, k, H, st);
}
