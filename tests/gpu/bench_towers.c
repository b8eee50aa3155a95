/* bench_towers.c - the GPU towers' speed (omni_bench_towers; run by bench/towers_gpu.sh, callable from bench/gpu.sh).
 *
 * Vision: the Qwen3-VL-8B vision tower (config of --vision DIR, random bf16 weights made on the device) on one
 * image of --tokens merged tokens (default 1024: a 64 x 64 patch grid, 4096 patches, a 1024 x 1024 image).
 * Audio: the Qwen3-Omni-30B-A3B AuT (--audio DIR) on --seconds of audio (default 30: 3000 mel frames).
 * Each output is validated before timing (every value finite, RMS between 1e-3 and 1e3, outputs not all equal).
 * Timing: the vision forward alone (pixels already on the device) between CUDA events on the tower's stream,
 * 3 warm-up runs then --iters runs, median and min; the whole encode (f32 pixels up, forward, f32 outputs down)
 * by wall clock, median of 5. Audio: encode by wall clock (mel packing, copies, forward, download) and between
 * events, median of --iters. A split of the vision forward: segment attention alone and the block GEMMs alone at
 * the tower's shapes (same kernels, same sizes, x depth) with their TFLOP/s; the rest is norms, RoPE, activations,
 * adds, pos-embed and the mergers' share.
 * Output: a table on stdout (logs on stderr); --csv FILE appends rows "label,metric,value,unit" (bench/gpu.sh's
 * format). Exit 77 without a GPU, 1 when a validation fails, 2 for a bad argument or config. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/cuda/audio_cuda.h"
#include "kernels/ops_cuda.h"
#include "kvcache/kv_cuda.h"
#include "kvcache/kv_towers.h"
#include "vision/cuda/vision_cuda.h"

typedef struct {
    const char *vision_dir, *audio_dir, *csv, *only;
    int tokens, iters;
    double seconds;
} bench_args;

static FILE *g_csv;

static void row(const char *label, const char *metric, double v, const char *unit) {
    printf("%-28s %-42s %12.3f %s\n", label, metric, v, unit);
    if (g_csv) fprintf(g_csv, "%s,%s,%.6g,%s\n", label, metric, v, unit);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every value finite, RMS within [1e-3, 1e3], not all equal. 0 when fine. */
static int validate(const char *what, const float *x, int64_t n) {
    double ss = 0, mn = INFINITY, mx = -INFINITY;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            bad++;
            continue;
        }
        ss += (double)x[i] * x[i], mn = fmin(mn, x[i]), mx = fmax(mx, x[i]);
    }
    const double rms = sqrt(ss / (double)(n > 0 ? n : 1));
    fprintf(stderr, "validate %-24s n=%lld rms %.4g min %.4g max %.4g non-finite %lld\n", what, (long long)n, rms, mn,
            mx, (long long)bad);
    if (bad || !(rms >= 1e-3 && rms <= 1e3) || !(mx > mn)) {
        fprintf(stderr, "FAIL: %s output is not sane\n", what);
        return 1;
    }
    return 0;
}

#define CU(call)                                                                                               \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));        \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)
#define OK(call)                                                                                               \
    do {                                                                                                       \
        omni_status s_ = (call);                                                                               \
        if (s_ != OMNI_OK) {                                                                                   \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, omni_last_error());             \
            exit(s_ == OMNI_ERR_USAGE || s_ == OMNI_ERR_MODEL || s_ == OMNI_ERR_INPUT ? 2 : 1);                \
        }                                                                                                      \
    } while (0)

/* Median (and min) milliseconds of `iters` calls of f(arg) between events on `stream`, after 3 warm-ups. */
static double time_events(void (*f)(void *), void *arg, void *stream, int iters, double *min_ms) {
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) f(arg);
    double *t = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        CU(cudaEventRecord(e0, (cudaStream_t)stream));
        f(arg);
        CU(cudaEventRecord(e1, (cudaStream_t)stream));
        CU(cudaEventSynchronize(e1));
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, e0, e1));
        t[i] = ms;
    }
    double mn = INFINITY;
    for (int i = 0; i < iters; i++) mn = fmin(mn, t[i]);
    if (min_ms) *min_ms = mn;
    double med = median(t, iters);
    free(t);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return med;
}

/* ---- vision ---------------------------------------------------------------------------------------------- */

static void run_vision(void *t) { OK(vision_tower_cuda_run((vision_tower_cuda *)t)); }

typedef struct {
    omni_cuda_ctx *ctx;
    const vision_config *c;
    int N;
    uint16_t *x, *w, *y, *qkv, *att;
    float *cos; /* [N, head_dim] RoPE table (zeros: the cost does not depend on the values) */
    int32_t *cu;
    void *stream;
} split_args;

/* The block GEMMs of the whole tower: depth x (qkv, proj, fc1, fc2) at N rows, biased bf16 as the tower runs them
 * (b = the weights' first values), or without the bias (b NULL: the cuBLAS GEMM alone, no fp32 scratch pass). */
static void gemms(split_args *a, const uint16_t *b) {
    const int N = a->N, D = a->c->hidden, I = a->c->intermediate;
    for (int l = 0; l < a->c->depth; l++) {
        OK(omni_cuda_linear(a->ctx, a->y, OMNI_BF16, a->x, a->w, b, N, 3 * D, D));
        OK(omni_cuda_linear(a->ctx, a->y, OMNI_BF16, a->x, a->w, b, N, D, D));
        OK(omni_cuda_linear(a->ctx, a->y, OMNI_BF16, a->x, a->w, b, N, I, D));
        OK(omni_cuda_linear(a->ctx, a->y, OMNI_BF16, a->x, a->w, b, N, D, I));
    }
}
static void run_gemms(void *p) { gemms(p, ((split_args *)p)->w); }
static void run_gemms_nobias(void *p) { gemms(p, NULL); }

/* The segment attention of the whole tower: depth x one N-token segment (kvc_tower_attn, as the tower runs it). */
static void run_attn(void *p) {
    split_args *a = p;
    const int D = a->c->hidden, hd = a->c->head_dim;
    for (int l = 0; l < a->c->depth; l++)
        OK(kvc_tower_attn(a->c->n_heads, hd, a->cu, 1, a->N, a->qkv, a->qkv + D, a->qkv + 2 * D, 3 * D, a->att, D,
                          1.0f / sqrtf((float)hd), a->stream));
}

/* The same with the prefill kernel's segment path (kvc_attn_segments: P in two bf16 parts), for comparison. */
static void run_attn_prefill(void *p) {
    split_args *a = p;
    const int D = a->c->hidden, hd = a->c->head_dim;
    for (int l = 0; l < a->c->depth; l++)
        OK(kvc_attn_segments(a->c->n_heads, hd, a->cu, 1, a->N, a->qkv, a->qkv + D, a->qkv + 2 * D, 3 * D, a->att,
                             1.0f / sqrtf((float)hd), a->stream));
}

/* The element-wise ops of the blocks: depth x (2 LayerNorms, RoPE, GELU, 2 residual adds) at N rows. */
static void run_rest(void *p) {
    split_args *a = p;
    const int N = a->N, D = a->c->hidden, I = a->c->intermediate;
    for (int l = 0; l < a->c->depth; l++) {
        OK(omni_cuda_layernorm_bf16(a->y, a->x, a->w, a->w, N, D, 1e-6f, a->stream));
        OK(omni_cuda_layernorm_bf16(a->y, a->x, a->w, a->w, N, D, 1e-6f, a->stream));
        OK(omni_cuda_rope_neox_f32_bf16(a->qkv, N, 2 * a->c->n_heads, a->c->head_dim, 3 * D, a->cos, a->cos,
                                        a->stream));
        OK(omni_cuda_gelu_tanh_bf16(a->y, a->y, (int64_t)N * I, a->stream));
        OK(omni_cuda_add_bf16(a->x, a->x, a->y, (int64_t)N * D, a->stream));
        OK(omni_cuda_add_bf16(a->x, a->x, a->y, (int64_t)N * D, a->stream));
    }
}

/* Attention and GEMMs alone at the tower's shapes (random operands), as shares of the forward's median. */
static void vision_split(const vision_config *c, int N, double fwd_ms, int iters, const char *label) {
    const int D = c->hidden, I = c->intermediate, big = 3 * D > I ? 3 * D : I;
    split_args a = {.c = c, .N = N};
    OK(omni_cuda_ctx_init(&a.ctx, 0));
    a.stream = omni_cuda_ctx_stream(a.ctx);
    OK(omni_cuda_ctx_reserve(a.ctx, (int64_t)N * big));
    OK(omni_cuda_malloc((void **)&a.x, 2 * (size_t)N * (D > I ? D : I)));
    OK(omni_cuda_malloc((void **)&a.w, 2 * (size_t)big * (D > I ? D : I)));
    OK(omni_cuda_malloc((void **)&a.y, 2 * (size_t)N * big));
    OK(omni_cuda_malloc((void **)&a.qkv, 2 * (size_t)N * 3 * D));
    OK(omni_cuda_malloc((void **)&a.att, 2 * (size_t)N * D));
    OK(omni_cuda_malloc((void **)&a.cu, 8));
    OK(omni_cuda_malloc((void **)&a.cos, sizeof(float) * (size_t)N * c->head_dim));
    OK(omni_cuda_memset(a.cos, 0, sizeof(float) * (size_t)N * c->head_dim, a.stream));
    OK(omni_cuda_fill_uniform_bf16(a.x, (int64_t)N * (D > I ? D : I), 1, -1.f, 1.f, a.stream));
    OK(omni_cuda_fill_uniform_bf16(a.w, (int64_t)big * (D > I ? D : I), 2, -0.03f, 0.03f, a.stream));
    OK(omni_cuda_fill_uniform_bf16(a.qkv, (int64_t)N * 3 * D, 3, -2.f, 2.f, a.stream));
    int32_t cu[2] = {0, N};
    OK(omni_cuda_h2d(a.cu, cu, sizeof cu, a.stream));
    const double attn = time_events(run_attn, &a, a.stream, iters, NULL);
    const double attn_pf = time_events(run_attn_prefill, &a, a.stream, iters, NULL);
    const double gemm = time_events(run_gemms, &a, a.stream, iters, NULL);
    const double gemm_nb = time_events(run_gemms_nobias, &a, a.stream, iters, NULL);
    const double rest = time_events(run_rest, &a, a.stream, iters, NULL);
    const double gflop = 2.0 * N * D * (3.0 * D + D + 2.0 * I) * c->depth / 1e9;
    const double aflop = 4.0 * N * N * D * c->depth / 1e9;
    row(label, "split: segment attention ms (x depth)", attn, "ms");
    row(label, "split: segment attention TFLOP/s", aflop / attn, "TFLOP/s");
    row(label, "split: kvc_attn_segments instead ms (x depth)", attn_pf, "ms");
    row(label, "split: block GEMMs ms (x depth)", gemm, "ms");
    row(label, "split: block GEMMs TFLOP/s", gflop / gemm, "TFLOP/s");
    row(label, "split: block GEMMs without bias ms (x depth)", gemm_nb, "ms");
    row(label, "split: block norms, rope, gelu, adds ms (x depth)", rest, "ms");
    row(label, "split: rest (pos-embed, patch GEMM, mergers, gaps) ms", fwd_ms - attn - gemm - rest, "ms");
    omni_cuda_free(a.x), omni_cuda_free(a.w), omni_cuda_free(a.y), omni_cuda_free(a.qkv), omni_cuda_free(a.att);
    omni_cuda_free(a.cu), omni_cuda_free(a.cos);
    omni_cuda_ctx_free(a.ctx);
}

static int bench_vision(const bench_args *ba) {
    vision_config cfg;
    OK(vision_config_read(ba->vision_dir, &cfg));
    const int side = (int)lround(sqrt((double)ba->tokens));
    if (side * side != ba->tokens) {
        fprintf(stderr, "--tokens %d: a square number of merged tokens is needed (a square image)\n", ba->tokens);
        return 2;
    }
    const int gh = 2 * side, gw = 2 * side, N = gh * gw;
    const char *label = "vision-tower";
    vision_cuda_params p = vision_cuda_default_params();
    p.max_patches = N, p.max_images = 1;
    vision_tower_cuda *t = NULL;
    OK(vision_tower_cuda_init_random(&cfg, 1234, &p, &t));
    fprintf(stderr, "vision: depth %d, hidden %d, %d heads of %d, inter %d, out %d; %d x %d patches (%d tokens); "
            "weights %.1f MiB, workspace %.1f MiB\n", cfg.depth, cfg.hidden, cfg.n_heads, cfg.head_dim,
            cfg.intermediate, cfg.out_hidden, gh, gw, N / 4, vision_tower_cuda_weight_bytes(t) / 1048576.0,
            vision_tower_cuda_workspace_bytes(t) / 1048576.0);
    vision_patches pp = {.grid_t = 1, .grid_h = gh, .grid_w = gw, .n_patches = N, .patch_dim = 1536,
                         .resized_h = 16 * gh, .resized_w = 16 * gw};
    pp.pixels = malloc(sizeof(float) * (size_t)N * 1536);
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < (int64_t)N * 1536; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        pp.pixels[i] = (float)((s >> 40) * 0x1p-24 * 2 - 1);
    }
    vision_output out;
    OK(vision_tower_cuda_encode(t, &pp, 1, &out));
    int bad = validate("vision merger", out.embd, (int64_t)out.n_tokens * out.out_hidden);
    for (int k = 0; k < out.n_deepstack; k++) {
        char w[32];
        snprintf(w, sizeof w, "vision deepstack %d", k);
        bad |= validate(w, out.deepstack[k], (int64_t)out.n_tokens * out.out_hidden);
    }
    vision_output_free(&out);
    if (bad) {
        vision_tower_cuda_free(t);
        free(pp.pixels);
        return 1;
    }
    OK(vision_tower_cuda_upload(t, &pp, 1));
    double mn = 0;
    const double fwd = time_events(run_vision, t, vision_tower_cuda_stream(t), ba->iters, &mn);
    double wall[5];
    for (int i = 0; i < 5; i++) {
        const double t0 = omni_time_ms();
        OK(vision_tower_cuda_encode(t, &pp, 1, &out));
        wall[i] = omni_time_ms() - t0;
        vision_output_free(&out);
    }
    char metric[96];
    snprintf(metric, sizeof metric, "%d-token image ms (forward, median)", N / 4);
    row(label, metric, fwd, "ms");
    snprintf(metric, sizeof metric, "%d-token image ms (forward, min)", N / 4);
    row(label, metric, mn, "ms");
    snprintf(metric, sizeof metric, "%d-token image ms (encode incl. copies)", N / 4);
    row(label, metric, median(wall, 5), "ms");
    vision_tower_cuda_free(t);
    free(pp.pixels);
    vision_split(&cfg, N, fwd, ba->iters, label);
    return 0;
}

/* ---- audio ----------------------------------------------------------------------------------------------- */

typedef struct {
    audio_tower_cuda *t;
    const float *mel;
    int64_t T;
    float *out;
} audio_args;

static void run_audio(void *p) {
    audio_args *a = p;
    OK(audio_tower_cuda_encode(a->t, a->mel, a->T, a->out));
}

static int bench_audio(const bench_args *ba) {
    audio_tower_config cfg;
    OK(audio_tower_config_read(ba->audio_dir, &cfg));
    const int64_t T = (int64_t)llround(ba->seconds * 100), N = audio_token_count(T, cfg.n_window);
    audio_tower_cuda *t = NULL;
    OK(audio_tower_cuda_init_random(&cfg, 4321, NULL, &t));
    fprintf(stderr, "audio: d %d, %d layers, %d heads, ffn %d, conv %d, out %d; %lld frames -> %lld tokens; weights "
            "%.1f MiB, workspace %.1f MiB\n", cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.ffn, cfg.conv_ch,
            cfg.out_dim, (long long)T, (long long)N, audio_tower_cuda_weight_bytes(t) / 1048576.0,
            audio_tower_cuda_workspace_bytes(t) / 1048576.0);
    float *mel = malloc(sizeof(float) * 128 * (size_t)T), *out = malloc(sizeof(float) * (size_t)(N * cfg.out_dim));
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (int64_t i = 0; i < 128 * T; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        mel[i] = (float)((s >> 40) * 0x1p-24 * 2 - 1);
    }
    audio_args a = {t, mel, T, out};
    run_audio(&a);
    int rc = validate("audio tower", out, N * cfg.out_dim);
    if (!rc) {
        double *wall = malloc(sizeof(double) * (size_t)ba->iters);
        for (int i = 0; i < ba->iters; i++) {
            const double t0 = omni_time_ms();
            run_audio(&a);
            wall[i] = omni_time_ms() - t0;
        }
        double mn = 0;
        const double ev = time_events(run_audio, &a, audio_tower_cuda_stream(t), ba->iters, &mn);
        char metric[96];
        snprintf(metric, sizeof metric, "%.0f s audio ms (encode, wall, median)", ba->seconds);
        row("audio-tower", metric, median(wall, ba->iters), "ms");
        snprintf(metric, sizeof metric, "%.0f s audio ms (encode, events, median)", ba->seconds);
        row("audio-tower", metric, ev, "ms");
        free(wall);
    }
    audio_tower_cuda_free(t);
    free(mel), free(out);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: omni_bench_towers [--vision DIR] [--audio DIR] [--tokens N] [--seconds S] [--iters N] "
            "[--only vision|audio] [--csv FILE]\n");
    return 2;
}

int main(int argc, char **argv) {
    bench_args a = {.vision_dir = "assets/configs/Qwen3-VL-8B-Instruct",
                    .audio_dir = "assets/configs/Qwen3-Omni-30B-A3B-Instruct", .tokens = 1024, .iters = 20,
                    .seconds = 30};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(o, "--vision")) a.vision_dir = v;
        else if (!strcmp(o, "--audio")) a.audio_dir = v;
        else if (!strcmp(o, "--tokens")) a.tokens = atoi(v);
        else if (!strcmp(o, "--seconds")) a.seconds = atof(v);
        else if (!strcmp(o, "--iters")) a.iters = atoi(v);
        else if (!strcmp(o, "--only")) a.only = v;
        else if (!strcmp(o, "--csv")) a.csv = v;
        else return usage();
        i++;
    }
    if (a.tokens <= 0 || a.iters <= 0 || !(a.seconds > 0)) return usage();
    int n = 0;
    if (omni_cuda_available(&n) != OMNI_OK || n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (a.csv && !(g_csv = fopen(a.csv, "a"))) {
        fprintf(stderr, "cannot open %s\n", a.csv);
        return 2;
    }
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    fprintf(stderr, "device: %s\n", prop.name);
    int rc = 0;
    if (!a.only || !strcmp(a.only, "vision")) rc |= bench_vision(&a);
    if (!a.only || !strcmp(a.only, "audio")) rc |= bench_audio(&a);
    if (g_csv) fclose(g_csv);
    return rc;
}
