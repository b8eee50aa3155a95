/* kvc_attn.cu - decode attention (one query token per sequence) over the paged OScaR/KIVI history on the GPU.
 * Quantized blocks run on tensor cores (mma.sync bf16, exact hi/mid/lo split of the folded f32 operand, see the
 * "tensor-core path" section) when a pass has <= 4 query heads, else (or with OMNI_KVC_SIMT=1) on the SIMT path
 * described below; the bf16 window always takes the SIMT path. Both paths keep f32-level accuracy.
 *
 * Three kernels per call (all on the caller's stream; split and combine use programmatic dependent launch, so
 * each is scheduled while the one before it finishes):
 *   prep    grid (n_seq, Hq [+ 2 Hkv]), D threads: q~ = scale * H q (H only when rotating), k~_new = H k_new,
 *           v~_new = H v_new into the workspace.
 *   split   grid (n_split, Hkv * n_pass, n_seq), 4 warps: the GP query heads of one pass of a GQA group walk the
 *           blocks [b0, b1) of their KV head, warp w taking blocks b0 + w, b0 + w + 4, ... Quantized block: the
 *           packed key+value bytes are copied to shared memory (16-byte loads); per-channel scale folded into q
 *           (qsc[c][h] = q~_h[c] * sc_c), the min into a bias (q~_h . mn), lane j scores token j:
 *           s_hj = norm_j * (sum_c qsc[c][h] code_cj + bias_h) (oscar.md section 5); online softmax per warp;
 *           lane i accumulates channels [i*D/32, (i+1)*D/32) of sum_j p_hj (sc_jg code_jc + mn_jg). Raw (bf16
 *           window) block: plain dot products / axpy from global memory, rows beyond L skipped. The 4 warps'
 *           (m, l, acc) are merged in shared memory and written as one partial per (seq, head, split).
 *   combine grid (n_seq, Hq), D threads: log-sum-exp merge of the splits (+ the new token itself), o = acc / l,
 *           un-rotated with the FWHT, written to out.
 * Workspace (kvc_attn_init): q~ [S][Hq][D], k~/v~_new [S][Hkv][D], partials ml [S][Hq][KVC_MAX_SPLIT][2] and
 * acc [S][Hq][KVC_MAX_SPLIT][D] (f32). */
#include "kvc_common.cuh"

#include <stdlib.h>

extern "C" {
#include "kvcache/kv_cuda.h"
}

#define KVC_NW 4           /* warps per split CTA */
#define KVC_MAX_SPLIT 256  /* most splits of one sequence */
#ifndef KVC_MMA_CTAS
#define KVC_MMA_CTAS 2     /* resident CTAs per SM of the tensor-core split kernel (register cap; 3 spills and was slower) */
#endif

struct kvc_attn {
    int max_seqs, Hq, Hkv, D, n_sm;
    int ctas_per_sm, n_split; /* occupancy of the last split kernel launched; splits it used */
    int simt;                 /* OMNI_KVC_SIMT=1: no tensor cores (comparison / fallback) */
    float *qr, *kn, *vn, *ml, *acc;
};

/* ---------------------------------------------------------------- warp helpers */

__device__ __forceinline__ float kvc_warp_max(float x) {
    for (int o = 16; o; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float kvc_warp_sum(float x) {
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Programmatic dependent launch (sm_90): kernels launched with the programmatic-serialization attribute start
 * while the kernel before them runs; kvc_pdl_wait blocks until that kernel has completed and its writes are
 * visible (a no-op when launched normally), kvc_pdl_launch lets the next kernel start early. */
__device__ __forceinline__ void kvc_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void kvc_pdl_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* ---------------------------------------------------------------- prep */

__global__ void kvc_prep_kernel(const float *q, const float *kn, const float *vn, float *qr, float *knr, float *vnr,
                                int Hq, int Hkv, int D, int rotate, float scale) {
    extern __shared__ float x[];
    const int s = blockIdx.x, r = blockIdx.y, c = threadIdx.x;
    kvc_pdl_launch();
    const float *src;
    float *dst, mul = 1.0f;
    if (r < Hq) {
        src = q + ((size_t)s * Hq + r) * D, dst = qr + ((size_t)s * Hq + r) * D, mul = scale;
    } else if (r < Hq + Hkv) {
        src = kn + ((size_t)s * Hkv + r - Hq) * D, dst = knr + ((size_t)s * Hkv + r - Hq) * D;
    } else {
        src = vn + ((size_t)s * Hkv + r - Hq - Hkv) * D, dst = vnr + ((size_t)s * Hkv + r - Hq - Hkv) * D;
    }
    x[c] = src[c];
    if (rotate) kvc_fwht_rows(x, 1, D, D, c, D);
    dst[c] = x[c] * mul;
}

/* ---------------------------------------------------------------- split */

template <int D, int GP, int KB, int VB> struct kvc_cfg {
    static constexpr int KV4 = (D * KVC_G * KB / 8 + D * 4 + KVC_G * 2) / 16; /* key block in uint4 (with norms) */
    static constexpr int VV4 = (KVC_G * D * VB / 8 + D * 4) / 16;
    static constexpr int KREG = (KV4 + 31) / 32, VREG = (VV4 + 31) / 32; /* prefetch registers per lane */
    static constexpr int CPL = D / 32, NG = D / KVC_G;
};

template <int D, int GP, int KB, int VB> struct kvc_warp_smem {
    uint4 kb[2][kvc_cfg<D, GP, KB, VB>::KV4]; /* double buffer: block being computed / block being copied */
    uint4 vb[2][kvc_cfg<D, GP, KB, VB>::VV4];
    float qsc[D * GP];         /* folded q [c][h]; at the end this warp's acc [h][c] */
    float p[KVC_G * GP];       /* softmax weights [j][h]; at the end m [h], l [h] */
    float vsf[KVC_G * (D / KVC_G)], vmf[KVC_G * (D / KVC_G)]; /* value scale/min of the block as f32 [j][g] */
    float acc2[GP <= 4 ? D * GP : 1]; /* the tensor-core path's partial acc [h][c] */
    float ml2[2 * GP];         /* its m [h], l [h] */
};

/* The split kernel's shared memory: q~ of the pass's heads [GP][D], then one kvc_warp_smem per warp. */
template <int D, int GP, int KB, int VB> struct kvc_split_smem {
    float qs[GP * D];
    kvc_warp_smem<D, GP, KB, VB> ws[KVC_NW];
};

/* 16-byte global -> shared copy that bypasses the registers (and L1); commit / wait for all but the newest group. */
__device__ __forceinline__ void kvc_cp_async16(void *dst, const void *src) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(src) : "memory");
}
__device__ __forceinline__ void kvc_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void kvc_cp_async_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

struct kvc_split_args {
    kvc_layer_view v;
    const float *qr;
    float *ml, *acc;
    int Hq, gs, n_pass, n_split;
};

/* Exact small unsigned integer -> float without I2F: 2^23 + x as a float, minus 2^23. */
__device__ __forceinline__ float kvc_u2f(uint32_t x) { return __uint_as_float(x | 0x4b000000u) - 8388608.0f; }

__device__ __forceinline__ float kvc_hw_h2f(uint16_t h) { /* hardware fp16 -> f32 (exact) */
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* Per-warp running state of GP heads: max m, per-lane partial sum l, lane's output channels o, min term ob. */
template <int D, int GP> struct kvc_state {
    float m[GP], l[GP], o[GP][D / 32], ob[GP];
};

/* Online-softmax step for lane j's scores s[h] (-inf when invalid): rescales the state, writes p to ps [j][h]. */
template <int D, int GP>
__device__ __forceinline__ void kvc_softmax_step(const float *s, kvc_state<D, GP> &st, float *ps, int lane) {
#pragma unroll
    for (int h = 0; h < GP; h++) {
        float mb = kvc_warp_max(s[h]), mn = fmaxf(st.m[h], mb);
        float corr = expf(st.m[h] - mn); /* 0 on the first block (m = -inf) */
        float p = s[h] == -INFINITY ? 0.0f : expf(s[h] - mn);
        st.l[h] = st.l[h] * corr + p; /* per-lane partial sum, summed over the warp at the end */
        st.m[h] = mn;
        st.ob[h] *= corr;
#pragma unroll
        for (int i = 0; i < D / 32; i++) st.o[h][i] *= corr;
        ps[lane * GP + h] = p;
    }
}

/* GP consecutive floats from shared memory (vector loads when GP is a multiple of 4). */
template <int GP> __device__ __forceinline__ void kvc_ld(const float *src, float *dst) {
    if constexpr (GP % 4 == 0) {
#pragma unroll
        for (int h = 0; h < GP; h += 4) {
            float4 t = *(const float4 *)(src + h);
            dst[h] = t.x, dst[h + 1] = t.y, dst[h + 2] = t.z, dst[h + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int h = 0; h < GP; h++) dst[h] = src[h];
    }
}

/* One quantized block whose bytes are in the warp's shared memory (oscar.md section 5 folding). */
template <int D, int GP, int KB, int VB>
__device__ __forceinline__ void kvc_quant_compute(kvc_warp_smem<D, GP, KB, VB> &w, int buf, const float *qs, int use_norm,
                                                  kvc_state<D, GP> &st, int lane) {
    using C = kvc_cfg<D, GP, KB, VB>;
    const uint8_t *kbuf = (const uint8_t *)w.kb[buf], *vbuf = (const uint8_t *)w.vb[buf];
    const uint16_t *ksc = (const uint16_t *)(kbuf + D * KVC_G * KB / 8), *kmn = ksc + D, *knorm = kmn + D;
    const uint16_t *vsc = (const uint16_t *)(vbuf + KVC_G * D * VB / 8), *vmn = vsc + KVC_G * C::NG;
    float bias[GP];
#pragma unroll
    for (int h = 0; h < GP; h++) bias[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
        const int c = lane + 32 * i;
        const float sc = kvc_hw_h2f(ksc[c]), mn = kvc_hw_h2f(kmn[c]);
#pragma unroll
        for (int h = 0; h < GP; h++) {
            float qv = qs[h * D + c];
            w.qsc[c * GP + h] = qv * sc;
            bias[h] += qv * mn;
        }
    }
#pragma unroll
    for (int i = 0; i < C::NG; i++) {
        w.vsf[lane + 32 * i] = kvc_hw_h2f(vsc[lane + 32 * i]);
        w.vmf[lane + 32 * i] = kvc_hw_h2f(vmn[lane + 32 * i]);
    }
#pragma unroll
    for (int h = 0; h < GP; h++) bias[h] = kvc_warp_sum(bias[h]);
    __syncwarp();
    /* scores of token j = lane: s = norm_j * (sum_c qsc[c] code_cj + bias) */
    constexpr int PER = 32 / KB;
    const uint32_t *kc = (const uint32_t *)kbuf;
    const int wj = lane / PER, sh = (lane % PER) * KB;
    float acc[GP];
#pragma unroll
    for (int h = 0; h < GP; h++) acc[h] = 0.0f;
#pragma unroll 8
    for (int c = 0; c < D; c++) {
        const float cf = kvc_u2f((kc[c * KB + wj] >> sh) & ((1u << KB) - 1u));
        float qv[GP];
        kvc_ld<GP>(w.qsc + c * GP, qv);
#pragma unroll
        for (int h = 0; h < GP; h++) acc[h] = fmaf(qv[h], cf, acc[h]);
    }
    const float nrm = use_norm ? kvc_hw_h2f(knorm[lane]) : 1.0f;
    float s[GP];
#pragma unroll
    for (int h = 0; h < GP; h++) s[h] = (acc[h] + bias[h]) * nrm;
    kvc_softmax_step<D, GP>(s, st, w.p, lane);
    __syncwarp();
    /* values: lane owns channels c0 .. c0 + CPL - 1 (one group g) */
    constexpr int CPL = C::CPL, WPR = D * VB / 32; /* words per token row */
    const int c0 = lane * CPL, g = c0 / KVC_G, wv = (c0 * VB) / 32, shv = (c0 * VB) % 32;
    const uint32_t *vc = (const uint32_t *)vbuf;
#pragma unroll 4
    for (int j = 0; j < KVC_G; j++) {
        const uint32_t word = vc[j * WPR + wv] >> shv;
        const float sc = w.vsf[j * C::NG + g], mn = w.vmf[j * C::NG + g];
        float cf[CPL], p[GP];
#pragma unroll
        for (int i = 0; i < CPL; i++) cf[i] = kvc_u2f((word >> (i * VB)) & ((1u << VB) - 1u));
        kvc_ld<GP>(w.p + j * GP, p);
#pragma unroll
        for (int h = 0; h < GP; h++) {
            const float pa = p[h] * sc;
            st.ob[h] = fmaf(p[h], mn, st.ob[h]);
#pragma unroll
            for (int i = 0; i < CPL; i++) st.o[h][i] = fmaf(pa, cf[i], st.o[h][i]);
        }
    }
}

/* ---------------------------------------------------------------- tensor-core path (GP <= 4)
 * Both products run on mma.sync m16n8k16 (bf16 operands, f32 accumulate) with the GQA heads in M. The folded f32
 * operand x (q~ * key scale per channel; p * value scale per group) is split exactly into three bf16 terms
 * x = hi + mid + lo (|x - sum| <= 2^-24 |x|) stacked in M: row h = hi, row 4 + h = mid, row 8 + h = lo of head h,
 * so one MMA gives f32-level accuracy; codes are exact in bf16. Fragment roles (gid = lane / 4, tig = lane % 4):
 * lane gid < 4 supplies rows gid (hi) and gid + 8 (lo) of head gid, lane gid >= 4 row gid (mid of head gid - 4)
 * and row gid + 8 (zero); both hold the same head hh = gid % 4. The score accumulators of n-tile nt (tokens
 * 8 nt + 2 tig + {0, 1}) are exactly the A layout the value MMA needs (k-step ks = nt / 2), as in FlashAttention. */
template <int D> struct kvc_mstate {
    float m, l;            /* head hh: running max, lane-partial sum over its 8 tokens of each block */
    float o[D / 8][4];     /* value accumulators: n-tile nt (channels 8 nt + 2 tig + {0,1}), rows gid / gid + 8 */
    float ob[D / KVC_G];   /* lane-partial sum_j p_j * mn_jg per group */
};

__device__ __forceinline__ void kvc_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* bf16x2 of two floats (x0 in the low half), RNE; and back. */
__device__ __forceinline__ uint32_t kvc_bf2(float x0, float x1) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
}
__device__ __forceinline__ float kvc_bflo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float kvc_bfhi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/* A fragment registers (r0: row gid, r1: row gid + 8) for the pair (x0, x1) of this lane's head:
 * part 0 lanes take hi / lo, part 1 lanes mid / 0. */
__device__ __forceinline__ void kvc_split_pair(float x0, float x1, int part, uint32_t &r0, uint32_t &r1) {
    uint32_t hi = kvc_bf2(x0, x1);
    float y0 = x0 - kvc_bflo(hi), y1 = x1 - kvc_bfhi(hi);
    uint32_t mid = kvc_bf2(y0, y1);
    uint32_t lo = kvc_bf2(y0 - kvc_bflo(mid), y1 - kvc_bfhi(mid));
    r0 = part ? mid : hi;
    r1 = part ? 0u : lo;
}

/* 2-bit codes, two per instruction chain: x and y are code words already shifted right by 2 gid, so that this
 * lane's code of each 16-code half sits at bits 0-1 (half 0) and 16-17 (half 1). Returns bf16x2 {code of x,
 * code of y} of the chosen half: one PRMT (the two halves side by side), one LOP3 (mask + exponent of 128), one
 * bf16x2 subtraction of 128 (exact). Same values as kvc_codes_bf2 of the separately extracted codes. */
template <int HALF> __device__ __forceinline__ uint32_t kvc_codes2_bf2(uint32_t x, uint32_t y) {
    const uint32_t u = (__byte_perm(x, y, HALF ? 0x7632 : 0x5410) & 0x00030003u) | 0x43004300u;
    uint32_t r;
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(u), "r"(0x43004300u));
    return r;
}

/* Two codes (c0 low, c1 high) as exact bf16x2: 128 + c via the exponent of 128, minus 128. */
__device__ __forceinline__ uint32_t kvc_codes_bf2(uint32_t c0, uint32_t c1) {
    uint32_t u = c0 | (c1 << 16) | 0x43004300u, r;
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(u), "r"(0x43004300u));
    return r;
}

template <int D, int GP, int KB, int VB>
__device__ __forceinline__ void kvc_quant_compute_mma(kvc_warp_smem<D, GP, KB, VB> &w, int buf, const float *qs,
                                                      int use_norm, kvc_mstate<D> &st, int lane) {
    using C = kvc_cfg<D, GP, KB, VB>;
    const int gid = lane >> 2, tig = lane & 3, hh = gid & 3, part = gid >> 2, valid = hh < GP;
    const uint8_t *kbuf = (const uint8_t *)w.kb[buf], *vbuf = (const uint8_t *)w.vb[buf];
    const uint16_t *ksc = (const uint16_t *)(kbuf + D * KVC_G * KB / 8), *kmn = ksc + D, *knorm = kmn + D;
    const uint16_t *vsc = (const uint16_t *)(vbuf + KVC_G * D * VB / 8), *vmn = vsc + KVC_G * C::NG;
    /* bias_h = q~_h . mn (f32, lane-parallel over channels), value scales/mins to f32 in smem */
    float bias[GP];
#pragma unroll
    for (int h = 0; h < GP; h++) bias[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
        const int c = lane + 32 * i;
        const float mn = kvc_hw_h2f(kmn[c]);
#pragma unroll
        for (int h = 0; h < GP; h++) bias[h] = fmaf(qs[h * D + c], mn, bias[h]);
    }
#pragma unroll
    for (int i = 0; i < C::NG; i++) {
        w.vsf[lane + 32 * i] = kvc_hw_h2f(vsc[lane + 32 * i]);
        w.vmf[lane + 32 * i] = kvc_hw_h2f(vmn[lane + 32 * i]);
    }
    float bh = 0.0f;
#pragma unroll
    for (int h = 0; h < GP; h++) {
        float t = kvc_warp_sum(bias[h]);
        bh = h == hh ? t : bh;
    }
    __syncwarp();
    /* scores: S[h][j] = sum_c (q~_hc sc_c) code_cj over k-steps of 16 channels, n-tiles of 8 tokens */
    float sacc[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) sacc[nt][e] = 0.0f;
    const uint32_t *kc = (const uint32_t *)kbuf;
    constexpr int KPW = 32 / KB; /* key codes per word */
    const float *qh = qs + (valid ? hh : 0) * D;
#pragma unroll 2
    for (int ks = 0; ks < D / 16; ks++) {
        const int c = 16 * ks + 2 * tig;
        float x[4];
        const int cc[4] = {c, c + 1, c + 8, c + 9};
#pragma unroll
        for (int i = 0; i < 4; i++) x[i] = valid ? qh[cc[i]] * kvc_hw_h2f(ksc[cc[i]]) : 0.0f;
        uint32_t a[4];
        kvc_split_pair(x[0], x[1], part, a[0], a[1]);
        kvc_split_pair(x[2], x[3], part, a[2], a[3]);
        if constexpr (KB == 2) { /* channel ch: words 2 ch (tokens 0-15), 2 ch + 1 (16-31); token 8 nt + gid */
            uint32_t u[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint2 wd = *(const uint2 *)(kc + 2 * cc[i]);
                u[i][0] = wd.x >> (2 * gid), u[i][1] = wd.y >> (2 * gid);
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int wj = nt >> 1;
                uint32_t b0, b1;
                if (nt & 1) b0 = kvc_codes2_bf2<1>(u[0][wj], u[1][wj]), b1 = kvc_codes2_bf2<1>(u[2][wj], u[3][wj]);
                else b0 = kvc_codes2_bf2<0>(u[0][wj], u[1][wj]), b1 = kvc_codes2_bf2<0>(u[2][wj], u[3][wj]);
                kvc_mma(sacc[nt], a, b0, b1);
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int j = 8 * nt + gid, wj = j / KPW, sh = (j % KPW) * KB;
                const uint32_t m = (1u << KB) - 1u;
                uint32_t b0 = kvc_codes_bf2((kc[cc[0] * KB + wj] >> sh) & m, (kc[cc[1] * KB + wj] >> sh) & m);
                uint32_t b1 = kvc_codes_bf2((kc[cc[2] * KB + wj] >> sh) & m, (kc[cc[3] * KB + wj] >> sh) & m);
                kvc_mma(sacc[nt], a, b0, b1);
            }
        }
    }
    /* this lane's 8 scores of head hh: tokens 8 nt + 2 tig + e; hi + lo here, mid in lane ^ 16 */
    float sc[4][2], mb = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float t = sacc[nt][e] + sacc[nt][2 + e];
            t += __shfl_xor_sync(0xffffffffu, t, 16);
            const int j = 8 * nt + 2 * tig + e;
            t = (t + bh) * (use_norm ? kvc_hw_h2f(knorm[j]) : 1.0f);
            sc[nt][e] = t;
            mb = fmaxf(mb, t);
        }
    mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
    mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
    const float mnew = fmaxf(st.m, mb), corr = expf(st.m - mnew);
    st.m = mnew;
    float psum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            sc[nt][e] = expf(sc[nt][e] - mnew);
            psum += sc[nt][e];
        }
    st.l = st.l * corr + psum;
    /* values: O[h][c] += sum_j (p_hj sc_jg) code_jc per group g (4 n-tiles), k-steps of 16 tokens. Each block's
     * product is accumulated from zero in the tensor core and added to the running state with one IEEE FFMA
     * (o = o * corr + block), so the MMA's internal accumulation never runs over more than 32 tokens. */
    const uint32_t *vc = (const uint32_t *)vbuf;
    constexpr int WPR = D * VB / 32; /* words per token row */
#pragma unroll
    for (int g = 0; g < C::NG; g++) {
        st.ob[g] *= corr;
        uint32_t a[2][4];
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            const int j = 16 * ks + 2 * tig;
            const int jj[4] = {j, j + 1, j + 8, j + 9};
            const float pp[4] = {sc[2 * ks][0], sc[2 * ks][1], sc[2 * ks + 1][0], sc[2 * ks + 1][1]};
            float x[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                x[i] = pp[i] * w.vsf[jj[i] * C::NG + g];
                st.ob[g] = fmaf(pp[i], w.vmf[jj[i] * C::NG + g], st.ob[g]);
            }
            kvc_split_pair(x[0], x[1], part, a[ks][0], a[ks][1]);
            kvc_split_pair(x[2], x[3], part, a[ks][2], a[ks][3]);
        }
        if constexpr (VB == 2) { /* token row j: word w holds channels 16 w .. 16 w + 15; channel 8 nt + gid */
            uint32_t u[2][4][2]; /* [ks][token j, j + 1, j + 8, j + 9][word 2 g, 2 g + 1] */
#pragma unroll
            for (int ks = 0; ks < 2; ks++) {
                const int j = 16 * ks + 2 * tig;
                const int jj[4] = {j, j + 1, j + 8, j + 9};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const uint2 wd = *(const uint2 *)(vc + jj[i] * WPR + 2 * g);
                    u[ks][i][0] = wd.x >> (2 * gid), u[ks][i][1] = wd.y >> (2 * gid);
                }
            }
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int nt = 4 * g + t, wt = t >> 1;
                float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < 2; ks++) {
                    uint32_t b0, b1;
                    if (t & 1) {
                        b0 = kvc_codes2_bf2<1>(u[ks][0][wt], u[ks][1][wt]);
                        b1 = kvc_codes2_bf2<1>(u[ks][2][wt], u[ks][3][wt]);
                    } else {
                        b0 = kvc_codes2_bf2<0>(u[ks][0][wt], u[ks][1][wt]);
                        b1 = kvc_codes2_bf2<0>(u[ks][2][wt], u[ks][3][wt]);
                    }
                    kvc_mma(blk, a[ks], b0, b1);
                }
#pragma unroll
                for (int e = 0; e < 4; e++) st.o[nt][e] = fmaf(st.o[nt][e], corr, blk[e]);
            }
        } else {
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int nt = 4 * g + t, c = 8 * nt + gid, wc = (c * VB) / 32, sh = (c * VB) % 32;
                const uint32_t m = (1u << VB) - 1u;
                float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < 2; ks++) {
                    const int j = 16 * ks + 2 * tig;
                    uint32_t b0 = kvc_codes_bf2((vc[j * WPR + wc] >> sh) & m, (vc[(j + 1) * WPR + wc] >> sh) & m);
                    uint32_t b1 = kvc_codes_bf2((vc[(j + 8) * WPR + wc] >> sh) & m, (vc[(j + 9) * WPR + wc] >> sh) & m);
                    kvc_mma(blk, a[ks], b0, b1);
                }
#pragma unroll
                for (int e = 0; e < 4; e++) st.o[nt][e] = fmaf(st.o[nt][e], corr, blk[e]);
            }
        }
    }
}

/* The tensor-core state of a warp -> its smem partial (acc2 [h][c], ml2), heads < GP only. */
template <int D, int GP, int KB, int VB>
__device__ __forceinline__ void kvc_mstate_store(const kvc_mstate<D> &st, kvc_warp_smem<D, GP, KB, VB> &w,
                                                 int lane) {
    const int gid = lane >> 2, tig = lane & 3, hh = gid & 3, part = gid >> 2;
    float l = st.l;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float ob[D / KVC_G];
#pragma unroll
    for (int g = 0; g < D / KVC_G; g++) {
        ob[g] = st.ob[g] + __shfl_xor_sync(0xffffffffu, st.ob[g], 1);
        ob[g] += __shfl_xor_sync(0xffffffffu, ob[g], 2);
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float t = st.o[nt][e] + st.o[nt][2 + e];
            t += __shfl_xor_sync(0xffffffffu, t, 16);
            const int c = 8 * nt + 2 * tig + e;
            if (part == 0 && hh < GP) w.acc2[hh * D + c] = t + ob[c / KVC_G];
        }
    if (part == 0 && tig == 0 && hh < GP) {
        w.ml2[hh] = st.m;
        w.ml2[GP + hh] = l;
    }
}

template <int D, int GP>
__device__ void kvc_raw_block(float *ps, const float *qs, const uint16_t *kr, const uint16_t *vr, int n,
                              kvc_state<D, GP> &st, int lane) {
    float s[GP];
#pragma unroll
    for (int h = 0; h < GP; h++) s[h] = -INFINITY;
    if (lane < n) {
        float acc[GP];
#pragma unroll
        for (int h = 0; h < GP; h++) acc[h] = 0.0f;
        const uint4 *row = (const uint4 *)(kr + (size_t)lane * D);
        uint4 ur[D / 8]; /* the whole row in flight at once (one memory round trip, not D / 8) */
#pragma unroll
        for (int c8 = 0; c8 < D / 8; c8++) ur[c8] = __ldg(row + c8);
#pragma unroll
        for (int c8 = 0; c8 < D / 8; c8++) {
            uint4 u = ur[c8];
            uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                float x0 = __uint_as_float(wd[t] << 16), x1 = __uint_as_float(wd[t] & 0xffff0000u);
#pragma unroll
                for (int h = 0; h < GP; h++) acc[h] += qs[h * D + c8 * 8 + 2 * t] * x0 + qs[h * D + c8 * 8 + 2 * t + 1] * x1;
            }
        }
#pragma unroll
        for (int h = 0; h < GP; h++) s[h] = acc[h];
    }
    kvc_softmax_step<D, GP>(s, st, ps, lane);
    __syncwarp();
    constexpr int CPL = D / 32, WPL = CPL / 2; /* channels / bf16 pairs per lane and row */
    const int c0 = lane * CPL;
    uint32_t xw[KVC_G][WPL]; /* all rows in flight at once (one memory round trip); rows >= n are never read */
#pragma unroll
    for (int t = 0; t < KVC_G; t++) {
        if constexpr (WPL == 2) {
            const uint2 u = t < n ? __ldg((const uint2 *)(vr + (size_t)t * D + c0)) : make_uint2(0u, 0u);
            xw[t][0] = u.x, xw[t][1] = u.y;
        } else {
            xw[t][0] = t < n ? __ldg((const unsigned int *)(vr + (size_t)t * D + c0)) : 0u;
        }
    }
#pragma unroll
    for (int t = 0; t < KVC_G; t++) {
        if (t >= n) break;
#pragma unroll
        for (int h = 0; h < GP; h++) {
            float p = ps[t * GP + h];
#pragma unroll
            for (int i = 0; i < CPL; i++)
                st.o[h][i] += p * (i & 1 ? kvc_bfhi(xw[t][i / 2]) : kvc_bflo(xw[t][i / 2]));
        }
    }
    __syncwarp();
}

template <int D, int GP, int KB, int VB, bool MMA>
__global__ void __launch_bounds__(KVC_NW * 32, MMA ? KVC_MMA_CTAS : 1) kvc_split_kernel(const kvc_split_args a) {
    using C = kvc_cfg<D, GP, KB, VB>;
    extern __shared__ uint4 kvc_dyn_smem[]; /* kvc_split_smem (dynamic: over 48 KB for some instances) */
    kvc_split_smem<D, GP, KB, VB> &sm = *reinterpret_cast<kvc_split_smem<D, GP, KB, VB> *>(kvc_dyn_smem);
    float *qs = sm.qs;
    kvc_warp_smem<D, GP, KB, VB> *ws = sm.ws;
    const kvc_layer_view &v = a.v;
    const int split = blockIdx.x, g = blockIdx.y / a.n_pass, pass = blockIdx.y % a.n_pass, seq = blockIdx.z;
    const int h0 = g * a.gs + pass * GP, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t L = v.len[seq]; /* the caller's data: readable before prep has finished */
    kvc_pdl_wait();                /* q~ comes from prep */
    for (int t = threadIdx.x; t < GP * D; t += blockDim.x) qs[t] = a.qr[((size_t)seq * a.Hq + h0) * D + t];
    __syncthreads();
    const int nb = (int)((L + KVC_G - 1) / KVC_G), nq = L >= v.window ? (int)((L - v.window) / KVC_G) : 0;
    const int bps = (nb + a.n_split - 1) / a.n_split, b0 = split * bps, b1 = min(nb, b0 + bps), bq = min(b1, nq);
    const int kbytes = D * KVC_G * KB / 8 + D * 4 + (v.scale ? KVC_G * 2 : 0), kv4 = kbytes / 16;
    const int64_t kh = kbytes, vh = C::VV4 * 16;
    kvc_warp_smem<D, GP, KB, VB> &w = ws[warp];
    kvc_state<D, GP> st;
#pragma unroll
    for (int h = 0; h < GP; h++) {
        st.m[h] = -INFINITY;
        st.l[h] = st.ob[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < D / 32; i++) st.o[h][i] = 0.0f;
    }
    kvc_mstate<D> mst;
    mst.m = -INFINITY;
    mst.l = 0.0f;
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) mst.o[nt][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < D / KVC_G; i++) mst.ob[i] = 0.0f;
    const int32_t *qtab = v.qtab + (size_t)seq * v.tab_stride, *rtab = v.rtab + (size_t)seq * v.tab_stride;
    /* raw (bf16 window) blocks first: this warp's blocks b0 + warp + k NW that are >= bq */
    const int bw = b0 + warp, braw = bw >= bq ? bw : bw + (bq - bw + KVC_NW - 1) / KVC_NW * KVC_NW;
    for (int b = braw; b < b1; b += KVC_NW) {
        const uint8_t *page = v.rpool + (int64_t)rtab[b] * v.rpage_bytes;
        const int64_t head = (int64_t)g * KVC_G * D * 2;
        int n = (int)min((int64_t)KVC_G, L - (int64_t)b * KVC_G);
        kvc_raw_block<D, GP>(w.p, qs, (const uint16_t *)(page + v.r_k + head), (const uint16_t *)(page + v.r_v + head),
                             n, st, lane);
    }
    /* SIMT state -> smem partial (acc [h][c] in qsc, m/l in p): now when the tensor cores take the quantized
     * blocks (its registers are then free), after them otherwise */
    auto store_simt = [&]() {
#pragma unroll
        for (int h = 0; h < GP; h++) {
            float lt = kvc_warp_sum(st.l[h]);
#pragma unroll
            for (int i = 0; i < D / 32; i++) w.qsc[h * D + lane * (D / 32) + i] = st.o[h][i] + st.ob[h];
            if (lane == 0) {
                w.p[h] = st.m[h];
                w.p[GP + h] = lt;
                w.ml2[h] = -INFINITY; /* no tensor-core partial unless stored below */
            }
        }
        __syncwarp();
    };
    if constexpr (MMA) store_simt();
    /* quantized blocks, double-buffered: the next block's bytes are copied to shared memory (cp.async, 16 bytes per
     * lane and copy, L2 only) during the compute of the current one */
    auto issue = [&](int bb, int buf) {
        const uint8_t *page = v.qpool + (int64_t)qtab[bb] * v.qpage_bytes;
        const uint4 *kp = (const uint4 *)(page + v.q_k + g * kh), *vp = (const uint4 *)(page + v.q_v + g * vh);
#pragma unroll
        for (int i = 0; i < C::KREG; i++)
            if (i * 32 + lane < kv4) kvc_cp_async16(&w.kb[buf][i * 32 + lane], kp + i * 32 + lane);
#pragma unroll
        for (int i = 0; i < C::VREG; i++)
            if (i * 32 + lane < C::VV4) kvc_cp_async16(&w.vb[buf][i * 32 + lane], vp + i * 32 + lane);
        kvc_cp_async_commit();
    };
    if (bw < bq) issue(bw, 0);
    for (int b = bw, buf = 0; b < bq; b += KVC_NW, buf ^= 1) {
        if (b + KVC_NW < bq) issue(b + KVC_NW, buf ^ 1); /* that buffer's block was finished last iteration */
        else kvc_cp_async_commit();                      /* empty group: the wait below stays uniform */
        kvc_cp_async_wait1();                            /* this lane's copies of block b have landed */
        __syncwarp();                                    /* ... and every lane's */
        if constexpr (MMA) kvc_quant_compute_mma<D, GP, KB, VB>(w, buf, qs, v.scale, mst, lane);
        else kvc_quant_compute<D, GP, KB, VB>(w, buf, qs, v.scale, st, lane);
        __syncwarp();
    }
    if constexpr (!MMA) store_simt();
    if constexpr (MMA) kvc_mstate_store<D, GP, KB, VB>(mst, w, lane);
    kvc_pdl_launch(); /* the combine kernel may be scheduled now; it waits for this grid to finish */
    __syncthreads();
    for (int t = threadIdx.x; t < GP * D; t += blockDim.x) {
        const int h = t / D, c = t % D;
        float M = -INFINITY;
        for (int k = 0; k < KVC_NW; k++) M = fmaxf(M, fmaxf(ws[k].p[h], ws[k].ml2[h]));
        float Ls = 0.0f, A = 0.0f;
        if (M != -INFINITY)
            for (int k = 0; k < KVC_NW; k++) {
                float mk = ws[k].p[h], m2 = ws[k].ml2[h];
                if (mk != -INFINITY) {
                    float f = expf(mk - M);
                    Ls += ws[k].p[GP + h] * f;
                    A += ws[k].qsc[h * D + c] * f;
                }
                if (m2 != -INFINITY) {
                    float f = expf(m2 - M);
                    Ls += ws[k].ml2[GP + h] * f;
                    A += ws[k].acc2[h * D + c] * f;
                }
            }
        const size_t row = ((size_t)seq * a.Hq + h0 + h) * KVC_MAX_SPLIT + split;
        a.acc[row * D + c] = A;
        if (c == 0) {
            a.ml[row * 2] = M;
            a.ml[row * 2 + 1] = Ls;
        }
    }
}

/* ---------------------------------------------------------------- combine */

__global__ void kvc_combine_kernel(const float *ml, const float *acc, const float *qr, const float *knr,
                                   const float *vnr, float *out, int Hq, int gs, int Hkv, int D, int n_split,
                                   int rotate) {
    __shared__ float x[128], red[128], wt[KVC_MAX_SPLIT], self_s;
    const int s = blockIdx.x, h = blockIdx.y, c = threadIdx.x, g = h / gs;
    const size_t row = ((size_t)s * Hq + h) * KVC_MAX_SPLIT;
    kvc_pdl_wait(); /* the split kernel's partials (and, through it, prep's outputs) */
    /* the new token's score, then the global max M over it and the splits' maxima */
    red[c] = knr ? qr[((size_t)s * Hq + h) * D + c] * knr[((size_t)s * Hkv + g) * D + c] : 0.0f;
    __syncthreads();
    for (int o = D / 2; o; o >>= 1) {
        if (c < o) red[c] += red[c + o];
        __syncthreads();
    }
    if (c == 0) self_s = knr ? red[0] : -INFINITY;
    float mloc = -INFINITY;
    for (int i = c; i < n_split; i += D) {
        wt[i] = ml[(row + i) * 2];
        mloc = fmaxf(mloc, wt[i]);
    }
    __syncthreads();
    x[c] = mloc;
    __syncthreads();
    for (int o = D / 2; o; o >>= 1) {
        if (c < o) x[c] = fmaxf(x[c], x[c + o]);
        __syncthreads();
    }
    const float self = self_s, M = fmaxf(x[0], self);
    __syncthreads();
    /* weights f_i = exp(m_i - M) (0 for empty splits) and the denominator */
    float lloc = 0.0f;
    for (int i = c; i < n_split; i += D) {
        float f = wt[i] == -INFINITY ? 0.0f : expf(wt[i] - M);
        wt[i] = f;
        lloc += f * ml[(row + i) * 2 + 1];
    }
    red[c] = lloc;
    __syncthreads();
    for (int o = D / 2; o; o >>= 1) {
        if (c < o) red[c] += red[c + o];
        __syncthreads();
    }
    float Ls = red[0], A = 0.0f;
#pragma unroll 8
    for (int i = 0; i < n_split; i++) A += acc[(row + i) * D + c] * wt[i];
    if (knr) {
        float e = expf(self - M);
        Ls += e;
        A += e * vnr[((size_t)s * Hkv + g) * D + c];
    }
    __syncthreads();
    x[c] = Ls > 0.0f ? A / Ls : 0.0f;
    if (rotate) kvc_fwht_rows(x, 1, D, D, c, D);
    out[((size_t)s * Hq + h) * D + c] = x[c];
}

/* ---------------------------------------------------------------- host */

extern "C" omni_status kvc_attn_init(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim, kvc_attn **out) {
    *out = NULL;
    if (max_seqs <= 0 || n_kv_heads <= 0 || n_q_heads <= 0 || n_q_heads % n_kv_heads ||
        (head_dim != 64 && head_dim != 128))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: bad sizes (seqs %d, heads %d/%d, head_dim %d: 64 or 128)",
                         max_seqs, n_q_heads, n_kv_heads, head_dim);
    kvc_attn *a = (kvc_attn *)calloc(1, sizeof *a);
    if (!a) return omni_fail(OMNI_ERR_NOMEM, "kv cuda attn: out of memory");
    a->max_seqs = max_seqs, a->Hq = n_q_heads, a->Hkv = n_kv_heads, a->D = head_dim, a->ctas_per_sm = 4;
    a->simt = getenv("OMNI_KVC_SIMT") && atoi(getenv("OMNI_KVC_SIMT")) == 1;
    int dev = 0;
    omni_status st = kvc_cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
    if (!st) st = kvc_cuda_check(cudaDeviceGetAttribute(&a->n_sm, cudaDevAttrMultiProcessorCount, dev), "SM count");
    size_t rows = (size_t)max_seqs * n_q_heads, krows = (size_t)max_seqs * n_kv_heads;
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->qr, rows * head_dim * 4), "cudaMalloc q");
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->kn, krows * head_dim * 4), "cudaMalloc k");
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->vn, krows * head_dim * 4), "cudaMalloc v");
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->ml, rows * KVC_MAX_SPLIT * 2 * 4), "cudaMalloc ml");
    if (!st) st = kvc_cuda_check(cudaMalloc((void **)&a->acc, rows * KVC_MAX_SPLIT * head_dim * 4), "cudaMalloc acc");
    if (st) {
        kvc_attn_free(a);
        return st;
    }
    *out = a;
    return OMNI_OK;
}

extern "C" void kvc_attn_free(kvc_attn *a) {
    if (!a) return;
    cudaFree(a->qr);
    cudaFree(a->kn);
    cudaFree(a->vn);
    cudaFree(a->ml);
    cudaFree(a->acc);
    free(a);
}

/* Heads per pass: the largest of 8, 4, 2, 1 dividing the group size. */
static int heads_per_pass(int gs) { return gs % 8 == 0 ? 8 : gs % 4 == 0 ? 4 : gs % 2 == 0 ? 2 : 1; }

/* Splits: enough CTAs to fill every SM to the split kernel's occupancy (ctas_per_sm, measured at the last
 * launch), at least one block per warp. */
extern "C" int kvc_attn_splits(const kvc_attn *a, int n_seq, int64_t max_len) {
    const int gs = a->Hq / a->Hkv, n_pass = gs / heads_per_pass(gs);
    int64_t nb = (max_len + KVC_G - 1) / KVC_G, ctas = (int64_t)(n_seq > 0 ? n_seq : 1) * a->Hkv * n_pass;
    int64_t want = (int64_t)a->ctas_per_sm * a->n_sm / ctas, most = (nb + KVC_NW - 1) / KVC_NW; /* one wave */
    if (want > most) want = most;
    if (want > KVC_MAX_SPLIT) want = KVC_MAX_SPLIT;
    return want < 1 ? 1 : (int)want;
}

/* Launch configuration with the programmatic-serialization attribute in *attr (see kvc_pdl_wait). */
static cudaLaunchConfig_t kvc_pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                         cudaLaunchAttribute *attr) {
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
    cfg.attrs = attr, cfg.numAttrs = 1;
    return cfg;
}

template <int D, int GP, int KB, int VB, bool MMA>
static void launch_split_m(const kvc_layer_view *v, kvc_attn *a, int n_seq, int64_t max_len, cudaStream_t st) {
    static int occ = 0; /* resident CTAs per SM of this instance */
    const size_t smem = sizeof(kvc_split_smem<D, GP, KB, VB>);
    if (!occ) {
        cudaFuncSetAttribute(kvc_split_kernel<D, GP, KB, VB, MMA>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kvc_split_kernel<D, GP, KB, VB, MMA>, KVC_NW * 32,
                                                          smem))
            occ = 4;
    }
    a->ctas_per_sm = occ > 0 ? occ : 1;
    kvc_split_args args;
    args.v = *v;
    args.qr = a->qr;
    args.ml = a->ml;
    args.acc = a->acc;
    args.Hq = a->Hq;
    args.gs = a->Hq / a->Hkv;
    args.n_pass = args.gs / GP;
    args.n_split = a->n_split = kvc_attn_splits(a, n_seq, max_len);
    dim3 grid(args.n_split, a->Hkv * args.n_pass, n_seq);
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = kvc_pdl_config(grid, dim3(KVC_NW * 32), smem, st, &attr);
    cudaLaunchKernelEx(&cfg, kvc_split_kernel<D, GP, KB, VB, MMA>, args);
}

/* Tensor cores for groups of up to 4 heads (hi/mid/lo rows fit M = 16) unless OMNI_KVC_SIMT=1. */
template <int D, int GP, int KB, int VB>
static void launch_split(const kvc_layer_view *v, kvc_attn *a, int n_seq, int64_t max_len, cudaStream_t st) {
    if constexpr (GP <= 4) {
        if (!a->simt) return launch_split_m<D, GP, KB, VB, true>(v, a, n_seq, max_len, st);
    }
    launch_split_m<D, GP, KB, VB, false>(v, a, n_seq, max_len, st);
}

template <int D, int GP>
static void launch_split_bits(const kvc_layer_view *v, kvc_attn *a, int n_seq, int64_t max_len, cudaStream_t st) {
    if constexpr (D == 128 && GP == 8) { /* 8 heads with int4 blocks exceed 48 KB of static shared memory */
        if (v->kbits == 2 && v->vbits == 2) launch_split<D, GP, 2, 2>(v, a, n_seq, max_len, st);
        else launch_split_bits<D, 4>(v, a, n_seq, max_len, st);
    } else {
        if (v->kbits == 2 && v->vbits == 2) launch_split<D, GP, 2, 2>(v, a, n_seq, max_len, st);
        else if (v->kbits == 2) launch_split<D, GP, 2, 4>(v, a, n_seq, max_len, st);
        else if (v->vbits == 2) launch_split<D, GP, 4, 2>(v, a, n_seq, max_len, st);
        else launch_split<D, GP, 4, 4>(v, a, n_seq, max_len, st);
    }
}

template <int D>
static void launch_split_d(const kvc_layer_view *v, kvc_attn *a, int n_seq, int64_t max_len, cudaStream_t st) {
    switch (heads_per_pass(a->Hq / a->Hkv)) {
    case 8: launch_split_bits<D, 8>(v, a, n_seq, max_len, st); break;
    case 4: launch_split_bits<D, 4>(v, a, n_seq, max_len, st); break;
    case 2: launch_split_bits<D, 2>(v, a, n_seq, max_len, st); break;
    default: launch_split_bits<D, 1>(v, a, n_seq, max_len, st); break;
    }
}

static omni_status check_view(const kvc_attn *a, const kvc_layer_view *v, int n_seq, int n_q_heads) {
    if (v->n_kv_heads != a->Hkv || v->head_dim != a->D || n_q_heads != a->Hq)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: view/heads (%d kv, %d q, D %d) differ from the workspace's "
                         "(%d, %d, %d)", v->n_kv_heads, n_q_heads, v->head_dim, a->Hkv, a->Hq, a->D);
    if (n_seq < 0 || n_seq > a->max_seqs)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: %d sequences (workspace holds %d)", n_seq, a->max_seqs);
    if ((v->kbits != 2 && v->kbits != 4) || (v->vbits != 2 && v->vbits != 4))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: bits %d/%d (2 or 4)", v->kbits, v->vbits);
    if (v->window < 0 || v->window > 256 || v->window % KVC_G)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: window %d", v->window);
    if (v->qpage_bytes % 16 || v->q_k % 16 || v->q_v % 16 || ((uintptr_t)v->qpool & 15u) || v->rpage_bytes % 16 ||
        v->r_k % 16 || v->r_v % 16 || ((uintptr_t)v->rpool & 15u))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: pools, page sizes and offsets must be 16-byte aligned");
    if (n_seq > 0 && (!v->len || !v->qtab || !v->rtab || !v->rpool || !v->qpool))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: NULL pointer in the layer view");
    return OMNI_OK;
}

extern "C" omni_status kvc_decode(kvc_attn *a, const kvc_layer_view *v, int n_seq, int64_t max_len, const float *q,
                                  const float *k_new, const float *v_new, float *out, int n_q_heads, float scale,
                                  void *stream) {
    if (!a || !v) return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: NULL workspace or view");
    omni_status st = check_view(a, v, n_seq, n_q_heads);
    if (st) return st;
    if (n_seq == 0) return OMNI_OK;
    if (!q || !out || (!k_new) != (!v_new))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda attn: NULL q/out, or only one of k_new/v_new");
    cudaStream_t cs = (cudaStream_t)stream;
    const int D = a->D, gs = a->Hq / a->Hkv;
    dim3 pgrid(n_seq, a->Hq + (k_new ? 2 * a->Hkv : 0));
    kvc_prep_kernel<<<pgrid, D, D * sizeof(float), cs>>>(q, k_new, v_new, a->qr, a->kn, a->vn, a->Hq, a->Hkv, D,
                                                         v->rotate, scale);
    if (D == 64) launch_split_d<64>(v, a, n_seq, max_len, cs);
    else launch_split_d<128>(v, a, n_seq, max_len, cs);
    dim3 cgrid(n_seq, a->Hq);
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = kvc_pdl_config(cgrid, dim3(D), 0, cs, &attr);
    const float *knr = k_new ? a->kn : NULL;
    cudaLaunchKernelEx(&cfg, kvc_combine_kernel, (const float *)a->ml, (const float *)a->acc, (const float *)a->qr,
                       knr, (const float *)a->vn, out, a->Hq, gs, a->Hkv, D, a->n_split, v->rotate);
    return kvc_cuda_check(cudaGetLastError(), "decode attention launch");
}
