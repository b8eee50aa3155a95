/* kvc_prefill.cu - prefill attention on tensor cores (API and contract: kvcache/kv_cuda.h):
 *   kvc_prefill        a chunk of new tokens per sequence attends to the sequence's stored history (bf16 pages, or
 *                      packed int2/int4/KIVI blocks + window + sinks, read through the layer view) and causally to
 *                      the chunk itself in full precision, as kv_forward does on the CPU; GQA; variable lengths.
 *   kvc_attn_segments  non-causal attention within segments (cu_seqlens), for the vision / audio towers.
 *
 * One kernel (FlashAttention-2 style, mma.m16n8k16, f32 accumulators and online softmax): a CTA of 4 warps owns
 * an M tile of 64 query rows of one KV head: row r = (token r / gs, query head r % gs of the group), each warp
 * 16 rows. Keys come in tiles of 32 tokens staged in shared memory (rows padded: conflict-free ldmatrix): the
 * history block by block (bf16 rows copied, or a packed block dequantized to f16 by the threads: k = norm *
 * (code * sc + mn), v = code * sc + mn, sink rows from the raw page), then the chunk (causal mask) or the segment.
 * S = Q K^T and O += P V with ldmatrix fragments; P comes from the S accumulators (FA2 register reuse).
 * Precision: bf16 tiles use bf16 operands with q~ and P split into hi + lo (two MMAs); f16 tiles (dequantized
 * history) use f16 q~ and P (11 bits); the softmax scale multiplies the f32 scores. Errors are dominated by the
 * bf16 rounding of the output (performance.md section 4).
 * Rotation (OScaR): the history is stored as H k, H v: its scores use q~ = H q and its values accumulate in the
 * rotated basis; before the chunk, each warp turns its accumulators into the plain basis in registers (o <- H o:
 * butterflies within a lane and across lanes with shuffles), and the chunk's keys/values enter unrotated with q.
 * Launch shape: (ceil(max_q * gs / 64) tiles, n_seq * Hkv), independent of the history lengths.
 * kvc_prefill_hist: every tile of an entry reads the entry's whole history, so a packed history dequantized in the
 * tiles costs ceil(n_new * gs / 64) times the dequantization work per KV head (an 8K-token chunk of Qwen3-VL-8B:
 * 512 times), SIMT work that made int2 prefill ~5x slower than bf16. A first kernel dequantizes each such entry's
 * packed blocks once into a scratch of f16 rows (same formula, same f16 values: kvp_deq) and the tiles then copy
 * rows as for bf16 pages; entries past the scratch dequantize in the tiles. */
#include "kvc_common.cuh"
#include "kvc_ptx.cuh"

#include <string.h>

extern "C" {
#include "kvcache/kv_cuda.h"
}

#define KVP_NW 4
#define KVP_NT (KVP_NW * 32)
#define KVP_M 64  /* query rows per CTA */
#define KVP_N 32  /* keys per tile */
#define KVP_LOG2E 1.4426950408889634f

struct kvp_args {
    kv_layer_view v;      /* prefill: the layer (history); has_hist 0 for segments */
    int has_hist;
    const int32_t *slots; /* [n_seq] or NULL */
    const int32_t *cu;    /* [n_seq + 1] first row of each sequence / segment in q, k, v, out */
    const uint16_t *q, *k, *vv;
    uint16_t *out;
    int64_t q_row, kv_row, o_row; /* elements between consecutive tokens */
    int Hq, Hkv, gs, causal, D;
    float qscale;   /* softmax scale * log2(e), applied to the f32 scores */
    uint16_t *hist; /* kvc_prefill_hist: dequantized history scratch (f16), or NULL */
    int64_t hist_cap; /* its tokens */
};

/* Shared memory: Q variants [64][DS] (bf16 hi / lo of the history query, f16 of it, bf16 chunk query), K and V
 * tiles [32][DS] (bf16 or f16 bits), row pointers of the tile. DS = DP + 8 (16-byte pad: no ldmatrix conflicts). */
template <int DP> struct kvp_smem {
    static constexpr int DS = DP + 8;
    uint16_t qh[KVP_M][DS], ql[KVP_M][DS], q16[KVP_M][DS], qc[KVP_M][DS];
    uint16_t k[KVP_N][DS], v[KVP_N][DS];
    float qf[KVP_NW][DP]; /* one row being rotated per warp */
};

/* ---------------------------------------------------------------- queries */

/* Row r of the tile: its token (chunk index) and query head; valid when the token exists. */
__device__ __forceinline__ bool kvp_row(const kvp_args &a, int tile, int r, int n_new, int *tok, int *hh) {
    const int tt = KVP_M / a.gs; /* tokens per tile */
    *tok = tile * tt + r / a.gs, *hh = r % a.gs;
    return r < tt * a.gs && *tok < n_new;
}

/* Q tile into shared memory: plain bf16 (chunk), and for the history: q~ = H q (if rotating) as bf16 hi + lo and
 * f16. Rows of absent tokens are zeros. Each warp rotates one row at a time in its f32 scratch. */
template <int DP>
__device__ void kvp_load_q(const kvp_args &a, kvp_smem<DP> &sm, int seq0, int n_new, int tile, int kvh, bool rot) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < KVP_M; r += KVP_NW) {
        int tok, hh;
        const bool ok = kvp_row(a, tile, r, n_new, &tok, &hh);
        const uint16_t *src = a.q + (int64_t)(seq0 + tok) * a.q_row + (int64_t)(kvh * a.gs + hh) * a.D;
        for (int c = lane; c < DP; c += 32) {
            const uint16_t x = ok && c < a.D ? src[c] : (uint16_t)0;
            sm.qc[r][c] = x;
            sm.qf[warp][c] = kvc_bf2f(x);
        }
        __syncwarp();
        if (rot) { /* in-warp FWHT of the row (DP a power of two when rotating) */
            for (int h = 1; h < DP; h <<= 1) {
                for (int i = lane; i < DP / 2; i += 32) {
                    const int j = (i / h) * 2 * h + i % h;
                    const float x = sm.qf[warp][j], y = sm.qf[warp][j + h];
                    sm.qf[warp][j] = x + y, sm.qf[warp][j + h] = x - y;
                }
                __syncwarp();
            }
            const float s = (float)(1.0 / sqrt((double)DP));
            for (int c = lane; c < DP; c += 32) sm.qf[warp][c] *= s;
            __syncwarp();
        }
        for (int c = lane; c < DP; c += 32) {
            const float x = sm.qf[warp][c];
            const uint32_t hi = kvc_bf16x2(x, 0.0f);
            sm.qh[r][c] = (uint16_t)hi;
            sm.ql[r][c] = (uint16_t)kvc_bf16x2(x - kvc_bf2f((uint16_t)hi), 0.0f);
            sm.q16[r][c] = (uint16_t)kvc_f16x2(x, 0.0f);
        }
        __syncwarp();
    }
}

/* ---------------------------------------------------------------- key tiles */

/* bf16 rows [n][D] (row stride `stride` elements) into a tile; rows >= n and channels >= D are zero. 16-byte
 * accesses when the rows allow (always for the cache's pages and the usual q/k/v buffers). */
template <int DP>
__device__ void kvp_tile_rows(uint16_t (*dst)[DP + 8], const uint16_t *src, int64_t stride, int n, int D) {
    if (((uintptr_t)src & 15) == 0 && (stride & 7) == 0 && (D & 7) == 0) {
        for (int i = threadIdx.x; i < KVP_N * (DP / 8); i += KVP_NT) {
            const int j = i / (DP / 8), c = 8 * (i % (DP / 8));
            *(uint4 *)&dst[j][c] = j < n && c < D ? *(const uint4 *)(src + (int64_t)j * stride + c) : make_uint4(0, 0, 0, 0);
        }
        return;
    }
    for (int i = threadIdx.x; i < KVP_N * DP; i += KVP_NT) {
        const int j = i / DP, c = i % DP;
        dst[j][c] = j < n && c < D ? src[(int64_t)j * stride + c] : (uint16_t)0;
    }
}

/* The packed key / value blocks of history block b < nq of a slot and KV head, with their scales, mins, norms and
 * (block 0) the sink rows of the raw page. */
struct kvp_block {
    const uint8_t *kb, *vb;
    const uint16_t *ksc, *kmn, *knr, *vsc, *vmn, *sk, *sv;
    int S; /* sink tokens in this block */
};

__device__ __forceinline__ kvp_block kvp_block_of(const kv_layer_view &v, int slot, int kvh, int b) {
    const int D = v.head_dim;
    kvp_block q;
    const int32_t p = kv_view_quant_page(&v, slot, b);
    q.kb = kv_view_quant_block(&v, p, kvh, 0), q.vb = kv_view_quant_block(&v, p, kvh, 1);
    q.ksc = (const uint16_t *)(q.kb + kv_key_scale_off(D, v.kbits)), q.kmn = q.ksc + D, q.knr = q.kmn + D;
    q.vsc = (const uint16_t *)(q.vb + kv_value_scale_off(D, v.vbits)), q.vmn = q.vsc + KVC_G * (D / KVC_G);
    q.S = b == 0 ? v.n_sink : 0;
    q.sk = q.sv = NULL;
    if (q.S > 0) {
        const int32_t rp = kv_view_raw_page(&v, slot, 0);
        q.sk = (const uint16_t *)kv_view_raw_rows(&v, rp, kvh, 0), q.sv = (const uint16_t *)kv_view_raw_rows(&v, rp, kvh, 1);
    }
    return q;
}

/* Token j, channel c of a packed block as f32 (k = norm * (code * sc + mn), v = code * sc + mn; sinks from the raw
 * rows). The one formula of the tiles and of the dequantization scratch (equal values either way). */
__device__ __forceinline__ void kvp_deq(const kv_layer_view &v, const kvp_block &q, int j, int c, float *kx, float *vx) {
    const int D = v.head_dim, KB = v.kbits, VB = v.vbits;
    if (j < q.S) {
        *kx = kvc_bf2f(q.sk[j * D + c]), *vx = kvc_bf2f(q.sv[j * D + c]);
        return;
    }
    const int kper = 8 / KB, vper = 8 / VB;
    const int kc = (q.kb[c * (KVC_G * KB / 8) + j / kper] >> ((j % kper) * KB)) & ((1 << KB) - 1);
    const int vc = (q.vb[j * (D * VB / 8) + c / vper] >> ((c % vper) * VB)) & ((1 << VB) - 1);
    float k = (float)kc * kvc_hw_h2f(q.ksc[c]) + kvc_hw_h2f(q.kmn[c]);
    if (v.scale) k *= kvc_hw_h2f(q.knr[j]);
    const int g = j * (D / KVC_G) + c / KVC_G;
    *kx = k, *vx = (float)vc * kvc_hw_h2f(q.vsc[g]) + kvc_hw_h2f(q.vmn[g]);
}

/* History block b of a slot into the K/V tiles. Returns 1 when the tile holds f16 (dequantized) values, 0 for
 * bf16 rows; n = valid tokens. hk / hv: this slot's and head's rows in the dequantization scratch (f16 [32 nq][D]),
 * or NULL (dequantize here). */
template <int DP>
__device__ int kvp_tile_hist(const kv_layer_view &v, kvp_smem<DP> &sm, int slot, int64_t L, int kvh, int b, int n,
                             const uint16_t *hk, const uint16_t *hv) {
    const int D = v.head_dim, nq = kv_view_nq(&v, L);
    if (b >= nq || !v.quant) {
        const uint8_t *kr, *vr;
        if (b < nq) { /* bf16 layer of a quantizing cache: raw layout in the quant page */
            const int32_t p = kv_view_quant_page(&v, slot, b);
            kr = kv_view_quant_block(&v, p, kvh, 0), vr = kv_view_quant_block(&v, p, kvh, 1);
        } else {
            const int32_t p = kv_view_raw_page(&v, slot, b);
            kr = kv_view_raw_rows(&v, p, kvh, 0), vr = kv_view_raw_rows(&v, p, kvh, 1);
        }
        kvp_tile_rows<DP>(sm.k, (const uint16_t *)kr, D, n, D);
        kvp_tile_rows<DP>(sm.v, (const uint16_t *)vr, D, n, D);
        return 0;
    }
    if (hk) { /* dequantized once for the whole call */
        kvp_tile_rows<DP>(sm.k, hk + (int64_t)b * KVC_G * D, D, n, D);
        kvp_tile_rows<DP>(sm.v, hv + (int64_t)b * KVC_G * D, D, n, D);
        return 1;
    }
    const kvp_block q = kvp_block_of(v, slot, kvh, b);
    for (int i = threadIdx.x; i < KVP_N * DP; i += KVP_NT) {
        const int j = i / DP, c = i % DP;
        float kx = 0.0f, vx = 0.0f;
        if (c < D) kvp_deq(v, q, j, c, &kx, &vx);
        sm.k[j][c] = (uint16_t)kvc_f16x2(kx, 0.0f);
        sm.v[j][c] = (uint16_t)kvc_f16x2(vx, 0.0f);
    }
    return 1;
}

/* ---------------------------------------------------------------- dequantization scratch
 * The packed history of an entry whose chunk spans several tiles is read by every tile (ceil(n_new * gs / 64) per
 * KV head): kvc_prefill_hist dequantizes it once into the scratch and the tiles copy f16 rows. Entries in batch
 * order take 32 nq tokens each while they fit in hist_cap tokens; layout of an entry from its first token `off`:
 * f16 [2 (K, V)][Hkv][32 nq][D] at element off * 2 * Hkv * D. */

/* Entry seq's first scratch token, or -1 (no scratch for it: its tiles dequantize as kvc_prefill does). */
__device__ int64_t kvp_hist_off(const kvp_args &a, int seq) {
    if (!a.hist || !a.v.quant) return -1;
    int64_t off = 0;
    for (int j = 0; j <= seq; j++) {
        const int slot = a.slots ? a.slots[j] : j;
        const int64_t need =
            a.cu[j + 1] - a.cu[j] > KVP_M / a.gs ? (int64_t)kv_view_nq(&a.v, a.v.len[slot]) * KVC_G : 0;
        const bool fit = need > 0 && off + need <= a.hist_cap;
        if (j == seq) return fit ? off : -1;
        if (fit) off += need;
    }
    return -1;
}

/* K rows of entry seq (slot, history L), KV head kvh in the scratch (V rows at + Hkv * 32 nq * D); NULL if none. */
__device__ __forceinline__ uint16_t *kvp_hist_rows(const kvp_args &a, int seq, int64_t L, int kvh) {
    const int64_t off = kvp_hist_off(a, seq);
    if (off < 0) return NULL;
    const int64_t nt = (int64_t)kv_view_nq(&a.v, L) * KVC_G;
    return a.hist + (off * 2 * a.Hkv + (int64_t)kvh * nt) * a.D;
}

/* Grid (gx, n_seq * Hkv): CTA (x, seq * Hkv + kvh) dequantizes blocks x, x + gx, ... of that entry and head. */
__global__ void __launch_bounds__(KVP_NT) kvp_dequant_kernel(const __grid_constant__ kvp_args a) {
    const int seq = blockIdx.y / a.Hkv, kvh = blockIdx.y % a.Hkv, D = a.D;
    const int slot = a.slots ? a.slots[seq] : seq;
    const int64_t L = a.v.len[slot];
    uint16_t *hk = kvp_hist_rows(a, seq, L, kvh);
    if (!hk) return;
    const int nq = kv_view_nq(&a.v, L);
    uint16_t *hv = hk + (int64_t)a.Hkv * nq * KVC_G * D;
    for (int b = blockIdx.x; b < nq; b += gridDim.x) {
        const kvp_block q = kvp_block_of(a.v, slot, kvh, b);
        for (int i = threadIdx.x; i < KVC_G * D / 2; i += KVP_NT) { /* channel pairs */
            const int j = i / (D / 2), c = 2 * (i % (D / 2));
            float k0, v0, k1, v1;
            kvp_deq(a.v, q, j, c, &k0, &v0);
            kvp_deq(a.v, q, j, c + 1, &k1, &v1);
            const int64_t o = ((int64_t)b * KVC_G + j) * D + c;
            *(uint32_t *)(hk + o) = kvc_f16x2(k0, k1);
            *(uint32_t *)(hv + o) = kvc_f16x2(v0, v1);
        }
    }
}

/* ---------------------------------------------------------------- compute */

template <int DP> struct kvp_wst {
    float o[DP / 8][4]; /* O [16 rows][DP]: n-tile nt (channels 8 nt + 2t, +1), rows g (c0, c1) and g + 8 (c2, c3) */
    float m[2], l[2];   /* rows g, g + 8 */
};

/* Scores, online softmax and values of one staged tile for this warp's 16 rows. F16: tile holds f16 values (and
 * q16 is used), else bf16 with qa (hi) + qb (lo, unless lo is false). mask(row, key) -> key visible. */
template <int DP, bool F16, class Mask>
__device__ __forceinline__ void kvp_tile(kvp_smem<DP> &sm, const uint16_t (*qa)[DP + 8], const uint16_t (*qb)[DP + 8],
                                         bool lo, float qscale, kvp_wst<DP> &w, Mask mask) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, r0 = warp * 16;
    float s[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) s[nt][i] = 0.0f;
    /* A: rows r0 + (lane & 15), channel block 16 ks + 8 (lane >> 4); B: keys 16 np + (lane & 7) + 8 (lane >> 4),
     * channel block 16 ks + 8 ((lane >> 3) & 1) */
    const int arow = r0 + (lane & 15), acol = 8 * (lane >> 4);
    const int bkey = (lane & 7) + 8 * (lane >> 4), bcol = 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < DP / 16; ks++) {
        uint32_t a[4], al[4];
        kvc_ldsm4(a, &qa[arow][16 * ks + acol]);
        if (!F16 && lo) kvc_ldsm4(al, &qb[arow][16 * ks + acol]);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            uint32_t b[4]; /* n-tile 2 np: b[0], b[1]; n-tile 2 np + 1: b[2], b[3] */
            kvc_ldsm4(b, &sm.k[16 * np + bkey][16 * ks + bcol]);
            if (F16) {
                kvc_mma_f16(s[2 * np], a, b[0], b[1]);
                kvc_mma_f16(s[2 * np + 1], a, b[2], b[3]);
            } else {
                kvc_mma_bf16(s[2 * np], a, b[0], b[1]);
                kvc_mma_bf16(s[2 * np + 1], a, b[2], b[3]);
                if (lo) {
                    kvc_mma_bf16(s[2 * np], al, b[0], b[1]);
                    kvc_mma_bf16(s[2 * np + 1], al, b[2], b[3]);
                }
            }
        }
    }
    /* scale, mask, online softmax per row (rows g: c0, c1; g + 8: c2, c3; keys 8 nt + 2t + e) */
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = r0 + g + 8 * (i >> 1), key = 8 * nt + 2 * t + (i & 1);
            s[nt][i] = mask(row, key) ? s[nt][i] * qscale : -INFINITY;
            mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
        }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 1));
        mx[u] = fmaxf(mx[u], __shfl_xor_sync(0xffffffffu, mx[u], 2));
        const float mn = fmaxf(w.m[u], mx[u]);
        const float corr = w.m[u] == -INFINITY ? 0.0f : kvc_ex2(w.m[u] - mn);
        w.m[u] = mn, w.l[u] *= corr;
#pragma unroll
        for (int nt = 0; nt < DP / 8; nt++) w.o[nt][2 * u] *= corr, w.o[nt][2 * u + 1] *= corr;
    }
    const float b0 = w.m[0] == -INFINITY ? 0.0f : w.m[0], b1 = w.m[1] == -INFINITY ? 0.0f : w.m[1];
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s[nt][i] = kvc_ex2(s[nt][i] - (i < 2 ? b0 : b1));
            w.l[i >> 1] += s[nt][i];
        }
    /* P as A fragments (k-step ks: keys 16 ks ..): a0 = n-tile 2 ks rows g, a1 = rows g + 8, a2/a3: n-tile 2 ks + 1 */
    uint32_t ph[2][4], pl[2][4];
#pragma unroll
    for (int ks = 0; ks < 2; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float *x = s[2 * ks + (i >> 1)] + 2 * (i & 1);
            if (F16) {
                ph[ks][i] = kvc_f16x2(x[0], x[1]);
            } else {
                ph[ks][i] = kvc_bf16x2(x[0], x[1]);
                pl[ks][i] = kvc_bf16x2(x[0] - __uint_as_float(ph[ks][i] << 16), x[1] - __uint_as_float(ph[ks][i] & 0xffff0000u));
            }
        }
    /* V B fragments by ldmatrix.trans: keys 16 ks + (lane & 7) + 8 ((lane >> 3) & 1), channels 8 (2 np + (lane >> 4)) */
    const int vkey = (lane & 7) + 8 * ((lane >> 3) & 1), vcol = 8 * (lane >> 4);
#pragma unroll
    for (int ks = 0; ks < 2; ks++)
#pragma unroll
        for (int np = 0; np < DP / 16; np++) {
            uint32_t b[4]; /* n-tile 2 np: b[0], b[1]; 2 np + 1: b[2], b[3] */
            kvc_ldsm4_t(b, &sm.v[16 * ks + vkey][16 * np + vcol]);
            if (F16) {
                kvc_mma_f16(w.o[2 * np], ph[ks], b[0], b[1]);
                kvc_mma_f16(w.o[2 * np + 1], ph[ks], b[2], b[3]);
            } else {
                kvc_mma_bf16(w.o[2 * np], ph[ks], b[0], b[1]);
                kvc_mma_bf16(w.o[2 * np + 1], ph[ks], b[2], b[3]);
                kvc_mma_bf16(w.o[2 * np], pl[ks], b[0], b[1]);
                kvc_mma_bf16(w.o[2 * np + 1], pl[ks], b[2], b[3]);
            }
        }
}

/* o <- H o for this warp's 16 rows in registers: column c = 8 nt + 2 t + e; bit 0 (e) and bits 3.. (nt) within
 * the lane, bits 1-2 (t) across lanes. */
template <int DP> __device__ __forceinline__ void kvp_rotate_o(kvp_wst<DP> &w) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int nt = 0; nt < DP / 8; nt++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const float x = w.o[nt][2 * u], y = w.o[nt][2 * u + 1];
            w.o[nt][2 * u] = x + y, w.o[nt][2 * u + 1] = x - y;
        }
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
        const bool hi = (t & m) != 0;
#pragma unroll
        for (int nt = 0; nt < DP / 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float p = __shfl_xor_sync(0xffffffffu, w.o[nt][i], m);
                w.o[nt][i] = hi ? p - w.o[nt][i] : w.o[nt][i] + p;
            }
    }
#pragma unroll
    for (int h = 1; h < DP / 8; h <<= 1)
#pragma unroll
        for (int nt = 0; nt < DP / 8; nt++)
            if (!(nt & h))
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float x = w.o[nt][i], y = w.o[nt + h][i];
                    w.o[nt][i] = x + y, w.o[nt + h][i] = x - y;
                }
    const float sc = (float)(1.0 / sqrt((double)DP));
#pragma unroll
    for (int nt = 0; nt < DP / 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) w.o[nt][i] *= sc;
}

template <int DP> __global__ void __launch_bounds__(KVP_NT) kvp_kernel(const __grid_constant__ kvp_args a) {
    KVC_DYN_SMEM(uint8_t, raw);
    kvp_smem<DP> &sm = *reinterpret_cast<kvp_smem<DP> *>(raw);
    const int tile = blockIdx.x, seq = blockIdx.y / a.Hkv, kvh = blockIdx.y % a.Hkv;
    const int seq0 = a.cu[seq], n_new = a.cu[seq + 1] - seq0;
    if (tile * (KVP_M / a.gs) >= n_new) return; /* whole CTA: uniform */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
    const int slot = a.has_hist ? (a.slots ? a.slots[seq] : seq) : 0;
    const int64_t L = a.has_hist ? a.v.len[slot] : 0;
    const bool rot = a.has_hist && a.v.rotate && L > 0;
    kvp_load_q<DP>(a, sm, seq0, n_new, tile, kvh, rot);
    kvp_wst<DP> w;
#pragma unroll
    for (int nt = 0; nt < DP / 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) w.o[nt][i] = 0.0f;
    w.m[0] = w.m[1] = -INFINITY, w.l[0] = w.l[1] = 0.0f;
    int rtok[2]; /* chunk tokens of this lane's rows (g, g + 8); -1 for padding rows */
    for (int u = 0; u < 2; u++) {
        int tok, hh;
        rtok[u] = kvp_row(a, tile, warp * 16 + g + 8 * u, n_new, &tok, &hh) ? tok : -1;
    }
    /* ---- history */
    const int nb = (int)((L + KVC_G - 1) / KVC_G);
    const uint16_t *hk = nb > 0 ? kvp_hist_rows(a, seq, L, kvh) : NULL;
    const uint16_t *hv = hk ? hk + (int64_t)a.Hkv * kv_view_nq(&a.v, L) * KVC_G * a.D : NULL;
    for (int b = 0; b < nb; b++) {
        const int n = (int)min((int64_t)KVC_G, L - (int64_t)b * KVC_G);
        __syncthreads(); /* previous tile consumed (and Q written) */
        const int f16 = kvp_tile_hist<DP>(a.v, sm, slot, L, kvh, b, n, hk, hv);
        __syncthreads();
        auto mask = [&](int row, int key) { return key < n && rtok[((row & 15) >> 3)] >= 0; };
        if (f16) kvp_tile<DP, true>(sm, sm.q16, sm.q16, false, a.qscale, w, mask);
        else kvp_tile<DP, false>(sm, sm.qh, sm.ql, rot, a.qscale, w, mask);
    }
    if (rot) kvp_rotate_o<DP>(w);
    /* ---- chunk (causal) or segment: keys [0, kend) of this sequence's rows */
    const int tt = KVP_M / a.gs, last = min(n_new, (tile + 1) * tt) - 1;
    const int kend = a.causal ? last + 1 : n_new;
    for (int k0 = 0; k0 < kend; k0 += KVP_N) {
        const int n = min(KVP_N, kend - k0);
        __syncthreads();
        kvp_tile_rows<DP>(sm.k, a.k + (int64_t)(seq0 + k0) * a.kv_row + (int64_t)kvh * a.D, a.kv_row, n, a.D);
        kvp_tile_rows<DP>(sm.v, a.vv + (int64_t)(seq0 + k0) * a.kv_row + (int64_t)kvh * a.D, a.kv_row, n, a.D);
        __syncthreads();
        auto mask = [&](int row, int key) {
            const int qt = rtok[(row & 15) >> 3], kt = k0 + key;
            return qt >= 0 && kt < kend && (!a.causal || kt <= qt);
        };
        kvp_tile<DP, false>(sm, sm.qc, sm.qc, false, a.qscale, w, mask);
    }
    /* ---- out = o / l (rows g, g + 8) */
#pragma unroll
    for (int u = 0; u < 2; u++) {
        w.l[u] += __shfl_xor_sync(0xffffffffu, w.l[u], 1);
        w.l[u] += __shfl_xor_sync(0xffffffffu, w.l[u], 2);
    }
    const int t = lane & 3;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        int tok, hh;
        if (!kvp_row(a, tile, warp * 16 + g + 8 * u, n_new, &tok, &hh)) continue;
        const float inv = w.l[u] > 0.0f ? 1.0f / w.l[u] : 0.0f;
        uint16_t *dst = a.out + (int64_t)(seq0 + tok) * a.o_row + (int64_t)(kvh * a.gs + hh) * a.D;
#pragma unroll
        for (int nt = 0; nt < DP / 8; nt++) {
            const int c = 8 * nt + 2 * t;
            if (c < a.D) {
                const uint32_t p = kvc_bf16x2(w.o[nt][2 * u] * inv, w.o[nt][2 * u + 1] * inv);
                *(uint32_t *)(dst + c) = p;
            }
        }
    }
}

/* ---------------------------------------------------------------- host */

template <int DP> static cudaError_t kvp_launch(const kvp_args &a, int tiles, int rows, cudaStream_t st) {
    const size_t smem = sizeof(kvp_smem<DP>);
    static int ready = 0; /* the shared-memory limit is raised once (not inside a later graph capture) */
    if (!ready) {
        cudaError_t e = cudaFuncSetAttribute((const void *)kvp_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) return e;
        ready = 1;
    }
    return kvc_launch(kvp_kernel<DP>, dim3(tiles, rows), dim3(KVP_NT), smem, st, 0, a);
}

static cudaError_t kvp_run(const kvp_args &a, int n_seq, int max_q, cudaStream_t st) {
    const int tiles = (max_q + KVP_M / a.gs - 1) / (KVP_M / a.gs), rows = n_seq * a.Hkv;
    switch (a.D) {
    case 64: return kvp_launch<64>(a, tiles, rows, st);
    case 72:
    case 80: return kvp_launch<80>(a, tiles, rows, st);
    default: return kvp_launch<128>(a, tiles, rows, st);
    }
}

/* kvc_prefill's arguments checked into a (hist NULL); OMNI_OK with *none = 1 when there is nothing to do. */
static omni_status kvp_prefill_args(const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *cu_q,
                                    int max_q, const uint16_t *q, const uint16_t *k, const uint16_t *vv, uint16_t *out,
                                    int n_q_heads, float scale, kvp_args *a, int *none) {
    *none = 1;
    if (!v) return omni_fail(OMNI_ERR_USAGE, "kv cuda prefill: NULL view");
    const int D = v->head_dim, Hkv = v->n_kv_heads;
    if ((D != 64 && D != 128) || Hkv <= 0 || n_q_heads <= 0 || n_q_heads % Hkv || n_q_heads / Hkv > KVP_M)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda prefill: head_dim %d (64 or 128), heads %d / %d (group <= 64)", D,
                         n_q_heads, Hkv);
    if (v->k_esz != 2 || v->v_esz != 2 || (v->quant && ((v->kbits != 2 && v->kbits != 4) || (v->vbits != 2 && v->vbits != 4))))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda prefill: unsupported layer format (raw %d/%d bytes, bits %d/%d)",
                         v->k_esz, v->v_esz, v->kbits, v->vbits);
    if (n_seq < 0 || max_q < 0) return omni_fail(OMNI_ERR_USAGE, "kv cuda prefill: %d sequences, max_q %d", n_seq, max_q);
    if (n_seq == 0 || max_q == 0) return OMNI_OK;
    if (!cu_q || !q || !k || !vv || !out || !v->len || !v->raw_tab || !v->raw_pool)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda prefill: NULL pointer");
    memset(a, 0, sizeof *a);
    a->v = *v, a->has_hist = 1, a->slots = slots, a->cu = cu_q, a->q = q, a->k = k, a->vv = vv, a->out = out;
    a->q_row = (int64_t)n_q_heads * D, a->kv_row = (int64_t)Hkv * D, a->o_row = a->q_row;
    a->Hq = n_q_heads, a->Hkv = Hkv, a->gs = n_q_heads / Hkv, a->causal = 1, a->D = D, a->qscale = scale * KVP_LOG2E;
    *none = 0;
    return OMNI_OK;
}

extern "C" omni_status kvc_prefill(const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *cu_q,
                                   int max_q, const uint16_t *q, const uint16_t *k, const uint16_t *vv, uint16_t *out,
                                   int n_q_heads, float scale, void *stream) {
    kvp_args a;
    int none;
    omni_status st = kvp_prefill_args(v, n_seq, slots, cu_q, max_q, q, k, vv, out, n_q_heads, scale, &a, &none);
    if (st || none) return st;
    return kvc_cuda_check(kvp_run(a, n_seq, max_q, (cudaStream_t)stream), "prefill attention launch");
}

extern "C" size_t kvc_prefill_hist_bytes(int n_kv_heads, int head_dim, int64_t tokens) {
    return tokens > 0 && n_kv_heads > 0 && head_dim > 0 ? (size_t)tokens * 2 * n_kv_heads * head_dim * 2 : 0;
}

extern "C" omni_status kvc_prefill_hist(const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *cu_q,
                                        int max_q, const uint16_t *q, const uint16_t *k, const uint16_t *vv,
                                        uint16_t *out, int n_q_heads, float scale, uint16_t *hist, int64_t hist_tokens,
                                        void *stream) {
    kvp_args a;
    int none;
    omni_status st = kvp_prefill_args(v, n_seq, slots, cu_q, max_q, q, k, vv, out, n_q_heads, scale, &a, &none);
    if (st || none) return st;
    if (hist_tokens < 0 || (hist_tokens > 0 && (!hist || ((uintptr_t)hist & 15))))
        return omni_fail(OMNI_ERR_USAGE, "kv cuda prefill: scratch of %lld tokens at %p (16-byte aligned)",
                         (long long)hist_tokens, (void *)hist);
    if (hist && hist_tokens >= KVC_G && v->quant && max_q > KVP_M / a.gs) { /* some entry spans several tiles */
        a.hist = hist, a.hist_cap = hist_tokens;
        const int gx = (int)(hist_tokens < 8 * KVC_G ? 1 : hist_tokens < 64 * 8 * KVC_G ? hist_tokens / (8 * KVC_G) : 64);
        cudaError_t e = kvc_launch(kvp_dequant_kernel, dim3(gx, n_seq * a.Hkv), dim3(KVP_NT), 0, (cudaStream_t)stream, 0, a);
        if (e != cudaSuccess) return kvc_cuda_check(e, "prefill history dequantization launch");
    }
    return kvc_cuda_check(kvp_run(a, n_seq, max_q, (cudaStream_t)stream), "prefill attention launch");
}

extern "C" omni_status kvc_attn_segments(int n_heads, int head_dim, const int32_t *cu_seg, int n_seg, int max_seg,
                                         const uint16_t *q, const uint16_t *k, const uint16_t *v, int64_t qkv_row,
                                         uint16_t *out, float scale, void *stream) {
    if (n_heads <= 0 || (head_dim != 64 && head_dim != 72 && head_dim != 80 && head_dim != 128) || n_seg < 0 ||
        max_seg < 0 || qkv_row < (int64_t)n_heads * head_dim)
        return omni_fail(OMNI_ERR_USAGE, "kv cuda segments: %d heads of %d (64, 72, 80, 128), %d segments, row %lld",
                         n_heads, head_dim, n_seg, (long long)qkv_row);
    if (n_seg == 0 || max_seg == 0) return OMNI_OK;
    if (!cu_seg || !q || !k || !v || !out) return omni_fail(OMNI_ERR_USAGE, "kv cuda segments: NULL pointer");
    kvp_args a;
    memset(&a, 0, sizeof a);
    a.has_hist = 0, a.cu = cu_seg, a.q = q, a.k = k, a.vv = v, a.out = out;
    a.q_row = a.kv_row = qkv_row, a.o_row = (int64_t)n_heads * head_dim;
    a.Hq = a.Hkv = n_heads, a.gs = 1, a.causal = 0, a.D = head_dim, a.qscale = scale * KVP_LOG2E;
    return kvc_cuda_check(kvp_run(a, n_seg, max_seg, (cudaStream_t)stream), "segment attention launch");
}
