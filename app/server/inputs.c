/* inputs.c - request -> engine inputs (see inputs.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/server/inputs.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/media.h"

struct srv_encoders {
    srv_encoders_params p;
    pthread_mutex_t mu; /* the encoder is used by one thread at a time */
    media_encoder *enc;
};

omni_status srv_encoders_init(const srv_encoders_params *p, srv_encoders **out) {
    srv_encoders *e = calloc(1, sizeof *e);
    *out = NULL;
    if (!e) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
    e->p = *p;
    media_params mp = media_default_params();
    mp.image_min_tokens = p->image_min_tokens;
    mp.image_max_tokens = p->image_max_tokens;
    mp.max_image_pixels = p->max_image_pixels;
    omni_status st = media_encoder_init(p->model, p->model_dir, &mp, &e->enc);
    if (st) {
        free(e);
        return st;
    }
    pthread_mutex_init(&e->mu, NULL);
    *out = e;
    return OMNI_OK;
}

void srv_encoders_free(srv_encoders *e) {
    if (!e) return;
    media_encoder_free(e->enc);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- one media item (e->mu held) ------------------------------------------------------------------------------ */

/* The tokens an item will take, from an image's header or from the decoded audio (kept in *pcm for the encoder;
 * the duration limit is checked from the header before any sample is decoded): a request's length is known before
 * any encoder runs. */
static omni_status count_one(srv_encoders *e, const srv_media *m, audio_pcm *pcm, int *n_tokens) {
    if (m->kind == SRV_MEDIA_IMAGE)
        return m->path ? media_count_image(e->enc, m->path, n_tokens)
                       : media_count_image_data(e->enc, m->data, m->size, "image", n_tokens);
    audio_load_params lp = audio_load_default_params();
    if (e->p.max_audio_s > 0) lp.max_seconds = e->p.max_audio_s;
    *n_tokens = 1; /* counted with the request's other clips (count_audios) */
    return audio_load_memory(m->data, m->size, "input_audio", &lp, pcm);
}

/* The decoded clips' tokens as encode_audios encodes them, one batch padded to the longest clip (a short clip
 * beside a longer one can take one token more than alone): added to *total, one placeholder each replaced. */
static omni_status count_audios(srv_encoders *e, const srv_request *req, const audio_pcm *pcm, int64_t *total) {
    const audio_pcm **pp = calloc((size_t)req->n_media, sizeof *pp);
    int *k = calloc((size_t)req->n_media, sizeof *k), n = 0;
    omni_status st = pp && k ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < req->n_media; i++)
        if (req->media[i].kind == SRV_MEDIA_AUDIO) pp[n++] = &pcm[i];
    if (!st && n) st = media_count_pcms(e->enc, pp, n, k);
    for (int i = 0; !st && i < n; i++) *total += k[i] - 1;
    free(pp), free(k);
    return st;
}

static omni_status encode_image(srv_encoders *e, const srv_media *m, media_item *out) {
    return m->path ? media_encode_image(e->enc, m->path, out)
                   : media_encode_image_data(e->enc, m->data, m->size, "image", out);
}

/* Every audio clip of the request in one batch, as the CLI and transformers' processor encode them (a short clip
 * beside a longer one is padded with it). *bad: the first clip's index on a failure. */
static omni_status encode_audios(srv_encoders *e, const srv_request *req, const audio_pcm *pcm, media_item *items,
                                 int *bad) {
    size_t nm = (size_t)req->n_media;
    const audio_pcm **pp = calloc(nm, sizeof *pp);
    const char **names = calloc(nm, sizeof *names);
    media_item **po = calloc(nm, sizeof *po);
    omni_status st = pp && names && po ? OMNI_OK : omni_fail(OMNI_ERR_NOMEM, "out of memory");
    int n = 0;
    *bad = -1;
    for (int i = 0; !st && i < req->n_media; i++)
        if (req->media[i].kind == SRV_MEDIA_AUDIO) {
            if (*bad < 0) *bad = i;
            pp[n] = &pcm[i], names[n] = req->media[i].format, po[n++] = &items[i];
        }
    if (!st && n) st = media_encode_pcms(e->enc, pp, names, n, po);
    free(pp), free(names), free(po);
    return st;
}

/* ---- the whole prompt ----------------------------------------------------------------------------------------- */

omni_status srv_context_error(srv_error *err, const srv_request *req, int n_tokens, int at_least, int ctx) {
    return srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
                         req->endpoint == SRV_EP_CHAT ? "messages" : "prompt", "the prompt has %s%d tokens (media "
                         "included); this server's context is %d tokens per request (-c)", at_least ? "at least " : "",
                         n_tokens, ctx);
}

/* A failed step as the client sees it: bad input or an unsupported request is the client's fault (400). */
static omni_status fail(srv_error *err, omni_status st, const char *param) {
    int status = st == OMNI_ERR_NOMEM || st == OMNI_ERR_RUNTIME || st == OMNI_ERR_MODEL ? 500 : 400;
    return srv_error_set(err, status, status == 400 ? "invalid_request_error" : "server_error", NULL, param, "%s",
                         omni_last_error());
}

static omni_status fail_item(srv_error *err, omni_status st, const srv_request *req, int i) {
    char p[48];
    snprintf(p, sizeof p, "%s %d", req->media[i].kind == SRV_MEDIA_IMAGE ? "image" : "audio clip", i + 1);
    return fail(err, st, p);
}

/* Count the request's tokens with every item (refused over the context before any encoder runs), then encode
 * every item in order (one request at a time on the shared encoder) and expand. n: the text's tokens, one
 * placeholder per item included. */
static omni_status count_and_encode(srv_encoders *e, const int32_t *ids, int n, const srv_request *req,
                                    audio_pcm *pcm, srv_inputs *out, srv_error *err) {
    omni_status st = OMNI_OK;
    /* total: the text and the images (the clips are counted together below); low: + each clip counted alone, which
     * is at most its count in the batch. Refused at the first item that takes low past the context: the others are
     * not decoded (16 long clips would be GBs of samples). */
    int64_t total = n, low = n;
    for (int i = 0; i < req->n_media && !st; i++) {
        int k = 0;
        int img = req->media[i].kind == SRV_MEDIA_IMAGE;
        if ((st = count_one(e, &req->media[i], &pcm[i], &k)) || (!img && (st = media_count_pcm(e->enc, &pcm[i], &k))))
            fail_item(err, st, req, i);
        total += img ? k - 1 : 0;
        low += k - 1;
        if (!st && e->p.ctx > 0 && low >= e->p.ctx)
            st = srv_context_error(err, req, low > INT32_MAX ? INT32_MAX : (int)low, 1, e->p.ctx);
    }
    if (!st && (st = count_audios(e, req, pcm, &total))) fail(err, st, NULL);
    if (!st && e->p.ctx > 0 && total >= e->p.ctx)
        st = srv_context_error(err, req, total > INT32_MAX ? INT32_MAX : (int)total, 0, e->p.ctx);
    double t0 = omni_time_ms();
    for (int i = 0; i < req->n_media && !st; i++)
        if (req->media[i].kind == SRV_MEDIA_IMAGE && (st = encode_image(e, &req->media[i], &out->items[i])))
            fail_item(err, st, req, i);
    int bad = -1;
    if (!st && (st = encode_audios(e, req, pcm, out->items, &bad))) {
        if (bad >= 0) fail_item(err, st, req, bad);
        else fail(err, st, NULL);
    }
    out->encode_ms = omni_time_ms() - t0;
    return st;
}

static omni_status with_media(srv_encoders *e, const int32_t *ids, int n, const srv_request *req, srv_inputs *out,
                              srv_error *err) {
    size_t nm = (size_t)(req->n_media ? req->n_media : 1);
    media_item *items = calloc(nm, sizeof *items);
    audio_pcm *pcm = calloc(nm, sizeof *pcm);
    out->items = items;
    out->n_items = items ? req->n_media : 0;
    if (!items || !pcm) {
        free(pcm);
        return fail(err, omni_fail(OMNI_ERR_NOMEM, "out of memory"), NULL);
    }
    pthread_mutex_lock(&e->mu);
    omni_status st = count_and_encode(e, ids, n, req, pcm, out, err);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < req->n_media; i++) audio_pcm_free(&pcm[i]);
    free(pcm);
    if (!st && (st = media_prompt_build(e->enc, ids, n, items, req->n_media, &out->prompt))) return fail(err, st, NULL);
    return st;
}

omni_status srv_inputs_build(srv_encoders *e, const llm_tokenizer *tok, const srv_request *req, srv_inputs *out,
                             srv_error *err) {
    memset(out, 0, sizeof *out);
    int32_t *ids = NULL;
    int n = 0;
    omni_status st = media_check_support(e->p.model, req->n_images, req->n_audios); /* audio for a VL model ... */
    if (st) return fail(err, st == OMNI_ERR_UNSUPPORTED ? OMNI_ERR_USAGE : st, "messages");
    if ((st = llm_tokenizer_encode(tok, req->prompt, strlen(req->prompt), 1, &ids, &n, NULL))) return fail(err, st, NULL);
    if (n == 0) st = srv_error_set(err, 400, "invalid_request_error", NULL, NULL, "the prompt is empty");
    if (!st && (st = media_check_placeholders(e->p.model, ids, n, req->n_images, req->n_audios)))
        fail(err, st, "messages"); /* e.g. "<|image_pad|>" typed as text */
    if (!st) st = with_media(e, ids, n, req, out, err);
    free(ids);
    if (st) srv_inputs_free(out);
    return st;
}

void srv_inputs_free(srv_inputs *in) {
    if (!in) return;
    media_prompt_free(&in->prompt);
    for (int i = 0; i < in->n_items; i++) media_item_clear(&in->items[i]);
    free(in->items);
    memset(in, 0, sizeof *in);
}
