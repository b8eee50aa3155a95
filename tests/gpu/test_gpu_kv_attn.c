/* test_gpu_kv_attn.c - GPU decode attention (kvc_decode, and the SIMT oracle kvc_decode_ref) over the paged cache
 * against an f64 evaluation over exactly the stored (dequantized) history, and against the CPU cache's
 * kv_forward for the same step.
 *
 * Per case: a batch of sequences (lengths cycling through awkward values: 1, 31, 32, 33, 127, 1025, 3000 ...)
 * stored as the cache stores them (attn_test_util.h: rotated, bf16-rounded, quantized beyond the window, sinks
 * raw, shuffled pages, unused raw rows bf16 NaN) and read through a kv_layer_view, batch entry i = slot n-1-i; the output buffer is NaN-filled with canaries
 * after it. Checks: every output finite, canaries untouched, and the accuracy policy (performance.md section 4)
 * for both kernels per case: max |err| <= 1e-2 max |ref| and RMS err <= 3e-3 RMS ref. kv_forward cross-check
 * (CPU cache fed the same history, then the new token; compared where the window split is the same before and
 * after the step): the same policy.
 * Without a GPU: SKIP (77). Built against the CPU emulator (tests/gpu/emu) as test_emu_kv_attn: the same cases
 * at short lengths (argument --short), run in CI.
 * --full: also the long cases (batch 48 of up to 4096-token sequences, 256 sequences; the H200 run);
 * --tiny: two small cases (for compute-sanitizer racecheck). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_test_util.h"
#include "check.h"
#include "kvcache/kv_dev.h"

typedef struct {
    const char *mode;
    int R, S, Hq, Hkv, D, bf16q; /* bf16q: a bf16 layer inside a quantizing cache */
    int n_seq;
    const int64_t *lens; /* cycled */
    int n_lens;
    int tni;       /* a few keys with 20-50x smaller norms (attention sinks) */
    int cpu_check; /* also compare with kv_forward */
} dcase;

static int g_short = 0, g_keep_len = 0; /* g_keep_len: lengths as given under --short too */
/* Kernel configurations (kvc_attn_parse_config) run on each case besides the default, same inputs and checks:
 * every compiled variant and the run-time split / residency options, bf16 layers also through every variant of the
 * dedicated bf16 kernel (:b1..:b4) (OMNI_KVC_CONFIGS: a comma-separated list
 * instead; the emulator run takes them on the first cases only). */
static char g_cfgs[512] = "base:b0,q2r1,q3r2:b0,q6r3,q4r1,x2,x2b3,p1,base:w2:b0,base:w4,q4r1:c3,"
                          "x2b3:w2:c2,auto:b1,auto:b2,auto:b3,auto:b4";
static int g_cfg_cases = 1 << 30; /* cases that run them */

/* kv_forward of the last token of each sequence over its first L - 1 tokens (CPU cache, same format). */
static void cpu_decode(const dcase *t, const atu_layout *y, int n, const int64_t *len, float *const *k, float *const *v,
                       const uint16_t *q, float *out) {
    kv_format f;
    kv_parse_mode(t->mode, &f);
    f.window = t->R, f.n_sink = y->kbits != 16 ? t->S : 0;
    kv_params p = kv_default_params();
    p.fmt = f, p.n_layers = 1, p.n_kv_heads = t->Hkv, p.head_dim = t->D, p.max_seqs = n, p.max_chunk = 1024;
    p.max_tokens = 0;
    for (int s = 0; s < n; s++) p.max_tokens += len[s] + 64;
    kv_cache *c = NULL;
    if (kv_init(&p, &c)) {
        fprintf(stderr, "kv_init: %s\n", omni_last_error());
        exit(1);
    }
    const int D = t->D, Hq = t->Hq, Hkv = t->Hkv;
    float *qb = malloc((size_t)1024 * Hq * D * 4), *ob = malloc((size_t)1024 * Hq * D * 4);
    int *ids = malloc((size_t)n * sizeof(int)), *ones = malloc((size_t)n * sizeof(int));
    for (int s = 0; s < n; s++) {
        kv_seq_add(c, &ids[s]);
        ones[s] = 1;
        for (int64_t t0 = 0; t0 < len[s] - 1; t0 += 1024) {
            int m = (int)(len[s] - 1 - t0 < 1024 ? len[s] - 1 - t0 : 1024);
            memset(qb, 0, (size_t)m * Hq * D * 4); /* the history's own outputs are not checked */
            omni_status st = kv_forward(c, 0, 1, &ids[s], &m, qb, k[s] + (size_t)t0 * Hkv * D, v[s] + (size_t)t0 * Hkv * D,
                                        ob, Hq, 1.0f / sqrtf((float)D));
            if (!st) st = kv_commit(c, 1, &ids[s], &m);
            if (st) {
                fprintf(stderr, "cpu prefill: %s\n", omni_last_error());
                exit(1);
            }
        }
    }
    float *qa = malloc((size_t)n * Hq * D * 4), *ka = malloc((size_t)n * Hkv * D * 4), *va = malloc((size_t)n * Hkv * D * 4);
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < Hq * D; i++) qa[(size_t)s * Hq * D + i] = omni_bf16_to_f32(q[(size_t)s * Hq * D + i]);
        memcpy(ka + (size_t)s * Hkv * D, k[s] + (size_t)(len[s] - 1) * Hkv * D, (size_t)Hkv * D * 4);
        memcpy(va + (size_t)s * Hkv * D, v[s] + (size_t)(len[s] - 1) * Hkv * D, (size_t)Hkv * D * 4);
    }
    if (kv_forward(c, 0, n, ids, ones, qa, ka, va, out, Hq, 1.0f / sqrtf((float)D))) {
        fprintf(stderr, "cpu decode: %s\n", omni_last_error());
        exit(1);
    }
    kv_free(c);
    free(qb), free(ob), free(ids), free(ones), free(qa), free(ka), free(va);
}

static void report(const char *what, const dcase *t, const atu_err *e, int Hq, int D, const int64_t *len) {
    const int64_t w = e->worst < 0 ? 0 : e->worst;
    const int s = (int)(w / ((int64_t)Hq * D)), h = (int)(w / D % Hq), c = (int)(w % D);
    fprintf(stderr, "  %-9s %-6s R %3d S %d Hq %2d Hkv %d D %3d seqs %2d: max err %.3g of max %.3g (%.2e), rms %.2e, "
            "nonfinite %lld; worst seq %d (len %lld) head %d ch %d\n", what, t->mode, t->R, t->S, t->Hq, t->Hkv, t->D,
            t->n_seq, e->max_err, e->max_ref, atu_max_ratio(e), atu_rms_ratio(e), (long long)e->nonfinite, s,
            (long long)len[s], h, c);
}

/* The case once more with every configuration of g_cfgs (fresh workspace, NaN-filled output with canaries). */
static void config_runs(const dcase *t, const kv_layer_view *view, const int32_t *dslots, const uint16_t *dq,
                        uint16_t *dout, uint16_t *out, const double *ref, const int64_t *len) {
    const int n = t->n_seq, Hq = t->Hq, D = t->D;
    const size_t no = (size_t)n * Hq * D;
    char list[sizeof g_cfgs], *save = NULL;
    memcpy(list, g_cfgs, sizeof list);
    double worst = 0.0, worst_rms = 0.0;
    int runs = 0;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        kvc_attn_params p;
        kvc_attn *a = NULL;
        CHECK(kvc_attn_parse_config(name, &p) == OMNI_OK, "%s", omni_last_error());
        CHECK(kvc_attn_init_ex(n, Hq, t->Hkv, D, &p, &a) == OMNI_OK, "init %s: %s", name, omni_last_error());
        if (!a) continue;
        ATU_CU(cudaMemset(dout, 0xff, (no + 64) * 2));
        CHECK(kvc_decode(a, view, n, dslots, NULL, dq, dout, 1.0f / sqrtf((float)D), NULL) == OMNI_OK,
              "kvc_decode %s: %s", name, omni_last_error());
        ATU_CU(cudaDeviceSynchronize());
        ATU_CU(cudaGetLastError());
        ATU_CU(cudaMemcpy(out, dout, (no + 64) * 2, cudaMemcpyDeviceToHost));
        int canary = 0;
        for (int i = 0; i < 64; i++) canary += out[no + i] != 0xffff;
        atu_err e = atu_err_init();
        atu_err_add(&e, out, ref, (int64_t)no, 0);
        if (!atu_policy_ok(&e)) report(name, t, &e, Hq, D, len);
        CHECK(canary == 0 && atu_policy_ok(&e), "%s R %d S %d %d/%d D %d config %s (%d CTAs): %d canaries, outside the "
              "policy: max %.2e rms %.2e", t->mode, t->R, t->S, Hq, t->Hkv, D, name, kvc_decode_ctas(a, view, n),
              canary, atu_max_ratio(&e), atu_rms_ratio(&e));
        worst = fmax(worst, atu_max_ratio(&e)), worst_rms = fmax(worst_rms, atu_rms_ratio(&e));
        runs++;
        kvc_attn_free(a);
    }
    printf("       %d other kernel configurations: worst max %.2e rms %.2e\n", runs, worst, worst_rms);
}

static void run_case(const dcase *t, uint64_t seed) {
    const int n = t->n_seq, Hq = t->Hq, Hkv = t->Hkv, D = t->D, gs = Hq / Hkv;
    const atu_layout y = atu_make_layout(t->mode, Hkv, D, t->R, t->S, t->bf16q);
    int64_t *len = malloc((size_t)n * sizeof(int64_t));
    float **k = malloc((size_t)n * sizeof(float *)), **v = malloc((size_t)n * sizeof(float *));
    rng_t r = {seed};
    for (int s = 0; s < n; s++) {
        len[s] = t->lens[s % t->n_lens];
        if (g_short && !g_keep_len && len[s] > 300) len[s] = 300 - (len[s] % 97);
        k[s] = malloc((size_t)(len[s] + 1) * Hkv * D * 4);
        v[s] = malloc((size_t)(len[s] + 1) * Hkv * D * 4);
        for (int64_t i = 0; i < len[s] * Hkv * D; i++) k[s][i] = rng_normal(&r), v[s][i] = rng_normal(&r);
        if (t->tni) /* tokens 0..3 of every head: small keys (attention sinks) */
            for (int64_t i = 0; i < (len[s] < 4 ? len[s] : 4) * Hkv * D; i++) k[s][i] *= 0.02f + 0.01f * (float)(i % 3);
    }
    uint16_t *q = malloc((size_t)n * Hq * D * 2); /* batch order: entry i is slot slot_of[i] = n - 1 - i */
    atu_rand_bf16(q, (size_t)n * Hq * D, &r, 1.0f);
    int32_t *slot_of = malloc((size_t)n * 4), *ones = malloc((size_t)n * 4), *dslots, *dnew, *dlen1;
    for (int i = 0; i < n; i++) slot_of[i] = n - 1 - i, ones[i] = 1;
    ATU_CU(cudaMalloc((void **)&dslots, (size_t)n * 4));
    ATU_CU(cudaMalloc((void **)&dnew, (size_t)n * 4));
    ATU_CU(cudaMemcpy(dslots, slot_of, (size_t)n * 4, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dnew, ones, (size_t)n * 4, cudaMemcpyHostToDevice));
    atu_cache c = atu_build(&y, n, len, k, v, seed ^ 0x5bd1e995u);
    kv_layer_view view, view1;
    atu_dev dev = atu_upload(&c, &view);
    /* the oracle reads lengths L - 1 plus n_new = 1 (kv_dev's convention: committed + appended this step) */
    for (int i = 0; i < n; i++) ones[i] = (int32_t)len[i] - 1;
    ATU_CU(cudaMalloc((void **)&dlen1, (size_t)n * 4));
    ATU_CU(cudaMemcpy(dlen1, ones, (size_t)n * 4, cudaMemcpyHostToDevice));
    view1 = view, view1.len = dlen1;
    const size_t no = (size_t)n * Hq * D;
    uint16_t *dq, *dout, *dref, *out = malloc((no + 64) * 2), *oref = malloc((no + 64) * 2);
    ATU_CU(cudaMalloc((void **)&dq, no * 2));
    ATU_CU(cudaMalloc((void **)&dout, (no + 64) * 2));
    ATU_CU(cudaMalloc((void **)&dref, (no + 64) * 2));
    ATU_CU(cudaMemcpy(dq, q, no * 2, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemset(dout, 0xff, (no + 64) * 2)); /* NaN everywhere; the tail is the canary */
    ATU_CU(cudaMemset(dref, 0xff, (no + 64) * 2));
    kvc_attn *a = NULL;
    CHECK(kvc_attn_init(n, Hq, Hkv, D, &a) == OMNI_OK, "init: %s", omni_last_error());
    if (!a) return;
    const float scale = 1.0f / sqrtf((float)D);
    CHECK(kvc_decode(a, &view, n, dslots, NULL, dq, dout, scale, NULL) == OMNI_OK, "kvc_decode: %s", omni_last_error());
    CHECK(kvc_decode_ref(a, &view1, n, dslots, dnew, dq, dref, scale, NULL) == OMNI_OK, "kvc_decode_ref: %s",
          omni_last_error());
    ATU_CU(cudaDeviceSynchronize());
    ATU_CU(cudaGetLastError());
    ATU_CU(cudaMemcpy(out, dout, (no + 64) * 2, cudaMemcpyDeviceToHost));
    ATU_CU(cudaMemcpy(oref, dref, (no + 64) * 2, cudaMemcpyDeviceToHost));
    int canary = 0;
    for (int i = 0; i < 64; i++) canary += (out[no + i] != 0xffff) + (oref[no + i] != 0xffff);
    CHECK(canary == 0, "%s: %d canary values overwritten", t->mode, canary);
    /* f64 references */
    double *ref = malloc(no * 8);
    for (int i = 0; i < n; i++) {
        const int s = slot_of[i];
        float *K = malloc((size_t)(len[s] + 1) * D * 4), *V = malloc((size_t)(len[s] + 1) * D * 4);
        for (int g = 0; g < Hkv; g++) {
            atu_seq_kv(&c, s, g, len[s], K, V);
            for (int h = g * gs; h < (g + 1) * gs; h++)
                atu_ref_attn(q + ((size_t)i * Hq + h) * D, K, V, len[s], D, y.rot, scale, ref + ((size_t)i * Hq + h) * D);
        }
        free(K), free(V);
    }
    atu_err ef = atu_err_init(), er = atu_err_init();
    atu_err_add(&ef, out, ref, (int64_t)no, 0);
    atu_err_add(&er, oref, ref, (int64_t)no, 0);
    const int okf = atu_policy_ok(&ef), okr = atu_policy_ok(&er);
    printf("%-6s%s R %3d S %d Hq %2d Hkv %d D %3d seqs %2d%s ctas %4d: fast max %.2e rms %.2e | oracle max %.2e rms %.2e\n",
           t->mode, t->bf16q ? "(q)" : "   ", t->R, t->S, Hq, Hkv, D, n, t->tni ? " tni" : "    ",
           kvc_decode_ctas(a, &view, n), atu_max_ratio(&ef), atu_rms_ratio(&ef), atu_max_ratio(&er), atu_rms_ratio(&er));
    if (!okf) report("fast", t, &ef, Hq, D, len);
    if (!okr) report("oracle", t, &er, Hq, D, len);
    CHECK(okf, "%s R %d S %d %d/%d D %d: kvc_decode outside the accuracy policy (if only quantized formats fail, "
          "check f16 subnormal MMA operands)", t->mode, t->R, t->S, Hq, Hkv, D);
    CHECK(okr, "%s R %d S %d %d/%d D %d: kvc_decode_ref outside the accuracy policy", t->mode, t->R, t->S, Hq, Hkv, D);
    if (g_cfg_cases > 0) {
        g_cfg_cases--;
        config_runs(t, &view, dslots, dq, dout, out, ref, len);
    }
    if (t->cpu_check) { /* kv_forward in slot order */
        float *co = malloc(no * 4);
        uint16_t *qs = malloc(no * 2);
        for (int i = 0; i < n; i++) memcpy(qs + (size_t)slot_of[i] * Hq * D, q + (size_t)i * Hq * D, (size_t)Hq * D * 2);
        cpu_decode(t, &y, n, len, k, v, qs, co);
        atu_err ec = atu_err_init();
        int compared = 0;
        for (int i = 0; i < n; i++) {
            const int s = slot_of[i];
            if (atu_nq(&y, len[s] - 1) != atu_nq(&y, len[s])) continue; /* the step flushes a block */
            double *rd = malloc((size_t)Hq * D * 8);
            for (int j = 0; j < Hq * D; j++) rd[j] = co[(size_t)s * Hq * D + j];
            atu_err_add(&ec, out + (size_t)i * Hq * D, rd, (int64_t)Hq * D, (int64_t)i * Hq * D);
            free(rd);
            compared++;
        }
        free(qs);
        printf("       vs kv_forward (%d of %d sequences): max %.2e rms %.2e\n", compared, n, atu_max_ratio(&ec),
               atu_rms_ratio(&ec));
        if (!atu_policy_ok(&ec)) report("kv_forward", t, &ec, Hq, D, len);
        CHECK(compared == 0 || atu_policy_ok(&ec), "%s: kvc_decode vs kv_forward outside the policy", t->mode);
        free(co);
    }
    kvc_attn_free(a);
    cudaFree(dq), cudaFree(dout), cudaFree(dref), cudaFree(dslots), cudaFree(dnew), cudaFree(dlen1);
    free(slot_of), free(ones);
    atu_dev_free(&dev);
    atu_free(&c);
    for (int s = 0; s < n; s++) free(k[s]), free(v[s]);
    free(k), free(v), free(len), free(q), free(out), free(oref), free(ref);
}

/* Argument errors come back before any launch. */
static void bad_args(void) {
    kvc_attn *a = NULL;
    CHECK(kvc_attn_init(0, 32, 8, 128, &a) != OMNI_OK && !a, "max_seqs 0 accepted");
    CHECK(kvc_attn_init(1, 32, 8, 96, &a) != OMNI_OK && !a, "head_dim 96 accepted");
    CHECK(kvc_attn_init(1, 30, 8, 128, &a) != OMNI_OK && !a, "30 q heads over 8 kv heads accepted");
    CHECK(kvc_attn_init(300, 32, 8, 128, &a) != OMNI_OK && !a, "300 sequences accepted");
    CHECK(kvc_attn_init(2, 8, 2, 64, &a) == OMNI_OK, "init: %s", omni_last_error());
    kv_layer_view v;
    memset(&v, 0, sizeof v);
    v.n_kv_heads = 2, v.head_dim = 64, v.quant = 1, v.kbits = 3, v.vbits = 2, v.k_esz = v.v_esz = 2;
    uint16_t dummy[16];
    CHECK(kvc_decode(a, &v, 1, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_ERR_USAGE, "3-bit keys accepted");
    v.kbits = 2, v.head_dim = 128;
    CHECK(kvc_decode(a, &v, 1, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_ERR_USAGE, "head_dim mismatch accepted");
    v.head_dim = 64, v.k_esz = 4;
    CHECK(kvc_decode(a, &v, 1, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_ERR_USAGE, "f32 raw rows accepted");
    v.k_esz = 2;
    CHECK(kvc_decode(a, &v, 3, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_ERR_USAGE, "3 sequences on a 2-sequence workspace");
    CHECK(kvc_decode(a, &v, 1, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_ERR_USAGE, "NULL pools accepted");
    v.raw_kh = 8;
    CHECK(kvc_decode(a, &v, 1, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_ERR_USAGE, "unaligned head stride accepted");
    v.raw_kh = 0;
    CHECK(kvc_decode(a, &v, 0, NULL, NULL, dummy, dummy, 1.0f, NULL) == OMNI_OK, "empty batch refused");
    kvc_attn_free(a);
    kvc_attn_free(NULL);
    /* kernel configurations */
    kvc_attn_params p;
    const char *bad[] = {"", "nope", "base:", "base:w", "base:w0", "base:w5", "base:c0", "base:x2", "base:w2x", "q4r1:",
                         "basex", "base:mm2", "base:b5", "base:b"};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++)
        CHECK(kvc_attn_parse_config(bad[i], &p) == OMNI_ERR_USAGE, "configuration '%s' accepted", bad[i]);
    CHECK(kvc_attn_parse_config("q3r2:w2:c3:m", &p) == OMNI_OK && p.variant == 2 && p.waves == 2 &&
          p.ctas_per_sm == 3 && p.magic == 1, "q3r2:w2:c3:m parsed as %d %d %d %d", p.variant, p.waves, p.ctas_per_sm,
          p.magic);
    CHECK(kvc_attn_parse_config("base", &p) == OMNI_OK && p.variant == 0 && p.waves == 1 && !p.ctas_per_sm && !p.magic &&
          p.bf16 == 0, "base parsed wrong");
    CHECK(kvc_attn_parse_config("auto:b1", &p) == OMNI_OK && p.bf16 == 1, "auto:b1 parsed wrong");
    CHECK(kvc_attn_parse_config("q3r2:b4:w2", &p) == OMNI_OK && p.bf16 == 4 && p.waves == 2, "q3r2:b4:w2 parsed wrong");
    for (int v = 0; kvc_attn_variant_name(v); v++)
        CHECK(kvc_attn_parse_config(kvc_attn_variant_name(v), &p) == OMNI_OK && p.variant == v, "variant %d", v);
    CHECK(!kvc_attn_variant_name(-1) && kvc_attn_variant_name(0) && !strcmp(kvc_attn_variant_name(0), "base"),
          "variant names");
    CHECK(!strcmp(kvc_attn_variant_name(kvc_attn_default_params().variant), "auto"), "the default is not auto");
    p = kvc_attn_default_params();
    p.variant = 99;
    CHECK(kvc_attn_init_ex(1, 32, 8, 128, &p, &a) == OMNI_ERR_USAGE && !a, "variant 99 accepted");
    p = kvc_attn_default_params();
    p.waves = 0;
    CHECK(kvc_attn_init_ex(1, 32, 8, 128, &p, &a) == OMNI_ERR_USAGE && !a, "0 waves accepted");
}

#ifndef ATTN_TEST_EMU
/* Graph capture: kvc_decode captured once, replayed over two different caches written into the same device
 * buffers (lengths, tables and pages change; the launch does not) gives exactly the direct calls' outputs. */
static void graph_case(void) {
    const int n = 3, Hq = 32, Hkv = 8, D = 128;
    const atu_layout y = atu_make_layout("int2", Hkv, D, 128, 0, 0);
    const int64_t la[3] = {100, 2000, 33}, lb[3] = {3000, 1, 700};
    rng_t r = {99};
    float *k[3], *v[3];
    for (int s = 0; s < n; s++) {
        k[s] = malloc((size_t)3000 * Hkv * D * 4), v[s] = malloc((size_t)3000 * Hkv * D * 4);
        for (int64_t i = 0; i < (int64_t)3000 * Hkv * D; i++) k[s][i] = rng_normal(&r), v[s][i] = rng_normal(&r);
    }
    atu_cache ca = atu_build(&y, n, la, k, v, 5), cb = atu_build(&y, n, lb, k, v, 6);
    kv_layer_view va, vb;
    atu_dev da = atu_upload(&ca, &va), db = atu_upload(&cb, &vb);
    /* the graph reads da's buffers: make them large enough for cb, then compare */
    const size_t qmax = (size_t)(ca.nqp > cb.nqp ? ca.nqp : cb.nqp) * y.qpage, rmax = (size_t)(ca.nrp > cb.nrp ? ca.nrp : cb.nrp) * y.rpage;
    const int stride = ca.tab_stride > cb.tab_stride ? ca.tab_stride : cb.tab_stride;
    uint8_t *gq, *gr;
    int32_t *gqt, *grt, *glen;
    ATU_CU(cudaMalloc((void **)&gq, qmax));
    ATU_CU(cudaMalloc((void **)&gr, rmax));
    ATU_CU(cudaMalloc((void **)&gqt, (size_t)n * stride * 4));
    ATU_CU(cudaMalloc((void **)&grt, (size_t)n * stride * 4));
    ATU_CU(cudaMalloc((void **)&glen, (size_t)n * 4));
    kv_layer_view vg = va;
    vg.quant_pool = gq, vg.raw_pool = gr, vg.quant_tab = gqt, vg.raw_tab = grt, vg.len = glen, vg.tab_stride = stride;
    const size_t no = (size_t)n * Hq * D;
    uint16_t *q = malloc(no * 2), *o1 = malloc(no * 2), *o2 = malloc(no * 2), *dq, *dout, *dref;
    atu_rand_bf16(q, no, &r, 1.0f);
    ATU_CU(cudaMalloc((void **)&dq, no * 2));
    ATU_CU(cudaMalloc((void **)&dout, no * 2));
    ATU_CU(cudaMalloc((void **)&dref, no * 2));
    ATU_CU(cudaMemcpy(dq, q, no * 2, cudaMemcpyHostToDevice));
    kvc_attn *a = NULL;
    CHECK(kvc_attn_init(n, Hq, Hkv, D, &a) == OMNI_OK, "init: %s", omni_last_error());
    cudaStream_t st;
    ATU_CU(cudaStreamCreate(&st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ATU_CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    omni_status cs = kvc_decode(a, &vg, n, NULL, NULL, dq, dout, 0.088f, st);
    ATU_CU(cudaStreamEndCapture(st, &graph));
    CHECK(cs == OMNI_OK, "kvc_decode under capture: %s", omni_last_error());
    ATU_CU(cudaGraphInstantiate(&exec, graph, 0));
    const atu_cache *cc[2] = {&ca, &cb};
    const kv_layer_view *vv[2] = {&va, &vb};
    const atu_dev *dd[2] = {&da, &db};
    for (int pass = 0; pass < 2; pass++) {
        const atu_cache *c = cc[pass];
        int32_t *tq = malloc((size_t)n * stride * 4), *tr = malloc((size_t)n * stride * 4), l32[3];
        for (int s = 0; s < n; s++) {
            l32[s] = (int32_t)c->len[s];
            for (int b = 0; b < stride; b++) {
                tq[s * stride + b] = b < c->tab_stride ? c->qtab[s * c->tab_stride + b] : -1;
                tr[s * stride + b] = b < c->tab_stride ? c->rtab[s * c->tab_stride + b] : -1;
            }
        }
        ATU_CU(cudaMemcpy(gq, c->qpool, (size_t)c->nqp * y.qpage, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(gr, c->rpool, (size_t)c->nrp * y.rpage, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(gqt, tq, (size_t)n * stride * 4, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(grt, tr, (size_t)n * stride * 4, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(glen, l32, (size_t)n * 4, cudaMemcpyHostToDevice));
        ATU_CU(cudaGraphLaunch(exec, st));
        ATU_CU(cudaStreamSynchronize(st));
        CHECK(kvc_decode(a, vv[pass], n, NULL, NULL, dq, dref, 0.088f, st) == OMNI_OK, "direct: %s", omni_last_error());
        ATU_CU(cudaStreamSynchronize(st));
        ATU_CU(cudaMemcpy(o1, dout, no * 2, cudaMemcpyDeviceToHost));
        ATU_CU(cudaMemcpy(o2, dref, no * 2, cudaMemcpyDeviceToHost));
        int diff = 0;
        for (size_t i = 0; i < no; i++) diff += o1[i] != o2[i];
        printf("graph replay %d (lengths %lld %lld %lld): %d of %zu outputs differ from the direct call\n", pass,
               (long long)c->len[0], (long long)c->len[1], (long long)c->len[2], diff, no);
        CHECK(diff == 0, "graph replay %d differs from the direct call in %d outputs", pass, diff);
        free(tq), free(tr);
        (void)dd;
    }
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(st);
    kvc_attn_free(a);
    cudaFree(gq), cudaFree(gr), cudaFree(gqt), cudaFree(grt), cudaFree(glen), cudaFree(dq), cudaFree(dout), cudaFree(dref);
    atu_dev_free(&da), atu_dev_free(&db), atu_free(&ca), atu_free(&cb);
    for (int s = 0; s < n; s++) free(k[s]), free(v[s]);
    free(q), free(o1), free(o2);
}
#endif

/* The device cache end to end: kv_dev (kvpool's device pages, tables and append/flush kernels) and the CPU cache
 * take the same steps (prefill chunks, then decode tokens) with the same bf16 values; every step's attention is
 * computed on the GPU from kv_dev's pages (kvc_prefill before the append, kvc_decode after it, with the batch
 * view's slots / rows / n_new) and compared with kv_forward (decode: where the step flushes no block: kvc_decode
 * reads that block packed); kvc_decode_step (the own token from the step's rows) is compared at every decode step,
 * flushes included. */
static void dev_case(const char *mode, int R, int S) {
    const int Hq = 8, Hkv = 2, D = 128, n = 3, ids_n = 3;
    kv_params p = kv_default_params();
    CHECK(kv_parse_mode(mode, &p.fmt) == OMNI_OK, "mode");
    p.fmt.window = R, p.fmt.n_sink = S;
    p.n_layers = 1, p.n_kv_heads = Hkv, p.head_dim = D, p.max_tokens = 8192, p.max_seqs = 4, p.max_chunk = 512;
    kv_cache *c = NULL;
    kv_dev *d = NULL;
    CHECK(kv_init(&p, &c) == OMNI_OK && kv_dev_init(&p, &d) == OMNI_OK, "init: %s", omni_last_error());
    if (!c || !d) return;
    int ids[4], idd[4];
    for (int i = 0; i < ids_n; i++) kv_seq_add(c, &ids[i]), kv_dev_seq_add(d, &idd[i]);
    kv_layer_view v;
    kv_dev_layer_view(d, 0, &v);
    kv_dev_batch b;
    kv_dev_batch_view(d, &b);
    kvc_attn *a = NULL;
    CHECK(kvc_attn_init(n, Hq, Hkv, D, &a) == OMNI_OK, "attn init: %s", omni_last_error());
    uint16_t *dq, *dk, *dv, *dout, *dout2, *hq = malloc((size_t)512 * Hq * D * 2), *hk = malloc((size_t)512 * Hkv * D * 2);
    uint16_t *hv = malloc((size_t)512 * Hkv * D * 2), *got = malloc((size_t)512 * Hq * D * 2);
    float *fq = malloc((size_t)512 * Hq * D * 4), *fk = malloc((size_t)512 * Hkv * D * 4), *fv = malloc((size_t)512 * Hkv * D * 4);
    float *ref = malloc((size_t)512 * Hq * D * 4);
    double *rd = malloc((size_t)512 * Hq * D * 8);
    ATU_CU(cudaMalloc((void **)&dq, (size_t)512 * Hq * D * 2));
    ATU_CU(cudaMalloc((void **)&dk, (size_t)512 * Hkv * D * 2));
    ATU_CU(cudaMalloc((void **)&dv, (size_t)512 * Hkv * D * 2));
    ATU_CU(cudaMalloc((void **)&dout, (size_t)512 * Hq * D * 2));
    ATU_CU(cudaMalloc((void **)&dout2, (size_t)512 * Hq * D * 2));
    uint16_t *got2 = malloc((size_t)512 * Hq * D * 2);
    rng_t r = {R * 7 + S};
    const int steps[][3] = {{300, 1, 45}, {200, 2, 50}, {1, 1, 1}, {1, 1, 1}, {0, 33, 1}, {1, 1, 1}, {1, 1, 1}};
    int64_t len[3] = {0, 0, 0};
    atu_err ep = atu_err_init(), ed = atu_err_init(), es = atu_err_init();
    int n_flush = 0;
    for (int si = 0; si < 7; si++) {
        int nn[3], T = 0, maxq = 0, dec = 1;
        for (int i = 0; i < n; i++) nn[i] = steps[si][i], T += nn[i], maxq = nn[i] > maxq ? nn[i] : maxq, dec &= nn[i] == 1;
        atu_rand_bf16(hq, (size_t)T * Hq * D, &r, 1.0f);
        atu_rand_bf16(hk, (size_t)T * Hkv * D, &r, 1.0f);
        atu_rand_bf16(hv, (size_t)T * Hkv * D, &r, 1.0f);
        for (int i = 0; i < T * Hq * D; i++) fq[i] = omni_bf16_to_f32(hq[i]);
        for (int i = 0; i < T * Hkv * D; i++) fk[i] = omni_bf16_to_f32(hk[i]), fv[i] = omni_bf16_to_f32(hv[i]);
        CHECK(kv_forward(c, 0, n, ids, nn, fq, fk, fv, ref, Hq, 1.0f / sqrtf((float)D)) == OMNI_OK, "cpu: %s",
              omni_last_error());
        ATU_CU(cudaMemcpy(dq, hq, (size_t)T * Hq * D * 2, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(dk, hk, (size_t)T * Hkv * D * 2, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(dv, hv, (size_t)T * Hkv * D * 2, cudaMemcpyHostToDevice));
        omni_status st = kv_dev_step(d, n, idd, nn);
        if (!st) st = kv_dev_upload(d, NULL);
        if (!st && !dec) st = kvc_prefill(&v, n, b.slot, b.row0, maxq, dq, dk, dv, dout, Hq, 1.0f / sqrtf((float)D), NULL);
        if (!st) st = kv_dev_append(d, 0, dk, dv, 0, NULL);
        if (!st && dec) st = kvc_decode(a, &v, n, b.slot, b.n_new, dq, dout, 1.0f / sqrtf((float)D), NULL);
        if (!st && dec)
            st = kvc_decode_step(a, &v, n, b.slot, b.n_new, dq, dk, dv, dout2, 1.0f / sqrtf((float)D), NULL);
        CHECK(st == OMNI_OK, "step %d: %s", si, omni_last_error());
        ATU_CU(cudaDeviceSynchronize());
        ATU_CU(cudaMemcpy(got, dout, (size_t)T * Hq * D * 2, cudaMemcpyDeviceToHost));
        if (dec) ATU_CU(cudaMemcpy(got2, dout2, (size_t)T * Hq * D * 2, cudaMemcpyDeviceToHost));
        int64_t row = 0;
        for (int i = 0; i < n; i++) {
            const int flush = p.fmt.k_type >= KV_Q4 && dec && len[i] + 1 >= R &&
                              (len[i] >= R ? (len[i] - R) / 32 : 0) != (len[i] + 1 - R) / 32;
            for (int64_t j = 0; j < (int64_t)nn[i] * Hq * D; j++) rd[j] = ref[row * Hq * D + j];
            if (!flush) atu_err_add(dec ? &ed : &ep, got + row * Hq * D, rd, (int64_t)nn[i] * Hq * D, row * Hq * D);
            if (dec) atu_err_add(&es, got2 + row * Hq * D, rd, (int64_t)Hq * D, row * Hq * D);
            n_flush += flush;
            row += nn[i];
            len[i] += nn[i];
        }
        kv_commit(c, n, ids, nn);
        kv_dev_commit(d);
    }
    printf("kv_dev %-5s R %3d S %d: prefill vs kv_forward max %.2e rms %.2e | decode max %.2e rms %.2e | decode_step "
           "(%d flushes) max %.2e rms %.2e\n", mode, R, S, atu_max_ratio(&ep), atu_rms_ratio(&ep), atu_max_ratio(&ed),
           atu_rms_ratio(&ed), n_flush, atu_max_ratio(&es), atu_rms_ratio(&es));
    CHECK(atu_policy_ok(&ep) && ep.n > 0, "kv_dev %s R %d S %d: prefill outside the policy", mode, R, S);
    CHECK(atu_policy_ok(&ed) && ed.n > 0, "kv_dev %s R %d S %d: decode outside the policy", mode, R, S);
    CHECK(atu_policy_ok(&es) && es.n > 0, "kv_dev %s R %d S %d: decode_step outside the policy", mode, R, S);
    CHECK(p.fmt.k_type < KV_Q4 || n_flush > 0, "kv_dev %s R %d S %d: no decode step flushed a block", mode, R, S);
    kvc_attn_free(a);
    kv_dev_free(d);
    kv_free(c);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dout2);
    free(hq), free(hk), free(hv), free(got), free(got2), free(fq), free(fk), free(fv), free(ref), free(rd);
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    int full = 0, tiny = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--short")) g_short = 1;
        if (!strcmp(argv[i], "--full")) full = 1;
        if (!strcmp(argv[i], "--tiny")) tiny = g_short = 1;
    }
    const char *cfgs = getenv("OMNI_KVC_CONFIGS");
    if (cfgs) snprintf(g_cfgs, sizeof g_cfgs, "%s", cfgs);
#ifdef ATTN_TEST_EMU
    g_cfg_cases = 8; /* emulated kernels are slow: the configurations on the format cases (and the long one) */
#endif
    if (tiny) g_cfg_cases = 0;
    bad_args();
#ifndef ATTN_TEST_EMU
    if (!tiny) {
        graph_case();
        dev_case("int2", 32, 0);
        dev_case("int2", 0, 4);
        dev_case("bf16", 128, 0);
    }
#else
    dev_case("int4", 0, 0); /* the emulator: one case (decode steps that flush: kvc_decode_step) */
#endif
    if (tiny) { /* for compute-sanitizer racecheck: one quantized case with window and sinks, one bf16 */
        static const int64_t lens[] = {33, 200, 97};
        dcase t1 = {"int2", 32, 4, 8, 2, 128, 0, 3, lens, 3, 1, 0}, t2 = {"bf16", 0, 0, 8, 2, 64, 0, 3, lens, 3, 0, 0};
        run_case(&t1, 1);
        run_case(&t2, 2);
        return check_exit();
    }
    static const int64_t awk[] = {1, 31, 32, 33, 127, 1025, 3000, 160, 64, 65, 500, 2};
    static const int64_t three[] = {33, 1025, 3000};
    static const int64_t one[] = {3000};
    static const int64_t mix48[] = {4096, 1, 3000, 127, 1025, 32, 2048, 33, 31, 700};
    const int na = (int)(sizeof awk / sizeof awk[0]);
    uint64_t seed = 1;
    /* every format: batch 19 over the awkward lengths, 32/8 heads, D 128, window 128 */
    const char *fmts[] = {"int2", "int4", "kivi2", "kivi4", "k2v4", "k4v2", "bf16"};
    for (int i = 0; i < 7; i++) {
        dcase t = {fmts[i], 128, 0, 32, 8, 128, 0, g_short ? 5 : 19, awk, na, 0, i == 0 || i == 6};
        run_case(&t, seed++);
    }
    { /* a bf16 layer inside a quantizing cache (quant pages hold raw rows) */
        dcase t = {"bf16", 128, 0, 32, 8, 128, 1, g_short ? 4 : 19, awk, na, 0, 0};
        run_case(&t, seed++);
    }
    { /* one sequence long enough for several blocks per warp (two-block steps of the x2 variants) everywhere;
       * the emulator runs only the x2 configurations on it */
        static const int64_t len2k[] = {2500};
        dcase t = {"int2", 32, 4, 32, 8, 128, 0, 1, len2k, 1, 1, 0};
        char keep[sizeof g_cfgs];
        memcpy(keep, g_cfgs, sizeof keep);
#ifdef ATTN_TEST_EMU
        if (!getenv("OMNI_KVC_CONFIGS")) snprintf(g_cfgs, sizeof g_cfgs, "x2,x2b3:w2");
        g_cfg_cases++;
#endif
        g_keep_len = 1;
        run_case(&t, seed++);
        g_keep_len = 0;
        memcpy(g_cfgs, keep, sizeof keep);
    }
    /* windows and sinks */
    const int win[] = {0, 32, 128};
    for (int w = 0; w < 3; w++)
        for (int S = 0; S <= 4; S += 4) {
            dcase t = {"int2", win[w], S, 16, 4, 64, 0, 3, three, 3, S > 0, w == 1};
            run_case(&t, seed++);
        }
    { /* sinks spanning two raw half-blocks */
        dcase t = {"int4", 0, 20, 8, 2, 128, 0, 3, three, 3, 1, 0};
        run_case(&t, seed++);
    }
    /* heads and head dims: GQA 2, MHA, GQA 8, GQA 12 (two passes), GQA 3 */
    const int hd[][3] = {{16, 8, 128}, {8, 8, 64}, {32, 4, 128}, {12, 1, 64}, {6, 2, 128}};
    for (int i = 0; i < 5; i++)
        for (int f = 0; f < 2; f++) {
            dcase t = {f ? "bf16" : "int2", 32, 0, hd[i][0], hd[i][1], hd[i][2], 0, 3, three, 3, 0, 0};
            run_case(&t, seed++);
        }
    { /* D 64 with 4-bit codes */
        dcase t = {"kivi4", 128, 4, 8, 2, 64, 0, 3, three, 3, 0, 0};
        run_case(&t, seed++);
    }
    /* one long sequence (many splits) per format family */
    for (int f = 0; f < 3; f++) {
        dcase t = {f == 0 ? "int2" : f == 1 ? "bf16" : "k4v2", 128, 0, 32, 8, 128, 0, 1, one, 1, 0, 0};
        run_case(&t, seed++);
    }
    { /* codes as normal f16 with the offset MMA (OMNI_KVC_MAGIC=1, read by kvc_attn_init) */
        setenv("OMNI_KVC_MAGIC", "1", 1);
        dcase t1 = {"int2", 32, 4, 16, 4, 64, 0, 3, three, 3, 1, 0}, t2 = {"k4v2", 128, 0, 32, 8, 128, 0, 3, three, 3, 0, 0};
        run_case(&t1, seed++);
        run_case(&t2, seed++);
        unsetenv("OMNI_KVC_MAGIC");
    }
    if (full) {
        dcase t48 = {"int2", 128, 0, 32, 8, 128, 0, 48, mix48, 10, 0, 0};
        run_case(&t48, seed++);
        t48.mode = "bf16";
        run_case(&t48, seed++);
        dcase t3 = {"int2", 128, 4, 64, 8, 128, 0, 3, three, 3, 1, 1}; /* 8 heads per row (Qwen3-VL-32B shape) */
        run_case(&t3, seed++);
        static const int64_t lens256[] = {1, 17, 300, 64};
        dcase t256 = {"int2", 128, 0, 16, 8, 128, 0, 256, lens256, 4, 0, 0};
        run_case(&t256, seed++);
    }
    return check_exit();
}
