/* media.h - image and audio files -> what the decoder takes: embeddings as spans, the expanded prompt and its
 * 3-stream MRoPE positions. The one place that glues vision/ and audio/ to llm/ (DESIGN.md §1: only app/ sees
 * all three); the CLI, `omni serve` and the demo share it. Model knowledge comes from the model: its config
 * (placeholder token ids, which towers exist), its preprocessor_config.json (pixel limits, merge size) and the
 * towers' own configs; nothing is hard-coded in the callers.
 *
 * Usage:
 *     media_encoder *enc;  media_encoder_init(model, model_dir, &mp, &enc);   (towers load on first use)
 *     media_item it[2];  media_encode_image(enc, "page.png", &it[0]);  media_encode_audio(enc, "q.wav", &it[1]);
 *     media_prompt mp;  media_prompt_build(enc, ids, n, it, 2, &mp);     (ids: one pad token per item)
 *     media_prompt_request(&mp, &request);  llm_engine_submit(...);      (the engine copies the spans)
 *     media_prompt_free(&mp);  media_item_clear(&it[0]); ...
 * Each encode prints one stderr line with the facts users look for (sizes, token counts, encode time).
 * An encoder is used by one thread at a time; make one per thread to encode in parallel. */
#ifndef OMNI_APP_MEDIA_H
#define OMNI_APP_MEDIA_H

#include "audio/audio.h"
#include "llm/engine.h"
#include "llm/model.h"

typedef struct {
    int image_min_tokens, image_max_tokens; /* visual-token budget per image; 0: the model's pixel limits */
    int64_t max_image_pixels;               /* width*height refused from the header; 0: the vision default */
    int budget_preferred; /* 1: the budget is a command's default, kept inside the model's own pixel limits
                           * (vision_prep_prefer_token_limits); 0: it overrides them (--image-*-tokens) */
    double max_audio_seconds;               /* audio longer than this refused from the header, before decoding
                                               (audio_load_params); 0: AUDIO_DEFAULT_MAX_SECONDS */
    int gpu;              /* 1: run the towers on CUDA device 0 (builds with the CUDA towers; else the CPU); the
                           * vision workspace is sized for the largest image the pixel limits allow */
} media_params;

media_params media_default_params(void);

typedef struct media_encoder media_encoder;

/* The model (and its directory, for the preprocessor and tower configs) must outlive the encoder. */
omni_status media_encoder_init(const llm_model *m, const char *model_dir, const media_params *p, media_encoder **out);
void media_encoder_free(media_encoder *enc); /* NULL is a no-op */
/* Total milliseconds spent encoding so far (for the perf block). */
double media_encoder_ms(const media_encoder *enc);

/* OMNI_ERR_UNSUPPORTED when the model lacks the tower some of the media need (checked before any work). */
omni_status media_check_support(const llm_model *m, int n_images, int n_audios);

/* One encoded image or audio file. */
typedef struct {
    int is_audio;
    int n_tokens;               /* placeholder tokens it replaces */
    int grid_t, grid_h, grid_w; /* images: patch grid (pre-merge); audio: 0 */
    float *embd;                /* [n_tokens, hidden] (owned) */
    int n_deepstack;
    float *deepstack[4];        /* each [n_tokens, hidden] (owned) */
} media_item;

/* Ctrl+C: while *flag is non-zero the towers stop within one block / layer ("interrupted"). */
void media_encoder_set_interrupt(media_encoder *enc, volatile const int *flag);

/* Tokens a file will take, from its header only (no pixel or sample decoded, no encoder run), with the errors
 * the encode would give up to there (missing, not a regular file, unsupported, over a limit): the CLI refuses a
 * prompt longer than the context, and chat checks /image and /audio when they are given, before any work.
 * Audio: *n_tokens is -1 when the container does not state its length. */
omni_status media_count_image(media_encoder *enc, const char *path, int *n_tokens);
omni_status media_count_audio(media_encoder *enc, const char *path, int *n_tokens);
/* The audio files of one prompt as media_encode_audios encodes them, one batch padded to the longest clip (a short
 * clip beside a longer one can take one token more than alone): n_tokens[i] for paths[i], -1 when its container
 * does not state its length (the others are then counted against the longest known clip). */
omni_status media_count_audios(media_encoder *enc, const char *const *paths, int n, int *n_tokens);
/* The same for an image file's bytes and for decoded audio (omni serve checks a request's length before encoding):
 * one clip alone, and the clips of one request as media_encode_pcms encodes them (n_tokens[i] for pcm[i]). The
 * counts equal the encoders' n_tokens. */
omni_status media_count_image_data(media_encoder *enc, const uint8_t *data, size_t size, const char *name,
                                   int *n_tokens);
omni_status media_count_pcm(media_encoder *enc, const audio_pcm *pcm, int *n_tokens);
omni_status media_count_pcms(media_encoder *enc, const audio_pcm *const *pcm, int n, int *n_tokens);

/* Load, preprocess and encode an image (token budget from the params). */
omni_status media_encode_image(media_encoder *enc, const char *path, media_item *out);
/* The same from an image file's bytes (`name` in messages; omni serve). */
omni_status media_encode_image_data(media_encoder *enc, const uint8_t *data, size_t size, const char *name,
                                    media_item *out);
/* Decode, resample, log-mel and encode an audio file. */
omni_status media_encode_audio(media_encoder *enc, const char *path, media_item *out);
/* Log-mel and encode decoded audio (16 kHz mono, audio_load's output). */
omni_status media_encode_pcm(media_encoder *enc, const audio_pcm *pcm, const char *name, media_item *out);
/* Several audio files of one request, encoded as transformers 5.17 encodes one processor call with several clips:
 * waveforms zero-padded to the longest before the log-mel, chunks padded to the longest chunk of all clips
 * (audio_log_mel_batched, audio_tower_encode_batched); out[i] for paths[i]. A short clip beside a longer one can
 * get one more mel frame (so possibly one more token) than alone. One clip = media_encode_audio. */
omni_status media_encode_audios(media_encoder *enc, const char *const *paths, int n, media_item *out);
/* media_encode_pcm for one clip of such a batch: `longest` samples of the longest clip, `chunk_pad` the longest
 * chunk in mel frames over all clips (audio_chunk_frames); 0, 0 = alone. */
omni_status media_encode_pcm_batched(media_encoder *enc, const audio_pcm *pcm, const char *name, int64_t longest,
                                     int chunk_pad, media_item *out);
/* The decoded clips of one prompt encoded as one batch, as media_encode_audios does for files (the server's
 * input_audio parts): pcm[i] -> *out[i], names[i] for the log. */
omni_status media_encode_pcms(media_encoder *enc, const audio_pcm *const *pcm, const char *const *names, int n,
                              media_item *const *out);
void media_item_clear(media_item *it); /* frees the contents; NULL is a no-op */

/* A prompt with its media: each <|image_pad|> / <|audio_pad|> of the token ids stands for the next item of that
 * kind (in order) and becomes its n_tokens pads; spans point at the items' embeddings (not copied: the items must
 * outlive the prompt); positions follow get_rope_index, from 0 (the engine continues them after a conversation's
 * history). Text-only prompts get pos NULL and rope_delta 0. */
typedef struct {
    int32_t *tokens;   /* [n_tokens] expanded */
    int n_tokens;
    int32_t *pos;      /* [3 * n_tokens] or NULL */
    int rope_delta;
    llm_span *spans;   /* [n_spans] */
    int n_spans;
} media_prompt;

/* Placeholder counts must match the items (OMNI_ERR_USAGE otherwise, checked before anything is built). */
omni_status media_prompt_build(const media_encoder *enc, const int32_t *ids, int n, const media_item *items,
                               int n_items, media_prompt *out);
/* The same count check alone, before any encoder runs (n_images / n_audios the caller will give). */
omni_status media_check_placeholders(const llm_model *m, const int32_t *ids, int n, int n_images, int n_audios);
void media_prompt_free(media_prompt *p);
/* Set the request's tokens, pos, rope_delta and spans from the prompt. */
void media_prompt_request(const media_prompt *p, llm_request *r);

#endif
