/* positions.h - 3-stream (T, H, W) MRoPE position ids for Qwen3-VL and Qwen3-Omni prompts.
 *
 * Reproduces transformers' get_rope_index (Qwen3VLModel, 5.17.0) and, for audio, the Qwen3-Omni thinker rule:
 *   - text tokens: consecutive positions, equal on the three streams;
 *   - an image (grid t, h, w in patch units, merged by m = spatial_merge_size) occupies t*(h/m)*(w/m) consecutive
 *     <|image_pad|> tokens; token (ti, r, c) gets T = s + ti, H = s + r, W = s + c where s = position of the token
 *     before + 1; the token after the image gets s + max(h, w)/m (an image advances the counter by max(gh, gw));
 *   - audio (Omni): each <|audio_pad|> gets the next consecutive position (one per token, as text), so an
 *     audio-only prompt has positions 0..n-1;
 *   - rope_delta = max(position) + 1 - n; a token appended later at cache index k gets k + rope_delta on all
 *     three streams (llm_positions_text).
 * Layout of `pos`: [3 * n] = T stream, then H stream, then W stream (pos[s * n + i]).
 * Not supported: video tokens (OMNI_ERR_UNSUPPORTED) and Omni audio-in-video interleaving. */
#ifndef OMNI_LLM_POSITIONS_H
#define OMNI_LLM_POSITIONS_H

#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int image_token_id;     /* <|image_pad|> */
    int video_token_id;     /* <|video_pad|> (-1: none) */
    int audio_token_id;     /* <|audio_pad|> (-1: none) */
    int spatial_merge_size; /* 2 */
} llm_pos_config;

typedef struct {
    int t, h, w; /* image_grid_thw row: patch units (before the 2x2 merge) */
} llm_grid;

/* Positions of a whole prompt (or of its first chunk onwards: positions are absolute from token 0).
 * grids: one per image, in prompt order; every image must have exactly t*(h/m)*(w/m) pad tokens.
 * audio_lens (may be NULL): tokens per audio segment in order, checked against the runs of audio pad tokens.
 * rope_delta may be NULL. Errors: OMNI_ERR_INPUT when placeholder counts and grids/audio lengths disagree. */
omni_status llm_positions_build(const int32_t *ids, int n, const llm_pos_config *cfg, const llm_grid *grids,
                                int n_grids, const int *audio_lens, int n_audio, int32_t *pos, int *rope_delta);

/* Positions of n text tokens at cache indices start .. start+n-1 after a prompt with `rope_delta`
 * (decode steps, or text appended to a cached conversation): start + i + rope_delta on all streams. */
void llm_positions_text(int start, int n, int rope_delta, int32_t *pos);

/* Number of merged tokens an image grid produces: t * (h/m) * (w/m). */
int llm_grid_tokens(const llm_grid *g, int merge);

#ifdef __cplusplus
}
#endif
#endif
