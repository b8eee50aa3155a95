/* media.h - images and audio files -> encoder embeddings for the decoder (the glue between vision/, audio/ and
 * the session). Encoders are loaded on first use from the session's model. Each encode prints one stderr line
 * with the facts users look for (sizes, token counts, encode time). */
#ifndef OMNI_APP_MEDIA_H
#define OMNI_APP_MEDIA_H

#include "app/session.h"

/* Load, preprocess and encode an image. Token budget from --image-min-tokens/--image-max-tokens. */
omni_status media_encode_image(omni_session *s, const char *path, omni_media *out);
/* Decode, resample, log-mel and encode an audio file. */
omni_status media_encode_audio(omni_session *s, const char *path, omni_media *out);
/* Encode every --image and --audio of the args, images first then audio, in the order given. */
omni_status media_encode_args(omni_session *s, omni_media **out, int *n_out);
/* OMNI_ERR_UNSUPPORTED when the model lacks the encoder some of the media need (checked before any work). */
omni_status media_check_support(const omni_session *s, int n_images, int n_audios);
void media_free(omni_media *m, int n); /* frees the array's contents and the array; NULL is a no-op */

#endif
