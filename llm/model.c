/* model.c - config + weight binding of the Qwen3 decoder (dense and MoE) and the RoPE tables; immutable after
 * load. The forward pass lives in the runners (runner_cpu.c).
 *
 * Dimension letters: H hidden, Hq/Hkv query/kv heads, D head_dim, I intermediate, V vocab. */
#include "llm/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "llm/moe.h"

struct llm_model {
    llm_config cfg;
    omni_ckpt *ckpt;
    llm_weights w;            /* views handed to runners; w.layers = layers */
    llm_layer_weights *layers; /* [n_layers] */
    omni_tensor **experts;    /* [n_layers]: backing storage of layers[l].moe.gate/up/down ([3][E] views) or NULL */
    float *inv_freq;          /* [D/2] */
    int *rope_stream;         /* [D/2]: which position stream (0 T, 1 H, 2 W) drives frequency slot j */
    size_t weight_bytes;
    int random;     /* llm_model_init_random: no checkpoint; runners make weights from `seed` */
    uint64_t seed;
};

/* ---- loading ------------------------------------------------------------------------------------------- */

static omni_status get2(const llm_model *m, omni_tensor *t, int64_t a, int64_t b, const char *fmt, int l) {
    int64_t shape[2] = {a, b};
    char name[256];
    snprintf(name, sizeof name, fmt, m->cfg.prefix, l);
    return omni_ckpt_get(m->ckpt, name, b > 0 ? 2 : 1, shape, t);
}

static omni_status bind_moe(llm_model *m, llm_layer_weights *L, int l) {
    const llm_config *c = &m->cfg;
    int E = c->n_experts, I = c->moe_intermediate, H = c->hidden;
    omni_status st = get2(m, &L->moe.router, E, H, "%slayers.%d.mlp.gate.weight", l);
    if (st) return st;
    omni_tensor *ex = m->experts[l] = calloc(3 * (size_t)E, sizeof(omni_tensor));
    if (!ex) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    char name[256];
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.gate_up_proj", c->prefix, l);
    const omni_tensor *gu = omni_ckpt_find(m->ckpt, name);
    for (int e = 0; e < E && !st; e++) {
        omni_tensor *g = &ex[e], *u = &ex[E + e], *d = &ex[2 * E + e];
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
    L->moe.gate = ex;
    L->moe.up = ex + E;
    L->moe.down = ex + 2 * E;
    L->moe.n_experts = E;
    L->moe.top_k = c->top_k;
    L->moe.inter = I;
    L->moe.hidden = H;
    L->moe.norm_topk_prob = c->norm_topk_prob;
    return st;
}

static omni_status bind_layer(llm_model *m, int l) {
    const llm_config *c = &m->cfg;
    llm_layer_weights *L = &m->layers[l];
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

/* Layers the config leaves out: transformers warns about unused weights and runs a smaller model (fewer experts
 * than the checkpoint's fail the router's shape check). */
static omni_status check_unused(const llm_model *m) {
    return omni_ckpt_check_unused(m->ckpt, "text_config.num_hidden_layers", "%slayers.%d.", m->cfg.prefix,
                                  m->cfg.n_layers);
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
    if ((st = omni_ckpt_get(m->ckpt, name, 2, es, &m->w.embed))) return st;
    snprintf(name, sizeof name, "%snorm.weight", c->prefix);
    if ((st = omni_ckpt_get(m->ckpt, name, 1, ns, &m->w.norm))) return st;
    if (!c->tie_word_embeddings && c->tie_unset && !omni_ckpt_find(m->ckpt, c->lm_head))
        m->cfg.tie_word_embeddings = 1; /* no flag and no head: the embedding is the head */
    if (c->tie_word_embeddings) {
        m->w.lm_head = m->w.embed;
        return OMNI_OK;
    }
    if (!omni_ckpt_find(m->ckpt, c->lm_head))
        return omni_fail(OMNI_ERR_MODEL, "checkpoint has no %s and config.json says tie_word_embeddings false",
                         c->lm_head);
    return omni_ckpt_get(m->ckpt, c->lm_head, 2, es, &m->w.lm_head);
}

llm_model_params llm_model_default_params(void) {
    llm_model_params p = {0};
    return p;
}

static int decoder_tensor(const llm_model *m, const char *name) {
    return !strncmp(name, m->cfg.prefix, strlen(m->cfg.prefix)) || !strcmp(name, m->cfg.lm_head);
}

/* First NaN/Inf among the decoder weights (f32/bf16/f16 exponent all ones), named in the error. */
static omni_status check_finite(const llm_model *m) {
    for (int i = 0; i < omni_ckpt_count(m->ckpt); i++) {
        const char *n = omni_ckpt_name(m->ckpt, i);
        if (!decoder_tensor(m, n)) continue;
        const omni_tensor *t = omni_ckpt_find(m->ckpt, n);
        int64_t cnt = omni_tensor_numel(t), bad = -1;
        if (t->dtype == OMNI_F32) {
            const uint32_t *v = t->data;
            for (int64_t j = 0; j < cnt && bad < 0; j++) bad = (v[j] & 0x7f800000u) == 0x7f800000u ? j : -1;
        } else if (t->dtype == OMNI_BF16 || t->dtype == OMNI_F16) {
            const uint16_t *v = t->data;
            uint16_t e = t->dtype == OMNI_BF16 ? 0x7f80u : 0x7c00u;
            for (int64_t j = 0; j < cnt && bad < 0; j++) bad = (v[j] & e) == e ? j : -1;
        }
        if (bad >= 0)
            return omni_fail(OMNI_ERR_MODEL, "tensor '%s' holds a NaN or Inf (element %lld)", n, (long long)bad);
    }
    return OMNI_OK;
}

omni_status llm_model_load_params(const char *dir, const llm_model_params *p, llm_model **out) {
    *out = NULL;
    llm_model_params dp = llm_model_default_params();
    if (!p) p = &dp;
    llm_model *m = calloc(1, sizeof *m);
    if (!m) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = llm_config_load(dir, &m->cfg);
    if (!st) st = omni_ckpt_open(dir, &m->ckpt);
    if (!st) st = bind_globals(m);
    if (!st) {
        m->layers = calloc(m->cfg.n_layers, sizeof(llm_layer_weights));
        m->experts = calloc(m->cfg.n_layers, sizeof(omni_tensor *));
        if (!m->layers || !m->experts) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    }
    for (int l = 0; !st && l < m->cfg.n_layers; l++) st = bind_layer(m, l);
    if (!st) st = check_unused(m);
    if (!st) st = init_rope(m);
    if (!st && p->check_finite) st = check_finite(m);
    if (st) {
        llm_model_free(m);
        return st;
    }
    for (int i = 0; i < omni_ckpt_count(m->ckpt); i++) {
        const char *n = omni_ckpt_name(m->ckpt, i);
        if (decoder_tensor(m, n)) {
            const omni_tensor *t = omni_ckpt_find(m->ckpt, n);
            m->weight_bytes += (size_t)omni_tensor_numel(t) * omni_dtype_size(t->dtype);
        }
    }
    m->w.layers = m->layers;
    m->w.inv_freq = m->inv_freq;
    m->w.rope_stream = m->rope_stream;
    *out = m;
    return OMNI_OK;
}

omni_status llm_model_load(const char *dir, llm_model **out) { return llm_model_load_params(dir, NULL, out); }

/* bf16 bytes of the decoder weights a config implies (the tensors bind_globals / bind_layer expect). */
static size_t bf16_weight_bytes(const llm_config *c) {
    int64_t H = c->hidden, D = c->head_dim, qd = (int64_t)c->n_heads * D, kd = (int64_t)c->n_kv_heads * D;
    int64_t mlp = c->n_experts > 0 ? (int64_t)c->n_experts * (H + 3 * (int64_t)c->moe_intermediate * H)
                                   : 3 * (int64_t)c->intermediate * H;
    int64_t layer = 2 * H + 2 * qd * H + 2 * kd * H + 2 * D + mlp;
    return 2 * (size_t)((c->tie_word_embeddings ? 1 : 2) * (int64_t)c->vocab * H + H + c->n_layers * layer);
}

omni_status llm_model_init_random(const char *dir, uint64_t seed, llm_model **out) {
    *out = NULL;
    llm_model *m = calloc(1, sizeof *m);
    if (!m) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = llm_config_load(dir, &m->cfg);
    if (!st && !(m->layers = calloc(m->cfg.n_layers, sizeof(llm_layer_weights))))
        st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) st = init_rope(m);
    if (st) {
        llm_model_free(m);
        return st;
    }
    m->random = 1;
    m->seed = seed;
    m->weight_bytes = bf16_weight_bytes(&m->cfg);
    m->w.layers = m->layers;
    m->w.inv_freq = m->inv_freq;
    m->w.rope_stream = m->rope_stream;
    *out = m;
    return OMNI_OK;
}

int llm_model_is_random(const llm_model *m, uint64_t *seed) {
    if (m->random && seed) *seed = m->seed;
    return m->random;
}

void llm_model_free(llm_model *m) {
    if (!m) return;
    if (m->experts)
        for (int l = 0; l < m->cfg.n_layers; l++) free(m->experts[l]);
    free(m->experts);
    free(m->layers);
    free(m->inv_freq);
    free(m->rope_stream);
    omni_ckpt_free(m->ckpt);
    llm_config_free(&m->cfg);
    free(m);
}

const llm_config *llm_model_config(const llm_model *m) { return &m->cfg; }
const omni_ckpt *llm_model_ckpt(const llm_model *m) { return m->ckpt; }
size_t llm_model_weight_bytes(const llm_model *m) { return m->weight_bytes; }
const llm_weights *llm_model_weights(const llm_model *m) { return &m->w; }

omni_status llm_model_trace_routing(llm_model *m, int32_t *sel, float *margin, int cap) {
    const llm_config *c = &m->cfg;
    if (c->n_experts <= 0) return omni_fail(OMNI_ERR_USAGE, "llm_model_trace_routing: not a MoE model");
    if (sel && (!margin || cap <= 0)) return omni_fail(OMNI_ERR_USAGE, "llm_model_trace_routing: cap %d", cap);
    for (int l = 0; l < c->n_layers; l++) {
        llm_moe *moe = &m->layers[l].moe;
        moe->trace_sel = sel ? sel + (size_t)l * cap * c->top_k : NULL;
        moe->trace_margin = sel ? margin + (size_t)l * cap : NULL;
        moe->trace_cap = sel ? cap : 0;
    }
    return OMNI_OK;
}

kv_params llm_model_kv_params(const llm_model *m) {
    kv_params p = kv_default_params();
    p.n_layers = m->cfg.n_layers;
    p.n_kv_heads = m->cfg.n_kv_heads;
    p.head_dim = m->cfg.head_dim;
    return p;
}

