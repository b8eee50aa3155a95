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

/* One warp per token. Round j of the top-k picks the first element (in top-k order) after pick j-1, so no
 * "taken" flags are needed. */
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
moe_route_kernel(int32_t *sel_e, float *sel_w, const float *logits, int T, int E, int k, int norm) {
    const int t = blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;
    const float *l = logits + (int64_t)t * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float s = 0.f;
    for (int e = lane; e < E; e += 32) s += expf(l[e] - mx);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.f / s;
    float pv = INFINITY, w[MOE_MAX_K];
    int pi = -1, idx[MOE_MAX_K];
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = INT32_MAX;
        for (int e = lane; e < E; e += 32) {
            float p = expf(l[e] - mx) * inv;
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
        sel_e[(int64_t)t * k + j] = idx[j];
        sel_w[(int64_t)t * k + j] = bf(norm ? w[j] / sum : w[j]);
    }
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
