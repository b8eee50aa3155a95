/* kvc_attn_bf16.cu - decode attention for bf16 layers (one query token per sequence over the paged cache; the
 * kvc_decode contract of kvcache/kv_cuda.h), a kernel of its own: bf16 layers need no dequantization, so the work
 * is streaming K/V rows at the copy bandwidth with as little fixed cost per call as possible.
 *
 * Two kernels per call (launch shapes depend on n_seq only; lengths are read on the device: graph capturable):
 *   split    one wave of G CTAs (resident CTAs per SM x SMs) of NW warps. The blocks (32 tokens) of all sequences
 *            in batch order form one list of T blocks; CTA c takes the contiguous range [c T / G, (c + 1) T / G),
 *            i.e. every CTA the same number of blocks (+-1) whatever the lengths, and a range may span sequences
 *            (one "segment" per sequence it touches). In a segment the CTA covers every head row (a KV head and
 *            up to 8 of its query heads, HP = Hkv * ceil(group / 8)): warp w takes head row w % HP (NSUB = NW / HP
 *            warps per head row take every NSUB-th half-block); so the warps of a CTA read the same pages at the
 *            same time, and a page's table entry is read by one CTA. Each warp streams half-blocks (16 tokens:
 *            16 K rows + 16 V rows of one KV head) through a private ring of NST shared-memory stages filled by
 *            cp.async (16 bytes per lane, 512 contiguous bytes per warp instruction, completion on the stage's
 *            mbarrier), rows XOR-swizzled in 16-byte chunks (chunk ^ row % 8) so that ldmatrix is conflict-free
 *            without padding. Online softmax on tensor cores (bf16 MMAs, q~ and P split hi + lo: the error stays
 *            at the output's own bf16 rounding), one partial (m, l, acc[8][D], log2 domain) per segment, head
 *            row and warp team, written to slot c + s (unique: c and s only grow along the block list).
 *   combine  grid (Hq, n_seq), D x cg threads, programmatic dependent launch: log-sum-exp merge of a sequence's
 *            partials (slots [c_first + s, c_last + s], the CTAs its blocks fall in), 1/l, un-rotation (FWHT)
 *            when the layer rotates, bf16 out.
 * Tensor-core mapping (mma.m16n8k16, lane = 4 g + t): scores S^T[token][head] = K[token][channel] . q~[channel]
 * [head] (16 tokens = 1 M tile, D / 16 k-steps, two chains: q~ hi and lo); values O^T[channel][head] +=
 * V^T[channel][token] . P^T[token][head] (D / 16 M tiles, 1 k-step of 16 tokens, P hi and lo), P^T from the score
 * accumulators by movmatrix. Rows of tokens past the sequence are copies of its last row (finite; their scores
 * are masked), so nothing beyond a sequence's length is read. */
#include "kvc_attn_bf16.cuh"
#include "kvc_common.cuh"
#include "kvc_ptx.cuh"

#include <stdlib.h>

extern "C" {
#include "kvcache/kv_cuda.h"
}

#define B16_COLS 8   /* query heads per head row (MMA N) */
#define B16_CU 8     /* combine: partials per load round and group */
#define B16_CG_MAX 8 /* combine: groups of D threads */
#define B16_LOG2E 1.4426950408889634f

/* Variant v: NW warps per CTA, NST ring stages (half-blocks) per warp. */
static constexpr int B16_NW[KVC_B16_NVAR] = {8, 8, 4, 4};
static constexpr int B16_NST[KVC_B16_NVAR] = {3, 2, 2, 4};

struct b16_args {
    kv_layer_view v;
    const int32_t *slots, *n_new; /* [n_seq] or NULL */
    const uint16_t *q;            /* [n_seq][Hq][D] bf16 */
    float *part;                  /* [slot][nsub][HP][8][D] */
    float2 *ml;                   /* [slot][nsub][HP][8] (m, l) */
    int2 *seqinfo;                /* [n_seq] (first slot, slots) */
    int n_seq, Hq, gs, n_pass, HP, nsub, G;
    float qscale; /* softmax scale * log2(e) */
};

struct b16_comb_args {
    const float *part;
    const float2 *ml;
    const int2 *seqinfo;
    uint16_t *out;
    int Hq, gs, n_pass, HP, nsub, rotate;
};

/* Dynamic shared memory of a split CTA: stage barriers, the block list's prefix sums, a q row per warp, rings. */
template <int D, int NW, int NST> struct b16_layout {
    static constexpr int STAGE = 64 * D; /* K [16][D] + V [16][D] bf16 */
    static constexpr int SCHED = (NW * NST * 8 + 15) / 16 * 16;
    static constexpr int QROW = SCHED + (KVC_MAX_SEQS + 2) * 8;
    static constexpr int RINGS = (QROW + NW * D * 4 + 127) / 128 * 128;
    static constexpr int BYTES = RINGS + NW * NST * STAGE;
};

template <int D> struct b16_state {
    float o[D / 16][4]; /* O^T: M tile mt, rows channel 16 mt + g (c0, c1) and + 8 (c2, c3), cols heads 2t, 2t+1 */
    float m[2], l[2];   /* running max (log2 domain), lane-partial sum of p, heads 2t, 2t+1 */
};

__device__ __forceinline__ int64_t b16_len(const b16_args &a, int s) {
    return (int64_t)a.v.len[a.slots ? a.slots[s] : s] + (a.n_new ? a.n_new[s] : 0);
}
/* Valid rows of half-block i of a sequence of L tokens. */
__device__ __forceinline__ int b16_rows(int64_t L, int i) { return L - 16 * (int64_t)i < 16 ? (int)(L - 16 * (int64_t)i) : 16; }
/* CTA whose block range holds global block x (T blocks over G CTAs). */
__device__ __forceinline__ int b16_cta_of(long long x, long long T, int G) { return (int)(((x + 1) * G - 1) / T); }

/* Page of block b of slot sl (blocks < nq of a quantizing cache are in quant pages, raw layout). */
__device__ __forceinline__ int32_t b16_page(const kv_layer_view &v, int sl, int nq, int b) {
    return b < nq ? kv_view_quant_page(&v, sl, b) : kv_view_raw_page(&v, sl, b);
}

/* cp.async of half-block i (rows [16 i, 16 i + n) of KV head kvh; page p) into stage st, swizzled; every lane
 * arrives on bar once its copies have landed. Rows >= n repeat row n - 1. */
template <int D>
__device__ __forceinline__ void b16_issue(const kv_layer_view &v, int nq, int kvh, int i, int n, int32_t p,
                                          uint8_t *st, uint64_t *bar, int lane) {
    constexpr int CH = D / 8; /* 16-byte chunks per row */
    const int b = i >> 1;
    const int64_t off = (int64_t)(i & 1) * 16 * D * 2;
    const uint8_t *k = (b < nq ? kv_view_quant_block(&v, p, kvh, 0) : kv_view_raw_rows(&v, p, kvh, 0)) + off;
    const uint8_t *vv = (b < nq ? kv_view_quant_block(&v, p, kvh, 1) : kv_view_raw_rows(&v, p, kvh, 1)) + off;
#pragma unroll
    for (int j = 0; j < 16 * CH / 32; j++) {
        const int x = 32 * j + lane, row = x / CH, ch = x % CH, rs = row < n ? row : n - 1;
        const int d = row * 2 * D + ((ch ^ (row & 7)) << 4);
        kvc_cp16_nh(st + d, k + rs * 2 * D + ch * 16);
        kvc_cp16_nh(st + 32 * D + d, vv + rs * 2 * D + ch * 16);
    }
    kvc_cp_arrive(bar);
}

/* Scores, online softmax and values of one staged half-block (n valid rows). */
template <int D>
__device__ __forceinline__ void b16_item(const uint8_t *st, int n, const uint32_t (&qh)[D / 16][2],
                                         const uint32_t (&ql)[D / 16][2], b16_state<D> &w, int lane) {
    const uint8_t *K = st, *V = st + 32 * D;
    const int g = lane >> 2;
    float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int lrow = (lane & 7) + 8 * ((lane >> 3) & 1), lch = lane >> 4;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        uint32_t a[4];
        kvc_ldsm4(a, K + lrow * 2 * D + (((2 * ks + lch) ^ (lrow & 7)) << 4));
        kvc_mma_bf16(sa, a, qh[ks][0], qh[ks][1]);
        kvc_mma_bf16(sb, a, ql[ks][0], ql[ks][1]);
    }
    float s[2][2];
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
        for (int e = 0; e < 2; e++) s[u][e] = g + 8 * u < n ? sa[2 * u + e] + sb[2 * u + e] : -INFINITY;
    float mx0 = fmaxf(s[0][0], s[1][0]), mx1 = fmaxf(s[0][1], s[1][1]);
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
    }
    const float mn0 = fmaxf(w.m[0], mx0), mn1 = fmaxf(w.m[1], mx1);
    if (__any_sync(0xffffffffu, mn0 > w.m[0] || mn1 > w.m[1])) { /* rescale (warp-uniform branch) */
        const float c0 = w.m[0] == -INFINITY ? 0.0f : kvc_ex2(w.m[0] - mn0);
        const float c1 = w.m[1] == -INFINITY ? 0.0f : kvc_ex2(w.m[1] - mn1);
#pragma unroll
        for (int mt = 0; mt < D / 16; mt++) w.o[mt][0] *= c0, w.o[mt][1] *= c1, w.o[mt][2] *= c0, w.o[mt][3] *= c1;
        w.l[0] *= c0, w.l[1] *= c1;
        w.m[0] = mn0, w.m[1] = mn1;
    }
    const float b0 = w.m[0] == -INFINITY ? 0.0f : w.m[0], b1 = w.m[1] == -INFINITY ? 0.0f : w.m[1];
    uint32_t ph[2], pl[2]; /* P = hi + lo in bf16, C layout rows u */
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const float p0 = kvc_ex2(s[u][0] - b0), p1 = kvc_ex2(s[u][1] - b1);
        w.l[0] += p0, w.l[1] += p1;
        ph[u] = kvc_bf16x2(p0, p1);
        pl[u] = kvc_bf16x2(p0 - __uint_as_float(ph[u] << 16), p1 - __uint_as_float(ph[u] & 0xffff0000u));
    }
    const uint32_t bh0 = kvc_movm(ph[0]), bh1 = kvc_movm(ph[1]), bl0 = kvc_movm(pl[0]), bl1 = kvc_movm(pl[1]);
    const int vtok = (lane & 7) + 8 * (lane >> 4), vch = (lane >> 3) & 1;
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++) {
        uint32_t a[4];
        kvc_ldsm4_t(a, V + vtok * 2 * D + (((2 * mt + vch) ^ (vtok & 7)) << 4));
        kvc_mma_bf16(w.o[mt], a, bh0, bh1);
        kvc_mma_bf16(w.o[mt], a, bl0, bl1);
    }
}

/* q~ fragments of a head row (heads h0 .. h0 + nh - 1 of batch entry s; zero columns beyond nh): xq holds the
 * raw rows (xq[h][j] = channel 32 j + lane); FWHT when rotating, times qscale, through the warp's smem row, into
 * bf16 hi + lo B fragments (channels 16 ks + 2t, +1 | +8, +9 of head g). */
template <int D>
__device__ __forceinline__ void b16_q_frags(const b16_args &a, float (&xq)[B16_COLS][D / 32], float *qrow,
                                            uint32_t (&qh)[D / 16][2], uint32_t (&ql)[D / 16][2], int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < B16_COLS; h++) {
        if (a.v.rotate) kvc_fwht_warp<D>(xq[h], lane);
#pragma unroll
        for (int j = 0; j < D / 32; j++) qrow[32 * j + lane] = xq[h][j] * a.qscale;
        __syncwarp();
        if (g == h)
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                const float *p = qrow + 16 * ks + 2 * t;
                qh[ks][0] = kvc_bf16x2(p[0], p[1]), qh[ks][1] = kvc_bf16x2(p[8], p[9]);
                ql[ks][0] = kvc_bf16x2(p[0] - __uint_as_float(qh[ks][0] << 16),
                                       p[1] - __uint_as_float(qh[ks][0] & 0xffff0000u));
                ql[ks][1] = kvc_bf16x2(p[8] - __uint_as_float(qh[ks][1] << 16),
                                       p[9] - __uint_as_float(qh[ks][1] & 0xffff0000u));
            }
        __syncwarp();
    }
}

/* The warp's state as a partial: acc [8][D] (heads < nh), (m, l) summed over the warp. */
template <int D>
__device__ __forceinline__ void b16_store(b16_state<D> &w, float *part, float2 *ml, int nh, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int e = 0; e < 2; e++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) w.l[e] += __shfl_xor_sync(0xffffffffu, w.l[e], o);
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (2 * t + e < nh) part[(2 * t + e) * D + 16 * mt + g + 8 * u] = w.o[mt][2 * u + e];
    if (g == 0)
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (2 * t + e < nh) ml[2 * t + e] = make_float2(w.m[e], w.l[e]);
}

/* One head row of one segment (sequence s, half-blocks [it0, it1)) for warp team sub: its items it0 + sub + k nsub
 * through the ring (kk = this warp's stage uses before), then the partial of slot pslot. */
template <int D, int NST>
__device__ __forceinline__ void b16_task(const b16_args &a, int s, int sl, int64_t L, int nq, int it0, int it1,
                                         int hr, int sub, int pslot, uint8_t *ring, uint64_t *bars, float *qrow,
                                         int &kk, int lane) {
    const int kvh = hr / a.n_pass, pass = hr % a.n_pass, h0 = kvh * a.gs + pass * B16_COLS;
    const int nh = min(B16_COLS, a.gs - pass * B16_COLS);
    const int first = it0 + sub, cnt = first < it1 ? (it1 - first + a.nsub - 1) / a.nsub : 0;
    const size_t pi = ((size_t)pslot * a.nsub + sub) * a.HP + hr;
    if (cnt == 0) { /* an empty partial (the combine reads every slot of the sequence) */
        for (int i = lane; i < nh * D; i += 32) a.part[pi * B16_COLS * D + i] = 0.0f;
        if (lane < nh) a.ml[pi * B16_COLS + lane] = make_float2(-INFINITY, 0.0f);
        return;
    }
    float xq[B16_COLS][D / 32]; /* q rows: loads in flight while the first copies are issued */
    const uint16_t *qs = a.q + ((size_t)s * a.Hq + h0) * D;
#pragma unroll
    for (int h = 0; h < B16_COLS; h++)
#pragma unroll
        for (int j = 0; j < D / 32; j++) xq[h][j] = h < nh ? kvc_bf2f(qs[h * D + 32 * j + lane]) : 0.0f;
    int32_t pg[NST];
#pragma unroll
    for (int k = 0; k < NST; k++) pg[k] = k < cnt ? b16_page(a.v, sl, nq, (first + k * a.nsub) >> 1) : 0;
#pragma unroll
    for (int k = 0; k < NST; k++)
        if (k < cnt) {
            const int i = first + k * a.nsub, st = (kk + k) % NST;
            b16_issue<D>(a.v, nq, kvh, i, b16_rows(L, i), pg[k], ring + st * 64 * D,
                         &bars[st], lane);
        }
    int32_t pn = NST < cnt ? b16_page(a.v, sl, nq, (first + NST * a.nsub) >> 1) : 0; /* next issue's page */
    uint32_t qh[D / 16][2], ql[D / 16][2];
    b16_q_frags<D>(a, xq, qrow, qh, ql, lane);
    b16_state<D> w;
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int i = 0; i < 4; i++) w.o[mt][i] = 0.0f;
    w.m[0] = w.m[1] = -INFINITY;
    w.l[0] = w.l[1] = 0.0f;
    for (int k = 0; k < cnt; k++) {
        const int u = kk + k, st = u % NST, i = first + k * a.nsub;
        kvc_mbar_wait(&bars[st], (u / NST) & 1);
        b16_item<D>(ring + st * 64 * D, b16_rows(L, i), qh, ql, w, lane);
        __syncwarp(); /* every lane's reads of the stage are done before it is refilled */
        if (k + NST < cnt) {
            const int in = first + (k + NST) * a.nsub;
            b16_issue<D>(a.v, nq, kvh, in, b16_rows(L, in), pn, ring + st * 64 * D, &bars[st],
                         lane);
            if (k + NST + 1 < cnt) pn = b16_page(a.v, sl, nq, (first + (k + NST + 1) * a.nsub) >> 1);
        }
    }
    kk += cnt;
    b16_store<D>(w, a.part + pi * B16_COLS * D, a.ml + pi * B16_COLS, nh, lane);
}

template <int D, int NW, int NST>
__global__ void __launch_bounds__(NW * 32, 1) b16_split_kernel(const __grid_constant__ b16_args a) {
    using Y = b16_layout<D, NW, NST>;
    KVC_DYN_SMEM(uint8_t, smem);
    uint64_t *bars = (uint64_t *)smem;
    long long *bstart = (long long *)(smem + Y::SCHED); /* [n + 1] first global block of each sequence */
    int *found = (int *)(bstart + KVC_MAX_SEQS + 1);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n = a.n_seq, c = blockIdx.x;
    kvc_pdl_wait(); /* launched early (programmatic serialization): the kernel before has completed from here */
    for (int s = tid; s < n; s += NW * 32) bstart[s] = (b16_len(a, s) + 31) / 32;
    if (tid == 0) *found = -1;
    if (lane == 0)
        for (int i = 0; i < NST; i++) kvc_mbar_init(&bars[warp * NST + i], 32);
    kvc_fence_mbar_init();
    __syncthreads();
    if (warp == 0) { /* exclusive prefix sums in place, 32 sequences per step */
        long long carry = 0;
        for (int base = 0; base < n; base += 32) {
            const int s = base + lane;
            const long long x = s < n ? bstart[s] : 0;
            long long incl = x;
            for (int o = 1; o < 32; o <<= 1) {
                const long long y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
            if (s < n) bstart[s] = carry + incl - x;
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0) bstart[n] = carry;
    }
    __syncthreads();
    const long long T = bstart[n];
    const int G = a.G;
    long long g0 = T > 0 ? T * c / G : 0;
    const long long g1 = T > 0 ? T * (c + 1) / G : 0;
    if (c == 0) /* the combine's table: sequence s's partials are in slots [c_first + s, c_last + s] */
        for (int s = tid; s < n; s += NW * 32) {
            const long long b0 = bstart[s], b1 = bstart[s + 1];
            const int cf = b1 > b0 ? b16_cta_of(b0, T, G) : 0, cl = b1 > b0 ? b16_cta_of(b1 - 1, T, G) : -1;
            a.seqinfo[s] = make_int2(cf + s, cl - cf + 1);
        }
    for (int s = tid; s < n; s += NW * 32) /* the sequence of block g0; an empty CTA (T < G): the sequence whose
                                             * blocks lie on both sides of it (its slot must hold an empty partial) */
        if (g0 < g1 ? bstart[s] <= g0 && g0 < bstart[s + 1] : bstart[s] < g0 && g0 < bstart[s + 1]) *found = s;
    __syncthreads();
    /* the combine kernel may be scheduled now (it waits for this grid to complete): once every CTA of this wave has
     * started, its CTAs take the resources that finishing CTAs free, so the launch latency overlaps the streaming */
    kvc_pdl_launch();
    uint8_t *ring = smem + Y::RINGS + warp * NST * Y::STAGE;
    float *qrow = (float *)(smem + Y::QROW) + warp * D;
    int s = *found, kk = 0;
    if (g0 == g1 && s >= 0)
        for (int task = warp; task < a.HP * a.nsub; task += NW)
            b16_task<D, NST>(a, s, 0, 0, 0, 0, 0, task % a.HP, task / a.HP, c + s, ring, bars + warp * NST, qrow, kk,
                             lane);
    while (g0 < g1) { /* segments: uniform over the CTA, warps independent inside */
        const long long b0 = bstart[s], b1 = bstart[s + 1], e = g1 < b1 ? g1 : b1;
        const int sl = a.slots ? a.slots[s] : s;
        const int64_t L = b16_len(a, s);
        const int nq = kv_view_nq(&a.v, L), nit = (int)((L + 15) / 16);
        const int it0 = 2 * (int)(g0 - b0), it1 = min(2 * (int)(e - b0), nit);
        for (int task = warp; task < a.HP * a.nsub; task += NW)
            b16_task<D, NST>(a, s, sl, L, nq, it0, it1, task % a.HP, task / a.HP, c + s, ring, bars + warp * NST,
                             qrow, kk, lane);
        g0 = e;
        for (s++; s < n && bstart[s + 1] == bstart[s]; s++) {
        }
    }
}

/* grid (Hq, n_seq), D * cg threads: group j merges entries j, j + cg, ... of the sequence's partials for head h
 * (B16_CU per load round), the groups meet in shared memory; 1/l, FWHT when rotating, bf16 out. */
template <int D> __global__ void __launch_bounds__(D * B16_CG_MAX) b16_combine_kernel(const __grid_constant__ b16_comb_args a) {
    KVC_DYN_SMEM(float, x); /* [cg][D] group sums (then the output row); [cg] (m, l) */
    const int cg = blockDim.x / D;
    float2 *gml = (float2 *)(x + cg * D);
    const int h = blockIdx.x, s = blockIdx.y, tid = threadIdx.x, ch = tid % D, j = tid / D;
    const int kvh = h / a.gs, hi = h % a.gs, hr = kvh * a.n_pass + hi / B16_COLS, col = hi % B16_COLS;
    kvc_pdl_wait();   /* the split kernel's partials and table */
    kvc_pdl_launch(); /* the next kernel may be scheduled (it waits for this grid to complete) */
    const int2 info = a.seqinfo[s];
    const int ne = info.y * a.nsub;
    const size_t base = (size_t)info.x * a.nsub;
    float M = -INFINITY, Ls = 0.0f, A = 0.0f;
    for (int e0 = j; e0 < ne; e0 += B16_CU * cg) {
        float2 ml[B16_CU];
        float p[B16_CU];
#pragma unroll
        for (int u = 0; u < B16_CU; u++) {
            const int e = e0 + u * cg;
            const size_t pi = ((base + e) * a.HP + hr) * B16_COLS + col;
            ml[u] = e < ne ? a.ml[pi] : make_float2(-INFINITY, 0.0f);
            p[u] = e < ne ? a.part[pi * D + ch] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < B16_CU; u++) {
            if (ml[u].x == -INFINITY) continue;
            if (ml[u].x > M) {
                const float cc = M == -INFINITY ? 0.0f : kvc_ex2(M - ml[u].x);
                A *= cc, Ls *= cc, M = ml[u].x;
            }
            const float f = kvc_ex2(ml[u].x - M);
            A = fmaf(f, p[u], A), Ls = fmaf(f, ml[u].y, Ls);
        }
    }
    x[j * D + ch] = A;
    if (ch == 0) gml[j] = make_float2(M, Ls);
    __syncthreads();
    float Mx = -INFINITY, As = 0.0f, Ss = 0.0f;
    for (int i = 0; i < cg; i++) Mx = fmaxf(Mx, gml[i].x);
    if (Mx != -INFINITY)
        for (int i = 0; i < cg; i++) {
            const float2 gm = gml[i];
            const float f = gm.x == -INFINITY ? 0.0f : kvc_ex2(gm.x - Mx);
            As = fmaf(f, x[i * D + ch], As), Ss = fmaf(f, gm.y, Ss);
        }
    float y = Ss > 0.0f ? As / Ss : 0.0f;
    if (a.rotate) {
        __syncthreads(); /* every group has read the sums */
        if (j == 0) x[ch] = y;
        kvc_fwht_rows(x, 1, D, D, tid, blockDim.x);
        y = x[ch];
    }
    if (j == 0) a.out[((size_t)s * a.Hq + h) * D + ch] = kvc_f2bf(y);
}

/* ---------------------------------------------------------------- host */

typedef void (*b16_fn_t)(b16_args);

struct kvc_b16 {
    int D, Hq, Hkv, n_pass, HP, nsub, NW, G, bytes;
    b16_fn_t fn;
    float *part;
    float2 *ml;
    int2 *seqinfo;
};

template <int D, int V> static void b16_pick(kvc_b16 *b) {
    b->fn = b16_split_kernel<D, B16_NW[V], B16_NST[V]>;
    b->bytes = b16_layout<D, B16_NW[V], B16_NST[V]>::BYTES;
    b->NW = B16_NW[V];
}
template <int D> static void b16_pick_d(kvc_b16 *b, int var) {
    if (var == 1) b16_pick<D, 1>(b);
    else if (var == 2) b16_pick<D, 2>(b);
    else if (var == 3) b16_pick<D, 3>(b);
    else b16_pick<D, 0>(b);
}

omni_status kvc_b16_init(int var, int max_seqs, int Hq, int Hkv, int D, int n_pass, int n_sm,
                                      kvc_b16 **out) {
    *out = NULL;
    kvc_b16 *b = (kvc_b16 *)calloc(1, sizeof *b);
    if (!b) return omni_fail(OMNI_ERR_NOMEM, "kv cuda attn: out of memory");
    b->D = D, b->Hq = Hq, b->Hkv = Hkv, b->n_pass = n_pass, b->HP = Hkv * n_pass;
    if (D == 64) b16_pick_d<64>(b, var);
    else b16_pick_d<128>(b, var);
    b->nsub = b->NW / b->HP > 1 ? b->NW / b->HP : 1;
    int occ = 0;
    omni_status st = kvc_cuda_check(cudaFuncSetAttribute((const void *)b->fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         b->bytes), "bf16 attention smem attribute");
    if (!st)
        st = kvc_cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void *)b->fn, b->NW * 32, b->bytes),
                            "bf16 attention occupancy");
    b->G = (occ > 0 ? occ : 1) * n_sm;
    const size_t slots = (size_t)(b->G + max_seqs) * b->nsub * b->HP * B16_COLS;
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&b->part, slots * D * sizeof(float)), "cudaMalloc partials");
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&b->ml, slots * sizeof(float2)), "cudaMalloc partials");
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&b->seqinfo, (size_t)max_seqs * sizeof(int2)), "cudaMalloc");
    if (st) {
        kvc_b16_free(b);
        return st;
    }
    *out = b;
    return OMNI_OK;
}

void kvc_b16_free(kvc_b16 *b) {
    if (!b) return;
    cudaFree(b->part);
    cudaFree(b->ml);
    cudaFree(b->seqinfo);
    free(b);
}

int kvc_b16_ctas(const kvc_b16 *b) { return b->G; }

omni_status kvc_b16_decode(kvc_b16 *b, const kv_layer_view *v, int n_seq, const int32_t *slots,
                                        const int32_t *n_new, const uint16_t *q, uint16_t *out, float scale,
                                        void *stream) {
    cudaStream_t cs = (cudaStream_t)stream;
    b16_args a;
    a.v = *v, a.slots = slots, a.n_new = n_new, a.q = q;
    a.part = b->part, a.ml = b->ml, a.seqinfo = b->seqinfo;
    a.n_seq = n_seq, a.Hq = b->Hq, a.gs = b->Hq / b->Hkv, a.n_pass = b->n_pass, a.HP = b->HP, a.nsub = b->nsub;
    a.G = b->G, a.qscale = scale * B16_LOG2E;
    cudaError_t e = kvc_launch(b->fn, dim3(b->G), dim3(b->NW * 32), (size_t)b->bytes, cs, 1, a);
    if (e != cudaSuccess) return kvc_cuda_check(e, "bf16 decode attention launch");
    b16_comb_args ca;
    ca.part = b->part, ca.ml = b->ml, ca.seqinfo = b->seqinfo, ca.out = out;
    ca.Hq = b->Hq, ca.gs = a.gs, ca.n_pass = b->n_pass, ca.HP = b->HP, ca.nsub = b->nsub, ca.rotate = v->rotate;
    const int per = ((b->G + n_seq - 1) / n_seq + 1) * b->nsub; /* partials of a typical sequence */
    int cg = 1;
    while (cg < B16_CG_MAX && cg * B16_CU < per) cg <<= 1;
    const size_t csm = (size_t)cg * (b->D + 2) * sizeof(float);
    const dim3 grid(b->Hq, n_seq);
    e = b->D == 64 ? kvc_launch(b16_combine_kernel<64>, grid, dim3(64 * cg), csm, cs, 1, ca)
                   : kvc_launch(b16_combine_kernel<128>, grid, dim3(128 * cg), csm, cs, 1, ca);
    return kvc_cuda_check(e, "bf16 decode attention combine launch");
}
