/* runner.c - the device-agnostic part of llm_runner: params, dispatch to the device's ops table, validation of
 * every batch before any device work, and the llm_forward* convenience wrappers (a temporary CPU runner). */
#include "llm/runner_impl.h"

#ifdef OMNI_HAVE_CUDA_RUNNER
#include "llm/cuda/llm_cuda.h"
#endif

#include <omp.h>
#include <stdlib.h>
#include <string.h>

llm_runner_params llm_runner_default_params(void) {
    llm_runner_params p = {LLM_DEVICE_CPU, 0, 0, 64, 512};
    return p;
}

const char *llm_device_name(llm_device d) { return d == LLM_DEVICE_CUDA ? "cuda" : "cpu"; }

omni_status llm_device_parse(const char *name, llm_device *out) {
    if (name && !strcmp(name, "cpu")) *out = LLM_DEVICE_CPU;
    else if (name && !strcmp(name, "cuda")) *out = LLM_DEVICE_CUDA;
    else return omni_fail(OMNI_ERR_USAGE, "device: expected cpu or cuda, got '%s'", name ? name : "(null)");
    return OMNI_OK;
}

int llm_runner_max_seqs(const llm_model *m, llm_device d, const char **why) {
    if (why) *why = "the runner's sequence limit";
#ifdef OMNI_HAVE_CUDA_RUNNER
    if (d == LLM_DEVICE_CUDA && m) return llm_cuda_max_seqs(llm_model_config(m), why);
#else
    (void)m, (void)d;
#endif
    return LLM_RUNNER_MAX_SEQS;
}

static omni_status runner_ops_for(llm_device d, const llm_runner_ops **ops) {
    *ops = NULL;
    if (d == LLM_DEVICE_CPU) *ops = &llm_runner_cpu_ops;
#ifdef OMNI_HAVE_CUDA_RUNNER
    else if (d == LLM_DEVICE_CUDA) *ops = &llm_runner_cuda_ops;
#endif
    else if (d == LLM_DEVICE_CUDA)
        return omni_fail(OMNI_ERR_RUNTIME, "--device cuda: this build has no CUDA backend; use --device cpu");
    else
        return omni_fail(OMNI_ERR_USAGE, "runner: unknown device %d", (int)d);
    return OMNI_OK;
}

omni_status llm_runner_init(const llm_model *m, const llm_runner_params *p, llm_runner **out) {
    *out = NULL;
    if (!m) return omni_fail(OMNI_ERR_USAGE, "runner: no model");
    if (p->max_seqs < 1 || p->max_seqs > LLM_RUNNER_MAX_SEQS || p->max_tokens < 1 || p->max_tokens > (1 << 20))
        return omni_fail(OMNI_ERR_USAGE, "runner: max_seqs %d (1..%d) and max_tokens %d (1..%d) out of range",
                         p->max_seqs, LLM_RUNNER_MAX_SEQS, p->max_tokens, 1 << 20);
    const llm_runner_ops *ops;
    omni_status st = runner_ops_for(p->device, &ops);
    if (st) return st;
    llm_runner *r = calloc(1, sizeof *r);
    if (!r) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    r->ops = ops;
    r->model = m;
    r->p = *p;
    if (r->p.n_threads <= 0) r->p.n_threads = omp_get_max_threads();
    if (r->p.n_threads < 1) r->p.n_threads = 1;
    if ((st = ops->init(r))) {
        free(r);
        return st;
    }
    *out = r;
    return OMNI_OK;
}

void llm_runner_free(llm_runner *r) {
    if (!r) return;
    r->ops->free(r);
    free(r);
}

const llm_runner_params *llm_runner_get_params(const llm_runner *r) { return &r->p; }
const llm_model *llm_runner_model(const llm_runner *r) { return r->model; }
size_t llm_runner_scratch_bytes(const llm_runner *r) { return r->ops->scratch_bytes(r); }

omni_status llm_runner_cache_init(llm_runner *r, const kv_params *p, kv_cache **out) {
    *out = NULL;
    kv_params q = *p, mk = llm_model_kv_params(r->model);
    if (q.n_layers != mk.n_layers || q.n_kv_heads != mk.n_kv_heads || q.head_dim != mk.head_dim)
        return omni_fail(OMNI_ERR_USAGE, "runner: cache of %d layers x %d KV heads x %d does not match the model "
                         "(%d x %d x %d)", q.n_layers, q.n_kv_heads, q.head_dim, mk.n_layers, mk.n_kv_heads,
                         mk.head_dim);
    q.max_chunk = r->p.max_tokens;
    return r->ops->cache_init(r, &q, out);
}

void llm_runner_cache_free(llm_runner *r, kv_cache *kv) {
    if (kv) r->ops->cache_free(r, kv);
}

/* ---- validation (shared by every device) -------------------------------------------------------------- */

static omni_status check_input(const llm_config *c, const llm_input *in, int e) {
    if (in->n_tokens <= 0 || !in->ids) return omni_fail(OMNI_ERR_USAGE, "empty input chunk (entry %d)", e);
    for (int i = 0; i < in->n_tokens; i++)
        if (in->ids[i] < 0 || in->ids[i] >= c->vocab)
            return omni_fail(OMNI_ERR_USAGE, "token id %d out of range (vocab %d)", in->ids[i], c->vocab);
    if (in->n_spans < 0 || (in->n_spans > 0 && !in->spans))
        return omni_fail(OMNI_ERR_USAGE, "entry %d: bad span list", e);
    for (int s = 0; s < in->n_spans; s++) {
        const llm_span *sp = &in->spans[s];
        if (sp->start < 0 || sp->len < 0 || sp->start + sp->len > in->n_tokens || sp->n_deepstack < 0 ||
            sp->n_deepstack > 4 || (sp->len > 0 && !sp->embd))
            return omni_fail(OMNI_ERR_USAGE, "embedding span %d [%d, +%d) outside the chunk", s, sp->start, sp->len);
    }
    return OMNI_OK;
}

static omni_status check_batch(const llm_runner *r, int n, const llm_batch_entry *b, int *T) {
    if (n < 1 || n > r->p.max_seqs || !b)
        return omni_fail(OMNI_ERR_USAGE, "batch of %d sequences (runner max %d)", n, r->p.max_seqs);
    const llm_config *c = llm_model_config(r->model);
    int64_t tot = 0;
    for (int i = 0; i < n; i++) {
        if (!b[i].kv) return omni_fail(OMNI_ERR_USAGE, "entry %d has no cache", i);
        if (kv_seq_len(b[i].kv, b[i].seq) < 0)
            return omni_fail(OMNI_ERR_USAGE, "entry %d: sequence %d is not in use in its cache", i, b[i].seq);
        if (b[i].logits_all && !b[i].logits) return omni_fail(OMNI_ERR_USAGE, "entry %d: logits_all without logits", i);
        omni_status st = check_input(c, &b[i].in, i);
        if (st) return st;
        for (int j = 0; j < i; j++)
            if (b[j].kv == b[i].kv && b[j].seq == b[i].seq)
                return omni_fail(OMNI_ERR_USAGE, "sequence %d twice in one step", b[i].seq);
        tot += b[i].in.n_tokens;
    }
    if (tot > r->p.max_tokens)
        return omni_fail(OMNI_ERR_USAGE, "step of %lld tokens, more than the runner's max_tokens %d", (long long)tot,
                         r->p.max_tokens);
    *T = (int)tot;
    return OMNI_OK;
}

omni_status llm_runner_step(llm_runner *r, int n, llm_batch_entry *batch) {
    int T = 0;
    omni_status st = check_batch(r, n, batch, &T);
    if (st) return st;
    for (int i = 0; i < n; i++) batch[i].token = -1;
    return r->ops->step(r, n, batch, T);
}

omni_status llm_runner_fill_random(llm_runner *r, kv_cache *kv, int seq, int64_t n_tokens, uint64_t seed) {
    if (!kv || kv_seq_len(kv, seq) < 0 || n_tokens < 0)
        return omni_fail(OMNI_ERR_USAGE, "fill_random: sequence %d of cache %p, %lld tokens", seq, (void *)kv,
                         (long long)n_tokens);
    return r->ops->fill_random(r, kv, seq, n_tokens, seed);
}

/* ---- llm_forward* wrappers ---------------------------------------------------------------------------- */

static omni_status forward_once(const llm_model *m, kv_cache *kv, int n_seq, const int *seqs, const llm_input *in,
                                float *const *logits, int all) {
    if (n_seq < 1 || n_seq > LLM_RUNNER_MAX_SEQS) return omni_fail(OMNI_ERR_USAGE, "batch of %d sequences", n_seq);
    int64_t T = 0;
    for (int i = 0; i < n_seq; i++) T += in[i].n_tokens > 0 ? in[i].n_tokens : 0;
    llm_runner_params p = llm_runner_default_params();
    p.max_seqs = n_seq;
    p.max_tokens = T > 0 && T < (1 << 20) ? (int)T : 1;
    llm_batch_entry *b = calloc((size_t)n_seq, sizeof *b);
    if (!b) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_seq; i++) {
        b[i].kv = kv;
        b[i].seq = seqs[i];
        b[i].in = in[i];
        b[i].logits = logits ? logits[i] : NULL;
        b[i].logits_all = all && b[i].logits;
    }
    llm_runner *r = NULL;
    omni_status st = llm_runner_init(m, &p, &r);
    if (!st) st = llm_runner_step(r, n_seq, b);
    llm_runner_free(r);
    free(b);
    return st;
}

omni_status llm_forward_batch(const llm_model *m, kv_cache *kv, int n_seq, const int *seq_ids, const llm_input *in,
                              float *const *logits) {
    return forward_once(m, kv, n_seq, seq_ids, in, logits, 0);
}

omni_status llm_forward_ex(const llm_model *m, kv_cache *kv, int seq, const llm_input *in, float *logits, int all) {
    return forward_once(m, kv, 1, &seq, in, &logits, all);
}

omni_status llm_forward(const llm_model *m, kv_cache *kv, int seq, const llm_input *in, float *logits) {
    return llm_forward_ex(m, kv, seq, in, logits, 0);
}
