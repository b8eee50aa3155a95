/* backend.h - the production backend of `omni serve`: every HTTP request becomes an llm_engine request.
 *
 * submit (on the connection's thread): the request's media are decoded from their bytes (pixel and duration
 * limits checked, 400 on anything malformed) and encoded one at a time (the encoders are shared), the prompt is
 * tokenized and expanded, the request's length is checked against the per-request context, and the job goes to
 * the engine, which runs on its own thread (llm_engine_run). Tokens and the end come back through the engine's
 * callbacks into srv_job_token / srv_job_done. cancel = llm_engine_cancel (the pages are freed at the next step).
 * stats = the cache's pages and requests (llm_engine_cache_stats). */
#ifndef OMNI_SERVER_BACKEND_H
#define OMNI_SERVER_BACKEND_H

#include <stdint.h>

#include "app/server/server.h"
#include "llm/engine.h"

typedef struct {
    const char *model_dir;      /* for the encoders' configs */
    const llm_model *model;
    const llm_tokenizer *tok;
    llm_engine *engine;         /* stepped by another thread */
    int cache;                  /* the engine cache requests use */
    int ctx;                    /* most tokens of one request: prompt (media included) + generated */
    int64_t max_image_pixels;   /* per image, checked from the header before decoding */
    double max_audio_s;         /* per audio clip */
    int image_min_tokens, image_max_tokens; /* visual-token budget per image (0: the model's) */
} srv_engine_params;

typedef struct srv_engine_backend srv_engine_backend;

omni_status srv_engine_backend_init(const srv_engine_params *p, srv_engine_backend **out);
void srv_engine_backend_free(srv_engine_backend *b); /* NULL is a no-op; after the server stopped */
/* The vtable for srv_start (ctx = b). */
srv_backend srv_engine_backend_api(srv_engine_backend *b);

#endif
