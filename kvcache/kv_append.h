/* kv_append.h - internal to kvcache: the device cache's step record (staged by kv_dev_step in pinned memory,
 * copied to the device by kv_dev_upload, read by the kernels) and the CTA programs of the device kernels, written
 * once as plain C that compiles for the device (kvcache/cuda/kv_dev.cu) and for the host (a CPU emulation in
 * tests/kvcache/test_kv_dev_emul.c checks them byte for byte against the CPU cache without a GPU).
 *
 * A CTA program is a short list of phases; between two phases all threads of the CTA synchronize (the kernel
 * runs `for ph: kvd_*_phase(ph, threadIdx.x, blockDim.x); __syncthreads()`; the emulation runs every thread of a
 * phase before the next phase). Within a phase no two threads touch the same word, so running the threads of a
 * phase in any order gives the same bytes. Arithmetic whose rounding matters uses kv_fp16.h (exact IEEE ops).
 *
 * Step record: a header, then int32 arrays at the header's offsets (fixed for a cache: capacities from
 * kv_params), in this order:
 *   slot[cap_seq], len0[cap_seq], n_new[cap_seq], row0[cap_seq + 1]   the batch: sequence i's slot (id), committed
 *                                                                       length before the step, new tokens, first
 *                                                                       row of its tokens in k/v (row0[n_seq] = T)
 *   fseq[cap_flush], fblk[cap_flush]                                   blocks leaving the window in this step
 *                                                                       (batch index, block)
 *   reset[cap_reset], entry[cap_entry], value[cap_entry],              table changes since the previous step
 *   len_slot[cap_len], len_val[cap_len]                                 (kv_pages_log): applied first
 *
 * Append of one layer (the step's new tokens k, v: [T][Hkv][D] bf16, rows in batch order), CTAs:
 *   [0, t_cap * Hkv): raw item (token row t = cta / Hkv, head g = cta % Hkv): if the token stays raw (block
 *       b >= nq(len0 + n_new) or a sink: b == 0 and position < S) its K and V rows are rotated (FWHT, when the layer
 *       rotates), rounded to the raw element type and written to row p % 32 of raw page raw_tab[slot][b];
 *   [t_cap * Hkv, (t_cap + f_cap) * Hkv): flush item (flush f, head g): block b's 32 rows (the committed ones from
 *       its raw page, the new ones from k/v rotated and rounded as the window stores them) are quantized into
 *       quant page quant_tab[slot][b] (or copied in raw layout for a layer that does not quantize).
 *   CTAs beyond the step's n_tok / n_flush do nothing, so a launch sized for t_cap tokens serves every step of at
 *   most t_cap tokens (CUDA graphs).
 * Early flush (kv_dev: on unless OMNI_KV_EARLY_FLUSH=0): the flush items whose 32 rows were all committed before
 * the step run for every layer at once, right after the table update (a decode step's block leaving the window is
 * such an item: its quantization then costs one CTA's time per step instead of one per layer on the chain of
 * layers); the append of each layer skips them (args.flush, below). The attention of the step reads a flushing
 * block from its window page either way (or, kvc_decode, from the quant page: written before any layer now). */
#ifndef OMNI_KV_APPEND_H
#define OMNI_KV_APPEND_H

#include <stdint.h>

#include "kv_fp16.h"
#include "kv_layout.h"

#define KVD_THREADS 128 /* threads per CTA of the append kernel (the programs take any count) */

typedef struct {
    int32_t n_seq, n_tok, n_flush;               /* this step */
    int32_t n_reset, n_entry, n_len;             /* table changes to apply before it */
    int32_t cap_seq, cap_flush, cap_reset, cap_entry, cap_len;
    int32_t o_slot, o_len0, o_new, o_row0, o_fseq, o_fblk, o_reset, o_entry, o_value, o_lslot, o_lval;
    int32_t n_words;                             /* size of the whole record in int32 words */
    int32_t pad_;
} kvd_step;

KV_HD const int32_t *kvd_arr(const kvd_step *s, int32_t off) { return (const int32_t *)s + off; }

/* Fixed layout of a record with the given capacities; returns its size in bytes (a multiple of 16). */
KV_HD int64_t kvd_step_layout(kvd_step *s, int cap_seq, int cap_flush, int cap_reset, int cap_entry, int cap_len) {
    int32_t o = (int32_t)(sizeof(kvd_step) / 4);
    s->cap_seq = cap_seq, s->cap_flush = cap_flush, s->cap_reset = cap_reset;
    s->cap_entry = cap_entry, s->cap_len = cap_len;
    s->o_slot = o, o += cap_seq;
    s->o_len0 = o, o += cap_seq;
    s->o_new = o, o += cap_seq;
    s->o_row0 = o, o += cap_seq + 1;
    s->o_fseq = o, o += cap_flush;
    s->o_fblk = o, o += cap_flush;
    s->o_reset = o, o += cap_reset;
    s->o_entry = o, o += cap_entry;
    s->o_value = o, o += cap_entry;
    s->o_lslot = o, o += cap_len;
    s->o_lval = o, o += cap_len;
    o = (o + 3) & ~3;
    s->n_words = o;
    return (int64_t)o * 4;
}

/* ---- table update: one CTA, 2 phases (resets, then entries and lengths) */
#define KVD_APPLY_PHASES 2
KV_HD void kvd_apply_phase(const kvd_step *s, int32_t *tab, int32_t *len, int tab_stride, int max_seqs, int ph,
                           int tid, int nthr) {
    if (ph == 0) {
        const int64_t per = 2 * (int64_t)tab_stride, n = s->n_reset * per;
        const int32_t *reset = kvd_arr(s, s->o_reset);
        for (int64_t i = tid; i < n; i += nthr) {
            int slot = reset[i / per];
            int64_t e = i % per, kind = e / tab_stride, b = e % tab_stride;
            tab[(kind * max_seqs + slot) * tab_stride + b] = -1;
            if (e == 0) len[slot] = 0;
        }
        return;
    }
    const int32_t *entry = kvd_arr(s, s->o_entry), *value = kvd_arr(s, s->o_value);
    const int32_t *lslot = kvd_arr(s, s->o_lslot), *lval = kvd_arr(s, s->o_lval);
    for (int i = tid; i < s->n_entry; i += nthr) tab[entry[i]] = value[i];
    for (int i = tid; i < s->n_len; i += nthr) len[lslot[i]] = lval[i];
}

/* ---- append of one layer */
/* Which flush items a launch runs. A block whose 32 rows were all committed before the step (every decode flush
 * of a cache with a window of 32 or more) needs nothing of the step: kvd_flush_old_kernel runs those of every
 * layer in one launch at the upload (KVD_FLUSH_OLD), and the per-layer append then runs only the flush items that
 * hold rows of the step (KVD_FLUSH_NEW); KVD_FLUSH_ALL: the append runs every flush item (no early launch). */
#define KVD_FLUSH_ALL 0
#define KVD_FLUSH_NEW 1
#define KVD_FLUSH_OLD 2

typedef struct {
    kv_layer_view v;           /* pools, tables (device pointers on the device) */
    const kvd_step *step;      /* the step record (device copy) */
    const uint16_t *k, *vv;    /* [T][Hkv][D] bf16 */
    int t_cap, f_cap;          /* CTAs: t_cap * Hkv raw items, then f_cap * Hkv flush items */
    float rs;                  /* FWHT normalization (float)(1 / sqrt((double)D)) */
    int log2d;                 /* log2(D) when the layer rotates, else 0 */
    int flush;                 /* KVD_FLUSH_ALL / _NEW / _OLD: the flush items this launch runs */
} kvd_append_args;

/* Committed rows of block b of a sequence of committed length L0 (0..32). */
KV_HD int kvd_old_rows(int64_t L0, int b) {
    int64_t old = L0 - (int64_t)b * KV_BLOCK;
    return old <= 0 ? 0 : old >= KV_BLOCK ? KV_BLOCK : (int)old;
}

/* Flush items of step record s whose rows were all committed before the step (KVD_FLUSH_OLD's work). */
KV_HD int kvd_old_flushes(const kvd_step *s) {
    const int32_t *fseq = kvd_arr(s, s->o_fseq), *fblk = kvd_arr(s, s->o_fblk), *len0 = kvd_arr(s, s->o_len0);
    int n = 0;
    for (int f = 0; f < s->n_flush; f++) n += kvd_old_rows(len0[fseq[f]], fblk[f]) == KV_BLOCK;
    return n;
}

typedef struct {               /* uniform state of one CTA */
    int kind;                  /* 0 nothing, 1 raw item, 2 flush item */
    int g, i, slot, b, j, t, n_old, t0, nph, kph;
    int64_t L0, n, row0;
    int32_t rpage, qpage;
} kvd_cta;

/* Shared memory of the program in floats: 32 rows of D + 1 (flush) and 32 norms. */
KV_HD int kvd_smem_floats(int D) { return KV_BLOCK * (D + 1) + KV_BLOCK; }

/* Phases of the K pass of a flush item (the V pass follows): load, butterflies, finish, [norm, divide], quantize
 * or store. */
KV_HD int kvd_flush_kphases(const kvd_append_args *a) {
    return 1 + a->log2d + 1 + (a->v.quant && a->v.scale ? 2 : 0) + 1;
}

KV_HD void kvd_cta_setup(const kvd_append_args *a, int cta, kvd_cta *c) {
    const kvd_step *s = a->step;
    const kv_layer_view *v = &a->v;
    const int Hkv = v->n_kv_heads;
    c->kind = 0, c->nph = 0;
    c->g = cta % Hkv;
    if (cta < a->t_cap * Hkv) {
        c->t = cta / Hkv;
        if (c->t >= s->n_tok) return;
        const int32_t *row0 = kvd_arr(s, s->o_row0);
        int lo = 0, hi = s->n_seq - 1; /* the last batch sequence whose first row is <= t */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (row0[mid] <= c->t) lo = mid;
            else hi = mid - 1;
        }
        c->i = lo;
        c->slot = kvd_arr(s, s->o_slot)[lo];
        c->L0 = kvd_arr(s, s->o_len0)[lo];
        c->n = kvd_arr(s, s->o_new)[lo];
        int64_t p = c->L0 + (c->t - row0[lo]);
        c->b = (int)(p / KV_BLOCK), c->j = (int)(p % KV_BLOCK);
        if (!(c->b >= kv_view_nq(v, c->L0 + c->n) || (c->b == 0 && p < v->n_sink))) return;
        c->rpage = kv_view_raw_page(v, c->slot, c->b);
        c->kind = 1;
        c->nph = a->log2d + 2;
        return;
    }
    int f = cta / Hkv - a->t_cap;
    if (f >= s->n_flush) return;
    c->i = kvd_arr(s, s->o_fseq)[f];
    c->b = kvd_arr(s, s->o_fblk)[f];
    c->slot = kvd_arr(s, s->o_slot)[c->i];
    c->L0 = kvd_arr(s, s->o_len0)[c->i];
    c->n = kvd_arr(s, s->o_new)[c->i];
    c->row0 = kvd_arr(s, s->o_row0)[c->i];
    c->n_old = kvd_old_rows(c->L0, c->b);
    if (a->flush == (c->n_old == KV_BLOCK ? KVD_FLUSH_NEW : KVD_FLUSH_OLD)) return; /* the other launch's item */
    c->rpage = c->n_old ? kv_view_raw_page(v, c->slot, c->b) : -1;
    c->qpage = kv_view_quant_page(v, c->slot, c->b);
    c->t0 = c->b == 0 ? v->n_sink : 0;
    c->kind = 2;
    c->kph = kvd_flush_kphases(a);
    c->nph = c->kph + 1 + a->log2d + 1 + 1;
}

/* One butterfly stage (h = 2^stage) over rows r0..nrows-1 of x (row r at x + r * ld). */
KV_HD void kvd_butterfly(float *x, int r0, int nrows, int ld, int D, int h, int tid, int nthr) {
    const int half = D / 2, total = (nrows - r0) * half;
    for (int t = tid; t < total; t += nthr) {
        int r = r0 + t / half, k = t % half, i = (k / h) * 2 * h + (k % h);
        float *row = x + (int64_t)r * ld, p = row[i], q = row[i + h];
        row[i] = KV_FADD(p, q);
        row[i + h] = KV_FSUB(p, q);
    }
}

KV_HD void kvd_store_elem(uint8_t *row, int c, float x, int esz) {
    if (esz == 4) ((float *)row)[c] = x;
    else ((uint16_t *)row)[c] = kv_f2bf(x);
}
KV_HD float kvd_load_elem(const uint8_t *row, int c, int esz) {
    return esz == 4 ? ((const float *)row)[c] : kv_bf2f(((const uint16_t *)row)[c]);
}

/* Raw item: x[0][D] = K row, x[1][D] = V row. */
KV_HD void kvd_raw_phase(const kvd_append_args *a, const kvd_cta *c, int ph, int tid, int nthr, float *x) {
    const kv_layer_view *v = &a->v;
    const int D = v->head_dim, Hkv = v->n_kv_heads;
    if (ph == 0) {
        const int64_t base = ((int64_t)c->t * Hkv + c->g) * D;
        for (int e = tid; e < 2 * D; e += nthr) x[e] = kv_bf2f((e < D ? a->k : a->vv)[base + e % D]);
    } else if (ph <= a->log2d) {
        kvd_butterfly(x, 0, 2, D, D, 1 << (ph - 1), tid, nthr);
    } else {
        for (int e = tid; e < 2 * D; e += nthr) {
            const int isv = e >= D, esz = isv ? v->v_esz : v->k_esz;
            float val = a->log2d ? KV_FMUL(x[e], a->rs) : x[e];
            kvd_store_elem(kv_view_raw_rows(v, c->rpage, c->g, isv) + (int64_t)c->j * D * esz, e % D, val, esz);
        }
    }
}

/* The 32 values x[0], x[step], ... of one group quantized (entries < t0 excluded: code 0) and packed LSB first
 * into 32 * bits / 8 bytes at dst (4-byte aligned); writes the fp16 step and minimum (kvq_quant_keys/values). */
KV_HD void kvd_quant_group(const float *x, int step, int t0, int bits, uint32_t *dst, uint16_t *sc_h, uint16_t *mn_h) {
    float mn = 0.0f, mx = 0.0f;
    for (int j = t0; j < KV_BLOCK; j++) {
        float val = x[j * step];
        if (j == t0 || val < mn) mn = val;
        if (j == t0 || val > mx) mx = val;
    }
    *mn_h = kv_f2h_down(mn);
    float sc = KV_FDIV(KV_FSUB(mx, kv_h2f(*mn_h)), (float)((1 << bits) - 1));
    *sc_h = sc > 0.0f ? kv_f2h_up(sc) : (uint16_t)0x3c00u; /* step 0 -> 1 */
    const float scf = kv_h2f(*sc_h), m = kv_h2f(*mn_h), qmax = (float)((1 << bits) - 1);
    const int per_word = 32 / bits;
    for (int w = 0; w < bits; w++) {
        uint32_t word = 0;
        for (int k = 0; k < per_word; k++) {
            int j = w * per_word + k;
            if (j < t0) continue;
            float r = rintf(KV_FDIV(KV_FSUB(x[j * step], m), scf));
            uint32_t q = r < 0.0f ? 0u : r > qmax ? (uint32_t)qmax : (uint32_t)r;
            word |= q << (k * bits);
        }
        dst[w] = word;
    }
}

/* Flush item, pass isv (0 K, 1 V), phase ph of that pass: x [32][D + 1], nrm [32]. */
KV_HD void kvd_flush_pass(const kvd_append_args *a, const kvd_cta *c, int isv, int ph, int tid, int nthr, float *x,
                          float *nrm) {
    const kv_layer_view *v = &a->v;
    const int D = v->head_dim, Hkv = v->n_kv_heads, ld = D + 1, esz = isv ? v->v_esz : v->k_esz;
    if (ph == 0) { /* load: committed rows from the raw page, new rows from the chunk */
        const uint8_t *raw = c->n_old ? kv_view_raw_rows(v, c->rpage, c->g, isv) : 0;
        const uint16_t *chunk = isv ? a->vv : a->k;
        for (int e = tid; e < KV_BLOCK * D; e += nthr) {
            int j = e / D, ch = e % D;
            if (j < c->n_old) {
                x[j * ld + ch] = kvd_load_elem(raw + (int64_t)j * D * esz, ch, esz);
            } else {
                int64_t t = c->row0 + ((int64_t)c->b * KV_BLOCK + j - c->L0);
                x[j * ld + ch] = kv_bf2f(chunk[(t * Hkv + c->g) * D + ch]);
            }
        }
        return;
    }
    if (ph <= a->log2d) {
        kvd_butterfly(x, c->n_old, KV_BLOCK, ld, D, 1 << (ph - 1), tid, nthr);
        return;
    }
    ph -= a->log2d + 1;
    if (ph == 0) { /* finish the new rows as the window stores them */
        for (int e = c->n_old * D + tid; e < KV_BLOCK * D; e += nthr) {
            float *p = &x[(e / D) * ld + e % D];
            float val = a->log2d ? KV_FMUL(*p, a->rs) : *p;
            *p = esz == 2 ? kv_bf16_round(val) : val;
        }
        return;
    }
    uint8_t *blk = kv_view_quant_block(v, c->qpage, c->g, isv);
    if (!v->quant) { /* raw layout in the quant page */
        for (int e = tid; e < KV_BLOCK * D; e += nthr)
            kvd_store_elem(blk + (int64_t)(e / D) * D * esz, e % D, x[(e / D) * ld + e % D], esz);
        return;
    }
    if (isv) { /* values: per token, groups of 32 channels */
        const int bits = v->vbits, ng = D / KV_BLOCK, bpt = D * bits / 8, bpg = KV_BLOCK * bits / 8;
        uint16_t *scale = (uint16_t *)(blk + kv_value_scale_off(D, bits)), *mnv = (uint16_t *)(blk + kv_value_min_off(D, bits));
        for (int w = tid; w < KV_BLOCK * ng; w += nthr) {
            int j = w / ng, gg = w % ng;
            kvd_quant_group(x + j * ld + gg * KV_BLOCK, 1, 0, bits, (uint32_t *)(blk + (int64_t)j * bpt + gg * bpg),
                            &scale[j * ng + gg], &mnv[j * ng + gg]);
        }
        return;
    }
    const int bits = v->kbits, bpc = KV_BLOCK * bits / 8;
    uint16_t *scale = (uint16_t *)(blk + kv_key_scale_off(D, bits)), *mnv = (uint16_t *)(blk + kv_key_min_off(D, bits));
    if (v->scale && ph == 1) { /* per-token norm of the rotated key: double sum in channel order, fp16, 0 -> 1 */
        uint16_t *norm = (uint16_t *)(blk + kv_key_norm_off(D, bits));
        for (int j = tid; j < KV_BLOCK; j += nthr) {
            uint16_t h = 0;
            float s = 1.0f;
            if (j >= c->t0) {
                h = kv_key_norm(x + j * ld, D);
                s = kv_h2f(h);
            }
            norm[j] = h;
            nrm[j] = s;
        }
        return;
    }
    if (v->scale && ph == 2) { /* unit keys */
        for (int e = c->t0 * D + tid; e < KV_BLOCK * D; e += nthr) {
            float *p = &x[(e / D) * ld + e % D];
            *p = KV_FDIV(*p, nrm[e / D]);
        }
        return;
    }
    for (int ch = tid; ch < D; ch += nthr) /* per channel over 32 tokens */
        kvd_quant_group(x + ch, ld, c->t0, bits, (uint32_t *)(blk + (int64_t)ch * bpc), &scale[ch], &mnv[ch]);
}

/* Phase ph of CTA c (0 <= ph < c->nph); sm: kvd_smem_floats(D) floats. */
KV_HD void kvd_cta_phase(const kvd_append_args *a, const kvd_cta *c, int ph, int tid, int nthr, float *sm) {
    if (c->kind == 1) {
        kvd_raw_phase(a, c, ph, tid, nthr, sm);
        return;
    }
    float *x = sm, *nrm = sm + KV_BLOCK * (a->v.head_dim + 1);
    if (ph < c->kph) kvd_flush_pass(a, c, 0, ph, tid, nthr, x, nrm);
    else kvd_flush_pass(a, c, 1, ph - c->kph, tid, nthr, x, nrm);
}

#endif
