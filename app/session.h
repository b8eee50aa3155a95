/* session.h - one model + tokenizer + KV cache + sampler, and the prompt -> tokens -> stream loop that every
 * command (generate, chat, logits, ocr, ask, eval) shares. Timings are kept for the perf block. */
#ifndef OMNI_APP_SESSION_H
#define OMNI_APP_SESSION_H

#include "app/args.h"
#include "audio/audio.h"
#include "vision/vision.h"
#include "kvcache/kvcache.h"
#include "llm/model.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"

/* One encoded media item (image or audio) ready for the decoder. */
typedef struct {
    int is_audio;
    int n_tokens;       /* placeholder tokens it replaces */
    int grid_t, grid_h, grid_w; /* images: patch grid (pre-merge); audio: 0 */
    float *embd;        /* [n_tokens, hidden] (owned) */
    int n_deepstack;
    float *deepstack[4];/* each [n_tokens, hidden] (owned) */
} omni_media;

typedef struct {
    omni_args args;
    char model_dir[4096];
    llm_model *model;
    const llm_config *cfg;
    llm_tokenizer *tok;
    kv_cache *kv;
    int seq;
    llm_sampler *sampler;
    float *logits;       /* [vocab] logits after the last eval */
    int64_t rope_delta;  /* decode position = kv length + rope_delta */
    int ctx;             /* KV capacity in tokens */
    vision_tower *vtower;      /* loaded on the first image (app/media.c) */
    vision_prep_params vprep;
    audio_tower *atower;       /* loaded on the first audio file */
    /* perf */
    double t_start, t_load_ms, t_prompt_ms, t_eval_ms, t_encode_ms;
    int n_prompt, n_eval;
    volatile int *interrupted;
} omni_session;

/* Resolve and load model + tokenizer (+ sampler). The KV cache is created by session_kv_init. */
omni_status session_open(omni_session *s, const omni_args *a);
/* Create the KV cache for `ctx` tokens with the format from the args (--kv and friends). */
omni_status session_kv_init(omni_session *s, int ctx);
void session_close(omni_session *s);
/* A separate one-sequence cache for this model; `mode` overrides --kv when non-NULL (other --kv-* options apply). */
omni_status session_new_cache(const omni_session *s, const char *mode, int ctx, kv_cache **kv, int *seq);

/* Text -> ids (special tokens recognised). Invalid UTF-8 is replaced by U+FFFD with a warning. */
omni_status session_tokenize(omni_session *s, const char *text, int32_t **ids, int *n);

/* Feed prompt tokens and leave the last logits in s->logits. Each <|image_pad|> / <|audio_pad|> in `ids` stands
 * for the next media item of that kind (in order) and is expanded to its n_tokens; the counts must match
 * (OMNI_ERR_USAGE otherwise). Positions follow get_rope_index, continuing after what the cache holds. */
omni_status session_eval_prompt(omni_session *s, const int32_t *ids, int n, omni_media *media, int n_media);

/* Feed one generated token (decode step). */
omni_status session_eval_token(omni_session *s, int32_t id);

/* Sample, stream text to stdout, until EOS, n_predict tokens or the context is full. Returns the number of
 * tokens generated through *n_out and optionally their ids (malloc'ed, caller frees). The final EOS (if any) is
 * evaluated into the cache only when keep_eos != 0 (chat keeps it). */
omni_status session_generate(omni_session *s, int n_predict, int keep_eos, int32_t **ids_out, int *n_out);

/* llama.cpp-shaped perf block and the KV line on stderr. */
void session_print_perf(const omni_session *s);

#endif
