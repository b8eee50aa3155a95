/* session.c - model/tokenizer/cache lifetime, chunked prefill, the decode loop and the perf block. */
#define _POSIX_C_SOURCE 200809L
#include "app/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/model_path.h"
#include "kernels/ops.h"
#include "llm/positions.h"

#define PREFILL_CHUNK 512

omni_status session_open(omni_session *s, const omni_args *a) {
    memset(s, 0, sizeof *s);
    s->args = *a;
    s->seq = -1;
    s->t_start = omni_time_ms();
    if (a->device && strcmp(a->device, "cpu")) {
        if (!strcmp(a->device, "cuda"))
            return omni_fail(OMNI_ERR_UNSUPPORTED, "--device cuda: the CUDA backend is not built yet; use --device cpu");
        return omni_fail(OMNI_ERR_USAGE, "--device: expected cpu or cuda, got '%s'", a->device);
    }
    if (a->threads > 0) op_set_threads(a->threads);
    omni_status st = omni_resolve_model(a->model, s->model_dir, sizeof s->model_dir);
    if (st) return st;
    if ((st = llm_model_load(s->model_dir, &s->model))) return st;
    s->cfg = llm_model_config(s->model);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", s->model_dir);
    if ((st = llm_tokenizer_load(path, &s->tok))) return st;
    llm_sampler_params sp = {a->temp, a->top_k, a->top_p, a->seed};
    if ((st = llm_sampler_init(&sp, s->cfg->vocab, &s->sampler))) return st;
    s->logits = malloc(sizeof(float) * s->cfg->vocab);
    if (!s->logits) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    s->t_load_ms = omni_time_ms() - s->t_start;
    omni_log(2, "model: %s (%s, %d layers, hidden %d, vocab %d, %.1f MiB of weights)\n", s->model_dir,
             s->cfg->model_type, s->cfg->n_layers, s->cfg->hidden, s->cfg->vocab,
             llm_model_weight_bytes(s->model) / 1048576.0);
    return OMNI_OK;
}

static omni_status kv_format_from_args(const omni_args *a, kv_format *f) {
    omni_status st = kv_parse_mode(a->kv, f);
    if (st) return st;
    if (a->kv_window >= 0) f->window = a->kv_window;
    if (a->kv_sink >= 0) f->n_sink = a->kv_sink;
    if (a->kv_rotate >= 0) f->rotate = a->kv_rotate;
    if (a->kv_scale >= 0) f->scale = a->kv_scale;
    return OMNI_OK;
}

omni_status session_new_cache(const omni_session *s, const char *mode, int ctx, kv_cache **kv, int *seq) {
    *kv = NULL;
    kv_params p = llm_model_kv_params(s->model);
    omni_args a = s->args;
    if (mode) a.kv = mode;
    omni_status st = kv_format_from_args(&a, &p.fmt);
    if (st) return st;
    kv_format *layers = NULL;
    if (a.kv_layers) {
        layers = malloc(sizeof *layers * p.n_layers);
        if (!layers) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        if ((st = kv_parse_layer_overrides(a.kv_layers, &p.fmt, p.n_layers, layers))) {
            free(layers);
            return st;
        }
        p.layer_fmt = layers;
    }
    p.max_tokens = ctx;
    p.max_seqs = 1;
    p.max_chunk = PREFILL_CHUNK;
    st = kv_init(&p, kv);
    free(layers);
    if (!st) st = kv_seq_add(*kv, seq);
    if (st) {
        kv_free(*kv);
        *kv = NULL;
    }
    return st;
}

omni_status session_kv_init(omni_session *s, int ctx) {
    kv_free(s->kv);
    s->kv = NULL;
    omni_status st = session_new_cache(s, NULL, ctx, &s->kv, &s->seq);
    if (st) return st;
    s->ctx = ctx;
    kv_usage u;
    char name[64];
    kv_get_usage(s->kv, &u);
    kv_format_name(kv_layer_format(s->kv, 0), name, sizeof name);
    omni_log(1, "kv_cache: %s (window %d), capacity %lld cells, %d layers, pool %.2f MiB reserved\n", name,
             kv_layer_format(s->kv, 0)->window, (long long)u.cells_capacity, u.n_layers, u.pool_bytes / 1048576.0);
    return OMNI_OK;
}

void session_close(omni_session *s) {
    vision_tower_free(s->vtower);
    audio_tower_free(s->atower);
    llm_sampler_free(s->sampler);
    kv_free(s->kv);
    llm_tokenizer_free(s->tok);
    llm_model_free(s->model);
    free(s->logits);
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

/* Run tokens [c0, c1) of a prompt whose full positions/spans are given, as one chunk. */
static omni_status eval_chunk(omni_session *s, const int32_t *ids, const int32_t *pos, int n, int c0, int c1,
                              const llm_span *spans, int n_spans, int want_logits) {
    int T = c1 - c0, H = s->cfg->hidden;
    int32_t *cpos = NULL;
    llm_span cs[OMNI_MAX_MEDIA * 2];
    int ncs = 0;
    if (pos) {
        cpos = malloc(sizeof(int32_t) * 3 * T);
        if (!cpos) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        for (int k = 0; k < 3; k++) memcpy(cpos + k * T, pos + (int64_t)k * n + c0, sizeof(int32_t) * T);
    }
    for (int i = 0; i < n_spans; i++) { /* the part of each span inside this chunk */
        int a = spans[i].start > c0 ? spans[i].start : c0;
        int b = spans[i].start + spans[i].len < c1 ? spans[i].start + spans[i].len : c1;
        if (a >= b) continue;
        llm_span x = spans[i];
        int off = a - spans[i].start;
        x.start = a - c0;
        x.len = b - a;
        x.embd = spans[i].embd + (int64_t)off * H;
        for (int d = 0; d < x.n_deepstack; d++) x.deepstack[d] = spans[i].deepstack[d] + (int64_t)off * H;
        cs[ncs++] = x;
    }
    llm_input in = {T, ids + c0, cpos, ncs, cs};
    omni_status st = llm_forward(s->model, s->kv, s->seq, &in, want_logits ? s->logits : NULL);
    free(cpos);
    return st;
}

/* Prefill in chunks of PREFILL_CHUNK tokens. */
static omni_status eval_tokens(omni_session *s, const int32_t *ids, const int32_t *pos, int n, const llm_span *spans,
                               int n_spans) {
    if (kv_seq_len(s->kv, s->seq) + n > s->ctx)
        return omni_fail(OMNI_ERR_USAGE, "prompt of %d tokens does not fit the context (%lld used of %d; raise -c)", n,
                         (long long)kv_seq_len(s->kv, s->seq), s->ctx);
    for (int c0 = 0; c0 < n; c0 += PREFILL_CHUNK) {
        int c1 = c0 + PREFILL_CHUNK < n ? c0 + PREFILL_CHUNK : n;
        omni_status st = eval_chunk(s, ids, pos, n, c0, c1, spans, n_spans, c1 == n);
        if (st) return st;
    }
    return OMNI_OK;
}

/* Expanded prompt: pads replaced by n_tokens copies, spans at their positions, grids and audio lengths. */
typedef struct {
    int32_t *ids;
    int n;
    llm_span spans[OMNI_MAX_MEDIA * 2];
    llm_grid grids[OMNI_MAX_MEDIA * 2];
    int audio_lens[OMNI_MAX_MEDIA * 2];
    int n_spans, n_grids, n_audio;
} expanded;

static omni_status expand_media(const omni_session *s, const int32_t *ids, int n, omni_media *media, int n_media,
                                expanded *e) {
    int img_pad = s->cfg->image_token_id, aud_pad = s->cfg->audio_token_id, n_img = 0, n_aud = 0, total = n;
    for (int i = 0; i < n_media; i++) total += media[i].n_tokens - 1;
    for (int i = 0; i < n; i++) {
        n_img += ids[i] == img_pad;
        n_aud += ids[i] == aud_pad && aud_pad >= 0;
    }
    int want_img = 0, want_aud = 0;
    for (int i = 0; i < n_media; i++) media[i].is_audio ? want_aud++ : want_img++;
    if (n_img != want_img || n_aud != want_aud)
        return omni_fail(OMNI_ERR_USAGE, "the prompt has %d <|image_pad|> and %d <|audio_pad|> placeholders but %d "
                         "image(s) and %d audio file(s) were given", n_img, n_aud, want_img, want_aud);
    if (n_media > OMNI_MAX_MEDIA * 2) return omni_fail(OMNI_ERR_USAGE, "too many media items");
    e->ids = malloc(sizeof(int32_t) * (size_t)total);
    if (!e->ids) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int next_img = 0, next_aud = 0, o = 0;
    for (int i = 0; i < n; i++) {
        int is_img = ids[i] == img_pad, is_aud = aud_pad >= 0 && ids[i] == aud_pad;
        if (!is_img && !is_aud) {
            e->ids[o++] = ids[i];
            continue;
        }
        omni_media *m = NULL; /* the next item of this kind, in order */
        for (int k = is_img ? next_img : next_aud; k < n_media; k++)
            if (media[k].is_audio == is_aud) {
                m = &media[k];
                if (is_img) next_img = k + 1;
                else next_aud = k + 1;
                break;
            }
        if (!m) { /* cannot happen after the count check above; keep the invariant explicit */
            free(e->ids);
            e->ids = NULL;
            return omni_fail(OMNI_ERR_RUNTIME, "internal: no media item for placeholder %d", i);
        }
        llm_span *sp = &e->spans[e->n_spans++];
        *sp = (llm_span){o, m->n_tokens, m->embd, m->n_deepstack, {0}};
        for (int d = 0; d < m->n_deepstack; d++) sp->deepstack[d] = m->deepstack[d];
        if (is_img) e->grids[e->n_grids++] = (llm_grid){m->grid_t, m->grid_h, m->grid_w};
        else e->audio_lens[e->n_audio++] = m->n_tokens;
        for (int t = 0; t < m->n_tokens; t++) e->ids[o++] = ids[i];
    }
    e->n = o;
    return OMNI_OK;
}

/* Positions of the expanded prompt, continuing after the cache's content (base = kv length + rope_delta). */
static omni_status media_positions(omni_session *s, const expanded *e, int32_t **pos) {
    llm_pos_config pc = {s->cfg->image_token_id, s->cfg->video_token_id, s->cfg->audio_token_id, 2};
    int delta = 0;
    *pos = malloc(sizeof(int32_t) * 3 * (size_t)e->n);
    if (!*pos) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    omni_status st = llm_positions_build(e->ids, e->n, &pc, e->grids, e->n_grids, e->audio_lens, e->n_audio, *pos,
                                         &delta);
    if (st) return st;
    int64_t base = kv_seq_len(s->kv, s->seq) + s->rope_delta;
    for (int i = 0; i < 3 * e->n; i++) (*pos)[i] += (int32_t)base;
    s->rope_delta += delta;
    return OMNI_OK;
}

omni_status session_eval_prompt(omni_session *s, const int32_t *ids, int n, omni_media *media, int n_media) {
    if (n <= 0) return omni_fail(OMNI_ERR_USAGE, "empty prompt");
    double t0 = omni_time_ms();
    expanded e = {0};
    int32_t *pos = NULL;
    omni_status st = OMNI_OK;
    if (n_media > 0) {
        st = expand_media(s, ids, n, media, n_media, &e);
        if (!st) st = media_positions(s, &e, &pos);
    } else {
        e.ids = (int32_t *)ids;
        e.n = n;
        if (s->rope_delta) { /* text after an image turn: positions keep the image's offset */
            pos = malloc(sizeof(int32_t) * 3 * (size_t)n);
            if (!pos) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
            else llm_positions_text((int)kv_seq_len(s->kv, s->seq), n, (int)s->rope_delta, pos);
        }
    }
    if (!st) st = eval_tokens(s, e.ids, pos, e.n, e.spans, e.n_spans);
    if (e.ids != ids) free(e.ids);
    free(pos);
    s->t_prompt_ms += omni_time_ms() - t0;
    s->n_prompt += e.n;
    return st;
}

omni_status session_eval_token(omni_session *s, int32_t id) {
    if (kv_seq_len(s->kv, s->seq) + 1 > s->ctx) return omni_fail(OMNI_ERR_USAGE, "context full (%d tokens)", s->ctx);
    int64_t p = kv_seq_len(s->kv, s->seq) + s->rope_delta;
    int32_t pos[3] = {(int32_t)p, (int32_t)p, (int32_t)p};
    llm_input in = {1, &id, pos, 0, NULL};
    double t0 = omni_time_ms();
    omni_status st = llm_forward(s->model, s->kv, s->seq, &in, s->logits);
    s->t_eval_ms += omni_time_ms() - t0;
    s->n_eval++;
    return st;
}

omni_status session_generate(omni_session *s, int n_predict, int keep_eos, int32_t **ids_out, int *n_out) {
    int cap = 64, n = 0;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    llm_detok *dt = llm_detok_new(s->tok, 1);
    char buf[1024];
    omni_status st = ids && dt ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    while (!st && (n_predict < 0 || n < n_predict)) {
        if (s->interrupted && *s->interrupted) break;
        int id = llm_sampler_sample(s->sampler, s->logits);
        int eos = llm_config_is_eos(s->cfg, id);
        if (n == cap) {
            int32_t *t = realloc(ids, sizeof(int32_t) * (cap *= 2));
            if (!t) { st = omni_fail(OMNI_ERR_NOMEM, "out of memory"); break; }
            ids = t;
        }
        ids[n++] = id;
        if (!eos) {
            int l = llm_detok_push(dt, id, buf, sizeof buf);
            if (l > 0) { fwrite(buf, 1, (size_t)l, stdout); fflush(stdout); }
        }
        if (eos && !keep_eos) break;
        if (kv_seq_len(s->kv, s->seq) >= s->ctx) {
            omni_log(1, "\nwarning: context full (%d tokens), stopping\n", s->ctx);
            break;
        }
        st = session_eval_token(s, id);
        if (eos) break;
    }
    if (dt) {
        int l = llm_detok_flush(dt, buf, sizeof buf);
        if (l > 0) fwrite(buf, 1, (size_t)l, stdout);
        fflush(stdout);
    }
    llm_detok_free(dt);
    if (n_out) *n_out = n;
    if (ids_out && !st) *ids_out = ids;
    else free(ids);
    return st;
}

void session_print_perf(const omni_session *s) {
    if (s->args.no_perf) return;
    double total = omni_time_ms() - s->t_start;
    const char *p = "omni_perf:";
    fprintf(stderr, "\n%s        load time = %10.2f ms\n", p, s->t_load_ms);
    if (s->t_encode_ms > 0) fprintf(stderr, "%s      encode time = %10.2f ms\n", p, s->t_encode_ms);
    fprintf(stderr, "%s prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n", p,
            s->t_prompt_ms, s->n_prompt, s->n_prompt ? s->t_prompt_ms / s->n_prompt : 0.0,
            s->t_prompt_ms > 0 ? 1e3 * s->n_prompt / s->t_prompt_ms : 0.0);
    fprintf(stderr, "%s        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n", p,
            s->t_eval_ms, s->n_eval, s->n_eval ? s->t_eval_ms / s->n_eval : 0.0,
            s->t_eval_ms > 0 ? 1e3 * s->n_eval / s->t_eval_ms : 0.0);
    fprintf(stderr, "%s       total time = %10.2f ms / %5d tokens\n", p, total, s->n_prompt + s->n_eval);
    if (s->kv) {
        char line[512];
        kv_format_line(s->kv, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
}
