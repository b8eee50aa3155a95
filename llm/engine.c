/* engine.c - requests, admission under a KV byte budget, continuous batching, callbacks (see engine.h).
 *
 * State ownership: `mu` guards the inbox (new requests), the id registry (the `live` list), cancel flags,
 * conversation flags and the published statistics. Everything else (admission, the running set, the caches,
 * the runner) belongs to the stepping thread and is touched without the lock; list nodes are unlinked under the
 * lock so that cancel() can search them safely.
 *
 * A request's sequence grows to at most `limit` tokens (the reservation: pages for `limit` tokens are promised at
 * admission, so kv_forward can never run out of pages); generation stops with LLM_FINISH_CONTEXT when the
 * sequence holds `cap` tokens and another one would have to be fed. */
#define _POSIX_C_SOURCE 200809L
#include "llm/engine.h"

#include "llm/prompt.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE_CAP 1024

typedef struct conv conv;

typedef struct rq {
    int id;
    struct rq *next;        /* the live list (submission order) */
    /* copied inputs */
    int32_t *tokens;        /* [n_prompt] */
    int n_prompt;
    int32_t *pos;           /* [3 * n_prompt] or NULL */
    int rope_delta;
    llm_span *spans, *clip; /* [n_spans] owned copies, and this step's part of them */
    float *span_mem;
    int n_spans;
    int32_t *stop_ids;
    int n_stop_ids;
    char **stop;
    int n_stop, stop_max;
    llm_sampler *sampler;
    int max_tokens, cache, keep_eos, ignore_eos, chunk;
    llm_logits_mode logits;
    llm_callbacks cb;
    struct rq *teacher;     /* NULL or the request whose tokens are fed */
    int n_students;         /* requests that feed on this one (keeps it allocated after it ends) */
    conv *cv;
    /* flags under mu */
    int cancel, admitted_pub, gone;
    /* stepping-thread state */
    int admitted, ended, zombie;
    int seq;
    int64_t base_len;       /* sequence length at admission (conversation history) */
    int64_t pos_base;       /* added to prompt positions: base_len + earlier rope deltas */
    int64_t delta;          /* decode position = sequence length + delta */
    int64_t limit, cap, max_gen;
    int64_t resv_raw, resv_quant, resv_bytes, resv_tokens;
    int cont;               /* holds its cache's step reserve: a prefill chunk may start on a non-empty sequence */
    int n_done;             /* prompt tokens evaluated */
    int32_t *gen;           /* [gen_cap] sampled tokens */
    int n_gen, gen_cap, n_fed, n_decode;
    int final_feed;         /* a conversation turn ended: its last token still goes into the history */
    llm_finish finish;
    llm_detok *dt;
    char *hold;             /* text held back while it may be the start of a stop string */
    int hold_len;
    double t_submit, t_admit, t_first, t_last, prompt_ms, decode_ms;
} rq;

struct conv {
    int id, cache, n_ctx;
    conv *next;
    int seq;                /* -1 until the first turn is admitted */
    int64_t len, delta, resv_raw, resv_quant, resv_bytes, resv_tokens;
    int busy, clear_req, free_req, gone; /* under mu */
    int64_t len_pub;        /* under mu */
};

typedef struct {
    kv_cache *kv;
    int max_seqs, n_seqs, blocked;
    int64_t budget, resv_bytes, resv_raw, resv_quant, resv_tokens; /* promised to admitted sequences: bytes of
                                                the joint peaks (promise_bytes), pages of each kind's peak */
    int64_t step_raw, step_bytes; /* the reserve of prefill chunks in flight (kv_step_extra_of, _bytes_of), held
                                     only while n_cont > 0 */
    int n_cont;             /* admitted requests whose prompt may run a chunk on a non-empty sequence (longer than
                               one chunk, or a conversation turn on a history) and is not done yet */
    int64_t flush_bytes;    /* one flushing decode step's excess over its promise (kv_step_extra_bytes_of): always
                               kept unpromised, so that at least one flush can run in every step */
    int64_t step_left, step_left_raw, flush_left; /* this step: what its prefill chunks left of the step reserve
                                     (bytes, raw pages) and its flushing decode entries left of the unpromised bytes */
    int64_t peak_bytes;     /* the most bytes its pages held during any step (allocator arithmetic) */
    int pool_covers;        /* the raw pool holds max_seqs sequences of max_len at their own prefill peaks: no
                               mix of steps can run it out (only the byte budget binds) */
    int64_t pool_raw, pool_quant, pool_tokens, max_len, raw_pb, quant_pb;
    llm_cache_stats pub;    /* under mu */
} cache_slot;

/* What a batch entry does for its request. */
enum { E_PREFILL, E_DECODE, E_STUDENT, E_FINAL };

struct llm_engine {
    const llm_model *m;
    llm_engine_params p;
    llm_runner *r;
    int V;
    int max_chunk;          /* a prefill chunk always fits beside a full batch of decode tokens */
    cache_slot caches[LLM_ENGINE_MAX_CACHES];
    int n_caches;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rq *live;               /* every request from submit until its end (plus zombie teachers); under mu */
    rq *seen_first, *seen_last; /* the part of `live` the stepping thread took at the start of this step */
    int pending;            /* under mu: something was submitted / cancelled / cleared since the last intake */
    conv *convs;
    int next_id, next_conv, stop;
    /* step scratch (sized at init) */
    llm_batch_entry *batch;
    rq **brq;
    int *bkind, *bchunk0;
    float *logit_rows;      /* [max_seqs + max_logits_rows][V] */
    int32_t *posbuf;        /* [3 * max_tokens] */
    int32_t *feed;          /* [max_seqs] decode input tokens */
    char piece[PIECE_CAP];
};

static double now_ms(void) { return omni_time_ms(); }

const char *llm_finish_name(llm_finish f) {
    static const char *n[] = {"none", "eos", "stop", "length", "context", "cancelled", "error"};
    return f >= 0 && f <= LLM_FINISH_ERROR ? n[f] : "?";
}

llm_request llm_request_default_params(void) {
    llm_request r;
    memset(&r, 0, sizeof r);
    r.sampling = llm_sampler_default_params();
    r.max_tokens = 256;
    return r;
}

llm_engine_params llm_engine_default_params(void) {
    llm_engine_params p;
    memset(&p, 0, sizeof p);
    p.runner = llm_runner_default_params();
    p.prefill_chunk = 512;
    p.max_logits_rows = 64;
    return p;
}

int llm_engine_step_chunks(const llm_engine_params *p) {
    const int k = p->prefill_chunk > 0 ? p->runner.max_tokens / p->prefill_chunk : 1;
    return k < 1 ? 1 : k;
}

llm_cache_params llm_cache_default_params(void) {
    llm_cache_params p;
    memset(&p, 0, sizeof p);
    kv_parse_mode("bf16", &p.fmt);
    p.ctx_tokens = 4096;
    return p;
}

/* ---- init / free ---------------------------------------------------------------------------------------- */

omni_status llm_engine_init(const llm_model *m, const llm_engine_params *p, llm_engine **out) {
    *out = NULL;
    if (p->prefill_chunk < 1 || p->max_logits_rows < 1)
        return omni_fail(OMNI_ERR_USAGE, "engine: prefill_chunk (%d) and max_logits_rows (%d) must be >= 1",
                         p->prefill_chunk, p->max_logits_rows);
    omni_status st = p->tok ? llm_prompt_check_tokens(llm_model_config(m), p->tok) : OMNI_OK;
    if (st) return st; /* the prompts it will be given would be misread */
    llm_engine *e = calloc(1, sizeof *e);
    if (!e) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    e->m = m;
    e->p = *p;
    e->V = llm_model_config(m)->vocab;
    e->next_id = e->next_conv = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    st = llm_runner_init(m, &p->runner, &e->r);
    if (st) {
        llm_engine_free(e);
        return st;
    }
    size_t S = (size_t)e->p.runner.max_seqs, T = (size_t)e->p.runner.max_tokens;
    e->max_chunk = (int)(T > S ? T - S + 1 : 1);
    e->batch = calloc(S, sizeof *e->batch);
    e->brq = calloc(S, sizeof *e->brq);
    e->bkind = calloc(S, sizeof(int));
    e->bchunk0 = calloc(S, sizeof(int));
    e->logit_rows = malloc(sizeof(float) * (S + (size_t)p->max_logits_rows) * e->V);
    e->posbuf = malloc(sizeof(int32_t) * 3 * T);
    e->feed = malloc(sizeof(int32_t) * S);
    if (!e->batch || !e->brq || !e->bkind || !e->bchunk0 || !e->logit_rows || !e->posbuf || !e->feed) {
        llm_engine_free(e);
        return omni_fail(OMNI_ERR_NOMEM, "out of memory for the engine's step buffers");
    }
    *out = e;
    return OMNI_OK;
}

static void rq_free(rq *r) {
    if (!r) return;
    free(r->tokens);
    free(r->pos);
    free(r->spans);
    free(r->clip);
    free(r->span_mem);
    free(r->stop_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    llm_sampler_free(r->sampler);
    free(r->gen);
    llm_detok_free(r->dt);
    free(r->hold);
    free(r);
}

void llm_engine_free(llm_engine *e) {
    if (!e) return;
    for (rq *r = e->live, *n; r; r = n) {
        n = r->next;
        rq_free(r);
    }
    for (conv *c = e->convs, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    for (int i = 0; i < e->n_caches; i++) llm_runner_cache_free(e->r, e->caches[i].kv);
    llm_runner_free(e->r);
    free(e->batch);
    free(e->brq);
    free(e->bkind);
    free(e->bchunk0);
    free(e->logit_rows);
    free(e->posbuf);
    free(e->feed);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

llm_runner *llm_engine_runner(llm_engine *e) { return e->r; }

/* ---- caches and budgets --------------------------------------------------------------------------------- */

static void publish_one(llm_engine *e, int i);

static int64_t pages_bytes(const cache_slot *c, int64_t raw, int64_t quant) {
    return raw * c->raw_pb + quant * c->quant_pb;
}

/* What a sequence of n tokens of cache c is promised: the most bytes it holds at once while it decodes, its
 * flushing steps excepted (kv_seq_budget's promise_bytes), and for the pools the most pages of each kind
 * (decode_raw_pages / quant_pages). Its prefill chunks on a non-empty sequence hold more only with the cache's step
 * reserve, its flushing decode steps only with unpromised bytes (build_batch). n beyond the cache's longest
 * sequence: INT64_MAX bytes (never fits). */
static int64_t seq_need(const cache_slot *c, int64_t n, int64_t *raw, int64_t *quant) {
    kv_budget b;
    if (n > c->max_len || kv_seq_budget(c->kv, n, &b)) {
        *raw = *quant = INT64_MAX / 4;
        return INT64_MAX / 4;
    }
    *raw = b.decode_raw_pages, *quant = b.quant_pages;
    return b.promise_bytes;
}

/* Does a request of n_prompt tokens on a sequence of hist tokens hold the step reserve while it prefills (a chunk
 * from a non-empty sequence may hold the old window's pages beside the new ones)? A first chunk that covers the
 * whole prompt holds no more than the sequence's promise. */
static int needs_reserve(int64_t hist, int n_prompt, int chunk) { return hist > 0 || n_prompt > chunk; }

static int64_t held_step(const cache_slot *c, int cont) { return c->n_cont > 0 || cont ? c->step_bytes : 0; }

/* Pages held by a sequence with exactly n tokens committed. */
static int64_t seq_held(const cache_slot *c, int64_t n, int64_t *raw, int64_t *quant) {
    kv_budget b;
    if (kv_seq_budget(c->kv, n, &b)) return *raw = *quant = 0;
    *raw = b.committed_raw_pages, *quant = b.committed_quant_pages;
    return b.committed_bytes;
}

omni_status llm_engine_add_cache(llm_engine *e, const llm_cache_params *p, int *cache) {
    if (e->n_caches >= LLM_ENGINE_MAX_CACHES)
        return omni_fail(OMNI_ERR_USAGE, "engine: at most %d caches", LLM_ENGINE_MAX_CACHES);
    if (p->budget_bytes < 0 || (p->budget_bytes == 0 && p->ctx_tokens <= 0) || p->max_seqs < 0)
        return omni_fail(OMNI_ERR_USAGE, "cache: budget_bytes (%lld) or ctx_tokens (%d) / max_seqs (%d) invalid",
                         (long long)p->budget_bytes, p->ctx_tokens, p->max_seqs);
    cache_slot c;
    memset(&c, 0, sizeof c);
    kv_params kp = llm_model_kv_params(e->m);
    kp.fmt = p->fmt;
    kp.layer_fmt = p->layer_fmt;
    c.max_seqs = p->max_seqs > 0 ? p->max_seqs : e->p.runner.max_seqs;
    kp.max_seqs = c.max_seqs;
    kp.max_chunk = e->p.runner.max_tokens;
    kv_budget b;
    kp.max_tokens = KV_GROUP;
    omni_status st = kv_budget_of(&kp, 0, &b); /* page sizes of this format (validates it too) */
    if (!st) st = kv_step_extra_of(&kp, &c.step_raw); /* a prefill chunk's pages beyond its sequence's promise */
    if (!st) st = kv_step_extra_bytes_of(&kp, &c.step_bytes, &c.flush_bytes); /* the same in bytes; a flush's */
    if (st) return st;
    c.step_raw *= llm_engine_step_chunks(&e->p);
    c.step_bytes *= llm_engine_step_chunks(&e->p);
    if (p->budget_bytes > 0) { /* tokens enough that pages, not tokens, bind: a sequence of N tokens holds more
                                  than N / 32 - 1 pages of the smaller kind */
        int64_t min_pb = b.quant_page_bytes > 0 && b.quant_page_bytes < b.raw_page_bytes ? b.quant_page_bytes
                                                                                         : b.raw_page_bytes;
        c.budget = p->budget_bytes;
        kp.max_tokens = (c.budget / min_pb + c.max_seqs + 1) * KV_GROUP;
        kp.max_seq_len = 0;
    } else { /* max_seqs sequences of ctx_tokens: the pool for exactly that, the budget its worst case */
        kp.max_tokens = (int64_t)c.max_seqs * p->ctx_tokens;
        kp.max_seq_len = p->ctx_tokens;
        if ((st = kv_budget_of(&kp, p->ctx_tokens, &b))) return st;
        c.budget = (int64_t)c.max_seqs * (b.promise_bytes + b.flush_bytes) + c.step_bytes + c.flush_bytes;
    }
    if ((st = llm_runner_cache_init(e->r, &kp, &c.kv))) return st;
    kv_usage u;
    kv_get_usage(c.kv, &u);
    c.pool_raw = u.raw_pages_free, c.pool_quant = u.quant_pages_free;
    c.raw_pb = u.raw_page_bytes, c.quant_pb = u.quant_page_bytes;
    c.pool_tokens = kp.max_tokens;
    c.max_len = kp.max_seq_len > 0 ? kp.max_seq_len : kp.max_tokens;
    kv_budget peak;
    c.pool_covers = !kv_seq_budget(c.kv, c.max_len, &peak) && c.pool_raw >= (int64_t)c.max_seqs * peak.raw_pages;
    pthread_mutex_lock(&e->mu);
    *cache = e->n_caches;
    e->caches[e->n_caches++] = c;
    publish_one(e, *cache);
    pthread_mutex_unlock(&e->mu);
    return OMNI_OK;
}

/* Can cache c promise `bytes` (and `raw`/`quant` pages, `tokens` tokens) more now, beside its step reserve (held
 * while a request that needs it is admitted, cont: this one does) and one flush's excess? */
static int fits(const cache_slot *c, int64_t raw, int64_t quant, int64_t bytes, int64_t tokens, int cont) {
    return c->resv_bytes + held_step(c, cont) + c->flush_bytes + bytes <= c->budget &&
           (c->pool_covers || c->resv_raw + c->step_raw + raw <= c->pool_raw) &&
           c->resv_quant + quant <= c->pool_quant && c->resv_tokens + tokens <= c->pool_tokens;
}

static void reserve(cache_slot *c, int64_t raw, int64_t quant, int64_t bytes, int64_t tokens) {
    c->resv_raw += raw;
    c->resv_quant += quant;
    c->resv_bytes += bytes;
    c->resv_tokens += tokens;
}

/* r's prompt is done (or r ended): it no longer needs its cache's step reserve. */
static void cont_done(llm_engine *e, rq *r) {
    if (r->cont) r->cont = 0, e->caches[r->cache].n_cont--;
}

/* ---- submit --------------------------------------------------------------------------------------------- */

static conv *conv_find(llm_engine *e, int id) {
    for (conv *c = e->convs; c; c = c->next)
        if (c->id == id && !c->gone) return c;
    return NULL;
}

static rq *rq_find(llm_engine *e, int id) {
    for (rq *r = e->live; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

/* Copies of the request's arrays (spans: one block for every embedding row). */
static omni_status copy_inputs(llm_engine *e, rq *r, const llm_request *q) {
    int H = llm_model_config(e->m)->hidden;
    r->n_prompt = q->n_tokens;
    r->tokens = malloc(sizeof(int32_t) * q->n_tokens);
    if (!r->tokens) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    memcpy(r->tokens, q->tokens, sizeof(int32_t) * q->n_tokens);
    if (q->pos) {
        if (!(r->pos = malloc(sizeof(int32_t) * 3 * (size_t)q->n_tokens))) return omni_fail(OMNI_ERR_NOMEM, "oom");
        memcpy(r->pos, q->pos, sizeof(int32_t) * 3 * (size_t)q->n_tokens);
    }
    r->rope_delta = q->pos ? q->rope_delta : 0;
    size_t rows = 0;
    for (int s = 0; s < q->n_spans; s++) rows += (size_t)q->spans[s].len * (1 + q->spans[s].n_deepstack);
    r->n_spans = q->n_spans;
    if (q->n_spans > 0) {
        r->spans = calloc((size_t)q->n_spans, sizeof(llm_span));
        r->clip = calloc((size_t)q->n_spans, sizeof(llm_span));
        r->span_mem = malloc(sizeof(float) * (rows ? rows : 1) * H);
        if (!r->spans || !r->clip || !r->span_mem) return omni_fail(OMNI_ERR_NOMEM, "out of memory for embeddings");
        float *mem = r->span_mem;
        for (int s = 0; s < q->n_spans; s++) {
            const llm_span *sp = &q->spans[s];
            size_t n = (size_t)sp->len * H;
            r->spans[s] = *sp;
            memcpy(mem, sp->embd, sizeof(float) * n);
            r->spans[s].embd = mem, mem += n;
            for (int d = 0; d < sp->n_deepstack; d++) {
                if (sp->deepstack[d]) memcpy(mem, sp->deepstack[d], sizeof(float) * n);
                else memset(mem, 0, sizeof(float) * n);
                r->spans[s].deepstack[d] = mem, mem += n;
            }
        }
    }
    if (q->n_stop_ids > 0) {
        if (!(r->stop_ids = malloc(sizeof(int32_t) * q->n_stop_ids))) return omni_fail(OMNI_ERR_NOMEM, "oom");
        memcpy(r->stop_ids, q->stop_ids, sizeof(int32_t) * q->n_stop_ids);
        r->n_stop_ids = q->n_stop_ids;
    }
    if (q->n_stop > 0) {
        if (!(r->stop = calloc((size_t)q->n_stop, sizeof(char *)))) return omni_fail(OMNI_ERR_NOMEM, "oom");
        for (int i = 0; i < q->n_stop; i++, r->n_stop++) {
            size_t l = strlen(q->stop[i]);
            if (!(r->stop[i] = malloc(l + 1))) return omni_fail(OMNI_ERR_NOMEM, "oom");
            memcpy(r->stop[i], q->stop[i], l + 1);
            r->stop_max = (int)l > r->stop_max ? (int)l : r->stop_max;
        }
    }
    return OMNI_OK;
}

static omni_status check_request(llm_engine *e, const llm_request *q) {
    const llm_config *c = llm_model_config(e->m);
    if (q->n_tokens <= 0 || !q->tokens) return omni_fail(OMNI_ERR_USAGE, "empty prompt");
    if (q->n_spans < 0 || (q->n_spans > 0 && !q->spans)) return omni_fail(OMNI_ERR_USAGE, "request: bad span list");
    for (int i = 0; i < q->n_tokens; i++)
        if (q->tokens[i] < 0 || q->tokens[i] >= c->vocab)
            return omni_fail(OMNI_ERR_USAGE, "token id %d out of range (vocab %d)", q->tokens[i], c->vocab);
    for (int s = 0; s < q->n_spans; s++) {
        const llm_span *sp = &q->spans[s];
        if (sp->start < 0 || sp->len <= 0 || sp->start + sp->len > q->n_tokens || !sp->embd ||
            sp->n_deepstack < 0 || sp->n_deepstack > 4)
            return omni_fail(OMNI_ERR_USAGE, "embedding span %d [%d, +%d) outside the prompt", s, sp->start, sp->len);
    }
    if (q->cache < 0 || q->cache >= e->n_caches)
        return omni_fail(OMNI_ERR_USAGE, "request: cache %d does not exist (%d caches)", q->cache, e->n_caches);
    if (q->n_stop > 0 && !e->p.tok) return omni_fail(OMNI_ERR_USAGE, "stop strings need the engine's tokenizer");
    if (q->max_tokens < -1) return omni_fail(OMNI_ERR_USAGE, "max_tokens %d (>= 0, or -1)", q->max_tokens);
    if (q->n_ctx < 0) return omni_fail(OMNI_ERR_USAGE, "n_ctx %d < 0", q->n_ctx);
    if (q->logits < LLM_LOGITS_NONE || q->logits > LLM_LOGITS_ALL || q->prefill_chunk < 0)
        return omni_fail(OMNI_ERR_USAGE, "request: bad logits mode or prefill_chunk");
    return OMNI_OK;
}

/* Sizes of the sequence (limit: reservation; cap: capacity; max_gen: most tokens generated). Under mu. */
static omni_status plan_request(llm_engine *e, rq *r, const llm_request *q) {
    int64_t inf = INT64_MAX / 4, gen = q->max_tokens < 0 ? inf : q->max_tokens;
    if (r->teacher) {
        gen = r->teacher->max_gen;
        r->limit = r->n_prompt + (gen > 0 ? gen - 1 : 0);
        r->cap = inf;
    } else if (r->cv) {
        int64_t len = r->cv->clear_req ? 0 : r->cv->len_pub;
        if (len + r->n_prompt > r->cv->n_ctx)
            return omni_fail(OMNI_ERR_USAGE, "prompt of %d tokens does not fit the context (%lld used of %d; raise -c)",
                             r->n_prompt, (long long)len, r->cv->n_ctx);
        r->cap = r->cv->n_ctx;
        r->limit = len + r->n_prompt + gen < r->cap ? len + r->n_prompt + gen : r->cap;
        gen = r->limit - len - r->n_prompt + 1 < gen ? r->limit - len - r->n_prompt + 1 : gen;
    } else {
        if (q->max_tokens < 0 && q->n_ctx == 0)
            return omni_fail(OMNI_ERR_USAGE, "request: max_tokens -1 needs n_ctx (the sequence capacity)");
        if (q->n_ctx > 0 && r->n_prompt > q->n_ctx)
            return omni_fail(OMNI_ERR_USAGE, "prompt of %d tokens does not fit the context of %d tokens", r->n_prompt,
                             q->n_ctx);
        r->cap = q->n_ctx > 0 ? q->n_ctx : inf;
        r->limit = r->n_prompt + (gen > 0 ? gen - 1 : 0);
        if (r->limit > r->cap) r->limit = r->cap;
        gen = r->limit - r->n_prompt + 1 < gen ? r->limit - r->n_prompt + 1 : gen;
    }
    r->max_gen = gen;
    const cache_slot *c = &e->caches[r->cache];
    int64_t raw, quant, bytes = seq_need(c, r->limit, &raw, &quant);
    const int64_t kept = (needs_reserve(r->cv ? r->cv->len_pub : 0, r->n_prompt, r->chunk) ? c->step_bytes : 0) +
                         c->flush_bytes;
    if (bytes + kept > c->budget || (!c->pool_covers && raw + c->step_raw > c->pool_raw) ||
        quant > c->pool_quant || r->limit > c->pool_tokens) {
        char name[64];
        kv_format_name(kv_layer_format(c->kv, 0), name, sizeof name);
        if (r->limit > c->max_len || r->limit > c->pool_tokens)
            return omni_fail(OMNI_ERR_NOMEM, "request of up to %lld tokens can never fit the budget of cache %d (%s, "
                             "%.2f MiB: sequences of at most %lld tokens)", (long long)r->limit, r->cache, name,
                             c->budget / 1048576.0, (long long)(c->max_len < c->pool_tokens ? c->max_len : c->pool_tokens));
        return omni_fail(OMNI_ERR_NOMEM, "request of up to %lld tokens needs %.2f MiB of KV pages, more than the whole "
                         "budget of cache %d (%s, %.2f MiB, %.2f MiB of it kept for prefill steps)", (long long)r->limit,
                         bytes / 1048576.0, r->cache, name, c->budget / 1048576.0, kept / 1048576.0);
    }
    r->gen_cap = (int)(gen < inf ? gen : r->limit - r->n_prompt + 1) + 1;
    return OMNI_OK;
}

/* One request: copy, validate against engine state, link into the live list. Under mu. */
static omni_status submit_one(llm_engine *e, const llm_request *q, rq **group, int gi, rq **out) {
    *out = NULL;
    omni_status st = check_request(e, q);
    if (st) return st;
    rq *r = calloc(1, sizeof *r);
    if (!r) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    r->seq = -1;
    r->cache = q->cache;
    r->max_tokens = q->max_tokens;
    r->keep_eos = q->keep_eos;
    r->ignore_eos = q->ignore_eos;
    r->chunk = q->prefill_chunk > 0 ? q->prefill_chunk : e->p.prefill_chunk;
    if (r->chunk > e->max_chunk) r->chunk = e->max_chunk;
    if (q->logits == LLM_LOGITS_ALL && r->chunk > e->p.max_logits_rows) r->chunk = e->p.max_logits_rows;
    r->logits = q->logits;
    r->cb = q->cb;
    r->t_submit = now_ms();
    if (q->teacher < 0 && -q->teacher <= gi) r->teacher = group[-q->teacher - 1];
    else if (q->teacher > 0) r->teacher = rq_find(e, q->teacher);
    if (q->teacher && (!r->teacher || r->teacher->teacher || r->teacher->gone))
        st = omni_fail(OMNI_ERR_USAGE, "request: teacher %d is not a running request that samples", q->teacher);
    if (!st && q->conv) {
        r->cv = conv_find(e, q->conv);
        if (!r->cv || r->cv->free_req) st = omni_fail(OMNI_ERR_USAGE, "request: no conversation %d", q->conv);
        else if (r->cv->busy) st = omni_fail(OMNI_ERR_USAGE, "conversation %d already has a request running", q->conv);
        else if (r->cv->cache != q->cache)
            st = omni_fail(OMNI_ERR_USAGE, "conversation %d lives in cache %d, not %d", q->conv, r->cv->cache, q->cache);
        else if (r->teacher) st = omni_fail(OMNI_ERR_USAGE, "a teacher-forced request cannot be a conversation turn");
    }
    if (!st) st = copy_inputs(e, r, q);
    if (!st) st = plan_request(e, r, q);
    if (!st && !r->teacher) {
        r->gen = malloc(sizeof(int32_t) * (size_t)r->gen_cap);
        if (!r->gen || llm_sampler_init(&q->sampling, e->V, &r->sampler)) st = omni_fail(OMNI_ERR_NOMEM, "oom");
    }
    if (!st && !r->teacher && e->p.tok && !(r->dt = llm_detok_new(e->p.tok, 1))) st = omni_fail(OMNI_ERR_NOMEM, "oom");
    if (!st && r->n_stop && !(r->hold = malloc((size_t)r->stop_max + PIECE_CAP + 1)))
        st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (st) {
        rq_free(r);
        return st;
    }
    *out = r;
    return OMNI_OK;
}

omni_status llm_engine_submit_n(llm_engine *e, const llm_request *q, int n, int *ids) {
    if (n < 1 || n > 64) return omni_fail(OMNI_ERR_USAGE, "submit: %d requests at once (1..64)", n);
    rq *group[64];
    omni_status st = OMNI_OK;
    pthread_mutex_lock(&e->mu);
    int k = 0;
    for (; k < n && !st; k++) st = submit_one(e, &q[k], group, k, &group[k]);
    if (st) {
        for (int i = 0; i < k - 1; i++) rq_free(group[i]);
        pthread_mutex_unlock(&e->mu);
        return st;
    }
    rq **tail = &e->live;
    while (*tail) tail = &(*tail)->next;
    for (int i = 0; i < n; i++) {
        rq *r = group[i];
        r->id = e->next_id++;
        ids[i] = r->id;
        if (r->teacher) r->teacher->n_students++;
        if (r->cv) r->cv->busy = 1;
        *tail = r, tail = &r->next;
    }
    e->pending = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return OMNI_OK;
}

omni_status llm_engine_submit(llm_engine *e, const llm_request *r, int *id) { return llm_engine_submit_n(e, r, 1, id); }

omni_status llm_engine_cancel(llm_engine *e, int id) {
    pthread_mutex_lock(&e->mu);
    rq *r = rq_find(e, id);
    int ok = r && !r->gone && !r->zombie;
    if (ok) r->cancel = 1, e->pending = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return ok ? OMNI_OK : omni_fail(OMNI_ERR_USAGE, "cancel: no running request %d", id);
}

/* ---- conversations -------------------------------------------------------------------------------------- */

omni_status llm_engine_conv_new(llm_engine *e, int cache, int n_ctx, int *out) {
    pthread_mutex_lock(&e->mu);
    omni_status st = OMNI_OK;
    if (cache < 0 || cache >= e->n_caches) st = omni_fail(OMNI_ERR_USAGE, "conversation: no cache %d", cache);
    else if (n_ctx < 1) st = omni_fail(OMNI_ERR_USAGE, "conversation: n_ctx %d < 1", n_ctx);
    conv *c = st ? NULL : calloc(1, sizeof *c);
    if (!st && !c) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) {
        c->id = e->next_conv++;
        c->cache = cache;
        c->n_ctx = n_ctx;
        c->seq = -1;
        c->next = e->convs;
        e->convs = c;
        *out = c->id;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

omni_status llm_engine_conv_clear(llm_engine *e, int id) {
    pthread_mutex_lock(&e->mu);
    conv *c = conv_find(e, id);
    omni_status st = !c || c->free_req ? omni_fail(OMNI_ERR_USAGE, "no conversation %d", id)
                     : c->busy     ? omni_fail(OMNI_ERR_USAGE, "conversation %d has a request running", id)
                                   : OMNI_OK;
    if (!st) c->clear_req = 1, c->len_pub = 0, e->pending = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return st;
}

void llm_engine_conv_free(llm_engine *e, int id) {
    pthread_mutex_lock(&e->mu);
    conv *c = conv_find(e, id);
    if (c) {
        c->free_req = 1;
        e->pending = 1;
        for (rq *r = e->live; r; r = r->next)
            if (r->cv == c && !r->gone) r->cancel = 1;
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int64_t llm_engine_conv_len(llm_engine *e, int id) {
    pthread_mutex_lock(&e->mu);
    conv *c = conv_find(e, id);
    int64_t n = c && !c->free_req ? c->len_pub : -1;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Stepping thread: apply clear/free requests. A clear is refused while a turn runs, so a turn busy now came
 * after it and is not admitted yet: the clear goes first. A free waits for the (cancelled) turn's end. */
static void conv_apply(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    for (conv **pp = &e->convs; *pp;) {
        conv *c = *pp;
        cache_slot *cs = &e->caches[c->cache];
        if (c->clear_req || (c->free_req && !c->busy)) {
            if (c->seq >= 0) {
                if (c->free_req) {
                    kv_seq_remove(cs->kv, c->seq);
                    cs->n_seqs--;
                    c->seq = -1;
                } else {
                    kv_seq_clear(cs->kv, c->seq);
                }
            }
            reserve(cs, -c->resv_raw, -c->resv_quant, -c->resv_bytes, -c->resv_tokens);
            c->resv_raw = c->resv_quant = c->resv_bytes = c->resv_tokens = 0;
            c->len = c->delta = 0;
            c->clear_req = 0;
            cs->blocked = 0;
        }
        if (c->free_req && !c->busy) {
            *pp = c->next;
            free(c);
            continue;
        }
        pp = &c->next;
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- admission ------------------------------------------------------------------------------------------ */

static int rq_active(const rq *r) { return !r->ended && !r->zombie; }

/* Reserve the pages of r's whole life in its cache and give it a sequence; 0 when it does not fit now. */
static int admit(llm_engine *e, rq *r) {
    cache_slot *c = &e->caches[r->cache];
    conv *cv = r->cv;
    if (cv) { /* the turn's limit counts from the history as it is now */
        int64_t gen = r->max_tokens < 0 ? INT64_MAX / 4 : r->max_tokens;
        r->limit = cv->len + r->n_prompt + gen < r->cap ? cv->len + r->n_prompt + gen : r->cap;
        if (cv->len + r->n_prompt > r->cap) return -1; /* the history grew since submit */
    }
    int64_t raw, quant, bytes = seq_need(c, r->limit, &raw, &quant);
    int64_t tokens = r->limit;
    if (cv) raw -= cv->resv_raw, quant -= cv->resv_quant, bytes -= cv->resv_bytes, tokens -= cv->resv_tokens;
    raw = raw > 0 ? raw : 0, quant = quant > 0 ? quant : 0, bytes = bytes > 0 ? bytes : 0;
    tokens = tokens > 0 ? tokens : 0;
    int need_seq = !cv || cv->seq < 0, cont = needs_reserve(cv ? cv->len : 0, r->n_prompt, r->chunk);
    if ((need_seq && c->n_seqs >= c->max_seqs) || !fits(c, raw, quant, bytes, tokens, cont)) return 0;
    if (need_seq) {
        int s;
        if (kv_seq_add(c->kv, &s)) return 0;
        c->n_seqs++;
        if (cv) cv->seq = s;
        r->seq = s;
    } else {
        r->seq = cv->seq;
    }
    reserve(c, raw, quant, bytes, tokens);
    if (cont) r->cont = 1, c->n_cont++;
    if (cv) {
        cv->resv_raw += raw, cv->resv_quant += quant, cv->resv_bytes += bytes, cv->resv_tokens += tokens;
        r->base_len = cv->len;
        r->pos_base = cv->len + cv->delta;
        r->delta = cv->delta + r->rope_delta;
    } else {
        r->resv_raw = raw, r->resv_quant = quant, r->resv_bytes = bytes, r->resv_tokens = tokens;
        r->delta = r->rope_delta;
    }
    r->admitted = 1;
    r->t_admit = now_ms();
    return 1;
}

/* ---- ending requests ------------------------------------------------------------------------------------ */

static void deliver(rq *r, int32_t tok, const char *s, int n) {
    if (r->cb.on_token) r->cb.on_token(r->cb.user, r->id, tok, s, n);
}

/* Final text (detokenizer remainder and held-back text), stats, pages back, on_done. */
static void finish(llm_engine *e, rq *r, llm_finish why, omni_status st, const char *msg) {
    if (r->ended) return;
    r->ended = 1;
    r->finish = r->finish ? r->finish : why;
    cont_done(e, r);
    int n = 0;
    if (r->dt && r->finish != LLM_FINISH_STOP) {
        if (r->hold && r->hold_len) memcpy(e->piece, r->hold, (size_t)(n = r->hold_len));
        n += llm_detok_flush(r->dt, e->piece + n, PIECE_CAP - n);
    }
    if (n > 0) deliver(r, -1, e->piece, n);
    llm_request_stats s;
    memset(&s, 0, sizeof s);
    s.finish = r->finish;
    s.status = st;
    if (msg) snprintf(s.error, sizeof s.error, "%s", msg);
    s.n_prompt = r->n_done;
    s.n_gen = r->teacher ? r->n_fed + (r->n_done == r->n_prompt) : r->n_gen;
    s.n_decode = r->n_decode;
    s.queue_ms = r->admitted ? r->t_admit - r->t_submit : now_ms() - r->t_submit;
    s.ttft_ms = r->n_gen > 0 ? r->t_first - r->t_submit : 0;
    s.prompt_ms = r->prompt_ms;
    s.decode_ms = r->decode_ms;
    s.tokens_per_s = r->n_gen > 1 && r->t_last > r->t_first ? (r->n_gen - 1) * 1e3 / (r->t_last - r->t_first) : 0;
    cache_slot *c = &e->caches[r->cache];
    if (r->seq >= 0) {
        int64_t len = kv_seq_len(c->kv, r->seq), raw, quant;
        s.kv_tokens = len;
        s.kv_bytes = seq_held(c, len, &raw, &quant);
        if (r->cv && st == OMNI_OK) { /* the history stays: keep pages for what it holds now */
            int64_t hr, hq, hb = seq_need(c, len, &hr, &hq);
            reserve(c, hr - r->cv->resv_raw, hq - r->cv->resv_quant, hb - r->cv->resv_bytes, len - r->cv->resv_tokens);
            r->cv->resv_raw = hr, r->cv->resv_quant = hq, r->cv->resv_bytes = hb, r->cv->resv_tokens = len;
            r->cv->len = len;
            r->cv->delta = r->delta;
        } else if (r->cv) { /* a failed step leaves the sequence unusable: the history is lost */
            kv_seq_clear(c->kv, r->seq);
            reserve(c, -r->cv->resv_raw, -r->cv->resv_quant, -r->cv->resv_bytes, -r->cv->resv_tokens);
            r->cv->resv_raw = r->cv->resv_quant = r->cv->resv_bytes = r->cv->resv_tokens = 0;
            r->cv->len = r->cv->delta = 0;
        } else {
            kv_seq_remove(c->kv, r->seq);
            c->n_seqs--;
            reserve(c, -r->resv_raw, -r->resv_quant, -r->resv_bytes, -r->resv_tokens);
        }
        c->blocked = 0;
    }
    if (r->cb.on_done) r->cb.on_done(r->cb.user, r->id, &s);
}

/* Unlink ended requests (under mu); a teacher with students left stays as a zombie until they end. */
static void reap(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    for (rq **pp = &e->live; *pp;) {
        rq *r = *pp;
        if (r->ended && !r->gone) {
            r->gone = 1;
            if (r->cv) r->cv->busy = 0, r->cv->len_pub = r->cv->len;
            if (r->teacher) r->teacher->n_students--;
        }
        if (r->gone && r->n_students == 0) {
            *pp = r->next;
            rq_free(r);
            continue;
        }
        r->zombie = r->gone;
        pp = &r->next;
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- tokens --------------------------------------------------------------------------------------------- */

static int is_stop_id(const llm_engine *e, const rq *r, int32_t t, llm_finish *why) {
    if (!r->ignore_eos && llm_config_is_eos(llm_model_config(e->m), t)) return *why = LLM_FINISH_EOS, 1;
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == t) return *why = LLM_FINISH_STOP, 1;
    return 0;
}

/* Text of a new piece through the stop-string filter: returns the bytes to show now (in e->piece); sets *hit when
 * a stop string completed (the text before it is shown, the rest dropped). */
static int filter_stop(llm_engine *e, rq *r, int n, int *hit) {
    memcpy(r->hold + r->hold_len, e->piece, (size_t)n);
    r->hold_len += n;
    r->hold[r->hold_len] = 0;
    int cut = -1;
    for (int i = 0; i < r->n_stop; i++) {
        char *m = strstr(r->hold, r->stop[i]);
        if (m && (cut < 0 || m - r->hold < cut)) cut = (int)(m - r->hold);
    }
    if (cut >= 0) {
        memcpy(e->piece, r->hold, (size_t)cut);
        r->hold_len = 0;
        *hit = 1;
        return cut;
    }
    int keep = 0; /* longest tail that may still grow into a stop string */
    for (int i = 0; i < r->n_stop; i++) {
        int ls = (int)strlen(r->stop[i]);
        for (int k = ls - 1 < r->hold_len ? ls - 1 : r->hold_len; k > keep; k--)
            if (!memcmp(r->hold + r->hold_len - k, r->stop[i], (size_t)k)) {
                keep = k;
                break;
            }
    }
    int out = r->hold_len - keep;
    memcpy(e->piece, r->hold, (size_t)out);
    memmove(r->hold, r->hold + out, (size_t)keep);
    r->hold_len = keep;
    return out;
}

/* A sampled token: record, show, decide whether the request goes on. */
static void on_sampled(llm_engine *e, rq *r, int32_t t) {
    double now = now_ms();
    if (r->n_gen == 0) r->t_first = now;
    r->t_last = now;
    r->gen[r->n_gen++] = t;
    llm_finish why = LLM_FINISH_NONE;
    int stop = is_stop_id(e, r, t, &why), n = 0, hit = 0;
    if (r->dt && !stop) n = llm_detok_push(r->dt, t, e->piece, PIECE_CAP);
    if (r->n_stop && n > 0) n = filter_stop(e, r, n, &hit);
    if (hit) stop = 1, why = LLM_FINISH_STOP;
    deliver(r, t, e->piece, n);
    int64_t len = kv_seq_len(e->caches[r->cache].kv, r->seq);
    if (!stop && r->max_tokens >= 0 && r->n_gen >= r->max_tokens) why = LLM_FINISH_LENGTH;
    else if (!stop && len >= r->cap) why = LLM_FINISH_CONTEXT;
    else if (!stop && r->n_gen >= r->gen_cap) why = LLM_FINISH_LENGTH; /* the reservation's end */
    if (why == LLM_FINISH_NONE) return;
    r->finish = why;
    /* a conversation keeps its last token (a stop token only with keep_eos) when there is room */
    int keep = why == LLM_FINISH_LENGTH || ((why == LLM_FINISH_EOS || why == LLM_FINISH_STOP) && r->keep_eos);
    if (r->cv && keep && len < r->cap && len < r->limit) r->final_feed = 1;
    else finish(e, r, why, OMNI_OK, NULL);
}

/* ---- the step ------------------------------------------------------------------------------------------- */

/* Iteration over the requests taken at intake (their links are stable until reap). */
static rq *next_seen(const llm_engine *e, const rq *r) { return r == e->seen_last ? NULL : r->next; }

/* Token a request feeds this step as a decode input, or -1 (nothing to feed yet). */
static int32_t decode_input(const rq *r) {
    if (r->n_done < r->n_prompt) return -1;
    if (r->teacher) {
        const rq *t = r->teacher;
        int avail = t->n_gen - (t->finish ? 1 : 0);
        return r->n_fed < avail ? t->gen[r->n_fed] : -1;
    }
    if (r->final_feed) return r->gen[r->n_gen - 1];
    return r->n_gen > r->n_fed && !r->finish ? r->gen[r->n_gen - 1] : -1;
}

/* A student whose teacher ended and which consumed all it will get ends the same way. */
static void end_students(llm_engine *e) {
    for (rq *r = e->seen_first; r; r = next_seen(e, r)) {
        if (!rq_active(r) || !r->teacher || !r->teacher->finish) continue;
        const rq *t = r->teacher;
        int need = t->n_gen > 0 ? t->n_gen - 1 : 0;
        if (t->n_gen == 0 && t->finish != LLM_FINISH_LENGTH && r->n_done < r->n_prompt)
            finish(e, r, LLM_FINISH_CANCELLED, OMNI_OK, NULL); /* nothing will come */
        else if (r->n_done == r->n_prompt && r->n_fed >= need)
            finish(e, r, t->finish == LLM_FINISH_ERROR ? LLM_FINISH_CANCELLED : t->finish, OMNI_OK, NULL);
    }
}

/* Positions of `n` prompt tokens from c0 (T, H, W blocks) into dst. */
static void prompt_positions(const rq *r, int c0, int n, int32_t *dst) {
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < n; i++)
            dst[s * n + i] = (int32_t)((r->pos ? r->pos[(size_t)s * r->n_prompt + c0 + i] : c0 + i) + r->pos_base);
}

/* The part of r's spans inside prompt tokens [c0, c0 + n), relative to the chunk. */
static int clip_spans(llm_engine *e, rq *r, int c0, int n) {
    int H = llm_model_config(e->m)->hidden, k = 0;
    for (int i = 0; i < r->n_spans; i++) {
        const llm_span *sp = &r->spans[i];
        int a = sp->start > c0 ? sp->start : c0, b = sp->start + sp->len < c0 + n ? sp->start + sp->len : c0 + n;
        if (a >= b) continue;
        llm_span x = *sp;
        int64_t off = (int64_t)(a - sp->start) * H;
        x.start = a - c0;
        x.len = b - a;
        x.embd = sp->embd + off;
        for (int d = 0; d < x.n_deepstack; d++) x.deepstack[d] = sp->deepstack[d] + off;
        r->clip[k++] = x;
    }
    return k;
}

/* What a step of len tokens of r holds beyond r's promise while it is in flight: bytes, and raw pages beyond the
 * pool's share (0 when within). A prefill chunk takes them from the cache's step reserve (kv_step_extra_bytes_of /
 * kv_step_extra_of bound every chunk's excess: one always fits an unused reserve), a flushing decode step its bytes
 * from the unpromised ones (at least flush_bytes: one always fits). */
static int64_t step_excess(const cache_slot *c, const rq *r, int len, int64_t *raw_excess) {
    const int64_t L0 = kv_seq_len(c->kv, r->seq);
    const int64_t have_raw = r->cv ? r->cv->resv_raw : r->resv_raw, have = r->cv ? r->cv->resv_bytes : r->resv_bytes;
    int64_t raw, quant;
    kv_step_pages(c->kv, L0, L0 + len, &raw, &quant);
    *raw_excess = raw > have_raw ? raw - have_raw : 0;
    const int64_t bytes = pages_bytes(c, raw, quant);
    return bytes > have ? bytes - have : 0;
}

/* Entries: decode tokens of running requests first (a decode step that flushes a window block waits for a later
 * step when this step's flushes used up the unpromised bytes), then prefill chunks in admission order (a chunk waits
 * when the cache's step reserve is used up). Returns n. */
static int build_batch(llm_engine *e) {
    int S = e->p.runner.max_seqs, budget = e->p.runner.max_tokens, n = 0, rows = e->p.max_logits_rows, used = 0;
    for (int i = 0; i < e->n_caches; i++) {
        cache_slot *c = &e->caches[i];
        c->step_left = held_step(c, 0), c->step_left_raw = c->step_raw;
        c->flush_left = c->budget - c->resv_bytes - c->step_left;
    }
    for (rq *r = e->seen_first; r && n < S && used < budget; r = next_seen(e, r)) {
        if (!rq_active(r) || !r->admitted) continue;
        int32_t t = decode_input(r);
        if (t < 0) continue;
        cache_slot *cs = &e->caches[r->cache];
        int64_t raw_x, excess = step_excess(cs, r, 1, &raw_x); /* raw_x: 0 (decode_raw_pages covers a decode step) */
        if (excess > cs->flush_left) continue;
        cs->flush_left -= excess;
        llm_batch_entry *b = &e->batch[n];
        e->feed[n] = t;
        int64_t L = kv_seq_len(e->caches[r->cache].kv, r->seq) + r->delta;
        int32_t *p = e->posbuf + 3 * used;
        p[0] = p[1] = p[2] = (int32_t)L;
        *b = (llm_batch_entry){e->caches[r->cache].kv, r->seq, {1, &e->feed[n], p, 0, NULL}, NULL, 0, NULL, -1, 0};
        e->bkind[n] = r->teacher ? E_STUDENT : r->final_feed ? E_FINAL : E_DECODE;
        if (e->bkind[n] != E_FINAL && r->logits != LLM_LOGITS_NONE) b->logits = e->logit_rows + (size_t)n * e->V;
        if (e->bkind[n] == E_DECODE) b->sampler = r->sampler;
        e->brq[n++] = r;
        used++;
    }
    float *all_rows = e->logit_rows + (size_t)S * e->V;
    for (rq *r = e->seen_first; r && n < S && used < budget; r = next_seen(e, r)) {
        if (!rq_active(r) || !r->admitted || r->n_done >= r->n_prompt) continue;
        int c0 = r->n_done, len = r->n_prompt - c0;
        len = len < r->chunk ? len : r->chunk; /* never shortened by others: results do not depend on the batch */
        if (len > budget - used || (r->logits == LLM_LOGITS_ALL && len > rows)) continue;
        cache_slot *cs = &e->caches[r->cache];
        int64_t raw_x, excess = step_excess(cs, r, len, &raw_x);
        if (excess > cs->step_left || raw_x > cs->step_left_raw) continue;
        cs->step_left -= excess, cs->step_left_raw -= raw_x;
        int last = c0 + len == r->n_prompt;
        llm_batch_entry *b = &e->batch[n];
        int32_t *p = e->posbuf + 3 * used;
        prompt_positions(r, c0, len, p);
        int ns = clip_spans(e, r, c0, len);
        *b = (llm_batch_entry){e->caches[r->cache].kv, r->seq, {len, r->tokens + c0, p, ns, r->clip}, NULL, 0, NULL,
                               -1, 0};
        if (r->logits == LLM_LOGITS_ALL) {
            b->logits = all_rows, b->logits_all = 1;
            all_rows += (size_t)len * e->V, rows -= len;
        } else if (last && r->logits == LLM_LOGITS_LAST) {
            b->logits = e->logit_rows + (size_t)n * e->V;
        }
        if (last && !r->teacher && r->max_tokens != 0) b->sampler = r->sampler;
        e->bkind[n] = E_PREFILL;
        e->bchunk0[n] = c0;
        e->brq[n++] = r;
        used += len;
    }
    return n;
}

static void emit_logits(const llm_engine *e, const rq *r, int pos, const float *row) {
    if (r->cb.on_logits) r->cb.on_logits(r->cb.user, r->id, pos, row, e->V);
}

/* After the runner: progress, callbacks, stop decisions. */
static void process_batch(llm_engine *e, int n, double ms) {
    for (int i = 0; i < n; i++) {
        rq *r = e->brq[i];
        llm_batch_entry *b = &e->batch[i];
        if (b->nonfinite) { /* this request fails (exit 4 in the CLI); the others of the step go on */
            finish(e, r, LLM_FINISH_ERROR, OMNI_ERR_RUNTIME,
                   "the model produced non-finite logits (NaN/Inf): corrupt weights or config values?");
            continue;
        }
        if (e->bkind[i] == E_PREFILL) {
            int c0 = e->bchunk0[i], len = b->in.n_tokens;
            r->n_done += len;
            if (r->n_done == r->n_prompt) cont_done(e, r);
            r->prompt_ms += ms;
            if (b->logits_all)
                for (int j = 0; j < len; j++) emit_logits(e, r, c0 + j, b->logits + (size_t)j * e->V);
            else if (b->logits) emit_logits(e, r, r->n_prompt - 1, b->logits);
            if (r->n_done == r->n_prompt && b->sampler) on_sampled(e, r, b->token);
            else if (r->n_done == r->n_prompt && !r->teacher && r->max_tokens == 0)
                finish(e, r, LLM_FINISH_LENGTH, OMNI_OK, NULL);
            continue;
        }
        r->n_fed++;
        r->n_decode++;
        r->decode_ms += ms;
        if (b->logits) emit_logits(e, r, r->n_prompt + r->n_fed - 1, b->logits);
        if (e->bkind[i] == E_DECODE) on_sampled(e, r, b->token);
        else if (e->bkind[i] == E_FINAL) finish(e, r, r->finish, OMNI_OK, NULL);
    }
}

/* Snapshot of cache i for other threads (under mu). */
static void publish_one(llm_engine *e, int i) {
    {
        cache_slot *c = &e->caches[i];
        llm_cache_stats s;
        memset(&s, 0, sizeof s);
        kv_usage u;
        kv_get_usage(c->kv, &u);
        s.budget_bytes = c->budget;
        s.reserved_bytes = c->resv_bytes;
        s.step_reserve_bytes = held_step(c, 0) + c->flush_bytes;
        s.peak_bytes = c->peak_bytes;
        s.used_bytes = u.total_bytes;
        s.used_tokens = u.cells_used;
        s.raw_pages = u.raw_pages, s.quant_pages = u.quant_pages;
        s.raw_pages_free = u.raw_pages_free, s.quant_pages_free = u.quant_pages_free;
        s.n_seqs = u.n_seqs, s.max_seqs = u.max_seqs;
        for (rq *r = e->live; r; r = r->next)
            if (r->cache == i && rq_active(r)) r->admitted ? s.running++ : s.waiting++;
        kv_format_name(kv_layer_format(c->kv, 0), s.format, sizeof s.format);
        c->pub = s;
    }
}

static void publish(llm_engine *e) {
    for (int i = 0; i < e->n_caches; i++) publish_one(e, i);
}

/* Start of a step: take the inbox and the cancel flags (under mu), admit in order. */
static void intake(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->pending = 0;
    e->seen_first = e->live;
    e->seen_last = NULL;
    for (rq *r = e->live; r; r = r->next) {
        if (r->cancel && rq_active(r)) r->finish = LLM_FINISH_CANCELLED;
        e->seen_last = r;
    }
    if (!e->seen_last) e->seen_first = NULL;
    pthread_mutex_unlock(&e->mu);
    for (rq *r = e->seen_first; r; r = next_seen(e, r))
        if (rq_active(r) && r->finish == LLM_FINISH_CANCELLED) finish(e, r, LLM_FINISH_CANCELLED, OMNI_OK, NULL);
    conv_apply(e);
    for (int i = 0; i < e->n_caches; i++) e->caches[i].blocked = 0;
    for (rq *r = e->seen_first; r; r = next_seen(e, r)) {
        if (!rq_active(r) || r->admitted) continue;
        cache_slot *c = &e->caches[r->cache];
        if (c->blocked || (r->teacher && !r->teacher->admitted)) continue;
        int a = admit(e, r);
        if (a < 0) finish(e, r, LLM_FINISH_CONTEXT, OMNI_OK, NULL);
        else if (!a) c->blocked = 1; /* first come, first served within a cache */
    }
}

static int count_left(const llm_engine *e) {
    int n = 0;
    for (const rq *r = e->live; r; r = r->next) n += rq_active(r);
    return n;
}

/* The bytes each cache's pages hold while this batch is in flight (committed pages + every entry's step, by the
 * allocator's arithmetic kv_step_pages): its peak is published (llm_cache_stats.peak_bytes). */
static void note_peak(llm_engine *e, int n) {
    int64_t add[LLM_ENGINE_MAX_CACHES] = {0};
    for (int i = 0; i < n; i++) {
        const cache_slot *c = &e->caches[e->brq[i]->cache];
        const int64_t L0 = kv_seq_len(c->kv, e->batch[i].seq);
        int64_t r0, q0, r1, q1;
        kv_step_pages(c->kv, L0, L0, &r0, &q0);
        kv_step_pages(c->kv, L0, L0 + e->batch[i].in.n_tokens, &r1, &q1);
        add[e->brq[i]->cache] += pages_bytes(c, r1 - r0, q1 - q0);
    }
    for (int k = 0; k < e->n_caches; k++) {
        kv_usage u;
        kv_get_usage(e->caches[k].kv, &u);
        if (u.total_bytes + add[k] > e->caches[k].peak_bytes) e->caches[k].peak_bytes = u.total_bytes + add[k];
    }
}

/* One step; *did: entries run. */
static omni_status step(llm_engine *e, int *left, int *did) {
    intake(e);
    end_students(e);
    int n = build_batch(e);
    *did = n;
    note_peak(e, n);
    if (n > 0) {
        double t0 = now_ms();
        omni_status st = llm_runner_step(e->r, n, e->batch);
        double ms = now_ms() - t0;
        if (st) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", omni_last_error());
            for (int i = 0; i < n; i++) finish(e, e->brq[i], LLM_FINISH_ERROR, st, msg);
        } else {
            process_batch(e, n, ms);
        }
        end_students(e);
    }
    reap(e);
    pthread_mutex_lock(&e->mu);
    publish(e);
    int l = count_left(e);
    pthread_mutex_unlock(&e->mu);
    if (left) *left = l;
    return OMNI_OK;
}

omni_status llm_engine_step(llm_engine *e, int *left) {
    int did;
    return step(e, left, &did);
}

omni_status llm_engine_run(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        pthread_mutex_unlock(&e->mu);
        int left = 0, did = 0;
        step(e, &left, &did);
        pthread_mutex_lock(&e->mu);
        if (!did && !e->stop && !e->pending) { /* nothing could run: sleep until a submit/cancel/clear */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
    }
    e->stop = 0;
    pthread_mutex_unlock(&e->mu);
    return OMNI_OK;
}

void llm_engine_stop(llm_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

omni_status llm_engine_cache_stats(llm_engine *e, int cache, llm_cache_stats *out) {
    pthread_mutex_lock(&e->mu);
    omni_status st = cache >= 0 && cache < e->n_caches ? OMNI_OK : omni_fail(OMNI_ERR_USAGE, "no cache %d", cache);
    if (!st) *out = e->caches[cache].pub;
    pthread_mutex_unlock(&e->mu);
    return st;
}

void llm_engine_cache_line(llm_engine *e, int cache, char *buf, int cap) {
    if (cache >= 0 && cache < e->n_caches) kv_format_line(e->caches[cache].kv, buf, cap);
    else if (cap > 0) buf[0] = 0;
}
