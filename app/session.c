/* session.c - model/tokenizer/engine lifetime, turns streamed to stdout through the engine, the perf block. */
#define _POSIX_C_SOURCE 200809L
#include "app/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/model_path.h"
#include "kernels/ops.h"
#ifdef OMNI_HAVE_CUDA_RUNNER
#include "kernels/ops_cuda.h"
#endif

#define PREFILL_CHUNK 512

omni_status session_open(omni_session *s, const omni_args *a, int n_seqs, int chunk, int logits_rows) {
    memset(s, 0, sizeof *s);
    s->args = *a;
    s->cache = -1;
    s->t_start = omni_time_ms();
    llm_engine_params ep = llm_engine_default_params();
    ep.runner.device = LLM_DEVICE_CPU;
#ifdef OMNI_HAVE_CUDA_RUNNER
    kv_format kf;
    int n_gpu = 0;
    if (!a->device && !kv_parse_mode(a->kv, &kf) && (kf.k_type == KV_F32 || kf.k_type == KV_BF16) && !a->kv_layers &&
        !a->compare && !omni_cuda_available(&n_gpu) && n_gpu > 0) /* default: the GPU when present and the caches
                                                                      run there (bf16/f32 until OScaR is on it) */
        ep.runner.device = LLM_DEVICE_CUDA;
#endif
    if (a->device && llm_device_parse(a->device, &ep.runner.device))
        return omni_fail(OMNI_ERR_USAGE, "--device: expected cpu or cuda, got '%s'", a->device);
    omni_status st = OMNI_OK;
#ifndef OMNI_HAVE_CUDA_RUNNER
    if (ep.runner.device == LLM_DEVICE_CUDA) /* before any loading */
        return omni_fail(OMNI_ERR_RUNTIME, "--device cuda: this build has no CUDA backend; use --device cpu");
#endif
    if (a->threads > 0) op_set_threads(a->threads); /* the encoders run on this thread too */
    if ((st = omni_resolve_model(a->model, s->model_dir, sizeof s->model_dir))) return st;
    if ((st = llm_model_load(s->model_dir, &s->model))) return st;
    s->cfg = llm_model_config(s->model);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", s->model_dir);
    if ((st = llm_tokenizer_load(path, &s->tok))) return st;
    media_params mp = media_default_params();
    mp.image_min_tokens = a->image_min_tokens;
    mp.image_max_tokens = a->image_max_tokens;
    mp.budget_preferred = a->image_budget_preferred;
    mp.max_image_pixels = (int64_t)(a->max_image_mpix * 1e6);
    mp.max_audio_seconds = a->max_audio_s;
    mp.gpu = ep.runner.device == LLM_DEVICE_CUDA; /* the towers run where the decoder runs */
    if ((st = media_encoder_init(s->model, s->model_dir, &mp, &s->media))) return st;
    ep.runner.n_threads = a->threads;
    ep.runner.max_seqs = n_seqs;
    ep.prefill_chunk = chunk > 0 ? chunk : PREFILL_CHUNK;
    ep.runner.max_tokens = n_seqs * ep.prefill_chunk; /* every sequence's chunk fits in one step */
    if (logits_rows > 0) ep.max_logits_rows = logits_rows;
    ep.tok = s->tok;
    if ((st = llm_engine_init(s->model, &ep, &s->engine))) return st;
    s->t_load_ms = omni_time_ms() - s->t_start;
    omni_log(2, "model: %s (%s, %d layers, hidden %d, vocab %d, %.1f MiB of weights)\n", s->model_dir,
             s->cfg->model_type, s->cfg->n_layers, s->cfg->hidden, s->cfg->vocab,
             llm_model_weight_bytes(s->model) / 1048576.0);
    return OMNI_OK;
}

static omni_status kv_format_from_args(const omni_args *a, const char *mode, kv_format *f) {
    omni_status st = kv_parse_mode(mode ? mode : a->kv, f);
    if (st) return st;
    if (a->kv_window >= 0) f->window = a->kv_window;
    if (a->kv_sink >= 0) f->n_sink = a->kv_sink;
    if (a->kv_rotate >= 0) f->rotate = a->kv_rotate;
    if (a->kv_scale >= 0) f->scale = a->kv_scale;
    return OMNI_OK;
}

omni_status session_add_cache(omni_session *s, const char *mode, int ctx, int n_seqs, int *cache) {
    llm_cache_params cp = llm_cache_default_params();
    omni_status st = kv_format_from_args(&s->args, mode, &cp.fmt);
    if (st) return st;
    kv_format *layers = NULL;
    if (s->args.kv_layers) {
        layers = malloc(sizeof *layers * s->cfg->n_layers);
        if (!layers) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        if ((st = kv_parse_layer_overrides(s->args.kv_layers, &cp.fmt, s->cfg->n_layers, layers))) {
            free(layers);
            return st;
        }
        cp.layer_fmt = layers;
    }
    cp.ctx_tokens = ctx;
    cp.max_seqs = n_seqs;
    st = llm_engine_add_cache(s->engine, &cp, cache);
    free(layers);
    return st;
}

omni_status session_kv_init(omni_session *s, int ctx) {
    omni_status st = session_add_cache(s, NULL, ctx, 1, &s->cache);
    if (!st) st = llm_engine_conv_new(s->engine, s->cache, ctx, &s->conv);
    if (st) return st;
    s->ctx = ctx;
    llm_cache_stats cs;
    llm_engine_cache_stats(s->engine, s->cache, &cs);
    kv_format f;
    kv_format_from_args(&s->args, NULL, &f);
    char name[96];
    snprintf(name, sizeof name, "%s", cs.format);
    if (s->args.kv_layers && s->args.kv_layers[0]) /* per-layer formats: layer 0's name would mislead */
        snprintf(name, sizeof name, "mixed (%s, --kv-layers %.40s)", cs.format, s->args.kv_layers);
    omni_log(1, "kv_cache: %s (window %d), capacity %d cells, %d layers, budget %.2f MiB\n", name, f.window, ctx,
             s->cfg->n_layers, cs.budget_bytes / 1048576.0);
    return OMNI_OK;
}

void session_close(omni_session *s) {
    llm_engine_free(s->engine);
    media_encoder_free(s->media);
    llm_tokenizer_free(s->tok);
    llm_model_free(s->model);
    memset(s, 0, sizeof *s);
}

omni_status session_tokenize(omni_session *s, const char *text, int32_t **ids, int *n) {
    int bad = 0;
    omni_status st = llm_tokenizer_encode(s->tok, text, strlen(text), 1, ids, n, &bad);
    if (!st && bad)
        omni_log(0, "warning: input contains %d invalid UTF-8 sequence%s, replaced by U+FFFD\n", bad,
                 bad == 1 ? "" : "s");
    return st;
}

llm_sampler_params session_sampling(const omni_session *s) {
    llm_sampler_params sp = {s->args.temp, s->args.top_k, s->args.top_p, s->args.seed};
    return sp;
}

void session_run(omni_session *s, const int *ids, int n_ids) {
    int left = 1, cancelled = 0;
    while (left > 0) {
        if (!cancelled && s->interrupted && *s->interrupted) {
            for (int i = 0; i < n_ids; i++) llm_engine_cancel(s->engine, ids[i]);
            cancelled = 1;
        }
        llm_engine_step(s->engine, &left);
    }
}

void session_add_stats(omni_session *s, const llm_request_stats *st) {
    s->t_prompt_ms += st->prompt_ms;
    s->n_prompt += st->n_prompt;
    s->t_eval_ms += st->decode_ms;
    s->n_eval += st->n_decode;
}

void session_reset_perf(omni_session *s) {
    s->t_start = omni_time_ms();
    s->t_load_ms = 0; /* the model loaded once, before the first block */
    s->t_prompt_ms = s->t_eval_ms = 0;
    s->n_prompt = s->n_eval = 0;
    s->t_encode0_ms = media_encoder_ms(s->media);
}

/* ---- one streamed turn ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    int n, cap, failed;
    int out_errno;       /* stdout could not take the answer (a closed pipe, a full disk): the turn was cancelled */
    llm_request_stats st;
    int done;
    llm_engine *engine;
} turn_out;

static void turn_token(void *user, int id, int32_t tok, const char *piece, int len) {
    turn_out *t = user;
    if (len > 0 && !t->out_errno) {
        errno = 0;
        if (fwrite(piece, 1, (size_t)len, stdout) != (size_t)len || fflush(stdout) != 0) {
            t->out_errno = errno ? errno : EIO; /* nobody reads the answer: stop generating it */
            llm_engine_cancel(t->engine, id);
        }
    }
    if (tok < 0) return;
    if (t->n == t->cap) {
        int32_t *p = realloc(t->ids, sizeof(int32_t) * (size_t)(t->cap = t->cap ? 2 * t->cap : 64));
        if (!p) {
            t->failed = 1;
            return;
        }
        t->ids = p;
    }
    t->ids[t->n++] = tok;
}

static void turn_done(void *user, int id, const llm_request_stats *st) {
    turn_out *t = user;
    (void)id;
    t->st = *st;
    t->done = 1;
}

omni_status session_turn(omni_session *s, const media_prompt *p, int n_predict, int keep_eos, int32_t **ids_out,
                         int *n_out, llm_finish *finish) {
    if (ids_out) *ids_out = NULL;
    if (n_out) *n_out = 0;
    turn_out t;
    memset(&t, 0, sizeof t);
    t.engine = s->engine;
    llm_request r = llm_request_default_params();
    media_prompt_request(p, &r);
    r.sampling = session_sampling(s);
    r.max_tokens = n_predict;
    r.cache = s->cache;
    r.conv = s->conv;
    r.keep_eos = keep_eos;
    r.cb = (llm_callbacks){turn_token, NULL, turn_done, &t};
    int id;
    omni_status st = llm_engine_submit(s->engine, &r, &id);
    if (st) return st;
    session_run(s, &id, 1);
    fflush(stdout);
    session_add_stats(s, &t.st);
    if (t.st.finish == LLM_FINISH_CONTEXT) omni_log(1, "\nwarning: context full (%d tokens), stopping\n", s->ctx);
    if (finish) *finish = t.st.finish;
    st = t.out_errno   ? omni_fail(OMNI_ERR_RUNTIME, "cannot write the answer to standard output: %s",
                                   strerror(t.out_errno))
         : t.st.status ? omni_fail(t.st.status, "%s", t.st.error)
         : t.failed    ? omni_fail(OMNI_ERR_NOMEM, "out of memory")
                       : OMNI_OK;
    if (n_out) *n_out = t.n;
    if (ids_out && !st) *ids_out = t.ids;
    else free(t.ids);
    return st;
}

void session_print_perf(const omni_session *s) {
    if (s->args.no_perf || !s->engine) return; /* nothing ran (the session did not open) */
    double total = omni_time_ms() - s->t_start, enc = media_encoder_ms(s->media) - s->t_encode0_ms;
    const char *p = "omni_perf:";
    fprintf(stderr, "\n%s        load time = %10.2f ms\n", p, s->t_load_ms);
    if (enc > 0) fprintf(stderr, "%s      encode time = %10.2f ms\n", p, enc);
    fprintf(stderr, "%s prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n", p,
            s->t_prompt_ms, s->n_prompt, s->n_prompt ? s->t_prompt_ms / s->n_prompt : 0.0,
            s->t_prompt_ms > 0 ? 1e3 * s->n_prompt / s->t_prompt_ms : 0.0);
    fprintf(stderr, "%s        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n", p,
            s->t_eval_ms, s->n_eval, s->n_eval ? s->t_eval_ms / s->n_eval : 0.0,
            s->t_eval_ms > 0 ? 1e3 * s->n_eval / s->t_eval_ms : 0.0);
    fprintf(stderr, "%s       total time = %10.2f ms / %5d tokens\n", p, total, s->n_prompt + s->n_eval);
    if (s->cache >= 0) {
        char line[512];
        llm_engine_cache_line(s->engine, s->cache, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
}
