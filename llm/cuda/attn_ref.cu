/* attn_ref.cu - the SIMT attention of attn_ref.h: causal GQA attention over the device cache's pages (raw bf16 or
 * packed OScaR / KIVI blocks, window and sinks) plus the step's own rows, and segment (tower) attention, both split
 * over the keys with a log-sum-exp merge.
 *
 * One block of 128 threads per (row, kv head, split) serves the G = Hq / Hkv query heads of the kv head: tiles of
 * 32 keys are staged in shared memory as f32 (K rows padded to D + 1: conflict-free dot products; packed keys and
 * values dequantized on the way, the step's own rows rotated there when the layer rotates), one warp per head keeps
 * the running max and sum, each thread owns output dims t, t + 128. Partials (m, l, o[D]) go to the workspace; a
 * second kernel merges the splits of each (row, head), un-rotates (rotating layers) and rounds to bf16. */
#include "llm/cuda/attn_ref.h"

#include <math.h>

#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kvcache/cuda/kvc_common.cuh"
#include "kvcache/cuda/kvc_ptx.cuh"

#define AT 128   /* threads */
#define TK 32    /* keys per tile */
#define MAXG 8   /* query heads per kv head */
#define MAXD 256 /* head dim */

__device__ __forceinline__ float ldb(const uint16_t *p) { return __bfloat162float(*(const bf16 *)p); }

/* Keys of row r: positions [kb, ke). Segments (view NULL): key j of the head is the row k + j·ks (v + j·vs).
 * Decoder (view set): key j < len0 (the slot's committed history) is read from the pages as kv_forward reads the
 * history: blocks b < nq(len0) packed (dequantized here; sink tokens of block 0 from its raw page), the others from
 * raw pages; key j >= len0 is one of the step's own rows, k + (j - len0)·ks (head offset applied), in full bf16. */
struct key_src {
    const uint16_t *k, *v;
    int64_t ks, vs;
    int kb, ke;
    const kv_layer_view *view; /* NULL: plain rows */
    int slot, g, len0, nq;
    __device__ bool chunk(int j) const { return !view || j >= len0; }
    /* element c of key (is_v 0) or value (1) j, f32 */
    __device__ float elem(int j, int c, int is_v) const {
        if (chunk(j)) {
            const int64_t i = j - (view ? len0 : 0);
            return ldb((is_v ? v + i * vs : k + i * ks) + c);
        }
        const int D = view->head_dim, b = j / KV_BLOCK, t = j % KV_BLOCK;
        if (b < nq && !(view->quant && b == 0 && t < view->n_sink)) {
            const uint8_t *blk = kv_view_quant_block(view, kv_view_quant_page(view, slot, b), g, is_v);
            if (!view->quant) return ldb((const uint16_t *)blk + t * D + c); /* raw layout in the quant page */
            if (!is_v) {
                const int kb = view->kbits, per = 8 / kb;
                const int code = (blk[c * (KV_BLOCK * kb / 8) + t / per] >> ((t % per) * kb)) & ((1 << kb) - 1);
                const uint16_t *sc = (const uint16_t *)(blk + kv_key_scale_off(D, kb)), *mn = sc + D, *nr = mn + D;
                const float u = (float)code * kv_h2f(sc[c]) + kv_h2f(mn[c]);
                return view->scale ? kv_h2f(nr[t]) * u : u;
            }
            const int vb = view->vbits, per = 8 / vb, ng = D / KV_BLOCK;
            const int code = (blk[t * (D * vb / 8) + c / per] >> ((c % per) * vb)) & ((1 << vb) - 1);
            const uint16_t *sc = (const uint16_t *)(blk + kv_value_scale_off(D, vb)), *mn = sc + KV_BLOCK * ng;
            return (float)code * kv_h2f(sc[t * ng + c / KV_BLOCK]) + kv_h2f(mn[t * ng + c / KV_BLOCK]);
        }
        const uint8_t *rows = kv_view_raw_rows(view, kv_view_raw_page(view, slot, b), g, is_v);
        return ldb((const uint16_t *)rows + t * D + c);
    }
};

__device__ void attend_block(const uint16_t *q, int G, int D, float scale, key_src src, int split, int split_len,
                             float *part /* [G][D + 2] for this (row, kv head, split) */, int64_t part_stride) {
    KVC_DYN_SMEM(float, sm);
    float *qs = sm;                       /* [G][D] */
    float *kt = qs + MAXG * MAXD;         /* [TK][D + 1] */
    float *vt = kt + TK * (MAXD + 1);     /* [TK][D] */
    float *pt = vt + TK * MAXD;           /* [G][TK] */
    float *mh = pt + MAXG * TK;           /* [G] running max, then correction */
    float *cr = mh + MAXG;                /* [G] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = src.kb + split * split_len, j1 = min(src.ke, j0 + split_len);
    for (int i = tid; i < G * D; i += AT) qs[i] = ldb(q + (i / D) * D + i % D) * scale;
    if (src.view && src.view->rotate) kvc_fwht_rows(qs, G, D, D, tid, AT); /* q~ = H q */
    if (tid < G) mh[tid] = -INFINITY;
    float acc[MAXG][2], l[MAXG]; /* dims tid, tid + 128; the running sum is kept by each head's warp lanes */
#pragma unroll
    for (int g = 0; g < MAXG; g++) acc[g][0] = acc[g][1] = 0.f, l[g] = 0.f;
    __syncthreads();
    for (int t0 = j0; t0 < j1; t0 += TK) {
        const int nk = min(TK, j1 - t0);
        for (int i = tid; i < TK * D; i += AT) {
            int j = i / D, d = i % D;
            bool ok = j < nk;
            kt[j * (D + 1) + d] = ok ? src.elem(t0 + j, d, 0) : 0.f;
            vt[j * D + d] = ok ? src.elem(t0 + j, d, 1) : 0.f;
        }
        const int jc = src.view && src.view->rotate ? max(0, src.len0 - t0) : nk; /* first own row to rotate */
        if (jc < nk) { /* the step's rows into the rotated space of the pages (uniform branch: barriers inside) */
            kvc_fwht_rows(kt + jc * (D + 1), nk - jc, D + 1, D, tid, AT);
            kvc_fwht_rows(vt + jc * D, nk - jc, D, D, tid, AT);
        }
        __syncthreads();
        for (int i = tid; i < G * TK; i += AT) { /* scores */
            int g = i / TK, j = i % TK;
            float s = 0.f;
            for (int d = 0; d < D; d++) s += qs[g * D + d] * kt[j * (D + 1) + d];
            pt[g * TK + j] = j < nk ? s : -INFINITY;
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < MAXG; g++) { /* online softmax per head: warp g % 4, lane = key */
            if (g >= G || g % (AT / 32) != warp) continue;
            float s = pt[g * TK + lane], mx = s;
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float mnew = fmaxf(mh[g], mx), p = lane < nk ? expf(s - mnew) : 0.f;
            float c = mh[g] == -INFINITY ? 0.f : expf(mh[g] - mnew);
            pt[g * TK + lane] = p;
            float ps = p;
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
            l[g] = l[g] * c + ps;
            __syncwarp();
            if (lane == 0) mh[g] = mnew, cr[g] = c;
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < MAXG; g++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int d = tid + h * AT;
                if (g >= G || d >= D) continue;
                float a = acc[g][h] * cr[g];
                for (int j = 0; j < nk; j++) a += pt[g * TK + j] * vt[j * D + d];
                acc[g][h] = a;
            }
        __syncthreads();
    }
#pragma unroll
    for (int g = 0; g < MAXG; g++) {
        if (g >= G) break;
        float *pg = part + g * part_stride;
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (tid + h * AT < D) pg[2 + tid + h * AT] = acc[g][h];
        if (warp == g % (AT / 32) && lane == 0) pg[0] = mh[g], pg[1] = j0 < j1 ? l[g] : 0.f;
    }
}

static size_t attend_smem(void) { return sizeof(float) * (MAXG * MAXD + TK * (MAXD + 1) + TK * MAXD + MAXG * TK + 2 * MAXG); }

/* Partial layout: part[((r·Hq + h)·splits + s)·(D + 2) + {0: m, 1: l, 2..: o}]. */
__global__ void __launch_bounds__(AT)
causal_kernel(kv_layer_view view, const uint16_t *q, int64_t ldq, const uint16_t *k, const uint16_t *v, int64_t ldk,
              const int32_t *row_slot, const int32_t *row_pos, int Hq, float scale, int splits, int split_len,
              float *ws) {
    const int r = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, D = view.head_dim, G = Hq / view.n_kv_heads;
    key_src src;
    src.view = &view, src.slot = row_slot[r], src.g = kvh;
    src.len0 = view.len[src.slot], src.nq = kv_view_nq(&view, src.len0);
    const int64_t own0 = (int64_t)r - (row_pos[r] - src.len0); /* step row of position len0 (the entry's first) */
    src.k = k + own0 * ldk + (int64_t)kvh * D, src.v = v + own0 * ldk + (int64_t)kvh * D;
    src.ks = src.vs = ldk;
    src.kb = 0, src.ke = row_pos[r] + 1;
    float *part = ws + (((int64_t)r * Hq + (int64_t)kvh * G) * splits + s) * (D + 2);
    attend_block(q + (int64_t)r * ldq + (int64_t)kvh * G * D, G, D, scale, src, s, split_len, part,
                 (int64_t)splits * (D + 2));
}

__global__ void __launch_bounds__(AT)
segment_kernel(const uint16_t *q, int64_t ldq, const uint16_t *k, int64_t ldk, const uint16_t *v, int64_t ldv,
               const int32_t *seg, const int32_t *seg_of, int H, int D, float scale, int splits, int split_len,
               float *ws) {
    const int r = blockIdx.x, h = blockIdx.y, s = blockIdx.z, sg = seg_of[r];
    key_src src;
    src.k = k + (int64_t)h * D, src.v = v + (int64_t)h * D;
    src.ks = ldk, src.vs = ldv;
    src.kb = seg[sg], src.ke = seg[sg + 1];
    src.view = NULL, src.slot = src.g = src.len0 = src.nq = 0;
    float *part = ws + (((int64_t)r * H + h) * splits + s) * (D + 2);
    attend_block(q + (int64_t)r * ldq + (int64_t)h * D, 1, D, scale, src, s, split_len, part, 0);
}

/* Merge the splits of (row, head); n_keys(r) tells how many splits hold keys; un-rotate (o = H o~) when rotate. */
__global__ void combine_kernel(const float *ws, uint16_t *out, int64_t ldo, int Hq, int D, int splits, int split_len,
                               const int32_t *row_pos, const int32_t *seg, const int32_t *seg_of, int rotate) {
    __shared__ float o_sm[MAXD];
    const int r = blockIdx.x, h = blockIdx.y;
    const int nk = row_pos ? row_pos[r] + 1 : seg[seg_of[r] + 1] - seg[seg_of[r]];
    const int ns = min(splits, (nk + split_len - 1) / split_len);
    const float *p = ws + ((int64_t)r * Hq + h) * splits * (D + 2);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++)
        if (p[s * (D + 2) + 1] > 0.f) M = fmaxf(M, p[s * (D + 2)]);
    float L = 0.f;
    for (int s = 0; s < ns; s++)
        if (p[s * (D + 2) + 1] > 0.f) L += p[s * (D + 2) + 1] * expf(p[s * (D + 2)] - M);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < ns; s++)
            if (p[s * (D + 2) + 1] > 0.f) o += p[s * (D + 2) + 2 + d] * expf(p[s * (D + 2)] - M);
        o_sm[d] = L > 0.f ? o / L : 0.f;
    }
    if (rotate) kvc_fwht_rows(o_sm, 1, D, D, threadIdx.x, blockDim.x);
    else __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        ((bf16 *)out)[(int64_t)r * ldo + (int64_t)h * D + d] = __float2bfloat16_rn(o_sm[d]);
}

int64_t lca_workspace_floats(int T, int Hq, int D, int splits) { return (int64_t)T * Hq * splits * (D + 2); }

omni_status lca_init(void) {
    OMNI_CUDA_TRY(cudaFuncSetAttribute((const void *)causal_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)attend_smem()));
    OMNI_CUDA_TRY(cudaFuncSetAttribute((const void *)segment_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)attend_smem()));
    return OMNI_OK;
}

omni_status lca_attend_view(const kv_layer_view *v, const uint16_t *q, int64_t ldq, const uint16_t *k,
                            const uint16_t *vv, int64_t ldk, uint16_t *out, int64_t ldo, const int32_t *row_slot,
                            const int32_t *row_pos, int T, int Hq, float scale, int splits, int split_len, float *ws,
                            cudaStream_t s) {
    const int Hkv = v->n_kv_heads, D = v->head_dim;
    if (Hkv <= 0 || Hq % Hkv || Hq / Hkv > MAXG || D > MAXD || D % 32 || splits < 1 || split_len < 1 ||
        v->k_esz != 2 || v->v_esz != 2 || (v->rotate && (D & (D - 1))))
        return omni_fail(OMNI_ERR_UNSUPPORTED, "lca_attend_view: Hq %d Hkv %d D %d (bf16 raw elements)", Hq, Hkv, D);
    if (T <= 0) return OMNI_OK;
    omni_launch(causal_kernel, dim3(T, Hkv, splits), AT, attend_smem(), s, *v, q, ldq, k, vv, ldk, row_slot, row_pos,
                Hq, scale, splits, split_len, ws);
    OMNI_CUDA_LAUNCHED();
    omni_launch(combine_kernel, dim3(T, Hq), D < 128 ? 64 : 128, 0, s, ws, out, ldo, Hq, D, splits, split_len,
                row_pos, (const int32_t *)NULL, (const int32_t *)NULL, v->rotate);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}

omni_status lca_attend_segments(const uint16_t *q, int64_t ldq, const uint16_t *k, int64_t ldk, const uint16_t *v,
                                int64_t ldv, uint16_t *out, int64_t ldo, const int32_t *seg, const int32_t *seg_of,
                                int T, int H, int D, int max_seg, float scale, float *ws, int64_t ws_floats,
                                cudaStream_t s) {
    if (D > MAXD || H <= 0 || max_seg < 1) return omni_fail(OMNI_ERR_UNSUPPORTED, "lca_attend_segments: H %d D %d", H, D);
    if (T <= 0) return OMNI_OK;
    /* splits: enough blocks for ~4 waves, within the workspace and the longest segment */
    int64_t per = (int64_t)T * H * (D + 2);
    int splits = (int)((2048 + (int64_t)T * H - 1) / ((int64_t)T * H));
    int64_t cap = ws_floats / per, most = (max_seg + TK - 1) / TK;
    if (splits > cap) splits = (int)cap;
    if (splits > most) splits = (int)most;
    if (splits < 1) return omni_fail(OMNI_ERR_NOMEM, "lca_attend_segments: workspace of %lld floats < %lld needed",
                                     (long long)ws_floats, (long long)per);
    int split_len = (max_seg + splits - 1) / splits;
    omni_launch(segment_kernel, dim3(T, H, splits), AT, attend_smem(), s, q, ldq, k, ldk, v, ldv, seg, seg_of, H, D,
                scale, splits, split_len, ws);
    OMNI_CUDA_LAUNCHED();
    omni_launch(combine_kernel, dim3(T, H), D < 128 ? 64 : 128, 0, s, ws, out, ldo, H, D, splits, split_len,
                (const int32_t *)NULL, seg, seg_of, 0);
    OMNI_CUDA_LAUNCHED();
    return OMNI_OK;
}
