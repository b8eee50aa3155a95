/* test_gpu_towers.c - the GPU vision and audio towers (vision/cuda, audio/cuda) against the CPU f32 towers:
 *  - fixture towers (tests/fixtures: the Qwen3-VL towers with head_dim 64 and 72, the Omni fixtures' vision and
 *    audio towers, whose head_dims 8, 16 and 24 take the padded attention path) on the fixture images (each alone
 *    and all in one call) and clips (0.5 s partial chunk, 1 s, 3.3 s padded last chunk, 9 s across a window);
 *  - random-weight towers at awkward sizes written as checkpoints at test time: head_dim 72 / 16 / 128 / 80 / 20,
 *    exact and tanh GELU, images of one token, odd token counts and several images per call, GEMM row chunks
 *    smaller than the image, clips of 37 / 100 / 333 / 801 / 900 / 2500 frames incl. several groups of windows and
 *    conv batches with a remainder; without --short also the real widths (Qwen3-VL-8B blocks, the Omni AuT layer).
 *  - errors: oversized calls, bad grids, video, empty clips, run before upload.
 * Tolerances (bf16 class, DESIGN.md §4). One bf16 rounding has relative error <= u = 2^-8 and a relative RMS of
 * about u/sqrt(6) = 1.6e-3 (the error is uniform over half a spacing; the spacing is u..2u of |x| across a
 * binade); call it delta = 1.7e-3. An output that passed through S rounding stages (each with gain about 1:
 * LayerNorms are scale-free, random linears keep relative errors, residual adds sum independent errors) carries
 * a relative RMS error of about delta·sqrt(S); the bound allows 3x that for correlated errors and amplification by
 * random weights: rel_rms(gpu - cpu) <= 3·delta·sqrt(S), and max|gpu - cpu| <= 2 · that · max|cpu| (the largest
 * error of ~1e4..1e6 values is 4-5 sigma, as is the largest value). S counts the stages on the path:
 *   vision: input, patch GEMM, bf16(pos), pos add (4) + 11 per block (LN, qkv, RoPE, attention, proj, add, LN,
 *           fc1, GELU, fc2, add) up to the block an output is taken after + merger (LN, fc1, GELU, fc2: 4);
 *   audio:  mel, 3 x (conv GEMM, GELU), conv_out, bf16(pos), pos add (10) + 10 per layer + head (4).
 * Every output is also checked for NaN/Inf. Exit 77 without a GPU. The same source runs with --short in CI twice:
 * on the CPU emulator of the CUDA kernels (test_emu_towers) and on the host simulation of the device ops
 * (test_sim_towers, tests/towers; also in the sanitizer build, which has no CUDA). */
#define _GNU_SOURCE /* mkdtemp */
#include <unistd.h>

#include "audio/audio.h"
#include "audio/cuda/audio_cuda.h"
#include "gpu_test_util.h"
#include "vision/cuda/vision_cuda.h"
#include "vision/vision.h"

#define DELTA 1.7e-3

static int g_short;
static double g_worst_rms = 0, g_worst_max = 0; /* worst err/tol ratios seen */
static char g_tmp[256];

static const char *fixtures(void) {
    const char *e = getenv("OMNI_FIXTURES_DIR"); /* the GPU host runs binaries built elsewhere */
    return e && *e ? e : OMNI_FIXTURES;
}

/* ---- comparison ------------------------------------------------------------------------------------------ */

/* GPU output vs CPU reference after S rounding stages; prints one line, returns nothing (CHECKs). */
static void compare_out(const char *what, const float *got, const float *ref, int64_t n, int S) {
    double se = 0, sr = 0, me = 0, mr = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        sr += (double)ref[i] * ref[i];
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
        if (!isfinite(got[i])) {
            bad++;
            continue;
        }
        const double e = fabs((double)got[i] - ref[i]);
        se += e * e;
        if (e > me) me = e;
    }
    const double rms = sr > 0 ? sqrt(se / sr) : (se > 0 ? INFINITY : 0), mx = mr > 0 ? me / mr : me;
    const double tol = 3 * DELTA * sqrt((double)S), tol_max = 2 * tol;
    printf("  %-44s n=%8lld S=%3d  rel_rms %.2e (tol %.1e)  max/max|ref| %.2e (tol %.1e)%s\n", what, (long long)n, S,
           rms, tol, mx, tol_max, bad ? "  NON-FINITE" : "");
    CHECK(bad == 0, "%s: %lld non-finite outputs", what, (long long)bad);
    CHECK(rms <= tol, "%s: relative RMS error %.3e > %.3e", what, rms, tol);
    CHECK(mx <= tol_max, "%s: max error %.3e of max|ref| > %.3e", what, mx, tol_max);
    CHECK(mr > 0, "%s: the reference is all zeros", what);
    if (rms / tol > g_worst_rms) g_worst_rms = rms / tol;
    if (mx / tol_max > g_worst_max) g_worst_max = mx / tol_max;
}

/* ---- random checkpoints ------------------------------------------------------------------------------------ */

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[5], n;
    uint16_t *data;
} ck_tensor;

typedef struct {
    ck_tensor *t;
    int n, cap;
} ck_writer;

/* Add a bf16 tensor of uniform values with the given mean and standard deviation. */
static void ck_add(ck_writer *w, const char *name, int ndim, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e,
                   float mean, float std) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = realloc(w->t, sizeof(ck_tensor) * (size_t)w->cap);
        if (!w->t) abort();
    }
    ck_tensor *t = &w->t[w->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    int64_t s[5] = {a, b, c, d, e};
    t->ndim = ndim, t->n = 1;
    for (int i = 0; i < ndim; i++) t->shape[i] = s[i], t->n *= s[i];
    t->data = xmalloc(2 * (size_t)t->n);
    for (int64_t i = 0; i < t->n; i++)
        t->data[i] = omni_f32_to_bf16(mean + std * 1.7320508f * (float)(2 * rng_unif() - 1));
}

/* Write <dir>/model.safetensors and free the tensors. */
static void ck_write(ck_writer *w, const char *dir) {
    size_t cap = 4096 + (size_t)w->n * 256, hl = 0, off = 0;
    char *hdr = xmalloc(cap);
    hl += (size_t)snprintf(hdr, cap, "{");
    for (int i = 0; i < w->n; i++) {
        const ck_tensor *t = &w->t[i];
        hl += (size_t)snprintf(hdr + hl, cap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[", i ? "," : "", t->name);
        for (int d = 0; d < t->ndim; d++) hl += (size_t)snprintf(hdr + hl, cap - hl, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        hl += (size_t)snprintf(hdr + hl, cap - hl, "],\"data_offsets\":[%zu,%zu]}", off, off + 2 * (size_t)t->n);
        off += 2 * (size_t)t->n;
    }
    hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    uint64_t len = hl;
    int ok = f && fwrite(&len, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl;
    for (int i = 0; ok && i < w->n; i++) ok = fwrite(w->t[i].data, 2, (size_t)w->t[i].n, f) == (size_t)w->t[i].n;
    if (f) fclose(f);
    CHECK(ok, "writing %s", path);
    for (int i = 0; i < w->n; i++) free(w->t[i].data);
    free(w->t), free(hdr);
    w->t = NULL, w->n = w->cap = 0;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0, "writing %s", path);
    if (f) fclose(f);
}

static void remove_ckpt(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
}

/* ---- vision --------------------------------------------------------------------------------------------------- */

typedef struct {
    int depth, hidden, heads, inter, out, npe, n_ds, ds[4], gelu_tanh;
} vis_shape;

/* A Qwen3-VL vision checkpoint of random weights (signals keep their scale: matrices with variance 1/fan-in). */
static void write_vision_ckpt(const char *dir, const vis_shape *s) {
    ck_writer w = {0};
    const int64_t D = s->hidden, I = s->inter, M = 4 * D, O = s->out;
    const float sp = 1 / sqrtf(1536.f);
    ck_add(&w, "model.visual.patch_embed.proj.weight", 5, D, 3, 2, 16, 16, 0, sp);
    ck_add(&w, "model.visual.patch_embed.proj.bias", 1, D, 0, 0, 0, 0, 0, 0.1f);
    ck_add(&w, "model.visual.pos_embed.weight", 2, s->npe, D, 0, 0, 0, 0, 0.5f);
    char n[160];
    for (int l = 0; l < s->depth; l++) {
        struct { const char *name; int nd; int64_t a, b; float mean, std; } tab[] = {
            {"norm1.weight", 1, D, 0, 1, 0.1f}, {"norm1.bias", 1, D, 0, 0, 0.1f},
            {"norm2.weight", 1, D, 0, 1, 0.1f}, {"norm2.bias", 1, D, 0, 0, 0.1f},
            {"attn.qkv.weight", 2, 3 * D, D, 0, 1 / sqrtf((float)D)}, {"attn.qkv.bias", 1, 3 * D, 0, 0, 0.1f},
            {"attn.proj.weight", 2, D, D, 0, 1 / sqrtf((float)D)}, {"attn.proj.bias", 1, D, 0, 0, 0.1f},
            {"mlp.linear_fc1.weight", 2, I, D, 0, 1 / sqrtf((float)D)}, {"mlp.linear_fc1.bias", 1, I, 0, 0, 0.1f},
            {"mlp.linear_fc2.weight", 2, D, I, 0, 1 / sqrtf((float)I)}, {"mlp.linear_fc2.bias", 1, D, 0, 0, 0.1f},
        };
        for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
            snprintf(n, sizeof n, "model.visual.blocks.%d.%s", l, tab[i].name);
            ck_add(&w, n, tab[i].nd, tab[i].a, tab[i].b, 0, 0, 0, tab[i].mean, tab[i].std);
        }
    }
    for (int m = 0; m <= s->n_ds; m++) {
        char p[96];
        if (m == 0) snprintf(p, sizeof p, "model.visual.merger.");
        else snprintf(p, sizeof p, "model.visual.deepstack_merger_list.%d.", m - 1);
        const int64_t nd = m == 0 ? D : M;
        snprintf(n, sizeof n, "%snorm.weight", p), ck_add(&w, n, 1, nd, 0, 0, 0, 0, 1, 0.1f);
        snprintf(n, sizeof n, "%snorm.bias", p), ck_add(&w, n, 1, nd, 0, 0, 0, 0, 0, 0.1f);
        snprintf(n, sizeof n, "%slinear_fc1.weight", p), ck_add(&w, n, 2, M, M, 0, 0, 0, 0, 1 / sqrtf((float)M));
        snprintf(n, sizeof n, "%slinear_fc1.bias", p), ck_add(&w, n, 1, M, 0, 0, 0, 0, 0, 0.1f);
        snprintf(n, sizeof n, "%slinear_fc2.weight", p), ck_add(&w, n, 2, O, M, 0, 0, 0, 0, 1 / sqrtf((float)M));
        snprintf(n, sizeof n, "%slinear_fc2.bias", p), ck_add(&w, n, 1, O, 0, 0, 0, 0, 0, 0.1f);
    }
    ck_write(&w, dir);
    char cfg[1024], ds[64] = "";
    for (int k = 0; k < s->n_ds; k++) snprintf(ds + strlen(ds), sizeof ds - strlen(ds), "%s%d", k ? "," : "", s->ds[k]);
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"qwen3_vl\",\"vision_config\":{\"depth\":%d,\"hidden_size\":%d,\"num_heads\":%d,"
             "\"intermediate_size\":%d,\"out_hidden_size\":%d,\"num_position_embeddings\":%d,\"hidden_act\":\"%s\","
             "\"patch_size\":16,\"temporal_patch_size\":2,\"spatial_merge_size\":2,\"in_channels\":3,"
             "\"deepstack_visual_indexes\":[%s]}}",
             s->depth, s->hidden, s->heads, s->inter, s->out, s->npe, s->gelu_tanh ? "gelu_pytorch_tanh" : "gelu", ds);
    write_text(dir, "config.json", cfg);
}

/* Random pixel rows of a gh x gw grid (normalized pixels lie in [-1, 1]). */
static void random_patches(vision_patches *pp, int gh, int gw) {
    memset(pp, 0, sizeof *pp);
    pp->grid_t = 1, pp->grid_h = gh, pp->grid_w = gw, pp->n_patches = gh * gw, pp->patch_dim = 1536;
    pp->resized_h = 16 * gh, pp->resized_w = 16 * gw;
    pp->pixels = xmalloc(sizeof(float) * (size_t)pp->n_patches * 1536);
    for (int64_t i = 0; i < (int64_t)pp->n_patches * 1536; i++) pp->pixels[i] = (float)(2 * rng_unif() - 1);
}

/* The rounding stages up to an output: the merger (m = 0) after every block, deepstack k after its block. */
static int vision_stages(const vision_config *c, int m) {
    const int blocks = m == 0 ? c->depth : c->deepstack_index[m - 1] + 1;
    return 4 + 11 * blocks + 4;
}

/* CPU tower on each image alone vs the GPU tower on all of them in one call. */
static void vision_check(const char *label, vision_tower *cpu, vision_tower_cuda *gpu, vision_patches *pp, int n) {
    const vision_config *c = vision_tower_config(cpu);
    vision_output *ref = xmalloc(sizeof *ref * (size_t)n), *got = xmalloc(sizeof *got * (size_t)n);
    for (int i = 0; i < n; i++) TRY(vision_tower_encode(cpu, &pp[i], &ref[i]));
    omni_status st = vision_tower_cuda_encode(gpu, pp, n, got);
    CHECK(st == OMNI_OK, "%s: %s", label, omni_last_error());
    for (int i = 0; i < n && !st; i++) {
        const int64_t m = (int64_t)ref[i].n_tokens * c->out_hidden;
        CHECK(got[i].n_tokens == ref[i].n_tokens && got[i].n_deepstack == c->n_deepstack &&
                  got[i].grid_h == pp[i].grid_h && got[i].grid_w == pp[i].grid_w,
              "%s: image %d: %d tokens (%d), %d deepstack", label, i, got[i].n_tokens, ref[i].n_tokens,
              got[i].n_deepstack);
        char what[160];
        snprintf(what, sizeof what, "%s img %d/%d %dx%d merger", label, i, n, pp[i].grid_h, pp[i].grid_w);
        compare_out(what, got[i].embd, ref[i].embd, m, vision_stages(c, 0));
        for (int k = 0; k < c->n_deepstack; k++) {
            snprintf(what, sizeof what, "%s img %d/%d %dx%d deepstack %d", label, i, n, pp[i].grid_h, pp[i].grid_w, k);
            compare_out(what, got[i].deepstack[k], ref[i].deepstack[k], m, vision_stages(c, k + 1));
        }
    }
    if (!st) printf("  %s: %d image(s) in %.2f ms on the GPU\n", label, n, got[0].encode_ms);
    for (int i = 0; i < n; i++) vision_output_free(&ref[i]), vision_output_free(&got[i]);
    free(ref), free(got);
}

static void vision_fixture(const char *dir, const char *label) {
    static const char *images[] = {"a_exact.png", "b_down.png", "c_up.png", "d_wide.png", "e_rgba.png"};
    enum { NI = 5 };
    omni_ckpt *ck = NULL;
    vision_tower *cpu = NULL;
    vision_tower_cuda *gpu = NULL;
    omni_status st = omni_ckpt_open(dir, &ck);
    if (!st) st = vision_tower_load(dir, ck, &cpu);
    vision_cuda_params p = vision_cuda_default_params();
    p.max_patches = 4096, p.max_images = NI;
    if (!st) st = vision_tower_cuda_init(cpu, &p, &gpu);
    CHECK(st == OMNI_OK, "%s: %s", dir, omni_last_error());
    if (st) goto done;
    printf("vision %s: depth %d, hidden %d, %d heads of %d\n", label, vision_tower_config(cpu)->depth,
           vision_tower_config(cpu)->hidden, vision_tower_config(cpu)->n_heads, vision_tower_config(cpu)->head_dim);
    vision_prep_params pr = vision_prep_default_params();
    pr.min_pixels = 4096, pr.max_pixels = 16384;
    vision_patches pp[NI];
    memset(pp, 0, sizeof pp);
    for (int i = 0; i < NI; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/vision/%s", fixtures(), images[i]);
        vision_image im;
        TRY(vision_image_load(path, 0, &im));
        TRY(vision_preprocess(&im, &pr, &pp[i]));
        vision_image_free(&im);
        char l[96];
        snprintf(l, sizeof l, "%s %s", label, images[i]);
        vision_check(l, cpu, gpu, &pp[i], 1);
    }
    char l[96];
    snprintf(l, sizeof l, "%s all", label);
    vision_check(l, cpu, gpu, pp, NI);
    for (int i = 0; i < NI; i++) vision_patches_free(&pp[i]);
done:
    vision_tower_cuda_free(gpu);
    vision_tower_free(cpu);
    omni_ckpt_free(ck);
}

/* A random tower of shape s, images of the given grids: each alone, then all in one call. */
static void vision_random(const char *label, const vis_shape *s, const int (*grids)[2], int n, int row_chunk) {
    write_vision_ckpt(g_tmp, s);
    omni_ckpt *ck = NULL;
    vision_tower *cpu = NULL;
    vision_tower_cuda *gpu = NULL;
    omni_status st = omni_ckpt_open(g_tmp, &ck);
    if (!st) st = vision_tower_load(g_tmp, ck, &cpu);
    vision_cuda_params p = vision_cuda_default_params();
    p.max_patches = 0, p.max_images = n, p.row_chunk = row_chunk;
    for (int i = 0; i < n; i++) p.max_patches += grids[i][0] * grids[i][1];
    if (!st) st = vision_tower_cuda_init(cpu, &p, &gpu);
    CHECK(st == OMNI_OK, "%s: %s", label, omni_last_error());
    if (!st) {
        printf("vision %s: depth %d, hidden %d, %d heads of %d, inter %d, out %d, row chunk %d\n", label, s->depth,
               s->hidden, s->heads, s->hidden / s->heads, s->inter, s->out, row_chunk);
        vision_patches *pp = xmalloc(sizeof *pp * (size_t)n);
        for (int i = 0; i < n; i++) random_patches(&pp[i], grids[i][0], grids[i][1]);
        if (n > 1)
            for (int i = 0; i < n; i++) vision_check(label, cpu, gpu, &pp[i], 1);
        vision_check(label, cpu, gpu, pp, n);
        for (int i = 0; i < n; i++) vision_patches_free(&pp[i]);
        free(pp);
    }
    vision_tower_cuda_free(gpu);
    vision_tower_free(cpu);
    omni_ckpt_free(ck);
    remove_ckpt(g_tmp);
}

static void test_vision(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vision/vl-h64", fixtures());
    vision_fixture(dir, "vl-h64");
    snprintf(dir, sizeof dir, "%s/vision/vl-h72", fixtures());
    vision_fixture(dir, "vl-h72");
    snprintf(dir, sizeof dir, "%s/audio/omni-b", fixtures());
    vision_fixture(dir, "omni-b (head_dim 8)");
    static const int g1[][2] = {{2, 2}, {6, 10}, {14, 8}, {2, 64}};
    vis_shape a = {.depth = 3, .hidden = 144, .heads = 2, .inter = 200, .out = 56, .npe = 256, .n_ds = 2,
                   .ds = {0, 2}, .gelu_tanh = 1};
    vision_random("rand-hd72", &a, g1, 4, 8192);
    vision_random("rand-hd72-rows52", &a, g1, 4, 52); /* every GEMM in passes of 52 rows, the last partial */
    static const int g2[][2] = {{4, 18}, {10, 6}};
    vis_shape b = {.depth = 2, .hidden = 48, .heads = 3, .inter = 96, .out = 40, .npe = 64, .n_ds = 1, .ds = {1},
                   .gelu_tanh = 0};
    vision_random("rand-hd16-erf", &b, g2, 2, 8192);
    static const int g3[][2] = {{8, 8}};
    vis_shape c = {.depth = 2, .hidden = 256, .heads = 2, .inter = 320, .out = 64, .npe = 2304, .n_ds = 1,
                   .ds = {0}, .gelu_tanh = 1};
    vision_random("rand-hd128", &c, g3, 1, 8192);
    if (!g_short) { /* Qwen3-VL-8B block widths, two blocks, 1536 patches (384 tokens) */
        static const int g4[][2] = {{32, 48}};
        vis_shape r = {.depth = 2, .hidden = 1152, .heads = 16, .inter = 4304, .out = 4096, .npe = 2304, .n_ds = 2,
                       .ds = {0, 1}, .gelu_tanh = 1};
        vision_random("8B-width", &r, g4, 1, 8192);
    }
}

/* ---- audio ---------------------------------------------------------------------------------------------------- */

static float *clip_mel(const char *clip, int64_t *T) {
    char path[1024];
    snprintf(path, sizeof path, "%s/audio/clips/%s.wav", fixtures(), clip);
    audio_pcm a;
    TRY(audio_load(path, &a));
    *T = audio_mel_frames(a.n);
    float *mel = xmalloc(sizeof(float) * 128 * (size_t)*T);
    TRY(audio_log_mel(a.samples, a.n, mel));
    audio_pcm_free(&a);
    return mel;
}

static void audio_check(const char *label, audio_tower *cpu, audio_tower_cuda *gpu, const float *mel, int64_t T) {
    const audio_tower_config *c = audio_tower_get_config(cpu);
    const int64_t N = audio_token_count(T, c->n_window), n = N * c->out_dim;
    float *ref = xmalloc(sizeof(float) * (size_t)n), *got = xmalloc(sizeof(float) * (size_t)n);
    TRY(audio_tower_encode(cpu, mel, T, ref));
    const double t0 = omni_time_ms();
    omni_status st = audio_tower_cuda_encode(gpu, mel, T, got);
    const double ms = omni_time_ms() - t0;
    CHECK(st == OMNI_OK, "%s: %s", label, omni_last_error());
    if (!st) {
        char what[160];
        snprintf(what, sizeof what, "%s T=%lld (%lld tokens, %.2f ms)", label, (long long)T, (long long)N, ms);
        compare_out(what, got, ref, n, 10 + 10 * c->n_layers + 4);
    }
    free(ref), free(got);
}

static void audio_fixture(const char *name) {
    static const char *clips[] = {"tone_0p5s", "tone_1s", "tone_3p3s", "tone_9s"};
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/audio/%s", fixtures(), name);
    audio_tower_config cfg;
    omni_ckpt *ck = NULL;
    audio_tower *cpu = NULL;
    audio_tower_cuda *gpu = NULL;
    omni_status st = audio_tower_config_read(dir, &cfg);
    if (!st) st = omni_ckpt_open(dir, &ck);
    if (!st) st = audio_tower_load(ck, &cfg, &cpu);
    if (!st) st = audio_tower_cuda_init(cpu, NULL, &gpu);
    CHECK(st == OMNI_OK, "%s: %s", name, omni_last_error());
    if (!st) {
        printf("audio %s: d %d, %d layers, %d heads of %d, conv %d\n", name, cfg.d_model, cfg.n_layers, cfg.n_heads,
               cfg.d_model / cfg.n_heads, cfg.conv_ch);
        for (int i = 0; i < 4; i++) {
            int64_t T = 0;
            float *mel = clip_mel(clips[i], &T);
            char l[96];
            snprintf(l, sizeof l, "%s %s", name, clips[i]);
            audio_check(l, cpu, gpu, mel, T);
            free(mel);
        }
    }
    audio_tower_cuda_free(gpu);
    audio_tower_free(cpu);
    omni_ckpt_free(ck);
}

/* An AuT checkpoint of random weights (variance 1/fan-in). */
static void write_audio_ckpt(const char *dir, const audio_tower_config *c) {
    ck_writer w = {0};
    const int64_t C = c->conv_ch, d = c->d_model, f = c->ffn, F3 = audio_stem_rows(c->n_mels);
    const char *p = c->prefix;
    char n[256];
#define ADD(name, nd, a, b, cc, dd, mean, std) (snprintf(n, sizeof n, "%s%s", p, name), ck_add(&w, n, nd, a, b, cc, dd, 0, mean, std))
    ADD("conv2d1.weight", 4, C, 1, 3, 3, 0, 1 / 3.f), ADD("conv2d1.bias", 1, C, 0, 0, 0, 0, 0.1f);
    ADD("conv2d2.weight", 4, C, C, 3, 3, 0, 1 / sqrtf(9.f * C)), ADD("conv2d2.bias", 1, C, 0, 0, 0, 0, 0.1f);
    ADD("conv2d3.weight", 4, C, C, 3, 3, 0, 1 / sqrtf(9.f * C)), ADD("conv2d3.bias", 1, C, 0, 0, 0, 0, 0.1f);
    ADD("conv_out.weight", 2, d, C * F3, 0, 0, 0, 1 / sqrtf((float)(C * F3)));
    for (int l = 0; l < c->n_layers; l++) {
        struct { const char *name; int nd; int64_t a, b; float mean, std; } tab[] = {
            {"self_attn_layer_norm.weight", 1, d, 0, 1, 0.1f}, {"self_attn_layer_norm.bias", 1, d, 0, 0, 0.1f},
            {"self_attn.q_proj.weight", 2, d, d, 0, 1 / sqrtf((float)d)}, {"self_attn.q_proj.bias", 1, d, 0, 0, 0.1f},
            {"self_attn.k_proj.weight", 2, d, d, 0, 1 / sqrtf((float)d)}, {"self_attn.k_proj.bias", 1, d, 0, 0, 0.1f},
            {"self_attn.v_proj.weight", 2, d, d, 0, 1 / sqrtf((float)d)}, {"self_attn.v_proj.bias", 1, d, 0, 0, 0.1f},
            {"self_attn.out_proj.weight", 2, d, d, 0, 1 / sqrtf((float)d)},
            {"self_attn.out_proj.bias", 1, d, 0, 0, 0.1f},
            {"final_layer_norm.weight", 1, d, 0, 1, 0.1f}, {"final_layer_norm.bias", 1, d, 0, 0, 0.1f},
            {"fc1.weight", 2, f, d, 0, 1 / sqrtf((float)d)}, {"fc1.bias", 1, f, 0, 0, 0.1f},
            {"fc2.weight", 2, d, f, 0, 1 / sqrtf((float)f)}, {"fc2.bias", 1, d, 0, 0, 0.1f},
        };
        for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
            char ln[96];
            snprintf(ln, sizeof ln, "layers.%d.%s", l, tab[i].name);
            ADD(ln, tab[i].nd, tab[i].a, tab[i].b, 0, 0, tab[i].mean, tab[i].std);
        }
    }
    ADD("ln_post.weight", 1, d, 0, 0, 0, 1, 0.1f), ADD("ln_post.bias", 1, d, 0, 0, 0, 0, 0.1f);
    ADD("proj1.weight", 2, d, d, 0, 0, 0, 1 / sqrtf((float)d)), ADD("proj1.bias", 1, d, 0, 0, 0, 0, 0.1f);
    ADD("proj2.weight", 2, c->out_dim, d, 0, 0, 0, 1 / sqrtf((float)d));
    ADD("proj2.bias", 1, c->out_dim, 0, 0, 0, 0, 0.1f);
#undef ADD
    ck_write(&w, dir);
}

/* A random AuT of config c, the given clip lengths of random mel frames in [-1, 1]. */
static void audio_random(const char *label, const audio_tower_config *c, const audio_cuda_params *p,
                         const int64_t *Ts, int nT) {
    write_audio_ckpt(g_tmp, c);
    omni_ckpt *ck = NULL;
    audio_tower *cpu = NULL;
    audio_tower_cuda *gpu = NULL;
    omni_status st = omni_ckpt_open(g_tmp, &ck);
    if (!st) st = audio_tower_load(ck, c, &cpu);
    if (!st) st = audio_tower_cuda_init(cpu, p, &gpu);
    CHECK(st == OMNI_OK, "%s: %s", label, omni_last_error());
    if (!st) {
        printf("audio %s: d %d, %d layers, %d heads of %d, ffn %d, conv %d, out %d; max_frames %d, conv_batch %d\n",
               label, c->d_model, c->n_layers, c->n_heads, c->d_model / c->n_heads, c->ffn, c->conv_ch, c->out_dim,
               p->max_frames, p->conv_batch);
        for (int i = 0; i < nT; i++) {
            float *mel = xmalloc(sizeof(float) * 128 * (size_t)Ts[i]);
            for (int64_t j = 0; j < 128 * Ts[i]; j++) mel[j] = (float)(2 * rng_unif() - 1);
            audio_check(label, cpu, gpu, mel, Ts[i]);
            free(mel);
        }
    }
    audio_tower_cuda_free(gpu);
    audio_tower_free(cpu);
    omni_ckpt_free(ck);
    remove_ckpt(g_tmp);
}

static void test_audio(void) {
    audio_fixture("omni-a");
    audio_fixture("omni-b");
    audio_tower_config c = audio_tower_default_config();
    audio_cuda_params p = audio_cuda_default_params();
    c.d_model = 128, c.n_layers = 2, c.n_heads = 2, c.ffn = 200, c.conv_ch = 40, c.out_dim = 56;
    static const int64_t t1[] = {37, 100, 333, 900, 2500};
    audio_random("rand-hd64", &c, &p, t1, 5);
    p.max_frames = 1600, p.conv_batch = 3; /* groups of 2 windows (16 chunks), conv batches 3+3+...+1 */
    audio_random("rand-hd64-groups", &c, &p, t1 + 3, 2);
    p = audio_cuda_default_params();
    c.d_model = 80, c.n_layers = 1, c.n_heads = 1, c.ffn = 96, c.conv_ch = 8, c.out_dim = 24;
    static const int64_t t2[] = {801};
    audio_random("rand-hd80-conv8", &c, &p, t2, 1);
    c.d_model = 60, c.n_layers = 1, c.n_heads = 3, c.ffn = 64, c.conv_ch = 5, c.out_dim = 32;
    static const int64_t t3[] = {250};
    audio_random("rand-hd20-conv5", &c, &p, t3, 1);
    if (!g_short) { /* the Omni-30B-A3B AuT widths, one layer, 30 s and 9 s */
        c = audio_tower_default_config();
        c.n_layers = 1;
        static const int64_t t4[] = {3000, 901};
        audio_random("Omni-width", &c, &p, t4, 2);
    }
}

/* ---- errors -------------------------------------------------------------------------------------------------- */

static void test_errors(void) {
    vis_shape a = {.depth = 1, .hidden = 64, .heads = 1, .inter = 32, .out = 16, .npe = 64, .n_ds = 0};
    write_vision_ckpt(g_tmp, &a);
    omni_ckpt *ck = NULL;
    vision_tower *cpu = NULL;
    vision_tower_cuda *gpu = NULL;
    TRY(omni_ckpt_open(g_tmp, &ck));
    TRY(vision_tower_load(g_tmp, ck, &cpu));
    vision_cuda_params p = vision_cuda_default_params();
    p.max_patches = 6;
    CHECK(vision_tower_cuda_init(cpu, &p, &gpu) == OMNI_ERR_USAGE && !gpu, "max_patches 6 refused");
    p.max_patches = 16, p.max_images = 2;
    TRY(vision_tower_cuda_init(cpu, &p, &gpu));
    vision_patches pp[3];
    for (int i = 0; i < 3; i++) random_patches(&pp[i], 2, 2);
    vision_output out[3];
    CHECK(vision_tower_cuda_run(gpu) == OMNI_ERR_USAGE, "run before upload refused");
    CHECK(vision_tower_cuda_encode(gpu, pp, 3, out) == OMNI_ERR_INPUT, "3 images > max_images 2: %s",
          omni_last_error());
    vision_patches big;
    random_patches(&big, 4, 6);
    CHECK(vision_tower_cuda_encode(gpu, &big, 1, out) == OMNI_ERR_INPUT, "24 patches > 16: %s", omni_last_error());
    pp[0].grid_w = 3, pp[0].n_patches = 6;
    CHECK(vision_tower_cuda_encode(gpu, pp, 1, out) == OMNI_ERR_INPUT, "odd grid refused: %s", omni_last_error());
    pp[0].grid_w = 2, pp[0].n_patches = 4, pp[0].grid_t = 2;
    CHECK(vision_tower_cuda_encode(gpu, pp, 1, out) == OMNI_ERR_UNSUPPORTED, "video refused: %s", omni_last_error());
    pp[0].grid_t = 1, pp[0].patch_dim = 768;
    CHECK(vision_tower_cuda_encode(gpu, pp, 1, out) == OMNI_ERR_INPUT, "patch_dim refused: %s", omni_last_error());
    pp[0].patch_dim = 1536;
    CHECK(vision_tower_cuda_encode(gpu, pp, 2, out) == OMNI_OK, "a valid call after refused ones: %s",
          omni_last_error());
    for (int i = 0; i < 2; i++) vision_output_free(&out[i]);
    for (int i = 0; i < 3; i++) vision_patches_free(&pp[i]);
    vision_patches_free(&big);
    vision_tower_cuda_free(gpu);
    vision_tower_cuda_free(NULL);
    vision_tower_free(cpu);
    omni_ckpt_free(ck);
    remove_ckpt(g_tmp);

    audio_tower_config c = audio_tower_default_config();
    c.d_model = 64, c.n_layers = 1, c.n_heads = 1, c.ffn = 32, c.conv_ch = 4, c.out_dim = 8;
    audio_tower_cuda *ag = NULL;
    TRY(audio_tower_cuda_init_random(&c, 5, NULL, &ag));
    float mel[128], o[8];
    CHECK(audio_tower_cuda_encode(ag, mel, 0, o) == OMNI_ERR_INPUT, "0 frames refused");
    audio_tower_cuda_free(ag);
    audio_tower_cuda_free(NULL);
    c.n_heads = 3; /* 64 % 3 */
    CHECK(audio_tower_cuda_init_random(&c, 5, NULL, &ag) == OMNI_ERR_MODEL && !ag, "d_model %% heads refused");
}

int main(int argc, char **argv) {
    g_short = argc > 1 && !strcmp(argv[1], "--short");
    if (!gpu_test_open()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/omni_towers_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "FATAL: mkdtemp %s\n", g_tmp);
        return 1;
    }
    double t0 = omni_time_ms();
    test_vision();
    test_audio();
    test_errors();
    rmdir(g_tmp);
    printf("worst error / tolerance: rel_rms %.3f, max %.3f (%.0f ms)\n", g_worst_rms, g_worst_max,
           omni_time_ms() - t0);
    omni_cuda_ctx_free(g_ctx);
    return check_exit();
}
