/* runner_cpu.c - the CPU runner: the Qwen3 decoder forward pass (dense and MoE share one layer loop) over a batch
 * of sequences from one or several KV caches, in f32 with weights as stored, all scratch made at init.
 *
 * Dimension letters: T tokens in the step (all entries), S entries, H hidden, Hq/Hkv query/kv heads, D head_dim,
 * I intermediate, V vocab. One layer: x += o_proj(attn(rope(qk_norm(qkv(rmsnorm(x)))))); x += mlp(rmsnorm(x)).
 * Rows are laid out grouped by cache (entries of the first cache seen first, in entry order), so each cache's
 * kv_forward gets one contiguous block of rows. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "llm/runner_impl.h"

typedef struct {
    int cap_T, cap_S;
    float *x, *h;          /* [T, H] hidden state, normed input */
    float *q, *k, *v;      /* [T, Hq*D], [T, Hkv*D], [T, Hkv*D] */
    float *att;            /* [T, max(Hq*D, H)]: attention output, then MLP output */
    float *g, *u;          /* [T, I] (dense) */
    float *cos, *sin;      /* [T, D] */
    float *moe;            /* llm_moe_scratch_floats(T) (MoE) */
    float *last;           /* [S, H] last rows of entries that need logits, normed */
    float *logits;         /* [S, V] their logits */
    float *lin_ws;         /* op_linear_ws tiles */
    size_t lin_ws_floats, moe_floats, bytes;
    int *row0;             /* [S] first row of entry i */
    int *gseq, *gnew;      /* [S] sequence ids / token counts in row order */
    int *gstart;           /* [S + 1] first row-order index of each cache group */
    kv_cache **gkv;        /* [S] cache of each group */
    int *out_entry;        /* [S] entries whose last row goes through the batched lm_head */
} cpu_runner;

static void *take(cpu_runner *c, size_t bytes, int *fail) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) *fail = 1;
    c->bytes += bytes;
    return p;
}

static void cpu_free(llm_runner *r) {
    cpu_runner *c = r->impl;
    if (!c) return;
    free(c->x), free(c->h), free(c->q), free(c->k), free(c->v), free(c->att), free(c->g), free(c->u);
    free(c->cos), free(c->sin), free(c->moe), free(c->last), free(c->logits), free(c->lin_ws);
    free(c->row0), free(c->gseq), free(c->gnew), free(c->gstart), free(c->gkv), free(c->out_entry);
    free(c);
    r->impl = NULL;
}

static int max_i(int a, int b) { return a > b ? a : b; }

static omni_status cpu_init(llm_runner *r) {
    const llm_config *m = llm_model_config(r->model);
    if (llm_model_is_random(r->model, NULL))
        return omni_fail(OMNI_ERR_UNSUPPORTED, "the CPU runner needs a model with weights (random weights of a "
                         "config are made on the device by --device cuda only)");
    cpu_runner *c = calloc(1, sizeof *c);
    if (!c) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    r->impl = c;
    size_t T = (size_t)r->p.max_tokens, S = (size_t)r->p.max_seqs, H = m->hidden, D = m->head_dim;
    size_t qd = (size_t)m->n_heads * D, kd = (size_t)m->n_kv_heads * D, I = m->n_experts ? 0 : (size_t)m->intermediate;
    int fail = 0;
    c->cap_T = (int)T, c->cap_S = (int)S;
    c->x = take(c, sizeof(float) * T * H, &fail);
    c->h = take(c, sizeof(float) * T * H, &fail);
    c->q = take(c, sizeof(float) * T * qd, &fail);
    c->k = take(c, sizeof(float) * T * kd, &fail);
    c->v = take(c, sizeof(float) * T * kd, &fail);
    c->att = take(c, sizeof(float) * T * (qd > H ? qd : H), &fail);
    c->g = take(c, sizeof(float) * T * I, &fail);
    c->u = take(c, sizeof(float) * T * I, &fail);
    c->cos = take(c, sizeof(float) * T * D, &fail);
    c->sin = take(c, sizeof(float) * T * D, &fail);
    if (m->n_experts) c->moe_floats = llm_moe_scratch_floats(&llm_model_weights(r->model)->layers[0].moe, (int)T);
    c->moe = take(c, sizeof(float) * c->moe_floats, &fail);
    c->last = take(c, sizeof(float) * S * H, &fail);
    c->logits = take(c, sizeof(float) * S * (size_t)m->vocab, &fail);
    int max_k = max_i(max_i(m->hidden, (int)qd), max_i(m->intermediate, m->moe_intermediate));
    c->lin_ws_floats = op_linear_ws_floats(max_k, r->p.n_threads);
    c->lin_ws = take(c, sizeof(float) * c->lin_ws_floats, &fail);
    c->row0 = take(c, sizeof(int) * S, &fail);
    c->gseq = take(c, sizeof(int) * S, &fail);
    c->gnew = take(c, sizeof(int) * S, &fail);
    c->gstart = take(c, sizeof(int) * (S + 1), &fail);
    c->gkv = take(c, sizeof(kv_cache *) * S, &fail);
    c->out_entry = take(c, sizeof(int) * S, &fail);
    if (fail) {
        size_t b = c->bytes;
        cpu_free(r);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory for the runner's scratch (%.1f MiB for %zu tokens x %zu "
                         "sequences)", b / 1048576.0, T, S);
    }
    return OMNI_OK;
}

static size_t cpu_scratch_bytes(const llm_runner *r) { return ((const cpu_runner *)r->impl)->bytes; }

static omni_status cpu_cache_init(llm_runner *r, const kv_params *p, kv_cache **out) {
    int saved = omp_get_max_threads(); /* kv_init takes its thread count from the calling thread */
    omp_set_num_threads(r->p.n_threads);
    omni_status st = kv_init(p, out);
    omp_set_num_threads(saved);
    return st;
}

static void cpu_cache_free(llm_runner *r, kv_cache *kv) { kv_free(kv); }

/* ---- the step ------------------------------------------------------------------------------------------ */

/* cos/sin rows [row0, row0+T) of [*, D] from 3-stream positions (fp32, as HF: freq = pos * inv_freq,
 * emb = cat(freq, freq)); pos NULL: text positions base + t on all streams. */
static void rope_tables(const llm_runner *r, const int32_t *pos, int T, int64_t base, int row0) {
    const cpu_runner *c = r->impl;
    const llm_weights *w = llm_model_weights(r->model);
    int D = llm_model_config(r->model)->head_dim, half = D / 2;
    for (int t = 0; t < T; t++) {
        float *cs = c->cos + (int64_t)(row0 + t) * D, *sn = c->sin + (int64_t)(row0 + t) * D;
        for (int j = 0; j < half; j++) {
            float p = pos ? (float)pos[w->rope_stream[j] * T + t] : (float)(base + t);
            float f = p * w->inv_freq[j];
            cs[j] = cs[j + half] = cosf(f);
            sn[j] = sn[j + half] = sinf(f);
        }
    }
}

/* Token embeddings of one input at hidden-state rows [row0, row0 + n_tokens), spans substituted. */
static void embed_input(const llm_runner *r, const llm_input *in, int row0) {
    const cpu_runner *c = r->impl;
    int H = llm_model_config(r->model)->hidden;
    float *x = c->x + (int64_t)row0 * H;
    op_embed(x, &llm_model_weights(r->model)->embed, in->ids, in->n_tokens);
    for (int s = 0; s < in->n_spans; s++) {
        const llm_span *sp = &in->spans[s];
        memcpy(x + (int64_t)sp->start * H, sp->embd, sizeof(float) * sp->len * H);
    }
}

static void deepstack_add(const llm_runner *r, const llm_input *in, int layer, int row0) {
    const cpu_runner *c = r->impl;
    int H = llm_model_config(r->model)->hidden;
    float *x = c->x + (int64_t)row0 * H;
    for (int s = 0; s < in->n_spans; s++) {
        const llm_span *sp = &in->spans[s];
        if (layer < sp->n_deepstack && sp->deepstack[layer])
            op_add(x + (int64_t)sp->start * H, sp->deepstack[layer], (int64_t)sp->len * H);
    }
}

/* Rows grouped by cache: fills row0, gseq, gnew, gstart, gkv; returns the number of groups. */
static int group_by_cache(cpu_runner *c, int n, const llm_batch_entry *b) {
    int ng = 0, row = 0, k = 0;
    for (int i = 0; i < n; i++) {
        int g = 0;
        while (g < ng && c->gkv[g] != b[i].kv) g++;
        if (g == ng) c->gkv[ng++] = b[i].kv;
    }
    for (int g = 0; g < ng; g++) {
        c->gstart[g] = k;
        for (int i = 0; i < n; i++) {
            if (b[i].kv != c->gkv[g]) continue;
            c->row0[i] = row;
            c->gseq[k] = b[i].seq;
            c->gnew[k++] = b[i].in.n_tokens;
            row += b[i].in.n_tokens;
        }
    }
    c->gstart[ng] = k;
    return ng;
}

/* One attention sub-layer over the step's T rows; one kv_forward per cache group on its block of rows. */
static omni_status attention_block(llm_runner *r, const llm_layer_weights *L, int layer, int ng, int T) {
    cpu_runner *c = r->impl;
    const llm_config *m = llm_model_config(r->model);
    int H = m->hidden, D = m->head_dim, Hq = m->n_heads, Hkv = m->n_kv_heads;
    size_t qd = (size_t)Hq * D, kd = (size_t)Hkv * D;
    op_rmsnorm(c->h, c->x, &L->in_norm, T, H, m->rms_eps);
    op_linear_ws(c->q, c->h, T, &L->q, NULL, c->lin_ws, c->lin_ws_floats);
    op_linear_ws(c->k, c->h, T, &L->k, NULL, c->lin_ws, c->lin_ws_floats);
    op_linear_ws(c->v, c->h, T, &L->v, NULL, c->lin_ws, c->lin_ws_floats);
    op_rmsnorm(c->q, c->q, &L->q_norm, T * Hq, D, m->rms_eps);
    op_rmsnorm(c->k, c->k, &L->k_norm, T * Hkv, D, m->rms_eps);
    op_rope_neox(c->q, T, Hq, D, (int64_t)qd, c->cos, c->sin);
    op_rope_neox(c->k, T, Hkv, D, (int64_t)kd, c->cos, c->sin);
    for (int g = 0, row = 0; g < ng; g++) {
        int k0 = c->gstart[g], ns = c->gstart[g + 1] - k0;
        omni_status st = kv_forward(c->gkv[g], layer, ns, c->gseq + k0, c->gnew + k0, c->q + row * qd,
                                    c->k + row * kd, c->v + row * kd, c->att + row * qd, Hq, 1.f / sqrtf((float)D));
        if (st) return st;
        for (int i = 0; i < ns; i++) row += c->gnew[k0 + i];
    }
    op_linear_ws(c->h, c->att, T, &L->o, NULL, c->lin_ws, c->lin_ws_floats);
    op_add(c->x, c->h, (int64_t)T * H);
    return OMNI_OK;
}

static void mlp_block(llm_runner *r, const llm_layer_weights *L, int T) {
    cpu_runner *c = r->impl;
    const llm_config *m = llm_model_config(r->model);
    int H = m->hidden;
    op_rmsnorm(c->h, c->x, &L->post_norm, T, H, m->rms_eps);
    if (m->n_experts) {
        llm_moe_forward_ws(&L->moe, c->att, c->h, T, c->moe, c->lin_ws, c->lin_ws_floats);
    } else {
        int I = m->intermediate;
        op_linear_ws(c->g, c->h, T, &L->gate, NULL, c->lin_ws, c->lin_ws_floats);
        op_linear_ws(c->u, c->h, T, &L->up, NULL, c->lin_ws, c->lin_ws_floats);
        op_silu_mul(c->g, c->g, c->u, (int64_t)T * I);
        op_linear_ws(c->att, c->g, T, &L->down, NULL, c->lin_ws, c->lin_ws_floats);
    }
    op_add(c->x, c->att, (int64_t)T * H);
}

/* Final norm + lm_head: logits_all entries straight into their buffers; the last rows of the others that want
 * logits or a token through one batched GEMM; then copies and sampling. */
static void output_logits(llm_runner *r, int n, llm_batch_entry *b) {
    cpu_runner *c = r->impl;
    const llm_config *m = llm_model_config(r->model);
    const llm_weights *w = llm_model_weights(r->model);
    int H = m->hidden, V = m->vocab, n_out = 0;
    for (int i = 0; i < n; i++) {
        int nt = b[i].in.n_tokens;
        if (b[i].logits_all) {
            float *xs = c->x + (int64_t)c->row0[i] * H;
            op_rmsnorm(xs, xs, &w->norm, nt, H, m->rms_eps);
            op_linear_ws(b[i].logits, xs, nt, &w->lm_head, NULL, c->lin_ws, c->lin_ws_floats);
        } else if (b[i].logits || b[i].sampler) {
            op_rmsnorm(c->last + (int64_t)n_out * H, c->x + (int64_t)(c->row0[i] + nt - 1) * H, &w->norm, 1, H,
                       m->rms_eps);
            c->out_entry[n_out++] = i;
        }
    }
    op_linear_ws(c->logits, c->last, n_out, &w->lm_head, NULL, c->lin_ws, c->lin_ws_floats);
    for (int j = 0; j < n_out; j++) {
        llm_batch_entry *e = &b[c->out_entry[j]];
        const float *row = c->logits + (int64_t)j * V;
        e->nonfinite = op_count_nonfinite(row, V, NULL) > 0;
        if (e->logits) memcpy(e->logits, row, sizeof(float) * V);
        if (e->sampler) e->token = llm_sampler_sample(e->sampler, row);
    }
    for (int i = 0; i < n; i++) {
        if (!b[i].logits_all) continue;
        b[i].nonfinite = op_count_nonfinite(b[i].logits, (int64_t)b[i].in.n_tokens * V, NULL) > 0;
        if (b[i].sampler)
            b[i].token = llm_sampler_sample(b[i].sampler, b[i].logits + (int64_t)(b[i].in.n_tokens - 1) * V);
    }
}

static omni_status cpu_step_body(llm_runner *r, int n, llm_batch_entry *b, int T) {
    cpu_runner *c = r->impl;
    const llm_config *m = llm_model_config(r->model);
    const llm_weights *w = llm_model_weights(r->model);
    int ng = group_by_cache(c, n, b);
    for (int i = 0; i < n; i++) {
        rope_tables(r, b[i].in.pos, b[i].in.n_tokens, kv_seq_len(b[i].kv, b[i].seq), c->row0[i]);
        embed_input(r, &b[i].in, c->row0[i]);
    }
    omni_status st;
    for (int l = 0; l < m->n_layers; l++) {
        if ((st = attention_block(r, &w->layers[l], l, ng, T))) return st;
        mlp_block(r, &w->layers[l], T);
        for (int i = 0; i < n; i++) deepstack_add(r, &b[i].in, l, c->row0[i]);
    }
    for (int g = 0; g < ng; g++)
        if ((st = kv_commit(c->gkv[g], c->gstart[g + 1] - c->gstart[g], c->gseq + c->gstart[g],
                            c->gnew + c->gstart[g])))
            return st;
    output_logits(r, n, b);
    return OMNI_OK;
}

static omni_status cpu_step(llm_runner *r, int n, llm_batch_entry *b, int T) {
    int saved = omp_get_max_threads(); /* this runner's thread count for this step only, on this thread only */
    omp_set_num_threads(r->p.n_threads);
    omni_status st = cpu_step_body(r, n, b, T);
    omp_set_num_threads(saved);
    return st;
}

static float fill_value(uint64_t *s) { /* splitmix64 -> sum of 4 uniforms, centred: variance 1/3, N(0,1)-like */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48)) * (1.f / 65536.f) - 2.f;
}

/* Random K/V through kv_forward, layer by layer, in chunks of max_tokens (q = 0: the attention output is unused). */
static omni_status cpu_fill_random(llm_runner *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed) {
    const llm_config *c = llm_model_config(r->model);
    const size_t T = (size_t)(n_tokens < r->p.max_tokens ? n_tokens : r->p.max_tokens);
    const size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    float *q = calloc(T * qd + 1, sizeof(float)), *k = malloc(sizeof(float) * (T * kd + 1));
    float *v = malloc(sizeof(float) * (T * kd + 1)), *out = malloc(sizeof(float) * (T * qd + 1));
    omni_status st = q && k && v && out ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int saved = omp_get_max_threads();
    omp_set_num_threads(r->p.n_threads);
    for (int64_t done = 0; !st && done < n_tokens;) {
        int n = (int)(n_tokens - done < (int64_t)T ? n_tokens - done : (int64_t)T);
        for (int l = 0; !st && l < c->n_layers; l++) {
            for (size_t i = 0; i < (size_t)n * kd; i++) k[i] = fill_value(&seed), v[i] = fill_value(&seed);
            st = kv_forward(kv, l, 1, &seq, &n, q, k, v, out, c->n_heads, 1.0f);
        }
        if (!st) st = kv_commit(kv, 1, &seq, &n);
        done += n;
    }
    omp_set_num_threads(saved);
    free(q), free(k), free(v), free(out);
    return st;
}

const llm_runner_ops llm_runner_cpu_ops = {
    "cpu", cpu_init, cpu_free, cpu_cache_init, cpu_cache_free, cpu_step, cpu_scratch_bytes, cpu_fill_random,
};
