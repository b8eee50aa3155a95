/* tower_cuda.c - the Qwen3-Omni AuT audio tower on the GPU in bf16 (audio_cuda.h), written against
 * kernels/ops_cuda.h, kernels/dev_layout.h and kvcache/kv_towers.h only (no CUDA types here).
 *
 * A clip of T mel frames: chunks of L = 2·n_window frames (the last holds T mod L, or L), each zero-padded to the
 * longest chunk Lc; t1, t2, t3 = time steps after each conv, t3 tokens per full chunk; windows of
 * win = t3 · (n_window_infer / L) tokens. A group = whole windows' chunks (at most max_frames frames):
 *   in [nch, F, Lc]       host-packed chunk images (bf16, zero padding), one copy per group
 *   per conv batch of nb chunks (every buffer bf16, channel-last):
 *     y1 [nb·f1·t1, C] = gelu(im2col(in) · c1ᵀ + b1)          K = 9 padded to 16
 *     y2 [nb·f2·t2, C] = gelu(im2col(y1) · c2ᵀ + b2)         K = 9C padded to a multiple of 8
 *     y3 [nb·t3·f3, C] = gelu(im2col_wmajor(y2) · c3ᵀ + b3)  rows (chunk, time, freq)
 *     h[rows of the chunks' valid tokens, d] = y3 viewed [nb·t3, f3·C] · conv_outᵀ  (columns permuted to f·C + c)
 *   h += bf16(pos[r mod t3])                                  positions restart every chunk
 *   layers: a = LN1(h); qkv = a·Wqkvᵀ + b; o = window attention; h += o·Woᵀ + b; a = LN2(h);
 *           h += fc2(gelu(fc1(a)))                            (LayerNorm eps 1e-5, exact GELU)
 *   head:   out = proj2(gelu(proj1(LN_post(h))))             -> f32 -> host rows of the group */
#include "audio/cuda/audio_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dev_layout.h"
#include "kernels/ops_cuda.h"
#include "kernels/tensor.h"
#include "kvcache/kv_towers.h"

#define LN_EPS 1e-5f
#define RANDOM_STD 0.02f
#define K1 16 /* conv2d1's K (1 channel x 9 taps) padded for aligned GEMM rows */

typedef struct {
    uint16_t *ln1_w, *ln1_b, *qkv_w, *qkv_b, *o_w, *o_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} acl; /* a layer's device weights */

struct audio_tower_cuda {
    audio_tower_config cfg;
    audio_cuda_params p;
    int L, f1, f2, f3, t1m, t2m, t3m; /* chunk frames, freq rows and time steps of a full chunk after each conv */
    int ldc;                          /* K of conv2d2/3: 9C rounded up to a multiple of 8 */
    int cpw, max_chunks, nb;          /* chunks per window, per group, per conv batch */
    int max_tok;                      /* tokens per group */
    omni_cuda_ctx *ctx;
    void *stream;
    void *wbase, *wsbase;
    size_t wbytes, wsbytes;
    /* weights */
    uint16_t *c1_w, *c1_b, *c2_w, *c2_b, *c3_w, *c3_b, *conv_out; /* [C, K1], [C, ldc] x2, conv_out [d, f3·C] */
    uint16_t *lnp_w, *lnp_b, *p1_w, *p1_b, *p2_w, *p2_b;
    uint16_t *pos; /* [t3m, d] bf16(sinusoid) */
    acl *layers;   /* host array [n_layers] of device pointers */
    /* workspace */
    uint16_t *in, *col, *y1, *y2, *y3;        /* [max_chunks, F, L], im2col, conv outputs */
    uint16_t *h, *a, *qkv, *o, *ff, *out_bf;  /* [max_tok, d] ..., [max_tok, 3d], [max_tok, ffn], [max_tok, out] */
    float *out_f32;                           /* [max_tok, out] */
    int32_t *cu;                              /* [windows per group + 1] */
    uint16_t *in_h;                           /* host [max_chunks, F, L] bf16 */
    int32_t *cu_h;                            /* host */
};

audio_cuda_params audio_cuda_default_params(void) {
    audio_cuda_params p = {.device = 0, .max_frames = 24000, .conv_batch = 16};
    return p;
}

static int conv_len(int n) { return (n - 1) / 2 + 1; }

/* ---- layout (kernels/dev_layout.h) ------------------------------------------------------------------------ */

#define TAKE16 OMNI_TAKE16

static void walk_weights(audio_tower_cuda *t, omni_layout *k) {
    const audio_tower_config *c = &t->cfg;
    const size_t C = c->conv_ch, d = c->d_model, f = c->ffn;
    t->c1_w = TAKE16(k, C * K1), t->c1_b = TAKE16(k, C);
    t->c2_w = TAKE16(k, C * t->ldc), t->c2_b = TAKE16(k, C);
    t->c3_w = TAKE16(k, C * t->ldc), t->c3_b = TAKE16(k, C);
    t->conv_out = TAKE16(k, d * C * t->f3);
    for (int l = 0; l < c->n_layers; l++) {
        acl *L = &t->layers[l];
        L->ln1_w = TAKE16(k, d), L->ln1_b = TAKE16(k, d), L->ln2_w = TAKE16(k, d), L->ln2_b = TAKE16(k, d);
        L->qkv_w = TAKE16(k, 3 * d * d), L->qkv_b = TAKE16(k, 3 * d);
        L->o_w = TAKE16(k, d * d), L->o_b = TAKE16(k, d);
        L->fc1_w = TAKE16(k, f * d), L->fc1_b = TAKE16(k, f);
        L->fc2_w = TAKE16(k, d * f), L->fc2_b = TAKE16(k, d);
    }
    t->lnp_w = TAKE16(k, d), t->lnp_b = TAKE16(k, d);
    t->p1_w = TAKE16(k, d * d), t->p1_b = TAKE16(k, d);
    t->p2_w = TAKE16(k, (size_t)c->out_dim * d), t->p2_b = TAKE16(k, c->out_dim);
    t->pos = TAKE16(k, (size_t)t->t3m * d);
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void walk_workspace(audio_tower_cuda *t, omni_layout *k) {
    const audio_tower_config *c = &t->cfg;
    const size_t C = c->conv_ch, d = c->d_model, nb = t->nb, G = t->max_tok;
    const size_t r1 = nb * t->f1 * t->t1m, r2 = nb * t->f2 * t->t2m, r3 = nb * t->f3 * t->t3m;
    t->in = TAKE16(k, (size_t)t->max_chunks * c->n_mels * t->L);
    t->col = TAKE16(k, max3(r1 * K1, r2 * t->ldc, r3 * t->ldc));
    t->y1 = TAKE16(k, r1 * C), t->y2 = TAKE16(k, r2 * C), t->y3 = TAKE16(k, r3 * C);
    t->h = TAKE16(k, G * d), t->a = TAKE16(k, G * d), t->qkv = TAKE16(k, G * 3 * d), t->o = TAKE16(k, G * d);
    t->ff = TAKE16(k, G * (size_t)c->ffn), t->out_bf = TAKE16(k, G * (size_t)c->out_dim);
    t->out_f32 = (float *)omni_layout_take(k, sizeof(float) * G * (size_t)c->out_dim);
    t->cu = (int32_t *)omni_layout_take(k, 4 * (size_t)(t->max_chunks / t->cpw + 2));
}

/* ---- init / free ------------------------------------------------------------------------------------------ */

void audio_tower_cuda_free(audio_tower_cuda *t) {
    if (!t) return;
    if (t->stream) omni_cuda_sync(t->stream);
    omni_cuda_free(t->wbase);
    omni_cuda_free(t->wsbase);
    omni_cuda_ctx_free(t->ctx);
    free(t->layers);
    free(t->in_h);
    free(t->cu_h);
    free(t);
}

static omni_status check_config(const audio_tower_config *c, const audio_cuda_params *p) {
    const int L = 2 * c->n_window;
    if (c->n_mels <= 0 || c->d_model <= 0 || c->n_heads <= 0 || c->d_model % c->n_heads || c->n_layers < 0 ||
        c->ffn <= 0 || c->conv_ch <= 0 || c->out_dim <= 0 || c->n_window <= 0 || c->n_window_infer < L)
        return omni_fail(OMNI_ERR_MODEL, "audio tower (GPU): unsupported config (mels %d, d %d, heads %d, n_window %d, "
                         "n_window_infer %d)", c->n_mels, c->d_model, c->n_heads, c->n_window, c->n_window_infer);
    const int hd = c->d_model / c->n_heads;
    if (hd > 128 || hd % 2 || 9 * c->conv_ch > 24576)
        return omni_fail(OMNI_ERR_UNSUPPORTED,
                         "audio tower (GPU): head_dim %d (even, <= 128), conv channels %d (<= 2730)",
                         c->d_model / c->n_heads, c->conv_ch);
    if (p->max_frames <= 0 || p->conv_batch <= 0)
        return omni_fail(OMNI_ERR_USAGE, "audio tower (GPU): max_frames %d, conv_batch %d", p->max_frames,
                         p->conv_batch);
    return OMNI_OK;
}

/* Geometry of a full chunk and of a group. */
static void geometry(audio_tower_cuda *t) {
    const audio_tower_config *c = &t->cfg;
    t->L = 2 * c->n_window;
    t->f1 = conv_len(c->n_mels), t->f2 = conv_len(t->f1), t->f3 = conv_len(t->f2);
    t->t1m = conv_len(t->L), t->t2m = conv_len(t->t1m), t->t3m = conv_len(t->t2m);
    t->ldc = (9 * c->conv_ch + 7) / 8 * 8;
    t->cpw = c->n_window_infer / t->L;
    int groups = t->p.max_frames / (t->L * t->cpw);
    t->max_chunks = (groups > 0 ? groups : 1) * t->cpw;
    t->nb = t->p.conv_batch < t->max_chunks ? t->p.conv_batch : t->max_chunks;
    t->max_tok = t->max_chunks * t->t3m;
}

static omni_status tower_alloc(const audio_tower_config *cfg, const audio_cuda_params *p, audio_tower_cuda **out) {
    *out = NULL;
    omni_status st = check_config(cfg, p);
    if (st) return st;
    audio_tower_cuda *t = calloc(1, sizeof *t);
    if (!t) return omni_fail(OMNI_ERR_NOMEM, "audio tower (GPU): out of host memory");
    t->cfg = *cfg, t->p = *p;
    geometry(t);
    if (t->t3m > cfg->max_source_positions) {
        const int t3 = t->t3m;
        free(t);
        return omni_fail(OMNI_ERR_MODEL, "audio tower (GPU): %d positions per chunk > max_source_positions %d", t3,
                         cfg->max_source_positions);
    }
    t->layers = calloc((size_t)(cfg->n_layers > 0 ? cfg->n_layers : 1), sizeof(acl));
    t->in_h = malloc(2 * (size_t)t->max_chunks * cfg->n_mels * t->L);
    t->cu_h = malloc(4 * (size_t)(t->max_chunks / t->cpw + 2));
    if (!t->layers || !t->in_h || !t->cu_h) {
        audio_tower_cuda_free(t);
        return omni_fail(OMNI_ERR_NOMEM, "audio tower (GPU): out of host memory");
    }
    omni_layout kw = {NULL, 0}, ks = {NULL, 0};
    walk_weights(t, &kw);
    walk_workspace(t, &ks);
    t->wbytes = kw.off, t->wsbytes = ks.off;
    const size_t C = cfg->conv_ch, G = t->max_tok; /* largest M·N of a biased linear: cuBLAS's fp32 scratch */
    const size_t scratch = max3((size_t)t->nb * t->f1 * t->t1m * C, G * (size_t)cfg->ffn,
                                G * (size_t)(3 * cfg->d_model > cfg->out_dim ? 3 * cfg->d_model : cfg->out_dim));
    if (!(st = omni_cuda_ctx_init(&t->ctx, p->device))) t->stream = omni_cuda_ctx_stream(t->ctx);
    if (!st) st = omni_cuda_ctx_reserve(t->ctx, (int64_t)scratch);
    if (!st) st = omni_cuda_malloc_fit(&t->wbase, t->wbytes, "audio tower (GPU)", "weights");
    if (!st) st = omni_cuda_malloc_fit(&t->wsbase, t->wsbytes, "audio tower (GPU)", "workspace");
    if (!st) {
        kw = (omni_layout){(char *)t->wbase, 0}, ks = (omni_layout){(char *)t->wsbase, 0};
        walk_weights(t, &kw);
        walk_workspace(t, &ks);
    }
    if (st) {
        audio_tower_cuda_free(t);
        return st;
    }
    *out = t;
    return OMNI_OK;
}

/* bf16(sinusoid table) rows [0, t3m), as transformers casts the f32 table before the add. */
static omni_status upload_positions(audio_tower_cuda *t) {
    const int d = t->cfg.d_model;
    float *tab = malloc(sizeof(float) * (size_t)t->t3m * d);
    if (!tab) return omni_fail(OMNI_ERR_NOMEM, "audio tower (GPU): out of host memory");
    audio_sinusoid_table(tab, t->t3m, d);
    int64_t shape[2] = {t->t3m, d};
    omni_tensor v = omni_tensor_make(tab, OMNI_F32, 2, shape);
    omni_status st = omni_cuda_upload_bf16(t->pos, &v, t->stream);
    free(tab);
    return st;
}

/* Copy a checkpoint matrix [rows, cols] to dst [rows, ld] as bf16: columns [cols, ld) zero; with f3 > 0 the
 * columns are permuted from c·f3 + f (PyTorch's flatten of [C, F3]) to f·C + c (the stem's row layout). */
static omni_status up_matrix(audio_tower_cuda *t, uint16_t *dst, const omni_tensor *src, int64_t rows, int cols,
                             int ld, int f3, const char *name) {
    if (omni_tensor_numel(src) != rows * cols)
        return omni_fail(OMNI_ERR_MODEL, "audio tower (GPU): %s has %lld values, expected %lld", name,
                         (long long)omni_tensor_numel(src), (long long)(rows * cols));
    if (ld == cols && f3 == 0) return omni_cuda_upload_bf16(dst, src, t->stream);
    float *buf = calloc((size_t)(rows * ld), sizeof(float));
    if (!buf) return omni_fail(OMNI_ERR_NOMEM, "audio tower (GPU): out of host memory");
    const int C = f3 ? cols / f3 : 0;
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            const int s = f3 ? (j % C) * f3 + j / C : j; /* destination column j = f·C + c <- source c·f3 + f */
            buf[r * ld + j] = omni_get_f32(src->data, src->dtype, r * cols + s);
        }
    int64_t shape[2] = {rows, ld};
    omni_tensor v = omni_tensor_make(buf, OMNI_F32, 2, shape);
    omni_status st = omni_cuda_upload_bf16(dst, &v, t->stream);
    free(buf);
    return st;
}

#define UP(dst, src, rows, cols, name) up_matrix(t, dst, src, rows, cols, cols, 0, name)

static omni_status upload_layer(audio_tower_cuda *t, const acl *L, const audio_layer_weights *s) {
    const int d = t->cfg.d_model, f = t->cfg.ffn;
    const size_t dd = (size_t)d * d;
    omni_status st;
    if ((st = UP(L->ln1_w, &s->ln1_w, 1, d, "ln1")) || (st = UP(L->ln1_b, &s->ln1_b, 1, d, "ln1 bias")) ||
        (st = UP(L->qkv_w, &s->q_w, d, d, "q")) || (st = UP(L->qkv_w + dd, &s->k_w, d, d, "k")) ||
        (st = UP(L->qkv_w + 2 * dd, &s->v_w, d, d, "v")) || (st = UP(L->qkv_b, &s->q_b, 1, d, "q bias")) ||
        (st = UP(L->qkv_b + d, &s->k_b, 1, d, "k bias")) || (st = UP(L->qkv_b + 2 * d, &s->v_b, 1, d, "v bias")) ||
        (st = UP(L->o_w, &s->o_w, d, d, "out_proj")) || (st = UP(L->o_b, &s->o_b, 1, d, "out_proj bias")) ||
        (st = UP(L->ln2_w, &s->ln2_w, 1, d, "ln2")) || (st = UP(L->ln2_b, &s->ln2_b, 1, d, "ln2 bias")) ||
        (st = UP(L->fc1_w, &s->fc1_w, f, d, "fc1")) || (st = UP(L->fc1_b, &s->fc1_b, 1, f, "fc1 bias")) ||
        (st = UP(L->fc2_w, &s->fc2_w, d, f, "fc2")) || (st = UP(L->fc2_b, &s->fc2_b, 1, d, "fc2 bias")))
        return st;
    return OMNI_OK;
}

static omni_status upload_weights(audio_tower_cuda *t, const audio_weights *w) {
    const audio_tower_config *c = &t->cfg;
    const int C = c->conv_ch, d = c->d_model;
    omni_status st;
    if ((st = up_matrix(t, t->c1_w, &w->c1_w, C, 9, K1, 0, "conv2d1")) || (st = UP(t->c1_b, &w->c1_b, 1, C, "conv2d1 bias")) ||
        (st = up_matrix(t, t->c2_w, &w->c2_w, C, 9 * C, t->ldc, 0, "conv2d2")) ||
        (st = UP(t->c2_b, &w->c2_b, 1, C, "conv2d2 bias")) ||
        (st = up_matrix(t, t->c3_w, &w->c3_w, C, 9 * C, t->ldc, 0, "conv2d3")) ||
        (st = UP(t->c3_b, &w->c3_b, 1, C, "conv2d3 bias")) ||
        (st = up_matrix(t, t->conv_out, &w->conv_out, d, C * t->f3, C * t->f3, t->f3, "conv_out")))
        return st;
    for (int l = 0; l < c->n_layers; l++)
        if ((st = upload_layer(t, &t->layers[l], &w->layers[l]))) return st;
    if ((st = UP(t->lnp_w, &w->lnp_w, 1, d, "ln_post")) || (st = UP(t->lnp_b, &w->lnp_b, 1, d, "ln_post bias")) ||
        (st = UP(t->p1_w, &w->p1_w, d, d, "proj1")) || (st = UP(t->p1_b, &w->p1_b, 1, d, "proj1 bias")) ||
        (st = UP(t->p2_w, &w->p2_w, c->out_dim, d, "proj2")) || (st = UP(t->p2_b, &w->p2_b, 1, c->out_dim, "proj2 bias")))
        return st;
    return upload_positions(t);
}

omni_status audio_tower_cuda_init(const audio_tower *cpu, const audio_cuda_params *p, audio_tower_cuda **out) {
    audio_cuda_params dp = audio_cuda_default_params();
    omni_status st = tower_alloc(audio_tower_get_config(cpu), p ? p : &dp, out);
    if (st) return st;
    audio_weights w;
    audio_tower_weights(cpu, &w);
    if ((st = upload_weights(*out, &w))) {
        audio_tower_cuda_free(*out);
        *out = NULL;
    }
    return st;
}

static omni_status fill(audio_tower_cuda *t, uint16_t *p, size_t n, uint64_t seed, float mean, float std) {
    return omni_cuda_fill_std_bf16(p, n, seed, mean, std, t->stream);
}

static omni_status random_weights(audio_tower_cuda *t, uint64_t seed) {
    const audio_tower_config *c = &t->cfg;
    const size_t C = c->conv_ch, d = c->d_model, f = c->ffn, o = c->out_dim;
    const float s = RANDOM_STD;
    uint64_t k = seed * 1000003u + 17;
    omni_status st;
    if ((st = fill(t, t->c1_w, C * K1, k++, 0, s)) || (st = fill(t, t->c1_b, C, k++, 0, s)) ||
        (st = fill(t, t->c2_w, C * t->ldc, k++, 0, s)) || (st = fill(t, t->c2_b, C, k++, 0, s)) ||
        (st = fill(t, t->c3_w, C * t->ldc, k++, 0, s)) || (st = fill(t, t->c3_b, C, k++, 0, s)) ||
        (st = fill(t, t->conv_out, d * C * t->f3, k++, 0, s)))
        return st;
    for (int l = 0; l < c->n_layers; l++) {
        const acl *L = &t->layers[l];
        if ((st = fill(t, L->ln1_w, d, k++, 1, 0)) || (st = fill(t, L->ln1_b, d, k++, 0, 0)) ||
            (st = fill(t, L->ln2_w, d, k++, 1, 0)) || (st = fill(t, L->ln2_b, d, k++, 0, 0)) ||
            (st = fill(t, L->qkv_w, 3 * d * d, k++, 0, s)) || (st = fill(t, L->qkv_b, 3 * d, k++, 0, s)) ||
            (st = fill(t, L->o_w, d * d, k++, 0, s)) || (st = fill(t, L->o_b, d, k++, 0, s)) ||
            (st = fill(t, L->fc1_w, f * d, k++, 0, s)) || (st = fill(t, L->fc1_b, f, k++, 0, s)) ||
            (st = fill(t, L->fc2_w, d * f, k++, 0, s)) || (st = fill(t, L->fc2_b, d, k++, 0, s)))
            return st;
    }
    if ((st = fill(t, t->lnp_w, d, k++, 1, 0)) || (st = fill(t, t->lnp_b, d, k++, 0, 0)) ||
        (st = fill(t, t->p1_w, d * d, k++, 0, s)) || (st = fill(t, t->p1_b, d, k++, 0, s)) ||
        (st = fill(t, t->p2_w, o * d, k++, 0, s)) || (st = fill(t, t->p2_b, o, k++, 0, s)))
        return st;
    if ((st = upload_positions(t))) return st;
    return omni_cuda_sync(t->stream);
}

omni_status audio_tower_cuda_init_random(const audio_tower_config *cfg, uint64_t seed, const audio_cuda_params *p,
                                         audio_tower_cuda **out) {
    audio_cuda_params dp = audio_cuda_default_params();
    omni_status st = tower_alloc(cfg, p ? p : &dp, out);
    if (st) return st;
    if ((st = random_weights(*out, seed))) {
        audio_tower_cuda_free(*out);
        *out = NULL;
        return st;
    }
    fprintf(stderr, "audio tower (GPU): random bf16 weights made on the device (seed %llu, %.1f MiB)\n",
            (unsigned long long)seed, (*out)->wbytes / 1048576.0);
    return OMNI_OK;
}

const audio_tower_config *audio_tower_cuda_config(const audio_tower_cuda *t) { return &t->cfg; }
size_t audio_tower_cuda_weight_bytes(const audio_tower_cuda *t) { return t->wbytes; }
size_t audio_tower_cuda_workspace_bytes(const audio_tower_cuda *t) { return t->wsbytes; }
void *audio_tower_cuda_stream(const audio_tower_cuda *t) { return t->stream; }

/* ---- encode ----------------------------------------------------------------------------------------------- */

/* One clip's chunk geometry. */
typedef struct {
    int64_t T, n_chunks;
    int tail, Lc, t1, t2, t3, win; /* last chunk's frames, padded chunk length, steps per conv, window tokens */
} clip;

static omni_status lin(audio_tower_cuda *t, uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                       int M, int N, int K) {
    return omni_cuda_linear(t->ctx, y, OMNI_BF16, x, w, b, M, N, K);
}

/* Chunks [c0, c0 + nch) of the clip into t->in_h (bf16 [nch, F, Lc], zero beyond each chunk's frames), copied. */
static omni_status pack_chunks(audio_tower_cuda *t, const clip *k, const float *mel, int64_t c0, int nch) {
    const int F = t->cfg.n_mels, L = t->L;
    for (int b = 0; b < nch; b++) {
        const int64_t start = (c0 + b) * L;
        const int len = c0 + b == k->n_chunks - 1 ? k->tail : L;
        uint16_t *dst = t->in_h + (size_t)b * F * k->Lc;
        for (int f = 0; f < F; f++)
            for (int j = 0; j < k->Lc; j++)
                dst[(size_t)f * k->Lc + j] = j < len ? omni_f32_to_bf16(mel[(size_t)f * k->T + start + j]) : 0;
    }
    return omni_cuda_h2d(t->in, t->in_h, 2 * (size_t)nch * F * k->Lc, t->stream);
}

/* Conv stem of nb chunks (group-local index b0; clip index c0 + b0) -> token rows of h from row `r0`; returns the
 * number of rows written in *rows. */
static omni_status stem_batch(audio_tower_cuda *t, const clip *k, int64_t c0, int b0, int nb, int r0, int *rows) {
    const audio_tower_config *c = &t->cfg;
    const int C = c->conv_ch, F = c->n_mels, r1 = nb * t->f1 * k->t1, r2 = nb * t->f2 * k->t2, r3 = nb * t->f3 * k->t3;
    const int last = c0 + b0 + nb == k->n_chunks; /* this batch holds the clip's last chunk */
    const int n = (nb - last) * k->t3 + (last ? (int)audio_token_count(k->tail, c->n_window) : 0);
    void *s = t->stream;
    omni_status st;
    if ((st = omni_cuda_im2col_3x3s2_bf16(t->col, K1, t->in + (size_t)b0 * F * k->Lc, nb, F, k->Lc, 1, 0, s)) ||
        (st = lin(t, t->y1, t->col, t->c1_w, t->c1_b, r1, C, K1)) ||
        (st = omni_cuda_gelu_erf_bf16(t->y1, t->y1, (int64_t)r1 * C, s)) ||
        (st = omni_cuda_im2col_3x3s2_bf16(t->col, t->ldc, t->y1, nb, t->f1, k->t1, C, 0, s)) ||
        (st = lin(t, t->y2, t->col, t->c2_w, t->c2_b, r2, C, t->ldc)) ||
        (st = omni_cuda_gelu_erf_bf16(t->y2, t->y2, (int64_t)r2 * C, s)) ||
        (st = omni_cuda_im2col_3x3s2_bf16(t->col, t->ldc, t->y2, nb, t->f2, k->t2, C, 1, s)) ||
        (st = lin(t, t->y3, t->col, t->c3_w, t->c3_b, r3, C, t->ldc)) ||
        (st = omni_cuda_gelu_erf_bf16(t->y3, t->y3, (int64_t)r3 * C, s)) ||
        (st = lin(t, t->h + (size_t)r0 * c->d_model, t->y3, t->conv_out, NULL, n, c->d_model, C * t->f3)))
        return st;
    *rows = n;
    return OMNI_OK;
}

/* o [n, d] = attention within the windows of t->cu over qkv rows. */
static omni_status attention(audio_tower_cuda *t, int n_win, int win) {
    const int d = t->cfg.d_model, H = t->cfg.n_heads, hd = d / H;
    return kvc_tower_attn(H, hd, t->cu, n_win, win, t->qkv, t->qkv + d, t->qkv + 2 * d, 3 * d, t->o, d,
                          1.0f / sqrtf((float)hd), t->stream);
}

static omni_status layer(audio_tower_cuda *t, const acl *L, int n, int n_win, int win) {
    const int d = t->cfg.d_model, f = t->cfg.ffn;
    void *s = t->stream;
    omni_status st;
    if ((st = omni_cuda_layernorm_bf16(t->a, t->h, L->ln1_w, L->ln1_b, n, d, LN_EPS, s)) ||
        (st = lin(t, t->qkv, t->a, L->qkv_w, L->qkv_b, n, 3 * d, d)) || (st = attention(t, n_win, win)) ||
        (st = lin(t, t->a, t->o, L->o_w, L->o_b, n, d, d)) ||
        (st = omni_cuda_add_bf16(t->h, t->h, t->a, (int64_t)n * d, s)) ||
        (st = omni_cuda_layernorm_bf16(t->a, t->h, L->ln2_w, L->ln2_b, n, d, LN_EPS, s)) ||
        (st = lin(t, t->ff, t->a, L->fc1_w, L->fc1_b, n, f, d)) ||
        (st = omni_cuda_gelu_erf_bf16(t->ff, t->ff, (int64_t)n * f, s)) ||
        (st = lin(t, t->a, t->ff, L->fc2_w, L->fc2_b, n, d, f)) ||
        (st = omni_cuda_add_bf16(t->h, t->h, t->a, (int64_t)n * d, s)))
        return st;
    return OMNI_OK;
}

/* Chunks [c0, c0 + nch) (whole windows, except at the clip's end) -> out rows [row, row + n). */
static omni_status run_group(audio_tower_cuda *t, const clip *k, const float *mel, int64_t c0, int nch, float *out,
                             int64_t row, int *n_out) {
    const audio_tower_config *c = &t->cfg;
    const int d = c->d_model;
    omni_status st = pack_chunks(t, k, mel, c0, nch);
    int n = 0;
    for (int b0 = 0; b0 < nch && !st; b0 += t->nb) {
        int rows = 0;
        st = stem_batch(t, k, c0, b0, nch - b0 < t->nb ? nch - b0 : t->nb, n, &rows);
        n += rows;
    }
    if (!st) st = omni_cuda_add_periodic_bf16(t->h, t->pos, k->t3, n, d, t->stream); /* positions per chunk */
    const int n_win = (n + k->win - 1) / k->win;
    for (int w = 0; w <= n_win; w++) t->cu_h[w] = w * k->win < n ? w * k->win : n;
    if (!st) st = omni_cuda_h2d(t->cu, t->cu_h, 4 * (size_t)(n_win + 1), t->stream);
    for (int l = 0; l < c->n_layers && !st; l++) st = layer(t, &t->layers[l], n, n_win, k->win);
    if (!st) st = omni_cuda_layernorm_bf16(t->a, t->h, t->lnp_w, t->lnp_b, n, d, LN_EPS, t->stream);
    if (!st) st = lin(t, t->o, t->a, t->p1_w, t->p1_b, n, d, d);
    if (!st) st = omni_cuda_gelu_erf_bf16(t->o, t->o, (int64_t)n * d, t->stream);
    if (!st) st = lin(t, t->out_bf, t->o, t->p2_w, t->p2_b, n, c->out_dim, d);
    if (!st) st = omni_cuda_bf16_to_f32(t->out_f32, t->out_bf, (int64_t)n * c->out_dim, t->stream);
    if (!st) st = omni_cuda_d2h(out + row * c->out_dim, t->out_f32, sizeof(float) * (size_t)n * c->out_dim, t->stream);
    *n_out = n;
    return st;
}

omni_status audio_tower_cuda_encode(audio_tower_cuda *t, const float *mel, int64_t T, float *out) {
    const audio_tower_config *c = &t->cfg;
    if (T <= 0) return omni_fail(OMNI_ERR_INPUT, "audio tower (GPU): no mel frames");
    clip k = {.T = T, .n_chunks = (T + t->L - 1) / t->L};
    k.tail = (int)(T % t->L ? T % t->L : t->L);
    k.Lc = k.n_chunks > 1 ? t->L : k.tail; /* every chunk is padded to the longest */
    k.t1 = conv_len(k.Lc), k.t2 = conv_len(k.t1), k.t3 = conv_len(k.t2);
    k.win = k.t3 * t->cpw;
    int64_t row = 0;
    omni_status st = OMNI_OK;
    for (int64_t c0 = 0; c0 < k.n_chunks && !st; c0 += t->max_chunks) {
        const int nch = (int)(k.n_chunks - c0 < t->max_chunks ? k.n_chunks - c0 : t->max_chunks);
        int n = 0;
        st = run_group(t, &k, mel, c0, nch, out, row, &n);
        row += n;
    }
    if (!st && row != audio_token_count(T, c->n_window))
        return omni_fail(OMNI_ERR_RUNTIME, "audio tower (GPU): produced %lld tokens, expected %lld", (long long)row,
                         (long long)audio_token_count(T, c->n_window));
    return st;
}
