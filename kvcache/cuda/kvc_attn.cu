/* kvc_attn.cu - decode attention (one query token per sequence) over the paged KV cache on the GPU: bf16 layers
 * and OScaR/KIVI quantized layers (int2/int4, any K/V mix) with their bf16 window and sinks, a batch of 1..256
 * sequences of different lengths, bf16 in and out (API and contract: kvcache/kv_cuda.h).
 *
 * Two kernels per call:
 *   split    grid (B * HP) CTAs of 4 warps, HP = Hkv * ceil(group / 8) "head rows" (a KV head and up to 8 of
 *            its query heads), B CTAs per head row (one full wave, or 1..4 per sequence for large batches: kvc_b). Per sequence and
 *            head row the work is a list of items: raw half-blocks (16 bf16 tokens: sinks, then the window)
 *            followed by quantized blocks (32 tokens); sequences get splits in proportion to their cost (raw
 *            item = KVC_RAW_COST, quant block = 1), each CTA one contiguous range of one list, its warps taking
 *            every 4th item. Each warp streams its items through a private ring of shared-memory stages filled
 *            by bulk async copies (cp.async.bulk + mbarrier), runs online softmax on tensor cores, and the
 *            4 warps are merged into one partial (m, l, acc[8][D], log2 domain) per CTA.
 *   combine  grid (Hq, n_seq), D x 1..8 threads, programmatic dependent launch: log-sum-exp merge of a
 *            sequence's partials (groups of D threads take every cg-th split, one round of loads each), 1/l,
 *            un-rotation (FWHT) when the layer rotates, bf16 out.
 * A warp issues its first copies before q is loaded (the prologue's latencies overlap). Both kernels are launched
 * with programmatic serialization and wait (griddepcontrol.wait) before their first global read, so the split
 * kernel's launch overlaps the end of the kernel before it.
 * Launch shapes depend on n_seq and the format only (lengths are read on the device): graph capturable.
 * kvc_decode on bf16 layers goes to the dedicated kernel of kvc_attn_bf16.cu when the configuration says ":b1".. ":b4"
 * (kvc_attn_params.bf16; default 0 = the kernels here until it is validated on the H200); kvc_decode_step (own tokens
 * from the step's rows) always takes the kernels here.
 *
 * Tensor-core mapping (mma.m16n8k16, f32 accumulators; up to 8 query heads of a KV head in N):
 *   scores  S^T[token][head] = K[token][channel] . Q~[channel][head]: 32 tokens = 2 M tiles, D / 16 k-steps.
 *   values  O^T[channel][head] += V^T[channel][token] . P^T[token][head]: D / 16 M tiles, 2 k-steps; P^T comes
 *           from the score accumulators by movmatrix (C fragments of 16 tokens x 8 heads -> B fragments).
 * Quantized blocks (spec/oscar.md section 5): codes enter the MMA as exact f16 subnormals: one PRMT gathers the
 * byte holding this lane's code from two words, one LOP3 masks it, so the f16 value is code * 4^f * 2^-24 (16^f
 * for 4-bit codes) with f fixed per lane; 2^24 / 4^f is applied per score / output channel. The per-channel
 * key scale is folded into the query (B = f16(q~ * sc), one HMUL2 per register), the key minimum enters as a
 * bias MMA (A = min broadcast over rows, B = q~), the per-token norm multiplies the score; the per-token value
 * scale multiplies P before the transpose (per group of 32 channels), the value minimum is one MMA per k-step
 * (A = min^T [group][token], B = P^T). Score rows are permuted (kvc_row_tok: for 2-bit keys the two rows of a
 * lane are two codes of one byte, so one PRMT feeds both) so that the value-code rows a lane reads hit distinct
 * shared-memory banks. q~ carries softmax scale * log2(e) and a
 * power of two per head (f16 range). OMNI_KVC_MAGIC=1 (read at kvc_attn_init) selects normal f16 codes instead
 * (1024 + code 4^f, LOP3 adds the exponent; one extra MMA with a -1024 operand removes the offset): the fallback
 * should a GPU flush f16 subnormal MMA operands. Raw (bf16) items use bf16 MMAs with ldmatrix from padded rows, q~ and P
 * split into bf16 hi + lo (two MMAs each: raw items are memory-bound).
 * Accuracy: f16 operands for quantized blocks (codes exact, 11-bit roundings of q~ sc and p sc), 16-bit q~ and
 * P for raw rows, f32 accumulation: the error is dominated by the bf16 rounding of the output itself
 * (RMS ~1.6e-3 of RMS out; policy: 3e-3, performance.md section 4). */
#include "kvc_attn_bf16.cuh"
#include "kvc_common.cuh"
#include "kvc_ptx.cuh"

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kvcache/kv_cuda.h"
}

#define KVC_NW 4        /* warps per split CTA */
#define KVC_NT (KVC_NW * 32)
#define KVC_NCOL 8      /* query heads per head row (MMA N) */
#define KVC_RAW_COST 4  /* cost of a raw half-block item in quantized-block units (bytes 2.8x, single-buffered) */
#define KVC_LOG2E 1.4426950408889634f

/* ---------------------------------------------------------------- formats */

/* Compiled variants of the split kernel, for A/B timing in one run (kvc_attn_params.variant; head_dim 128 with
 * subnormal codes only: head_dim 64 and OMNI_KVC_MAGIC use variant 0): quantized ring stages per warp (0: the
 * format's default), raw stages at least (0: the default, 3 for bf16 layers, 1 for quantized ones) and the minimum
 * resident CTAs per SM that the register allocation must allow (__launch_bounds__); x2*: a warp takes two
 * quantized blocks per step (two independent score chains, one softmax update); p1: raw (bf16) items weight the
 * values with P rounded once to bf16 (one MMA instead of hi + lo). (The variants q3r2a / basea, raw rows copied by
 * the lanes with cp.async instead of bulk copies, were removed: ptxas 13.0 compiled cp.async (LDGSTS) in their
 * quantized kernels with uniform registers UR0/UR1 that nothing writes - an illegal instruction on the H200 - and
 * they had measured no gain.) */
#define KVC_NVAR 8
static constexpr int KVC_VAR_NSQ[KVC_NVAR] = {0, 2, 3, 6, 0, 0, 0, 0};
static constexpr int KVC_VAR_NSR[KVC_NVAR] = {0, 1, 2, 3, 1, 0, 0, 0};
static constexpr int KVC_VAR_MINB[KVC_NVAR] = {1, 4, 4, 1, 4, 2, 3, 1};
static constexpr int KVC_VAR_NB[KVC_NVAR] = {1, 1, 1, 1, 1, 2, 2, 1}; /* quantized blocks per step of a warp */
static constexpr int KVC_VAR_P1[KVC_NVAR] = {0, 0, 0, 0, 0, 0, 0, 1}; /* raw values: P without its lo part */
/* "auto" (index KVC_NVAR, the default) is no compiled variant: each kind takes the variant that measured best
 * for it on the H200 (bench/NOTES.md): bf16 layers KVC_AUTO_RAW, quantized layers KVC_AUTO_Q. */
#define KVC_AUTO_RAW 2 /* q3r2 */
#define KVC_AUTO_Q 6   /* x2b3 */
static const char *const kvc_var_names[KVC_NVAR + 1] = {"base", "q2r1", "q3r2",  "q6r3",  "q4r1", "x2",
                                                        "x2b3", "p1",   "auto"};

/* D head dim; KB / VB key / value bits (2, 4) or both 16 (bf16 layer); V variant. Shared memory per warp: a ring
 * of NSQ quantized stages or NSR raw stages (the same bytes). */
template <int D, int KB, int VB, int V = 0> struct kvc_fmt {
    static constexpr bool Q = KB != 16;
    static constexpr int NG = D / 32;                              /* value groups per token */
    static constexpr int KCODE = Q ? D * 32 * KB / 8 : 0;          /* key code bytes */
    static constexpr int KMAX = Q ? KCODE + 4 * D + 64 : 0;        /* key block bytes with norms */
    static constexpr int VCODE = Q ? 32 * D * VB / 8 : 0;
    static constexpr int VBYTES = Q ? VCODE + 4 * D : 0;           /* value block bytes */
    static constexpr int QSTAGE = (KMAX + VBYTES + 127) / 128 * 128;
    static constexpr int RS = 2 * D + 16;                          /* padded bf16 row (ldmatrix: no conflicts) */
    static constexpr int RSTAGE = 32 * RS;                         /* 16 K rows + 16 V rows */
    static constexpr int NSQ0 = Q ? (D == 128 ? (KB + VB == 4 ? 4 : 3) : 5) : 0;
    static constexpr int NSQ = Q && KVC_VAR_NSQ[V] ? KVC_VAR_NSQ[V] : NSQ0;
    static constexpr int RAW = (KVC_VAR_NSR[V] ? KVC_VAR_NSR[V] : Q ? 1 : 3) * RSTAGE;
    static constexpr int RING = NSQ * QSTAGE > RAW ? NSQ * QSTAGE : RAW;
    static constexpr int NSR = RING / RSTAGE;
    static constexpr int NBAR = NSQ > NSR ? NSQ : NSR;
};

/* Where a warp's quantized items first + 4 k live: page tab[4 k]; the key block of page p at kb + p * pb (its
 * norms included: kbytes), the value block at vb + p * pb. Computed once per warp and kept in shared memory (read
 * by lane 0 per copy: no registers held through the loop). */
struct kvc_qsrc {
    const int32_t *tab;
    const uint8_t *kb, *vb;
    int64_t pb;
    uint32_t kbytes;
};

/* Shared memory of a split CTA besides the warps' rings (which the final merge reuses): q~, the warps' block
 * sources. */
template <int D> struct kvc_cta_smem {
    float qs[KVC_NCOL][D]; /* q~ of the head row (zeros for absent heads) */
    int qexp[KVC_NCOL];    /* power-of-two exponent per head (quantized path) */
    kvc_qsrc qsrc[KVC_NW]; /* per warp (quantized path) */
};
/* The schedule's scratch: it lives in the rings (used only before the first copy is issued). */
struct kvc_sched_smem {
    int nsplit[KVC_MAX_SEQS], first[KVC_MAX_SEQS];
    long long wcost[KVC_NW];
    int wne[KVC_NW], found;
};

struct kvc_split_args {
    kv_layer_view v;
    const int32_t *slots; /* [n_seq] or NULL (identity) */
    const int32_t *n_new; /* [n_seq] tokens appended in this step (visible beyond len[slot]) or NULL */
    const uint16_t *q;    /* [n_seq][Hq][D] bf16 */
    float *part;          /* [slots][8][D] */
    float2 *ml;           /* [slots][8] (m, l) */
    int2 *seqinfo;        /* [n_seq] (first slot, splits) */
    int n_seq, Hq, gs, n_pass, HP, B;
    float qscale;         /* softmax scale * log2(e) */
};

struct kvc_combine_args {
    const float *part;
    const float2 *ml;
    const int2 *seqinfo;
    uint16_t *out;
    int Hq, gs, n_pass, B, rotate;
    /* kvc_decode_step: entry s's own token (row s of kn / vn, [n_seq][Hkv][D] bf16, unrotated) when own_n is NULL
     * or own_n[s] > 0, scored against q (row s, unrotated: q . k = q~ . k~) in f32; kn NULL: none */
    const uint16_t *q, *kn, *vn;
    const int32_t *own_n;
    int Hkv;
    float qscale;
};

typedef void (*kvc_split_fn_t)(kvc_split_args);

struct kvc_attn {
    int max_seqs, Hq, Hkv, D, n_sm, n_pass, HP;
    kvc_attn_params p;     /* variant, waves, CTA cap, magic codes */
    kvc_split_fn_t fn[5];  /* split kernel per kind: bf16, q22, q24, q42, q44 */
    int bytes[5];          /* its dynamic shared memory (padded when p.ctas_per_sm caps the residency) */
    int occ[5];            /* resident split CTAs per SM */
    kvc_b16 *b16;          /* the dedicated bf16-layer kernel (kvc_attn_bf16.cu) when p.bf16 > 0 */
    int max_slots;         /* partial slots in the workspace */
    float *part;
    float2 *ml;
    int2 *seqinfo;
};

/* ---------------------------------------------------------------- small helpers */

__device__ __forceinline__ float kvc_warp_max(float x) {
    for (int o = 16; o; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float kvc_warp_sum(float x) {
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
template <int I> __device__ __forceinline__ uint32_t kvc_u4(const uint4 &u) {
    return I == 0 ? u.x : I == 1 ? u.y : I == 2 ? u.z : u.w;
}
/* 2^e as a float, exactly (e clamped to the normal range). */
__device__ __forceinline__ float kvc_exp2i(int e) {
    e = e < -126 ? -126 : e > 127 ? 127 : e;
    return __int_as_float((127 + e) << 23);
}
/* a * b / c (a, b >= 0, c > 0): a 32-bit division when the operands fit (no 64-bit division routine in the
 * schedule's common case). */
__device__ __forceinline__ int64_t kvc_muldiv(int64_t a, int64_t b, int64_t c) {
    const int64_t p = a * b;
    if (p <= 0xffffffffLL && c <= 0xffffffffLL) return (int64_t)((uint32_t)p / (uint32_t)c);
    return p / c;
}
__device__ __forceinline__ int kvc_nq(const kv_layer_view &v, int64_t L) { return kv_view_nq(&v, L); }
__device__ __forceinline__ int kvc_slot(const int32_t *slots, int i) { return slots ? slots[i] : i; }
/* Visible tokens of batch entry i: the slot's committed length plus the tokens appended in this step. */
__device__ __forceinline__ int64_t kvc_len(const kv_layer_view &v, const int32_t *slots, const int32_t *n_new, int i) {
    return (int64_t)v.len[kvc_slot(slots, i)] + (n_new ? n_new[i] : 0);
}

/* ---------------------------------------------------------------- schedule
 * Items of one (sequence, head row): raw half-blocks first (sinks: ceil(S / 16) when S > 0 and block 0 is
 * quantized; then ceil((L - 32 nq) / 16) window half-blocks), then nq quantized blocks. A bf16 layer has only
 * raw items: ceil(L / 16) half-blocks of the whole sequence. */
struct kvc_items {
    int nsink, nraw, nq; /* raw items (sinks included), quantized items */
};

template <bool Q> __device__ __forceinline__ kvc_items kvc_seq_items(const kv_layer_view &v, int64_t L) {
    kvc_items it;
    if (!Q) {
        it.nsink = 0, it.nq = 0, it.nraw = (int)((L + 15) / 16);
        return it;
    }
    it.nq = kvc_nq(v, L);
    it.nsink = it.nq > 0 && v.n_sink > 0 ? (v.n_sink + 15) / 16 : 0;
    it.nraw = it.nsink + (int)((L - (int64_t)KVC_G * it.nq + 15) / 16);
    return it;
}
template <bool Q> __device__ __forceinline__ int64_t kvc_cost(const kvc_items &it) {
    return Q ? (int64_t)KVC_RAW_COST * it.nraw + it.nq : it.nraw;
}
/* First item of the part [k / n, (k + 1) / n) of the cost of a list (raw items cost KVC_RAW_COST). */
template <bool Q> __device__ __forceinline__ int kvc_item_at(const kvc_items &it, int k, int n) {
    const int64_t c = kvc_muldiv(kvc_cost<Q>(it), k, n);
    if (!Q) return (int)c;
    const int64_t craw = (int64_t)KVC_RAW_COST * it.nraw;
    return c <= craw ? (int)((c + KVC_RAW_COST - 1) / KVC_RAW_COST) : it.nraw + (int)(c - craw);
}

struct kvc_role {
    int seq, slot, hr, i0, i1; /* seq (batch index) < 0: idle */
    kvc_items it;
    int64_t L;
};

/* Splits per sequence (in proportion to cost, >= 1 when it has work, <= ceil(items / 4)), their prefix sums,
 * and this CTA's role. All threads of the CTA call it. CTA c < n_seq also records sequence c's (first, splits)
 * for the combine kernel. sm lies in the rings: the caller's next barrier must come before any copy into them. */
template <bool Q> __device__ kvc_role kvc_schedule(const kvc_split_args &a, kvc_sched_smem &sm) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n = a.n_seq;
    long long cost = 0;
    int ne = 0;
    for (int s = tid; s < n; s += KVC_NT) {
        const int64_t c = kvc_cost<Q>(kvc_seq_items<Q>(a.v, kvc_len(a.v, a.slots, a.n_new, s)));
        cost += c, ne += c > 0;
    }
    for (int o = 16; o; o >>= 1) {
        cost += __shfl_xor_sync(0xffffffffu, cost, o);
        ne += __shfl_xor_sync(0xffffffffu, ne, o);
    }
    if (lane == 0) sm.wcost[warp] = cost, sm.wne[warp] = ne;
    __syncthreads();
    long long ctot = 0;
    int NE = 0;
    for (int w = 0; w < KVC_NW; w++) ctot += sm.wcost[w], NE += sm.wne[w];
    for (int s = tid; s < n; s += KVC_NT) {
        const kvc_items it = kvc_seq_items<Q>(a.v, kvc_len(a.v, a.slots, a.n_new, s));
        const int64_t c = kvc_cost<Q>(it);
        int ns = 0;
        if (c > 0) {
            const int64_t prop = 1 + kvc_muldiv(a.B - NE, c, ctot), most = (it.nraw + it.nq + KVC_NW - 1) / KVC_NW;
            ns = (int)(prop < most ? prop : most);
        }
        sm.nsplit[s] = ns;
    }
    __syncthreads();
    if (warp == 0) { /* exclusive prefix sums, 32 entries per step */
        int carry = 0;
        for (int base = 0; base < n; base += 32) {
            const int s = base + lane, x = s < n ? sm.nsplit[s] : 0;
            int incl = x;
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
            if (s < n) sm.first[s] = carry + incl - x;
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
    }
    if (tid == 0) sm.found = -1;
    __syncthreads();
    kvc_role r;
    r.seq = -1, r.slot = 0, r.hr = 0, r.i0 = r.i1 = 0, r.L = 0;
    r.it.nsink = r.it.nraw = r.it.nq = 0;
    const int c = blockIdx.x, hr = c / a.B, j = c % a.B;
    if (c < n && tid == 0) a.seqinfo[c] = make_int2(sm.first[c], sm.nsplit[c]);
    for (int s = tid; s < n; s += KVC_NT)
        if (sm.nsplit[s] > 0 && sm.first[s] <= j && j < sm.first[s] + sm.nsplit[s]) sm.found = s;
    __syncthreads();
    const int s = sm.found;
    kvc_fence_proxy_async(); /* these generic writes before the bulk copies that reuse the bytes */
    if (s < 0 || hr >= a.HP) return r;
    r.seq = s, r.slot = kvc_slot(a.slots, s), r.hr = hr, r.L = kvc_len(a.v, a.slots, a.n_new, s);
    r.it = kvc_seq_items<Q>(a.v, r.L);
    const int k = j - sm.first[s], ns = sm.nsplit[s];
    r.i0 = kvc_item_at<Q>(r.it, k, ns);
    r.i1 = k + 1 == ns ? r.it.nraw + r.it.nq : kvc_item_at<Q>(r.it, k + 1, ns);
    return r;
}

/* ---------------------------------------------------------------- per-warp state and lane constants */

/* Online-softmax state of one warp for the 8 heads of its head row; lane (g, t) holds heads 2t, 2t+1. */
template <int D> struct kvc_wst {
    float o[D / 16][4]; /* O^T: M tile mt, rows channel 16 mt + g (c0, c1) and + 8 (c2, c3), cols heads 2t, 2t+1 */
    float mn[4];        /* quantized: sum_j p_j min_jg, row g = value group (c0, c1), rows 8+ unused */
    float m[2], l[2];   /* running max (log2 domain), lane-partial sum of p */
};

/* This lane's code positions (see the file comment): keys by score row (token), values by output channel. Score
 * row g + 8u of an M tile (u = 0, 1) is token ktok[u] of the tile's 16. 2-bit keys: both rows of a lane lie in
 * one byte of the channel word (byte b = (g >> 1) ^ (g & 1), positions (b + (g & 1) + 2u) % 4), so one PRMT serves
 * both rows' registers (two masks), and the value-code rows that one load instruction reads (score rows 2t, 2t+1,
 * 2t+8, 2t+9: vtok[]) fall in distinct shared-memory banks. 4-bit keys: rows g, g+8 = tokens ktok[0], + 8. */
struct kvc_lane {
    int g, t;                        /* lane / 4, lane % 4 */
    int ktok[2];                     /* token of score rows g, g+8 within an M tile */
    int vtok[4];                     /* token of value k-slots 2t, 2t+1, 2t+8, 2t+9 within a k-step */
    uint32_t ksel0, ksel1, kmask[2]; /* PRMT selectors (rows g / g+8; equal for 2-bit keys), LOP3 masks */
    float kinv[2];                   /* 2^24 / key code factor of rows g / g+8 (1 / factor with MG codes) */
    uint32_t vsel0, vsel1, vmask[2]; /* values: PRMT selectors (rows g / g+8; equal for 2-bit), LOP3 masks */
    float vinv[2];                   /* 2^24 / value code factor of rows g / g+8 (1 / factor with MG codes) */
};

/* Code operand of one f16x2 register: the byte pair gathered by PRMT, masked; MG (magic) codes also get the
 * exponent of 1024 (value 1024 + code 4^f, a normal f16) and the 1024 offset is removed by one extra MMA with a
 * constant -1024 operand per code MMA. Default: subnormal codes (code 4^f 2^-24, exact on the tensor cores). */
template <int MG> __device__ __forceinline__ uint32_t kvc_code2(uint32_t x, uint32_t y, uint32_t sel, uint32_t mask) {
    return (__byte_perm(x, y, sel) & mask) | (MG ? 0x64006400u : 0u);
}
/* The same for a register whose byte pair PRMT has gathered already (one PRMT, several masks). */
template <int MG> __device__ __forceinline__ uint32_t kvc_code_m(uint32_t x, uint32_t mask) {
    return (x & mask) | (MG ? 0x64006400u : 0u);
}
template <int MG> __device__ __forceinline__ void kvc_mma_code(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    kvc_mma_f16(d, a, b0, b1);
    if (MG) {
        const uint32_t n[4] = {0xe400e400u, 0xe400e400u, 0xe400e400u, 0xe400e400u}; /* f16 -1024 */
        kvc_mma_f16(d, n, b0, b1);
    }
}
/* The code MMA when rows g and g+8 of the lane lie in one byte: k pairs (w0, w1) and (w2, w3) gathered by one PRMT
 * each (selector sel), the two rows by their masks. */
template <int MG>
__device__ __forceinline__ void kvc_mma_code_pairs(float d[4], uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3,
                                                   uint32_t sel, const uint32_t (&mask)[2], uint32_t b0, uint32_t b1) {
    const uint32_t x0 = __byte_perm(w0, w1, sel), x1 = __byte_perm(w2, w3, sel);
    const uint32_t a[4] = {kvc_code_m<MG>(x0, mask[0]), kvc_code_m<MG>(x0, mask[1]), kvc_code_m<MG>(x1, mask[0]),
                           kvc_code_m<MG>(x1, mask[1])};
    kvc_mma_code<MG>(d, a, b0, b1);
}

/* Token (within a 16-token M tile) of score row g + 8u for KB-bit keys. */
template <int KB> __device__ __forceinline__ int kvc_row_tok(int g, int u) {
    if (KB == 2) {
        const int e = g & 1, b = (g >> 1) ^ e;
        return 4 * b + ((b + e + 2 * u) & 3);
    }
    return (g >> 1) + 4 * (g & 1) + 8 * u;
}

/* Channel (within a 16-channel M tile) of output row g + 8u of the values of a quantized layer: 2-bit values put
 * both rows of a lane in one byte of the token word (byte g >> 1, positions (g & 1) + 2u: one PRMT feeds both A
 * registers); 4-bit values, and every raw (bf16) item, use channel g + 8u. */
template <int VB> __device__ __forceinline__ int kvc_row_ch(int g, int u) {
    return VB == 2 ? 4 * (g >> 1) + (g & 1) + 2 * u : g + 8 * u;
}

template <int KB, int VB, int MG> __device__ __forceinline__ kvc_lane kvc_lane_consts(int lane) {
    const float u = MG ? 1.0f : 16777216.0f; /* 2^24 for subnormal codes */
    kvc_lane c;
    c.g = lane >> 2, c.t = lane & 3;
    c.ktok[0] = kvc_row_tok<KB>(c.g, 0), c.ktok[1] = kvc_row_tok<KB>(c.g, 1);
    c.vtok[0] = kvc_row_tok<KB>(2 * c.t, 0), c.vtok[1] = kvc_row_tok<KB>(2 * c.t + 1, 0);
    c.vtok[2] = kvc_row_tok<KB>(2 * c.t, 1), c.vtok[3] = kvc_row_tok<KB>(2 * c.t + 1, 1);
    if (KB == 2) { /* token 4b + f of a 16-token word: byte b, bits 2f; both rows of the lane in byte b */
        const int b = c.ktok[0] >> 2;
        c.ksel0 = c.ksel1 = (uint32_t)(b | ((4 + b) << 8));
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int f = c.ktok[r] & 3;
            c.kmask[r] = 0x00030003u << (2 * f), c.kinv[r] = u / (float)(1 << (2 * f));
        }
    } else { /* token tt + 4e of an 8-token word (rows g+8: the next word): byte 2e + tt/2, nibble tt & 1 */
        const int e = c.g & 1, tt = c.g >> 1, b = 2 * e + (tt >> 1);
        c.ksel0 = c.ksel1 = (uint32_t)(b | ((4 + b) << 8));
        c.kmask[0] = c.kmask[1] = 0x000f000fu << (4 * (tt & 1));
        c.kinv[0] = c.kinv[1] = u / (float)(1 << (4 * (tt & 1)));
    }
    if (VB == 2) { /* channel 16 mt + 4b + f of word mt: byte b = g >> 1, bits 2f (both rows of the lane) */
        const int b = c.g >> 1;
        c.vsel0 = c.vsel1 = (uint32_t)(b | ((4 + b) << 8));
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int f = kvc_row_ch<2>(c.g, r) & 3;
            c.vmask[r] = 0x00030003u << (2 * f), c.vinv[r] = u / (float)(1 << (2 * f));
        }
    } else { /* channel 16 mt + g of word 2 mt (rows g+8: word 2 mt + 1): byte g/2, nibble g & 1 */
        const int b = c.g >> 1;
        c.vsel0 = c.vsel1 = (uint32_t)(b | ((4 + b) << 8));
        c.vmask[0] = c.vmask[1] = 0x000f000fu << (4 * (c.g & 1));
        c.vinv[0] = c.vinv[1] = u / (float)(1 << (4 * (c.g & 1)));
    }
    return c;
}

template <int D> __device__ __forceinline__ void kvc_wst_init(kvc_wst<D> &w) {
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int i = 0; i < 4; i++) w.o[mt][i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) w.mn[i] = 0.0f;
    w.m[0] = w.m[1] = -INFINITY;
    w.l[0] = w.l[1] = 0.0f;
}

/* Online softmax over this lane's R score rows x 2 heads (log2 domain, -inf = masked): rescales the state when
 * a head's maximum grows (warp-uniform branch), replaces s by p = 2^(s - m), adds p to l. */
template <int D, int R> __device__ __forceinline__ void kvc_softmax(float (&s)[R][2], kvc_wst<D> &w) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int r = 0; r < R; r++) mx[0] = fmaxf(mx[0], s[r][0]), mx[1] = fmaxf(mx[1], s[r][1]);
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], o));
        mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], o));
    }
    const float mn0 = fmaxf(w.m[0], mx[0]), mn1 = fmaxf(w.m[1], mx[1]);
    if (__any_sync(0xffffffffu, mn0 > w.m[0] || mn1 > w.m[1])) {
        const float c0 = w.m[0] == -INFINITY ? 0.0f : kvc_ex2(w.m[0] - mn0);
        const float c1 = w.m[1] == -INFINITY ? 0.0f : kvc_ex2(w.m[1] - mn1);
#pragma unroll
        for (int mt = 0; mt < D / 16; mt++)
            w.o[mt][0] *= c0, w.o[mt][1] *= c1, w.o[mt][2] *= c0, w.o[mt][3] *= c1;
        w.mn[0] *= c0, w.mn[1] *= c1, w.mn[2] *= c0, w.mn[3] *= c1;
        w.l[0] *= c0, w.l[1] *= c1;
        w.m[0] = mn0, w.m[1] = mn1;
    }
    const float b0 = w.m[0] == -INFINITY ? 0.0f : w.m[0], b1 = w.m[1] == -INFINITY ? 0.0f : w.m[1];
#pragma unroll
    for (int r = 0; r < R; r++) {
        s[r][0] = kvc_ex2(s[r][0] - b0), s[r][1] = kvc_ex2(s[r][1] - b1);
        w.l[0] += s[r][0], w.l[1] += s[r][1];
    }
}

/* ---------------------------------------------------------------- raw (bf16) half-block: 16 tokens */

/* q~ as bf16 B fragments of the score MMA: b[ks] = (channels 16 ks + 2t, +1 | +8, +9) of head g, split exactly
 * into hi + lo (16 significant bits: raw items are memory-bound, so the second MMA costs no time and keeps the
 * error at the output's own bf16 rounding). */
template <int D> struct kvc_qraw {
    uint32_t b[D / 16][2], lo[D / 16][2];
};

/* bf16x2 hi = RNE(x), lo = RNE(x - hi) of a pair of floats. */
__device__ __forceinline__ void kvc_bf16x2_split(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    hi = kvc_bf16x2(x0, x1);
    lo = kvc_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}
/* q~ as f16 B fragments for quantized blocks (channels 16 ks + 4t + {0, 1} | {2, 3} of head g, times 2^-e_g),
 * plus per lane: score factor and bias factor of its heads 2t, 2t+1. */
template <int D> struct kvc_qq {
    uint32_t b[D / 16][2];
    float kf[2][2], bf[2]; /* kf[u][e]: score factor of row half u, head 2t + e */
};

/* Scores and values of one staged raw half-block (K rows [16][RS] at st, V rows after; rows >= n invalid).
 * P1: P as one bf16 MMA operand (no lo part) for the values. */
template <int D, int KB, int VB, int P1>
__device__ __forceinline__ void kvc_raw_item(uint8_t *st, int n, const kvc_qraw<D> &q, kvc_wst<D> &w, int lane) {
    using F = kvc_fmt<D, KB, VB>;
    const int g = lane >> 2;
    uint8_t *kr = st, *vr = st + 16 * F::RS;
    if (n < 16) { /* rows beyond the sequence: zero V (0 * garbage could be NaN in the MMA); K is masked */
        for (int i = lane; i < (16 - n) * (D / 8); i += 32)
            *(uint4 *)(vr + (n + i / (D / 8)) * F::RS + (i % (D / 8)) * 16) = make_uint4(0, 0, 0, 0);
        kvc_fence_proxy_async(); /* the stage is refilled by bulk copies later */
        __syncwarp();
    }
    float sacc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, slo[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* two MMA chains */
    const int lrow = (lane & 7) + 8 * ((lane >> 3) & 1), lcol = 8 * (lane >> 4);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        uint32_t a[4];
        kvc_ldsm4(a, kr + lrow * F::RS + (16 * ks + lcol) * 2);
        kvc_mma_bf16(sacc, a, q.b[ks][0], q.b[ks][1]);
        kvc_mma_bf16(slo, a, q.lo[ks][0], q.lo[ks][1]);
    }
    float s[2][2];
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
        for (int e = 0; e < 2; e++) s[u][e] = g + 8 * u < n ? sacc[2 * u + e] + slo[2 * u + e] : -INFINITY;
    kvc_softmax<D, 2>(s, w);
    uint32_t ph[2], pl[2]; /* P = hi + lo in bf16, C layout rows u */
    kvc_bf16x2_split(s[0][0], s[0][1], ph[0], pl[0]);
    kvc_bf16x2_split(s[1][0], s[1][1], ph[1], pl[1]);
    const uint32_t b0 = kvc_movm(ph[0]), b1 = kvc_movm(ph[1]);
    const uint32_t l0 = P1 ? 0u : kvc_movm(pl[0]), l1 = P1 ? 0u : kvc_movm(pl[1]);
    const int vtok = (lane & 7) + 8 * (lane >> 4), vcol = 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++) {
        uint32_t a[4];
        kvc_ldsm4_t(a, vr + vtok * F::RS + (16 * mt + vcol) * 2);
        kvc_mma_bf16(w.o[mt], a, b0, b1);
        if (!P1) kvc_mma_bf16(w.o[mt], a, l0, l1);
    }
}

/* ---------------------------------------------------------------- quantized block: 32 tokens */

/* Scores of one staged quantized block (key block at st) in the log2 domain, rows (mt, u) = token 16 mt +
 * ktok[u], heads 2t, 2t+1; tokens < s0 are masked (sinks, read from their raw rows instead). */
template <int D, int KB, int VB, int MG>
__device__ __forceinline__ void kvc_quant_scores(const uint8_t *st, int s0, int use_norm, const kvc_qq<D> &q,
                                                 const kvc_lane &c, float (&s)[4][2]) {
    using F = kvc_fmt<D, KB, VB>;
    const uint8_t *kc = st;
    const uint16_t *ksc = (const uint16_t *)(st + F::KCODE), *kmn = ksc + D, *knorm = kmn + D;
    /* ---- scores S^T[token][head] (2 M tiles) and bias[head] = sum_c min_c q~_c */
    float sacc[2][4], bacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int i = 0; i < 4; i++) sacc[mt][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const int c0 = 16 * ks + 4 * c.t;
        const uint2 sc = *(const uint2 *)(ksc + c0);
        const uint32_t b0 = kvc_hmul2(q.b[ks][0], sc.x), b1 = kvc_hmul2(q.b[ks][1], sc.y);
        if (KB == 2) { /* channel c: words (tokens 0-15, 16-31) */
            const uint4 u0 = *(const uint4 *)(kc + c0 * 8), u1 = *(const uint4 *)(kc + c0 * 8 + 16);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                kvc_mma_code_pairs<MG>(sacc[mt], mt ? u0.y : u0.x, mt ? u0.w : u0.z, mt ? u1.y : u1.x,
                                       mt ? u1.w : u1.z, c.ksel0, c.kmask, b0, b1);
            }
        } else { /* channel c: words (tokens 0-7, 8-15, 16-23, 24-31) */
            const uint4 u0 = *(const uint4 *)(kc + c0 * 16), u1 = *(const uint4 *)(kc + c0 * 16 + 16);
            const uint4 u2 = *(const uint4 *)(kc + c0 * 16 + 32), u3 = *(const uint4 *)(kc + c0 * 16 + 48);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                uint32_t a[4];
                a[0] = kvc_code2<MG>(mt ? u0.z : u0.x, mt ? u1.z : u1.x, c.ksel0, c.kmask[0]);
                a[1] = kvc_code2<MG>(mt ? u0.w : u0.y, mt ? u1.w : u1.y, c.ksel1, c.kmask[1]);
                a[2] = kvc_code2<MG>(mt ? u2.z : u2.x, mt ? u3.z : u3.x, c.ksel0, c.kmask[0]);
                a[3] = kvc_code2<MG>(mt ? u2.w : u2.y, mt ? u3.w : u3.y, c.ksel1, c.kmask[1]);
                kvc_mma_code<MG>(sacc[mt], a, b0, b1);
            }
        }
        /* bias rows g only (rows g + 8 unused: zero, so that the quad needs no copies of the minima) */
        const uint32_t am[4] = {*(const uint32_t *)(kmn + c0), 0u, *(const uint32_t *)(kmn + c0 + 2), 0u};
        kvc_mma_f16(bacc, am, q.b[ks][0], q.b[ks][1]);
    }
    /* s = (acc 2^24 / 4^f + bias) 2^e_h norm_token; rows (mt, u) = token 16 mt + ktok[u] */
    const float bb0 = bacc[0] * q.bf[0], bb1 = bacc[1] * q.bf[1];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int tok = 16 * mt + c.ktok[u];
            const float nr = use_norm ? kvc_hw_h2f(knorm[tok]) : 1.0f;
            s[2 * mt + u][0] = fmaf(sacc[mt][2 * u], q.kf[u][0], bb0) * nr;
            s[2 * mt + u][1] = fmaf(sacc[mt][2 * u + 1], q.kf[u][1], bb1) * nr;
        }
    if (s0 > 0) /* block 0 with sinks only (warp-uniform) */
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int u = 0; u < 2; u++)
                if (16 * mt + c.ktok[u] < s0) s[2 * mt + u][0] = s[2 * mt + u][1] = -INFINITY;
}

/* Values of one staged quantized block (value block at st + KMAX) weighted by p (the scores after the softmax). */
template <int D, int KB, int VB, int MG>
__device__ __forceinline__ void kvc_quant_values(const uint8_t *st, const float (&s)[4][2], const kvc_lane &c,
                                                 kvc_wst<D> &w) {
    using F = kvc_fmt<D, KB, VB>;
    constexpr int NG = F::NG;
    /* ---- values: P (C layout, f16) per k-step ks = M tile of the scores, rows u */
    const uint8_t *vb = st + F::KMAX;
    const uint8_t *vcode = vb;
    const uint16_t *vsc = (const uint16_t *)(vb + F::VCODE), *vmn = vsc + 32 * NG;
    uint32_t P[2][2];
#pragma unroll
    for (int ks = 0; ks < 2; ks++)
#pragma unroll
        for (int u = 0; u < 2; u++) P[ks][u] = kvc_f16x2(s[2 * ks + u][0], s[2 * ks + u][1]);
    const int gg = c.g < NG ? c.g : NG - 1;
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
        int tk[4]; /* tokens of k slots 2t, 2t+1, 2t+8, 2t+9 */
#pragma unroll
        for (int i = 0; i < 4; i++) tk[i] = 16 * ks + c.vtok[i];
        /* min term: A = min^T [group g][slot], B = P^T */
        uint32_t am[4];
        am[0] = (uint32_t)vmn[tk[0] * NG + gg] | ((uint32_t)vmn[tk[1] * NG + gg] << 16);
        am[2] = (uint32_t)vmn[tk[2] * NG + gg] | ((uint32_t)vmn[tk[3] * NG + gg] << 16);
        if (c.g >= NG) am[0] = am[2] = 0u;
        am[1] = am[3] = 0u;
        kvc_mma_f16(w.mn, am, kvc_movm(P[ks][0]), kvc_movm(P[ks][1]));
        /* value scales of this lane's score rows (tokens 16 ks + ktok[u]): NG halves each, two per word */
        uint32_t sc0[NG / 2], sc1[NG / 2];
        const uint32_t *s0p = (const uint32_t *)(vsc + (16 * ks + c.ktok[0]) * NG);
        const uint32_t *s1p = (const uint32_t *)(vsc + (16 * ks + c.ktok[1]) * NG);
        if constexpr (NG == 4) {
            const uint2 x = *(const uint2 *)s0p, y = *(const uint2 *)s1p;
            sc0[0] = x.x, sc0[1] = x.y, sc1[0] = y.x, sc1[1] = y.y;
        } else {
#pragma unroll
            for (int i = 0; i < NG / 2; i++) sc0[i] = s0p[i], sc1[i] = s1p[i];
        }
#pragma unroll
        for (int gi = 0; gi < NG; gi++) {
            const uint32_t p0 = gi & 1 ? kvc_hmul2_bc<1>(P[ks][0], sc0[gi / 2]) : kvc_hmul2_bc<0>(P[ks][0], sc0[gi / 2]);
            const uint32_t p1 = gi & 1 ? kvc_hmul2_bc<1>(P[ks][1], sc1[gi / 2]) : kvc_hmul2_bc<0>(P[ks][1], sc1[gi / 2]);
            const uint32_t b0 = kvc_movm(p0), b1 = kvc_movm(p1);
            if (VB == 2) { /* token row: 8 words; group gi = words 2 gi, 2 gi + 1 */
                uint2 r[4];
#pragma unroll
                for (int i = 0; i < 4; i++) r[i] = *(const uint2 *)(vcode + tk[i] * (D / 4) + 8 * gi);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    kvc_mma_code_pairs<MG>(w.o[2 * gi + h], h ? r[0].y : r[0].x, h ? r[1].y : r[1].x,
                                           h ? r[2].y : r[2].x, h ? r[3].y : r[3].x, c.vsel0, c.vmask, b0, b1);
                }
            } else { /* token row: 16 words; group gi = words 4 gi .. 4 gi + 3 */
                uint4 r[4];
#pragma unroll
                for (int i = 0; i < 4; i++) r[i] = *(const uint4 *)(vcode + tk[i] * (D / 2) + 16 * gi);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t a[4];
                    a[0] = kvc_code2<MG>(h ? r[0].z : r[0].x, h ? r[1].z : r[1].x, c.vsel0, c.vmask[0]);
                    a[1] = kvc_code2<MG>(h ? r[0].w : r[0].y, h ? r[1].w : r[1].y, c.vsel1, c.vmask[1]);
                    a[2] = kvc_code2<MG>(h ? r[2].z : r[2].x, h ? r[3].z : r[3].x, c.vsel0, c.vmask[0]);
                    a[3] = kvc_code2<MG>(h ? r[2].w : r[2].y, h ? r[3].w : r[3].y, c.vsel1, c.vmask[1]);
                    kvc_mma_code<MG>(w.o[2 * gi + h], a, b0, b1);
                }
            }
        }
    }
}

/* One staged quantized block (key block at st, value block at st + KMAX): scores, online softmax, values. */
template <int D, int KB, int VB, int MG>
__device__ __forceinline__ void kvc_quant_item(const uint8_t *st, int s0, int use_norm, const kvc_qq<D> &q,
                                               const kvc_lane &c, kvc_wst<D> &w) {
    float s[4][2];
    kvc_quant_scores<D, KB, VB, MG>(st, s0, use_norm, q, c, s);
    kvc_softmax<D, 4>(s, w);
    kvc_quant_values<D, KB, VB, MG>(st, s, c, w);
}

/* Two staged blocks at once (two independent score chains for the scheduler, one softmax update). */
template <int D, int KB, int VB, int MG>
__device__ __forceinline__ void kvc_quant_item2(const uint8_t *st0, int s00, const uint8_t *st1, int s01,
                                                int use_norm, const kvc_qq<D> &q, const kvc_lane &c, kvc_wst<D> &w) {
    float s0[4][2], s1[4][2], s8[8][2];
    kvc_quant_scores<D, KB, VB, MG>(st0, s00, use_norm, q, c, s0);
    kvc_quant_scores<D, KB, VB, MG>(st1, s01, use_norm, q, c, s1);
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int e = 0; e < 2; e++) s8[r][e] = s0[r][e], s8[4 + r][e] = s1[r][e];
    kvc_softmax<D, 8>(s8, w);
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int e = 0; e < 2; e++) s0[r][e] = s8[r][e], s1[r][e] = s8[4 + r][e];
    kvc_quant_values<D, KB, VB, MG>(st0, s0, c, w);
    kvc_quant_values<D, KB, VB, MG>(st1, s1, c, w);
}

/* ---------------------------------------------------------------- the split kernel */

/* Byte layout of the dynamic shared memory of a split CTA. */
template <int D, int KB, int VB, int V> struct kvc_split_layout {
    using F = kvc_fmt<D, KB, VB, V>;
    static constexpr int BARS = (sizeof(kvc_cta_smem<D>) + 7) / 8 * 8;
    static constexpr int RINGS = (BARS + KVC_NW * (F::NSQ + F::NSR) * 8 + 127) / 128 * 128;
    static constexpr int BYTES = RINGS + KVC_NW * F::RING;
    static_assert(KVC_NW * F::RING >= KVC_NW * KVC_NCOL * (D + 4 + 3) * 4, "the merge reuses the rings");
    static_assert(KVC_NW * F::RING >= (int)sizeof(kvc_sched_smem), "the schedule uses the rings");
};

/* Where item i (raw half-blocks first, then quantized blocks) of a role lives: raw rows or a packed block. */
struct kvc_item_src {
    const uint8_t *k, *v;
    int n;  /* raw: valid rows (1..16) */
    int s0; /* quantized: tokens < s0 masked (sinks) */
};

/* First token of raw item i (a half-block of sinks or of the window). */
__device__ __forceinline__ int64_t kvc_raw_tok0(const kvc_role &r, int i) {
    return i < r.it.nsink ? 16 * i : (int64_t)KVC_G * r.it.nq + 16 * (i - r.it.nsink);
}

/* The page of item i (one table read: the warps read it an item ahead so that its latency hides behind work). */
template <bool Q> __device__ __forceinline__ int32_t kvc_item_page(const kv_layer_view &v, const kvc_role &r, int i) {
    if (i >= r.it.nraw) return kv_view_quant_page(&v, r.slot, i - r.it.nraw);
    const int b = (int)(kvc_raw_tok0(r, i) / KVC_G);
    return !Q && b < kvc_nq(v, r.L) ? kv_view_quant_page(&v, r.slot, b) : kv_view_raw_page(&v, r.slot, b);
}

/* Where item i lives, p = kvc_item_page(i). */
template <int D, bool Q>
__device__ __forceinline__ kvc_item_src kvc_locate(const kv_layer_view &v, const kvc_role &r, int kvh, int i,
                                                   int32_t p) {
    kvc_item_src s;
    s.s0 = 0;
    if (i < r.it.nraw) {
        const int64_t tok0 = kvc_raw_tok0(r, i);
        const int n = i < r.it.nsink ? min(16, v.n_sink - 16 * i) : (int)min((int64_t)16, r.L - tok0);
        const int b = (int)(tok0 / KVC_G);
        const int64_t row = (tok0 % KVC_G) * D * 2;
        if (!Q && b < kvc_nq(v, r.L)) { /* bf16 layer of a quantizing cache: raw layout in the quant page */
            s.k = kv_view_quant_block(&v, p, kvh, 0) + row, s.v = kv_view_quant_block(&v, p, kvh, 1) + row;
        } else {
            s.k = kv_view_raw_rows(&v, p, kvh, 0) + row, s.v = kv_view_raw_rows(&v, p, kvh, 1) + row;
        }
        s.n = n;
    } else {
        const int b = i - r.it.nraw;
        s.k = kv_view_quant_block(&v, p, kvh, 0), s.v = kv_view_quant_block(&v, p, kvh, 1), s.n = 0;
        s.s0 = b == 0 ? v.n_sink : 0;
    }
    return s;
}

/* Loads q of the head row into shared memory: bf16 -> f32, FWHT when rotating, times qscale; per-head
 * power-of-two exponents (max |q~| 2^-e < 1). A warp per head, all threads; ends with a barrier. */
template <int D>
__device__ void kvc_load_q(const kvc_split_args &a, const kvc_role &r, int h0, int nh, kvc_cta_smem<D> &sm) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int h = warp; h < KVC_NCOL; h += KVC_NW) {
        float x[D / 32], mx = 0.0f;
        const uint16_t *qh = a.q + ((size_t)r.seq * a.Hq + h0 + h) * D; /* batch order */
#pragma unroll
        for (int j = 0; j < D / 32; j++) x[j] = h < nh ? kvc_bf2f(qh[32 * j + lane]) : 0.0f;
        if (a.v.rotate) kvc_fwht_warp<D>(x, lane);
#pragma unroll
        for (int j = 0; j < D / 32; j++) {
            x[j] *= a.qscale;
            mx = fmaxf(mx, fabsf(x[j]));
            sm.qs[h][32 * j + lane] = x[j];
        }
        mx = kvc_warp_max(mx);
        int e = 0;
        if (mx > 0.0f) frexpf(mx, &e);
        if (lane == 0) sm.qexp[h] = e;
    }
    __syncthreads();
}

/* Issues the bulk copies of raw item first + 4 k of this warp into stage st (p = its page). */
template <int D, int KB, int VB, int V>
__device__ __forceinline__ void kvc_raw_issue(const kv_layer_view &v, const kvc_role &r, int kvh, int first, int k,
                                              int st, int32_t p, uint8_t *ring, uint64_t *bars, int lane,
                                              uint64_t pol) {
    using F = kvc_fmt<D, KB, VB, V>;
    const kvc_item_src s = kvc_locate<D, F::Q>(v, r, kvh, first + KVC_NW * k, p);
    if (lane == 0) kvc_mbar_arrive_tx(&bars[st], (uint32_t)(s.n * 4 * D));
    __syncwarp();
    const int row = lane & 15;
    uint8_t *dst = ring + st * F::RSTAGE + (lane < 16 ? 0 : 16 * F::RS) + row * F::RS;
    if (row < s.n) kvc_bulk_g2s(dst, (lane < 16 ? s.k : s.v) + row * 2 * D, 2 * D, &bars[st], pol);
}

/* The first stages of this warp's raw items [first, end) (step 4): issued before q is loaded so that the copies'
 * latency overlaps the prologue. */
template <int D, int KB, int VB, int V>
__device__ __forceinline__ void kvc_raw_prefetch(const kv_layer_view &v, const kvc_role &r, int kvh, int first,
                                                 int end, uint8_t *ring, uint64_t *bars, int lane, uint64_t pol) {
    using F = kvc_fmt<D, KB, VB, V>;
    const int n = first < end ? (end - first + KVC_NW - 1) / KVC_NW : 0;
    for (int k = 0; k < F::NSR && k < n; k++)
        kvc_raw_issue<D, KB, VB, V>(v, r, kvh, first, k, k, kvc_item_page<F::Q>(v, r, first + KVC_NW * k), ring, bars,
                                    lane, pol);
}

/* This warp's raw items [first, end) (step 4) through its ring; pre: the first stages were issued already. */
template <int D, int KB, int VB, int V>
__device__ __forceinline__ void kvc_raw_items(const kv_layer_view &v, const kvc_role &r, int kvh, int first,
                                             int end, uint8_t *ring, uint64_t *bars, const kvc_cta_smem<D> &sm,
                                             kvc_wst<D> &w, int lane, uint64_t pol, bool pre) {
    using F = kvc_fmt<D, KB, VB, V>;
    constexpr int NS = F::NSR;
    const int n = first < end ? (end - first + KVC_NW - 1) / KVC_NW : 0;
    if (n == 0) return;
    kvc_qraw<D> q;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const float *qh = sm.qs[g] + 16 * ks + 2 * t;
        kvc_bf16x2_split(qh[0], qh[1], q.b[ks][0], q.lo[ks][0]);
        kvc_bf16x2_split(qh[8], qh[9], q.b[ks][1], q.lo[ks][1]);
    }
    if (!pre) kvc_raw_prefetch<D, KB, VB, V>(v, r, kvh, first, end, ring, bars, lane, pol);
    int32_t pn = NS < n ? kvc_item_page<F::Q>(v, r, first + KVC_NW * NS) : 0; /* page of the next issue */
    for (int k = 0; k < n; k++) {
        const int st = k % NS;
        kvc_mbar_wait(&bars[st], (k / NS) & 1);
        const int i = first + KVC_NW * k;
        const int nv = i < r.it.nsink ? min(16, v.n_sink - 16 * i)
                                      : (int)min((int64_t)16, r.L - (int64_t)KVC_G * r.it.nq - 16 * (i - r.it.nsink));
        kvc_raw_item<D, KB, VB, KVC_VAR_P1[V]>(ring + st * F::RSTAGE, nv, q, w, lane);
        __syncwarp();
        if (k + NS < n) {
            kvc_raw_issue<D, KB, VB, V>(v, r, kvh, first, k + NS, st, pn, ring, bars, lane, pol);
            if (k + NS + 1 < n) pn = kvc_item_page<F::Q>(v, r, first + KVC_NW * (k + NS + 1));
        }
    }
}

template <int D, int KB> __device__ __forceinline__ kvc_qsrc kvc_qsrc_of(const kv_layer_view &v, const kvc_role &r, int kvh,
                                                                   int first) {
    kvc_qsrc q;
    q.tab = v.quant_tab + (int64_t)r.slot * v.tab_stride + (first - r.it.nraw); /* used only while items remain */
    q.kb = v.quant_pool + v.q_k + kvh * v.q_kh, q.vb = v.quant_pool + v.q_v + kvh * v.q_vh;
    q.pb = v.quant_page_bytes;
    q.kbytes = (uint32_t)(D * 32 * KB / 8 + 4 * D + (v.scale ? 2 * KVC_G : 0));
    return q;
}

/* Issues the two bulk copies (key block with its norms, value block) of page p into stage st. */
template <int D, int KB, int VB, int V>
__device__ __forceinline__ void kvc_quant_issue(const kvc_qsrc &q, int st, int32_t p, uint8_t *ring, uint64_t *bars,
                                                int lane, uint64_t pol) {
    using F = kvc_fmt<D, KB, VB, V>;
    if (lane == 0) {
        const int64_t off = (int64_t)p * q.pb;
        kvc_mbar_arrive_tx(&bars[st], q.kbytes + (uint32_t)F::VBYTES);
        kvc_bulk_g2s(ring + st * F::QSTAGE, q.kb + off, q.kbytes, &bars[st], pol);
        kvc_bulk_g2s(ring + st * F::QSTAGE + F::KMAX, q.vb + off, (uint32_t)F::VBYTES, &bars[st], pol);
    }
}

template <int D, int KB, int VB, int V>
__device__ __forceinline__ void kvc_quant_prefetch(const kvc_qsrc &q, int first, int end, uint8_t *ring,
                                                   uint64_t *bars, int lane, uint64_t pol) {
    using F = kvc_fmt<D, KB, VB, V>;
    const int n = first < end ? (end - first + KVC_NW - 1) / KVC_NW : 0;
    for (int k = 0; k < F::NSQ && k < n; k++) kvc_quant_issue<D, KB, VB, V>(q, k, q.tab[KVC_NW * k], ring, bars, lane, pol);
}

template <int D, int KB, int VB, int MG, int V>
__device__ __forceinline__ void kvc_quant_items(const kv_layer_view &v, const kvc_role &r, const kvc_qsrc &qs,
                                               int first, int end, uint8_t *ring, uint64_t *bars, const kvc_cta_smem<D> &sm,
                                               const kvc_lane &c, kvc_wst<D> &w, int lane, uint64_t pol, bool pre) {
    using F = kvc_fmt<D, KB, VB, V>;
    constexpr int NS = F::NSQ;
    const int n = first < end ? (end - first + KVC_NW - 1) / KVC_NW : 0;
    if (n == 0) return;
    kvc_qq<D> q;
    const int g = c.g, t = c.t;
    const float sg = kvc_exp2i(-sm.qexp[g]);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const float *qh = sm.qs[g] + 16 * ks + 4 * t;
        q.b[ks][0] = kvc_f16x2(qh[0] * sg, qh[1] * sg), q.b[ks][1] = kvc_f16x2(qh[2] * sg, qh[3] * sg);
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        q.bf[e] = kvc_exp2i(sm.qexp[2 * t + e]);
        q.kf[0][e] = c.kinv[0] * q.bf[e], q.kf[1][e] = c.kinv[1] * q.bf[e];
    }
    constexpr int NB = KVC_VAR_NB[V]; /* blocks per step */
    static_assert(NS >= NB, "a step's blocks need distinct stages");
    if (!pre) kvc_quant_prefetch<D, KB, VB, V>(qs, first, end, ring, bars, lane, pol);
    int32_t pn[NB]; /* pages of the next step's issues (items k + NS + j), read a step ahead */
#pragma unroll
    for (int j = 0; j < NB; j++) pn[j] = NS + j < n ? qs.tab[KVC_NW * (NS + j)] : 0;
    for (int k = 0; k < n; k += NB) {
        const int st = k % NS, b = first + KVC_NW * k - r.it.nraw;
        kvc_mbar_wait(&bars[st], (k / NS) & 1);
        if (NB == 2 && k + 1 < n) {
            const int st1 = (k + 1) % NS;
            kvc_mbar_wait(&bars[st1], ((k + 1) / NS) & 1);
            kvc_quant_item2<D, KB, VB, MG>(ring + st * F::QSTAGE, b == 0 ? v.n_sink : 0, ring + st1 * F::QSTAGE,
                                           0, v.scale, q, c, w);
        } else {
            kvc_quant_item<D, KB, VB, MG>(ring + st * F::QSTAGE, b == 0 ? v.n_sink : 0, v.scale, q, c, w);
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NB; j++) {
            if (k + j < n && k + j + NS < n)
                kvc_quant_issue<D, KB, VB, V>(qs, (k + j) % NS, pn[j], ring, bars, lane, pol);
            const int nx = k + NB + NS + j;
            if (nx < n) pn[j] = qs.tab[KVC_NW * nx];
        }
    }
}

/* The raw items' sums (rows: channel 16 mt + g + 8u) in the quantized items' row order (kvc_row_ch) and scale
 * (channel rows carry 2^-24 4^f; vinv is a power of two, so the reciprocal is exact). */
template <int D, int VB> __device__ __forceinline__ void kvc_raw_to_quant(kvc_wst<D> &w, const kvc_lane &c) {
    const float r[2] = {1.0f / c.vinv[0], 1.0f / c.vinv[1]};
    if constexpr (VB != 2) {
#pragma unroll
        for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
            for (int i = 0; i < 4; i++) w.o[mt][i] *= r[i >> 1];
    } else {
        int src[2];
#pragma unroll
        for (int u = 0; u < 2; u++) src[u] = 4 * (kvc_row_ch<2>(c.g, u) & 7) + c.t;
        const bool hi = c.g >= 4; /* the source rows are g' + 8 (kvc_row_ch >= 8) */
#pragma unroll
        for (int mt = 0; mt < D / 16; mt++) {
            float x[4];
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float lo = __shfl_sync(0xffffffffu, w.o[mt][e], src[u]);
                    const float hv = __shfl_sync(0xffffffffu, w.o[mt][2 + e], src[u]);
                    x[2 * u + e] = (hi ? hv : lo) * r[u];
                }
#pragma unroll
            for (int i = 0; i < 4; i++) w.o[mt][i] = x[i];
        }
    }
}

/* This warp's state into the merge area (o as true values of heads x channels, rows of MS floats; m, l summed over
 * the warp). */
template <int D, bool Q, int VB, int MS>
__device__ __forceinline__ void kvc_warp_store(kvc_wst<D> &w, const kvc_lane &c, float *mo, float2 *mml) {
#pragma unroll
    for (int e = 0; e < 2; e++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) w.l[e] += __shfl_xor_sync(0xffffffffu, w.l[e], o);
    float mnv[D / 32][2];
#pragma unroll
    for (int gi = 0; gi < D / 32; gi++)
#pragma unroll
        for (int e = 0; e < 2; e++) mnv[gi][e] = __shfl_sync(0xffffffffu, w.mn[e], 4 * gi + c.t);
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float x = w.o[mt][2 * u + e];
                const int ch = 16 * mt + (Q ? kvc_row_ch<VB>(c.g, u) : c.g + 8 * u);
                mo[(2 * c.t + e) * MS + ch] = Q ? fmaf(x, c.vinv[u], mnv[mt / 2][e]) : x;
            }
    if (c.g == 0)
#pragma unroll
        for (int e = 0; e < 2; e++) mml[2 * c.t + e] = make_float2(w.m[e], w.l[e]);
}

template <int D, int KB, int VB, int MG, int V>
__global__ void __launch_bounds__(KVC_NT, KVC_VAR_MINB[V]) kvc_split_kernel(const __grid_constant__ kvc_split_args a) {
    using F = kvc_fmt<D, KB, VB, V>;
    using Y = kvc_split_layout<D, KB, VB, V>;
    KVC_DYN_SMEM(uint8_t, smem);
    kvc_cta_smem<D> &sm = *reinterpret_cast<kvc_cta_smem<D> *>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    kvc_pdl_wait(); /* launched early (programmatic serialization): the kernel before has completed from here */
    const kvc_role r = kvc_schedule<F::Q>(a, *reinterpret_cast<kvc_sched_smem *>(smem + Y::RINGS));
    if (r.seq < 0) {
        kvc_pdl_launch();
        return;
    }
    const int kvh = r.hr / a.n_pass, pass = r.hr % a.n_pass, h0 = kvh * a.gs + pass * KVC_NCOL;
    const int nh = min(KVC_NCOL, a.gs - pass * KVC_NCOL);
    uint64_t *bars = (uint64_t *)(smem + Y::BARS) + warp * (F::NSQ + F::NSR);
    uint8_t *ring = smem + Y::RINGS + warp * F::RING;
    if (lane == 0)
        for (int i = 0; i < F::NSQ + F::NSR; i++) kvc_mbar_init(&bars[i], 1);
    kvc_fence_mbar_init();
    __syncthreads(); /* the schedule's scratch in the rings is dead, the barriers are initialized */
    const uint64_t pol = kvc_evict_first_policy();
    /* this warp's items: r.i0 + warp + 4 k; raw ones first. The first copies go out before q is loaded. */
    const int first = r.i0 + warp, nraw = r.it.nraw;
    const int rend = min(r.i1, nraw);
    int qfirst = first;
    if (qfirst < nraw) qfirst += (nraw - qfirst + KVC_NW - 1) / KVC_NW * KVC_NW;
    const bool raw_first = first < rend;
    kvc_qsrc &qs = sm.qsrc[warp];
    if constexpr (F::Q) {
        if (lane == 0) qs = kvc_qsrc_of<D, KB>(a.v, r, kvh, qfirst);
        __syncwarp();
    }
    if (raw_first) kvc_raw_prefetch<D, KB, VB, V>(a.v, r, kvh, first, rend, ring, bars + F::NSQ, lane, pol);
    else if constexpr (F::Q) kvc_quant_prefetch<D, KB, VB, V>(qs, qfirst, r.i1, ring, bars, lane, pol);
    kvc_load_q<D>(a, r, h0, nh, sm);
    const kvc_lane c = kvc_lane_consts<F::Q ? KB : 2, F::Q ? VB : 2, MG>(lane);
    kvc_wst<D> w;
    kvc_wst_init<D>(w);
    kvc_raw_items<D, KB, VB, V>(a.v, r, kvh, first, rend, ring, bars + F::NSQ, sm, w, lane, pol, raw_first);
    if constexpr (F::Q) {
        if (raw_first) kvc_raw_to_quant<D, VB>(w, c);
        kvc_quant_items<D, KB, VB, MG, V>(a.v, r, qs, qfirst, r.i1, ring, bars, sm, c, w, lane, pol, !raw_first);
    }
    kvc_pdl_launch(); /* the combine kernel may be scheduled; it waits for this grid to complete */
    __syncthreads();  /* every ring is idle: the merge area reuses them */
    constexpr int MS = D + 4; /* merge row stride (floats): a warp's stores hit 32 distinct banks */
    float *mo = (float *)(smem + Y::RINGS);
    float2 *mml = (float2 *)(mo + KVC_NW * KVC_NCOL * MS);
    float *mf = (float *)(mml + KVC_NW * KVC_NCOL); /* [warp][head]: weight of the warp's partial */
    kvc_warp_store<D, F::Q, VB, MS>(w, c, mo + warp * KVC_NCOL * MS, mml + warp * KVC_NCOL);
    __syncthreads();
    const int slot = r.hr * a.B + (int)(blockIdx.x % a.B);
    if (warp == 0) { /* lane 8 k + h: warp k's weight for head h; the CTA's (m, l) per head */
        const float2 ml = mml[lane];
        float M = fmaxf(ml.x, __shfl_xor_sync(0xffffffffu, ml.x, 8));
        M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, 16));
        const float f = ml.x == -INFINITY ? 0.0f : kvc_ex2(ml.x - M);
        float L = f * ml.y;
        L += __shfl_xor_sync(0xffffffffu, L, 8);
        L += __shfl_xor_sync(0xffffffffu, L, 16);
        mf[lane] = f;
        if (lane < KVC_NCOL) a.ml[(size_t)slot * KVC_NCOL + lane] = make_float2(M, L);
    }
    __syncthreads();
    for (int i = tid; i < KVC_NCOL * D; i += KVC_NT) {
        const int h = i / D, ch = i % D;
        float A = 0.0f;
#pragma unroll
        for (int k = 0; k < KVC_NW; k++) A = fmaf(mf[k * KVC_NCOL + h], mo[(k * KVC_NCOL + h) * MS + ch], A);
        a.part[((size_t)slot * KVC_NCOL + h) * D + ch] = A;
    }
}

/* ---------------------------------------------------------------- combine */

/* grid (Hq, n_seq), D * cg threads (cg = kvc_combine_groups: 1..KVC_CG_MAX groups of D): group j merges splits
 * j, j + cg, ... of its sequence by an online log-sum-exp, loading KVC_CU splits' (m, l) and partial channel at
 * once (one L2 round trip per KVC_CU * cg splits instead of a dependent walk); the groups meet in shared memory,
 * then each group normalizes (1/l), un-rotates (FWHT) its copy and group 0 writes bf16 out. With an own token
 * (kvc_decode_step) every group also takes its score (warp sums of q . k through shared memory, met at the same
 * barrier) and adds p v after the un-rotation (H H v = v). */
#define KVC_CG_MAX 8
#define KVC_CU 8
template <int D> __global__ void __launch_bounds__(D * KVC_CG_MAX) kvc_combine_kernel(const __grid_constant__ kvc_combine_args a) {
    KVC_DYN_SMEM(float, x); /* [cg][D] group sums, then exchange; [cg] (m, l); own token: [cg][D / 32] q . k */
    const int cg = blockDim.x / D;
    float2 *gml = (float2 *)(x + cg * D);
    const int h = blockIdx.x, s = blockIdx.y, tid = threadIdx.x, ch = tid % D, j = tid / D;
    const int kvh = h / a.gs, hi = h % a.gs, hr = kvh * a.n_pass + hi / KVC_NCOL, col = hi % KVC_NCOL;
    kvc_pdl_wait();   /* the split kernel's partials and sequence table */
    kvc_pdl_launch(); /* the next split kernel may be scheduled (it waits for this grid to complete) */
    const bool own = a.kn && (!a.own_n || a.own_n[s] > 0);
    float vo = 0.0f;
    if (own) { /* this channel's share of q . k, summed per warp (the loads overlap the partials' below) */
        const size_t kr = ((size_t)s * a.Hkv + kvh) * D + ch;
        float d = kvc_bf2f(a.q[((size_t)s * a.Hq + h) * D + ch]) * kvc_bf2f(a.kn[kr]);
        vo = kvc_bf2f(a.vn[kr]);
        d = kvc_warp_sum(d);
        if ((ch & 31) == 0) ((float *)(gml + cg))[j * (D / 32) + ch / 32] = d;
    }
    const int2 info = a.seqinfo[s];
    const size_t base = (size_t)hr * a.B + info.x;
    float M = -INFINITY, L = 0.0f, A = 0.0f;
    for (int k0 = j; k0 < info.y; k0 += KVC_CU * cg) {
        float2 ml[KVC_CU];
        float p[KVC_CU];
#pragma unroll
        for (int u = 0; u < KVC_CU; u++) {
            const int k = k0 + u * cg;
            ml[u] = k < info.y ? a.ml[(base + k) * KVC_NCOL + col] : make_float2(-INFINITY, 0.0f);
            p[u] = k < info.y ? a.part[((base + k) * KVC_NCOL + col) * D + ch] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < KVC_CU; u++) {
            if (ml[u].x == -INFINITY) continue;
            if (ml[u].x > M) {
                const float c = M == -INFINITY ? 0.0f : kvc_ex2(M - ml[u].x);
                A *= c, L *= c, M = ml[u].x;
            }
            const float f = kvc_ex2(ml[u].x - M);
            A = fmaf(f, p[u], A), L = fmaf(f, ml[u].y, L);
        }
    }
    x[j * D + ch] = A;
    if (ch == 0) gml[j] = make_float2(M, L);
    __syncthreads();
    float Mx = -INFINITY;
    for (int i = 0; i < cg; i++) Mx = fmaxf(Mx, gml[i].x);
    float Ls = 0.0f, As = 0.0f;
    if (Mx != -INFINITY)
        for (int i = 0; i < cg; i++) {
            const float2 g = gml[i];
            const float f = g.x == -INFINITY ? 0.0f : kvc_ex2(g.x - Mx);
            As = fmaf(f, x[i * D + ch], As), Ls = fmaf(f, g.y, Ls);
        }
    float fo = 0.0f; /* the own token's weight, relative to the normalized sum */
    if (own) {
        const float *od = (const float *)(gml + cg) + j * (D / 32);
        float dot = 0.0f;
#pragma unroll
        for (int w = 0; w < D / 32; w++) dot += od[w];
        const float so = dot * a.qscale, Mt = fmaxf(Mx, so);
        const float fh = Mx == -INFINITY ? 0.0f : kvc_ex2(Mx - Mt), e = kvc_ex2(so - Mt), Lt = fmaf(Ls, fh, e);
        As *= fh, Ls = Lt, fo = e / Lt;
    }
    float y = Ls > 0.0f ? As / Ls : 0.0f;
    if (a.rotate) { /* kvc_fwht_rows' butterflies: lane bits by shuffles, warp bits through shared memory */
        const int lane = ch & 31;
#pragma unroll
        for (int st = 1; st < 32; st <<= 1) {
            const float o = __shfl_xor_sync(0xffffffffu, y, st);
            y = lane & st ? __fsub_rn(o, y) : __fadd_rn(y, o);
        }
        float *xe = x + j * D; /* each group its own exchange row (the group sums are read) */
#pragma unroll
        for (int st = 32; st < D; st <<= 1) {
            __syncthreads();
            xe[ch] = y;
            __syncthreads();
            const float o = xe[ch ^ st];
            y = ch & st ? __fsub_rn(o, y) : __fadd_rn(y, o);
        }
        y = __fmul_rn(y, (float)(1.0 / sqrt((double)D)));
    }
    if (own) y = fmaf(fo, vo, y);
    if (j == 0) a.out[((size_t)s * a.Hq + h) * D + ch] = kvc_f2bf(y);
}

/* Groups of the combine kernel for B splits per head row over n_seq sequences: enough that a sequence's typical
 * share of splits (B / n_seq) takes one round of loads; any count is correct. */
static int kvc_combine_groups(int B, int n_seq) {
    const int per = (B / (n_seq > 0 ? n_seq : 1) + KVC_CU - 1) / KVC_CU;
    int cg = 1;
    while (cg < per && cg < KVC_CG_MAX) cg <<= 1;
    return cg;
}

/* ---------------------------------------------------------------- reference (SIMT oracle) */

struct kvc_ref_args {
    kv_layer_view v;
    const int32_t *slots, *n_new;
    const uint16_t *q;
    uint16_t *out;
    int Hq, gs;
    float scale;
};

/* Element c of the key (kv = 0) or value (kv = 1) of token t of KV head g of a slot, as f32 (dequantized). */
__device__ float kvc_ref_elem(const kv_layer_view &v, int slot, int64_t L, int g, int64_t t, int c, int kv) {
    const int D = v.head_dim, b = (int)(t / KVC_G), j = (int)(t % KVC_G), nq = kvc_nq(v, L);
    if (b < nq && !(v.quant && b == 0 && j < v.n_sink)) {
        const uint8_t *blk = kv_view_quant_block(&v, kv_view_quant_page(&v, slot, b), g, kv);
        if (!v.quant) return kvc_bf2f(((const uint16_t *)blk)[j * D + c]); /* raw layout in the quant page */
        if (!kv) {
            const int kb = v.kbits, per = 8 / kb;
            const int code = (blk[c * (KVC_G * kb / 8) + j / per] >> ((j % per) * kb)) & ((1 << kb) - 1);
            const uint16_t *sc = (const uint16_t *)(blk + kv_key_scale_off(D, kb)), *mn = sc + D, *nr = mn + D;
            const float u = (float)code * kvc_hw_h2f(sc[c]) + kvc_hw_h2f(mn[c]);
            return v.scale ? kvc_hw_h2f(nr[j]) * u : u;
        }
        const int vb = v.vbits, per = 8 / vb;
        const int code = (blk[j * (D * vb / 8) + c / per] >> ((c % per) * vb)) & ((1 << vb) - 1);
        const uint16_t *sc = (const uint16_t *)(blk + kv_value_scale_off(D, vb)), *mn = sc + KVC_G * (D / KVC_G);
        return (float)code * kvc_hw_h2f(sc[j * (D / KVC_G) + c / KVC_G]) + kvc_hw_h2f(mn[j * (D / KVC_G) + c / KVC_G]);
    }
    const uint8_t *rows = kv_view_raw_rows(&v, kv_view_raw_page(&v, slot, b), g, kv);
    return kvc_bf2f(((const uint16_t *)rows)[j * D + c]);
}

/* grid (Hq, n_seq), 128 threads: warp w takes tokens w, w + 4, ...; lane owns channels lane + 32 i. */
__global__ void __launch_bounds__(128) kvc_ref_kernel(const __grid_constant__ kvc_ref_args a) {
    KVC_DYN_SMEM(float, sm); /* q~ [D], merge: acc [4][D], m [4], l [4] */
    const kv_layer_view &v = a.v;
    const int D = v.head_dim, h = blockIdx.x, s = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = h / a.gs, slot = kvc_slot(a.slots, s);
    const int64_t L = kvc_len(v, a.slots, a.n_new, s);
    float *qs = sm, *acc = sm + D, *mm = acc + 4 * D, *ll = mm + 4;
    for (int c = tid; c < D; c += 128) qs[c] = kvc_bf2f(a.q[((size_t)s * a.Hq + h) * D + c]);
    if (v.rotate) kvc_fwht_rows(qs, 1, D, D, tid, 128);
    else __syncthreads();
    float m = -INFINITY, l = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t t = warp; t < L; t += 4) {
        float d = 0.0f;
        for (int i = 0; i < D / 32; i++) d += qs[lane + 32 * i] * kvc_ref_elem(v, slot, L, g, t, lane + 32 * i, 0);
        const float sc = kvc_warp_sum(d) * a.scale;
        const float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);
        l = l * corr + p;
        for (int i = 0; i < D / 32; i++) o[i] = o[i] * corr + p * kvc_ref_elem(v, slot, L, g, t, lane + 32 * i, 1);
        m = mn;
    }
    for (int i = 0; i < D / 32; i++) acc[warp * D + lane + 32 * i] = o[i];
    if (lane == 0) mm[warp] = m, ll[warp] = l;
    __syncthreads();
    for (int c = tid; c < D; c += 128) {
        float M = -INFINITY, S = 0.0f, A = 0.0f;
        for (int w = 0; w < 4; w++) M = fmaxf(M, mm[w]);
        for (int w = 0; w < 4; w++)
            if (mm[w] != -INFINITY) {
                const float f = expf(mm[w] - M);
                S += f * ll[w], A += f * acc[w * D + c];
            }
        qs[c] = S > 0.0f ? A / S : 0.0f;
    }
    if (v.rotate) kvc_fwht_rows(qs, 1, D, D, tid, 128);
    else __syncthreads();
    for (int c = tid; c < D; c += 128) a.out[((size_t)s * a.Hq + h) * D + c] = kvc_f2bf(qs[c]);
}

/* ---------------------------------------------------------------- host */

static int kvc_kind(const kv_layer_view *v) { /* 0 bf16, 1..4: k2v2, k2v4, k4v2, k4v4 */
    return !v->quant ? 0 : 1 + (v->kbits == 4) * 2 + (v->vbits == 4);
}

/* The split kernels of variant V for head dim D (MG: magic codes; bf16 layers have no codes). */
template <int D, int MG, int V> static void kvc_kernels(kvc_split_fn_t fn[5], int bytes[5]) {
    fn[0] = kvc_split_kernel<D, 16, 16, 0, V>, fn[1] = kvc_split_kernel<D, 2, 2, MG, V>;
    fn[2] = kvc_split_kernel<D, 2, 4, MG, V>, fn[3] = kvc_split_kernel<D, 4, 2, MG, V>;
    fn[4] = kvc_split_kernel<D, 4, 4, MG, V>;
    bytes[0] = kvc_split_layout<D, 16, 16, V>::BYTES, bytes[1] = kvc_split_layout<D, 2, 2, V>::BYTES;
    bytes[2] = kvc_split_layout<D, 2, 4, V>::BYTES, bytes[3] = kvc_split_layout<D, 4, 2, V>::BYTES;
    bytes[4] = kvc_split_layout<D, 4, 4, V>::BYTES;
}

/* The split kernels of compiled variant v (head_dim 128, subnormal codes). */
static void kvc_variant_kernels(int v, kvc_split_fn_t fn[5], int bytes[5]) {
    if (v == 1) kvc_kernels<128, 0, 1>(fn, bytes);
    else if (v == 2) kvc_kernels<128, 0, 2>(fn, bytes);
    else if (v == 3) kvc_kernels<128, 0, 3>(fn, bytes);
    else if (v == 4) kvc_kernels<128, 0, 4>(fn, bytes);
    else if (v == 5) kvc_kernels<128, 0, 5>(fn, bytes);
    else if (v == 6) kvc_kernels<128, 0, 6>(fn, bytes);
    else if (v == 7) kvc_kernels<128, 0, 7>(fn, bytes);
    else kvc_kernels<128, 0, 0>(fn, bytes);
}

/* Kernels, shared memory (padded so that at most p.ctas_per_sm CTAs fit on an SM) and residency per kind. */
static omni_status kvc_setup(kvc_attn *a, int dev) {
    const int v = a->D == 128 && !a->p.magic ? a->p.variant : 0;
    if (a->D == 64) a->p.magic ? kvc_kernels<64, 1, 0>(a->fn, a->bytes) : kvc_kernels<64, 0, 0>(a->fn, a->bytes);
    else if (a->p.magic) kvc_kernels<128, 1, 0>(a->fn, a->bytes);
    else if (v == KVC_NVAR) { /* auto: the bf16 kind from one variant, the quantized kinds from another */
        kvc_split_fn_t fr[5];
        int br[5];
        kvc_variant_kernels(KVC_AUTO_Q, a->fn, a->bytes);
        kvc_variant_kernels(KVC_AUTO_RAW, fr, br);
        a->fn[0] = fr[0], a->bytes[0] = br[0];
    } else kvc_variant_kernels(v, a->fn, a->bytes);
    int per_sm = 0, reserved = 0, per_block = 0;
    omni_status st = kvc_cuda_check(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev),
                                    "shared memory per SM");
    if (!st) st = kvc_cuda_check(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev),
                                 "reserved shared memory");
    if (!st) st = kvc_cuda_check(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                                 "shared memory per block");
    const void *comb = a->D == 64 ? (const void *)kvc_combine_kernel<64> : (const void *)kvc_combine_kernel<128>;
    if (!st)
        st = kvc_cuda_check(cudaFuncSetAttribute(comb, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                 (int)cudaSharedmemCarveoutMaxShared), "carveout attribute");
    for (int i = 0; i < 5 && !st; i++) {
        if (a->p.ctas_per_sm > 0) { /* one more CTA than the cap must not fit */
            const int pad = (per_sm / (a->p.ctas_per_sm + 1) - reserved + 128) / 128 * 128;
            if (pad > a->bytes[i] && pad <= per_block) a->bytes[i] = pad;
        }
        cudaFuncAttributes fa;
        st = kvc_cuda_check(cudaFuncGetAttributes(&fa, (const void *)a->fn[i]), "kernel attributes");
        if (!st && fa.maxDynamicSharedSizeBytes < a->bytes[i]) /* only raised: other workspaces share the kernel */
            st = kvc_cuda_check(cudaFuncSetAttribute((const void *)a->fn[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     a->bytes[i]), "smem attribute");
        if (!st) /* the split and combine kernels on one shared-memory carveout: no reconfiguration between them */
            st = kvc_cuda_check(cudaFuncSetAttribute((const void *)a->fn[i], cudaFuncAttributePreferredSharedMemoryCarveout,
                                                     (int)cudaSharedmemCarveoutMaxShared), "carveout attribute");
        if (!st)
            st = kvc_cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a->occ[i], (const void *)a->fn[i],
                                                                              KVC_NT, a->bytes[i]), "occupancy");
        if (a->occ[i] < 1) a->occ[i] = 1;
    }
    return st;
}

/* CTAs per head row. Few sequences: p.waves full waves (each sequence gets several splits). Many: m CTAs per
 * sequence (m = 1..4 waves), the m whose CTAs fill their waves best (with equal lengths every CTA costs the same,
 * so a grid of 1.45 waves would run 2 waves of work: 73%, while 2 CTAs per sequence fill 2.9 of 3 waves: 97%). */
static int kvc_b(const kvc_attn *a, int kind, int n_seq) {
    const int wave = a->occ[kind] * a->n_sm, b0 = a->p.waves * wave / a->HP > 0 ? a->p.waves * wave / a->HP : 1;
    if (n_seq <= b0) return b0;
    int best = n_seq;
    double best_eff = 0.0;
    for (int m = 1; m <= 4 * a->p.waves; m++) {
        const long long ctas = (long long)m * n_seq * a->HP, waves = (ctas + wave - 1) / wave;
        const double eff = (double)ctas / (double)(waves * wave);
        if (eff > best_eff + 1e-3) best_eff = eff, best = m * n_seq;
    }
    return best;
}

extern "C" kvc_attn_params kvc_attn_default_params(void) {
    kvc_attn_params p;
    p.variant = KVC_NVAR, p.waves = 1, p.ctas_per_sm = 0, p.magic = 0, p.bf16 = 0; /* "auto" */
    return p;
}

extern "C" const char *kvc_attn_variant_name(int variant) {
    return variant >= 0 && variant <= KVC_NVAR ? kvc_var_names[variant] : NULL;
}

/* "name[:wN][:cN][:m]" into p; 0 when malformed. */
static int kvc_parse(const char *s, kvc_attn_params *p) {
    size_t n = strcspn(s, ":");
    for (int v = 0; v <= KVC_NVAR; v++)
        if (strlen(kvc_var_names[v]) == n && !strncmp(s, kvc_var_names[v], n)) p->variant = v;
    if (p->variant < 0) return 0;
    for (const char *c = s + n; *c;) {
        const char k = c[1];
        if (k != 'w' && k != 'c' && k != 'm' && k != 'b') return 0;
        if (k == 'm' && (c[2] == 0 || c[2] == ':')) {
            p->magic = 1, c += 2;
            continue;
        }
        char *end;
        const long x = strtol(c + 2, &end, 10);
        if (end == c + 2 || (*end && *end != ':')) return 0;
        if (k == 'w' && x >= 1 && x <= 4) p->waves = (int)x;
        else if (k == 'c' && x >= 1 && x <= 32) p->ctas_per_sm = (int)x;
        else if (k == 'b' && x >= 0 && x <= KVC_B16_NVAR) p->bf16 = (int)x;
        else return 0;
        c = end;
    }
    return 1;
}

extern "C" omni_status kvc_attn_parse_config(const char *s, kvc_attn_params *p) {
    *p = kvc_attn_default_params();
    p->variant = -1;
    if (s && kvc_parse(s, p)) return OMNI_OK;
    *p = kvc_attn_default_params();
    return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: bad kernel configuration '%s' (variant[:wN][:cN][:m][:bN]; variants "
                     "base q2r1 q3r2 q6r3 q4r1 x2 x2b3 p1 auto, waves 1-4, CTAs per SM 1-32, m: magic codes, "
                     "b: bf16 kernel 0-%d)", s ? s : "(null)", KVC_B16_NVAR);
}

extern "C" omni_status kvc_attn_init_ex(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim,
                                        const kvc_attn_params *p, kvc_attn **out) {
    *out = NULL;
    if (max_seqs <= 0 || max_seqs > KVC_MAX_SEQS || n_kv_heads <= 0 || n_q_heads <= 0 || n_q_heads % n_kv_heads ||
        (head_dim != 64 && head_dim != 128))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: bad sizes (seqs %d of 1..%d, heads %d/%d, head_dim %d: 64 "
                         "or 128)", max_seqs, KVC_MAX_SEQS, n_q_heads, n_kv_heads, head_dim);
    if (p->variant < 0 || p->variant > KVC_NVAR || p->waves < 1 || p->waves > 4 || p->ctas_per_sm < 0 || p->bf16 < 0 ||
        p->bf16 > KVC_B16_NVAR)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: variant %d (0..%d), waves %d (1..4), CTAs per SM %d, bf16 "
                         "kernel %d (0..%d)", p->variant, KVC_NVAR, p->waves, p->ctas_per_sm, p->bf16, KVC_B16_NVAR);
    kvc_attn *a = (kvc_attn *)calloc(1, sizeof *a);
    if (!a) return omni_fail(OMNI_ERR_NOMEM, "kv cuda attn: out of memory");
    a->max_seqs = max_seqs, a->Hq = n_q_heads, a->Hkv = n_kv_heads, a->D = head_dim, a->p = *p;
    a->n_pass = (n_q_heads / n_kv_heads + KVC_NCOL - 1) / KVC_NCOL;
    a->HP = n_kv_heads * a->n_pass;
    int dev = 0;
    omni_status st = kvc_cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
    if (!st) st = kvc_cuda_check(cudaDeviceGetAttribute(&a->n_sm, cudaDevAttrMultiProcessorCount, dev), "SM count");
    if (!st) st = kvc_setup(a, dev);
    if (!st) {
        int bmax = 0;
        for (int k = 0; k < 5; k++)
            for (int ns = 1; ns <= max_seqs; ns++) {
                const int b = kvc_b(a, k, ns);
                bmax = b > bmax ? b : bmax;
            }
        a->max_slots = bmax * a->HP;
        const size_t slots = (size_t)a->max_slots * KVC_NCOL;
        st = kvc_cuda_check(cudaMalloc((void **)&a->part, slots * head_dim * sizeof(float)), "cudaMalloc partials");
        if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->ml, slots * sizeof(float2)), "cudaMalloc partials");
        if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->seqinfo, (size_t)max_seqs * sizeof(int2)), "cudaMalloc");
    }
    if (!st && p->bf16 > 0)
        st = kvc_b16_init(p->bf16 - 1, max_seqs, n_q_heads, n_kv_heads, head_dim, a->n_pass, a->n_sm, &a->b16);
    if (st) {
        kvc_attn_free(a);
        return st;
    }
    *out = a;
    return OMNI_OK;
}

extern "C" omni_status kvc_attn_init(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim, kvc_attn **out) {
    kvc_attn_params p = kvc_attn_default_params();
    const char *cfg = getenv("OMNI_KVC_CONFIG");
    *out = NULL;
    if (cfg && *cfg) {
        omni_status st = kvc_attn_parse_config(cfg, &p);
        if (st) return st;
    }
    if (getenv("OMNI_KVC_MAGIC") && atoi(getenv("OMNI_KVC_MAGIC")) == 1) p.magic = 1;
    return kvc_attn_init_ex(max_seqs, n_q_heads, n_kv_heads, head_dim, &p, out);
}

extern "C" void kvc_attn_free(kvc_attn *a) {
    if (!a) return;
    cudaFree(a->part);
    cudaFree(a->ml);
    cudaFree(a->seqinfo);
    kvc_b16_free(a->b16);
    free(a);
}

static omni_status kvc_check_view(const kvc_attn *a, const kv_layer_view *v, int n_seq, const void *q,
                                  const void *out) {
    if (!a || !v) return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: NULL workspace or view");
    if (v->n_kv_heads != a->Hkv || v->head_dim != a->D)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: view (%d KV heads, D %d) differs from the workspace's (%d, %d)",
                         v->n_kv_heads, v->head_dim, a->Hkv, a->D);
    if (n_seq < 0 || n_seq > a->max_seqs)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: %d sequences (workspace holds %d)", n_seq, a->max_seqs);
    if (v->k_esz != 2 || v->v_esz != 2)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: raw elements of %d/%d bytes (bf16 only on the GPU)", v->k_esz,
                         v->v_esz);
    if (v->quant && ((v->kbits != 2 && v->kbits != 4) || (v->vbits != 2 && v->vbits != 4)))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: bits %d/%d (2 or 4 each)", v->kbits, v->vbits);
    if (v->window < 0 || v->window > 256 || v->window % KVC_G || v->n_sink < 0 || v->n_sink > KVC_G)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: window %d / n_sink %d", v->window, v->n_sink);
    const int needq = v->quant || v->cache_quant;
    const int64_t al = v->raw_page_bytes | v->raw_k | v->raw_v | v->raw_kh | v->raw_vh | (int64_t)(uintptr_t)v->raw_pool |
                       (needq ? v->quant_page_bytes | v->q_k | v->q_v | v->q_kh | v->q_vh |
                                    (int64_t)(uintptr_t)v->quant_pool : 0);
    if (al & 15)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: pools, page sizes, offsets and head strides must be multiples "
                         "of 16 bytes");
    if (n_seq > 0 && (!v->len || !v->raw_tab || !v->raw_pool || (needq && (!v->quant_tab || !v->quant_pool)) || !q ||
                      !out))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: NULL pointer (view, q or out)");
    return OMNI_OK;
}

extern "C" int kvc_decode_ctas(const kvc_attn *a, const kv_layer_view *v, int n_seq) {
    if (!v->quant && a->b16) return kvc_b16_ctas(a->b16);
    return kvc_b(a, kvc_kind(v), n_seq) * a->HP;
}

/* kvc_decode (kn NULL: n_new counts tokens already in the pages) and kvc_decode_step (kn / vn: the own tokens,
 * n_new says which entries have one; the split pass reads the committed history only). */
static omni_status kvc_decode_any(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots,
                                  const int32_t *n_new, const uint16_t *q, const uint16_t *kn, const uint16_t *vn,
                                  uint16_t *out, float scale, void *stream) {
    omni_status st = kvc_check_view(a, v, n_seq, q, out);
    if (st || n_seq == 0) return st;
    if (!v->quant && a->b16 && !kn) /* bf16 layers, the new token in the pages: the dedicated kernel */
        return kvc_b16_decode(a->b16, v, n_seq, slots, n_new, q, out, scale, stream);
    cudaStream_t cs = (cudaStream_t)stream;
    const int kind = kvc_kind(v), B = kvc_b(a, kind, n_seq), gs = a->Hq / a->Hkv;
    if (B * a->HP > a->max_slots)
        return omni_fail(OMNI_ERR_RUNTIME, "kv cuda attn: %d partial slots needed, %d in the workspace", B * a->HP,
                         a->max_slots);
    kvc_split_args args;
    args.v = *v;
    args.slots = slots, args.n_new = kn ? NULL : n_new, args.q = q, args.part = a->part, args.ml = a->ml, args.seqinfo = a->seqinfo;
    args.n_seq = n_seq, args.Hq = a->Hq, args.gs = gs, args.n_pass = a->n_pass, args.HP = a->HP, args.B = B;
    args.qscale = scale * KVC_LOG2E;
    cudaError_t e = kvc_launch(a->fn[kind], dim3(B * a->HP), dim3(KVC_NT), (size_t)a->bytes[kind], cs, 1, args);
    if (e != cudaSuccess) return kvc_cuda_check(e, "decode attention split launch");
    kvc_combine_args ca;
    ca.part = a->part, ca.ml = a->ml, ca.seqinfo = a->seqinfo, ca.out = out;
    ca.Hq = a->Hq, ca.gs = gs, ca.n_pass = a->n_pass, ca.B = B, ca.rotate = v->rotate;
    ca.q = q, ca.kn = kn, ca.vn = vn, ca.own_n = n_new, ca.Hkv = a->Hkv, ca.qscale = args.qscale;
    const dim3 grid(a->Hq, n_seq);
    const int cg = kvc_combine_groups(B, n_seq);
    /* group sums / exchange, group (m, l), own-token warp sums */
    const size_t csm = (size_t)cg * (a->D + 2 + a->D / 32) * sizeof(float);
    e = a->D == 64 ? kvc_launch(kvc_combine_kernel<64>, grid, dim3(64 * cg), csm, cs, 1, ca)
                   : kvc_launch(kvc_combine_kernel<128>, grid, dim3(128 * cg), csm, cs, 1, ca);
    return kvc_cuda_check(e, "decode attention combine launch");
}

extern "C" omni_status kvc_decode(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots,
                                  const int32_t *n_new, const uint16_t *q, uint16_t *out, float scale, void *stream) {
    return kvc_decode_any(a, v, n_seq, slots, n_new, q, NULL, NULL, out, scale, stream);
}

extern "C" omni_status kvc_decode_step(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots,
                                       const int32_t *n_new, const uint16_t *q, const uint16_t *k_new,
                                       const uint16_t *v_new, uint16_t *out, float scale, void *stream) {
    if (n_seq > 0 && (!k_new || !v_new)) return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: NULL k/v of the step");
    return kvc_decode_any(a, v, n_seq, slots, n_new, q, k_new, v_new, out, scale, stream);
}

extern "C" omni_status kvc_decode_ref(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots,
                                      const int32_t *n_new, const uint16_t *q, uint16_t *out, float scale,
                                      void *stream) {
    omni_status st = kvc_check_view(a, v, n_seq, q, out);
    if (st || n_seq == 0) return st;
    kvc_ref_args ra;
    ra.v = *v, ra.slots = slots, ra.n_new = n_new;
    ra.q = q, ra.out = out, ra.Hq = a->Hq, ra.gs = a->Hq / a->Hkv, ra.scale = scale;
    const size_t smem = (size_t)(5 * a->D + 8) * sizeof(float);
    return kvc_cuda_check(kvc_launch(kvc_ref_kernel, dim3(a->Hq, n_seq), dim3(128), smem, (cudaStream_t)stream, 0, ra),
                          "decode attention reference launch");
}
