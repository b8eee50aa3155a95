/* kv_dev_check.h - the check shared by the device cache tests: a host cache (kv_cache, CPU reference) and a device
 * cache (the real kv_dev on a GPU: tests/gpu/test_gpu_kv_dev.c, or the CPU emulation of its kernels:
 * tests/kvcache/test_kv_dev_emul.c) are driven with the same random steps (sequences added, removed and cleared,
 * batches mixing decode tokens, prefill chunks of awkward sizes and idle sequences) and the same bf16-rounded k/v
 * (the host gets them as f32, the device as bf16). After every step, through the two layer views: sequence ids,
 * lengths and both page tables are equal entry by entry, every quant block in use is byte-identical (memcmp), every
 * raw row that holds a token is byte-identical and finite, and pages that were never handed out still hold the
 * poison the device pools started with (no stray writes). The device side is reached through kvdc_ops. */
#ifndef KV_DEV_CHECK_H
#define KV_DEV_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/tensor.h"
#include "kv_test_util.h"
#include "kvcache/kv_layout.h"

typedef struct {
    void *ctx;
    omni_status (*seq_add)(void *ctx, int *id);
    void (*seq_remove)(void *ctx, int id);
    void (*seq_clear)(void *ctx, int id);
    /* host part + upload of a step (n_seq 0: table changes only) */
    omni_status (*step)(void *ctx, int n_seq, const int *ids, const int *n_new);
    /* append of one layer: k, v host bf16 [T][Hkv][D] */
    omni_status (*append)(void *ctx, int layer, const uint16_t *k, const uint16_t *v, int T);
    omni_status (*commit)(void *ctx);
    /* host copy of the device state of one layer (pools, tables, lengths), valid until the next call; the pools
     * are poisoned with 0xff bytes when the device cache is made */
    omni_status (*snapshot)(void *ctx, int layer, kv_layer_view *v, int64_t *raw_pages, int64_t *quant_pages);
} kvdc_ops;

typedef struct {
    const char *mode, *layer1; /* layer 1's mode (NULL = same as mode) */
    int R, S, D, Hkv, Hq, n_layers, max_seqs, max_chunk, steps;
    int64_t max_tokens;
} kvdc_cfg;

static inline kv_params kvdc_params(const kvdc_cfg *c, kv_format *lf) {
    kv_params p = kv_default_params();
    kv_parse_mode(c->mode, &p.fmt);
    p.fmt.window = c->R, p.fmt.n_sink = c->S;
    for (int l = 0; l < c->n_layers; l++) lf[l] = p.fmt;
    if (c->layer1) {
        kv_parse_mode(c->layer1, &lf[1]);
        lf[1].window = c->R, lf[1].n_sink = c->S;
        p.layer_fmt = lf;
    }
    p.n_layers = c->n_layers, p.n_kv_heads = c->Hkv, p.head_dim = c->D;
    p.max_tokens = c->max_tokens, p.max_seqs = c->max_seqs, p.max_chunk = c->max_chunk;
    return p;
}

static inline int kvdc_all_ff(const uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (p[i] != 0xff) return 0;
    return 1;
}

static inline int kvdc_finite_row(const uint8_t *row, int D, int esz) {
    for (int c = 0; c < D; c++) {
        float x = esz == 4 ? ((const float *)row)[c] : omni_bf16_to_f32(((const uint16_t *)row)[c]);
        if (!isfinite(x)) return 0;
    }
    return 1;
}

/* Compares layer `layer` of the host cache with the device snapshot; `ever` marks pages ever seen in a table
 * ([raw pages] then [quant pages]). Returns the number of differences. */
static inline int kvdc_compare(kv_cache *hc, const kvdc_ops *ops, int layer, uint8_t *ever, const char *what) {
    kv_layer_view h, d;
    int64_t nr, nqp;
    int bad = 0;
    if (kv_cache_layer_view(hc, layer, &h) || ops->snapshot(ops->ctx, layer, &d, &nr, &nqp)) {
        CHECK(0, "%s: views: %s", what, omni_last_error());
        return 1;
    }
    const int D = h.head_dim, S = h.n_sink;
    if (d.tab_stride != h.tab_stride || d.max_seqs != h.max_seqs || d.raw_page_bytes != h.raw_page_bytes ||
        d.quant_page_bytes != h.quant_page_bytes || d.q_k != h.q_k || d.q_v != h.q_v || d.raw_k != h.raw_k) {
        CHECK(0, "%s: layer %d views differ in geometry", what, layer);
        return 1;
    }
    const int64_t ntab = (int64_t)h.max_seqs * h.tab_stride;
    for (int64_t i = 0; i < ntab; i++) {
        bad += h.raw_tab[i] != d.raw_tab[i] || h.quant_tab[i] != d.quant_tab[i];
        if (h.raw_tab[i] >= 0) ever[h.raw_tab[i]] = 1;
        if (h.quant_tab[i] >= 0) ever[nr + h.quant_tab[i]] = 1;
    }
    if (bad) fprintf(stderr, "  %s layer %d: %d table entries differ\n", what, layer, bad);
    for (int s = 0; s < h.max_seqs; s++) bad += h.len[s] != d.len[s];
    if (bad) return bad;
    int pages_bad = 0;
    for (int s = 0; s < h.max_seqs; s++) {
        const int64_t L = h.len[s];
        const int nq = kv_view_nq(&h, L), nb = (int)((L + 31) / 32);
        for (int b = 0; b < nb; b++)
            for (int g = 0; g < h.n_kv_heads; g++)
                for (int isv = 0; isv < 2; isv++) {
                    const int esz = isv ? h.v_esz : h.k_esz;
                    if (b < nq) {
                        int32_t pg = kv_view_quant_page(&h, s, b);
                        int64_t n = isv ? h.q_vh : h.q_kh;
                        if (memcmp(kv_view_quant_block(&h, pg, g, isv), kv_view_quant_block(&d, pg, g, isv), (size_t)n)) {
                            if (pages_bad++ < 4)
                                fprintf(stderr, "  %s layer %d seq %d (len %lld) block %d head %d %s: quant block differs\n",
                                        what, layer, s, (long long)L, b, g, isv ? "V" : "K");
                        }
                    }
                    int rows = b >= nq ? (L - 32 * b < 32 ? (int)(L - 32 * b) : 32) : (b == 0 && S > 0 ? S : 0);
                    if (!rows) continue;
                    int32_t pg = kv_view_raw_page(&h, s, b);
                    const uint8_t *hr = kv_view_raw_rows(&h, pg, g, isv), *dr = kv_view_raw_rows(&d, pg, g, isv);
                    for (int j = 0; j < rows; j++) {
                        const uint8_t *a = hr + (size_t)j * D * esz, *c = dr + (size_t)j * D * esz;
                        if (memcmp(a, c, (size_t)D * esz) || !kvdc_finite_row(c, D, esz)) {
                            if (pages_bad++ < 4)
                                fprintf(stderr, "  %s layer %d seq %d (len %lld) block %d head %d %s row %d differs%s\n",
                                        what, layer, s, (long long)L, b, g, isv ? "V" : "K", j,
                                        kvdc_finite_row(c, D, esz) ? "" : " (not finite)");
                        }
                    }
                }
    }
    /* pages never handed out still hold the poison */
    int canary_bad = 0;
    for (int64_t p = 0; p < nr; p++)
        if (!ever[p] && !kvdc_all_ff(d.raw_pool + p * d.raw_page_bytes, d.raw_page_bytes)) canary_bad++;
    for (int64_t p = 0; p < nqp; p++)
        if (!ever[nr + p] && !kvdc_all_ff(d.quant_pool + p * d.quant_page_bytes, d.quant_page_bytes)) canary_bad++;
    if (canary_bad) fprintf(stderr, "  %s layer %d: %d unused pages were written\n", what, layer, canary_bad);
    return bad + pages_bad + canary_bad;
}

/* One configuration: random steps on both caches, compared after every step. Returns the differences found. */
static inline int kvdc_run(const kvdc_cfg *cfg, const kvdc_ops *ops, uint64_t seed, int *n_flushed_blocks) {
    kv_format lf[4];
    kv_params p = kvdc_params(cfg, lf);
    kv_cache *hc = NULL;
    char what[128];
    snprintf(what, sizeof what, "%s%s%s R %d S %d D %d Hkv %d", cfg->mode, cfg->layer1 ? "+" : "",
             cfg->layer1 ? cfg->layer1 : "", cfg->R, cfg->S, cfg->D, cfg->Hkv);
    if (kv_init(&p, &hc)) {
        CHECK(0, "%s: kv_init: %s", what, omni_last_error());
        return 1;
    }
    const int D = cfg->D, Hkv = cfg->Hkv, Hq = cfg->Hq, NL = cfg->n_layers, C = cfg->max_chunk;
    const size_t krow = (size_t)Hkv * D;
    float *q = malloc((size_t)C * Hq * D * 4), *out = malloc((size_t)C * Hq * D * 4);
    float *kf = malloc((size_t)C * krow * 4), *vf = malloc((size_t)C * krow * 4);
    uint16_t *kb = malloc((size_t)(C + 8) * krow * 2), *vb = malloc((size_t)(C + 8) * krow * 2);
    int64_t nr0 = 0, nq0 = 0;
    kv_layer_view dv;
    ops->snapshot(ops->ctx, 0, &dv, &nr0, &nq0);
    uint8_t *ever = calloc((size_t)(nr0 + nq0 + 1), 1);
    int *active = calloc((size_t)cfg->max_seqs, sizeof(int)), ids[64], nn[64];
    int64_t *len = calloc((size_t)cfg->max_seqs, sizeof(int64_t));
    rng_t r = {seed};
    int bad = 0, flushed = 0;
    for (int step = 0; step < cfg->steps && !bad; step++) {
        /* membership changes, mirrored on both caches (ids must agree) */
        int op = (int)(rng_next(&r) % 16);
        if (op < 3) {
            int hid, did;
            omni_status a = kv_seq_add(hc, &hid), b = ops->seq_add(ops->ctx, &did);
            CHECK(a == b && (a || hid == did), "%s: seq_add %d/%d ids %d/%d", what, a, b, hid, did);
            if (!a && !b) active[hid] = 1, len[hid] = 0;
        } else if (op == 3 || op == 4) {
            int s = (int)(rng_next(&r) % (uint64_t)cfg->max_seqs);
            if (active[s]) {
                if (op == 3) kv_seq_remove(hc, s), ops->seq_remove(ops->ctx, s), active[s] = 0;
                else kv_seq_clear(hc, s), ops->seq_clear(ops->ctx, s);
                len[s] = 0;
            }
        }
        /* the batch: every active sequence may take part with 0, 1 or a chunk of tokens */
        int n_seq = 0, T = 0;
        for (int s = 0; s < cfg->max_seqs && n_seq < 64; s++) {
            if (!active[s] || rng_next(&r) % 4 == 0) continue;
            int kind = (int)(rng_next(&r) % 8), n;
            n = kind < 4 ? 1 : kind == 4 ? 0 : 1 + (int)(rng_next(&r) % (uint64_t)(kind == 7 ? C : 70));
            if (T + n > C) n = C - T;
            int64_t room = (cfg->max_tokens / cfg->max_seqs) - len[s];
            if (n > room) n = room > 0 ? (int)room : 0;
            ids[n_seq] = s, nn[n_seq++] = n;
            T += n;
        }
        if (n_seq == 0) continue;
        /* bf16-rounded k/v per layer; the host cache gets them as f32, the device as bf16 */
        omni_status hs = OMNI_OK, ds = ops->step(ops->ctx, n_seq, ids, nn);
        for (int l = 0; l < NL && !hs && !ds; l++) {
            for (size_t i = 0; i < (size_t)T * Hq * D; i++) q[i] = rng_normal(&r);
            for (size_t row = 0; row < (size_t)T * Hkv; row++) { /* rows of awkward content now and then */
                int kind = (int)(rng_next(&r) % 16);
                float sc = kind == 1 ? 3e4f : kind == 2 ? 1e-6f : 1.0f, cst = rng_normal(&r);
                for (size_t i = row * D; i < (row + 1) * D; i++) {
                    float a = rng_normal(&r) * sc * (i % 7 == 0 ? 6.0f : 1.0f), b = rng_normal(&r) * sc;
                    if (kind == 3) a = b = 0.0f;  /* zero key: norm 0 -> 1 */
                    if (kind == 4) a = b = cst;   /* constant row */
                    if (kind == 5) a = (float)((int)(rng_next(&r) % 5) - 2), b = -0.0f; /* ties, signed zero */
                    kb[i] = omni_f32_to_bf16(a), vb[i] = omni_f32_to_bf16(b);
                    kf[i] = omni_bf16_to_f32(kb[i]), vf[i] = omni_bf16_to_f32(vb[i]);
                }
            }
            for (size_t i = 0; i < 8 * krow; i++) kb[(size_t)T * krow + i] = vb[(size_t)T * krow + i] = 0xffff; /* canary */
            hs = kv_forward(hc, l, n_seq, ids, nn, q, kf, vf, out, Hq, 0.1f);
            if (!hs) ds = ops->append(ops->ctx, l, kb, vb, T);
            CHECK(kvdc_all_ff((const uint8_t *)(kb + (size_t)T * krow), 16 * krow) &&
                      kvdc_all_ff((const uint8_t *)(vb + (size_t)T * krow), 16 * krow),
                  "%s: input canaries", what);
        }
        CHECK(hs == OMNI_OK && ds == OMNI_OK, "%s step %d: host %s / device %d: %s", what, step,
              hs ? "failed" : "ok", ds, omni_last_error());
        if (hs || ds) {
            bad++;
            break;
        }
        kv_layer_view hv;
        kv_cache_layer_view(hc, 0, &hv);
        for (int i = 0; i < n_seq; i++) flushed += kv_view_nq(&hv, len[ids[i]] + nn[i]) - kv_view_nq(&hv, len[ids[i]]);
        CHECK(kv_commit(hc, n_seq, ids, nn) == OMNI_OK && ops->commit(ops->ctx) == OMNI_OK, "%s: commit: %s", what,
              omni_last_error());
        for (int i = 0; i < n_seq; i++) len[ids[i]] += nn[i];
        /* table changes of the commit reach the device with the next step: an empty one here */
        CHECK(ops->step(ops->ctx, 0, NULL, NULL) == OMNI_OK, "%s: empty step: %s", what, omni_last_error());
        for (int l = 0; l < NL; l++) bad += kvdc_compare(hc, ops, l, ever, what);
        CHECK(bad == 0, "%s: step %d (%d sequences, %d tokens): %d differences", what, step, n_seq, T, bad);
    }
    if (n_flushed_blocks) *n_flushed_blocks += flushed;
    kv_free(hc);
    free(q), free(out), free(kf), free(vf), free(kb), free(vb), free(ever), free(active), free(len);
    return bad;
}

/* One result line per configuration. */
static inline void kvdc_print(const kvdc_cfg *c, int bad, const char *extra) {
    printf("%-10s%-5s R %3d S %2d D %3d Hkv %d: %s%s\n", c->mode, c->layer1 ? c->layer1 : "", c->R, c->S, c->D, c->Hkv,
           bad ? "DIFFERENT" : "identical", extra);
}

/* The configurations both tests run (formats, windows, sinks, per-layer mixes, head sizes). */
static const kvdc_cfg kvdc_cfgs[] = {
    /* mode, layer1, R, S, D, Hkv, Hq, layers, max_seqs, max_chunk, steps, max_tokens */
    {"int2", NULL, 128, 0, 128, 2, 4, 2, 6, 300, 60, 6 * 700},
    {"int2", NULL, 0, 0, 64, 2, 4, 2, 5, 200, 60, 5 * 500},
    {"int4", NULL, 32, 0, 128, 1, 2, 2, 4, 160, 50, 4 * 500},
    {"kivi2", NULL, 64, 0, 64, 2, 2, 2, 5, 130, 50, 5 * 500},
    {"kivi4", NULL, 256, 0, 128, 2, 4, 2, 3, 400, 40, 3 * 900},
    {"k4v2", NULL, 32, 3, 64, 2, 4, 2, 4, 120, 50, 4 * 400},
    {"k2v4", NULL, 0, 1, 128, 1, 1, 2, 4, 100, 50, 4 * 400},
    {"kivi-k4v2", NULL, 96, 32, 64, 2, 2, 2, 4, 180, 40, 4 * 500},
    {"int2", NULL, 64, 5, 64, 4, 8, 2, 8, 256, 60, 8 * 400},
    {"int2", "bf16", 32, 0, 64, 2, 4, 2, 4, 150, 40, 4 * 400},
    {"int4", "f32", 0, 7, 64, 2, 2, 2, 4, 150, 40, 4 * 400},
    {"bf16", NULL, 128, 0, 128, 2, 4, 2, 4, 200, 40, 4 * 400},
    {"f32", NULL, 128, 0, 64, 2, 2, 2, 4, 120, 30, 4 * 300},
    {"int2", NULL, 32, 0, 32, 3, 3, 1, 6, 64, 50, 6 * 300},
};
#define KVDC_NCFG ((int)(sizeof kvdc_cfgs / sizeof kvdc_cfgs[0]))

#endif
