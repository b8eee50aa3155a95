/* tower.c - the Qwen3-Omni AuT audio encoder (Qwen3OmniMoeAudioEncoder, transformers 5.17.0), CPU f32.
 *
 * mel [128, T] -> chunks of L = 2·n_window frames (the last holds T mod L, or L; every chunk is zero-padded to the
 * longest chunk Lc of the clip, or of the batch of clips it was encoded with in transformers) -> per chunk: conv2d1/2/3 (3x3, stride 2, pad 1) + exact GELU, channel-last
 * [F=16, t, C] -> conv_out over (C·16) -> + sinusoidal position p = 0..t-1 -> keep the chunk's valid prefix
 * -> tokens [N, d] -> pre-LN encoder layers with attention only inside windows of t(Lc)·(n_window_infer / L)
 * tokens -> ln_post -> proj1 -> GELU -> proj2 -> [N, out_dim].
 * Windows never interact, so a group of whole windows runs through every layer at a time (memory bounded by the
 * group). Conv2d is im2col + op_linear (weights [C_out, C_in, 3, 3] are already [C_out, C_in·9]). */
#include "audio/audio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/json.h"
#include "kernels/ops.h"

#define GROUP_TOKENS 1024 /* tokens per group of windows (at least one window) */

typedef audio_layer_weights aut_layer;

struct audio_tower {
    audio_tower_config cfg;
    int f1, f2, f3;                          /* frequency rows after each conv: 128 -> 64 -> 32 -> 16 */
    omni_tensor c1_w, c1_b, c2_w, c2_b, c3_w, c3_b; /* [C,1,3,3] / [C,C,3,3], [C] */
    omni_tensor conv_out;                    /* [d, C·f3] */
    omni_tensor lnp_w, lnp_b, p1_w, p1_b, p2_w, p2_b; /* ln_post [d]; proj1 [d,d]; proj2 [out,d] */
    aut_layer *layers;
    float *pos; /* [max_source_positions, d] sinusoidal table */
    volatile const int *interrupt; /* checked between layers (audio_tower_set_interrupt) */
};

static int64_t floordiv(int64_t a, int64_t b) { /* Python // for b > 0 */
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int conv_len(int n) { return (n - 1) / 2 + 1; } /* k3 s2 p1, n >= 1 */

/* Tokens of a chunk of r frames after the 3 convs (0 for r = 0: Python's floor division). */
static int64_t stem_tokens(int64_t r) {
    int64_t a = floordiv(r - 1, 2) + 1, b = floordiv(a - 1, 2) + 1;
    return floordiv(b - 1, 2) + 1;
}

/* transformers writes the full chunk's 13 tokens (100 frames) as a constant; it is the stem of L frames, so other
 * n_window values count what the tower makes (13 read past a 2-frame chunk's 1 token: heap corruption). */
int64_t audio_token_count(int64_t frames, int n_window) {
    if (frames <= 0 || n_window <= 0) return 0;
    int64_t L = 2 * (int64_t)n_window;
    return stem_tokens(frames % L) + (frames / L) * stem_tokens(L);
}

int audio_stem_rows(int n_mels) { return conv_len(conv_len(conv_len(n_mels))); }

audio_tower_config audio_tower_default_config(void) {
    audio_tower_config c = {.n_mels = 128, .d_model = 1280, .n_layers = 32, .n_heads = 20, .ffn = 5120,
                            .conv_ch = 480, .out_dim = 2048, .n_window = 50, .n_window_infer = 800,
                            .max_source_positions = 1500};
    snprintf(c.prefix, sizeof c.prefix, "thinker.audio_tower.");
    return c;
}

omni_status audio_tower_config_from_json(const cJSON *ac, const char *where, audio_tower_config *cfg) {
    *cfg = audio_tower_default_config();
    if (!cJSON_IsObject(ac)) return omni_fail(OMNI_ERR_MODEL, "audio tower: config.json has no audio_config");
    omni_json_ctx j = {"config.json", where ? where : "audio_config", OMNI_ERR_MODEL};
    const int O = OMNI_JSON_OPTIONAL;
    omni_status st = omni_json_int(&j, ac, "num_mel_bins", O, AUDIO_N_MELS, AUDIO_N_MELS, &cfg->n_mels);
    if (!st) st = omni_json_int(&j, ac, "d_model", O, 2, 1 << 16, &cfg->d_model);
    if (!st) st = omni_json_int(&j, ac, "encoder_layers", O, 0, 256, &cfg->n_layers);
    if (!st) st = omni_json_int(&j, ac, "encoder_attention_heads", O, 1, 1024, &cfg->n_heads);
    if (!st) st = omni_json_int(&j, ac, "encoder_ffn_dim", O, 1, 1 << 20, &cfg->ffn);
    if (!st) st = omni_json_int(&j, ac, "downsample_hidden_size", O, 1, 1 << 16, &cfg->conv_ch);
    if (!st) st = omni_json_int(&j, ac, "output_dim", O, 1, 1 << 16, &cfg->out_dim);
    if (!st) st = omni_json_int(&j, ac, "n_window", O, 1, 1 << 16, &cfg->n_window);
    if (!st) st = omni_json_int(&j, ac, "n_window_infer", O, 2, 1 << 20, &cfg->n_window_infer);
    if (!st) st = omni_json_int(&j, ac, "max_source_positions", O, 1, 1 << 20, &cfg->max_source_positions);
    const char *act = "gelu"; /* the encoder layers' and proj1's activation (the conv stem's is always GELU) */
    if (!st) st = omni_json_string(&j, ac, "activation_function", O, &act);
    if (!st && strcmp(act, "gelu"))
        st = omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: %s.activation_function '%s' is not supported (gelu only)",
                       where ? where : "audio_config", act);
    return st;
}

omni_status audio_tower_config_read(const char *model_dir, audio_tower_config *cfg) {
    *cfg = audio_tower_default_config();
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    cJSON *root = NULL;
    omni_status st = omni_json_load(path, OMNI_ERR_MODEL, &root);
    if (st) return st;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinker_config");
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(th ? th : root, "audio_config");
    st = audio_tower_config_from_json(ac, th ? "thinker_config.audio_config" : "audio_config", cfg);
    cJSON_Delete(root);
    return st;
}

static omni_status check_config(const audio_tower_config *c) {
    if (c->n_mels != AUDIO_N_MELS || c->d_model <= 0 || c->n_heads <= 0 || c->d_model % c->n_heads ||
        c->d_model % 2 || c->n_layers < 0 || c->ffn <= 0 || c->conv_ch <= 0 || c->out_dim <= 0 ||
        c->n_window <= 0 || c->n_window_infer < 2 * c->n_window || c->max_source_positions <= 0)
        return omni_fail(OMNI_ERR_MODEL,
                         "audio tower: unsupported config (mels %d, d %d, heads %d, layers %d, ffn %d, conv %d, "
                         "out %d, n_window %d, n_window_infer %d)",
                         c->n_mels, c->d_model, c->n_heads, c->n_layers, c->ffn, c->conv_ch, c->out_dim, c->n_window,
                         c->n_window_infer);
    return OMNI_OK;
}

/* Bind one tensor "<prefix><name>" with the given shape. */
static omni_status get(const audio_tower *t, const omni_ckpt *ck, omni_tensor *out, const char *name, int ndim,
                       int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t shape[4] = {a, b, c, d};
    return omni_ckpt_getf(ck, out, ndim, shape, "%s%s", t->cfg.prefix, name);
}

static omni_status load_layer(const audio_tower *t, const omni_ckpt *ck, int i, aut_layer *L) {
    const int64_t d = t->cfg.d_model, f = t->cfg.ffn;
    struct { omni_tensor *w; const char *n; int nd; int64_t a, b; } tab[] = {
        {&L->ln1_w, "self_attn_layer_norm.weight", 1, d, 0}, {&L->ln1_b, "self_attn_layer_norm.bias", 1, d, 0},
        {&L->q_w, "self_attn.q_proj.weight", 2, d, d},      {&L->q_b, "self_attn.q_proj.bias", 1, d, 0},
        {&L->k_w, "self_attn.k_proj.weight", 2, d, d},      {&L->k_b, "self_attn.k_proj.bias", 1, d, 0},
        {&L->v_w, "self_attn.v_proj.weight", 2, d, d},      {&L->v_b, "self_attn.v_proj.bias", 1, d, 0},
        {&L->o_w, "self_attn.out_proj.weight", 2, d, d},    {&L->o_b, "self_attn.out_proj.bias", 1, d, 0},
        {&L->ln2_w, "final_layer_norm.weight", 1, d, 0},    {&L->ln2_b, "final_layer_norm.bias", 1, d, 0},
        {&L->fc1_w, "fc1.weight", 2, f, d},                 {&L->fc1_b, "fc1.bias", 1, f, 0},
        {&L->fc2_w, "fc2.weight", 2, d, f},                 {&L->fc2_b, "fc2.bias", 1, d, 0},
    };
    for (size_t k = 0; k < sizeof tab / sizeof tab[0]; k++) {
        char name[128];
        snprintf(name, sizeof name, "layers.%d.%s", i, tab[k].n);
        omni_status st = get(t, ck, tab[k].w, name, tab[k].nd, tab[k].a, tab[k].b, 0, 0);
        if (st) return st;
    }
    return OMNI_OK;
}

static omni_status load_stem(audio_tower *t, const omni_ckpt *ck) {
    const int64_t C = t->cfg.conv_ch, d = t->cfg.d_model, o = t->cfg.out_dim;
    struct { omni_tensor *w; const char *n; int nd; int64_t a, b, c, e; } tab[] = {
        {&t->c1_w, "conv2d1.weight", 4, C, 1, 3, 3}, {&t->c1_b, "conv2d1.bias", 1, C, 0, 0, 0},
        {&t->c2_w, "conv2d2.weight", 4, C, C, 3, 3}, {&t->c2_b, "conv2d2.bias", 1, C, 0, 0, 0},
        {&t->c3_w, "conv2d3.weight", 4, C, C, 3, 3}, {&t->c3_b, "conv2d3.bias", 1, C, 0, 0, 0},
        {&t->conv_out, "conv_out.weight", 2, d, C * t->f3, 0, 0},
        {&t->lnp_w, "ln_post.weight", 1, d, 0, 0, 0}, {&t->lnp_b, "ln_post.bias", 1, d, 0, 0, 0},
        {&t->p1_w, "proj1.weight", 2, d, d, 0, 0},    {&t->p1_b, "proj1.bias", 1, d, 0, 0, 0},
        {&t->p2_w, "proj2.weight", 2, o, d, 0, 0},    {&t->p2_b, "proj2.bias", 1, o, 0, 0, 0},
    };
    for (size_t k = 0; k < sizeof tab / sizeof tab[0]; k++) {
        omni_status st = get(t, ck, tab[k].w, tab[k].n, tab[k].nd, tab[k].a, tab[k].b, tab[k].c, tab[k].e);
        if (st) return st;
    }
    return OMNI_OK;
}

/* SinusoidsPositionEmbedding in f32 as torch computes it: inv[i] = exp(-(f32)(ln 1e4 / (half-1)) · i). */
void audio_sinusoid_table(float *pos, int rows, int d) {
    int half = d / 2;
    float inc = (float)(log(10000.0) / (half - 1));
    for (int p = 0; p < rows; p++)
        for (int i = 0; i < half; i++) {
            float st = (float)p * expf(-inc * (float)i);
            pos[(size_t)p * d + i] = sinf(st);
            pos[(size_t)p * d + half + i] = cosf(st);
        }
}

omni_status audio_tower_load(const omni_ckpt *ckpt, const audio_tower_config *cfg, audio_tower **out) {
    *out = NULL;
    omni_status st = check_config(cfg);
    if (st) return st;
    audio_tower *t = calloc(1, sizeof *t);
    if (!t) return omni_fail(OMNI_ERR_NOMEM, "audio tower: out of memory");
    t->cfg = *cfg;
    t->f1 = conv_len(cfg->n_mels);
    t->f2 = conv_len(t->f1);
    t->f3 = conv_len(t->f2);
    t->layers = calloc((size_t)(cfg->n_layers > 0 ? cfg->n_layers : 1), sizeof *t->layers);
    t->pos = malloc((size_t)cfg->max_source_positions * cfg->d_model * sizeof(float));
    if (!t->layers || !t->pos) st = omni_fail(OMNI_ERR_NOMEM, "audio tower: out of memory");
    if (!st) st = load_stem(t, ckpt);
    for (int i = 0; !st && i < cfg->n_layers; i++) st = load_layer(t, ckpt, i, &t->layers[i]);
    if (!st) st = omni_ckpt_check_unused(ckpt, "audio_config.encoder_layers", "%slayers.%d.", cfg->prefix, cfg->n_layers);
    if (st) {
        audio_tower_free(t);
        return st;
    }
    audio_sinusoid_table(t->pos, cfg->max_source_positions, cfg->d_model);
    *out = t;
    return OMNI_OK;
}

void audio_tower_free(audio_tower *t) {
    if (!t) return;
    free(t->layers);
    free(t->pos);
    free(t);
}

void audio_tower_set_interrupt(audio_tower *t, volatile const int *flag) { t->interrupt = flag; }

const audio_tower_config *audio_tower_get_config(const audio_tower *t) { return &t->cfg; }

void audio_tower_weights(const audio_tower *t, audio_weights *w) {
    w->c1_w = t->c1_w, w->c1_b = t->c1_b, w->c2_w = t->c2_w, w->c2_b = t->c2_b, w->c3_w = t->c3_w, w->c3_b = t->c3_b;
    w->conv_out = t->conv_out;
    w->lnp_w = t->lnp_w, w->lnp_b = t->lnp_b, w->p1_w = t->p1_w, w->p1_b = t->p1_b, w->p2_w = t->p2_w, w->p2_b = t->p2_b;
    w->layers = t->layers;
}

/* ---- encode -------------------------------------------------------------------------------------------- */

/* Per-call work buffers, sized for the longest chunk, a batch of NB chunks in the conv stem and the largest group
 * of windows in the encoder. */
typedef struct {
    int nb;          /* chunks per conv batch */
    float *in;       /* conv2d1 input [NB, F, Lc] */
    float *col;      /* im2col [NB·f2·t2, C·9] (the largest) */
    float *y1, *y2, *y3; /* conv outputs, channel-last [NB, F_i, t_i, C] */
    float *flat;     /* [NB·t3, C·f3] conv_out input */
    float *h;        /* [G, d] tokens of the group */
    float *a, *q, *k, *v, *o; /* [G, d] */
    float *ff;       /* [G, max(ffn, d)] */
} aut_work;

static void work_free(aut_work *w) {
    float **p[] = {&w->in, &w->col, &w->y1, &w->y2, &w->y3, &w->flat, &w->h, &w->a, &w->q, &w->k, &w->v, &w->o, &w->ff};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        free(*p[i]);
        *p[i] = NULL;
    }
}

#define CONV_BATCH_FLOATS (8u << 20) /* im2col budget per conv batch (32 MB): 2 chunks of the real tower */

static omni_status work_alloc(aut_work *w, const audio_tower *t, int Lc, int G, int max_nb) {
    const size_t C = t->cfg.conv_ch, d = t->cfg.d_model;
    int t1 = conv_len(Lc), t2 = conv_len(t1), t3 = conv_len(t2);
    size_t col = (size_t)t->f1 * t1 * 9;
    if ((size_t)t->f2 * t2 * C * 9 > col) col = (size_t)t->f2 * t2 * C * 9;
    size_t ffw = (size_t)t->cfg.ffn > d ? (size_t)t->cfg.ffn : d;
    memset(w, 0, sizeof *w);
    int nb = (int)(CONV_BATCH_FLOATS / col);
    w->nb = nb < 1 ? 1 : nb > max_nb ? max_nb : nb;
    size_t B = (size_t)w->nb;
    w->in = malloc(B * t->cfg.n_mels * Lc * sizeof(float));
    w->col = malloc(B * col * sizeof(float));
    w->y1 = malloc(B * t->f1 * t1 * C * sizeof(float));
    w->y2 = malloc(B * t->f2 * t2 * C * sizeof(float));
    w->y3 = malloc(B * t->f3 * t3 * C * sizeof(float));
    w->flat = malloc(B * t3 * C * t->f3 * sizeof(float));
    float **g[] = {&w->h, &w->a, &w->q, &w->k, &w->v, &w->o};
    int ok = w->in && w->col && w->y1 && w->y2 && w->y3 && w->flat;
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) ok &= (*g[i] = malloc((size_t)G * d * sizeof(float))) != NULL;
    ok &= (w->ff = malloc((size_t)G * ffw * sizeof(float))) != NULL;
    if (!ok) {
        work_free(w);
        return omni_fail(OMNI_ERR_NOMEM, "audio tower: out of memory (group of %d tokens)", G);
    }
    return OMNI_OK;
}

/* 3x3 stride-2 pad-1 im2col of nb channel-last images (kernels/ops.h). */
static void im2col(float *col, const float *x, int nb, int H, int W, int C) { op_im2col_3x3s2(col, x, nb, H, W, C); }

/* Conv stem + conv_out + positions for chunks [c0, c0+nb) of L frames (the last one `tail` frames), each
 * zero-padded to Lc. Writes the chunks' valid token rows to h; returns the row count. */
static int chunk_stem(const audio_tower *t, aut_work *w, const float *mel, int64_t T, int64_t c0, int nb,
                      int64_t n_chunks, int tail, int Lc, float *h) {
    const int C = t->cfg.conv_ch, d = t->cfg.d_model, F = t->cfg.n_mels, L = 2 * t->cfg.n_window;
    int t1 = conv_len(Lc), t2 = conv_len(t1), t3 = conv_len(t2);
    /* conv2d1's input is single-channel [F, Lc]: channel-last == plain [F, Lc] (columns >= len are zero). */
    for (int b = 0; b < nb; b++) {
        int64_t start = (c0 + b) * L;
        int len = c0 + b == n_chunks - 1 ? tail : L;
        float *in = w->in + (size_t)b * F * Lc;
        for (int f = 0; f < F; f++)
            for (int j = 0; j < Lc; j++) in[(size_t)f * Lc + j] = j < len ? mel[(size_t)f * T + start + j] : 0.0f;
    }
    im2col(w->col, w->in, nb, F, Lc, 1);
    op_linear(w->y1, w->col, nb * t->f1 * t1, &t->c1_w, &t->c1_b);
    op_gelu_erf(w->y1, (int64_t)nb * t->f1 * t1 * C);
    im2col(w->col, w->y1, nb, t->f1, t1, C);
    op_linear(w->y2, w->col, nb * t->f2 * t2, &t->c2_w, &t->c2_b);
    op_gelu_erf(w->y2, (int64_t)nb * t->f2 * t2 * C);
    im2col(w->col, w->y2, nb, t->f2, t2, C);
    op_linear(w->y3, w->col, nb * t->f3 * t3, &t->c3_w, &t->c3_b);
    op_gelu_erf(w->y3, (int64_t)nb * t->f3 * t3 * C);
    /* [F3, t3, C] per chunk -> flat rows [valid, C·F3] with index c·F3 + f (torch permute(0,3,1,2).view). */
    int rows = 0;
    for (int b = 0; b < nb; b++) {
        int len = c0 + b == n_chunks - 1 ? tail : L;
        int valid = (int)audio_token_count(len, t->cfg.n_window);
        const float *y3 = w->y3 + (size_t)b * t->f3 * t3 * C;
        for (int p = 0; p < valid; p++, rows++)
            for (int c = 0; c < C; c++)
                for (int f = 0; f < t->f3; f++)
                    w->flat[((size_t)rows * C + c) * t->f3 + f] = y3[((size_t)f * t3 + p) * C + c];
    }
    op_linear(h, w->flat, rows, &t->conv_out, NULL);
    for (int b = 0, r = 0; b < nb; b++) { /* positions restart at 0 in every chunk */
        int len = c0 + b == n_chunks - 1 ? tail : L;
        int valid = (int)audio_token_count(len, t->cfg.n_window);
        for (int p = 0; p < valid; p++, r++) op_add(h + (size_t)r * d, t->pos + (size_t)p * d, d);
    }
    return rows;
}

/* One pre-LN encoder layer over n tokens whose attention windows are [0, win), [win, 2·win), ... */
static void encoder_layer(const audio_tower *t, const aut_layer *L, aut_work *w, int n, int win) {
    const int d = t->cfg.d_model, H = t->cfg.n_heads, D = d / H, ffn = t->cfg.ffn;
    op_layernorm(w->a, w->h, &L->ln1_w, &L->ln1_b, n, d, 1e-5f);
    op_linear(w->q, w->a, n, &L->q_w, &L->q_b);
    op_linear(w->k, w->a, n, &L->k_w, &L->k_b);
    op_linear(w->v, w->a, n, &L->v_w, &L->v_b);
    float scale = 1.0f / sqrtf((float)D);
    for (int s = 0; s < n; s += win) {
        int len = n - s < win ? n - s : win;
        size_t o = (size_t)s * d;
        op_attention(w->o + o, d, w->q + o, d, w->k + o, d, w->v + o, d, len, len, H, H, D, scale, -1);
    }
    op_linear(w->a, w->o, n, &L->o_w, &L->o_b);
    op_add(w->h, w->a, (int64_t)n * d);
    op_layernorm(w->a, w->h, &L->ln2_w, &L->ln2_b, n, d, 1e-5f);
    op_linear(w->ff, w->a, n, &L->fc1_w, &L->fc1_b);
    op_gelu_erf(w->ff, (int64_t)n * ffn);
    op_linear(w->a, w->ff, n, &L->fc2_w, &L->fc2_b);
    op_add(w->h, w->a, (int64_t)n * d);
}

/* ln_post -> proj1 -> GELU -> proj2 for n tokens into out [n, out_dim]. */
static void tower_head(const audio_tower *t, aut_work *w, int n, float *out) {
    const int d = t->cfg.d_model;
    op_layernorm(w->a, w->h, &t->lnp_w, &t->lnp_b, n, d, 1e-5f);
    op_linear(w->q, w->a, n, &t->p1_w, &t->p1_b);
    op_gelu_erf(w->q, (int64_t)n * d);
    op_linear(out, w->q, n, &t->p2_w, &t->p2_b);
}

int audio_chunk_frames(int64_t T, int n_window) {
    const int64_t L = 2 * (int64_t)n_window;
    return T <= 0 ? 0 : T >= L ? (int)L : (int)T;
}

omni_status audio_tower_encode(audio_tower *t, const float *mel, int64_t T, float *out) {
    return audio_tower_encode_batched(t, mel, T, 0, out);
}

omni_status audio_tower_encode_batched(audio_tower *t, const float *mel, int64_t T, int chunk_pad, float *out) {
    const audio_tower_config *c = &t->cfg;
    const int L = 2 * c->n_window;
    if (T <= 0) return omni_fail(OMNI_ERR_INPUT, "audio tower: no mel frames");
    const int64_t n_chunks = (T + L - 1) / L;
    const int tail = (int)(T % L ? T % L : L);
    int Lc = n_chunks > 1 ? L : tail; /* the longest chunk (of the batch): what every chunk is padded to */
    if (chunk_pad > Lc) Lc = chunk_pad < L ? chunk_pad : L;
    const int t_max = (int)audio_token_count(Lc, c->n_window);
    const int win = t_max * (c->n_window_infer / L); /* attention window in tokens (104 for Qwen3-Omni) */
    if (t_max > c->max_source_positions)
        return omni_fail(OMNI_ERR_MODEL, "audio tower: %d positions per chunk > max_source_positions %d", t_max,
                         c->max_source_positions);
    const int chunks_per_win = c->n_window_infer / L;
    int wins_per_group = GROUP_TOKENS / win > 0 ? GROUP_TOKENS / win : 1;
    const int64_t chunks_per_group = (int64_t)wins_per_group * chunks_per_win;
    aut_work w;
    omni_status st = work_alloc(&w, t, Lc, wins_per_group * win, (int)chunks_per_group);
    if (st) return st;
    int64_t row = 0;
    for (int64_t c0 = 0; c0 < n_chunks; c0 += chunks_per_group) {
        int64_t c1 = c0 + chunks_per_group < n_chunks ? c0 + chunks_per_group : n_chunks;
        int n = 0;
        for (int64_t cb = c0; cb < c1; cb += w.nb) {
            int nb = (int)(c1 - cb < w.nb ? c1 - cb : w.nb);
            n += chunk_stem(t, &w, mel, T, cb, nb, n_chunks, tail, Lc, w.h + (size_t)n * c->d_model);
        }
        for (int l = 0; l < c->n_layers; l++) {
            if (t->interrupt && *t->interrupt) { /* Ctrl+C: stop within one layer */
                work_free(&w);
                return omni_fail(OMNI_ERR_RUNTIME, "interrupted");
            }
            encoder_layer(t, &t->layers[l], &w, n, win);
        }
        tower_head(t, &w, n, out + (size_t)row * c->out_dim);
        row += n;
    }
    work_free(&w);
    if (row != audio_token_count(T, c->n_window))
        return omni_fail(OMNI_ERR_RUNTIME, "audio tower: produced %lld tokens, expected %lld", (long long)row,
                         (long long)audio_token_count(T, c->n_window));
    return OMNI_OK;
}
