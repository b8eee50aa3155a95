/* test_gpu_kv_attn.c - GPU decode attention (kvc_decode) over the paged OScaR/KIVI history equals the CPU cache's
 * kv_forward for one new token per sequence.
 *
 * Per configuration (format int2 / int4 / kivi2, window 0 / 128, D, heads): one batch of sequences with history
 * lengths 0, 1, 31, 33, 160, 3000 is fed to a CPU cache (prefill chunks, then kv_commit); the device gets the
 * cache's own pages, read through its layer view (kv_cache_layer_view, kv_layout.h), in shuffled page order,
 * raw rows beyond each length poisoned with bf16 NaN; then one decode step runs on both.
 * Tolerance: both sides compute in f32 from identical stored bytes and differ only by summation order, folded
 * scale/min (oscar.md section 5) and the split merge: |gpu - cpu| <= 1e-5 * max |cpu| per (sequence, head).
 * Output canaries must stay untouched; NaN/Inf fail.
 * Groups of <= 4 heads run on tensor cores; the last configurations rerun with OMNI_KVC_SIMT=1 (plain FMAs).
 * --bench: timing of bs1 at 4K/32K/128K, 32/8 heads, D 128, int2, window 128 (not part of the test).
 * No GPU: prints SKIP and exits 77. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/tensor.h"
#include "kvcache/kv_cuda.h"
#include "kvcache/kv_test_util.h"

#define NSEQ 6
static const int g_lens[NSEQ] = {0, 1, 31, 33, 160, 3000};

#define CU(x)                                                                                                  \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);           \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static void shuffle(int32_t *p, int n, rng_t *r) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next(r) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

/* A copy of a cache's pools as its layer view describes them, pages permuted (page p -> perm[p], tables
 * rewritten), raw rows of tokens >= len poisoned with bf16 NaN (they must never be read). */
typedef struct {
    uint8_t *raw, *quant;
    int64_t n_raw, n_quant;
    int32_t *rtab, *qtab, *len; /* [n_seq][tab_stride], [n_seq] in batch order */
} pool_copy;

static pool_copy copy_pools(const kv_layer_view *hv, const kv_usage *u, int n_seq, rng_t *r) {
    pool_copy pc;
    pc.n_raw = u->raw_pages + u->raw_pages_free, pc.n_quant = u->quant_pages + u->quant_pages_free;
    int32_t *rperm = malloc((pc.n_raw + 1) * 4), *qperm = malloc((pc.n_quant + 1) * 4);
    shuffle(rperm, (int)pc.n_raw, r);
    shuffle(qperm, (int)pc.n_quant, r);
    pc.raw = malloc(pc.n_raw * hv->raw_page_bytes + 16);
    pc.quant = malloc(pc.n_quant * hv->quant_page_bytes + 16);
    memset(pc.raw, 0xff, pc.n_raw * hv->raw_page_bytes);
    memset(pc.quant, 0xff, pc.n_quant * hv->quant_page_bytes);
    pc.rtab = malloc((size_t)n_seq * hv->tab_stride * 4), pc.qtab = malloc((size_t)n_seq * hv->tab_stride * 4);
    pc.len = malloc((size_t)n_seq * 4);
    for (int s = 0; s < n_seq; s++) {
        const int64_t L = hv->len[s];
        pc.len[s] = (int32_t)L;
        for (int b = 0; b < hv->tab_stride; b++) {
            int32_t rp = kv_view_raw_page(hv, s, b), qp = kv_view_quant_page(hv, s, b);
            pc.rtab[s * hv->tab_stride + b] = rp >= 0 ? rperm[rp] : -1;
            pc.qtab[s * hv->tab_stride + b] = qp >= 0 ? qperm[qp] : -1;
            if (qp >= 0)
                memcpy(pc.quant + (int64_t)qperm[qp] * hv->quant_page_bytes,
                       hv->quant_pool + (int64_t)qp * hv->quant_page_bytes, hv->quant_page_bytes);
            if (rp < 0) continue;
            uint8_t *dst = pc.raw + (int64_t)rperm[rp] * hv->raw_page_bytes;
            memcpy(dst, hv->raw_pool + (int64_t)rp * hv->raw_page_bytes, hv->raw_page_bytes);
            kv_layer_view dv = *hv; /* the same view over the copy: rows of tokens >= L get NaN */
            dv.raw_pool = pc.raw;
            for (int g = 0; g < hv->n_kv_heads; g++)
                for (int j = 0; j < 32; j++)
                    if ((int64_t)b * 32 + j >= L)
                        for (int isv = 0; isv < 2; isv++) {
                            uint16_t *row = (uint16_t *)(kv_view_raw_rows(&dv, rperm[rp], g, isv) + (size_t)j * hv->head_dim * 2);
                            for (int c = 0; c < hv->head_dim; c++) row[c] = 0x7fc0;
                        }
        }
    }
    free(rperm), free(qperm);
    return pc;
}

static void free_pools(pool_copy *pc) { free(pc->raw), free(pc->quant), free(pc->rtab), free(pc->qtab), free(pc->len); }

/* One configuration; returns the worst relative error seen (or +inf on a failure of the run). */
static double run_case(const char *mode, int R, int Hq, int Hkv, int D, uint64_t seed) {
    kv_format f;
    if (kv_parse_mode(mode, &f)) return INFINITY;
    f.window = R;
    int64_t total = 0, Lmax = 0;
    for (int s = 0; s < NSEQ; s++) total += g_lens[s], Lmax = g_lens[s] > Lmax ? g_lens[s] : Lmax;
    /* ---- CPU cache: history, then one decode step for all sequences */
    kv_params p = kv_default_params();
    p.fmt = f;
    p.n_layers = 1, p.n_kv_heads = Hkv, p.head_dim = D, p.max_tokens = total + NSEQ + 64, p.max_seqs = NSEQ;
    kv_cache *c = NULL;
    CHECK(kv_init(&p, &c) == OMNI_OK, "kv_init: %s", omni_last_error());
    if (!c) return INFINITY;
    kv_data data[NSEQ];
    int ids[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        data[s] = kvd_make(1, Hq, Hkv, D, g_lens[s] + 1, seed * 100 + s);
        kv_seq_add(c, &ids[s]);
        CHECK(ids[s] == s, "slot %d for sequence %d (the batch order is the slot order here)", ids[s], s);
    }
    float *scratch = malloc((size_t)1024 * Hq * D * 4);
    for (int s = 0; s < NSEQ; s++)
        for (int64_t t = 0; t < g_lens[s]; t += 1024) {
            int n = g_lens[s] - t < 1024 ? (int)(g_lens[s] - t) : 1024;
            omni_status st = kv_forward(c, 0, 1, &ids[s], &n, kvd_q(&data[s], 0, t), kvd_k(&data[s], 0, t),
                                        kvd_v(&data[s], 0, t), scratch, Hq, 1.0f / sqrtf((float)D));
            if (!st) st = kv_commit(c, 1, &ids[s], &n);
            CHECK(st == OMNI_OK, "prefill: %s", omni_last_error());
        }
    /* ---- the device gets the cache's own pages (through its layer view) in shuffled page order */
    kv_layer_view hv;
    kv_usage u;
    CHECK(kv_cache_layer_view(c, 0, &hv) == OMNI_OK, "%s", omni_last_error());
    kv_get_usage(c, &u);
    rng_t r = {seed};
    pool_copy pc = copy_pools(&hv, &u, NSEQ, &r);
    const int tab_stride = hv.tab_stride;
    const size_t qrow = (size_t)Hq * D, krow = (size_t)Hkv * D;
    float *q = malloc(NSEQ * qrow * 4), *k = malloc(NSEQ * krow * 4), *v = malloc(NSEQ * krow * 4);
    float *ref = malloc(NSEQ * qrow * 4), *got = malloc((NSEQ * qrow + 16) * 4);
    int ones[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        ones[s] = 1;
        memcpy(q + s * qrow, kvd_q(&data[s], 0, g_lens[s]), qrow * 4);
        memcpy(k + s * krow, kvd_k(&data[s], 0, g_lens[s]), krow * 4);
        memcpy(v + s * krow, kvd_v(&data[s], 0, g_lens[s]), krow * 4);
    }
    CHECK(kv_forward(c, 0, NSEQ, ids, ones, q, k, v, ref, Hq, 1.0f / sqrtf((float)D)) == OMNI_OK, "decode: %s",
          omni_last_error());
    kv_free(c);
    uint8_t *dq, *dr;
    int32_t *dqt, *drt, *dlen;
    float *dqv, *dk, *dv, *dout;
    CU(cudaMalloc((void **)&dq, pc.n_quant * hv.quant_page_bytes + 16));
    CU(cudaMalloc((void **)&dr, pc.n_raw * hv.raw_page_bytes + 16));
    CU(cudaMalloc((void **)&dqt, NSEQ * tab_stride * 4));
    CU(cudaMalloc((void **)&drt, NSEQ * tab_stride * 4));
    CU(cudaMalloc((void **)&dlen, NSEQ * 4));
    CU(cudaMalloc((void **)&dqv, NSEQ * qrow * 4));
    CU(cudaMalloc((void **)&dk, NSEQ * krow * 4));
    CU(cudaMalloc((void **)&dv, NSEQ * krow * 4));
    CU(cudaMalloc((void **)&dout, (NSEQ * qrow + 16) * 4));
    CU(cudaMemcpy(dq, pc.quant, pc.n_quant * hv.quant_page_bytes, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dr, pc.raw, pc.n_raw * hv.raw_page_bytes, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dqt, pc.qtab, NSEQ * tab_stride * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(drt, pc.rtab, NSEQ * tab_stride * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dlen, pc.len, NSEQ * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dqv, q, NSEQ * qrow * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dk, k, NSEQ * krow * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dv, v, NSEQ * krow * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(dout, 0x7f, (NSEQ * qrow + 16) * 4)); /* 0x7f7f7f7f: poison + canary */
    kvc_layer_view view = {Hkv, D, hv.kbits, hv.vbits, hv.rotate, hv.scale, hv.window, dq, hv.quant_page_bytes,
                           hv.q_k, hv.q_v, dr, hv.raw_page_bytes, hv.raw_k, hv.raw_v, dqt, drt, tab_stride, dlen};
    free_pools(&pc);
    kvc_attn *a = NULL;
    CHECK(kvc_attn_init(NSEQ, Hq, Hkv, D, &a) == OMNI_OK, "attn init: %s", omni_last_error());
    omni_status st = kvc_decode(a, &view, NSEQ, Lmax, dqv, dk, dv, dout, Hq, 1.0f / sqrtf((float)D), NULL);
    CHECK(st == OMNI_OK, "kvc_decode: %s", omni_last_error());
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(got, dout, (NSEQ * qrow + 16) * 4, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    int nonfinite = 0, canary = 0;
    for (int i = 0; i < 16; i++) {
        uint32_t u;
        memcpy(&u, &got[NSEQ * qrow + i], 4);
        canary += u != 0x7f7f7f7fu;
    }
    for (int s = 0; s < NSEQ; s++)
        for (int h = 0; h < Hq; h++) {
            const float *g = got + s * qrow + h * D, *e = ref + s * qrow + h * D;
            double mx = 0.0, err = 0.0;
            for (int i = 0; i < D; i++) {
                if (!isfinite(g[i])) nonfinite++;
                mx = fmax(mx, fabs(e[i]));
                err = fmax(err, fabs((double)g[i] - e[i]));
            }
            double rel = err / (mx > 0 ? mx : 1.0);
            if (!(rel <= 1e-5) && worst <= 1e-5)
                fprintf(stderr, "  %s R %d Hq %d Hkv %d D %d: seq len %d head %d: rel err %.3g (max %.3g)\n", mode, R,
                        Hq, Hkv, D, g_lens[s], h, rel, mx);
            if (!(rel <= worst)) worst = rel;
        }
    CHECK(nonfinite == 0, "%s R %d: %d non-finite outputs", mode, R, nonfinite);
    CHECK(canary == 0, "%s R %d: %d canary words overwritten", mode, R, canary);
    CHECK(worst <= 1e-5, "%s R %d Hq %d Hkv %d D %d: worst rel err %.3g > 1e-5", mode, R, Hq, Hkv, D, worst);
    printf("%-6s R %3d Hq %2d Hkv %d D %3d splits %3d: worst rel err %.3g\n", mode, R, Hq, Hkv, D,
           kvc_attn_splits(a, NSEQ, Lmax), worst);
    kvc_attn_free(a);
    cudaFree(dq), cudaFree(dr), cudaFree(dqt), cudaFree(drt), cudaFree(dlen), cudaFree(dqv), cudaFree(dk), cudaFree(dv);
    cudaFree(dout);
    for (int s = 0; s < NSEQ; s++) kvd_free(&data[s]);
    free(scratch), free(q), free(k), free(v), free(ref), free(got);
    return worst;
}

int bench_main(void); /* test_gpu_kv_bench.c */

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench_main();
    const char *modes[3] = {"int2", "int4", "kivi2"};
    uint64_t seed = 7;
    for (int m = 0; m < 3; m++)
        for (int R = 0; R <= 128; R += 128) run_case(modes[m], R, 8, 2, 128, seed++);
    run_case("int2", 128, 6, 2, 128, seed++); /* group of 3: one head per pass */
    run_case("int2", 0, 16, 1, 64, seed++);   /* group of 16: two passes of 8, D 64 */
    run_case("k4v2", 32, 4, 2, 64, seed++);   /* mixed bits, group of 2 */
    run_case("kivi4", 128, 8, 8, 128, seed++);
    run_case("int2", 128, 16, 2, 128, seed++); /* group of 8 in one pass */
    run_case("int4", 0, 8, 1, 128, seed++);    /* group of 8 with int4 blocks: two passes of 4 */
    /* the same kernels without tensor cores (OMNI_KVC_SIMT is read by kvc_attn_init) */
    setenv("OMNI_KVC_SIMT", "1", 1);
    run_case("int2", 128, 8, 2, 128, seed++);
    run_case("int4", 0, 8, 1, 128, seed++);
    run_case("k4v2", 32, 4, 2, 64, seed++);
    run_case("kivi2", 0, 6, 2, 128, seed++);
    return check_exit();
}
