/* bench_attn.c - decode attention benchmark (omni_bench_attn; run by bench/attn_gpu.sh on the H200).
 *
 * For each format (bf16, int2, int4, kivi2) and shape (bs1 x {4K, 32K, 128K}, bs8 / 32K, bs48 / 4K; 32 query / 8
 * KV heads, D 128, window 128): pages with random contents (quantized: random codes, finite fp16 scales, mins,
 * norms; bf16: finite random values; up to 32 MB of distinct pages, replicated on the device) in shuffled page
 * order, replicated over enough page sets that the data touched by successive calls exceeds 2 x the 60 MB L2
 * (calls rotate through the sets). The SIMT oracle kvc_decode_ref runs once on set 0; then every kernel
 * configuration (OMNI_KVC_CONFIGS: comma-separated kvc_attn_parse_config strings, default "base") is validated
 * against it (accuracy policy) and timed: 20 warm-up calls, 200 calls each between two CUDA events (median), the
 * mean of 200 back-to-back calls. Bytes = what the kernel must move: KV (quantized blocks with scales / mins /
 * norms, bf16 window rows; bf16 layers: every row) + q + out; bandwidth = bytes / median time, next to a
 * device-to-device copy of 1 GiB measured in the same run (read + write counted, median of 10).
 * OMNI_BENCH_ONLY=int2 / OMNI_BENCH_SHAPE=1x131072 restrict formats / shapes (profilers).
 * Output: a line per run on stdout; with a path argument, CSV rows
 *     "fmt,bs,ctx,config,us_median,us_b2b,bytes,kv_bytes,copy_tbs,ok,ctas". */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_test_util.h"

#define REPS 200
#define UNIQUE_BYTES (32u << 20) /* distinct page bytes filled on the host; the rest are device copies */

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double copy_tbs(void) {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0.0;
    cudaMemset(a, 1, n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    float t[10];
    for (int i = 0; i < 3; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    for (int i = 0; i < 10; i++) {
        cudaEventRecord(e0, NULL);
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1, NULL);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[i], e0, e1);
    }
    qsort(t, 10, sizeof(float), cmp_f);
    cudaFree(a), cudaFree(b);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return 2.0 * n / (t[5] * 1e-3) / 1e12;
}

/* n finite random bf16 values, |x| in [1/8, 1) with random signs (6 per random word). */
static void fill_bf16(uint16_t *x, size_t n, rng_t *r) {
    for (size_t i = 0; i < n;) {
        uint64_t u = rng_next(r);
        for (int k = 0; k < 6 && i < n; k++, i++, u >>= 10)
            x[i] = (uint16_t)(((u & 1) << 15) | ((124 + ((u >> 1) & 3)) << 7) | ((u >> 3) & 0x7f));
    }
}

/* Host pages with random contents of the format: nqp quantized pages, nrp raw pages. */
static void fill_pages(const atu_layout *y, uint8_t *qpool, int nqp, uint8_t *rpool, int nrp, rng_t *r) {
    const int D = y->D;
    fill_bf16((uint16_t *)rpool, (size_t)nrp * y->rpage / 2, r);
    if (y->kbits == 16) return;
    for (int p = 0; p < nqp; p++) {
        uint8_t *pg = qpool + (size_t)p * y->qpage;
        for (size_t i = 0; i < y->qpage; i += 8) {
            const uint64_t u = rng_next(r);
            memcpy(pg + i, &u, y->qpage - i < 8 ? y->qpage - i : 8);
        }
        for (int g = 0; g < y->Hkv; g++) {
            uint16_t *ks = (uint16_t *)(pg + g * y->kh + (size_t)D * 32 * y->kbits / 8); /* scale, min, norm */
            for (int c = 0; c < D; c++) ks[c] = kvq_f2h(0.05f + 0.01f * (c % 7)), ks[D + c] = kvq_f2h(-0.1f);
            if (y->norm)
                for (int j = 0; j < 32; j++) ks[2 * D + j] = kvq_f2h(8.0f + (j % 5));
            uint16_t *vs = (uint16_t *)(pg + y->Hkv * y->kh + g * y->vh + (size_t)32 * D * y->vbits / 8);
            for (int i = 0; i < 32 * (D / 32); i++) vs[i] = kvq_f2h(0.5f), vs[32 * (D / 32) + i] = kvq_f2h(-0.75f);
        }
    }
}

/* n pages of psize bytes on the device: the first u (<= n) filled from host, the rest copies of them. */
static uint8_t *upload_pages(const uint8_t *host, size_t psize, int u, int n) {
    uint8_t *d = NULL;
    ATU_CU(cudaMalloc((void **)&d, (size_t)(n ? n : 1) * (psize ? psize : 16)));
    if (!n || !psize) return d;
    ATU_CU(cudaMemcpy(d, host, (size_t)u * psize, cudaMemcpyHostToDevice));
    for (int p = u; p < n; p += u)
        ATU_CU(cudaMemcpy(d + (size_t)p * psize, d, (size_t)(n - p < u ? n - p : u) * psize, cudaMemcpyDeviceToDevice));
    return d;
}

/* Median and back-to-back mean (us) of 200 calls of configuration a rotating over the page sets. */
static void time_calls(kvc_attn *a, const kv_layer_view *views, int sets, int bs, const uint16_t *dq, uint16_t *dout,
                       float scale, double *med, double *b2b) {
    static cudaEvent_t ev[2 * REPS + 2];
    static int made = 0;
    if (!made)
        for (int i = 0; i < 2 * REPS + 2; i++) ATU_CU(cudaEventCreate(&ev[i]));
    made = 1;
    for (int i = 0; i < 20; i++) kvc_decode(a, &views[i % sets], bs, NULL, NULL, dq, dout, scale, NULL);
    float t[REPS];
    for (int i = 0; i < REPS; i++) {
        cudaEventRecord(ev[2 * i], NULL);
        kvc_decode(a, &views[i % sets], bs, NULL, NULL, dq, dout, scale, NULL);
        cudaEventRecord(ev[2 * i + 1], NULL);
    }
    ATU_CU(cudaDeviceSynchronize());
    for (int i = 0; i < REPS; i++) cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]);
    cudaEventRecord(ev[2 * REPS], NULL);
    for (int i = 0; i < REPS; i++) kvc_decode(a, &views[i % sets], bs, NULL, NULL, dq, dout, scale, NULL);
    cudaEventRecord(ev[2 * REPS + 1], NULL);
    ATU_CU(cudaDeviceSynchronize());
    ATU_CU(cudaGetLastError());
    float total = 0.0f;
    cudaEventElapsedTime(&total, ev[2 * REPS], ev[2 * REPS + 1]);
    qsort(t, REPS, sizeof(float), cmp_f);
    *med = t[REPS / 2] * 1e3, *b2b = total * 1e3 / REPS;
}

/* One format and shape: pages, oracle, then every configuration of cfgs. Returns the number of failures. */
static int bench_one(const char *mode, int bs, int64_t L, double copy, const char *cfgs, FILE *csv) {
    const int Hq = 32, Hkv = 8, D = 128, R = 128;
    const atu_layout y = atu_make_layout(mode, Hkv, D, R, 0, 0);
    const int nb = (int)((L + 31) / 32), nq = atu_nq(&y, L), nr = nb - nq;
    double kvb; /* KV bytes the kernel must read */
    if (y.kbits == 16) kvb = (double)bs * L * Hkv * D * 4;
    else kvb = (double)bs * ((double)nq * y.qpage + (double)(L - 32LL * nq) * Hkv * D * 4);
    const double bytes = kvb + (double)bs * Hq * D * 2 * 2; /* + q + out */
    int sets = (int)ceil(120e6 / bytes);
    sets = sets < 1 ? 1 : sets > 64 ? 64 : sets;
    const int nqp = bs * nq, nrp = bs * nr, stride = nb + 1;
    const int uq = y.qpage ? (int)fmin(nqp, fmax(1.0, UNIQUE_BYTES / y.qpage)) : 0;
    const int ur = (int)fmin(nrp, fmax(1.0, UNIQUE_BYTES / y.rpage));
    rng_t r = {(uint64_t)L * 131 + bs};
    uint8_t *hq = malloc((size_t)(uq ? uq : 1) * (y.qpage ? y.qpage : 16)), *hr = malloc((size_t)(ur ? ur : 1) * y.rpage);
    fill_pages(&y, hq, uq, hr, ur, &r);
    uint8_t *dq = upload_pages(hq, y.qpage, uq, sets * nqp), *dr = upload_pages(hr, y.rpage, ur, sets * nrp);
    int32_t *dqt, *drt, *dlen;
    /* page tables: set s uses pages [s n, (s + 1) n) of each pool in shuffled order */
    int32_t *qt = malloc((size_t)sets * bs * stride * 4), *rt = malloc((size_t)sets * bs * stride * 4);
    int32_t *qperm = malloc((size_t)(nqp + 1) * 4), *rperm = malloc((size_t)(nrp + 1) * 4), *lens = malloc((size_t)bs * 4);
    for (int s = 0; s < sets; s++) {
        atu_shuffle(qperm, nqp, &r);
        atu_shuffle(rperm, nrp, &r);
        for (int q = 0; q < bs; q++)
            for (int b = 0; b < stride; b++) {
                int32_t *qe = qt + ((size_t)s * bs + q) * stride + b, *re = rt + ((size_t)s * bs + q) * stride + b;
                *qe = b < nq ? s * nqp + qperm[q * nq + b] : 0;
                *re = b >= nq && b < nb ? s * nrp + rperm[q * nr + b - nq] : 0;
            }
    }
    for (int q = 0; q < bs; q++) lens[q] = (int32_t)L;
    ATU_CU(cudaMalloc((void **)&dqt, (size_t)sets * bs * stride * 4));
    ATU_CU(cudaMalloc((void **)&drt, (size_t)sets * bs * stride * 4));
    ATU_CU(cudaMalloc((void **)&dlen, (size_t)bs * 4));
    ATU_CU(cudaMemcpy(dqt, qt, (size_t)sets * bs * stride * 4, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(drt, rt, (size_t)sets * bs * stride * 4, cudaMemcpyHostToDevice));
    ATU_CU(cudaMemcpy(dlen, lens, (size_t)bs * 4, cudaMemcpyHostToDevice));
    kv_layer_view *views = malloc((size_t)sets * sizeof *views);
    for (int s = 0; s < sets; s++) {
        kv_layer_view v;
        memset(&v, 0, sizeof v);
        const int quant = y.kbits != 16;
        v.n_layers = 1, v.n_kv_heads = Hkv, v.head_dim = D, v.quant = quant;
        v.kbits = quant ? y.kbits : 0, v.vbits = quant ? y.vbits : 0, v.rotate = y.rot, v.scale = y.norm;
        v.window = R, v.cache_quant = y.quantizing, v.k_esz = v.v_esz = 2;
        v.raw_page_bytes = (int64_t)y.rpage, v.raw_k = 0, v.raw_v = (int64_t)Hkv * 32 * D * 2;
        v.raw_kh = v.raw_vh = (int64_t)32 * D * 2;
        v.quant_page_bytes = (int64_t)y.qpage, v.q_k = 0, v.q_v = (int64_t)Hkv * (int64_t)y.kh;
        v.q_kh = (int64_t)y.kh, v.q_vh = (int64_t)y.vh;
        v.raw_pool = dr, v.quant_pool = quant ? dq : NULL;
        v.quant_tab = dqt + (size_t)s * bs * stride, v.raw_tab = drt + (size_t)s * bs * stride, v.tab_stride = stride;
        v.len = dlen, v.max_seqs = bs;
        views[s] = v;
    }
    const size_t no = (size_t)bs * Hq * D;
    uint16_t *hqv = malloc(no * 2), *o1 = malloc(no * 2), *o2 = malloc(no * 2), *dqv, *dout, *dref;
    atu_rand_bf16(hqv, no, &r, 1.0f);
    ATU_CU(cudaMalloc((void **)&dqv, no * 2));
    ATU_CU(cudaMalloc((void **)&dout, no * 2));
    ATU_CU(cudaMalloc((void **)&dref, no * 2));
    ATU_CU(cudaMemcpy(dqv, hqv, no * 2, cudaMemcpyHostToDevice));
    const float scale = 1.0f / sqrtf((float)D);
    int fails = 0;
    kvc_attn *a = NULL;
    if (kvc_attn_init(bs, Hq, Hkv, D, &a) || kvc_decode_ref(a, &views[0], bs, NULL, NULL, dqv, dref, scale, NULL)) {
        fprintf(stderr, "oracle: %s\n", omni_last_error());
        return 1;
    }
    kvc_attn_free(a);
    ATU_CU(cudaDeviceSynchronize());
    ATU_CU(cudaMemcpy(o2, dref, no * 2, cudaMemcpyDeviceToHost));
    double *rd = malloc(no * 8);
    for (size_t i = 0; i < no; i++) rd[i] = omni_bf16_to_f32(o2[i]);
    char list[1024], *save = NULL;
    snprintf(list, sizeof list, "%s", cfgs);
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        kvc_attn_params p;
        if (kvc_attn_parse_config(name, &p) || kvc_attn_init_ex(bs, Hq, Hkv, D, &p, &a)) {
            fprintf(stderr, "%s: %s\n", name, omni_last_error());
            fails++;
            continue;
        }
        ATU_CU(cudaMemset(dout, 0xff, no * 2));
        int ok = kvc_decode(a, &views[0], bs, NULL, NULL, dqv, dout, scale, NULL) == OMNI_OK;
        ATU_CU(cudaDeviceSynchronize());
        ATU_CU(cudaMemcpy(o1, dout, no * 2, cudaMemcpyDeviceToHost));
        atu_err e = atu_err_init();
        atu_err_add(&e, o1, rd, (int64_t)no, 0);
        ok = ok && atu_policy_ok(&e);
        double us, b2b;
        time_calls(a, views, sets, bs, dqv, dout, scale, &us, &b2b);
        const double tbs = bytes / (us * 1e-6) / 1e12;
        const int ctas = kvc_decode_ctas(a, &views[0], bs);
        printf("%-6s bs %2d ctx %6lld %-10s: %8.1f us (b2b %8.1f), %8.2f MB, %5.2f TB/s = %5.1f%% of copy, %4d ctas, "
               "%2d sets, check %s (max %.1e rms %.1e vs oracle)\n", mode, bs, (long long)L, name, us, b2b, bytes / 1e6,
               tbs, 100.0 * tbs / copy, ctas, sets, ok ? "ok" : "FAIL", atu_max_ratio(&e), atu_rms_ratio(&e));
        fflush(stdout);
        if (csv)
            fprintf(csv, "%s,%d,%lld,%s,%.2f,%.2f,%.0f,%.0f,%.3f,%d,%d\n", mode, bs, (long long)L, name, us, b2b, bytes,
                    kvb, copy, ok, ctas);
        fails += !ok;
        kvc_attn_free(a);
    }
    cudaFree(dq), cudaFree(dr), cudaFree(dqt), cudaFree(drt), cudaFree(dlen), cudaFree(dqv), cudaFree(dout), cudaFree(dref);
    free(hq), free(hr), free(qt), free(rt), free(qperm), free(rperm), free(lens), free(views), free(hqv), free(o1), free(o2);
    free(rd);
    return fails;
}

/* Prefill / segment attention timing (no history): causal chunk of T tokens (32/8 heads, D 128) and the vision
 * tower's non-causal segments (16 heads, D 72, one 1024-token image) - TFLOP/s counting 4 T^2 H D (causal: half). */
static void bench_prefill(FILE *csv) {
    for (int kind = 0; kind < 2; kind++) {
        const int T = kind ? 1024 : 4096, Hq = kind ? 16 : 32, Hkv = kind ? 16 : 8, D = kind ? 72 : 128;
        const size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hkv * D;
        uint16_t *h = malloc(nq * 2), *dq, *dk, *dv, *dout;
        rng_t r = {77};
        atu_rand_bf16(h, nq, &r, 1.0f);
        ATU_CU(cudaMalloc((void **)&dq, nq * 2));
        ATU_CU(cudaMalloc((void **)&dk, nk * 2));
        ATU_CU(cudaMalloc((void **)&dv, nk * 2));
        ATU_CU(cudaMalloc((void **)&dout, nq * 2));
        ATU_CU(cudaMemcpy(dq, h, nq * 2, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(dk, h, nk * 2, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(dv, h + 7, nk * 2, cudaMemcpyHostToDevice));
        int32_t cu[2] = {0, T}, *dcu, len0 = 0, *dlen, tab = -1, *dtab;
        ATU_CU(cudaMalloc((void **)&dcu, 8));
        ATU_CU(cudaMalloc((void **)&dlen, 4));
        ATU_CU(cudaMalloc((void **)&dtab, 4));
        ATU_CU(cudaMemcpy(dcu, cu, 8, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(dlen, &len0, 4, cudaMemcpyHostToDevice));
        ATU_CU(cudaMemcpy(dtab, &tab, 4, cudaMemcpyHostToDevice));
        kv_layer_view v;
        memset(&v, 0, sizeof v);
        v.n_layers = 1, v.n_kv_heads = Hkv, v.head_dim = D, v.k_esz = v.v_esz = 2, v.window = 128;
        v.raw_page_bytes = 16, v.raw_kh = v.raw_vh = (int64_t)32 * D * 2, v.raw_pool = (uint8_t *)dout;
        v.raw_tab = dtab, v.quant_tab = dtab, v.len = dlen, v.tab_stride = 1, v.max_seqs = 1;
        const float scale = 1.0f / sqrtf((float)D);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        float t[20];
        int ok = 1;
        for (int i = 0; i < 23; i++) {
            cudaEventRecord(e0, NULL);
            omni_status st = kind ? kvc_attn_segments(Hq, D, dcu, 1, T, dq, dk, dv, (int64_t)Hq * D, dout, scale, NULL)
                                  : kvc_prefill(&v, 1, NULL, dcu, T, dq, dk, dv, dout, Hq, scale, NULL);
            cudaEventRecord(e1, NULL);
            cudaEventSynchronize(e1);
            ok &= st == OMNI_OK;
            if (i >= 3) cudaEventElapsedTime(&t[i - 3], e0, e1);
        }
        ATU_CU(cudaGetLastError());
        qsort(t, 20, sizeof(float), cmp_f);
        const double us = t[10] * 1e3, flops = 4.0 * T * T * Hq * D * (kind ? 1.0 : 0.5);
        printf("%-9s T %5d heads %2d/%2d D %3d: %8.1f us, %6.1f TFLOP/s%s\n", kind ? "segments" : "prefill", T, Hq,
               Hkv, D, us, flops / (us * 1e-6) / 1e12, ok ? "" : "  FAILED");
        if (csv) fprintf(csv, "%s,1,%d,%.2f,%.2f,%.0f,0,%d\n", kind ? "segments" : "prefill", T, us, us, flops, ok);
        cudaEventDestroy(e0), cudaEventDestroy(e1);
        cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dcu), cudaFree(dlen), cudaFree(dtab);
        free(h);
    }
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    FILE *csv = argc > 1 ? fopen(argv[1], "w") : NULL;
    const char *only = getenv("OMNI_BENCH_ONLY");   /* "int2" etc.: one format (profilers) */
    const char *shape = getenv("OMNI_BENCH_SHAPE"); /* "1x131072": one shape */
    const char *cfgs = getenv("OMNI_KVC_CONFIGS");  /* kernel configurations to time */
    if (!cfgs || !*cfgs) cfgs = "base";
    const double copy = copy_tbs();
    printf("device-to-device copy: %.3f TB/s (read + write); configurations: %s\n", copy, cfgs);
    const char *fmts[] = {"bf16", "int2", "int4", "kivi2"};
    const int shapes[][2] = {{1, 4096}, {1, 32768}, {1, 131072}, {8, 32768}, {48, 4096}};
    int rc = 0;
    for (int f = 0; f < 4; f++) {
        if (only && strcmp(only, fmts[f])) continue;
        for (int s = 0; s < 5; s++) {
            char name[32];
            snprintf(name, sizeof name, "%dx%d", shapes[s][0], shapes[s][1]);
            if (!shape || !strcmp(shape, name)) rc |= bench_one(fmts[f], shapes[s][0], shapes[s][1], copy, cfgs, csv) != 0;
        }
    }
    if (!only) bench_prefill(NULL);
    if (csv) fclose(csv);
    return rc;
}
