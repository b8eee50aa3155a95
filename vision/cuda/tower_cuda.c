/* tower_cuda.c - the Qwen3-VL vision tower on the GPU in bf16 (vision_cuda.h), written against kernels/ops_cuda.h,
 * kernels/dev_layout.h and kvcache/kv_towers.h only (no CUDA types here).
 *
 * Forward over N patches of n images (image i: patches [off_i, off_i + N_i) in merge-block order, grid gh_i x gw_i;
 * D hidden, H heads of hd, I intermediate, M = 4D, O out_hidden; every buffer bf16 unless marked):
 *   x[N,D]    = pix[N,K] · patch_wᵀ + patch_b                      (Conv3d as a GEMM, one rounding)
 *   x        += bilinear pos_embed per image                       (fp32 taps, bf16(x + bf16(p)))
 *   cos/sin   = 2D RoPE tables [N, hd] f32 from (row, col)
 *   block:    xn = LN1(x); qkv[N,3D] = xn·Wqkvᵀ + b; RoPE (fp32 math) on the 2H q|k heads of each row;
 *             att = segment attention (kvc_tower_attn, one segment per image); x += att·Wprojᵀ + b;
 *             xn = LN2(x); x += fc2(gelu_tanh(fc1(xn))) in row chunks
 *   deepstack k after block deepstack_index[k]: LN over M of x viewed [N/4, M] -> fc1 -> gelu_erf -> fc2 -> out_k
 *   merger:   LN over D of x, viewed [N/4, M] -> fc1 -> gelu_erf -> fc2 -> out_0
 * The 2x2 merge is a view: the 4 patches of a merged token are consecutive rows. Every linear runs in row chunks of
 * at most row_chunk rows so that cuBLAS's fp32 scratch (biased bf16 linears) stays bounded. */
#include "vision/cuda/vision_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dev_layout.h"
#include "kernels/ops_cuda.h"
#include "kvcache/kv_towers.h"

#define LN_EPS 1e-6f
#define RANDOM_STD 0.02f

typedef struct {
    uint16_t *n1w, *n1b, *n2w, *n2b, *qkv_w, *qkv_b, *proj_w, *proj_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} vcb; /* a block's device weights */

typedef struct {
    uint16_t *nw, *nb, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} vcm; /* a merger's device weights */

struct vision_tower_cuda {
    vision_config cfg;
    vision_cuda_params p;
    int K, side, rows;    /* patch row length, pos-embed side, rows per GEMM pass */
    omni_cuda_ctx *ctx;
    void *stream;
    /* weights: one allocation */
    void *wbase;
    size_t wbytes;
    uint16_t *patch_w, *patch_b, *pos_embed; /* [D, K], [D], [side², D] */
    float *inv_freq;                         /* [hd/4] */
    vcb *blocks;                             /* host array [depth] of device pointers */
    vcm merger, ds[VISION_MAX_DEEPSTACK];
    /* workspace: one allocation */
    void *wsbase;
    size_t wsbytes;
    float *pix_f32;                     /* [rows, K] upload staging */
    uint16_t *pix, *x, *xn, *att, *qkv; /* [P, K], [P, D] x3, [P, 3D] */
    uint16_t *mlp;                      /* [rows, max(I, M)] */
    uint16_t *out;                      /* [1 + n_deepstack][P/4, O] */
    float *out_f32;                     /* [P/4, O] download staging */
    float *cos, *sin;                   /* [P, hd] */
    int32_t *row, *col, *cu;            /* [P], [P], [max_images + 1] */
    /* the uploaded call */
    int n_img, N, max_seg, ready;
    int *img_off, *img_gh, *img_gw; /* host [max_images] */
    int32_t *h_row, *h_col, *h_cu;  /* host staging of the coordinates and segments */
};

vision_cuda_params vision_cuda_default_params(void) {
    vision_cuda_params p = {.device = 0, .max_patches = 16384, .max_images = 64, .row_chunk = 8192};
    return p;
}

/* ---- layout: one walk assigns aligned offsets (and pointers when base is set; kernels/dev_layout.h) ------- */

#define TAKE16 OMNI_TAKE16

static void walk_weights(vision_tower_cuda *t, omni_layout *k) {
    const vision_config *c = &t->cfg;
    const size_t D = c->hidden, I = c->intermediate, M = 4 * D, O = c->out_hidden;
    t->patch_w = TAKE16(k, D * t->K), t->patch_b = TAKE16(k, D);
    t->pos_embed = TAKE16(k, (size_t)c->num_position_embeddings * D);
    t->inv_freq = (float *)omni_layout_take(k, sizeof(float) * (size_t)(c->head_dim / 4));
    for (int l = 0; l < c->depth; l++) {
        vcb *b = &t->blocks[l];
        b->n1w = TAKE16(k, D), b->n1b = TAKE16(k, D), b->n2w = TAKE16(k, D), b->n2b = TAKE16(k, D);
        b->qkv_w = TAKE16(k, 3 * D * D), b->qkv_b = TAKE16(k, 3 * D);
        b->proj_w = TAKE16(k, D * D), b->proj_b = TAKE16(k, D);
        b->fc1_w = TAKE16(k, I * D), b->fc1_b = TAKE16(k, I);
        b->fc2_w = TAKE16(k, D * I), b->fc2_b = TAKE16(k, D);
    }
    for (int m = 0; m <= c->n_deepstack; m++) {
        vcm *g = m == 0 ? &t->merger : &t->ds[m - 1];
        const size_t nd = m == 0 ? D : M;
        g->nw = TAKE16(k, nd), g->nb = TAKE16(k, nd);
        g->fc1_w = TAKE16(k, M * M), g->fc1_b = TAKE16(k, M);
        g->fc2_w = TAKE16(k, O * M), g->fc2_b = TAKE16(k, O);
    }
}

static void walk_workspace(vision_tower_cuda *t, omni_layout *k) {
    const vision_config *c = &t->cfg;
    const size_t P = (size_t)t->p.max_patches, D = c->hidden, I = c->intermediate, M = 4 * D, O = c->out_hidden;
    const size_t R = (size_t)t->rows, hd = c->head_dim;
    t->pix_f32 = (float *)omni_layout_take(k, sizeof(float) * R * t->K);
    t->pix = TAKE16(k, P * t->K);
    t->x = TAKE16(k, P * D), t->xn = TAKE16(k, P * D), t->att = TAKE16(k, P * D), t->qkv = TAKE16(k, P * 3 * D);
    t->mlp = TAKE16(k, R * (I > M ? I : M));
    t->out = TAKE16(k, (size_t)(1 + c->n_deepstack) * (P / 4) * O);
    t->out_f32 = (float *)omni_layout_take(k, sizeof(float) * (P / 4) * O);
    t->cos = (float *)omni_layout_take(k, sizeof(float) * P * hd), t->sin = (float *)omni_layout_take(k, sizeof(float) * P * hd);
    t->row = (int32_t *)omni_layout_take(k, 4 * P), t->col = (int32_t *)omni_layout_take(k, 4 * P);
    t->cu = (int32_t *)omni_layout_take(k, 4 * (size_t)(t->p.max_images + 1));
}

/* ---- init / free ----------------------------------------------------------------------------------------- */

void vision_tower_cuda_free(vision_tower_cuda *t) {
    if (!t) return;
    if (t->stream) omni_cuda_sync(t->stream);
    omni_cuda_free(t->wbase);
    omni_cuda_free(t->wsbase);
    omni_cuda_ctx_free(t->ctx);
    free(t->blocks);
    free(t->img_off), free(t->img_gh), free(t->img_gw);
    free(t->h_row), free(t->h_col), free(t->h_cu);
    free(t);
}

static omni_status check_params(const vision_config *c, const vision_cuda_params *p) {
    if (p->max_patches <= 0 || p->max_patches % 4 || p->max_images <= 0 || p->row_chunk <= 0)
        return omni_fail(OMNI_ERR_USAGE, "vision tower (GPU): max_patches %d (a positive multiple of 4), max_images "
                         "%d, row_chunk %d", p->max_patches, p->max_images, p->row_chunk);
    if (c->head_dim > 128 || c->head_dim % 2)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "vision tower (GPU): head_dim %d (even, <= 128)", c->head_dim);
    return OMNI_OK;
}

/* Context, host arrays, both device allocations (weights not filled). */
static omni_status tower_alloc(const vision_config *cfg, const vision_cuda_params *p, vision_tower_cuda **out) {
    *out = NULL;
    omni_status st = check_params(cfg, p);
    if (st) return st;
    vision_tower_cuda *t = calloc(1, sizeof *t);
    if (!t) return omni_fail(OMNI_ERR_NOMEM, "vision tower (GPU): out of host memory");
    t->cfg = *cfg, t->p = *p;
    t->K = cfg->in_channels * cfg->temporal_patch_size * cfg->patch_size * cfg->patch_size;
    t->side = (int)lround(sqrt((double)cfg->num_position_embeddings));
    t->rows = p->row_chunk < p->max_patches ? p->row_chunk : p->max_patches;
    const size_t P = (size_t)p->max_patches, NI = (size_t)p->max_images;
    t->blocks = calloc((size_t)cfg->depth, sizeof(vcb));
    t->img_off = malloc(sizeof(int) * NI), t->img_gh = malloc(sizeof(int) * NI), t->img_gw = malloc(sizeof(int) * NI);
    t->h_row = malloc(4 * P), t->h_col = malloc(4 * P), t->h_cu = malloc(4 * (NI + 1));
    if (!t->blocks || !t->img_off || !t->img_gh || !t->img_gw || !t->h_row || !t->h_col || !t->h_cu) {
        vision_tower_cuda_free(t);
        return omni_fail(OMNI_ERR_NOMEM, "vision tower (GPU): out of host memory");
    }
    omni_layout kw = {NULL, 0}, ks = {NULL, 0};
    walk_weights(t, &kw);
    walk_workspace(t, &ks);
    t->wbytes = kw.off, t->wsbytes = ks.off;
    const size_t D = cfg->hidden, M = 4 * D, maxn = (size_t)(3 * D > M ? 3 * D : M);
    const size_t maxn2 = maxn > (size_t)cfg->intermediate ? maxn : (size_t)cfg->intermediate;
    const size_t maxn3 = maxn2 > (size_t)cfg->out_hidden ? maxn2 : (size_t)cfg->out_hidden;
    if (!(st = omni_cuda_ctx_init(&t->ctx, p->device))) t->stream = omni_cuda_ctx_stream(t->ctx);
    if (!st) st = omni_cuda_ctx_reserve(t->ctx, (int64_t)t->rows * (int64_t)maxn3); /* biased-linear scratch */
    if (!st) st = omni_cuda_malloc_fit(&t->wbase, t->wbytes, "vision tower (GPU)", "weights");
    if (!st) st = omni_cuda_malloc_fit(&t->wsbase, t->wsbytes, "vision tower (GPU)", "workspace");
    if (st) {
        vision_tower_cuda_free(t);
        return st;
    }
    kw = (omni_layout){(char *)t->wbase, 0}, ks = (omni_layout){(char *)t->wsbase, 0};
    walk_weights(t, &kw);
    walk_workspace(t, &ks);
    *out = t;
    return OMNI_OK;
}

static omni_status upload_inv_freq(vision_tower_cuda *t) {
    float inv[64];
    if (t->cfg.head_dim / 4 > 64) return omni_fail(OMNI_ERR_UNSUPPORTED, "vision head_dim %d", t->cfg.head_dim);
    vision_rope_inv_freq(&t->cfg, inv);
    return omni_cuda_h2d(t->inv_freq, inv, sizeof(float) * (size_t)(t->cfg.head_dim / 4), t->stream);
}

/* Copy one checkpoint tensor of n values to dst as bf16. */
static omni_status up(vision_tower_cuda *t, uint16_t *dst, const omni_tensor *src, int64_t n, const char *name) {
    if (omni_tensor_numel(src) != n)
        return omni_fail(OMNI_ERR_MODEL, "vision tower (GPU): %s has %lld values, expected %lld", name,
                         (long long)omni_tensor_numel(src), (long long)n);
    return omni_cuda_upload_bf16(dst, src, t->stream);
}

static omni_status upload_merger(vision_tower_cuda *t, const vcm *g, const vision_merger_weights *w, int64_t nd) {
    const int64_t M = 4 * (int64_t)t->cfg.hidden, O = t->cfg.out_hidden;
    omni_status st;
    if ((st = up(t, g->nw, &w->nw, nd, "merger norm")) || (st = up(t, g->nb, &w->nb, nd, "merger norm bias")) ||
        (st = up(t, g->fc1_w, &w->fc1_w, M * M, "merger fc1")) || (st = up(t, g->fc1_b, &w->fc1_b, M, "merger fc1 bias")) ||
        (st = up(t, g->fc2_w, &w->fc2_w, O * M, "merger fc2")) || (st = up(t, g->fc2_b, &w->fc2_b, O, "merger fc2 bias")))
        return st;
    return OMNI_OK;
}

static omni_status upload_weights(vision_tower_cuda *t, const vision_weights *w) {
    const vision_config *c = &t->cfg;
    const int64_t D = c->hidden, I = c->intermediate;
    omni_status st;
    if ((st = up(t, t->patch_w, &w->patch_w, D * t->K, "patch_embed")) ||
        (st = up(t, t->patch_b, &w->patch_b, D, "patch_embed bias")) ||
        (st = up(t, t->pos_embed, &w->pos_embed, (int64_t)c->num_position_embeddings * D, "pos_embed")))
        return st;
    for (int l = 0; l < c->depth; l++) {
        const vcb *b = &t->blocks[l];
        const vision_block_weights *s = &w->blocks[l];
        if ((st = up(t, b->n1w, &s->n1w, D, "norm1")) || (st = up(t, b->n1b, &s->n1b, D, "norm1 bias")) ||
            (st = up(t, b->n2w, &s->n2w, D, "norm2")) || (st = up(t, b->n2b, &s->n2b, D, "norm2 bias")) ||
            (st = up(t, b->qkv_w, &s->qkv_w, 3 * D * D, "qkv")) || (st = up(t, b->qkv_b, &s->qkv_b, 3 * D, "qkv bias")) ||
            (st = up(t, b->proj_w, &s->proj_w, D * D, "proj")) || (st = up(t, b->proj_b, &s->proj_b, D, "proj bias")) ||
            (st = up(t, b->fc1_w, &s->fc1_w, I * D, "fc1")) || (st = up(t, b->fc1_b, &s->fc1_b, I, "fc1 bias")) ||
            (st = up(t, b->fc2_w, &s->fc2_w, D * I, "fc2")) || (st = up(t, b->fc2_b, &s->fc2_b, D, "fc2 bias")))
            return st;
    }
    if ((st = upload_merger(t, &t->merger, &w->merger, D))) return st;
    for (int k = 0; k < c->n_deepstack; k++)
        if ((st = upload_merger(t, &t->ds[k], &w->deepstack[k], 4 * D))) return st;
    return OMNI_OK;
}

omni_status vision_tower_cuda_init(const vision_tower *cpu, const vision_cuda_params *p, vision_tower_cuda **out) {
    vision_cuda_params dp = vision_cuda_default_params();
    omni_status st = tower_alloc(vision_tower_config(cpu), p ? p : &dp, out);
    if (st) return st;
    vision_weights w;
    vision_tower_weights(cpu, &w);
    if (!(st = upload_weights(*out, &w))) st = upload_inv_freq(*out);
    if (st) {
        vision_tower_cuda_free(*out);
        *out = NULL;
    }
    return st;
}

/* Fill n values with uniform noise of standard deviation std around mean (std 0: the constant). */
static omni_status fill(vision_tower_cuda *t, uint16_t *p, size_t n, uint64_t seed, float mean, float std) {
    return omni_cuda_fill_std_bf16(p, n, seed, mean, std, t->stream);
}

static omni_status random_merger(vision_tower_cuda *t, const vcm *g, size_t nd, uint64_t *k) {
    const size_t M = 4 * (size_t)t->cfg.hidden, O = t->cfg.out_hidden;
    omni_status st;
    if ((st = fill(t, g->nw, nd, (*k)++, 1.f, 0.f)) || (st = fill(t, g->nb, nd, (*k)++, 0.f, 0.f)) ||
        (st = fill(t, g->fc1_w, M * M, (*k)++, 0.f, RANDOM_STD)) || (st = fill(t, g->fc1_b, M, (*k)++, 0.f, RANDOM_STD)) ||
        (st = fill(t, g->fc2_w, O * M, (*k)++, 0.f, RANDOM_STD)) || (st = fill(t, g->fc2_b, O, (*k)++, 0.f, RANDOM_STD)))
        return st;
    return OMNI_OK;
}

static omni_status random_weights(vision_tower_cuda *t, uint64_t seed) {
    const vision_config *c = &t->cfg;
    const size_t D = c->hidden, I = c->intermediate;
    uint64_t k = seed * 1000003u;
    omni_status st;
    if ((st = fill(t, t->patch_w, D * t->K, k++, 0.f, RANDOM_STD)) || (st = fill(t, t->patch_b, D, k++, 0.f, RANDOM_STD)) ||
        (st = fill(t, t->pos_embed, (size_t)c->num_position_embeddings * D, k++, 0.f, RANDOM_STD)))
        return st;
    for (int l = 0; l < c->depth; l++) {
        const vcb *b = &t->blocks[l];
        if ((st = fill(t, b->n1w, D, k++, 1.f, 0.f)) || (st = fill(t, b->n1b, D, k++, 0.f, 0.f)) ||
            (st = fill(t, b->n2w, D, k++, 1.f, 0.f)) || (st = fill(t, b->n2b, D, k++, 0.f, 0.f)) ||
            (st = fill(t, b->qkv_w, 3 * D * D, k++, 0.f, RANDOM_STD)) ||
            (st = fill(t, b->qkv_b, 3 * D, k++, 0.f, RANDOM_STD)) ||
            (st = fill(t, b->proj_w, D * D, k++, 0.f, RANDOM_STD)) || (st = fill(t, b->proj_b, D, k++, 0.f, RANDOM_STD)) ||
            (st = fill(t, b->fc1_w, I * D, k++, 0.f, RANDOM_STD)) || (st = fill(t, b->fc1_b, I, k++, 0.f, RANDOM_STD)) ||
            (st = fill(t, b->fc2_w, D * I, k++, 0.f, RANDOM_STD)) || (st = fill(t, b->fc2_b, D, k++, 0.f, RANDOM_STD)))
            return st;
    }
    if ((st = random_merger(t, &t->merger, D, &k))) return st;
    for (int m = 0; m < c->n_deepstack; m++)
        if ((st = random_merger(t, &t->ds[m], 4 * D, &k))) return st;
    return omni_cuda_sync(t->stream);
}

omni_status vision_tower_cuda_init_random(const vision_config *cfg, uint64_t seed, const vision_cuda_params *p,
                                          vision_tower_cuda **out) {
    vision_cuda_params dp = vision_cuda_default_params();
    omni_status st = tower_alloc(cfg, p ? p : &dp, out);
    if (st) return st;
    if (!(st = random_weights(*out, seed))) st = upload_inv_freq(*out);
    if (st) {
        vision_tower_cuda_free(*out);
        *out = NULL;
        return st;
    }
    fprintf(stderr, "vision tower (GPU): random bf16 weights made on the device (seed %llu, %.1f MiB)\n",
            (unsigned long long)seed, (*out)->wbytes / 1048576.0);
    return OMNI_OK;
}

const vision_config *vision_tower_cuda_config(const vision_tower_cuda *t) { return &t->cfg; }
size_t vision_tower_cuda_weight_bytes(const vision_tower_cuda *t) { return t->wbytes; }
size_t vision_tower_cuda_workspace_bytes(const vision_tower_cuda *t) { return t->wsbytes; }
void *vision_tower_cuda_stream(const vision_tower_cuda *t) { return t->stream; }

/* ---- upload ---------------------------------------------------------------------------------------------- */

static omni_status check_images(const vision_tower_cuda *t, const vision_patches *pp, int n) {
    if (n <= 0 || n > t->p.max_images)
        return omni_fail(OMNI_ERR_INPUT, "vision tower (GPU): %d images in one call (1..%d)", n, t->p.max_images);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const vision_patches *q = &pp[i];
        if (q->patch_dim != t->K)
            return omni_fail(OMNI_ERR_INPUT, "image %d: pixel_values have %d columns, the tower expects %d", i,
                             q->patch_dim, t->K);
        if (q->grid_t != 1)
            return omni_fail(OMNI_ERR_UNSUPPORTED, "image %d: video input (grid_t %d) is not supported", i, q->grid_t);
        if (q->grid_h <= 0 || q->grid_w <= 0 || q->grid_h % 2 || q->grid_w % 2 || q->n_patches != q->grid_h * q->grid_w)
            return omni_fail(OMNI_ERR_INPUT, "image %d: bad patch grid %dx%d for %d patches", i, q->grid_h, q->grid_w,
                             q->n_patches);
        total += q->n_patches;
    }
    if (total > t->p.max_patches)
        return omni_fail(OMNI_ERR_INPUT, "vision tower (GPU): %lld patches in one call, the workspace holds %d",
                         (long long)total, t->p.max_patches);
    return OMNI_OK;
}

/* Pixels of image i (f32 on the host) -> bf16 rows [off, off + N_i) of pix, through the f32 staging rows. */
static omni_status upload_pixels(vision_tower_cuda *t, const vision_patches *q, int off) {
    omni_status st = OMNI_OK;
    for (int r0 = 0; r0 < q->n_patches && !st; r0 += t->rows) {
        const int64_t m = (int64_t)(q->n_patches - r0 < t->rows ? q->n_patches - r0 : t->rows) * t->K;
        /* h2d returns when copied; the conversion is ordered before the next copy on the same stream */
        st = omni_cuda_h2d(t->pix_f32, q->pixels + (int64_t)r0 * t->K, sizeof(float) * (size_t)m, t->stream);
        if (!st) st = omni_cuda_f32_to_bf16(t->pix + (int64_t)(off + r0) * t->K, t->pix_f32, m, t->stream);
    }
    return st;
}

omni_status vision_tower_cuda_upload(vision_tower_cuda *t, const vision_patches *pp, int n) {
    t->ready = 0;
    omni_status st = check_images(t, pp, n);
    if (st) return st;
    int off = 0, max_seg = 0;
    for (int i = 0; i < n; i++) {
        t->img_off[i] = off, t->img_gh[i] = pp[i].grid_h, t->img_gw[i] = pp[i].grid_w;
        t->h_cu[i] = off;
        vision_patch_coords(1, pp[i].grid_h, pp[i].grid_w, t->h_row + off, t->h_col + off);
        if (pp[i].n_patches > max_seg) max_seg = pp[i].n_patches;
        off += pp[i].n_patches;
    }
    t->h_cu[n] = off;
    t->n_img = n, t->N = off, t->max_seg = max_seg;
    for (int i = 0; i < n && !st; i++) st = upload_pixels(t, &pp[i], t->img_off[i]);
    if (!st) st = omni_cuda_h2d(t->row, t->h_row, 4 * (size_t)off, t->stream);
    if (!st) st = omni_cuda_h2d(t->col, t->h_col, 4 * (size_t)off, t->stream);
    if (!st) st = omni_cuda_h2d(t->cu, t->h_cu, 4 * (size_t)(n + 1), t->stream);
    t->ready = !st;
    return st;
}

/* ---- forward --------------------------------------------------------------------------------------------- */

/* y[M, N] = x[M, K]·Wᵀ + b in passes of at most t->rows rows. */
static omni_status lin(vision_tower_cuda *t, uint16_t *y, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                       int M, int N, int K) {
    omni_status st = OMNI_OK;
    for (int r0 = 0; r0 < M && !st; r0 += t->rows) {
        const int m = M - r0 < t->rows ? M - r0 : t->rows;
        st = omni_cuda_linear(t->ctx, y + (int64_t)r0 * N, OMNI_BF16, x + (int64_t)r0 * K, w, b, m, N, K);
    }
    return st;
}

/* y = act(x·W1ᵀ + b1)·W2ᵀ + b2 over M rows in passes of t->rows rows (the intermediate [rows, N1] in t->mlp). */
static omni_status mlp(vision_tower_cuda *t, uint16_t *y, const uint16_t *x, const uint16_t *w1, const uint16_t *b1,
                       const uint16_t *w2, const uint16_t *b2, int M, int K, int N1, int N2, int tanh_act) {
    omni_status st = OMNI_OK;
    for (int r0 = 0; r0 < M && !st; r0 += t->rows) {
        const int m = M - r0 < t->rows ? M - r0 : t->rows;
        st = omni_cuda_linear(t->ctx, t->mlp, OMNI_BF16, x + (int64_t)r0 * K, w1, b1, m, N1, K);
        if (!st)
            st = tanh_act ? omni_cuda_gelu_tanh_bf16(t->mlp, t->mlp, (int64_t)m * N1, t->stream)
                          : omni_cuda_gelu_erf_bf16(t->mlp, t->mlp, (int64_t)m * N1, t->stream);
        if (!st) st = omni_cuda_linear(t->ctx, y + (int64_t)r0 * N2, OMNI_BF16, t->mlp, w2, b2, m, N2, N1);
    }
    return st;
}

/* att [N, D] = per-image segment attention over the rotated qkv rows. */
static omni_status attention(vision_tower_cuda *t) {
    const int H = t->cfg.n_heads, hd = t->cfg.head_dim, D = t->cfg.hidden;
    return kvc_tower_attn(H, hd, t->cu, t->n_img, t->max_seg, t->qkv, t->qkv + D, t->qkv + 2 * D, 3 * D, t->att, D,
                          1.0f / sqrtf((float)hd), t->stream);
}

static omni_status run_block(vision_tower_cuda *t, const vcb *b) {
    const vision_config *c = &t->cfg;
    const int N = t->N, D = c->hidden, I = c->intermediate;
    const int64_t nd = (int64_t)N * D;
    omni_status st;
    if ((st = omni_cuda_layernorm_bf16(t->xn, t->x, b->n1w, b->n1b, N, D, LN_EPS, t->stream)) ||
        (st = lin(t, t->qkv, t->xn, b->qkv_w, b->qkv_b, N, 3 * D, D)) ||
        (st = omni_cuda_rope_neox_f32_bf16(t->qkv, N, 2 * c->n_heads, c->head_dim, 3 * D, t->cos, t->sin, t->stream)) ||
        (st = attention(t)) || (st = lin(t, t->xn, t->att, b->proj_w, b->proj_b, N, D, D)) ||
        (st = omni_cuda_add_bf16(t->x, t->x, t->xn, nd, t->stream)) ||
        (st = omni_cuda_layernorm_bf16(t->xn, t->x, b->n2w, b->n2b, N, D, LN_EPS, t->stream)) ||
        (st = mlp(t, t->att, t->xn, b->fc1_w, b->fc1_b, b->fc2_w, b->fc2_b, N, D, I, D, c->gelu_tanh)) ||
        (st = omni_cuda_add_bf16(t->x, t->x, t->att, nd, t->stream)))
        return st;
    return OMNI_OK;
}

/* Merger m (0: main, LayerNorm over D before the 2x2 view; k + 1: deepstack k, LayerNorm over M after it) into
 * output slot m: [N/4, O]. */
static omni_status run_merger(vision_tower_cuda *t, int m) {
    const vcm *g = m == 0 ? &t->merger : &t->ds[m - 1];
    const int D = t->cfg.hidden, M = 4 * D, O = t->cfg.out_hidden, n4 = t->N / 4;
    uint16_t *out = t->out + (size_t)m * (t->p.max_patches / 4) * O;
    omni_status st = m == 0 ? omni_cuda_layernorm_bf16(t->xn, t->x, g->nw, g->nb, t->N, D, LN_EPS, t->stream)
                            : omni_cuda_layernorm_bf16(t->xn, t->x, g->nw, g->nb, n4, M, LN_EPS, t->stream);
    if (!st) st = mlp(t, out, t->xn, g->fc1_w, g->fc1_b, g->fc2_w, g->fc2_b, n4, M, M, O, 0);
    return st;
}

omni_status vision_tower_cuda_run(vision_tower_cuda *t) {
    if (!t->ready) return omni_fail(OMNI_ERR_USAGE, "vision tower (GPU): run before a successful upload");
    const vision_config *c = &t->cfg;
    const int N = t->N, D = c->hidden;
    omni_status st = lin(t, t->x, t->pix, t->patch_w, t->patch_b, N, D, t->K);
    for (int i = 0; i < t->n_img && !st; i++) {
        const int off = t->img_off[i], n = t->img_gh[i] * t->img_gw[i];
        st = omni_cuda_pos_embed_bilinear_bf16(t->x + (int64_t)off * D, t->pos_embed, t->side, t->row + off,
                                               t->col + off, n, D, t->img_gh[i], t->img_gw[i], t->stream);
    }
    if (!st) st = omni_cuda_rope2d_tables_f32(t->cos, t->sin, t->row, t->col, N, c->head_dim, t->inv_freq, t->stream);
    for (int l = 0; l < c->depth && !st; l++) {
        st = run_block(t, &t->blocks[l]);
        for (int k = 0; k < c->n_deepstack && !st; k++)
            if (c->deepstack_index[k] == l) st = run_merger(t, k + 1);
    }
    if (!st) st = run_merger(t, 0);
    return st;
}

/* ---- download -------------------------------------------------------------------------------------------- */

static omni_status outputs_alloc(const vision_tower_cuda *t, vision_output *out) {
    const vision_config *c = &t->cfg;
    for (int i = 0; i < t->n_img; i++) {
        vision_output *o = &out[i];
        memset(o, 0, sizeof *o);
        o->grid_t = 1, o->grid_h = t->img_gh[i], o->grid_w = t->img_gw[i];
        o->n_tokens = o->grid_h * o->grid_w / 4, o->out_hidden = c->out_hidden, o->n_deepstack = c->n_deepstack;
        const size_t n = (size_t)o->n_tokens * o->out_hidden;
        int ok = (o->embd = malloc(sizeof(float) * n)) != NULL;
        for (int k = 0; k < c->n_deepstack; k++) ok = ok && (o->deepstack[k] = malloc(sizeof(float) * n)) != NULL;
        if (!ok) {
            for (int j = 0; j <= i; j++) vision_output_free(&out[j]);
            return omni_fail(OMNI_ERR_NOMEM, "out of memory for %d visual tokens", o->n_tokens);
        }
    }
    return OMNI_OK;
}

omni_status vision_tower_cuda_download(vision_tower_cuda *t, vision_output *out) {
    if (!t->ready) return omni_fail(OMNI_ERR_USAGE, "vision tower (GPU): download before a successful upload");
    omni_status st = omni_cuda_sync(t->stream); /* a fault of the forward shows up here */
    if (st) return st;
    if ((st = outputs_alloc(t, out))) return st;
    const int O = t->cfg.out_hidden, n4 = t->N / 4;
    for (int m = 0; m <= t->cfg.n_deepstack && !st; m++) {
        st = omni_cuda_bf16_to_f32(t->out_f32, t->out + (size_t)m * (t->p.max_patches / 4) * O, (int64_t)n4 * O,
                                   t->stream);
        for (int i = 0; i < t->n_img && !st; i++) {
            float *dst = m == 0 ? out[i].embd : out[i].deepstack[m - 1];
            st = omni_cuda_d2h(dst, t->out_f32 + (size_t)(t->img_off[i] / 4) * O,
                               sizeof(float) * (size_t)out[i].n_tokens * O, t->stream);
        }
    }
    if (st)
        for (int i = 0; i < t->n_img; i++) vision_output_free(&out[i]);
    return st;
}

omni_status vision_tower_cuda_encode(vision_tower_cuda *t, const vision_patches *pp, int n, vision_output *out) {
    for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
    const double t0 = omni_time_ms();
    omni_status st = vision_tower_cuda_upload(t, pp, n);
    if (!st) st = vision_tower_cuda_run(t);
    if (!st) st = vision_tower_cuda_download(t, out);
    const double ms = omni_time_ms() - t0;
    for (int i = 0; i < n && !st; i++) out[i].encode_ms = ms;
    return st;
}
