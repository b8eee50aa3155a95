/* test_kv_attn.c - attention over the cache, every format, checked against fp64 "shadow" references:
 * - f32: every output row equals exact fp64 attention; outputs are bit-identical however the tokens are split
 *   into chunks (multi-turn in 3 chunks == one prefill of the concatenation).
 * - bf16 / int2 / int4 / kivi2 / k4v2 / sinks: every row equals fp64 attention over the history as the format
 *   stores it (bf16-rounded window, blocks beyond the window quantized then dequantized, chunk exact), i.e. the
 *   folded-score CPU kernel, the window/flush rule and the rotation are right; bf16 history is bf16-rounded.
 * - boundaries: lengths 1, 31, 32, 33, 128, 160, 3000 x R in {0, 32, 128}: the next decode step gives bit-identical
 *   results whatever the chunk split of the prefix (the stored bytes do not depend on it) and matches the shadow.
 * - batches: several sequences of different lengths in one batch == each run alone (bit-identical). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kv_test_util.h"
#include "kernels/ops.h"
#include "kvcache/kv_quant.h"

static int is_q(kv_type t) { return t == KV_Q2 || t == KV_Q4; }

/* Kh/Vh [n][Hkv][D] of layer l: rows < L as the cache stores them (dequantized), rows >= L exact; all rotated
 * when the format rotates. */
static void shadow_kv(const kv_format *f, const kv_data *d, int l, int64_t L, int64_t n, float *Kh, float *Vh) {
    const int D = d->D, Hkv = d->Hkv, quant = is_q(f->k_type), S = quant ? f->n_sink : 0;
    for (int64_t t = 0; t < n; t++)
        for (int g = 0; g < Hkv; g++) {
            float *kr = Kh + ((size_t)t * Hkv + g) * D, *vr = Vh + ((size_t)t * Hkv + g) * D;
            memcpy(kr, kvd_k(d, l, t) + (size_t)g * D, (size_t)D * 4);
            memcpy(vr, kvd_v(d, l, t) + (size_t)g * D, (size_t)D * 4);
            if (f->rotate) kvq_fwht(kr, D), kvq_fwht(vr, D);
            if (t < L && f->k_type != KV_F32)
                for (int c = 0; c < D; c++) kr[c] = kvq_bf16_round(kr[c]);
            if (t < L && f->v_type != KV_F32)
                for (int c = 0; c < D; c++) vr[c] = kvq_bf16_round(vr[c]);
        }
    if (!quant) return;
    int nq = L >= f->window ? (int)((L - f->window) / 32) : 0, kb = f->k_type == KV_Q2 ? 2 : 4,
        vb = f->v_type == KV_Q2 ? 2 : 4;
    float *blk = malloc((size_t)32 * D * 4), *deq = malloc((size_t)32 * D * 4), *tmp = malloc((size_t)32 * D * 4);
    uint8_t *buf = malloc(kvq_key_bytes(D, 4, 1) + kvq_value_bytes(D, 4));
    for (int b = 0; b < nq; b++)
        for (int g = 0; g < Hkv; g++)
            for (int v = 0; v < 2; v++) {
                float *X = v ? Vh : Kh;
                for (int j = 0; j < 32; j++) memcpy(blk + j * D, X + (((size_t)b * 32 + j) * Hkv + g) * D, (size_t)D * 4);
                if (v) {
                    kvq_quant_values(blk, D, vb, buf);
                    kvq_dequant_values(buf, D, vb, deq);
                } else {
                    kvq_quant_keys(blk, b == 0 ? S : 0, D, kb, f->scale, buf, tmp);
                    kvq_dequant_keys(buf, D, kb, f->scale, deq);
                }
                for (int j = (b == 0 ? S : 0); j < 32; j++)
                    memcpy(X + (((size_t)b * 32 + j) * Hkv + g) * D, deq + j * D, (size_t)D * 4);
            }
    free(blk), free(deq), free(tmp), free(buf);
}

/* Worst relative error of out rows [t0, t1) of layer l against the shadow with history length L. */
static double shadow_check(const kv_format *f, const kv_data *d, int l, int64_t L, int64_t t0, int64_t t1,
                           const float *out) {
    const int D = d->D, Hq = d->Hq, Hkv = d->Hkv;
    float *Kh = malloc((size_t)t1 * Hkv * D * 4), *Vh = malloc((size_t)t1 * Hkv * D * 4), q[512];
    double *sc = malloc((size_t)t1 * sizeof(double)), o[512], o2[512], worst = 0.0;
    shadow_kv(f, d, l, L, t1, Kh, Vh);
    for (int64_t t = t0; t < t1; t++)
        for (int h = 0; h < Hq; h++) {
            memcpy(q, kvd_q(d, l, t) + (size_t)h * D, (size_t)D * 4);
            if (f->rotate) kvq_fwht(q, D);
            ref_attention(q, Kh, Vh, t + 1, Hkv, D, h / (Hq / Hkv), 1.0 / sqrt((double)D), o, sc);
            if (f->rotate) { /* un-rotate with the dense Hadamard matrix in fp64 */
                for (int i = 0; i < D; i++) {
                    o2[i] = 0;
                    for (int j = 0; j < D; j++) o2[i] += (__builtin_popcount(i & j) & 1 ? -o[j] : o[j]);
                    o2[i] /= sqrt((double)D);
                }
                memcpy(o, o2, sizeof(double) * D);
            }
            double e = rel_err(out + (((size_t)l * d->N + t) * Hq + h) * D, o, D);
            if (e > worst) worst = e;
        }
    free(Kh), free(Vh), free(sc);
    return worst;
}

static int g_last_chunk_only; /* check only the last chunk's rows (keeps the 3000-token cases affordable) */

/* Feed d with splits, check every row (or the last chunk's) against the shadow. Returns the worst error. */
static double check_cache(kv_cache *c, const char *mode, const kv_data *d, const int *splits, int ns, float *out);

static double run_and_check(const char *mode, int R, int S, const kv_data *d, const int *splits, int ns, float *out) {
    kv_cache *c = kvt_cache(mode, R, S, d->n_layers, d->Hkv, d->D, d->N, 1, (int)d->N);
    CHECK(c != NULL, "kv_init %s: %s", mode, omni_last_error());
    return c ? check_cache(c, mode, d, splits, ns, out) : 1e9;
}

/* Feed a fresh sequence of cache c (freed here) and check every row against the shadow of its layer's format. */
static double check_cache(kv_cache *c, const char *mode, const kv_data *d, const int *splits, int ns, float *out) {
    int id;
    kv_seq_add(c, &id);
    omni_status st = kvt_feed(c, id, d, splits, ns, out);
    CHECK(st == OMNI_OK, "feed %s: %s", mode, omni_last_error());
    double worst = 0.0;
    for (int l = 0; l < d->n_layers; l++) {
        int64_t L = 0;
        for (int s = 0; s < ns; s++) {
            if (g_last_chunk_only && s < ns - 1) {
                L += splits[s];
                continue;
            }
            double e = shadow_check(kv_layer_format(c, l), d, l, L, L, L + splits[s], out);
            worst = e > worst ? e : worst;
            L += splits[s];
        }
    }
    kv_free(c);
    return worst;
}

static void test_formats(void) {
    kv_data d = kvd_make(2, 4, 2, 64, 200, 42);
    const int s1[] = {200}, s3[] = {60, 70, 70}, sx[] = {1, 31, 32, 33, 100, 1, 1, 1};
    const int *splits[] = {s1, s3, sx};
    const int nsp[] = {1, 3, 8};
    size_t n = (size_t)d.n_layers * d.N * d.Hq * d.D;
    float *o[3];
    for (int i = 0; i < 3; i++) o[i] = malloc(n * 4);
    /* f32: exact and split-invariant */
    for (int i = 0; i < 3; i++) {
        double e = run_and_check("f32", 128, 0, &d, splits[i], nsp[i], o[i]);
        CHECK(e < 2e-6, "f32 split %d: error vs fp64 %.2e", i, e);
    }
    CHECK(memcmp(o[0], o[1], n * 4) == 0, "f32: 3 chunks differ from one prefill (not bit-identical)");
    CHECK(memcmp(o[0], o[2], n * 4) == 0, "f32: odd chunk split differs from one prefill (not bit-identical)");
    /* f32 vs the kernels' plain attention (what a decoder without this cache computes) */
    double e_op = 0.0;
    float *ref = malloc((size_t)d.N * d.Hq * d.D * 4);
    for (int l = 0; l < d.n_layers; l++) {
        op_attention(ref, (int64_t)d.Hq * d.D, kvd_q(&d, l, 0), (int64_t)d.Hq * d.D, kvd_k(&d, l, 0), (int64_t)d.Hkv * d.D,
                     kvd_v(&d, l, 0), (int64_t)d.Hkv * d.D, (int)d.N, (int)d.N, d.Hq, d.Hkv, d.D, 0.125f, 0);
        for (int64_t t = 0; t < d.N; t++)
            for (int h = 0; h < d.Hq; h++) {
                double r[64];
                const float *a = ref + ((size_t)t * d.Hq + h) * d.D;
                for (int x = 0; x < d.D; x++) r[x] = a[x];
                double e = rel_err(o[1] + (((size_t)l * d.N + t) * d.Hq + h) * d.D, r, d.D);
                e_op = e > e_op ? e : e_op;
            }
    }
    free(ref);
    printf("f32 cache (3 chunks) vs op_attention (one pass): worst row relative difference %.2e\n", e_op);
    CHECK(e_op < 2e-6, "f32 cache vs op_attention: %.2e", e_op);
    /* every other format vs its shadow */
    const struct {
        const char *mode;
        int R, S;
        double tol;
    } cfg[] = {{"bf16", 128, 0, 2e-6}, {"int2", 128, 0, 2e-5}, {"int2", 0, 0, 2e-5}, {"int2", 32, 4, 2e-5},
               {"int4", 32, 0, 2e-5}, {"kivi2", 0, 0, 2e-5}, {"kivi4", 64, 0, 2e-5}, {"k4v2", 32, 0, 2e-5},
               {"kivi-k2v4", 0, 3, 2e-5}};
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        double worst = 0;
        for (int s = 1; s < 3; s++) {
            double e = run_and_check(cfg[i].mode, cfg[i].R, cfg[i].S, &d, splits[s], nsp[s], o[s]);
            worst = e > worst ? e : worst;
        }
        printf("%-10s R=%3d S=%d: worst row error vs fp64 shadow of the stored history %.2e\n", cfg[i].mode,
               cfg[i].R, cfg[i].S, worst);
        CHECK(worst < cfg[i].tol, "%s R=%d S=%d: error vs shadow %.2e", cfg[i].mode, cfg[i].R, cfg[i].S, worst);
    }
    /* bf16 history really is bf16: the exact (f32) reference is farther away than the shadow */
    double e_exact = 0.0;
    run_and_check("bf16", 128, 0, &d, s3, 3, o[1]);
    for (size_t i = 0; i < n; i++) e_exact = fmax(e_exact, fabs(o[1][i] - o[0][i]));
    CHECK(e_exact > 1e-5 && e_exact < 5e-2, "bf16 vs f32 max abs difference %.2e (expected bf16 rounding)", e_exact);
    printf("bf16 vs f32 (3 chunks): max abs difference %.2e\n", e_exact);
    for (int i = 0; i < 3; i++) free(o[i]);
    kvd_free(&d);
}

/* Per-layer formats: quantized and raw layers in one cache (raw layers use a raw layout in quant pages). */
static void test_layer_mix(void) {
    kv_data d = kvd_make(3, 4, 2, 64, 200, 43);
    float *out = malloc((size_t)3 * 200 * 4 * 64 * 4);
    const int sx[] = {1, 31, 32, 33, 100, 1, 1, 1};
    const char *specs[] = {"1:bf16,2:kivi4", "0:f32,2:k4v2", "0-1:kivi2"};
    for (int i = 0; i < 3; i++) {
        kv_params p = kv_default_params();
        kv_format lf[3];
        kv_parse_mode("int2", &p.fmt);
        p.fmt.window = 32, p.fmt.n_sink = i == 2 ? 2 : 0;
        CHECK(kv_parse_layer_overrides(specs[i], &p.fmt, 3, lf) == OMNI_OK, "%s", omni_last_error());
        p.layer_fmt = lf, p.n_layers = 3, p.n_kv_heads = 2, p.head_dim = 64, p.max_tokens = 200, p.max_chunk = 200;
        kv_cache *c = NULL;
        CHECK(kv_init(&p, &c) == OMNI_OK, "%s: %s", specs[i], omni_last_error());
        kv_usage u;
        kv_get_usage(c, &u);
        int64_t want = 0; /* quant page: per layer, packed blocks or the raw layout */
        for (int l = 0; l < 3; l++) {
            int kb = lf[l].k_type == KV_Q2 ? 2 : 4, vb = lf[l].v_type == KV_Q2 ? 2 : 4;
            if (lf[l].k_type == KV_F32 || lf[l].k_type == KV_BF16)
                want += 2 * 2 * 32 * 64 * (lf[l].k_type == KV_F32 ? 4 : 2);
            else
                want += 2 * ((int64_t)kvq_key_bytes(64, kb, lf[l].scale) + (int64_t)kvq_value_bytes(64, vb));
        }
        CHECK(u.quant_page_bytes == want, "%s: quant page %lld, expected %lld", specs[i], (long long)u.quant_page_bytes,
              (long long)want);
        double e = check_cache(c, specs[i], &d, sx, 8, out);
        printf("int2 with overrides %-14s: worst row error vs fp64 shadow %.2e\n", specs[i], e);
        CHECK(e < 2e-5, "%s: error vs shadow %.2e", specs[i], e);
    }
    free(out);
    kvd_free(&d);
}

/* Decode step after a prefix of L tokens fed in two different splits: identical bytes, matches the shadow. */
static void test_boundaries(void) {
    const int lens[] = {1, 31, 32, 33, 128, 160, 3000}, Rs[] = {0, 32, 128};
    const char *modes[] = {"f32", "int2"};
    const int pat[] = {1, 31, 32, 33, 96, 7, 160};
    int nfail = 0;
    for (int li = 0; li < 7; li++) {
        int L = lens[li];
        kv_data d = kvd_make(1, 2, 1, 64, L + 1, 1000 + L);
        size_t n = (size_t)(L + 1) * d.Hq * d.D;
        float *oa = malloc(n * 4), *ob = malloc(n * 4);
        int sa[2] = {L, 1}, sb[64], nb = 0, left = L;
        for (int k = 0; left > 0; k++) {
            int x = pat[k % 7] < left ? pat[k % 7] : left;
            if (L == 3000 && k == 0) x = 1000; /* keep the 3000-token case affordable */
            sb[nb++] = x;
            left -= x;
        }
        sb[nb++] = 1;
        g_last_chunk_only = L > 1000;
        for (int m = 0; m < 2; m++)
            for (int ri = 0; ri < 3; ri++) {
                double ea = run_and_check(modes[m], Rs[ri], 0, &d, sa, 2, oa);
                double eb = run_and_check(modes[m], Rs[ri], 0, &d, sb, nb, ob);
                int same = memcmp(oa + (size_t)L * d.Hq * d.D, ob + (size_t)L * d.Hq * d.D, (size_t)d.Hq * d.D * 4) == 0;
                double tol = m == 0 ? 1e-5 : 2e-5; /* f32 accumulation over up to 3000 keys */
                CHECK(same, "%s L=%d R=%d: decode after different splits differs", modes[m], L, Rs[ri]);
                CHECK(ea < tol && eb < tol, "%s L=%d R=%d: error vs shadow %.2e / %.2e", modes[m], L, Rs[ri], ea, eb);
                nfail += !same || ea >= tol || eb >= tol;
            }
        free(oa), free(ob);
        kvd_free(&d);
    }
    printf("boundaries: 7 lengths x 3 windows x {f32, int2}: %d failures\n", nfail);
}

/* Several sequences of different lengths per batch == each alone. */
static void test_batch(void) {
    const char *modes[] = {"f32", "int2", "kivi4", "bf16"};
    const int Rs[] = {128, 32, 0, 128}, Ss[] = {0, 4, 0, 0};
    enum { NS = 4, STEPS = 6 };
    const int st0[STEPS] = {1, 0, 0, 0, 0, 0}, st1[STEPS] = {20, 13, 0, 1, 0, 0}, st2[STEPS] = {64, 32, 33, 1, 1, 29},
              st3[STEPS] = {0, 40, 28, 1, 1, 0};
    const int *steps[NS] = {st0, st1, st2, st3};
    kv_data d[NS];
    const kv_data *dp[NS];
    float *ob[NS], *oa[NS];
    for (int i = 0; i < NS; i++) {
        int N = 0;
        for (int s = 0; s < STEPS; s++) N += steps[i][s];
        d[i] = kvd_make(2, 4, 2, 64, N, 77 + i);
        dp[i] = &d[i];
        size_t n = (size_t)2 * N * 4 * 64;
        ob[i] = malloc(n * 4), oa[i] = malloc(n * 4);
    }
    for (int m = 0; m < 4; m++) {
        kv_cache *c = kvt_cache(modes[m], Rs[m], Ss[m], 2, 2, 64, 1000, NS + 1, 512);
        int ids[NS], junk;
        kv_seq_add(c, &junk); /* ids need not start at 0 */
        for (int i = 0; i < NS; i++) kv_seq_add(c, &ids[i]);
        kv_seq_remove(c, junk);
        omni_status st = kvt_feed_batch(c, NS, ids, dp, steps, STEPS, ob);
        CHECK(st == OMNI_OK, "%s batch: %s", modes[m], omni_last_error());
        for (int i = 0; i < NS; i++) CHECK(kv_seq_len(c, ids[i]) == d[i].N, "%s: seq %d length", modes[m], i);
        kv_free(c);
        int same = 1;
        for (int i = 0; i < NS; i++) {
            kv_cache *a = kvt_cache(modes[m], Rs[m], Ss[m], 2, 2, 64, 1000, 1, 512);
            int id;
            kv_seq_add(a, &id);
            CHECK(kvt_feed(a, id, &d[i], steps[i], STEPS, oa[i]) == OMNI_OK, "alone: %s", omni_last_error());
            same &= memcmp(oa[i], ob[i], (size_t)2 * d[i].N * 4 * 64 * 4) == 0;
            kv_free(a);
        }
        CHECK(same, "%s: batched sequences differ from each alone", modes[m]);
    }
    for (int i = 0; i < NS; i++) free(ob[i]), free(oa[i]), kvd_free(&d[i]);
}

int main(void) {
    test_formats();
    test_layer_mix();
    test_boundaries();
    test_batch();
    return check_exit();
}
