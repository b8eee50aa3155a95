/* backend.c - `omni serve` requests as llm_engine requests (see backend.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/server/backend.h"

#include "app/server/inputs.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_engine_backend {
    srv_engine_params p;
    srv_encoders *enc;
    uint64_t seed_state; /* seeds of requests that give none */
    size_t max_token_bytes; /* the longest token: a prompt of n bytes has at least n / this tokens */
    pthread_mutex_t mu;
};

/* ---- engine callbacks (on the engine's thread) ------------------------------------------------------------------ */

static void on_token(void *user, int id, int32_t token, const char *piece, int len) {
    (void)id;
    if (token >= 0) srv_job_token(user, piece, (size_t)len);
    else if (len > 0) srv_job_text(user, piece, (size_t)len);
}

static void on_done(void *user, int id, const llm_request_stats *st) {
    (void)id;
    srv_job_end end;
    memset(&end, 0, sizeof end);
    end.prompt_ms = st->prompt_ms;
    end.predicted_ms = st->decode_ms;
    switch (st->finish) {
    case LLM_FINISH_EOS:
    case LLM_FINISH_STOP: end.finish = SRV_FINISH_STOP; break;
    case LLM_FINISH_LENGTH:
    case LLM_FINISH_CONTEXT: end.finish = SRV_FINISH_LENGTH; break;
    case LLM_FINISH_ERROR:
        end.failed = 1;
        srv_error_set(&end.err, 500, "server_error", NULL, NULL, "generation failed: %s", st->error);
        break;
    default: end.finish = SRV_FINISH_NONE; break; /* cancelled */
    }
    srv_job_done(user, &end);
}

/* ---- submit ----------------------------------------------------------------------------------------------------- */

static omni_status refuse(srv_error *err, omni_status st, const char *what) {
    if (st == OMNI_ERR_NOMEM || st == OMNI_ERR_RUNTIME)
        return srv_error_set(err, 500, "server_error", NULL, NULL, "%s: %s", what, omni_last_error());
    return srv_error_set(err, 400, "invalid_request_error", NULL, NULL, "%s: %s", what, omni_last_error());
}

static uint64_t next_seed(srv_engine_backend *b) {
    pthread_mutex_lock(&b->mu);
    uint64_t x = (b->seed_state += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    pthread_mutex_unlock(&b->mu);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static omni_status submit(void *ctx, const srv_request *req, srv_job *job, int *prompt_tokens, srv_error *err) {
    srv_engine_backend *b = ctx;
    size_t least = strlen(req->prompt) / b->max_token_bytes; /* before tokenizing megabytes for nothing */
    if (least >= (size_t)b->p.ctx) {
        srv_context_error(err, req, least > INT32_MAX ? INT32_MAX : (int)least, 1, b->p.ctx);
        return OMNI_ERR_USAGE;
    }
    srv_inputs in;
    omni_status st = srv_inputs_build(b->enc, b->p.tok, req, &in, err);
    if (st) return st;
    int n = in.prompt.n_tokens;
    if (n >= b->p.ctx) { /* (with media, inputs refused it before encoding) */
        srv_context_error(err, req, n, 0, b->p.ctx);
        srv_inputs_free(&in);
        return OMNI_ERR_USAGE;
    }
    llm_request rq = llm_request_default_params();
    media_prompt_request(&in.prompt, &rq);
    rq.sampling.temp = req->temperature;
    rq.sampling.top_k = req->top_k;
    rq.sampling.top_p = req->top_p;
    rq.sampling.seed = req->seed_set ? req->seed : next_seed(b);
    rq.max_tokens = req->max_tokens < b->p.ctx - n ? req->max_tokens : b->p.ctx - n;
    rq.cache = b->p.cache;
    rq.cb = (llm_callbacks){on_token, NULL, on_done, job};
    int id = 0;
    st = llm_engine_submit(b->p.engine, &rq, &id); /* copies everything */
    if (!st) {
        srv_job_set_backend_data(job, (void *)(intptr_t)id);
        *prompt_tokens = n;
    }
    srv_inputs_free(&in);
    return st ? refuse(err, st, "the engine refused the request") : OMNI_OK;
}

static void cancel(void *ctx, srv_job *job) {
    srv_engine_backend *b = ctx;
    int id = (int)(intptr_t)srv_job_backend_data(job);
    if (id > 0) llm_engine_cancel(b->p.engine, id); /* an id that already finished is refused: nothing to do */
}

static void stats(void *ctx, srv_metrics *m) {
    srv_engine_backend *b = ctx;
    llm_cache_stats cs;
    if (llm_engine_cache_stats(b->p.engine, b->p.cache, &cs)) return;
    m->running = cs.running;
    m->queued = cs.waiting;
    m->n_kv = 1;
    srv_kv_stats *k = &m->kv[0];
    snprintf(k->name, sizeof k->name, "%s", cs.format);
    k->pages_used = cs.raw_pages + cs.quant_pages;
    k->pages_free = cs.raw_pages_free + cs.quant_pages_free;
    k->bytes_used = cs.used_bytes;
}

/* ---- lifetime ----------------------------------------------------------------------------------------------------- */

omni_status srv_engine_backend_init(const srv_engine_params *p, srv_engine_backend **out) {
    *out = NULL;
    srv_engine_backend *b = calloc(1, sizeof *b);
    if (!b) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    b->p = *p;
    srv_encoders_params ep = {p->model_dir, p->model, p->max_image_pixels, p->max_audio_s, p->image_min_tokens,
                              p->image_max_tokens, p->ctx};
    omni_status st = srv_encoders_init(&ep, &b->enc);
    if (st) {
        free(b);
        return st;
    }
    b->seed_state = (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull;
    b->max_token_bytes = 1;
    for (int32_t id = 0; id < llm_tokenizer_vocab_size(p->tok); id++) {
        size_t n = 0;
        if (llm_tokenizer_token_bytes(p->tok, id, &n) && n > b->max_token_bytes) b->max_token_bytes = n;
    }
    pthread_mutex_init(&b->mu, NULL);
    *out = b;
    return OMNI_OK;
}

void srv_engine_backend_free(srv_engine_backend *b) {
    if (!b) return;
    srv_encoders_free(b->enc);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

srv_backend srv_engine_backend_api(srv_engine_backend *b) { return (srv_backend){b, submit, cancel, stats}; }
