/* test_gpu_kv_dev.c - the device KV cache (kvcache/kv_dev.h) against the CPU cache: the same random steps and the
 * same bf16-rounded k/v drive both, and after every step the device's tables, lengths, raw rows and packed blocks
 * (copied back) must equal the CPU cache's byte for byte, unused pages keep the 0xff poison they started with,
 * written rows are finite and the k/v inputs' canaries are untouched (tests/kvcache/kv_dev_check.h; every format,
 * window, sink, head size and per-layer mix of its table). Steps alternate between three ways of running the
 * device side: direct launches sized for the step (t_cap 0), direct launches sized for max_chunk tokens (idle
 * CTAs), and a CUDA graph captured once per configuration (upload + every layer's append, t_cap max_chunk) and
 * replayed with new data (the step record is read from the pinned buffer at replay). One configuration in four runs
 * with the early flush off (OMNI_KV_EARLY_FLUSH=0: every flush in the appends), one in four with a plain append
 * launch (OMNI_KV_APPEND_PDL=0); the others flush fully committed blocks for every layer at the upload.
 * OMNI_KVDEV_QUICK=1: the first 4 configurations only (for compute-sanitizer runs).
 * --bench: append times on Qwen3-VL-8B shapes (8 KV heads, D 128, int2 R 128): decode steps of 1/8/48 sequences
 * and prefill chunks of 2048 tokens, median and slowest of CUDA-event times (the slowest decode step flushes a
 * block; with the early flush its quantization is in the upload's time) (not a test).
 * No GPU: prints SKIP and exits 77. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kvcache/kv_dev.h"
#include "kvcache/kv_dev_check.h"

#define MAXL 4

typedef struct {
    kv_dev *d;
    cudaStream_t st;
    int n_layers, max_chunk, step_no, mode; /* mode of the current step: 0 direct, 1 direct t_cap, 2 graph */
    size_t kv_bytes;                        /* bytes of one layer's k (or v) buffer incl. canary rows */
    int row_elems, last_T;                  /* Hkv * D; tokens of the last step */
    uint16_t *dk[MAXL], *dv[MAXL];
    cudaGraphExec_t graph;
    int have_graph;
    /* snapshot */
    uint8_t *h_raw, *h_quant;
    int32_t *h_tab, *h_len;
    int64_t n_raw, n_quant, ntab;
    omni_status err;
} gpu_ctx;

static omni_status cu(cudaError_t e, const char *what) {
    return e == cudaSuccess ? OMNI_OK : omni_fail(OMNI_ERR_RUNTIME, "%s: %s", what, cudaGetErrorString(e));
}

static omni_status g_seq_add(void *x, int *id) { return kv_dev_seq_add(((gpu_ctx *)x)->d, id); }
static void g_seq_remove(void *x, int id) { kv_dev_seq_remove(((gpu_ctx *)x)->d, id); }
static void g_seq_clear(void *x, int id) { kv_dev_seq_clear(((gpu_ctx *)x)->d, id); }

static omni_status g_step(void *x, int n_seq, const int *ids, const int *n_new) {
    gpu_ctx *g = x;
    omni_status st = kv_dev_step(g->d, n_seq, ids, n_new);
    if (st) return st;
    g->mode = n_seq == 0 ? 0 : g->step_no++ % 3;
    return g->mode == 2 ? OMNI_OK : kv_dev_upload(g->d, g->st); /* the graph uploads itself */
}

/* Upload + every layer's append into a graph (once), then replay it. */
static omni_status g_graph(gpu_ctx *g) {
    omni_status st = OMNI_OK;
    if (!g->have_graph) {
        cudaGraph_t graph;
        if ((st = cu(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal), "begin capture"))) return st;
        st = kv_dev_upload(g->d, g->st);
        for (int l = 0; l < g->n_layers && !st; l++) st = kv_dev_append(g->d, l, g->dk[l], g->dv[l], g->max_chunk, g->st);
        omni_status st2 = cu(cudaStreamEndCapture(g->st, &graph), "end capture");
        if (st || st2) return st ? st : st2;
        st = cu(cudaGraphInstantiate(&g->graph, graph, 0), "instantiate");
        cudaGraphDestroy(graph);
        if (st) return st;
        g->have_graph = 1;
    }
    return cu(cudaGraphLaunch(g->graph, g->st), "graph launch");
}

static omni_status g_append(void *x, int layer, const uint16_t *k, const uint16_t *v, int T) {
    gpu_ctx *g = x;
    /* rows 0..T-1 and the 8 canary rows (0xffff) the driver put after them */
    const size_t n = (size_t)(T + 8) * g->row_elems * 2;
    omni_status st = cu(cudaMemcpyAsync(g->dk[layer], k, n, cudaMemcpyHostToDevice, g->st), "k upload");
    if (!st) st = cu(cudaMemcpyAsync(g->dv[layer], v, n, cudaMemcpyHostToDevice, g->st), "v upload");
    if (st) return st;
    g->last_T = T;
    if (g->mode == 2) return layer == g->n_layers - 1 ? g_graph(g) : OMNI_OK;
    return kv_dev_append(g->d, layer, g->dk[layer], g->dv[layer], g->mode == 1 ? g->max_chunk : 0, g->st);
}

static omni_status g_commit(void *x) { return kv_dev_commit(((gpu_ctx *)x)->d); }

static omni_status g_snapshot(void *x, int layer, kv_layer_view *v, int64_t *raw_pages, int64_t *quant_pages) {
    gpu_ctx *g = x;
    kv_layer_view dv;
    omni_status st = kv_dev_layer_view(g->d, layer, &dv);
    if (st) return st;
    if ((st = cu(cudaStreamSynchronize(g->st), "sync")) ||
        (st = cu(cudaMemcpy(g->h_raw, dv.raw_pool, (size_t)(g->n_raw * dv.raw_page_bytes), cudaMemcpyDeviceToHost),
                 "raw pool")) ||
        (g->n_quant && (st = cu(cudaMemcpy(g->h_quant, dv.quant_pool, (size_t)(g->n_quant * dv.quant_page_bytes),
                                           cudaMemcpyDeviceToHost), "quant pool"))) ||
        (st = cu(cudaMemcpy(g->h_tab, dv.raw_tab, (size_t)g->ntab * 4, cudaMemcpyDeviceToHost), "tables")) ||
        (st = cu(cudaMemcpy(g->h_len, dv.len, (size_t)dv.max_seqs * 4, cudaMemcpyDeviceToHost), "lengths")))
        return st;
    /* the inputs are read only: their canary rows after the last step's tokens are intact */
    uint16_t can[2][8 * 512];
    const size_t cb = (size_t)8 * g->row_elems * 2, off = (size_t)g->last_T * g->row_elems;
    for (int l = 0; l < g->n_layers && cb <= sizeof can[0]; l++) {
        if ((st = cu(cudaMemcpy(can[0], g->dk[l] + off, cb, cudaMemcpyDeviceToHost), "k canary")) ||
            (st = cu(cudaMemcpy(can[1], g->dv[l] + off, cb, cudaMemcpyDeviceToHost), "v canary")))
            return st;
        size_t bad_at = 0;
        while (bad_at < cb && ((const uint8_t *)can[0])[bad_at] == 0xff && ((const uint8_t *)can[1])[bad_at] == 0xff)
            bad_at++;
        CHECK(bad_at == cb, "layer %d: k/v input canaries overwritten (byte %zu of %zu after row %d; step %d, mode %d)",
              l, bad_at, cb, g->last_T, g->step_no, g->mode);
    }
    *v = dv;
    v->raw_pool = g->h_raw, v->quant_pool = g->h_quant;
    v->raw_tab = g->h_tab, v->quant_tab = g->h_tab + g->ntab / 2, v->len = g->h_len;
    *raw_pages = g->n_raw, *quant_pages = g->n_quant;
    return OMNI_OK;
}

static gpu_ctx *g_make(const kvdc_cfg *cfg, const kv_params *p) {
    gpu_ctx *g = calloc(1, sizeof *g);
    if (kv_dev_init(p, &g->d)) {
        free(g);
        return NULL;
    }
    g->n_layers = cfg->n_layers, g->max_chunk = cfg->max_chunk;
    g->row_elems = cfg->Hkv * cfg->D;
    g->kv_bytes = (size_t)(cfg->max_chunk + 8) * g->row_elems * 2;
    cudaStreamCreate(&g->st);
    for (int l = 0; l < cfg->n_layers; l++) {
        cudaMalloc((void **)&g->dk[l], g->kv_bytes);
        cudaMalloc((void **)&g->dv[l], g->kv_bytes);
        /* the canary check of a snapshot taken before the first append reads rows 0..7: make them canaries */
        cudaMemset(g->dk[l], 0xff, g->kv_bytes);
        cudaMemset(g->dv[l], 0xff, g->kv_bytes);
    }
    kv_usage u;
    kv_layer_view v;
    kv_dev_get_usage(g->d, &u);
    kv_dev_layer_view(g->d, 0, &v);
    g->n_raw = u.raw_pages + u.raw_pages_free, g->n_quant = u.quant_pages + u.quant_pages_free;
    g->ntab = 2 * (int64_t)v.max_seqs * v.tab_stride;
    g->h_raw = malloc((size_t)(g->n_raw * v.raw_page_bytes) + 1);
    g->h_quant = malloc((size_t)(g->n_quant * v.quant_page_bytes) + 1);
    g->h_tab = malloc((size_t)g->ntab * 4);
    g->h_len = malloc((size_t)v.max_seqs * 4);
    /* poison the pools: pages never handed out must keep it */
    cudaMemset(v.raw_pool, 0xff, (size_t)(g->n_raw * v.raw_page_bytes));
    if (g->n_quant) cudaMemset(v.quant_pool, 0xff, (size_t)(g->n_quant * v.quant_page_bytes));
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "setup: %s", cudaGetErrorString(e));
    return g;
}

static void g_free(gpu_ctx *g) {
    if (!g) return;
    if (g->have_graph) cudaGraphExecDestroy(g->graph);
    for (int l = 0; l < g->n_layers; l++) cudaFree(g->dk[l]), cudaFree(g->dv[l]);
    cudaStreamDestroy(g->st);
    kv_dev_free(g->d);
    free(g->h_raw), free(g->h_quant), free(g->h_tab), free(g->h_len);
    free(g);
}

/* API misuse is refused with a message before anything is launched. */
static void test_misuse(void) {
    kv_params p = kv_default_params();
    kv_parse_mode("int2", &p.fmt);
    p.n_layers = 1, p.n_kv_heads = 1, p.head_dim = 512, p.max_tokens = 100, p.max_seqs = 1, p.max_chunk = 64;
    kv_dev *d = NULL;
    CHECK(kv_dev_init(&p, &d) == OMNI_ERR_USAGE && d == NULL, "head_dim 512 accepted");
    p.head_dim = 64;
    CHECK(kv_dev_init(&p, &d) == OMNI_OK, "%s", omni_last_error());
    int id, n = 10;
    kv_dev_seq_add(d, &id);
    CHECK(kv_dev_append(d, 0, (void *)16, (void *)16, 0, NULL) == OMNI_ERR_USAGE, "append without step accepted");
    CHECK(kv_dev_commit(d) == OMNI_ERR_USAGE, "commit without step accepted");
    CHECK(kv_dev_step(d, 1, &id, &n) == OMNI_OK && kv_dev_upload(d, NULL) == OMNI_OK, "%s", omni_last_error());
    CHECK(kv_dev_append(d, 0, (void *)16, (void *)16, 5, NULL) == OMNI_ERR_USAGE, "t_cap < T accepted");
    CHECK(kv_dev_append(d, 1, (void *)16, (void *)16, 0, NULL) == OMNI_ERR_USAGE, "layer 1 accepted");
    CHECK(kv_dev_step(d, 1, &id, &n) == OMNI_ERR_USAGE, "second step in flight accepted");
    CHECK(kv_dev_commit(d) == OMNI_OK && kv_dev_seq_len(d, id) == 10, "commit: %s", omni_last_error());
    n = 100;
    CHECK(kv_dev_step(d, 1, &id, &n) != OMNI_OK, "step beyond max_chunk accepted");
    kv_dev_free(d);
    kv_dev_free(NULL);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Append timing on Qwen3-VL-8B shapes: one layer per call, median over many calls. */
static int bench(void) {
    const int Hkv = 8, D = 128, NL = 36, reps = 50;
    const int cases[4][2] = {{1, 1}, {8, 1}, {48, 1}, {1, 2048}}; /* sequences, tokens each */
    printf("kv_dev_append, int2 R 128, 8 KV heads, D 128 (per layer call, median of %d):\n", reps);
    for (int ci = 0; ci < 4; ci++) {
        const int ns = cases[ci][0], nt = cases[ci][1], T = ns * nt;
        kv_params p = kv_default_params();
        kv_parse_mode("int2", &p.fmt);
        p.n_layers = NL, p.n_kv_heads = Hkv, p.head_dim = D, p.max_seqs = ns, p.max_chunk = T > 2048 ? T : 2048;
        p.max_tokens = (int64_t)ns * (nt * (reps + 2) + 4096);
        p.max_seq_len = nt * (reps + 2) + 4096;
        kv_dev *d = NULL;
        if (kv_dev_init(&p, &d)) {
            fprintf(stderr, "init: %s\n", omni_last_error());
            return 1;
        }
        const size_t kvb = (size_t)2048 * Hkv * D * 2;
        uint16_t *dk, *dv, *hk = malloc(kvb);
        rng_t r = {5};
        for (size_t i = 0; i < kvb / 2; i++) hk[i] = omni_f32_to_bf16(rng_normal(&r));
        cudaMalloc((void **)&dk, kvb), cudaMalloc((void **)&dv, kvb);
        cudaMemcpy(dk, hk, kvb, cudaMemcpyHostToDevice);
        cudaMemcpy(dv, hk, kvb, cudaMemcpyHostToDevice);
        int ids[48], nn[48];
        for (int i = 0; i < ns; i++) kv_dev_seq_add(d, &ids[i]), nn[i] = nt;
        for (int i = 0; nt == 1 && i < ns; i++) /* decode: a 4000-token history first (flushes every 32 steps) */
            for (int done = 0; done < 4000; done += 2000) {
                int n2 = 2000;
                kv_dev_step(d, 1, &ids[i], &n2);
                kv_dev_upload(d, NULL);
                for (int l = 0; l < NL; l++) kv_dev_append(d, l, dk, dv, 0, NULL);
                kv_dev_commit(d);
            }
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        float *ms = malloc(sizeof(float) * reps), up_ms = 0, up_max = 0, ms_max = 0;
        for (int rep = 0; rep < reps; rep++) {
            kv_dev_step(d, ns, ids, nn);
            cudaEventRecord(e0, NULL);
            kv_dev_upload(d, NULL);
            cudaEventRecord(e1, NULL);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&up_ms, e0, e1);
            up_max = up_ms > up_max ? up_ms : up_max;
            cudaEventRecord(e0, NULL);
            for (int l = 0; l < NL; l++) kv_dev_append(d, l, dk, dv, 0, NULL);
            cudaEventRecord(e1, NULL);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms[rep], e0, e1);
            ms[rep] /= NL;
            ms_max = ms[rep] > ms_max ? ms[rep] : ms_max;
            kv_dev_commit(d);
        }
        cudaError_t err = cudaGetLastError();
        qsort(ms, reps, sizeof(float), cmp_f);
        printf("  %2d seqs x %4d tokens: %8.2f us per layer, slowest step %.2f (upload %.2f us, slowest %.2f: the early "
               "flush of every layer) %s\n", ns, nt, ms[reps / 2] * 1e3, ms_max * 1e3, up_ms * 1e3, up_max * 1e3,
               err == cudaSuccess ? "" : cudaGetErrorString(err));
        cudaFree(dk), cudaFree(dv), free(hk), free(ms);
        kv_dev_free(d);
    }
    return 0;
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench();
    test_misuse();
    const char *quick = getenv("OMNI_KVDEV_QUICK");
    const int ncfg = quick && *quick == '1' ? 4 : KVDC_NCFG;
    int flushed = 0;
    for (int i = 0; i < ncfg; i++) {
        kv_format lf[4];
        kv_params p = kvdc_params(&kvdc_cfgs[i], lf);
        /* the early flush at the upload and the append's programmatic launch on (the default) or off, by config */
        setenv("OMNI_KV_EARLY_FLUSH", i % 4 == 3 ? "0" : "1", 1);
        setenv("OMNI_KV_APPEND_PDL", i % 4 == 2 ? "0" : "1", 1);
        gpu_ctx *g = g_make(&kvdc_cfgs[i], &p);
        CHECK(g != NULL, "kv_dev_init: %s", omni_last_error());
        if (!g) continue;
        kvdc_ops ops = {g, g_seq_add, g_seq_remove, g_seq_clear, g_step, g_append, g_commit, g_snapshot};
        int bad = kvdc_run(&kvdc_cfgs[i], &ops, 77 + i, &flushed);
        cudaError_t e = cudaDeviceSynchronize();
        CHECK(e == cudaSuccess, "device error: %s", cudaGetErrorString(e));
        kvdc_print(&kvdc_cfgs[i], bad, g->have_graph ? " (graph replayed)" : " (no graph step)");
        g_free(g);
    }
    printf("%d blocks flushed on the GPU, all compared with the CPU cache\n", flushed);
    CHECK(flushed > 50, "too few flushes (%d)", flushed);
    return check_exit();
}
