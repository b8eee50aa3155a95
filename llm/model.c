/* model.c - weight binding and the forward pass of the Qwen3 decoder (dense and MoE), CPU reference.
 *
 * Dimension letters: T tokens in the chunk, H hidden, Hq/Hkv query/kv heads, D head_dim, I intermediate,
 * V vocab. One layer: x += o_proj(attn(rope(qk_norm(qkv(rmsnorm(x)))))); x += mlp(rmsnorm(x)). */
#include "llm/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "llm/moe.h"

typedef struct {
    omni_tensor in_norm, post_norm;         /* [H] */
    omni_tensor q, k, v, o;                 /* [Hq*D, H], [Hkv*D, H], [Hkv*D, H], [H, Hq*D] */
    omni_tensor q_norm, k_norm;             /* [D] */
    omni_tensor gate, up, down;             /* dense: [I, H], [I, H], [H, I] */
    llm_moe moe;                            /* MoE layers (moe.n_experts > 0) */
    omni_tensor *experts;                   /* backing storage of moe.gate/up/down: [3][E] views */
} llm_layer;

typedef struct { /* per-chunk scratch, grown on demand (prefill only; decode reuses it) */
    int cap;     /* tokens */
    float *x, *h, *q, *k, *v, *att, *g, *u, *cos, *sin, *moe;
    size_t moe_floats;
} llm_work;

struct llm_model {
    llm_config cfg;
    omni_ckpt *ckpt;
    omni_tensor embed, norm, lm_head;
    llm_layer *layers;
    float *inv_freq; /* [D/2] */
    int *rope_stream; /* [D/2]: which position stream (0 T, 1 H, 2 W) drives frequency slot j */
    llm_work w;
    size_t weight_bytes;
};

/* ---- loading ------------------------------------------------------------------------------------------- */

static omni_status get2(const llm_model *m, omni_tensor *t, int64_t a, int64_t b, const char *fmt, int l) {
    int64_t shape[2] = {a, b};
    char name[256];
    snprintf(name, sizeof name, fmt, m->cfg.prefix, l);
    return omni_ckpt_get(m->ckpt, name, b > 0 ? 2 : 1, shape, t);
}

static omni_status bind_moe(llm_model *m, llm_layer *L, int l) {
    const llm_config *c = &m->cfg;
    int E = c->n_experts, I = c->moe_intermediate, H = c->hidden;
    omni_status st = get2(m, &L->moe.router, E, H, "%slayers.%d.mlp.gate.weight", l);
    if (st) return st;
    L->experts = calloc(3 * (size_t)E, sizeof(omni_tensor));
    if (!L->experts) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    char name[256];
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.gate_up_proj", c->prefix, l);
    const omni_tensor *gu = omni_ckpt_find(m->ckpt, name);
    for (int e = 0; e < E && !st; e++) {
        omni_tensor *g = &L->experts[e], *u = &L->experts[E + e], *d = &L->experts[2 * E + e];
        if (gu) { /* fused layout (transformers v5 in-memory names): gate_up [E, 2I, H], down [E, H, I] */
            int64_t s3[3] = {E, 2 * I, H}, d3[3] = {E, H, I};
            omni_tensor guv, dv;
            if ((st = omni_ckpt_get(m->ckpt, name, 3, s3, &guv))) break;
            if ((st = omni_ckpt_getf(m->ckpt, &dv, 3, d3, "%slayers.%d.mlp.experts.down_proj", c->prefix, l))) break;
            size_t es = omni_dtype_size(guv.dtype);
            int64_t gs[2] = {I, H}, ds[2] = {H, I};
            *g = omni_tensor_make((char *)guv.data + (size_t)e * 2 * I * H * es, guv.dtype, 2, gs);
            *u = omni_tensor_make((char *)guv.data + ((size_t)e * 2 + 1) * I * H * es, guv.dtype, 2, gs);
            *d = omni_tensor_make((char *)dv.data + (size_t)e * H * I * es, dv.dtype, 2, ds);
        } else {
            int64_t gs[2] = {I, H}, ds[2] = {H, I};
            st = omni_ckpt_getf(m->ckpt, g, 2, gs, "%slayers.%d.mlp.experts.%d.gate_proj.weight", c->prefix, l, e);
            if (!st) st = omni_ckpt_getf(m->ckpt, u, 2, gs, "%slayers.%d.mlp.experts.%d.up_proj.weight", c->prefix, l, e);
            if (!st) st = omni_ckpt_getf(m->ckpt, d, 2, ds, "%slayers.%d.mlp.experts.%d.down_proj.weight", c->prefix, l, e);
        }
    }
    L->moe.gate = L->experts;
    L->moe.up = L->experts + E;
    L->moe.down = L->experts + 2 * E;
    L->moe.n_experts = E;
    L->moe.top_k = c->top_k;
    L->moe.inter = I;
    L->moe.hidden = H;
    L->moe.norm_topk_prob = c->norm_topk_prob;
    return st;
}

static omni_status bind_layer(llm_model *m, int l) {
    const llm_config *c = &m->cfg;
    llm_layer *L = &m->layers[l];
    int H = c->hidden, D = c->head_dim, qd = c->n_heads * D, kd = c->n_kv_heads * D, I = c->intermediate;
    omni_status st;
    if ((st = get2(m, &L->in_norm, H, 0, "%slayers.%d.input_layernorm.weight", l)) ||
        (st = get2(m, &L->post_norm, H, 0, "%slayers.%d.post_attention_layernorm.weight", l)) ||
        (st = get2(m, &L->q, qd, H, "%slayers.%d.self_attn.q_proj.weight", l)) ||
        (st = get2(m, &L->k, kd, H, "%slayers.%d.self_attn.k_proj.weight", l)) ||
        (st = get2(m, &L->v, kd, H, "%slayers.%d.self_attn.v_proj.weight", l)) ||
        (st = get2(m, &L->o, H, qd, "%slayers.%d.self_attn.o_proj.weight", l)) ||
        (st = get2(m, &L->q_norm, D, 0, "%slayers.%d.self_attn.q_norm.weight", l)) ||
        (st = get2(m, &L->k_norm, D, 0, "%slayers.%d.self_attn.k_norm.weight", l)))
        return st;
    if (c->n_experts > 0) return bind_moe(m, L, l);
    if ((st = get2(m, &L->gate, I, H, "%slayers.%d.mlp.gate_proj.weight", l)) ||
        (st = get2(m, &L->up, I, H, "%slayers.%d.mlp.up_proj.weight", l)) ||
        (st = get2(m, &L->down, H, I, "%slayers.%d.mlp.down_proj.weight", l)))
        return st;
    return OMNI_OK;
}

/* inv_freq as transformers computes it in fp32, and the interleaved-MRoPE slot -> stream map (spec §1.5). */
static omni_status init_rope(llm_model *m) {
    const llm_config *c = &m->cfg;
    int half = c->head_dim / 2;
    m->inv_freq = malloc(sizeof(float) * half);
    m->rope_stream = malloc(sizeof(int) * half);
    if (!m->inv_freq || !m->rope_stream) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int j = 0; j < half; j++) {
        float e = (float)(2 * j) / (float)c->head_dim;
        m->inv_freq[j] = 1.0f / powf(c->rope_theta, e);
        int s = 0;
        if (c->mrope_interleaved) {
            if (j % 3 == 1 && j < 3 * c->mrope_section[1]) s = 1;
            else if (j % 3 == 2 && j < 3 * c->mrope_section[2]) s = 2;
        } else { /* chunked sections [T..][H..][W..] */
            if (j >= c->mrope_section[0]) s = j < c->mrope_section[0] + c->mrope_section[1] ? 1 : 2;
        }
        m->rope_stream[j] = s;
    }
    return OMNI_OK;
}

static omni_status bind_globals(llm_model *m) {
    const llm_config *c = &m->cfg;
    omni_status st;
    int64_t es[2] = {c->vocab, c->hidden}, ns[1] = {c->hidden};
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", c->prefix);
    if ((st = omni_ckpt_get(m->ckpt, name, 2, es, &m->embed))) return st;
    snprintf(name, sizeof name, "%snorm.weight", c->prefix);
    if ((st = omni_ckpt_get(m->ckpt, name, 1, ns, &m->norm))) return st;
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
        return OMNI_OK;
    }
    return omni_ckpt_get(m->ckpt, c->lm_head, 2, es, &m->lm_head);
}

omni_status llm_model_load(const char *dir, llm_model **out) {
    *out = NULL;
    llm_model *m = calloc(1, sizeof *m);
    if (!m) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = llm_config_load(dir, &m->cfg);
    if (!st) st = omni_ckpt_open(dir, &m->ckpt);
    if (!st) st = bind_globals(m);
    if (!st) {
        m->layers = calloc(m->cfg.n_layers, sizeof(llm_layer));
        if (!m->layers) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    for (int l = 0; !st && l < m->cfg.n_layers; l++) st = bind_layer(m, l);
    if (!st) st = init_rope(m);
    if (st) {
        llm_model_free(m);
        return st;
    }
    for (int i = 0; i < omni_ckpt_count(m->ckpt); i++) {
        const char *n = omni_ckpt_name(m->ckpt, i);
        if (!strncmp(n, m->cfg.prefix, strlen(m->cfg.prefix)) || !strcmp(n, m->cfg.lm_head)) {
            const omni_tensor *t = omni_ckpt_find(m->ckpt, n);
            m->weight_bytes += (size_t)omni_tensor_numel(t) * omni_dtype_size(t->dtype);
        }
    }
    *out = m;
    return OMNI_OK;
}

static void work_free(llm_work *w) {
    free(w->x); free(w->h); free(w->q); free(w->k); free(w->v); free(w->att);
    free(w->g); free(w->u); free(w->cos); free(w->sin); free(w->moe);
    memset(w, 0, sizeof *w);
}

void llm_model_free(llm_model *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) free(m->layers[l].experts);
    free(m->layers);
    free(m->inv_freq);
    free(m->rope_stream);
    work_free(&m->w);
    omni_ckpt_free(m->ckpt);
    llm_config_free(&m->cfg);
    free(m);
}

const llm_config *llm_model_config(const llm_model *m) { return &m->cfg; }
const omni_ckpt *llm_model_ckpt(const llm_model *m) { return m->ckpt; }
size_t llm_model_weight_bytes(const llm_model *m) { return m->weight_bytes; }

kv_params llm_model_kv_params(const llm_model *m) {
    kv_params p = kv_default_params();
    p.n_layers = m->cfg.n_layers;
    p.n_kv_heads = m->cfg.n_kv_heads;
    p.head_dim = m->cfg.head_dim;
    return p;
}

/* ---- forward ------------------------------------------------------------------------------------------- */

static omni_status work_reserve(llm_model *m, int T) {
    llm_work *w = &m->w;
    if (T <= w->cap) return OMNI_OK;
    const llm_config *c = &m->cfg;
    work_free(w);
    size_t H = c->hidden, D = c->head_dim, qd = (size_t)c->n_heads * D, kd = (size_t)c->n_kv_heads * D;
    size_t I = c->n_experts ? 0 : (size_t)c->intermediate;
    w->x = malloc(sizeof(float) * T * H);
    w->h = malloc(sizeof(float) * T * H);
    w->q = malloc(sizeof(float) * T * qd);
    w->k = malloc(sizeof(float) * T * kd);
    w->v = malloc(sizeof(float) * T * kd);
    w->att = malloc(sizeof(float) * T * (qd > H ? qd : H)); /* attention output, then MLP output [T, H] */
    w->g = malloc(sizeof(float) * T * (I ? I : 1));
    w->u = malloc(sizeof(float) * T * (I ? I : 1));
    w->cos = malloc(sizeof(float) * T * D);
    w->sin = malloc(sizeof(float) * T * D);
    if (c->n_experts) {
        w->moe_floats = llm_moe_scratch_floats(&m->layers[0].moe, T);
        w->moe = malloc(sizeof(float) * (w->moe_floats ? w->moe_floats : 1));
    }
    if (!w->x || !w->h || !w->q || !w->k || !w->v || !w->att || !w->g || !w->u || !w->cos || !w->sin ||
        (c->n_experts && !w->moe)) {
        work_free(w);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory for a %d-token chunk", T);
    }
    w->cap = T;
    return OMNI_OK;
}

/* cos/sin rows [row0, row0+T) of [*, D] from 3-stream positions (fp32, as HF: freq = pos * inv_freq,
 * emb = cat(freq, freq)); pos NULL: text positions base + t on all streams. */
static void rope_tables(const llm_model *m, const int32_t *pos, int T, int64_t base, int row0) {
    int D = m->cfg.head_dim, half = D / 2;
    for (int t = 0; t < T; t++) {
        float *c = m->w.cos + (int64_t)(row0 + t) * D, *s = m->w.sin + (int64_t)(row0 + t) * D;
        for (int j = 0; j < half; j++) {
            float p = pos ? (float)pos[m->rope_stream[j] * T + t] : (float)(base + t);
            float f = p * m->inv_freq[j];
            c[j] = c[j + half] = cosf(f);
            s[j] = s[j + half] = sinf(f);
        }
    }
}

/* Token embeddings of one input at hidden-state rows [row0, row0 + n_tokens), spans substituted. */
static void embed_input(llm_model *m, const llm_input *in, int row0) {
    int H = m->cfg.hidden;
    float *x = m->w.x + (int64_t)row0 * H;
    op_embed(x, &m->embed, in->ids, in->n_tokens);
    for (int s = 0; s < in->n_spans; s++) {
        const llm_span *sp = &in->spans[s];
        memcpy(x + (int64_t)sp->start * H, sp->embd, sizeof(float) * sp->len * H);
    }
}

static void deepstack_add(llm_model *m, const llm_input *in, int layer, int row0) {
    int H = m->cfg.hidden;
    float *x = m->w.x + (int64_t)row0 * H;
    for (int s = 0; s < in->n_spans; s++) {
        const llm_span *sp = &in->spans[s];
        if (layer < sp->n_deepstack && sp->deepstack[layer])
            op_add(x + (int64_t)sp->start * H, sp->deepstack[layer], (int64_t)sp->len * H);
    }
}

/* One attention sub-layer over the batch's T rows (sequence after sequence: n_new[i] rows of seqs[i]). */
static omni_status attention_block(llm_model *m, const llm_layer *L, kv_cache *kv, int layer, int n_seq,
                                   const int *seqs, const int *n_new, int T) {
    const llm_config *c = &m->cfg;
    llm_work *w = &m->w;
    int H = c->hidden, D = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    op_rmsnorm(w->h, w->x, &L->in_norm, T, H, c->rms_eps);
    op_linear(w->q, w->h, T, &L->q, NULL);
    op_linear(w->k, w->h, T, &L->k, NULL);
    op_linear(w->v, w->h, T, &L->v, NULL);
    op_rmsnorm(w->q, w->q, &L->q_norm, T * Hq, D, c->rms_eps);
    op_rmsnorm(w->k, w->k, &L->k_norm, T * Hkv, D, c->rms_eps);
    op_rope_neox(w->q, T, Hq, D, (int64_t)Hq * D, w->cos, w->sin);
    op_rope_neox(w->k, T, Hkv, D, (int64_t)Hkv * D, w->cos, w->sin);
    omni_status st = kv_forward(kv, layer, n_seq, seqs, n_new, w->q, w->k, w->v, w->att, Hq, 1.f / sqrtf((float)D));
    if (st) return st;
    op_linear(w->h, w->att, T, &L->o, NULL);
    op_add(w->x, w->h, (int64_t)T * H);
    return OMNI_OK;
}

static void mlp_block(llm_model *m, const llm_layer *L, int T) {
    const llm_config *c = &m->cfg;
    llm_work *w = &m->w;
    int H = c->hidden;
    op_rmsnorm(w->h, w->x, &L->post_norm, T, H, c->rms_eps);
    if (c->n_experts) {
        llm_moe_forward(&L->moe, w->att, w->h, T, w->moe);
    } else {
        int I = c->intermediate;
        op_linear(w->g, w->h, T, &L->gate, NULL);
        op_linear(w->u, w->h, T, &L->up, NULL);
        op_silu_mul(w->g, w->g, w->u, (int64_t)T * I);
        op_linear(w->att, w->g, T, &L->down, NULL);
    }
    op_add(w->x, w->att, (int64_t)T * H);
}

static omni_status check_input(const llm_model *m, const llm_input *in) {
    if (in->n_tokens <= 0) return omni_fail(OMNI_ERR_USAGE, "empty input chunk");
    for (int i = 0; i < in->n_tokens; i++)
        if (in->ids[i] < 0 || in->ids[i] >= m->cfg.vocab)
            return omni_fail(OMNI_ERR_USAGE, "token id %d out of range (vocab %d)", in->ids[i], m->cfg.vocab);
    for (int s = 0; s < in->n_spans; s++) {
        const llm_span *sp = &in->spans[s];
        if (sp->start < 0 || sp->len < 0 || sp->start + sp->len > in->n_tokens || sp->n_deepstack > 4)
            return omni_fail(OMNI_ERR_USAGE, "embedding span %d [%d, +%d) outside the chunk", s, sp->start, sp->len);
    }
    return OMNI_OK;
}

#define LLM_MAX_BATCH 256

/* The shared step: every input's rows in order, one kv_forward per layer for the whole batch. Logits: per
 * sequence the last row ([vocab]) or, with all (one sequence only), every row ([n_tokens, vocab]). */
static omni_status forward_impl(llm_model *m, kv_cache *kv, int n_seq, const int *seqs, const llm_input *in,
                                float *const *logits, int all) {
    if (n_seq < 1 || n_seq > LLM_MAX_BATCH) return omni_fail(OMNI_ERR_USAGE, "batch of %d sequences", n_seq);
    const llm_config *c = &m->cfg;
    int n_new[LLM_MAX_BATCH], row0[LLM_MAX_BATCH], T = 0, H = c->hidden;
    omni_status st = OMNI_OK;
    for (int i = 0; i < n_seq && !st; i++) {
        st = check_input(m, &in[i]);
        n_new[i] = in[i].n_tokens;
        row0[i] = T;
        T += in[i].n_tokens;
    }
    if (st || (st = work_reserve(m, T))) return st;
    for (int i = 0; i < n_seq; i++) {
        rope_tables(m, in[i].pos, n_new[i], kv_seq_len(kv, seqs[i]), row0[i]);
        embed_input(m, &in[i], row0[i]);
    }
    for (int l = 0; l < c->n_layers; l++) {
        if ((st = attention_block(m, &m->layers[l], kv, l, n_seq, seqs, n_new, T))) return st;
        mlp_block(m, &m->layers[l], T);
        for (int i = 0; i < n_seq; i++) deepstack_add(m, &in[i], l, row0[i]);
    }
    if ((st = kv_commit(kv, n_seq, seqs, n_new))) return st;
    for (int i = 0; i < n_seq; i++) {
        if (!logits || !logits[i]) continue;
        int first = all ? row0[i] : row0[i] + n_new[i] - 1, n = row0[i] + n_new[i] - first;
        float *xs = m->w.x + (int64_t)first * H;
        op_rmsnorm(xs, xs, &m->norm, n, H, c->rms_eps);
        op_linear(logits[i], xs, n, &m->lm_head, NULL);
    }
    return OMNI_OK;
}

omni_status llm_forward_batch(llm_model *m, kv_cache *kv, int n_seq, const int *seq_ids, const llm_input *in,
                              float *const *logits) {
    return forward_impl(m, kv, n_seq, seq_ids, in, logits, 0);
}

omni_status llm_forward_ex(llm_model *m, kv_cache *kv, int seq, const llm_input *in, float *logits, int all) {
    return forward_impl(m, kv, 1, &seq, in, &logits, all);
}

omni_status llm_forward(llm_model *m, kv_cache *kv, int seq, const llm_input *in, float *logits) {
    return llm_forward_ex(m, kv, seq, in, logits, 0);
}
