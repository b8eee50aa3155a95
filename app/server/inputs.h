/* inputs.h - a validated request (prompt text + media bytes) -> what an llm_engine request takes: the token ids
 * with each <|image_pad|> / <|audio_pad|> expanded to its encoder's row count, the spans of encoder outputs, and
 * the 3-stream MRoPE positions (get_rope_index) with their rope_delta.
 *
 * Media are decoded from their bytes (images: PNG/JPEG/BMP/GIF/PNM/TGA with a pixel limit checked from the header;
 * audio: WAV/MP3/FLAC/... through a private temp file, with a duration limit) and encoded by app/media.h's
 * encoder (towers loaded on first use), one request at a time (it is shared by the connection threads); the
 * expansion and positions are media_prompt_build's. Anything wrong with a request's media is a 400 with the
 * decoder's message. */
#ifndef OMNI_SERVER_INPUTS_H
#define OMNI_SERVER_INPUTS_H

#include "app/media.h"
#include "app/server/request.h"
#include "llm/model.h"
#include "llm/tokenizer.h"

typedef struct srv_encoders srv_encoders;

typedef struct {
    const char *model_dir;
    const llm_model *model;
    int64_t max_image_pixels;               /* per image (<= 0: the vision module's default) */
    double max_audio_s;                     /* per clip (<= 0: no limit) */
    int image_min_tokens, image_max_tokens; /* visual-token budget per image (0: the model's) */
    int ctx;                                /* a request's prompt must be shorter (checked before encoding) */
} srv_encoders_params;

omni_status srv_encoders_init(const srv_encoders_params *p, srv_encoders **out);
void srv_encoders_free(srv_encoders *e); /* NULL is a no-op */

typedef struct {
    media_prompt prompt;  /* tokens (expanded), pos, rope_delta, spans: media_prompt_request sets them */
    media_item *items;    /* [n_items] the encoder outputs the spans point into */
    int n_items;
    double encode_ms;
} srv_inputs;

/* Tokenize (special tokens recognised, as the CLI does), check that the placeholders match the media, count the
 * tokens with the media (image headers, decoded audio: a prompt of ctx tokens or more is refused before any
 * encoder runs), encode the media and expand. OMNI_OK, or an error in *err (400 for the request's fault, 500
 * otherwise). */
omni_status srv_inputs_build(srv_encoders *e, const llm_tokenizer *tok, const srv_request *req, srv_inputs *out,
                             srv_error *err);
void srv_inputs_free(srv_inputs *in); /* zeroes *in; an empty one is a no-op */

/* The 400 context_length_exceeded of a prompt of n_tokens (at_least: a lower bound, counting stopped there) against
 * a context of ctx. */
omni_status srv_context_error(srv_error *err, const srv_request *req, int n_tokens, int at_least, int ctx);

#endif
