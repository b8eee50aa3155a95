/* test_kv_api.c - modes, names, per-layer overrides, validation of bad inputs (before any work), exact byte
 * accounting of pages (vs sizes computed here from the documented layout), int2 vs bf16 bytes per stored token,
 * capacity errors, API misuse, and the KV line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kv_test_util.h"

static void test_modes(void) {
    const struct {
        const char *mode, *name;
        kv_type k, v;
        int rot;
    } ok[] = {{"f32", "f32", KV_F32, KV_F32, 0},    {"fp32", "f32", KV_F32, KV_F32, 0},
              {"bf16", "bf16", KV_BF16, KV_BF16, 0}, {"int2", "int2", KV_Q2, KV_Q2, 1},
              {"int4", "int4", KV_Q4, KV_Q4, 1},     {"kivi2", "kivi2", KV_Q2, KV_Q2, 0},
              {"kivi4", "kivi4", KV_Q4, KV_Q4, 0},   {"k4v2", "k4v2", KV_Q4, KV_Q2, 1},
              {"k2v4", "k2v4", KV_Q2, KV_Q4, 1},     {"kivi-k4v2", "kivi-k4v2", KV_Q4, KV_Q2, 0},
              {"k2v2", "int2", KV_Q2, KV_Q2, 1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kv_format f;
        char buf[64];
        omni_status st = kv_parse_mode(ok[i].mode, &f);
        CHECK(st == OMNI_OK, "mode %s: %s", ok[i].mode, omni_last_error());
        CHECK(f.k_type == ok[i].k && f.v_type == ok[i].v && f.rotate == ok[i].rot && f.scale == ok[i].rot &&
                  f.window == 128 && f.n_sink == 0,
              "mode %s parsed wrong", ok[i].mode);
        CHECK(!strcmp(kv_format_name(&f, buf, sizeof buf), ok[i].name), "name of %s: %s", ok[i].mode, buf);
    }
    kv_format f;
    char buf[64];
    kv_parse_mode("int2", &f);
    f.rotate = 0;
    CHECK(!strcmp(kv_format_name(&f, buf, sizeof buf), "int2-norot"), "ablation name %s", buf);
    const char *bad[] = {"int3", "", "INT2", "k3v2", "kivi-", "bf16 ", "q4_0"};
    for (int i = 0; i < 7; i++) {
        omni_status st = kv_parse_mode(bad[i], &f);
        CHECK(st == OMNI_ERR_USAGE, "mode '%s' accepted", bad[i]);
        CHECK(strstr(omni_last_error(), "int2") && strstr(omni_last_error(), "kivi2") && strstr(omni_last_error(), "bf16"),
              "message does not list the modes: %s", omni_last_error());
    }
    CHECK(kv_parse_mode(NULL, &f) == OMNI_ERR_USAGE, "NULL mode accepted");
}

static void test_overrides(void) {
    kv_format base, out[28];
    kv_parse_mode("int2", &base);
    base.window = 64;
    CHECK(kv_parse_layer_overrides("0-3:int4,27:bf16", &base, 28, out) == OMNI_OK, "%s", omni_last_error());
    int ok = 1;
    for (int l = 0; l < 28; l++) {
        kv_type want = l <= 3 ? KV_Q4 : l == 27 ? KV_BF16 : KV_Q2;
        ok &= out[l].k_type == want && out[l].v_type == want && out[l].window == 64;
    }
    CHECK(ok, "overrides applied wrong");
    /* ... and a layer given twice (issue 15: "0:int2,0:int4" was accepted, the last silently winning) */
    const char *bad[] = {"5", "3-1:int2", "28:int2", "0:int3", "0-:int2", ":int2", "1:int2,", "a:bf16",
                         "0:int2,0:int4", "0-3:int4,2:bf16"};
    for (int i = 0; i < 10; i++) {
        omni_status st = kv_parse_layer_overrides(bad[i], &base, 28, out);
        CHECK(st == OMNI_ERR_USAGE, "override '%s' accepted", bad[i]);
    }
    CHECK(kv_parse_layer_overrides("", &base, 28, out) == OMNI_OK && out[5].k_type == KV_Q2, "empty spec");
    CHECK(kv_parse_layer_overrides("0:int2,0:int4", &base, 28, out) == OMNI_ERR_USAGE &&
              strstr(omni_last_error(), "layer 0 is already given"), "duplicate: %s", omni_last_error());
}

/* kv_init with one field changed must fail with a message containing `needle`. */
static void expect_bad(const char *mode, int window, int n_sink, int D, int n_layers, const char *needle) {
    kv_params p = kv_default_params();
    kv_parse_mode(mode, &p.fmt);
    p.fmt.window = window, p.fmt.n_sink = n_sink;
    p.n_layers = n_layers, p.n_kv_heads = 2, p.head_dim = D;
    kv_cache *c = (kv_cache *)&p; /* must be reset to NULL */
    omni_status st = kv_init(&p, &c);
    CHECK(st == OMNI_ERR_USAGE && c == NULL, "%s window %d sink %d D %d accepted", mode, window, n_sink, D);
    CHECK(strstr(omni_last_error(), needle) != NULL, "message '%s' lacks '%s'", omni_last_error(), needle);
}

static void test_bad_inputs(void) {
    expect_bad("int2", 100, 0, 128, 2, "window 100");
    expect_bad("int2", 288, 0, 128, 2, "window 288");
    expect_bad("bf16", -32, 0, 128, 2, "window -32");
    expect_bad("int2", 128, 0, 96, 2, "power of two");
    expect_bad("int4", 128, 0, 80, 2, "power of two");
    expect_bad("kivi2", 128, 0, 80, 2, "multiple of 32");
    expect_bad("int2", 128, 33, 128, 2, "n_sink");
    expect_bad("int2", 128, 0, 128, 0, "n_layers");
    kv_params p = kv_default_params();
    kv_cache *c = NULL;
    p.n_layers = 2, p.n_kv_heads = 2, p.head_dim = 80; /* f32 / bf16 / kivi with D = 96 are fine */
    CHECK(kv_init(&p, &c) == OMNI_OK, "f32 at D=80: %s", omni_last_error());
    kv_free(c);
    kv_parse_mode("kivi2", &p.fmt);
    p.head_dim = 96;
    CHECK(kv_init(&p, &c) == OMNI_OK, "kivi2 at D=96: %s", omni_last_error());
    kv_free(c);
    /* K quantized, V not; per-layer windows differ */
    kv_parse_mode("int2", &p.fmt);
    p.head_dim = 64;
    p.fmt.v_type = KV_BF16;
    CHECK(kv_init(&p, &c) == OMNI_ERR_USAGE && c == NULL, "K int2 + V bf16 accepted");
    kv_format lf[2];
    kv_parse_mode("int2", &lf[0]);
    lf[1] = lf[0];
    lf[1].window = 32;
    p.layer_fmt = lf;
    CHECK(kv_init(&p, &c) == OMNI_ERR_USAGE && strstr(omni_last_error(), "window"), "per-layer windows accepted");
    kv_free(NULL);
}

/* Pages a sequence of length L holds (independent of the implementation): raw (window + sink block) and quant. */
static void expect_pages(int64_t L, int R, int S, int quantizing, int64_t *raw, int64_t *q) {
    int64_t nb = (L + 31) / 32, nq = quantizing && L >= R ? (L - R) / 32 : 0;
    *q += nq;
    *raw += nb - nq + (quantizing && S > 0 && nq > 0 ? 1 : 0);
}

static void test_memory(void) {
    const int D = 128, Hkv = 8, NL = 3, Hq = 8;
    /* page sizes from the documented layout */
    const int64_t kblk2 = D * 32 * 2 / 8 + 2 * D * 2 + 32 * 2, vblk2 = 32 * D * 2 / 8 + 32 * (D / 32) * 2 * 2;
    const int64_t bf16_tok = (int64_t)NL * Hkv * D * 2 * 2, int2_tok = (int64_t)NL * Hkv * (kblk2 + vblk2) / 32;
    const struct {
        const char *mode;
        int R, S;
        int64_t raw_page, q_page;
    } cfg[] = {{"int2", 128, 0, 32 * bf16_tok, 32 * int2_tok}, {"int2", 0, 4, 32 * bf16_tok, 32 * int2_tok},
               {"bf16", 128, 0, 32 * bf16_tok, 0}, {"f32", 128, 0, 64 * bf16_tok, 0}};
    const int lens[3] = {300, 37, 161};
    for (int ci = 0; ci < 4; ci++) {
        kv_cache *c = kvt_cache(cfg[ci].mode, cfg[ci].R, cfg[ci].S, NL, Hkv, D, 4096, 4, 1024);
        CHECK(c != NULL, "init: %s", omni_last_error());
        if (!c) continue;
        int ids[3];
        int64_t raw = 0, q = 0;
        for (int i = 0; i < 3; i++) {
            kv_seq_add(c, &ids[i]);
            kv_data d = kvd_make(NL, Hq, Hkv, D, lens[i], 5 + i);
            float *out = malloc(sizeof(float) * NL * lens[i] * Hq * D);
            int sp[3] = {lens[i] / 2, lens[i] - lens[i] / 2 - 1, 1};
            CHECK(kvt_feed(c, ids[i], &d, sp, 3, out) == OMNI_OK, "feed: %s", omni_last_error());
            free(out);
            kvd_free(&d);
            expect_pages(lens[i], cfg[ci].R, cfg[ci].S, cfg[ci].q_page > 0, &raw, &q);
        }
        kv_usage u;
        kv_get_usage(c, &u);
        int64_t want = raw * cfg[ci].raw_page + q * cfg[ci].q_page;
        CHECK(u.raw_page_bytes == cfg[ci].raw_page && u.quant_page_bytes == cfg[ci].q_page,
              "%s: page bytes %lld/%lld, expected %lld/%lld", cfg[ci].mode, (long long)u.raw_page_bytes,
              (long long)u.quant_page_bytes, (long long)cfg[ci].raw_page, (long long)cfg[ci].q_page);
        CHECK(u.raw_pages == raw && u.quant_pages == q, "%s R=%d S=%d: pages %lld+%lld, expected %lld+%lld",
              cfg[ci].mode, cfg[ci].R, cfg[ci].S, (long long)u.raw_pages, (long long)u.quant_pages, (long long)raw,
              (long long)q);
        int64_t want_k = raw * cfg[ci].raw_page / 2 + (cfg[ci].q_page ? q * NL * Hkv * kblk2 : 0);
        int64_t want_v = raw * cfg[ci].raw_page / 2 + (cfg[ci].q_page ? q * NL * Hkv * vblk2 : 0);
        CHECK(u.total_bytes == want && u.k_bytes == want_k && u.v_bytes == want_v,
              "%s: bytes %lld (K %lld V %lld), expected %lld (K %lld V %lld)", cfg[ci].mode, (long long)u.total_bytes,
              (long long)u.k_bytes, (long long)u.v_bytes, (long long)want, (long long)want_k, (long long)want_v);
        CHECK(u.cells_used == 300 + 37 + 161 && u.n_seqs == 3 && u.cells_capacity == 4096 && u.n_layers == NL,
              "%s: usage counters", cfg[ci].mode);
        char line[256];
        kv_format_line(c, line, sizeof line);
        double mib = -1;
        char kt[16] = "", vt[16] = "";
        CHECK(sscanf(line, "kv_cache: size = %lf MiB ( %*d cells, %*d layers, %*d/%*d seqs), K (%15[^)]): %*f MiB, V (%15[^)])",
                     &mib, kt, vt) == 3,
              "KV line: %s", line);
        CHECK(fabs(mib - want / 1048576.0) < 0.006, "KV line size %.2f vs %.2f", mib, want / 1048576.0);
        CHECK(!strcmp(kt, cfg[ci].q_page ? "int2" : cfg[ci].mode), "KV line K type %s", kt);
        fprintf(stderr, "%s\n", line);
        kv_seq_clear(c, ids[0]);
        kv_get_usage(c, &u);
        int64_t r2 = 0, q2 = 0;
        expect_pages(37, cfg[ci].R, cfg[ci].S, cfg[ci].q_page > 0, &r2, &q2);
        expect_pages(161, cfg[ci].R, cfg[ci].S, cfg[ci].q_page > 0, &r2, &q2);
        CHECK(u.raw_pages == r2 && u.quant_pages == q2 && kv_seq_len(c, ids[0]) == 0, "clear did not free pages");
        kv_seq_remove(c, ids[1]);
        kv_seq_remove(c, ids[2]);
        kv_get_usage(c, &u);
        CHECK(u.total_bytes == 0 && u.n_seqs == 1 && kv_seq_len(c, ids[1]) == -1, "remove did not free pages");
        kv_free(c);
    }
    double ratio = (double)int2_tok / bf16_tok;
    printf("int2 vs bf16 bytes per stored token (d=128, window excluded): %lld / %lld = %.3f (%.2fx smaller)\n",
           (long long)int2_tok, (long long)bf16_tok, ratio, 1.0 / ratio);
    CHECK(ratio <= 0.2, "int2/bf16 = %.3f", ratio);
}

static void test_capacity_and_misuse(void) {
    kv_cache *c = kvt_cache("int2", 32, 0, 2, 2, 64, 100, 2, 64);
    int a, b, x;
    kv_seq_add(c, &a);
    kv_seq_add(c, &b);
    CHECK(kv_seq_add(c, &x) == OMNI_ERR_NOMEM, "max_seqs not enforced");
    kv_data d = kvd_make(2, 4, 2, 64, 100, 1);
    float *out = malloc(sizeof(float) * 2 * 100 * 4 * 64);
    int sp[2] = {64, 30};
    CHECK(kvt_feed(c, a, &d, sp, 2, out) == OMNI_OK, "%s", omni_last_error());
    int n = 7, ids2[2] = {a, a}, n2[2] = {1, 1};
    omni_status st = kv_forward(c, 0, 1, &a, &n, d.q, d.k, d.v, out, 4, 0.125f);
    CHECK(st == OMNI_ERR_NOMEM && kv_seq_len(c, a) == 94, "over max_tokens: %d %s", st, omni_last_error());
    n = 6;
    CHECK(kv_forward(c, 2, 1, &a, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_USAGE, "bad layer accepted");
    CHECK(kv_forward(c, 0, 1, &a, &n, d.q, d.k, d.v, out, 3, 0.125f) == OMNI_ERR_USAGE, "Hq 3 accepted");
    CHECK(kv_forward(c, 0, 2, ids2, n2, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_USAGE, "duplicate ids accepted");
    int bad = 5;
    CHECK(kv_forward(c, 0, 1, &bad, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_USAGE, "bad id accepted");
    n = 65;
    CHECK(kv_forward(c, 0, 1, &b, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_USAGE, "T > max_chunk accepted");
    n = 1;
    CHECK(kv_commit(c, 1, &b, &n) == OMNI_ERR_USAGE, "commit without forward accepted");
    CHECK(kv_forward(c, 0, 1, &a, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_OK, "%s", omni_last_error());
    n = 2;
    CHECK(kv_forward(c, 1, 1, &a, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_USAGE, "changed n_new in a step");
    n = 1;
    CHECK(kv_forward(c, 1, 1, &a, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_OK, "%s", omni_last_error());
    CHECK(kv_commit(c, 1, &a, &n) == OMNI_OK && kv_seq_len(c, a) == 95, "commit: %s", omni_last_error());
    /* max_tokens is shared by all sequences: b gets the 5 cells left, not 6 */
    n = 6;
    CHECK(kv_forward(c, 0, 1, &b, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_NOMEM, "over the shared capacity");
    n = 5;
    CHECK(kv_forward(c, 0, 1, &b, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_OK, "%s", omni_last_error());
    CHECK(kv_forward(c, 1, 1, &b, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_OK, "%s", omni_last_error());
    kv_commit(c, 1, &b, &n);
    kv_seq_remove(c, a);
    n = 64;
    CHECK(kv_forward(c, 0, 1, &b, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_OK, "pages not reusable: %s",
          omni_last_error());
    free(out);
    kvd_free(&d);
    kv_free(c);
}

/* kv_reserve (bookkeeping for device runners): reserves like the first kv_forward, kv_commit ends the step, the
 * same limits apply, and the page accounting equals a cache fed through kv_forward. */
static void test_reserve(void) {
    kv_cache *c = kvt_cache("bf16", 32, 0, 2, 2, 64, 100, 2, 64), *ref = kvt_cache("bf16", 32, 0, 2, 2, 64, 100, 2, 64);
    int a, b, ra;
    kv_seq_add(c, &a), kv_seq_add(c, &b), kv_seq_add(ref, &ra);
    int n = 40, ids2[2] = {a, a}, n2[2] = {1, 1};
    CHECK(kv_reserve(c, 1, &a, &n) == OMNI_OK && kv_seq_len(c, a) == 0, "reserve: %s", omni_last_error());
    CHECK(kv_reserve(c, 1, &a, &n) == OMNI_OK, "a second reserve of the same step: %s", omni_last_error());
    CHECK(kv_commit(c, 1, &a, &n) == OMNI_OK && kv_seq_len(c, a) == 40, "commit after reserve: %s", omni_last_error());
    kv_data d = kvd_make(2, 4, 2, 64, 100, 1);
    float *out = malloc(sizeof(float) * 2 * 100 * 4 * 64);
    int sp[1] = {40};
    CHECK(kvt_feed(ref, ra, &d, sp, 1, out) == OMNI_OK, "%s", omni_last_error());
    kv_usage uc, ur;
    kv_get_usage(c, &uc), kv_get_usage(ref, &ur);
    CHECK(uc.raw_pages == ur.raw_pages && uc.total_bytes == ur.total_bytes && uc.cells_used == ur.cells_used,
          "reserve/commit pages %lld bytes %lld != kv_forward's %lld %lld", (long long)uc.raw_pages,
          (long long)uc.total_bytes, (long long)ur.raw_pages, (long long)ur.total_bytes);
    CHECK(kv_reserve(c, 2, ids2, n2) == OMNI_ERR_USAGE, "duplicate ids accepted");
    n = 65;
    CHECK(kv_reserve(c, 1, &b, &n) == OMNI_ERR_USAGE, "T > max_chunk accepted");
    n = 61;
    CHECK(kv_reserve(c, 1, &b, &n) == OMNI_ERR_NOMEM && kv_seq_len(c, b) == 0, "over max_tokens accepted");
    /* the same bookkeeping without storage: equal accounting, kv_forward refused */
    kv_params ap = kv_default_params();
    kv_parse_mode("bf16", &ap.fmt);
    ap.fmt.window = 32, ap.n_layers = 2, ap.n_kv_heads = 2, ap.head_dim = 64, ap.max_tokens = 100, ap.max_seqs = 2;
    ap.max_chunk = 64;
    kv_cache *acc = NULL;
    int aa = -1;
    n = 40;
    CHECK(kv_init_accounting(&ap, &acc) == OMNI_OK && kv_seq_add(acc, &aa) == OMNI_OK, "%s", omni_last_error());
    CHECK(kv_reserve(acc, 1, &aa, &n) == OMNI_OK && kv_commit(acc, 1, &aa, &n) == OMNI_OK, "%s", omni_last_error());
    kv_usage ua;
    kv_get_usage(acc, &ua);
    CHECK(ua.raw_pages == ur.raw_pages && ua.total_bytes == ur.total_bytes && ua.pool_bytes == ur.pool_bytes,
          "accounting-only cache: pages %lld bytes %lld pool %lld, want %lld %lld %lld", (long long)ua.raw_pages,
          (long long)ua.total_bytes, (long long)ua.pool_bytes, (long long)ur.raw_pages, (long long)ur.total_bytes,
          (long long)ur.pool_bytes);
    CHECK(kv_forward(acc, 0, 1, &aa, &n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_ERR_USAGE, "kv_forward accepted");
    kv_free(acc);
    free(out);
    kvd_free(&d);
    kv_free(c), kv_free(ref);
}

int main(void) {
    test_reserve();
    test_modes();
    test_overrides();
    test_bad_inputs();
    test_memory();
    test_capacity_and_misuse();
    return check_exit();
}
