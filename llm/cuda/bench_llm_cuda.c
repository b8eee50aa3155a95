/* bench_llm_cuda.c - benchmark (not a test) of the CUDA decoder on random bf16 weights of a real config, made on the
 * device: decode tok/s at each context (the history filled with random K/V, not prefilled), prefill tok/s of one
 * chunk, the GEMM share of that prefill against a large-GEMM peak measured in the same run, the per-op time split
 * of one decode step, the roofline (weights read per token + KV bytes over the device-to-device copy bandwidth
 * measured in the same run; MoE: the active experts only) and peak GPU memory.
 * Decode rows: the median step and the mean over the timed steps (with the slowest step in its note: a quantizing
 * cache's block flush). Every step's logits are checked finite before timing; decode steps sample greedily on the device (one token
 * back per step), as a generation loop would. Each KV format of --kv (bf16, int2, ...: kv_parse_mode names, window
 * 128) runs every batch size x context; the roofline counts the KV bytes the cache really holds (codes, scales,
 * norms, window), the split of an eager step is printed and written as CSV rows "split <fmt> bsB/CK <op>" (%),
 * "... <op> ms" (mean per step) and "... <op> slowest ms" over --split-steps eager steps (32 covers one flush of a
 * quantizing cache's window block per sequence).
 * Usage: omni_bench_llm_cuda CONFIG_DIR [--ctx 4096,32768] [--bs 1,48] [--kv bf16,int2] [--steps 64]
 *                            [--prefill 4096] [--label NAME] [--csv FILE] [--split-steps 5]
 * Prints one Markdown table per config on stdout (and CSV rows to --csv: label,metric,value,unit); metric names
 * of bf16 rows have no format ("decode bs1/4K tok/s"), the others do ("decode int2 bs1/4K tok/s"). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/ops_cuda.h"
#include "llm/config.h"
#include "llm/cuda/llm_cuda.h"
#include "llm/sampler.h"

#define CK(call)                                                                                               \
    do {                                                                                                       \
        omni_status st_ = (call);                                                                              \
        if (st_) {                                                                                             \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, omni_last_error());            \
            exit(omni_status_exit_code(st_));                                                                  \
        }                                                                                                      \
    } while (0)

static FILE *g_csv;
static const char *g_label = "model";
static int g_split_steps = 5; /* eager steps of the per-op split (--split-steps) */

static void row(const char *metric, double v, const char *unit, const char *note) {
    printf("| %-44s | %12.2f %-8s | %s\n", metric, v, unit, note ? note : "");
    if (g_csv) fprintf(g_csv, "%s,%s,%.4f,%s\n", g_label, metric, v, unit);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Device-to-device copy of 1 GiB, bytes read + written over the median time (TB/s). */
static double copy_bw(void) {
    const size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    CK(omni_cuda_malloc(&a, n));
    CK(omni_cuda_malloc(&b, n));
    cudaMemset(a, 1, n);
    double t[7];
    for (int i = 0; i < 9; i++) {
        cudaDeviceSynchronize();
        double t0 = omni_time_ms();
        cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
        cudaDeviceSynchronize();
        if (i >= 2) t[i - 2] = omni_time_ms() - t0;
    }
    omni_cuda_free(a), omni_cuda_free(b);
    return 2.0 * n / (median(t, 7) * 1e-3) / 1e12;
}

/* bf16 GEMM 4096 x 12288 x 4096 through omni_cuda_linear (cuBLAS), random data: TFLOP/s. */
static double gemm_peak(void) {
    const int M = 4096, N = 12288, K = 4096;
    omni_cuda_ctx *ctx;
    CK(omni_cuda_ctx_init(&ctx, 0));
    uint16_t *x, *w, *y;
    CK(omni_cuda_malloc((void **)&x, 2 * (size_t)M * K));
    CK(omni_cuda_malloc((void **)&w, 2 * (size_t)N * K));
    CK(omni_cuda_malloc((void **)&y, 2 * (size_t)M * N));
    uint16_t *h = malloc(2 * (size_t)N * K);
    uint64_t s = 12345;
    for (size_t i = 0; i < (size_t)N * K; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = omni_f32_to_bf16((float)((s >> 40) * 0x1p-24 - 0.5) * 0.1f);
    }
    CK(omni_cuda_h2d(w, h, 2 * (size_t)N * K, omni_cuda_ctx_stream(ctx)));
    CK(omni_cuda_h2d(x, h, 2 * (size_t)M * K, omni_cuda_ctx_stream(ctx)));
    free(h);
    double t[9];
    for (int i = 0; i < 12; i++) {
        CK(omni_cuda_sync(omni_cuda_ctx_stream(ctx)));
        double t0 = omni_time_ms();
        CK(omni_cuda_linear(ctx, y, OMNI_BF16, x, w, NULL, M, N, K));
        CK(omni_cuda_sync(omni_cuda_ctx_stream(ctx)));
        if (i >= 3) t[i - 3] = omni_time_ms() - t0;
    }
    omni_cuda_free(x), omni_cuda_free(w), omni_cuda_free(y);
    omni_cuda_ctx_free(ctx);
    return 2.0 * M * N * K / (median(t, 9) * 1e-3) / 1e12;
}

/* Weight bytes one decode token reads: everything but the embedding table (gathered rows only; read in full as
 * lm_head when tied) and, for MoE, the experts a token does not use. */
static double active_weight_bytes(const llm_config *c, double all) {
    const double H = c->hidden, V = c->vocab;
    double b = all - (c->tie_word_embeddings ? 0 : 2 * V * H);
    if (c->n_experts) {
        double expert = 2.0 * 3 * c->moe_intermediate * H;
        b -= (double)c->n_layers * (c->n_experts - c->top_k) * expert;
    }
    return b;
}

static int finite_all(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Decode at context ctx with bs sequences in KV format fmt: median step time over `steps` timed steps. */
static void bench_decode(llm_cuda *r, const llm_config *c, const char *fmt, int ctx, int bs, int steps, double bw,
                         double wbytes) {
    kv_params kp = kv_default_params();
    kp.n_layers = c->n_layers, kp.n_kv_heads = c->n_kv_heads, kp.head_dim = c->head_dim;
    CK(kv_parse_mode(fmt, &kp.fmt));
    kp.max_seqs = bs, kp.max_seq_len = ctx + steps + g_split_steps + 16, kp.max_tokens = (int64_t)bs * kp.max_seq_len;
    kv_cache *kv;
    CK(llm_cuda_cache_init(r, &kp, &kv));
    llm_batch_entry *e = calloc((size_t)bs, sizeof *e);
    int32_t *ids = malloc(sizeof(int32_t) * bs);
    float *lg = malloc(sizeof(float) * c->vocab);
    llm_sampler_params gp = {0.f, 0, 1.f, 0};
    llm_sampler *greedy;
    CK(llm_sampler_init(&gp, c->vocab, &greedy));
    for (int i = 0; i < bs; i++) {
        int seq;
        CK(kv_seq_add(kv, &seq));
        CK(llm_cuda_fill_random(r, kv, seq, ctx - 1, 1000 + i));
        ids[i] = 100 + i;
        e[i] = (llm_batch_entry){.kv = kv, .seq = seq, .in = {1, &ids[i], NULL, 0, NULL}, .sampler = greedy};
    }
    e[0].logits = lg; /* validate once: finite logits */
    CK(llm_cuda_step(r, bs, e));
    if (!finite_all(lg, c->vocab)) fprintf(stderr, "FATAL: non-finite logits at bs%d/%d\n", bs, ctx), exit(4);
    e[0].logits = NULL;
    kv_usage u;
    kv_get_usage(kv, &u);
    const double kvb = (double)u.total_bytes; /* every sequence's pages in use: what a step reads */
    const char *f = strcmp(fmt, "bf16") ? fmt : NULL;
    char tag[64];
    snprintf(tag, sizeof tag, "%s%sbs%d/%dK", f ? f : "", f ? " " : "", bs, ctx / 1024);
    double *t = malloc(sizeof(double) * steps);
    for (int s = 0; s < 4 + steps; s++) {
        for (int i = 0; i < bs; i++) ids[i] = e[i].token >= 0 ? e[i].token : 100 + i;
        double t0 = omni_time_ms();
        CK(llm_cuda_step(r, bs, e));
        if (s >= 4) t[s - 4] = omni_time_ms() - t0;
    }
    double sum = 0, worst = 0;
    for (int s = 0; s < steps; s++) sum += t[s], worst = t[s] > worst ? t[s] : worst;
    const double ms = median(t, steps), tps = bs / (ms * 1e-3), mean = sum / steps;
    const double roof = bs * bw * 1e12 / (wbytes + kvb);
    char name[96], note[200];
    snprintf(name, sizeof name, "decode %s tok/s", tag);
    snprintf(note, sizeof note, "%.3f ms/step, %.0f%% of the %.0f tok/s roofline (%.2f GB weights + %.2f GB KV at %.2f "
             "TB/s)%s", ms, 100 * tps / roof, roof, wbytes / 1e9, kvb / 1e9, bw, llm_cuda_graphs(r) ? "" : ", NO graphs");
    row(name, tps, "tok/s", note);
    /* the mean counts the steps that flush a block out of a quantizing cache's window (1 in 32 per sequence) */
    snprintf(name, sizeof name, "decode %s mean tok/s", tag);
    snprintf(note, sizeof note, "%.3f ms/step mean, p50 %.3f, slowest %.3f ms of %d steps", mean, ms, worst, steps);
    row(name, bs / (mean * 1e-3), "tok/s", note);
    snprintf(name, sizeof name, "decode %s %% of roofline", tag);
    row(name, 100 * tps / roof, "%", "weights read once + KV over the copy bandwidth");
    snprintf(name, sizeof name, "KV %s MiB", tag);
    row(name, kvb / 1048576.0, "MiB", "pages in use after the fill");
    /* per-op split of eager decode steps (graphs off while profiling), one step at a time: the mean per step and,
     * per op, the slowest step (a quantizing cache flushes a block every 32 steps: its kv_append peaks there) */
    if (llm_cuda_profile_enable(r, 1) == OMNI_OK) {
        const char *names[32];
        double pm[32] = {0}, mx[32] = {0}, one[32], tot = 0;
        int nk = 0;
        for (int s = 0; s < g_split_steps; s++) {
            CK(llm_cuda_profile_enable(r, 1)); /* clears the totals */
            CK(llm_cuda_step(r, bs, e));
            nk = llm_cuda_profile(r, names, one, 32);
            for (int k = 0; k < nk; k++) pm[k] += one[k], mx[k] = one[k] > mx[k] ? one[k] : mx[k];
        }
        for (int k = 0; k < nk; k++) tot += pm[k];
        const int ns = g_split_steps;
        printf("|   split of an eager step (%s, %.3f ms of kernels):", tag, tot / ns);
        for (int k = 0; k < nk; k++)
            if (pm[k] > 0) printf(" %s %.1f%%", names[k], 100 * pm[k] / tot);
        printf("\n|   ms per eager step (%s, mean / slowest of %d steps):", tag, ns);
        for (int k = 0; k < nk; k++)
            if (pm[k] > 0) printf(" %s %.3f/%.3f", names[k], pm[k] / ns, mx[k]);
        printf("\n");
        for (int k = 0; g_csv && k < nk; k++)
            if (pm[k] > 0) {
                fprintf(g_csv, "%s,split %s %s,%.2f,%%\n", g_label, tag, names[k], 100 * pm[k] / tot);
                fprintf(g_csv, "%s,split %s %s ms,%.4f,ms\n", g_label, tag, names[k], pm[k] / ns);
                fprintf(g_csv, "%s,split %s %s slowest ms,%.4f,ms\n", g_label, tag, names[k], mx[k]);
            }
        if (g_csv) fprintf(g_csv, "%s,split %s kernels ms,%.4f,ms\n", g_label, tag, tot / ns);
        llm_cuda_profile_enable(r, 0);
    }
    llm_sampler_free(greedy);
    free(t), free(e), free(ids), free(lg);
    llm_cuda_cache_free(r, kv);
}

/* One prefill chunk of n tokens (after one warm-up chunk on another sequence) and its GEMM share. */
static void bench_prefill(llm_cuda *r, const llm_config *c, int n, double peak) {
    kv_params kp = kv_default_params();
    kp.n_layers = c->n_layers, kp.n_kv_heads = c->n_kv_heads, kp.head_dim = c->head_dim;
    kv_parse_mode("bf16", &kp.fmt);
    kp.max_seqs = 2, kp.max_seq_len = n + 16, kp.max_tokens = 2 * kp.max_seq_len;
    kv_cache *kv;
    CK(llm_cuda_cache_init(r, &kp, &kv));
    int32_t *ids = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)c->vocab);
    float *lg = malloc(sizeof(float) * c->vocab);
    int s0, s1;
    CK(kv_seq_add(kv, &s0));
    CK(kv_seq_add(kv, &s1));
    llm_batch_entry e = {.kv = kv, .seq = s0, .in = {n, ids, NULL, 0, NULL}, .logits = lg};
    CK(llm_cuda_step(r, 1, &e));
    if (!finite_all(lg, c->vocab)) fprintf(stderr, "FATAL: non-finite prefill logits\n"), exit(4);
    e.seq = s1;
    double t0 = omni_time_ms();
    CK(llm_cuda_step(r, 1, &e));
    const double ms = omni_time_ms() - t0;
    char name[96], note[160];
    snprintf(name, sizeof name, "prefill %d tokens tok/s", n);
    snprintf(note, sizeof note, "%.1f ms for the chunk (bf16 cache)", ms);
    row(name, n / (ms * 1e-3), "tok/s", note);
    kv_seq_remove(kv, s0), kv_seq_remove(kv, s1);
    CK(kv_seq_add(kv, &s0));
    e.seq = s0;
    if (llm_cuda_profile_enable(r, 1) == OMNI_OK) {
        CK(llm_cuda_step(r, 1, &e));
        const char *names[32];
        double pm[32], tot = 0, gemm = 0;
        int nk = llm_cuda_profile(r, names, pm, 32);
        for (int k = 0; k < nk; k++) {
            tot += pm[k];
            if (!strcmp(names[k], "qkv") || !strcmp(names[k], "o_proj") || !strcmp(names[k], "mlp_gemm") ||
                !strcmp(names[k], "moe_experts"))
                gemm += pm[k];
        }
        const double H = c->hidden, D = c->head_dim, Q = (c->n_heads + 2.0 * c->n_kv_heads) * D, qd = c->n_heads * D;
        double flops;
        if (c->n_experts)
            flops = 2.0 * n * c->n_layers * (Q * H + H * qd + (double)c->top_k * 3 * c->moe_intermediate * H);
        else
            flops = 2.0 * n * c->n_layers * (Q * H + H * qd + 3.0 * c->intermediate * H);
        const double tf = flops / (gemm * 1e-3) / 1e12;
        snprintf(note, sizeof note, "%.1f%% of the %.0f TFLOP/s bf16 GEMM peak measured here; GEMMs %.0f%% of the step",
                 100 * tf / peak, peak, 100 * gemm / tot);
        row("prefill GEMMs TFLOP/s", tf, "TFLOP/s", note);
        printf("|   split of the prefill step (%.1f ms of kernels):", tot);
        for (int k = 0; k < nk; k++)
            if (pm[k] > 0) printf(" %s %.1f%%", names[k], 100 * pm[k] / tot);
        printf("\n");
        llm_cuda_profile_enable(r, 0);
    }
    free(ids), free(lg);
    llm_cuda_cache_free(r, kv);
}

static int parse_list(const char *s, int *v, int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        v[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CONFIG_DIR [--ctx 4096,32768] [--bs 1,48] [--kv bf16,int2] [--steps 64] "
                        "[--prefill 4096] [--label L] [--csv FILE] [--split-steps 5]\n", argv[0]);
        return 1;
    }
    int ctx[8] = {4096, 32768}, n_ctx = 2, bss[8] = {1}, n_bs = 1, steps = 64, prefill = 4096;
    const char *kvs = "bf16";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ctx")) n_ctx = parse_list(argv[i + 1], ctx, 8);
        else if (!strcmp(argv[i], "--bs")) n_bs = parse_list(argv[i + 1], bss, 8);
        else if (!strcmp(argv[i], "--kv")) kvs = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefill")) prefill = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--label")) g_label = argv[i + 1];
        else if (!strcmp(argv[i], "--csv")) g_csv = fopen(argv[i + 1], "a");
        else if (!strcmp(argv[i], "--split-steps")) g_split_steps = atoi(argv[i + 1]) > 0 ? atoi(argv[i + 1]) : 1;
    }
    int ndev = 0;
    omni_cuda_available(&ndev);
    if (ndev <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    llm_config cfg;
    CK(llm_config_load(argv[1], &cfg));
    const double bw = copy_bw(), peak = gemm_peak();
    int bs_max = 1;
    for (int i = 0; i < n_bs; i++) bs_max = bss[i] > bs_max ? bss[i] : bs_max;
    llm_cuda_params p = llm_cuda_default_params();
    p.max_seqs = bs_max, p.max_tokens = prefill > 4096 ? prefill : 4096, p.profile = 1;
    llm_cuda *r;
    double t0 = omni_time_ms();
    CK(llm_cuda_init_random(&cfg, 1, &p, &r));
    const double init_s = (omni_time_ms() - t0) / 1000;
    const double wb = (double)llm_cuda_weight_bytes(r), wact = active_weight_bytes(&cfg, wb);
    printf("\n### %s (%s, %d layers, hidden %d, %s): %.2f GB of bf16 weights on the GPU, made in %.1f s\n\n", g_label,
           cfg.model_type, cfg.n_layers, cfg.hidden, cfg.n_experts ? "MoE, uniform-ish random routing" : "dense",
           wb / 1e9, init_s);
    printf("| %-44s | %21s | %s\n|---|---|---|\n", "metric", "value", "notes");
    row("device-to-device copy", bw, "TB/s", "1 GiB, read + write");
    row("bf16 GEMM 4096x12288x4096 (cuBLAS)", peak, "TFLOP/s", "random data");
    char fmts[128];
    snprintf(fmts, sizeof fmts, "%s", kvs);
    for (char *sv = NULL, *f = strtok_r(fmts, ",", &sv); f; f = strtok_r(NULL, ",", &sv))
        for (int b = 0; b < n_bs; b++)
            for (int i = 0; i < n_ctx; i++) bench_decode(r, &cfg, f, ctx[i], bss[b], steps, bw, wact);
    if (prefill > 0) bench_prefill(r, &cfg, prefill, peak);
    row("peak GPU memory", llm_cuda_peak_bytes(r) / 1073741824.0, "GiB", "cudaMemGetInfo, whole device");
    llm_cuda_free(r);
    llm_config_free(&cfg);
    if (g_csv) fclose(g_csv);
    return 0;
}
