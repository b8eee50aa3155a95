/* tower.c - the Qwen3-VL vision tower (also the Qwen3-Omni thinker's), CPU reference in f32.
 *
 * Per image (N patches in merge-block order, D = hidden, H heads of hd = D/H, I = intermediate, M = 4D,
 * O = out_hidden):
 *   x[N,D]  = pixel_values[N,1536] · patch_w[D,1536]ᵀ + b          (Conv3d k = stride = (2,16,16) as a matmul)
 *   x      += bilinear(pos_embed[side², D]) at (row, col), align_corners=True, fp32 weights (transformers v5)
 *   blocks:  x += proj(attn(rope2d(qkv(LN1(x)))));  x += fc2(gelu_tanh(fc1(LN2(x))))  (LayerNorm eps 1e-6,
 *            bidirectional attention over the image's patches, 2D RoPE: [row freqs, col freqs] x2, theta 10000)
 *   deepstack k (after block deepstack_index[k]): LN_M(view(x,[N/4,M])) -> fc1 -> gelu_erf -> fc2 -> [N/4,O]
 *   merger:  view(LN_D(x), [N/4,M]) -> fc1 -> gelu_erf -> fc2 -> [N/4,O]
 * Weight names: `model.visual.` (Qwen3-VL: merger.norm/linear_fc1/linear_fc2, deepstack_merger_list.K) or
 * `thinker.visual.` (Qwen3-Omni: merger.ln_q/mlp.0/mlp.2, merger_list.K). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/json.h"
#include "kernels/ops.h"
#include "vision/vision.h"

#define LN_EPS 1e-6f

typedef vision_block_weights vis_block;
typedef vision_merger_weights vis_merger;

struct vision_tower {
    vision_config cfg;
    omni_tensor patch_w, patch_b; /* [D, 3, 2, 16, 16], [D] */
    omni_tensor pos_embed_t;      /* [num_position_embeddings, D] as stored */
    float *pos_embed;             /* [num_position_embeddings, D] f32 copy */
    int side;                     /* sqrt(num_position_embeddings) */
    vis_block *blocks;            /* [depth] */
    vis_merger merger, ds[VISION_MAX_DEEPSTACK];
    float *inv_freq;              /* [hd/4] */
    volatile const int *interrupt; /* checked between blocks (vision_tower_set_interrupt) */
};

/* ---- config ------------------------------------------------------------------------------------------------ */

#define TRY(x)                                                                                                     \
    do {                                                                                                           \
        omni_status st_ = (x);                                                                                     \
        if (st_) return st_;                                                                                       \
    } while (0)

/* Integer sizes (required ones first), activation, rope theta, DeepStack indexes: type- and range-checked. */
static omni_status read_sizes(const omni_json_ctx *j, const cJSON *vc, vision_config *c) {
    const int R = OMNI_JSON_REQUIRED, O = OMNI_JSON_OPTIONAL;
    TRY(omni_json_int(j, vc, "depth", R, 1, 256, &c->depth));
    TRY(omni_json_int(j, vc, "hidden_size", R, 1, 1 << 16, &c->hidden));
    TRY(omni_json_int(j, vc, "num_heads", R, 1, 1024, &c->n_heads));
    TRY(omni_json_int(j, vc, "intermediate_size", R, 1, 1 << 20, &c->intermediate));
    TRY(omni_json_int(j, vc, "out_hidden_size", R, 1, 1 << 16, &c->out_hidden));
    TRY(omni_json_int(j, vc, "patch_size", O, 1, 64, &c->patch_size));
    TRY(omni_json_int(j, vc, "temporal_patch_size", O, 1, 8, &c->temporal_patch_size));
    TRY(omni_json_int(j, vc, "spatial_merge_size", O, 2, 2, &c->merge_size));
    TRY(omni_json_int(j, vc, "in_channels", O, 3, 3, &c->in_channels));
    return omni_json_int(j, vc, "num_position_embeddings", O, 1, 1 << 20, &c->num_position_embeddings);
}

omni_status vision_config_from_json(const cJSON *vc, const char *where, vision_config *c) {
    memset(c, 0, sizeof(*c));
    omni_json_ctx j = {"config.json", where ? where : "vision_config", OMNI_ERR_MODEL};
    if (!cJSON_IsObject(vc)) return omni_fail(OMNI_ERR_MODEL, "config.json: no vision_config (not a vision model?)");
    c->patch_size = 16, c->temporal_patch_size = 2, c->merge_size = 2, c->in_channels = 3;
    c->num_position_embeddings = 2304;
    TRY(read_sizes(&j, vc, c));
    const char *act = "gelu_pytorch_tanh";
    TRY(omni_json_string(&j, vc, "hidden_act", OMNI_JSON_OPTIONAL, &act));
    c->gelu_tanh = strcmp(act, "gelu") != 0; /* gelu_new is the same tanh formula as gelu_pytorch_tanh */
    if (strcmp(act, "gelu") && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_new"))
        return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: %s.hidden_act '%s' is not supported (gelu, "
                         "gelu_pytorch_tanh or gelu_new)", j.path, act);
    c->rope_theta = 10000.0f;
    const cJSON *rp = NULL;
    TRY(omni_json_object(&j, vc, "rope_parameters", OMNI_JSON_OPTIONAL, &rp));
    omni_json_ctx jr = {"config.json", "vision_config.rope_parameters", OMNI_ERR_MODEL};
    TRY(omni_json_float(rp ? &jr : &j, rp ? rp : vc, "rope_theta", OMNI_JSON_OPTIONAL, 1.0, 1e12, &c->rope_theta));
    TRY(omni_json_ints(&j, vc, "deepstack_visual_indexes", OMNI_JSON_OPTIONAL, 0, VISION_MAX_DEEPSTACK, 0,
                       c->depth - 1, c->deepstack_index, &c->n_deepstack));
    for (int k = 1; k < c->n_deepstack; k++) /* transformers pairs features with layers in layer order, once each */
        if (c->deepstack_index[k] <= c->deepstack_index[k - 1])
            return omni_fail(OMNI_ERR_UNSUPPORTED, "config.json: %s.deepstack_visual_indexes must be increasing "
                             "(%d after %d)", j.path, c->deepstack_index[k], c->deepstack_index[k - 1]);
    if (c->hidden % c->n_heads)
        return omni_fail(OMNI_ERR_MODEL, "config.json: vision_config.hidden_size %d is not a multiple of num_heads %d",
                         c->hidden, c->n_heads);
    c->head_dim = c->hidden / c->n_heads;
    if (c->head_dim % 4)
        return omni_fail(OMNI_ERR_UNSUPPORTED, "vision head_dim %d is not a multiple of 4", c->head_dim);
    return OMNI_OK;
}

omni_status vision_config_read(const char *model_dir, vision_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    cJSON *root = NULL;
    omni_status st = omni_json_load(path, OMNI_ERR_MODEL, &root);
    if (st) return st;
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    const char *where = "vision_config";
    if (!vc) {
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinker_config");
        vc = cJSON_GetObjectItemCaseSensitive(th, "vision_config");
        where = "thinker_config.vision_config";
    }
    st = vision_config_from_json(vc, where, c);
    cJSON_Delete(root);
    return st;
}

/* ---- weights ----------------------------------------------------------------------------------------------- */

static omni_status get1(const omni_ckpt *ck, omni_tensor *t, int64_t n, const char *pfx, const char *name) {
    return omni_ckpt_getf(ck, t, 1, &n, "%s%s", pfx, name);
}

static omni_status get2(const omni_ckpt *ck, omni_tensor *t, int64_t r, int64_t c, const char *pfx,
                        const char *name) {
    int64_t s[2] = {r, c};
    return omni_ckpt_getf(ck, t, 2, s, "%s%s", pfx, name);
}

static omni_status load_block(const omni_ckpt *ck, const char *vp, int i, const vision_config *c, vis_block *b) {
    char p[256];
    const int64_t D = c->hidden, I = c->intermediate;
    snprintf(p, sizeof p, "%sblocks.%d.", vp, i);
    omni_status st;
    if ((st = get1(ck, &b->n1w, D, p, "norm1.weight")) || (st = get1(ck, &b->n1b, D, p, "norm1.bias")) ||
        (st = get1(ck, &b->n2w, D, p, "norm2.weight")) || (st = get1(ck, &b->n2b, D, p, "norm2.bias")) ||
        (st = get2(ck, &b->qkv_w, 3 * D, D, p, "attn.qkv.weight")) ||
        (st = get1(ck, &b->qkv_b, 3 * D, p, "attn.qkv.bias")) ||
        (st = get2(ck, &b->proj_w, D, D, p, "attn.proj.weight")) || (st = get1(ck, &b->proj_b, D, p, "attn.proj.bias")) ||
        (st = get2(ck, &b->fc1_w, I, D, p, "mlp.linear_fc1.weight")) ||
        (st = get1(ck, &b->fc1_b, I, p, "mlp.linear_fc1.bias")) ||
        (st = get2(ck, &b->fc2_w, D, I, p, "mlp.linear_fc2.weight")) ||
        (st = get1(ck, &b->fc2_b, D, p, "mlp.linear_fc2.bias")))
        return st;
    return OMNI_OK;
}

/* Merger weights: Qwen3-VL names (norm, linear_fc1, linear_fc2) or Qwen3-Omni names (ln_q, mlp.0, mlp.2). */
static omni_status load_merger(const omni_ckpt *ck, const char *p, int64_t norm_dim, const vision_config *c,
                               int omni_names, vis_merger *m) {
    const int64_t M = 4 * (int64_t)c->hidden, O = c->out_hidden;
    const char *nw = omni_names ? "ln_q.weight" : "norm.weight", *nb = omni_names ? "ln_q.bias" : "norm.bias";
    const char *w1 = omni_names ? "mlp.0.weight" : "linear_fc1.weight", *b1 = omni_names ? "mlp.0.bias" : "linear_fc1.bias";
    const char *w2 = omni_names ? "mlp.2.weight" : "linear_fc2.weight", *b2 = omni_names ? "mlp.2.bias" : "linear_fc2.bias";
    omni_status st;
    if ((st = get1(ck, &m->nw, norm_dim, p, nw)) || (st = get1(ck, &m->nb, norm_dim, p, nb)) ||
        (st = get2(ck, &m->fc1_w, M, M, p, w1)) || (st = get1(ck, &m->fc1_b, M, p, b1)) ||
        (st = get2(ck, &m->fc2_w, O, M, p, w2)) || (st = get1(ck, &m->fc2_b, O, p, b2)))
        return st;
    return OMNI_OK;
}

static omni_status find_prefix(const omni_ckpt *ck, char *vp, size_t n, int *omni_names) {
    static const char *prefixes[] = {"model.visual.", "thinker.visual.", "visual."};
    for (int i = 0; i < 3; i++) {
        char name[256];
        snprintf(name, sizeof name, "%spatch_embed.proj.weight", prefixes[i]);
        if (!omni_ckpt_find(ck, name)) continue;
        snprintf(vp, n, "%s", prefixes[i]);
        snprintf(name, sizeof name, "%smerger.ln_q.weight", prefixes[i]);
        *omni_names = omni_ckpt_find(ck, name) != NULL;
        return OMNI_OK;
    }
    return omni_fail(OMNI_ERR_MODEL, "checkpoint has no vision tower (no model.visual./thinker.visual. tensors)");
}

static omni_status load_weights(vision_tower *t, const omni_ckpt *ck) {
    const vision_config *c = &t->cfg;
    char vp[64], p[256];
    int omni_names = 0;
    omni_status st = find_prefix(ck, vp, sizeof vp, &omni_names);
    if (st) return st;
    const int64_t D = c->hidden, P = c->patch_size;
    int64_t pw[5] = {D, c->in_channels, c->temporal_patch_size, P, P};
    if ((st = omni_ckpt_getf(ck, &t->patch_w, 5, pw, "%spatch_embed.proj.weight", vp)) ||
        (st = get1(ck, &t->patch_b, D, vp, "patch_embed.proj.bias")))
        return st;
    omni_tensor *pe = &t->pos_embed_t;
    if ((st = get2(ck, pe, c->num_position_embeddings, D, vp, "pos_embed.weight"))) return st;
    t->side = (int)lround(sqrt((double)c->num_position_embeddings));
    if (t->side * t->side != c->num_position_embeddings)
        return omni_fail(OMNI_ERR_MODEL, "num_position_embeddings %d is not a square", c->num_position_embeddings);
    t->pos_embed = malloc(sizeof(float) * (size_t)c->num_position_embeddings * D);
    t->blocks = calloc((size_t)c->depth, sizeof(vis_block));
    if (!t->pos_embed || !t->blocks) return omni_fail(OMNI_ERR_NOMEM, "out of memory loading the vision tower");
    omni_to_f32(t->pos_embed, pe->data, pe->dtype, (int64_t)c->num_position_embeddings * D);
    for (int i = 0; i < c->depth; i++)
        if ((st = load_block(ck, vp, i, c, &t->blocks[i]))) return st;
    snprintf(p, sizeof p, "%smerger.", vp);
    if ((st = load_merger(ck, p, D, c, omni_names, &t->merger))) return st;
    for (int k = 0; k < c->n_deepstack; k++) {
        snprintf(p, sizeof p, "%s%s.%d.", vp, omni_names ? "merger_list" : "deepstack_merger_list", k);
        if ((st = load_merger(ck, p, 4 * D, c, omni_names, &t->ds[k]))) return st;
    }
    if ((st = omni_ckpt_check_unused(ck, "vision_config.depth", "%sblocks.%d.", vp, c->depth))) return st;
    return omni_ckpt_check_unused(ck, "vision_config.deepstack_visual_indexes", "%s%s.%d.", vp,
                                  omni_names ? "merger_list" : "deepstack_merger_list", c->n_deepstack);
}

/* inv_freq[k] = 1 / theta^(2k / (hd/2)), k < hd/4, computed in float as torch does. */
void vision_rope_inv_freq(const vision_config *c, float *inv_freq) {
    const int sd = c->head_dim / 2, nf = sd / 2;
    for (int k = 0; k < nf; k++) inv_freq[k] = 1.0f / powf(c->rope_theta, (float)(2 * k) / (float)sd);
}

static omni_status make_inv_freq(vision_tower *t) {
    t->inv_freq = malloc(sizeof(float) * (t->cfg.head_dim / 4));
    if (!t->inv_freq) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    vision_rope_inv_freq(&t->cfg, t->inv_freq);
    return OMNI_OK;
}

omni_status vision_tower_load(const char *model_dir, const omni_ckpt *ckpt, vision_tower **out) {
    *out = NULL;
    vision_config c;
    omni_status st = vision_config_read(model_dir, &c);
    return st ? st : vision_tower_load_config(&c, ckpt, out);
}

omni_status vision_tower_load_config(const vision_config *cfg, const omni_ckpt *ckpt, vision_tower **out) {
    *out = NULL;
    vision_tower *t = calloc(1, sizeof(*t));
    if (!t) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    t->cfg = *cfg;
    omni_status st = load_weights(t, ckpt);
    if (!st) st = make_inv_freq(t);
    if (st) {
        vision_tower_free(t);
        return st;
    }
    *out = t;
    return OMNI_OK;
}

void vision_tower_free(vision_tower *t) {
    if (!t) return;
    free(t->pos_embed);
    free(t->blocks);
    free(t->inv_freq);
    free(t);
}

const vision_config *vision_tower_config(const vision_tower *t) { return &t->cfg; }

void vision_tower_set_interrupt(vision_tower *t, volatile const int *flag) { t->interrupt = flag; }

void vision_tower_weights(const vision_tower *t, vision_weights *w) {
    memset(w, 0, sizeof *w);
    w->patch_w = t->patch_w, w->patch_b = t->patch_b, w->pos_embed = t->pos_embed_t;
    w->blocks = t->blocks;
    w->merger = t->merger;
    for (int k = 0; k < t->cfg.n_deepstack; k++) w->deepstack[k] = t->ds[k];
}

/* ---- encode ------------------------------------------------------------------------------------------------ */

typedef struct {
    float *x, *xn, *qkv, *att, *tmp, *mlp, *cos, *sin; /* [N,D] [N,D] [N,3D] [N,D] [N,D] [N,max(I,M)] [N,hd] [N,hd] */
    int32_t *row, *col;                                  /* [N] full-resolution patch coordinates */
} work;

static void work_free(work *w) {
    free(w->x), free(w->xn), free(w->qkv), free(w->att), free(w->tmp), free(w->mlp), free(w->cos), free(w->sin);
    free(w->row), free(w->col);
}

static omni_status work_alloc(work *w, const vision_config *c, int N) {
    const size_t D = c->hidden, I = c->intermediate, M = 4 * D, hd = c->head_dim, n = (size_t)N;
    memset(w, 0, sizeof(*w));
    w->x = malloc(sizeof(float) * n * D), w->xn = malloc(sizeof(float) * n * D);
    w->qkv = malloc(sizeof(float) * n * 3 * D), w->att = malloc(sizeof(float) * n * D);
    w->tmp = malloc(sizeof(float) * n * D), w->mlp = malloc(sizeof(float) * n * (I > M ? I : M));
    w->cos = malloc(sizeof(float) * n * hd), w->sin = malloc(sizeof(float) * n * hd);
    w->row = malloc(sizeof(int32_t) * n), w->col = malloc(sizeof(int32_t) * n);
    if (!w->x || !w->xn || !w->qkv || !w->att || !w->tmp || !w->mlp || !w->cos || !w->sin || !w->row || !w->col) {
        work_free(w);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory encoding %d patches", N);
    }
    return OMNI_OK;
}

/* Patch coordinates in merge-block order, repeated per frame. */
void vision_patch_coords(int gt, int gh, int gw, int32_t *row, int32_t *col) {
    int n = 0;
    for (int t = 0; t < gt; t++)
        for (int R = 0; R < gh / 2; R++)
            for (int C = 0; C < gw / 2; C++)
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++, n++) row[n] = 2 * R + i, col[n] = 2 * C + j;
}

/* x[n] += the bilinear (align_corners=True) resampling of pos_embed at the patch's coordinates (fp32 weights,
 * the 4 taps summed in fp32 first, as transformers v5 does). */
static void add_pos_embed(const vision_tower *t, float *x, const int32_t *row, const int32_t *col, int N, int gh,
                          int gw) {
    op_pos_embed_bilinear(x, t->pos_embed, t->side, row, col, N, t->cfg.hidden, gh, gw);
}

/* cos/sin [N, hd]: angles [row·inv_freq, col·inv_freq] (hd/2), duplicated. */
static void rope_tables(const vision_tower *t, const int32_t *row, const int32_t *col, int N, float *cs, float *sn) {
    op_rope2d_tables(cs, sn, row, col, N, t->cfg.head_dim, t->inv_freq);
}

/* Bidirectional attention over the image's N patches (op_attention takes the blocked sgemm path at this length).
 * qkv rows: [q (D) | k (D) | v (D)], heads of hd contiguous values. */
static void attention(const vision_config *c, work *w, int N) {
    const int D = c->hidden, H = c->n_heads, hd = c->head_dim;
    op_attention(w->att, D, w->qkv, 3 * D, w->qkv + D, 3 * D, w->qkv + 2 * D, 3 * D, N, N, H, H, hd,
                 1.0f / sqrtf((float)hd), -1);
}

static void run_block(const vision_tower *t, const vis_block *b, work *w, int N) {
    const vision_config *c = &t->cfg;
    const int D = c->hidden, H = c->n_heads, hd = c->head_dim;
    op_layernorm(w->xn, w->x, &b->n1w, &b->n1b, N, D, LN_EPS);
    op_linear(w->qkv, w->xn, N, &b->qkv_w, &b->qkv_b);
    op_rope_neox(w->qkv, N, H, hd, 3 * D, w->cos, w->sin);
    op_rope_neox(w->qkv + D, N, H, hd, 3 * D, w->cos, w->sin);
    attention(c, w, N);
    op_linear(w->tmp, w->att, N, &b->proj_w, &b->proj_b);
    op_add(w->x, w->tmp, (int64_t)N * D);
    op_layernorm(w->xn, w->x, &b->n2w, &b->n2b, N, D, LN_EPS);
    op_linear(w->mlp, w->xn, N, &b->fc1_w, &b->fc1_b);
    if (c->gelu_tanh)
        op_gelu_tanh(w->mlp, (int64_t)N * c->intermediate);
    else
        op_gelu_erf(w->mlp, (int64_t)N * c->intermediate);
    op_linear(w->tmp, w->mlp, N, &b->fc2_w, &b->fc2_b);
    op_add(w->x, w->tmp, (int64_t)N * D);
}

/* Merger on x [N, D] -> out [N/4, O]. postshuffle: LayerNorm over M after the 2x2 concat (deepstack). */
static void run_merger(const vision_tower *t, const vis_merger *m, int postshuffle, work *w, int N, float *out) {
    const int D = t->cfg.hidden, M = 4 * D, n4 = N / 4;
    if (postshuffle)
        op_layernorm(w->xn, w->x, &m->nw, &m->nb, n4, M, LN_EPS);
    else
        op_layernorm(w->xn, w->x, &m->nw, &m->nb, N, D, LN_EPS);
    op_linear(w->mlp, w->xn, n4, &m->fc1_w, &m->fc1_b);
    op_gelu_erf(w->mlp, (int64_t)n4 * M);
    op_linear(out, w->mlp, n4, &m->fc2_w, &m->fc2_b);
}

static omni_status output_alloc(vision_output *o, const vision_config *c, const vision_patches *pp) {
    memset(o, 0, sizeof(*o));
    o->grid_t = pp->grid_t, o->grid_h = pp->grid_h, o->grid_w = pp->grid_w;
    o->n_tokens = pp->n_patches / 4, o->out_hidden = c->out_hidden, o->n_deepstack = c->n_deepstack;
    const size_t n = (size_t)o->n_tokens * o->out_hidden;
    int ok = (o->embd = malloc(sizeof(float) * n)) != NULL;
    for (int k = 0; k < c->n_deepstack; k++) ok = ok && (o->deepstack[k] = malloc(sizeof(float) * n)) != NULL;
    if (!ok) {
        vision_output_free(o);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory for %d visual tokens", o->n_tokens);
    }
    return OMNI_OK;
}

omni_status vision_tower_encode(vision_tower *t, const vision_patches *pp, vision_output *out) {
    const vision_config *c = &t->cfg;
    const int N = pp->n_patches;
    memset(out, 0, sizeof(*out));
    if (pp->patch_dim != c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size)
        return omni_fail(OMNI_ERR_INPUT, "pixel_values have %d columns, the tower expects %d", pp->patch_dim,
                         c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size);
    if (N <= 0 || pp->grid_h % 2 || pp->grid_w % 2 || N != pp->grid_t * pp->grid_h * pp->grid_w)
        return omni_fail(OMNI_ERR_INPUT, "bad patch grid %dx%dx%d for %d patches", pp->grid_t, pp->grid_h,
                         pp->grid_w, N);
    if (pp->grid_t != 1) return omni_fail(OMNI_ERR_UNSUPPORTED, "video input (grid_t %d) is not supported", pp->grid_t);
    double t0 = omni_time_ms();
    work w;
    omni_status st = work_alloc(&w, c, N);
    if (st) return st;
    if ((st = output_alloc(out, c, pp))) {
        work_free(&w);
        return st;
    }
    vision_patch_coords(pp->grid_t, pp->grid_h, pp->grid_w, w.row, w.col);
    op_linear(w.x, pp->pixels, N, &t->patch_w, &t->patch_b);
    add_pos_embed(t, w.x, w.row, w.col, N, pp->grid_h, pp->grid_w);
    rope_tables(t, w.row, w.col, N, w.cos, w.sin);
    for (int i = 0; i < c->depth; i++) {
        if (t->interrupt && *t->interrupt) { /* Ctrl+C: stop within one block */
            work_free(&w);
            vision_output_free(out);
            return omni_fail(OMNI_ERR_RUNTIME, "interrupted");
        }
        run_block(t, &t->blocks[i], &w, N);
        for (int k = 0; k < c->n_deepstack; k++)
            if (c->deepstack_index[k] == i) run_merger(t, &t->ds[k], 1, &w, N, out->deepstack[k]);
    }
    run_merger(t, &t->merger, 0, &w, N, out->embd);
    work_free(&w);
    out->encode_ms = omni_time_ms() - t0;
    return OMNI_OK;
}

void vision_output_free(vision_output *o) {
    if (!o) return;
    free(o->embd);
    for (int k = 0; k < VISION_MAX_DEEPSTACK; k++) free(o->deepstack[k]);
    memset(o, 0, sizeof(*o));
}

omni_status vision_encode_file(vision_tower *t, const vision_prep_params *p, const char *path, int64_t max_image_pixels,
                               vision_output *out, vision_image_info *info) {
    vision_image im;
    vision_patches pp = {0};
    vision_image_info inf = {0};
    memset(out, 0, sizeof(*out));
    double t0 = omni_time_ms();
    omni_status st = vision_image_load(path, max_image_pixels, &im);
    double t1 = omni_time_ms();
    if (!st) st = vision_preprocess(&im, p, &pp);
    double t2 = omni_time_ms();
    if (!st) st = vision_tower_encode(t, &pp, out);
    if (!st) {
        inf.width = im.width, inf.height = im.height, inf.resized_w = pp.resized_w, inf.resized_h = pp.resized_h;
        inf.n_tokens = out->n_tokens, inf.load_ms = t1 - t0, inf.preprocess_ms = t2 - t1, inf.encode_ms = out->encode_ms;
    }
    if (info) *info = inf;
    vision_patches_free(&pp);
    vision_image_free(&im);
    return st;
}
