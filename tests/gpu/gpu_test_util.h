/* gpu_test_util.h - helpers shared by the GPU op tests (include once per test program; everything is static):
 * a seeded generator, bf16 inputs with their exact f32 values, device buffers with canaries behind them and 0xFF
 * (NaN) poison in front of every output, and the tolerance comparison with its per-op summary (the worst
 * error/tolerance ratio, the worst absolute error and the worst normalised MSE; printed at the end so that a bound
 * much too loose shows in the log).
 * Notation used by the tolerances: U = 2^-24 (f32 unit roundoff), B = 2^-8 (bf16 unit roundoff). */
#ifndef OMNI_GPU_TEST_UTIL_H
#define OMNI_GPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops_cuda.h"
#include "kernels/status.h"
#include "kernels/tensor.h"

#define U 0x1p-24
#define B 0x1p-8
#define CANARY_BYTES 1024
#define ATOL_SUB 0x1p-126 /* below the smallest normal bf16 the relative bounds no longer hold: absolute floor */
#define GPU_TEST_UNUSED __attribute__((unused))

static void *g_stream;
static omni_cuda_ctx *g_ctx;

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        omni_status st_ = (call);                                                                              \
        if (st_ != OMNI_OK) {                                                                                  \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, omni_last_error());            \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
GPU_TEST_UNUSED static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
GPU_TEST_UNUSED static double rng_unif(void) { return ((rng_u64() >> 11) + 0.5) * 0x1p-53; }
GPU_TEST_UNUSED static float rng_normal(void) { return (float)(sqrt(-2 * log(rng_unif())) * cos(6.283185307179586 * rng_unif())); }

GPU_TEST_UNUSED static void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "FATAL: out of host memory\n");
        exit(1);
    }
    return p;
}

/* bf16 host data: bits h[i] and their exact f32 values f[i] = bf16(scale·N(0,1) + shift). */
GPU_TEST_UNUSED static void rand_bf16(uint16_t *h, float *f, int64_t n, float scale, float shift) {
    for (int64_t i = 0; i < n; i++) {
        h[i] = omni_f32_to_bf16(scale * rng_normal() + shift);
        f[i] = omni_bf16_to_f32(h[i]);
    }
}

GPU_TEST_UNUSED static uint8_t canary_byte(size_t i) { return (uint8_t)(0x5a ^ (i * 131u)); }

/* Device buffer of `bytes` followed by CANARY_BYTES of pattern; the first `bytes` hold `host` or 0xFF poison. */
GPU_TEST_UNUSED static void *dev_buf(const void *host, size_t bytes) {
    static uint8_t pat[CANARY_BYTES];
    for (size_t i = 0; i < CANARY_BYTES; i++) pat[i] = canary_byte(i);
    void *d;
    TRY(omni_cuda_malloc(&d, bytes + CANARY_BYTES));
    if (host)
        TRY(omni_cuda_h2d(d, host, bytes, g_stream));
    else
        TRY(omni_cuda_memset(d, 0xff, bytes, g_stream));
    TRY(omni_cuda_h2d((char *)d + bytes, pat, CANARY_BYTES, g_stream));
    return d;
}

/* The canary behind a device buffer must be intact; frees the buffer. */
GPU_TEST_UNUSED static void dev_done(const char *what, void *d, size_t bytes) {
    uint8_t got[CANARY_BYTES];
    TRY(omni_cuda_d2h(got, (char *)d + bytes, CANARY_BYTES, g_stream));
    int bad = 0;
    for (size_t i = 0; i < CANARY_BYTES; i++) bad += got[i] != canary_byte(i);
    CHECK(bad == 0, "%s: %d canary bytes overwritten", what, bad);
    omni_cuda_free(d);
}

GPU_TEST_UNUSED static void fetch_bf16(float *dst, const void *d, int64_t n) {
    uint16_t *h = xmalloc(sizeof(uint16_t) * n);
    TRY(omni_cuda_d2h(h, d, sizeof(uint16_t) * n, g_stream));
    for (int64_t i = 0; i < n; i++) dst[i] = omni_bf16_to_f32(h[i]);
    free(h);
}

/* Per-op summary of the comparisons. */
typedef struct {
    const char *name;
    double ratio, abs, nmse;
    int cases;
    char worst[160]; /* where the worst err/tol was seen */
} op_stats;

/* Elements with |got - ref| > tol fail (NaN/Inf must match the reference's class); reports the first few. */
GPU_TEST_UNUSED static void compare(op_stats *op, const char *what, const float *got, const float *ref, const double *tol,
                    int64_t n) {
    int64_t bad = 0;
    double se = 0, sr = 0;
    for (int64_t i = 0; i < n; i++) {
        double err;
        if (!isfinite(ref[i]))
            err = (isnan(ref[i]) ? isnan(got[i]) : got[i] == ref[i]) ? 0 : INFINITY;
        else
            err = isfinite(got[i]) ? fabs((double)got[i] - ref[i]) : INFINITY;
        if (!(err <= tol[i])) {
            if (bad++ < 3)
                fprintf(stderr, "  %s: [%lld] got %.9g ref %.9g err %.3g tol %.3g\n", what, (long long)i, got[i],
                        ref[i], err, tol[i]);
        }
        double r = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0);
        if (r > op->ratio) {
            op->ratio = r;
            snprintf(op->worst, sizeof op->worst, "%s [%lld] got %.9g ref %.9g tol %.3g", what, (long long)i, got[i],
                     ref[i], tol[i]);
        }
        if (isfinite(ref[i])) {
            if (err > op->abs) op->abs = err;
            se += err * err, sr += (double)ref[i] * ref[i];
        }
    }
    double nmse = sr > 0 ? se / sr : 0;
    if (nmse > op->nmse) op->nmse = nmse;
    op->cases++;
    CHECK(bad == 0, "%s: %lld of %lld elements out of tolerance", what, (long long)bad, (long long)n);
}

GPU_TEST_UNUSED static void stats_print(const op_stats *ops, int n) {
    printf("%-18s %6s %12s %12s %12s\n", "op", "cases", "max|err|", "err/tol", "nmse");
    for (int o = 0; o < n; o++)
        printf("%-18s %6d %12.4g %12.4g %12.4g\n", ops[o].name, ops[o].cases, ops[o].abs, ops[o].ratio, ops[o].nmse);
    for (int o = 0; o < n; o++)
        if (ops[o].worst[0]) printf("worst %s: %s\n", ops[o].name, ops[o].worst);
}

GPU_TEST_UNUSED static omni_tensor bf16_vec(uint16_t *h, int64_t n) { return omni_tensor_make(h, OMNI_BF16, 1, &n); }

/* Open device 0 and its context; 0 when there is no GPU (the caller prints SKIP and returns 77). */
GPU_TEST_UNUSED static int gpu_test_open(void) {
    int ndev = -1;
    CHECK(omni_cuda_available(&ndev) == OMNI_OK, "omni_cuda_available never fails");
    if (ndev <= 0) return 0;
    TRY(omni_cuda_ctx_init(&g_ctx, 0));
    g_stream = omni_cuda_ctx_stream(g_ctx);
    return 1;
}

#endif
