/* attn_test_util.h - helpers for the GPU attention tests and benchmark: a host model of one cache layer in the
 * page layout of kvcache.h (rows stored as the cache stores them: rotated, bf16-rounded, quantized beyond the
 * window with kvq_quant_*, sinks kept raw), shuffled page order, poisoned unused rows; its device copy as a
 * kvc_layer_view; the f64 attention over exactly what is stored (dequantized); and the error metrics of the
 * accuracy policy (spec/performance.md section 4: max |err| <= 1e-2 max |ref|, RMS err <= 3e-3 RMS ref).
 *
 * Sequence data: k, v [L][Hkv][D] f32 (model values before storage), q [Hq][D] bf16 bits. */
#ifndef ATTN_TEST_UTIL_H
#define ATTN_TEST_UTIL_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tensor.h"
#include "kvcache/kv_cuda.h"
#include "kvcache/kv_quant.h"
#include "kvcache/kv_test_util.h"

#define ATU_CU(x)                                                                                              \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "CUDA error %s at %s:%d (%s)\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x);  \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

typedef struct {
    int Hkv, D, kbits, vbits; /* bits 16 = bf16 layer */
    int rot, norm, R, S;      /* rotate, key norms, window, sinks */
    int quantizing;           /* the cache quantizes (bf16 layers: blocks < nq sit in quant pages) */
    size_t kh, vh;            /* packed bytes per KV head of a key / value block (quantized layers) */
    size_t qpage, rpage;      /* page bytes (one layer) */
} atu_layout;

/* mode: "bf16", "int2", "int4", "kivi2", "k4v2", ... (kv_parse_mode); bf16_in_quant: a bf16 layer inside a
 * quantizing cache (quant pages hold raw rows). */
static inline atu_layout atu_make_layout(const char *mode, int Hkv, int D, int R, int S, int bf16_in_quant) {
    kv_format f;
    atu_layout y;
    memset(&y, 0, sizeof y);
    if (kv_parse_mode(mode, &f)) {
        fprintf(stderr, "bad mode %s\n", mode);
        exit(1);
    }
    y.Hkv = Hkv, y.D = D, y.R = R;
    const int q = f.k_type == KV_Q2 || f.k_type == KV_Q4;
    y.kbits = q ? (f.k_type == KV_Q2 ? 2 : 4) : 16;
    y.vbits = q ? (f.v_type == KV_Q2 ? 2 : 4) : 16;
    y.rot = f.rotate, y.norm = q && f.scale, y.S = q ? S : 0;
    y.quantizing = q || bf16_in_quant;
    y.rpage = (size_t)2 * Hkv * 32 * D * 2;
    if (q) {
        y.kh = kvq_key_bytes(D, y.kbits, y.norm);
        y.vh = kvq_value_bytes(D, y.vbits);
        y.qpage = (size_t)Hkv * (y.kh + y.vh);
    } else {
        y.qpage = y.quantizing ? y.rpage : 0;
    }
    return y;
}

static inline int atu_nq(const atu_layout *y, int64_t L) {
    return y->quantizing && L >= y->R ? (int)((L - y->R) / 32) : 0;
}

/* Row t of head g as the cache stores it: rotated when rotating, bf16-rounded (f32 values of bf16). */
static inline void atu_stored_row(const atu_layout *y, const float *x, int64_t t, int g, float *row) {
    memcpy(row, x + ((size_t)t * y->Hkv + g) * y->D, (size_t)y->D * 4);
    if (y->rot) kvq_fwht(row, y->D);
    for (int c = 0; c < y->D; c++) row[c] = kvq_bf16_round(row[c]);
}

typedef struct {
    atu_layout y;
    int n_seq, tab_stride, nqp, nrp;
    int64_t *len;
    uint8_t *qpool, *rpool; /* host pools */
    int32_t *qtab, *rtab;   /* [n_seq][tab_stride], -1 unused */
} atu_cache;

static inline void atu_shuffle(int32_t *p, int n, rng_t *r) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next(r) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

/* Fills the pages of sequence s (L tokens of k, v [L][Hkv][D]); raw rows never meant to be read are bf16 NaN. */
static inline void atu_fill_seq(atu_cache *c, int s, const float *k, const float *v, int64_t L, const int32_t *qperm,
                                const int32_t *rperm, int *qnext, int *rnext) {
    const atu_layout *y = &c->y;
    const int D = y->D, nb = (int)((L + 31) / 32), nq = atu_nq(y, L), quant = y->kbits != 16;
    float *kb = malloc((size_t)32 * D * 4), *vb = malloc((size_t)32 * D * 4), *tmp = malloc((size_t)32 * D * 4);
    int32_t *qt = c->qtab + (size_t)s * c->tab_stride, *rt = c->rtab + (size_t)s * c->tab_stride;
    for (int b = 0; b < nb; b++) {
        const int sink_page = quant && b == 0 && nq > 0 && y->S > 0;
        if (b < nq) {
            qt[b] = qperm[(*qnext)++];
            uint8_t *page = c->qpool + (size_t)qt[b] * y->qpage;
            for (int g = 0; g < y->Hkv; g++) {
                for (int j = 0; j < 32; j++) {
                    atu_stored_row(y, k, (int64_t)b * 32 + j, g, kb + j * D);
                    atu_stored_row(y, v, (int64_t)b * 32 + j, g, vb + j * D);
                }
                if (quant) {
                    kvq_quant_keys(kb, b == 0 ? y->S : 0, D, y->kbits, y->norm, page + g * y->kh, tmp);
                    kvq_quant_values(vb, D, y->vbits, page + y->Hkv * y->kh + g * y->vh);
                } else { /* bf16 layer: raw layout in the quant page */
                    uint16_t *kr = (uint16_t *)page + (size_t)g * 32 * D, *vr = kr + (size_t)y->Hkv * 32 * D;
                    for (int i = 0; i < 32 * D; i++) kr[i] = omni_f32_to_bf16(kb[i]), vr[i] = omni_f32_to_bf16(vb[i]);
                }
            }
        }
        if (b >= nq || sink_page) {
            rt[b] = rperm[(*rnext)++];
            uint16_t *page = (uint16_t *)(c->rpool + (size_t)rt[b] * y->rpage);
            const int rows = b >= nq ? 32 : y->S; /* sinks: only rows < S are valid */
            for (int g = 0; g < y->Hkv; g++)
                for (int j = 0; j < 32; j++) {
                    const int64_t t = (int64_t)b * 32 + j;
                    uint16_t *kr = page + ((size_t)g * 32 + j) * D, *vr = page + ((size_t)(y->Hkv + g) * 32 + j) * D;
                    if (t >= L || j >= rows) {
                        for (int i = 0; i < D; i++) kr[i] = vr[i] = 0x7fc0; /* poison: must never be read */
                        continue;
                    }
                    atu_stored_row(y, k, t, g, kb);
                    atu_stored_row(y, v, t, g, vb);
                    for (int i = 0; i < D; i++) kr[i] = omni_f32_to_bf16(kb[i]), vr[i] = omni_f32_to_bf16(vb[i]);
                }
        }
    }
    free(kb), free(vb), free(tmp);
}

/* Host pages for n_seq sequences (k[s], v[s]: [len[s]][Hkv][D]) in shuffled page order. */
static inline atu_cache atu_build(const atu_layout *y, int n_seq, const int64_t *len, float *const *k, float *const *v,
                                  uint64_t seed) {
    atu_cache c;
    memset(&c, 0, sizeof c);
    c.y = *y, c.n_seq = n_seq;
    c.len = malloc((size_t)n_seq * sizeof(int64_t));
    int64_t blocks = 0, Lmax = 0;
    for (int s = 0; s < n_seq; s++) {
        c.len[s] = len[s];
        blocks += (len[s] + 31) / 32;
        if (len[s] > Lmax) Lmax = len[s];
    }
    c.tab_stride = (int)((Lmax + 31) / 32) + 1;
    c.nqp = (int)blocks + 1, c.nrp = (int)blocks + n_seq + 1;
    c.qpool = malloc((size_t)c.nqp * (y->qpage ? y->qpage : 16));
    c.rpool = malloc((size_t)c.nrp * y->rpage);
    memset(c.qpool, 0xff, (size_t)c.nqp * (y->qpage ? y->qpage : 16));
    memset(c.rpool, 0xff, (size_t)c.nrp * y->rpage);
    c.qtab = malloc((size_t)n_seq * c.tab_stride * 4);
    c.rtab = malloc((size_t)n_seq * c.tab_stride * 4);
    for (int i = 0; i < n_seq * c.tab_stride; i++) c.qtab[i] = c.rtab[i] = -1;
    int32_t *qperm = malloc((size_t)c.nqp * 4), *rperm = malloc((size_t)c.nrp * 4);
    rng_t r = {seed};
    atu_shuffle(qperm, c.nqp, &r);
    atu_shuffle(rperm, c.nrp, &r);
    int qn = 0, rn = 0;
    for (int s = 0; s < n_seq; s++) atu_fill_seq(&c, s, k[s], v[s], len[s], qperm, rperm, &qn, &rn);
    free(qperm), free(rperm);
    return c;
}

static inline void atu_free(atu_cache *c) {
    free(c->len), free(c->qpool), free(c->rpool), free(c->qtab), free(c->rtab);
}

/* Device copy of a host cache; *view (kv_layout.h, device pointers, tables by slot = sequence index) points into
 * it. Free with atu_dev_free. */
typedef struct {
    uint8_t *qpool, *rpool;
    int32_t *qtab, *rtab, *len;
} atu_dev;

static inline atu_dev atu_upload(const atu_cache *c, kv_layer_view *v) {
    atu_dev d;
    const atu_layout *y = &c->y;
    size_t qb = (size_t)c->nqp * (y->qpage ? y->qpage : 16), rb = (size_t)c->nrp * y->rpage;
    size_t tb = (size_t)c->n_seq * c->tab_stride * 4;
    ATU_CU(cudaMalloc((void **)&d.qpool, qb));
    ATU_CU(cudaMalloc((void **)&d.rpool, rb));
    ATU_CU(cudaMalloc((void **)&d.qtab, tb));
    ATU_CU(cudaMalloc((void **)&d.rtab, tb));
    ATU_CU(cudaMalloc((void **)&d.len, (size_t)c->n_seq * 4 + 4));
    ATU_CU(cudaMemcpy(d.qpool, c->qpool, qb, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(d.rpool, c->rpool, rb, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(d.qtab, c->qtab, tb, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(d.rtab, c->rtab, tb, cudaMemcpyHostToDevice));
    int32_t *l32 = malloc((size_t)c->n_seq * 4 + 4);
    for (int s = 0; s < c->n_seq; s++) l32[s] = (int32_t)c->len[s];
    ATU_CU(cudaMemcpy(d.len, l32, (size_t)c->n_seq * 4, cudaMemcpyHostToDevice));
    free(l32);
    memset(v, 0, sizeof *v);
    const int quant = y->kbits != 16;
    const int64_t rawh = (int64_t)32 * y->D * 2;
    v->layer = 0, v->n_layers = 1, v->n_kv_heads = y->Hkv, v->head_dim = y->D;
    v->quant = quant, v->kbits = quant ? y->kbits : 0, v->vbits = quant ? y->vbits : 0;
    v->rotate = y->rot, v->scale = y->norm, v->window = y->R, v->n_sink = y->S, v->cache_quant = y->quantizing;
    v->k_esz = v->v_esz = 2;
    v->raw_page_bytes = (int64_t)y->rpage, v->raw_k = 0, v->raw_v = (int64_t)y->Hkv * rawh, v->raw_kh = v->raw_vh = rawh;
    v->quant_page_bytes = (int64_t)y->qpage, v->q_k = 0;
    v->q_v = quant ? (int64_t)y->Hkv * (int64_t)y->kh : (int64_t)y->Hkv * rawh;
    v->q_kh = quant ? (int64_t)y->kh : rawh, v->q_vh = quant ? (int64_t)y->vh : rawh;
    v->raw_pool = d.rpool, v->quant_pool = y->qpage ? d.qpool : NULL;
    v->raw_tab = d.rtab, v->quant_tab = d.qtab, v->len = d.len, v->tab_stride = c->tab_stride, v->max_seqs = c->n_seq;
    return d;
}

static inline void atu_dev_free(atu_dev *d) {
    cudaFree(d->qpool), cudaFree(d->rpool), cudaFree(d->qtab), cudaFree(d->rtab), cudaFree(d->len);
}

/* Stored key (kv 0) / value (kv 1) rows of token t, KV head g, as f32 (dequantized when packed). */
static inline void atu_stored_kv(const atu_cache *c, int s, int64_t t, int g, int kv, float *row, float *blk) {
    const atu_layout *y = &c->y;
    const int D = y->D, b = (int)(t / 32), j = (int)(t % 32), nq = atu_nq(y, c->len[s]), quant = y->kbits != 16;
    const int32_t *qt = c->qtab + (size_t)s * c->tab_stride, *rt = c->rtab + (size_t)s * c->tab_stride;
    if (b < nq && !(quant && b == 0 && j < y->S)) {
        const uint8_t *page = c->qpool + (size_t)qt[b] * y->qpage;
        if (!quant) {
            const uint16_t *r = (const uint16_t *)page + ((size_t)(kv ? y->Hkv : 0) * 32 + (size_t)g * 32 + j) * D;
            for (int i = 0; i < D; i++) row[i] = omni_bf16_to_f32(r[i]);
            return;
        }
        if (kv) kvq_dequant_values(page + y->Hkv * y->kh + g * y->vh, D, y->vbits, blk);
        else kvq_dequant_keys(page + g * y->kh, D, y->kbits, y->norm, blk);
        memcpy(row, blk + (size_t)j * D, (size_t)D * 4);
        return;
    }
    const uint16_t *r = (const uint16_t *)(c->rpool + (size_t)rt[b] * y->rpage) + ((size_t)(kv ? y->Hkv : 0) * 32 + (size_t)g * 32 + j) * D;
    for (int i = 0; i < D; i++) row[i] = omni_bf16_to_f32(r[i]);
}

/* The stored keys and values of tokens [0, n) of sequence s, KV head g, as f32 [n][D] (dequantized once). */
static inline void atu_seq_kv(const atu_cache *c, int s, int g, int64_t n, float *K, float *V) {
    const int D = c->y.D;
    float *blk = malloc((size_t)32 * D * 4), *row = malloc((size_t)D * 4);
    for (int64_t t = 0; t < n; t++) {
        atu_stored_kv(c, s, t, g, 0, K + (size_t)t * D, blk);
        atu_stored_kv(c, s, t, g, 1, V + (size_t)t * D, blk);
    }
    free(blk), free(row);
}

/* In place f64 normalized Walsh-Hadamard transform of x[D]. */
static inline void atu_fwht64(double *x, int D) {
    for (int h = 1; h < D; h <<= 1)
        for (int i = 0; i < D; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                double a = x[j], b = x[j + h];
                x[j] = a + b, x[j + h] = a - b;
            }
    for (int i = 0; i < D; i++) x[i] /= sqrt((double)D);
}

/* f64 attention of one query row q (bf16 bits [D]; rotated first when rot) over keys/values K, V [n][D] (f32,
 * in the stored basis); causal limit: keys [0, n). out[D] un-rotated when rot. */
static inline void atu_ref_attn(const uint16_t *q, const float *K, const float *V, int64_t n, int D, int rot,
                                double scale, double *out) {
    double *qd = malloc((size_t)D * 8), *sc = malloc((size_t)(n + 1) * 8);
    for (int i = 0; i < D; i++) qd[i] = omni_bf16_to_f32(q[i]), out[i] = 0.0;
    if (rot) atu_fwht64(qd, D);
    double m = -INFINITY, l = 0.0;
    for (int64_t t = 0; t < n; t++) {
        double d = 0.0;
        for (int i = 0; i < D; i++) d += qd[i] * K[(size_t)t * D + i];
        sc[t] = d * scale;
        if (sc[t] > m) m = sc[t];
    }
    for (int64_t t = 0; t < n; t++) {
        const double w = exp(sc[t] - m);
        l += w;
        for (int i = 0; i < D; i++) out[i] += w * V[(size_t)t * D + i];
    }
    for (int i = 0; i < D; i++) out[i] = n > 0 ? out[i] / l : 0.0;
    if (rot) atu_fwht64(out, D);
    free(qd), free(sc);
}

/* Error of got (bf16 bits) against ref over n values: the policy's two ratios and the worst index. */
typedef struct {
    double max_err, max_ref, sq_err, sq_ref;
    int64_t n, worst, nonfinite;
} atu_err;

static inline void atu_err_add(atu_err *e, const uint16_t *got, const double *ref, int64_t n, int64_t base) {
    for (int64_t i = 0; i < n; i++) {
        const double g = omni_bf16_to_f32(got[i]), r = ref[i], d = fabs(g - r);
        if (!isfinite(g)) {
            e->nonfinite++;
            if (e->worst < 0) e->worst = base + i;
            continue;
        }
        if (d > e->max_err || e->worst < 0) e->max_err = d > e->max_err ? d : e->max_err, e->worst = base + i;
        e->max_ref = fmax(e->max_ref, fabs(r));
        e->sq_err += d * d, e->sq_ref += r * r;
        e->n++;
    }
}
static inline double atu_max_ratio(const atu_err *e) { return e->max_ref > 0 ? e->max_err / e->max_ref : e->max_err; }
static inline double atu_rms_ratio(const atu_err *e) { return e->sq_ref > 0 ? sqrt(e->sq_err / e->sq_ref) : sqrt(e->sq_err); }
/* The accuracy policy: max error <= 1e-2 of max |ref|, RMS error <= 3e-3 of RMS ref, nothing non-finite. */
static inline int atu_policy_ok(const atu_err *e) {
    return e->nonfinite == 0 && atu_max_ratio(e) <= 1e-2 && atu_rms_ratio(e) <= 3e-3;
}
static inline atu_err atu_err_init(void) {
    atu_err e;
    memset(&e, 0, sizeof e);
    e.worst = -1;
    return e;
}

/* bf16 bits of random normal values. */
static inline void atu_rand_bf16(uint16_t *x, size_t n, rng_t *r, float sigma) {
    for (size_t i = 0; i < n; i++) x[i] = omni_f32_to_bf16(sigma * rng_normal(r));
}

#endif
