/* kv_attn_cpu.c - the CPU attention of the KV cache (kv_cpu.h): a chunk of new tokens attends to the stored
 * history plus itself, then its rows are appended to the window pages and the blocks that leave the window are
 * quantized into their quant pages. Pages are read and written only through the layer view (kv_layout.h).
 *
 * Notation: D = head_dim, Hkv = KV heads, Hq = query heads, G = 32 (block), R = window, S = n_sink; for batch
 * sequence i: slot s, committed length L = len[s], nq = nq(L), nq_new = nq(L + n_new[i]). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tensor.h"
#include "kv_cpu.h"
#include "kv_quant.h"

#define KV_HEADS_PER_PASS 8 /* query heads of one GQA group attended together (scratch is sized for this many) */
#define KV_QTILE 16         /* new tokens of one sequence attended together (share each dequantized block) */

struct kv_cpu {
    int D, Hkv;
    int n_threads;
    size_t thr_floats;
    float *thr;      /* [n_threads][thr_floats] */
    float *ck, *cv;  /* [max_chunk][Hkv][D] chunk keys/values (rotated when the layer rotates) */
    int *tile_seq, *tile_i0, *seq_start; /* [max_chunk], [max_chunk], [max_seqs] */
};

static size_t thr_floats_needed(int D); /* per-thread scratch, see kv_thr */

omni_status kv_cpu_init(const kv_params *p, kv_cpu **out) {
    *out = NULL;
    kv_cpu *w = calloc(1, sizeof *w);
    if (!w) return omni_fail(OMNI_ERR_NOMEM, "kv: cannot allocate scratch");
    const int T = p->max_chunk, D = p->head_dim;
    w->D = D;
    w->Hkv = p->n_kv_heads;
    w->n_threads = omp_get_max_threads();
    if (w->n_threads < 1) w->n_threads = 1;
    w->thr_floats = thr_floats_needed(D); /* see kv_thr */
    w->thr = malloc(w->thr_floats * w->n_threads * sizeof(float));
    w->ck = malloc((size_t)T * w->Hkv * D * sizeof(float));
    w->cv = malloc((size_t)T * w->Hkv * D * sizeof(float));
    w->tile_seq = malloc((size_t)T * sizeof(int));
    w->tile_i0 = malloc((size_t)T * sizeof(int));
    w->seq_start = malloc((size_t)p->max_seqs * sizeof(int));
    if (!w->thr || !w->ck || !w->cv || !w->tile_seq || !w->tile_i0 || !w->seq_start) {
        kv_cpu_free(w);
        return omni_fail(OMNI_ERR_NOMEM, "kv: cannot allocate scratch");
    }
    *out = w;
    return OMNI_OK;
}

void kv_cpu_free(kv_cpu *w) {
    if (!w) return;
    free(w->thr);
    free(w->ck);
    free(w->cv);
    free(w->tile_seq);
    free(w->tile_i0);
    free(w->seq_start);
    free(w);
}

/* ---------------------------------------------------------------- attention
 * Flash-style, one task = a tile of up to KV_QTILE new tokens of one sequence x one KV head x up to
 * KV_HEADS_PER_PASS query heads of its GQA group. Keys are visited in blocks of 32 absolute positions (rows from
 * the stored history or from the chunk), each history block turned into f32 rows once per task (pointer into an
 * f32 page, bf16 -> f32, or dequantized into a 32 x D buffer) and used by every query of the tile. Per query row:
 * scores scale * (q~ . k_j) with dot_f32, online softmax (running max m, sum l, acc rescaled when m grows),
 * output acc / l, un-rotated. Because blocks follow absolute positions and every key uses the same dot/axpy, a
 * row's result does not depend on the chunk split or on the tile: f32 multi-turn == one prefill, bit for bit. */

/* 8 partial sums in a fixed order (deterministic; vectorizes). */
static float dot_f32(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s[i & 7] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void axpy_f32(float *acc, float w, const float *x, int n) {
    for (int i = 0; i < n; i++) acc[i] += w * x[i];
}

static void scale_f32(float *acc, float w, int n) {
    for (int i = 0; i < n; i++) acc[i] *= w;
}

static void bf16_rows(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = omni_bf16_to_f32(src[i]);
}

/* Block b (K if is_v == 0, else V) of head g of a slot with nq committed quantized blocks as f32 rows [32][D]
 * (n valid rows): a pointer into an f32 page or buf filled by conversion / dequantization. */
static const float *block_rows(const kv_layer_view *v, int slot, int nq, int g, int b, int is_v, int n, float *buf) {
    const int D = v->head_dim, esz = is_v ? v->v_esz : v->k_esz;
    if (v->quant && b < nq) {
        const uint8_t *src = kv_view_quant_block(v, kv_view_quant_page(v, slot, b), g, is_v);
        if (is_v) kvq_dequant_values(src, D, v->vbits, buf);
        else kvq_dequant_keys(src, D, v->kbits, v->scale, buf);
        if (b == 0 && v->n_sink > 0) /* sinks: exact bf16 rows from the raw page kept for block 0 */
            bf16_rows(buf, (const uint16_t *)kv_view_raw_rows(v, kv_view_raw_page(v, slot, 0), g, is_v),
                      (int64_t)v->n_sink * D);
        return buf;
    }
    const uint8_t *src = b < nq /* a non-quantized layer inside a quantizing cache: raw layout in the quant page */
                             ? kv_view_quant_block(v, kv_view_quant_page(v, slot, b), g, is_v)
                             : kv_view_raw_rows(v, kv_view_raw_page(v, slot, b), g, is_v);
    if (esz == 4) return (const float *)src;
    bf16_rows(buf, (const uint16_t *)src, (int64_t)n * D);
    return buf;
}

/* Scratch of one thread: q~ and acc [KV_QTILE * KV_HEADS_PER_PASS][D], m and l [same], K and V blocks [32][D],
 * row pointers [2][32]. The flush (after attention) reuses the start of it for [3][32][D]. */
typedef struct {
    float *q, *acc, *m, *l, *kb, *vb;
    const float **kr, **vr;
} kv_thr;

static size_t thr_floats_needed(int D) {
    size_t rows = (size_t)KV_QTILE * KV_HEADS_PER_PASS, att = 2 * rows * D + 2 * rows + (size_t)2 * KV_GROUP * D;
    size_t ptrs = (2 * KV_GROUP * sizeof(float *) + sizeof(float) - 1) / sizeof(float), flush = (size_t)3 * KV_GROUP * D;
    size_t n = att + ptrs > flush ? att + ptrs : flush;
    return (n + 15) & ~(size_t)15;
}

static kv_thr thr_view(const kv_cpu *c, int tid) {
    kv_thr t;
    const size_t rows = (size_t)KV_QTILE * KV_HEADS_PER_PASS;
    t.q = c->thr + (size_t)tid * c->thr_floats;
    t.acc = t.q + rows * c->D;
    t.m = t.acc + rows * c->D;
    t.l = t.m + rows;
    t.kb = t.l + rows;
    t.vb = t.kb + (size_t)KV_GROUP * c->D;
    t.kr = (const float **)(void *)(t.vb + (size_t)KV_GROUP * c->D); /* float storage, pointer-aligned (16 floats) */
    t.vr = t.kr + KV_GROUP;
    return t;
}

/* Online-softmax update of one query row with keys/values kr/vr[0..n). */
static void row_update(const float *q, const float *const *kr, const float *const *vr, int n, float scale, int D,
                       float *m, float *l, float *acc) {
    float sc[KV_GROUP], mb = -INFINITY;
    for (int j = 0; j < n; j++) {
        sc[j] = scale * dot_f32(q, kr[j], D);
        mb = sc[j] > mb ? sc[j] : mb;
    }
    if (mb > *m) {
        float f = expf(*m - mb); /* 0 on the first block (m = -inf) */
        *l *= f;
        scale_f32(acc, f, D);
        *m = mb;
    }
    for (int j = 0; j < n; j++) {
        float e = expf(sc[j] - *m);
        *l += e;
        axpy_f32(acc, e, vr[j], D);
    }
}

/* Queries i0..i0+nt-1 (chunk indices) of batch sequence si (slot `slot`), query heads h0..h0+np-1 (all of KV
 * head g). */
static void attend_tile(const kv_cpu *c, const kv_layer_view *v, int slot, int si, int i0, int nt, int g, int h0,
                        int np, int Hq, const float *q, float scale, float *out, const kv_thr *w) {
    const int D = c->D, Hkv = c->Hkv, rot = v->rotate, t0 = c->seq_start[si] + i0;
    const int64_t L = v->len[slot], pend = L + i0 + nt; /* keys [0, pend) are visited */
    const int nq = kv_view_nq(v, L);
    const float *ck = c->ck + ((size_t)c->seq_start[si] * Hkv + g) * D, *cv = c->cv + ((size_t)c->seq_start[si] * Hkv + g) * D;
    for (int r = 0; r < nt * np; r++) {
        float *qr = w->q + (size_t)r * D;
        memcpy(qr, q + ((size_t)(t0 + r / np) * Hq + h0 + r % np) * D, (size_t)D * sizeof(float));
        if (rot) kvq_fwht(qr, D);
        memset(w->acc + (size_t)r * D, 0, (size_t)D * sizeof(float));
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    for (int64_t p0 = 0; p0 < pend; p0 += KV_GROUP) {
        int b = (int)(p0 / KV_GROUP), n = pend - p0 < KV_GROUP ? (int)(pend - p0) : KV_GROUP;
        int nh = L - p0 <= 0 ? 0 : L - p0 < n ? (int)(L - p0) : n; /* history rows of this block */
        const float *kh = nh ? block_rows(v, slot, nq, g, b, 0, nh, w->kb) : NULL;
        const float *vh = nh ? block_rows(v, slot, nq, g, b, 1, nh, w->vb) : NULL;
        for (int j = 0; j < n; j++) {
            int64_t p = p0 + j;
            w->kr[j] = p < L ? kh + (size_t)j * D : ck + (size_t)(p - L) * Hkv * D;
            w->vr[j] = p < L ? vh + (size_t)j * D : cv + (size_t)(p - L) * Hkv * D;
        }
        for (int r = 0; r < nt * np; r++) {
            int64_t pq = L + i0 + r / np; /* causal: keys 0..pq */
            int nv = pq - p0 + 1 < n ? (int)(pq - p0 + 1) : n;
            if (nv > 0)
                row_update(w->q + (size_t)r * D, w->kr, w->vr, nv, scale, D, &w->m[r], &w->l[r], w->acc + (size_t)r * D);
        }
    }
    for (int r = 0; r < nt * np; r++) {
        float *acc = w->acc + (size_t)r * D;
        scale_f32(acc, 1.0f / w->l[r], D);
        if (rot) kvq_fwht(acc, D);
        memcpy(out + ((size_t)(t0 + r / np) * Hq + h0 + r % np) * D, acc, (size_t)D * sizeof(float));
    }
}

/* ---------------------------------------------------------------- append + flush */

static void store_row(uint8_t *dst, const float *x, int esz, int n) {
    if (esz == 4) {
        memcpy(dst, x, (size_t)n * 4);
    } else {
        uint16_t *d = (uint16_t *)dst;
        for (int i = 0; i < n; i++) d[i] = omni_f32_to_bf16(x[i]);
    }
}

static void load_row(float *dst, const uint8_t *src, int esz, int n) {
    if (esz == 4) {
        memcpy(dst, src, (size_t)n * 4);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int i = 0; i < n; i++) dst[i] = omni_bf16_to_f32(s[i]);
    }
}

/* Write the n new tokens of batch sequence si (slot `slot`) that stay raw (window, sinks) for one head. */
static void append_raw(const kv_cpu *c, const kv_layer_view *v, int slot, int si, int n, int g) {
    const int D = c->D, Hkv = c->Hkv;
    const int64_t L = v->len[slot];
    const int nq_new = kv_view_nq(v, L + n);
    for (int i = 0; i < n; i++) {
        int64_t p = L + i;
        int b = (int)(p / KV_GROUP), j = (int)(p % KV_GROUP);
        if (!(b >= nq_new || (b == 0 && p < v->n_sink))) continue;
        int32_t pg = kv_view_raw_page(v, slot, b);
        size_t t = (size_t)(c->seq_start[si] + i);
        store_row(kv_view_raw_rows(v, pg, g, 0) + (size_t)j * D * v->k_esz, c->ck + (t * Hkv + g) * D, v->k_esz, D);
        store_row(kv_view_raw_rows(v, pg, g, 1) + (size_t)j * D * v->v_esz, c->cv + (t * Hkv + g) * D, v->v_esz, D);
    }
}

/* Gather the 32 rows of block b (K or V) as the window stores them: committed rows from the raw page, new rows
 * from the chunk rounded to the window's element type. */
static void gather_block(const kv_cpu *c, const kv_layer_view *v, int slot, int si, int g, int b, int is_v,
                         float *dst) {
    const int D = c->D, esz = is_v ? v->v_esz : v->k_esz;
    const int64_t L = v->len[slot];
    const float *chunk = is_v ? c->cv : c->ck;
    for (int j = 0; j < KV_GROUP; j++) {
        int64_t p = (int64_t)b * KV_GROUP + j;
        float *row = dst + (size_t)j * D;
        if (p < L) {
            load_row(row, kv_view_raw_rows(v, kv_view_raw_page(v, slot, b), g, is_v) + (size_t)j * D * esz, esz, D);
        } else {
            memcpy(row, chunk + ((size_t)(c->seq_start[si] + (p - L)) * c->Hkv + g) * D, (size_t)D * 4);
            if (esz == 2)
                for (int d = 0; d < D; d++) row[d] = kvq_bf16_round(row[d]);
        }
    }
}

/* Blocks [nq, nq_new) of one head move to their quant pages. */
static void flush_blocks(const kv_cpu *c, const kv_layer_view *v, int slot, int si, int n, int g, float *thr) {
    const int D = c->D;
    const int64_t L = v->len[slot];
    float *kb = thr, *vb = kb + (size_t)KV_GROUP * D, *tmp = vb + (size_t)KV_GROUP * D;
    for (int b = kv_view_nq(v, L); b < kv_view_nq(v, L + n); b++) {
        gather_block(c, v, slot, si, g, b, 0, kb);
        gather_block(c, v, slot, si, g, b, 1, vb);
        int32_t pg = kv_view_quant_page(v, slot, b);
        uint8_t *kd = kv_view_quant_block(v, pg, g, 0), *vd = kv_view_quant_block(v, pg, g, 1);
        if (v->quant) {
            kvq_quant_keys(kb, b == 0 ? v->n_sink : 0, D, v->kbits, v->scale, kd, tmp);
            kvq_quant_values(vb, D, v->vbits, vd);
        } else {
            for (int j = 0; j < KV_GROUP; j++) {
                store_row(kd + (size_t)j * D * v->k_esz, kb + (size_t)j * D, v->k_esz, D);
                store_row(vd + (size_t)j * D * v->v_esz, vb + (size_t)j * D, v->v_esz, D);
            }
        }
    }
}

/* ck/cv = chunk k/v, rotated when the layer rotates. */
static void load_chunk(kv_cpu *c, int rot, const float *k, const float *v, int T) {
    const int D = c->D;
    const int64_t rows = (int64_t)T * c->Hkv;
    memcpy(c->ck, k, (size_t)rows * D * sizeof(float));
    memcpy(c->cv, v, (size_t)rows * D * sizeof(float));
    if (!rot) return;
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (rows * D >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        kvq_fwht(c->ck + r * D, D);
        kvq_fwht(c->cv + r * D, D);
    }
}

void kv_cpu_forward(kv_cpu *c, const kv_layer_view *v, int n_seq, const int *slots, const int *n_new, const float *q,
                    const float *k, const float *vv, float *out, int n_q_heads, float scale) {
    int T = 0, ntile = 0;
    for (int i = 0; i < n_seq; i++) {
        c->seq_start[i] = T;
        for (int j = 0; j < n_new[i]; j += KV_QTILE, ntile++) {
            c->tile_seq[ntile] = i;
            c->tile_i0[ntile] = j;
        }
        T += n_new[i];
    }
    if (T == 0) return;
    load_chunk(c, v->rotate, k, vv, T);
    const int gs = n_q_heads / c->Hkv, npass = (gs + KV_HEADS_PER_PASS - 1) / KV_HEADS_PER_PASS;
    const int ntask = ntile * c->Hkv * npass;
    /* Threads only when there is enough work to pay for waking them (a short decode step stays serial). */
    int64_t work = 0;
    for (int i = 0; i < n_seq; i++) work += (v->len[slots[i]] + n_new[i]) * (int64_t)n_new[i];
    work *= (int64_t)n_q_heads * c->D;
#pragma omp parallel for num_threads(c->n_threads) schedule(dynamic, 1) if (ntask > 1 && work >= (1 << 18))
    for (int task = 0; task < ntask; task++) {
        int tile = task / (c->Hkv * npass), g = (task / npass) % c->Hkv, pass = task % npass;
        int si = c->tile_seq[tile], i0 = c->tile_i0[tile], nt = n_new[si] - i0 < KV_QTILE ? n_new[si] - i0 : KV_QTILE;
        int h0 = g * gs + pass * KV_HEADS_PER_PASS, np = gs - pass * KV_HEADS_PER_PASS;
        kv_thr w = thr_view(c, omp_get_thread_num());
        attend_tile(c, v, slots[si], si, i0, nt, g, h0, np < KV_HEADS_PER_PASS ? np : KV_HEADS_PER_PASS, n_q_heads, q,
                    scale, out, &w);
    }
    const int njob = n_seq * c->Hkv;
#pragma omp parallel for num_threads(c->n_threads) schedule(dynamic, 1) if ((int64_t)T * c->Hkv * c->D >= 65536)
    for (int job = 0; job < njob; job++) {
        int si = job / c->Hkv, g = job % c->Hkv;
        float *thr = thr_view(c, omp_get_thread_num()).q;
        append_raw(c, v, slots[si], si, n_new[si], g);
        flush_blocks(c, v, slots[si], si, n_new[si], g, thr);
    }
}
