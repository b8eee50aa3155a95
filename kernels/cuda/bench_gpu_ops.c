/* bench_gpu_ops.c - benchmark (not a test): copy bandwidth, rmsnorm, residual add + rmsnorm and bf16 GEMV/GEMM
 * at Qwen3-VL-8B shapes. Validates a sample of outputs against host fp64 first, then times with CUDA events (median
 * of RUNS launches after warm-up), rotating NBUF input sets so that each launch reads more than the 60 MB L2 from HBM.
 * Prints one table; bandwidth counts bytes read + written once. Usage: omni_bench_gpu_ops [--chain]
 * (--chain: only the decode-shaped GEMVs and the 8B decode chain without attention, see bench_chain). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the dense decode chain without attention ------------------------------------------------------------
 * Qwen3-VL-8B's per-layer decode kernels at M = 1 (qkv GEMV, o_proj GEMV, add + RMSNorm, gate/up GEMV, SwiGLU,
 * down GEMV, add + RMSNorm) over L layers of distinct random weights (L x 420 MB: nothing stays in L2), timed
 * eagerly (one event pair around the whole chain) and as one CUDA graph: weights / time against the copy
 * bandwidth, and the time beyond the bytes per kernel boundary; then the same with the runner's fused decode linears
 * (add + RMSNorm in the qkv and gate/up GEMVs, SwiGLU in the down GEMV: 4 kernels per layer). OMNI_CUDA_PDL=0 in the
 * environment gives both without programmatic dependent launches (the A/B). */
typedef struct {
    uint16_t *qkv, *o, *gu, *down, *n1, *n2;
} chain_layer;
static chain_layer *g_cl;
static uint16_t *g_cx, *g_cx2, *g_cha, *g_chb, *g_cq, *g_catt, *g_cgu, *g_cact;
static int g_cL, g_cfuse;
enum { CH_H = 4096, CH_Q = 6144, CH_I = 12288 };

static void chain_enqueue(void) {
    for (int l = 0; l < g_cL && g_cfuse; l++) { /* the runner's fused form: 4 kernels per layer */
        const chain_layer *c = &g_cl[l];
        CK(omni_cuda_add_rmsnorm_linear(g_cq, g_cx2, g_cx, g_chb, c->n2, 1e-6f, c->qkv, 1, CH_Q, CH_H, g_s));
        CK(omni_cuda_linear(g_ctx, g_chb, OMNI_BF16, g_catt, c->o, NULL, 1, CH_H, CH_H));
        CK(omni_cuda_add_rmsnorm_linear(g_cgu, g_cx, g_cx2, g_chb, c->n1, 1e-6f, c->gu, 1, 2 * CH_I, CH_H, g_s));
        CK(omni_cuda_swiglu_linear(g_chb, g_cgu, c->down, 1, CH_H, CH_I, g_s));
    }
    for (int l = 0; l < g_cL && !g_cfuse; l++) {
        const chain_layer *c = &g_cl[l];
        CK(omni_cuda_linear(g_ctx, g_cq, OMNI_BF16, g_cha, c->qkv, NULL, 1, CH_Q, CH_H));
        CK(omni_cuda_linear(g_ctx, g_chb, OMNI_BF16, g_catt, c->o, NULL, 1, CH_H, CH_H));
        CK(omni_cuda_add_rmsnorm_bf16(g_cha, g_cx, g_chb, c->n1, 1, CH_H, 1e-6f, g_s));
        CK(omni_cuda_linear(g_ctx, g_cgu, OMNI_BF16, g_cha, c->gu, NULL, 1, 2 * CH_I, CH_H));
        CK(omni_cuda_swiglu_bf16(g_cact, g_cgu, 1, CH_I, g_s));
        CK(omni_cuda_linear(g_ctx, g_chb, OMNI_BF16, g_cact, c->down, NULL, 1, CH_H, CH_I));
        CK(omni_cuda_add_rmsnorm_bf16(g_cha, g_cx, g_chb, c->n2, 1, CH_H, 1e-6f, g_s));
    }
}
static void launch_chain(int b) {
    (void)b;
    chain_enqueue();
}
static cudaGraphExec_t g_cge;
static void launch_chain_graph(int b) {
    (void)b;
    if (cudaGraphLaunch(g_cge, g_s) != cudaSuccess) {
        fprintf(stderr, "FATAL: cudaGraphLaunch\n");
        exit(1);
    }
}

static uint16_t *dev_uniform(int64_t n, float lo, float hi) {
    uint16_t *d;
    CK(omni_cuda_malloc((void **)&d, 2 * (size_t)n));
    CK(omni_cuda_fill_uniform_bf16(d, n, g_rng++, lo, hi, g_s));
    return d;
}

static void bench_chain(int L, int fuse) {
    g_cL = L, g_cfuse = fuse;
    g_cl = calloc((size_t)L, sizeof *g_cl);
    const float a = 0.02f; /* weights ~U(-a, a): activations stay O(1) */
    for (int l = 0; l < L; l++) {
        chain_layer *c = &g_cl[l];
        c->qkv = dev_uniform((int64_t)CH_Q * CH_H, -a, a), c->o = dev_uniform((int64_t)CH_H * CH_H, -a, a);
        c->gu = dev_uniform((int64_t)2 * CH_I * CH_H, -a, a), c->down = dev_uniform((int64_t)CH_H * CH_I, -a, a);
        c->n1 = dev_uniform(CH_H, 0.9f, 1.1f), c->n2 = dev_uniform(CH_H, 0.9f, 1.1f);
    }
    g_cx = dev_uniform(CH_H, -1, 1), g_cx2 = dev_uniform(CH_H, -1, 1), g_cha = dev_uniform(CH_H, -1, 1), g_chb = dev_uniform(CH_H, -1, 1);
    g_catt = dev_uniform(CH_H, -1, 1), g_cq = dev_uniform(CH_Q, 0, 0), g_cgu = dev_uniform(2 * CH_I, 0, 0);
    g_cact = dev_uniform(CH_I, 0, 0);
    const double bytes = (double)L * 2 * ((double)CH_Q * CH_H + (double)CH_H * CH_H + 3.0 * CH_I * CH_H);
    const int kernels = (fuse ? 4 : 7) * L;
    CK(omni_cuda_sync(g_s));
    const float eager = bench_time_ms(launch_chain, 1, 5, g_s);
    cudaGraph_t gr;
    if (cudaStreamBeginCapture(g_s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) exit(1);
    chain_enqueue();
    if (cudaStreamEndCapture(g_s, &gr) != cudaSuccess || cudaGraphInstantiate(&g_cge, gr, 0) != cudaSuccess) {
        fprintf(stderr, "FATAL: graph capture of the chain\n");
        exit(1);
    }
    const float graph = bench_time_ms(launch_chain_graph, 1, 11, g_s);
    const double ideal = bytes / (g_copy_gbs * 1e9) * 1e3;
    const char *pdl = getenv("OMNI_CUDA_PDL");
    printf("decode chain (no attention) x %d layers, %s, PDL %s: %.1f MB of weights, ideal %.3f ms at copy speed\n", L,
           fuse ? "fused (4 kernels per layer)" : "separate (7 kernels per layer)", pdl && pdl[0] == '0' ? "off" : "on",
           bytes / 1e6, ideal);
    printf("%-44s %9.4f ms %8.1f GB/s %6.1f%% of copy, %.2f us per kernel beyond the bytes\n", "  eager", eager,
           bytes / (eager * 1e-3) / 1e9, 100 * ideal / eager, (eager - ideal) * 1e3 / kernels);
    printf("%-44s %9.4f ms %8.1f GB/s %6.1f%% of copy, %.2f us per kernel beyond the bytes\n", "  graph", graph,
           bytes / (graph * 1e-3) / 1e9, 100 * ideal / graph, (graph - ideal) * 1e3 / kernels);
    cudaGraphExecDestroy(g_cge), cudaGraphDestroy(gr);
    for (int l = 0; l < L; l++) {
        chain_layer *c = &g_cl[l];
        omni_cuda_free(c->qkv), omni_cuda_free(c->o), omni_cuda_free(c->gu), omni_cuda_free(c->down);
        omni_cuda_free(c->n1), omni_cuda_free(c->n2);
    }
    omni_cuda_free(g_cx), omni_cuda_free(g_cx2), omni_cuda_free(g_cha), omni_cuda_free(g_chb), omni_cuda_free(g_catt);
    omni_cuda_free(g_cq), omni_cuda_free(g_cgu), omni_cuda_free(g_cact);
    free(g_cl);
}

int main(int argc, char **argv) {
    const int chain_only = argc > 1 && !strcmp(argv[1], "--chain");
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
    if (chain_only) { /* the decode-shaped GEMVs alone, then the chain */
        bench_linear("gemv qkv", 1, CH_Q, CH_H, OMNI_BF16, 4);
        bench_linear("gemv o_proj", 1, CH_H, CH_H, OMNI_BF16, 4);
        bench_linear("gemv gate/up", 1, 2 * CH_I, CH_H, OMNI_BF16, 4);
        bench_linear("gemv down", 1, CH_H, CH_I, OMNI_BF16, 4);
        bench_chain(36, 0);
        bench_chain(36, 1);
        omni_cuda_ctx_free(g_ctx);
        return 0;
    }

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
