/* test_gpu_kv_attn.c - GPU decode attention (kvc_decode) over the paged OScaR/KIVI history equals the CPU cache's
 * kv_forward for one new token per sequence.
 *
 * Per configuration (format int2 / int4 / kivi2, window 0 / 128, D, heads): one batch of sequences with history
 * lengths 0, 1, 31, 33, 160, 3000 is fed to a CPU cache (prefill chunks, then kv_commit); the device pages are
 * rebuilt with the same bytes from the same inputs (kvq_fwht -> bf16 -> kvq_quant_*, as the cache stores them)
 * in shuffled page order, raw rows beyond each length poisoned with bf16 NaN; then one decode step runs on both.
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
#include "kvcache/kv_quant.h"
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

typedef struct {
    int Hkv, D, kbits, vbits, rot, norm;
    size_t kh, vh, qpage, rpage;
} layout;

static layout make_layout(const kv_format *f, int Hkv, int D) {
    layout y = {Hkv, D, f->k_type == KV_Q2 ? 2 : 4, f->v_type == KV_Q2 ? 2 : 4, f->rotate, f->scale, 0, 0, 0, 0};
    y.kh = kvq_key_bytes(D, y.kbits, y.norm);
    y.vh = kvq_value_bytes(D, y.vbits);
    y.qpage = Hkv * (y.kh + y.vh);
    y.rpage = (size_t)2 * Hkv * 32 * D * 2;
    return y;
}

/* Row t of head g of a sequence's k (or v) data [N][Hkv][D] as the cache stores it: rotated (if), bf16-rounded. */
static void stored_row(const layout *y, const float *x, int64_t t, int g, float *row) {
    memcpy(row, x + ((size_t)t * y->Hkv + g) * y->D, y->D * 4);
    if (y->rot) kvq_fwht(row, y->D);
    for (int c = 0; c < y->D; c++) row[c] = kvq_bf16_round(row[c]);
}

/* Fill the pages of one sequence of length L (k, v: [L][Hkv][D]); pages come from perm[*next ...]. */
static void build_seq(const layout *y, int R, const float *k, const float *v, int64_t L, uint8_t *qpool,
                      uint8_t *rpool, int32_t *qtab, int32_t *rtab, const int32_t *qperm, const int32_t *rperm,
                      int *qnext, int *rnext) {
    const int D = y->D, nb = (int)((L + 31) / 32), nq = L >= R ? (int)((L - R) / 32) : 0;
    float *kb = malloc(32 * D * 4), *vb = malloc(32 * D * 4), *tmp = malloc(32 * D * 4);
    for (int b = 0; b < nb; b++) {
        if (b < nq) {
            int pg = qperm[(*qnext)++];
            qtab[b] = pg;
            for (int g = 0; g < y->Hkv; g++) {
                for (int j = 0; j < 32; j++) {
                    stored_row(y, k, (int64_t)b * 32 + j, g, kb + j * D);
                    stored_row(y, v, (int64_t)b * 32 + j, g, vb + j * D);
                }
                uint8_t *page = qpool + (size_t)pg * y->qpage;
                kvq_quant_keys(kb, 0, D, y->kbits, y->norm, page + g * y->kh, tmp);
                kvq_quant_values(vb, D, y->vbits, page + y->Hkv * y->kh + g * y->vh);
            }
        } else {
            int pg = rperm[(*rnext)++];
            rtab[b] = pg;
            uint16_t *page = (uint16_t *)(rpool + (size_t)pg * y->rpage);
            for (int g = 0; g < y->Hkv; g++)
                for (int j = 0; j < 32; j++) {
                    int64_t t = (int64_t)b * 32 + j;
                    uint16_t *kr = page + ((size_t)g * 32 + j) * D, *vr = page + ((size_t)(y->Hkv + g) * 32 + j) * D;
                    if (t >= L) { /* poison: must never be read */
                        for (int c = 0; c < D; c++) kr[c] = vr[c] = 0x7fc0;
                        continue;
                    }
                    stored_row(y, k, t, g, kb);
                    stored_row(y, v, t, g, vb);
                    for (int c = 0; c < D; c++) kr[c] = omni_f32_to_bf16(kb[c]), vr[c] = omni_f32_to_bf16(vb[c]);
                }
        }
    }
    free(kb), free(vb), free(tmp);
}

static void shuffle(int32_t *p, int n, rng_t *r) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next(r) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

/* One configuration; returns the worst relative error seen (or +inf on a failure of the run). */
static double run_case(const char *mode, int R, int Hq, int Hkv, int D, uint64_t seed) {
    kv_format f;
    if (kv_parse_mode(mode, &f)) return INFINITY;
    f.window = R;
    const layout y = make_layout(&f, Hkv, D);
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
    /* ---- device pages with the same bytes, shuffled page order */
    int nqp = (int)(total / 32) + NSEQ, nrp = (int)(total / 32) + 2 * NSEQ, tab_stride = (int)(Lmax / 32) + 2;
    uint8_t *qpool = malloc((size_t)nqp * y.qpage), *rpool = malloc((size_t)nrp * y.rpage);
    int32_t *qtab = malloc(NSEQ * tab_stride * 4), *rtab = malloc(NSEQ * tab_stride * 4);
    int32_t *qperm = malloc(nqp * 4), *rperm = malloc(nrp * 4), lens[NSEQ];
    memset(qpool, 0xff, (size_t)nqp * y.qpage);
    memset(rpool, 0xff, (size_t)nrp * y.rpage);
    for (int i = 0; i < NSEQ * tab_stride; i++) qtab[i] = rtab[i] = -1;
    rng_t r = {seed};
    shuffle(qperm, nqp, &r);
    shuffle(rperm, nrp, &r);
    int qnext = 0, rnext = 0;
    for (int s = 0; s < NSEQ; s++) {
        lens[s] = g_lens[s];
        build_seq(&y, R, data[s].k, data[s].v, g_lens[s], qpool, rpool, qtab + s * tab_stride, rtab + s * tab_stride,
                  qperm, rperm, &qnext, &rnext);
    }
    uint8_t *dq, *dr;
    int32_t *dqt, *drt, *dlen;
    float *dqv, *dk, *dv, *dout;
    CU(cudaMalloc((void **)&dq, (size_t)nqp * y.qpage));
    CU(cudaMalloc((void **)&dr, (size_t)nrp * y.rpage));
    CU(cudaMalloc((void **)&dqt, NSEQ * tab_stride * 4));
    CU(cudaMalloc((void **)&drt, NSEQ * tab_stride * 4));
    CU(cudaMalloc((void **)&dlen, NSEQ * 4));
    CU(cudaMalloc((void **)&dqv, NSEQ * qrow * 4));
    CU(cudaMalloc((void **)&dk, NSEQ * krow * 4));
    CU(cudaMalloc((void **)&dv, NSEQ * krow * 4));
    CU(cudaMalloc((void **)&dout, (NSEQ * qrow + 16) * 4));
    CU(cudaMemcpy(dq, qpool, (size_t)nqp * y.qpage, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dr, rpool, (size_t)nrp * y.rpage, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dqt, qtab, NSEQ * tab_stride * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(drt, rtab, NSEQ * tab_stride * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dlen, lens, NSEQ * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dqv, q, NSEQ * qrow * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dk, k, NSEQ * krow * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dv, v, NSEQ * krow * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(dout, 0x7f, (NSEQ * qrow + 16) * 4)); /* 0x7f7f7f7f: poison + canary */
    kvc_layer_view view = {Hkv, D, y.kbits, y.vbits, f.rotate, f.scale, R, dq, (int64_t)y.qpage, 0,
                           (int64_t)(Hkv * y.kh), dr, (int64_t)y.rpage, 0, (int64_t)Hkv * 32 * D * 2, dqt, drt,
                           tab_stride, dlen};
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
    free(scratch), free(q), free(k), free(v), free(ref), free(got), free(qpool), free(rpool), free(qtab), free(rtab);
    free(qperm), free(rperm);
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
