/* bench_gpu_ops.c - benchmark (not a test): copy bandwidth, rmsnorm, residual add + rmsnorm and bf16 GEMV/GEMM
 * at Qwen3-VL-8B shapes. Validates a sample of outputs against host fp64 first, then times with CUDA events (median
 * of RUNS launches after warm-up), rotating NBUF input sets so that each launch reads more than the 60 MB L2 from HBM.
 * Prints one table; bandwidth counts bytes read + written once. Usage: omni_bench_gpu_ops */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "kernels/cuda/bench_timing.h"
#include "kernels/ops_cuda.h"
#include "kernels/tensor.h"

#define RUNS 50
#define NBUF 4
#define CK BENCH_CK

static omni_cuda_ctx *g_ctx;
static cudaStream_t g_s;
static uint64_t g_rng = 42;
static float frand(void) { /* uniform [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static uint16_t *rand_dev_bf16(int64_t n, uint16_t **host_copy) {
    uint16_t *h = malloc(2 * n), *d;
    for (int64_t i = 0; i < n; i++) h[i] = omni_f32_to_bf16(frand());
    CK(omni_cuda_malloc((void **)&d, 2 * n));
    CK(omni_cuda_h2d(d, h, 2 * n, g_s));
    if (host_copy)
        *host_copy = h;
    else
        free(h);
    return d;
}

typedef void (*launch_fn)(int buf);

static float time_ms(launch_fn fn) { return bench_time_ms(fn, NBUF, RUNS, g_s); }

static double g_copy_gbs;
static void report(const char *what, float ms, double bytes) {
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("%-44s %9.4f ms %8.1f GB/s %6.1f%% of copy\n", what, ms, gbs, 100 * gbs / g_copy_gbs);
}

/* ---- copy ---------------------------------------------------------------------------------------------- */
static void *g_cpy[2];
static const size_t COPY_BYTES = (size_t)1 << 30;
static void launch_copy(int b) { CK(omni_cuda_d2d(g_cpy[b & 1], g_cpy[!(b & 1)], COPY_BYTES, g_s)); }

/* ---- rmsnorm ------------------------------------------------------------------------------------------- */
static uint16_t *g_rx[NBUF], *g_ry[NBUF], *g_rw;
static int g_rrows, g_rdim;
static void launch_rms(int b) { CK(omni_cuda_rmsnorm_bf16(g_ry[b], g_rx[b], g_rw, g_rrows, g_rdim, 1e-6f, g_s)); }

static void bench_rmsnorm(int rows, int dim) {
    g_rrows = rows, g_rdim = dim;
    uint16_t *hx, *hw;
    for (int b = 0; b < NBUF; b++) {
        g_rx[b] = rand_dev_bf16((int64_t)rows * dim, b == 0 ? &hx : NULL);
        CK(omni_cuda_malloc((void **)&g_ry[b], 2 * (size_t)rows * dim));
    }
    g_rw = rand_dev_bf16(dim, &hw);
    launch_rms(0);
    uint16_t *y = malloc(2 * (size_t)dim);
    CK(omni_cuda_d2h(y, g_ry[0], 2 * (size_t)dim, g_s)); /* validate row 0 */
    double ss = 0, worst = 0;
    for (int i = 0; i < dim; i++) ss += (double)omni_bf16_to_f32(hx[i]) * omni_bf16_to_f32(hx[i]);
    double inv = 1 / sqrt(ss / dim + 1e-6);
    for (int i = 0; i < dim; i++) {
        double r = omni_bf16_to_f32(hx[i]) * inv * omni_bf16_to_f32(hw[i]);
        double e = fabs(omni_bf16_to_f32(y[i]) - r) / (fabs(r) + 1e-30);
        worst = e > worst ? e : worst;
    }
    if (!(worst <= 0x1p-6)) { /* two bf16 roundings: 2^-7 + 2^-16 relative, margin ~2 */
        fprintf(stderr, "rmsnorm validation failed: rel err %.3g\n", worst);
        exit(1);
    }
    char what[80];
    snprintf(what, sizeof what, "rmsnorm rows=%d dim=%d", rows, dim);
    report(what, time_ms(launch_rms), 2.0 * 2 * rows * dim + 2.0 * dim);
    for (int b = 0; b < NBUF; b++) omni_cuda_free(g_rx[b]), omni_cuda_free(g_ry[b]);
    omni_cuda_free(g_rw), free(hx), free(hw), free(y);
}

/* add_rmsnorm: x += a (a = the next buffer), h = rmsnorm(x); one pass instead of add (3 passes) + rmsnorm (2). */
static void launch_add_rms(int b) {
    CK(omni_cuda_add_rmsnorm_bf16(g_ry[b], g_rx[b], g_rx[(b + 1) % NBUF], g_rw, g_rrows, g_rdim, 1e-6f, g_s));
}

static void bench_add_rmsnorm(int rows, int dim) {
    g_rrows = rows, g_rdim = dim;
    int64_t n = (int64_t)rows * dim;
    uint16_t *hx, *ha, *hw, *y = malloc(2 * (size_t)dim);
    for (int b = 0; b < NBUF; b++) {
        g_rx[b] = rand_dev_bf16(n, b == 0 ? &hx : b == 1 ? &ha : NULL);
        CK(omni_cuda_malloc((void **)&g_ry[b], 2 * (size_t)n));
    }
    g_rw = rand_dev_bf16(dim, &hw);
    launch_add_rms(0);
    CK(omni_cuda_d2h(y, g_rx[0], 2 * (size_t)dim, g_s)); /* validate row 0 of x: bf16(x + a) exactly */
    for (int i = 0; i < dim; i++)
        if (y[i] != omni_f32_to_bf16(omni_bf16_to_f32(hx[i]) + omni_bf16_to_f32(ha[i]))) {
            fprintf(stderr, "add_rmsnorm validation failed at %d\n", i);
            exit(1);
        }
    char what[80];
    snprintf(what, sizeof what, "add_rmsnorm rows=%d dim=%d", rows, dim);
    report(what, time_ms(launch_add_rms), 8.0 * n + 2.0 * dim);
    for (int b = 0; b < NBUF; b++) omni_cuda_free(g_rx[b]), omni_cuda_free(g_ry[b]);
    omni_cuda_free(g_rw), free(hx), free(ha), free(hw), free(y);
}

/* ---- linear -------------------------------------------------------------------------------------------- */
static uint16_t *g_lw[NBUF], *g_lx;
static void *g_ly;
static int g_M, g_N, g_K;
static omni_dtype g_ydt;
static void launch_lin(int b) { CK(omni_cuda_linear(g_ctx, g_ly, g_ydt, g_lx, g_lw[b], NULL, g_M, g_N, g_K)); }

static void bench_linear(const char *name, int M, int N, int K, omni_dtype ydt, int nbuf) {
    g_M = M, g_N = N, g_K = K, g_ydt = ydt;
    uint16_t *hw, *hx;
    for (int b = 0; b < NBUF; b++)
        g_lw[b] = b < nbuf ? rand_dev_bf16((int64_t)N * K, b == 0 ? &hw : NULL) : g_lw[b % nbuf];
    g_lx = rand_dev_bf16((int64_t)M * K, &hx);
    size_t es = omni_dtype_size(ydt);
    CK(omni_cuda_malloc(&g_ly, es * (size_t)M * N));
    launch_lin(0);
    void *y = malloc(es * (size_t)M * N);
    CK(omni_cuda_d2h(y, g_ly, es * (size_t)M * N, g_s));
    for (int s = 0; s < 16; s++) { /* validate 16 sampled outputs of row 0 against fp64 */
        int n = (int)((frand() + 1) * 0.5 * N) % N;
        double r = 0, a = 0;
        for (int k = 0; k < K; k++) {
            double p = (double)omni_bf16_to_f32(hx[k]) * omni_bf16_to_f32(hw[(int64_t)n * K + k]);
            r += p, a += fabs(p);
        }
        double got = ydt == OMNI_F32 ? ((float *)y)[n] : omni_bf16_to_f32(((uint16_t *)y)[n]);
        if (!(fabs(got - r) <= 0x1p-8 * fabs(r) + 12 * 0x1p-24 * (sqrt(K) + 1) * a)) { /* bf16 rounding + fp32 sum */
            fprintf(stderr, "%s validation failed at n=%d: got %g want %g\n", name, n, got, r);
            exit(1);
        }
    }
    float ms = time_ms(launch_lin);
    double bytes = 2.0 * N * K + 2.0 * M * K + (double)es * M * N;
    char what[96];
    snprintf(what, sizeof what, "%s M=%d N=%d K=%d", name, M, N, K);
    report(what, ms, bytes);
    if (M > 1) printf("%-44s %9s    %8.1f TFLOP/s\n", "", "", 2.0 * M * N * K / (ms * 1e-3) / 1e12);
    for (int b = 0; b < nbuf; b++) omni_cuda_free(g_lw[b]);
    omni_cuda_free(g_lx), omni_cuda_free(g_ly), free(hw), free(hx), free(y);
}

int main(void) {
    int n = 0;
    CK(omni_cuda_available(&n));
    if (n == 0) {
        printf("no CUDA device\n");
        return 77;
    }
    CK(omni_cuda_ctx_init(&g_ctx, 0));
    g_s = (cudaStream_t)omni_cuda_ctx_stream(g_ctx);
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("%s, %d SMs, L2 %d MB\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
    CK(omni_cuda_malloc(&g_cpy[0], COPY_BYTES));
    CK(omni_cuda_malloc(&g_cpy[1], COPY_BYTES));
    CK(omni_cuda_memset(g_cpy[0], 1, COPY_BYTES, g_s));
    float ms = time_ms(launch_copy);
    g_copy_gbs = 2.0 * COPY_BYTES / (ms * 1e-3) / 1e9;
    printf("%-44s %9.4f ms %8.1f GB/s (read + write)\n", "d2d copy 1 GiB", ms, g_copy_gbs);
    omni_cuda_free(g_cpy[0]), omni_cuda_free(g_cpy[1]);

    bench_rmsnorm(1, 4096);     /* decode: latency-bound */
    bench_rmsnorm(8192, 4096);  /* prefill chunk: 64 MiB in + 64 MiB out */
    bench_rmsnorm(8192 * 32, 128); /* q_norm over 8192 tokens x 32 heads */
    bench_add_rmsnorm(8192, 4096); /* residual + post-attention norm, prefill chunk */
    bench_linear("gemv gate/up", 1, 12288, 4096, OMNI_BF16, 4);
    bench_linear("gemv down", 1, 4096, 12288, OMNI_BF16, 4);
    bench_linear("gemv q", 1, 4096, 4096, OMNI_BF16, 4);
    bench_linear("gemv lm_head f32", 1, 151936, 4096, OMNI_F32, 1);
    bench_linear("gemm gate/up", 8, 12288, 4096, OMNI_BF16, 4);
    bench_linear("gemm gate/up", 4096, 12288, 4096, OMNI_BF16, 1);
    omni_cuda_ctx_free(g_ctx);
    return 0;
}
