/* inputs.c - request -> engine inputs (see inputs.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/server/inputs.h"

#include <errno.h>
#include <pthread.h>
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

/* The audio bytes are decoded in memory; the duration limit is checked from the header before any sample is
 * decoded (a short upload declaring hours of audio costs nothing). */
static omni_status encode_audio(srv_encoders *e, const srv_media *m, media_item *out) {
    audio_pcm pcm = {0};
    audio_load_params lp = audio_load_default_params();
    if (e->p.max_audio_s > 0) lp.max_seconds = e->p.max_audio_s;
    omni_status st = audio_load_memory(m->data, m->size, "input_audio", &lp, &pcm);
    if (!st) st = media_encode_pcm(e->enc, &pcm, m->format, out);
    audio_pcm_free(&pcm);
    return st;
}

static omni_status encode_one(srv_encoders *e, const srv_media *m, media_item *out) {
    if (m->kind == SRV_MEDIA_AUDIO) return encode_audio(e, m, out);
    return m->path ? media_encode_image(e->enc, m->path, out)
                   : media_encode_image_data(e->enc, m->data, m->size, "image", out);
}

/* ---- the whole prompt ----------------------------------------------------------------------------------------- */

/* A failed step as the client sees it: bad input or an unsupported request is the client's fault (400). */
static omni_status fail(srv_error *err, omni_status st, const char *param) {
    int status = st == OMNI_ERR_NOMEM || st == OMNI_ERR_RUNTIME || st == OMNI_ERR_MODEL ? 500 : 400;
    return srv_error_set(err, status, status == 400 ? "invalid_request_error" : "server_error", NULL, param, "%s",
                         omni_last_error());
}

/* Encode every media item in order (one request at a time on the shared encoder), then expand. */
static omni_status with_media(srv_encoders *e, const int32_t *ids, int n, const srv_request *req, srv_inputs *out,
                              srv_error *err) {
    media_item *items = calloc((size_t)(req->n_media ? req->n_media : 1), sizeof *items);
    if (!items) return fail(err, omni_fail(OMNI_ERR_NOMEM, "out of memory"), NULL);
    out->items = items;
    out->n_items = req->n_media;
    omni_status st = media_check_support(e->p.model, req->n_images, req->n_audios);
    if (st) return fail(err, st == OMNI_ERR_UNSUPPORTED ? OMNI_ERR_USAGE : st, "messages");
    double t0 = omni_time_ms();
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < req->n_media && !st; i++) {
        if ((st = encode_one(e, &req->media[i], &items[i]))) {
            char p[48];
            snprintf(p, sizeof p, "%s %d", req->media[i].kind == SRV_MEDIA_IMAGE ? "image" : "audio clip", i + 1);
            fail(err, st, p);
        }
    }
    pthread_mutex_unlock(&e->mu);
    out->encode_ms = omni_time_ms() - t0;
    if (st) return st;
    if ((st = media_prompt_build(e->enc, ids, n, items, req->n_media, &out->prompt))) return fail(err, st, NULL);
    return OMNI_OK;
}

omni_status srv_inputs_build(srv_encoders *e, const llm_tokenizer *tok, const srv_request *req, srv_inputs *out,
                             srv_error *err) {
    memset(out, 0, sizeof *out);
    int32_t *ids = NULL;
    int n = 0;
    omni_status st = llm_tokenizer_encode(tok, req->prompt, strlen(req->prompt), 1, &ids, &n, NULL);
    if (st) return fail(err, st, NULL);
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
