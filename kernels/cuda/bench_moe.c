/* bench_moe.c - benchmark (not a test; test_gpu_llm_ops validates the ops): the sparse MoE block at the Qwen3-Omni
 * thinker's shapes (E 128, k 8, H 2048, I 768), random bf16 weights and random inputs (uniform-ish routing).
 * Decode (T = 1, 2, 4, 8): omni_cuda_moe_decode_fused (one kernel) vs omni_cuda_moe_decode_split (three kernels) vs
 * the per-entry path (router linear + route + entry GEMVs + SwiGLU + combine) in the same run, also inside CUDA
 * graphs (no launch gaps), as bytes of the active experts' weights (+ router) over the time, against the copy
 * bandwidth; prefill (T = 512, 4096): omni_cuda_moe_prefill (batched cuBLAS over a capacity per expert) vs the
 * grouped-kernel path (router, route, grouping, grouped linears, SwiGLU, combine), in TFLOP/s of the expert GEMMs.
 * Decode also with the residual adds around the block (add + RMSNorm, block, add + RMSNorm) unfused vs
 * omni_cuda_moe_decode_res. CUDA events around each call, median of RUNS after warm-up; NBUF different inputs
 * in rotation so that the experts change between calls (one call reads ~76 MB, beyond the 60 MB L2).
 * Usage: omni_bench_moe [--decode | --profile]  (--decode: decode T = 1, 2 only; --profile: T = 1, three calls of
 * each decode path, no timing, for ncu/nsys; stdout: one line per row) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cuda/bench_timing.h"
#include "kernels/ops_cuda.h"
#include "kernels/tensor.h"

#define RUNS 40
#define NBUF 16
#define E 128
#define KTOP 8
#define H 2048
#define I 768
#define T_MAX 4096
#define CK BENCH_CK

static omni_cuda_ctx *g_ctx;
static cudaStream_t g_s;
static uint64_t g_rng = 7;

/* n bf16 values uniform in [-scale, scale) on the device: one random slice of up to 16 Mi values made on the host,
 * repeated (the bandwidth does not depend on the values; the router and inputs are fully random). */
static uint16_t *rand_dev(int64_t n, float scale) {
    const int64_t m = n < (1 << 24) - 8 ? n : (1 << 24) - 8; /* not a divisor of the buffer and input strides */
    uint16_t *d, *h = malloc(2 * (size_t)m);
    CK(omni_cuda_malloc((void **)&d, 2 * (size_t)n));
    for (int64_t i = 0; i < m; i++) {
        g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = omni_f32_to_bf16(scale * (float)((g_rng >> 40) * 0x1p-24 * 2.0 - 1.0));
    }
    CK(omni_cuda_h2d(d, h, 2 * (size_t)m, g_s));
    for (int64_t o = m; o < n; o += m) CK(omni_cuda_d2d(d + o, d, 2 * (size_t)(n - o < m ? n - o : m), g_s));
    free(h);
    return d;
}

/* the block's buffers (g_xr, g_h, g_nw, g_mo: the residual stream, the norm output, norm weights, the block output
 * of the runs with the residual adds) */
static uint16_t *g_rw, *g_gu, *g_dn, *g_x, *g_y, *g_gout, *g_act, *g_out, *g_xr, *g_h, *g_nw, *g_mo;
static float *g_lg, *g_sw;
static int32_t *g_se, *g_off, *g_perm, *g_slot;
static unsigned *g_ticket;
static void *g_pws;
static size_t g_pws_bytes;
static int g_T;

static void run_decode(int b) {
    const omni_cuda_moe_scratch sc = {g_lg, g_se, g_sw, g_act, g_ticket, g_mo};
    CK(omni_cuda_moe_decode_fused(g_y, g_x + (int64_t)b * T_MAX * H, H, g_rw, g_gu, g_dn, g_T, E, KTOP, H, I, 1, &sc,
                                  g_s));
}

static void run_split(int b) {
    const omni_cuda_moe_scratch sc = {g_lg, g_se, g_sw, g_act, g_ticket, g_mo};
    CK(omni_cuda_moe_decode_split(g_y, g_x + (int64_t)b * T_MAX * H, H, g_rw, g_gu, g_dn, g_T, E, KTOP, H, I, 1, &sc,
                                  g_s));
}

/* The MoE half of a decode layer as the runner ran it: x += a (a = input b), h = rmsnorm(x), the block, x += out,
 * h = rmsnorm(x) - unfused with the three kernels or the one kernel, or omni_cuda_moe_decode_res. */
#define RES_T_MAX 8
static void res_unfused(int b, int fused) {
    const omni_cuda_moe_scratch sc = {g_lg, g_se, g_sw, g_act, g_ticket, g_mo};
    uint16_t *x = g_xr + (int64_t)b * RES_T_MAX * H;
    CK(omni_cuda_add_rmsnorm_bf16(g_h, x, g_x + (int64_t)b * T_MAX * H, g_nw, g_T, H, 1e-6f, g_s));
    if (fused)
        CK(omni_cuda_moe_decode_fused(g_mo, g_h, H, g_rw, g_gu, g_dn, g_T, E, KTOP, H, I, 1, &sc, g_s));
    else
        CK(omni_cuda_moe_decode_split(g_mo, g_h, H, g_rw, g_gu, g_dn, g_T, E, KTOP, H, I, 1, &sc, g_s));
    CK(omni_cuda_add_rmsnorm_bf16(g_h, x, g_mo, g_nw + H, g_T, H, 1e-6f, g_s));
}
static void run_res_split(int b) { res_unfused(b, 0); }
static void run_res_fused(int b) { res_unfused(b, 1); }
static void run_res(int b) {
    const omni_cuda_moe_scratch sc = {g_lg, g_se, g_sw, g_act, g_ticket, g_mo};
    CK(omni_cuda_moe_decode_res(g_xr + (int64_t)b * RES_T_MAX * H, g_h, g_x + (int64_t)b * T_MAX * H, g_nw, g_nw + H,
                                1e-6f, g_rw, g_gu, g_dn, g_T, E, KTOP, H, I, 1, &sc, g_s));
}

/* Median ms of one call inside a CUDA graph of NBUF calls (one per input buffer) replayed: no launch gaps, as
 * the runner's decode graphs. */
static float graph_ms(void (*fn)(int)) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaEvent_t a, z;
    float ms[9];
    CK(cudaStreamBeginCapture(g_s, cudaStreamCaptureModeThreadLocal));
    for (int b = 0; b < NBUF; b++) fn(b);
    CK(cudaStreamEndCapture(g_s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&z));
    for (int r = 0; r < 2; r++) CK(cudaGraphLaunch(ge, g_s));
    for (int r = 0; r < 9; r++) {
        CK(cudaEventRecord(a, g_s));
        CK(cudaGraphLaunch(ge, g_s));
        CK(cudaEventRecord(z, g_s));
        CK(cudaEventSynchronize(z));
        CK(cudaEventElapsedTime(&ms[r], a, z));
    }
    qsort(ms, 9, sizeof(float), bench_cmp_f);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(z));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return ms[4] / NBUF;
}

static void run_route(int b) {
    CK(omni_cuda_linear(g_ctx, g_lg, OMNI_F32, g_x + (int64_t)b * T_MAX * H, g_rw, NULL, g_T, E, H));
    CK(omni_cuda_moe_route(g_se, g_sw, g_lg, g_T, E, KTOP, 1, g_s));
}

static void run_entry(int b) {
    const int n = g_T * KTOP;
    run_route(b);
    CK(omni_cuda_moe_entry_linear(g_gout, g_x + (int64_t)b * T_MAX * H, H, KTOP, g_gu, g_se, n, 2 * I, H, g_s));
    CK(omni_cuda_swiglu_bf16(g_act, g_gout, n, I, g_s));
    CK(omni_cuda_moe_entry_linear(g_out, g_act, I, 1, g_dn, g_se, n, H, I, g_s));
    CK(omni_cuda_moe_combine(g_y, g_out, NULL, g_se, g_sw, g_T, KTOP, H, g_s));
}

static void run_grouped(int b) {
    const int n = g_T * KTOP;
    run_route(b);
    CK(omni_cuda_moe_group(g_off, g_perm, g_slot, g_se, g_T, E, KTOP, g_s));
    CK(omni_cuda_moe_grouped_linear(g_gout, g_x + (int64_t)b * T_MAX * H, H, g_perm, g_gu, g_off, E, n, 2 * I, H, g_s));
    CK(omni_cuda_swiglu_bf16(g_act, g_gout, n, I, g_s));
    CK(omni_cuda_moe_grouped_linear(g_out, g_act, I, NULL, g_dn, g_off, E, n, H, I, g_s));
    CK(omni_cuda_moe_combine(g_y, g_out, g_slot, g_se, g_sw, g_T, KTOP, H, g_s));
}

static void run_prefill(int b) {
    CK(omni_cuda_moe_prefill(g_ctx, g_y, g_x + (int64_t)b * T_MAX * H, g_rw, g_gu, g_dn, g_T, E, KTOP, H, I, 1, g_pws,
                             g_pws_bytes));
}

static float time_ms(void (*fn)(int), int nbuf) { return bench_time_ms(fn, nbuf, RUNS, g_s); }

/* The largest |difference| between the outputs of two paths on input 0 (same routing, bf16 class) and max |y|. */
static void max_diff(void (*a)(int), void (*b)(int), double *md, double *mx) {
    uint16_t *y1 = malloc(2 * (size_t)g_T * H), *y2 = malloc(2 * (size_t)g_T * H);
    a(0);
    CK(omni_cuda_d2h(y1, g_y, 2 * (size_t)g_T * H, g_s));
    b(0);
    CK(omni_cuda_d2h(y2, g_y, 2 * (size_t)g_T * H, g_s));
    *md = 0, *mx = 0;
    for (int64_t j = 0; j < (int64_t)g_T * H; j++) {
        double d = fabs(omni_bf16_to_f32(y1[j]) - omni_bf16_to_f32(y2[j]));
        *md = d > *md ? d : *md, *mx = fmax(*mx, fabs(omni_bf16_to_f32(y2[j])));
    }
    free(y1), free(y2);
}

/* Distinct experts of the last routing (sel_e of g_T tokens) -> the weight bytes a call reads once each. */
static double active_bytes(void) {
    int32_t sel[T_MAX * KTOP];
    int seen[E] = {0}, n = 0;
    CK(omni_cuda_d2h(sel, g_se, sizeof(int32_t) * (size_t)g_T * KTOP, g_s));
    for (int i = 0; i < g_T * KTOP; i++) n += !seen[sel[i]]++;
    return (double)n * 3 * I * H * 2 + (double)E * H * 2;
}

int main(int argc, char **argv) {
    const int decode_only = argc > 1 && strcmp(argv[1], "--decode") == 0;
    const int profile = argc > 1 && strcmp(argv[1], "--profile") == 0;
    int nd = 0;
    CK(omni_cuda_available(&nd));
    if (nd == 0) {
        printf("no CUDA device\n");
        return 77;
    }
    CK(omni_cuda_ctx_init(&g_ctx, 0));
    g_s = (cudaStream_t)omni_cuda_ctx_stream(g_ctx);
    /* copy bandwidth (read + write) as the ceiling */
    void *c0, *c1;
    const size_t cb = (size_t)1 << 30;
    CK(omni_cuda_malloc(&c0, cb));
    CK(omni_cuda_malloc(&c1, cb));
    CK(omni_cuda_memset(c0, 1, cb, g_s));
    cudaEvent_t a, z;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&z));
    float best = 1e30f;
    for (int r = 0; r < 10; r++) {
        float ms;
        CK(cudaEventRecord(a, g_s));
        CK(omni_cuda_d2d(r & 1 ? c0 : c1, r & 1 ? c1 : c0, cb, g_s));
        CK(cudaEventRecord(z, g_s));
        CK(cudaEventSynchronize(z));
        CK(cudaEventElapsedTime(&ms, a, z));
        if (r >= 2 && ms < best) best = ms;
    }
    const double copy_gbs = 2.0 * cb / (best * 1e-3) / 1e9;
    omni_cuda_free(c0), omni_cuda_free(c1);
    printf("MoE block, E %d k %d H %d I %d, random bf16 weights and inputs (uniform-ish routing); copy %.1f GB/s\n", E,
           KTOP, H, I, copy_gbs);
    g_rw = rand_dev((int64_t)E * H, 2.f / sqrtf(H));
    g_gu = rand_dev((int64_t)E * 2 * I * H, 1.f / sqrtf(H));
    g_dn = rand_dev((int64_t)E * H * I, 1.f / sqrtf(I));
    g_x = rand_dev((int64_t)NBUF * T_MAX * H, 1.f);
    const size_t n = (size_t)T_MAX * KTOP;
    CK(omni_cuda_malloc((void **)&g_y, 2 * (size_t)T_MAX * H));
    CK(omni_cuda_malloc((void **)&g_gout, 2 * n * 2 * I));
    CK(omni_cuda_malloc((void **)&g_act, 2 * n * I));
    CK(omni_cuda_malloc((void **)&g_out, 2 * n * H));
    CK(omni_cuda_malloc((void **)&g_lg, 4 * (size_t)T_MAX * E));
    CK(omni_cuda_malloc((void **)&g_sw, 4 * n));
    CK(omni_cuda_malloc((void **)&g_se, 4 * n));
    CK(omni_cuda_malloc((void **)&g_perm, 4 * n));
    CK(omni_cuda_malloc((void **)&g_slot, 4 * n));
    CK(omni_cuda_malloc((void **)&g_off, 4 * (E + 1)));
    CK(omni_cuda_malloc((void **)&g_ticket, OMNI_CUDA_MOE_CTL_BYTES));
    CK(omni_cuda_memset(g_ticket, 0, OMNI_CUDA_MOE_CTL_BYTES, g_s));
    g_xr = rand_dev((int64_t)NBUF * RES_T_MAX * H, 1.f);
    g_nw = rand_dev(2 * H, 0.2f);
    CK(omni_cuda_malloc((void **)&g_h, 2 * (size_t)RES_T_MAX * H));
    CK(omni_cuda_malloc((void **)&g_mo, 2 * (size_t)RES_T_MAX * H));
    g_pws_bytes = omni_cuda_moe_prefill_scratch(T_MAX, E, KTOP, H, I);
    CK(omni_cuda_malloc(&g_pws, g_pws_bytes));
    if (profile) { /* T = 1: 3 calls each of the three kernels, the residual path, the one kernel (for a profiler) */
        g_T = 1;
        for (int b = 0; b < 3; b++) run_split(b);
        for (int b = 0; b < 3; b++) run_res(b);
        for (int b = 0; b < 3; b++) run_decode(b);
        CK(omni_cuda_sync(g_s));
        printf("profile run done\n");
        omni_cuda_ctx_free(g_ctx);
        return 0;
    }
    const int dec_t[] = {1, 2, 4, 8};
    for (int i = 0; i < (decode_only ? 2 : 4); i++) {
        g_T = dec_t[i];
        double md, mx;
        double ms, mxs;
        max_diff(run_decode, run_entry, &md, &mx);
        max_diff(run_decode, run_split, &ms, &mxs);
        const double bytes = active_bytes();
        const float td = time_ms(run_decode, NBUF), te = time_ms(run_entry, NBUF), tr = time_ms(run_route, NBUF);
        const float ts = time_ms(run_split, NBUF), gd = graph_ms(run_decode), gs = graph_ms(run_split);
#define PCT(t) (100 * bytes / ((t) * 1e-3) / 1e9 / copy_gbs)
        printf("decode T=%d: one kernel %6.1f us %5.1f%% of copy (graph %6.1f us %5.1f%%) | three kernels %6.1f us "
               "%5.1f%% (graph %6.1f us %5.1f%%) | per-entry path %6.1f us (route %5.1f us) %5.1f%% | %.1f MB | "
               "max |diff| vs per-entry %.3g of max |y| %.3g, vs three kernels %.3g\n",
               g_T, td * 1e3, PCT(td), gd * 1e3, PCT(gd), ts * 1e3, PCT(ts), gs * 1e3, PCT(gs), te * 1e3, tr * 1e3,
               PCT(te), bytes / 1e6, md, mx, ms);
        /* the MoE half of a layer with its two add + RMSNorm (x drifts from call to call; only times matter) */
        const float rs = time_ms(run_res_split, NBUF), rf = time_ms(run_res_fused, NBUF), rr = time_ms(run_res, NBUF);
        const float grs = graph_ms(run_res_split), grf = graph_ms(run_res_fused), grr = graph_ms(run_res);
        printf("decode T=%d with the residual adds: norm + three kernels + norm %6.1f us (graph %6.1f) | norm + one "
               "kernel + norm %6.1f us (graph %6.1f) | omni_cuda_moe_decode_res %6.1f us %5.1f%% of copy (graph %6.1f us "
               "%5.1f%%)\n", g_T, rs * 1e3, grs * 1e3, rf * 1e3, grf * 1e3, rr * 1e3, PCT(rr), grr * 1e3, PCT(grr));
#undef PCT
    }
    const int pre_t[] = {512, 4096};
    for (int i = 0; i < (decode_only ? 0 : 2); i++) {
        g_T = pre_t[i];
        const double flops = 2.0 * g_T * KTOP * 3.0 * I * H;
        double md, mx;
        max_diff(run_prefill, run_grouped, &md, &mx);
        const float tp = time_ms(run_prefill, 4), tg = time_ms(run_grouped, 4), tr = time_ms(run_route, 4);
        printf("prefill T=%d: omni_cuda_moe_prefill %8.1f us %6.1f TFLOP/s | grouped path %8.1f us %6.1f TFLOP/s "
               "(route %6.1f us) | %.2fx | max |diff| %.3g of max |y| %.3g\n", g_T, tp * 1e3,
               flops / (tp * 1e-3) / 1e12, tg * 1e3, flops / (tg * 1e-3) / 1e12, tr * 1e3, tg / tp, md, mx);
    }
    omni_cuda_ctx_free(g_ctx);
    return 0;
}
