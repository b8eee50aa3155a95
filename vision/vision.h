/* vision.h - image input for Qwen3-VL / Qwen3-Omni: loading, preprocessing and the vision tower.
 *
 * Pipeline (one image):
 *   vision_image_load(path)            -> RGB uint8 [h, w, 3] (alpha composited on white)
 *   vision_preprocess(img, params)     -> pixel_values [N, C*T*P*P = 1536] f32 in merge-block order + grid (t, h, w)
 *   vision_tower_encode(tower, pixels) -> embeddings [N/4, out_hidden] + deepstack [n_ds][N/4, out_hidden]
 * Preprocessing reproduces transformers 5.17.0's Qwen2VLImageProcessor (torchvision backend): smart_resize with
 * factor patch*merge, bicubic antialiased resize on uint8 (ATen's separable int16-weight kernel), fused
 * rescale+normalize in fp32, patches in merge-block order. The tower is the Qwen3-VL vision model (same tower in the
 * Qwen3-Omni thinker, `thinker.visual.` with ln_q/mlp.0/mlp.2/merger_list names).
 * Every function returns an omni_status and sets omni_last_error() on failure; *_free(NULL) is a no-op. */
#ifndef OMNI_VISION_H
#define OMNI_VISION_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "kernels/safetensors.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- images ------------------------------------------------------------------------------------------------ */

/* Default limit on width*height checked from the header before any pixel is decoded. */
#define VISION_DEFAULT_MAX_IMAGE_PIXELS ((int64_t)1 << 27) /* 134M pixels, e.g. 11585 x 11585 */

typedef struct {
    int width, height;
    int src_channels; /* channels in the file: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA */
    uint8_t *rgb;     /* [height, width, 3], row-major, owned */
} vision_image;

/* Load PNG, JPEG, BMP, GIF (first frame), PNM (P5/P6) or TGA. Grey, grey+alpha, RGBA and 16-bit images become
 * 8-bit RGB; alpha is composited on white (PIL alpha_composite arithmetic). max_pixels <= 0: the default limit.
 * Errors (OMNI_ERR_INPUT): missing/unreadable file, empty file, unknown or unsupported format, truncated PNG/JPEG,
 * too many pixels (refused from the header, before decoding), corrupt data. */
omni_status vision_image_load(const char *path, int64_t max_pixels, vision_image *out);
/* Same from a memory buffer; `name` is used in messages. */
omni_status vision_image_load_memory(const uint8_t *data, size_t size, const char *name, int64_t max_pixels,
                                     vision_image *out);
/* Width and height (after EXIF orientation) from the header only, with the same checks and errors as
 * vision_image_load up to decoding (missing, not a regular file, unknown format, truncated, over max_pixels):
 * what a caller needs to count an image's tokens before paying for the decode and the encoder. */
omni_status vision_image_probe(const char *path, int64_t max_pixels, int *width, int *height);
omni_status vision_image_probe_memory(const uint8_t *data, size_t size, const char *name, int64_t max_pixels,
                                      int *width, int *height);
/* Wrap an existing RGB buffer (copied). */
omni_status vision_image_from_rgb(const uint8_t *rgb, int width, int height, vision_image *out);
void vision_image_free(vision_image *img); /* frees img->rgb, zeroes *img; NULL is a no-op */

/* ---- preprocessing ----------------------------------------------------------------------------------------- */

typedef struct {
    int patch_size;          /* 16 */
    int temporal_patch_size; /* 2 */
    int merge_size;          /* 2 */
    int64_t min_pixels;      /* size.shortest_edge (65536 for Qwen3-VL) */
    int64_t max_pixels;      /* size.longest_edge (16777216 for Qwen3-VL) */
    float mean[3], std[3];   /* 0.5 */
    double rescale_factor;   /* 1/255 */
} vision_prep_params;

/* Qwen3-VL defaults (preprocessor_config.json of Qwen3-VL-2B/4B/8B-Instruct). */
vision_prep_params vision_prep_default_params(void);
/* Read <model_dir>/preprocessor_config.json over the defaults: size {shortest_edge, longest_edge}, then
 * min_pixels/max_pixels (which override size, as the processor does), patch_size, temporal_patch_size,
 * merge_size, image_mean, image_std, rescale_factor. A missing file leaves the defaults (OMNI_OK). */
omni_status vision_prep_load_config(const char *model_dir, vision_prep_params *p);
/* The same from the text of a preprocessor_config.json (*p unchanged on failure). */
omni_status vision_prep_parse_json(const char *json, size_t len, vision_prep_params *p);
/* Express the pixel budget in visual tokens (one token = (patch*merge)^2 pixels): min_tokens/max_tokens <= 0
 * leave that bound unchanged, unless the other bound, given alone, crosses it: then it follows (max 32 alone
 * with a default min of 64 tokens gives 32..32). Fails with OMNI_ERR_USAGE if both are given and min > max. */
omni_status vision_prep_set_token_limits(vision_prep_params *p, int min_tokens, int max_tokens);
/* A preferred budget (a command's default, e.g. OCR's 1024-2048 tokens) rather than a demand: it is narrowed to
 * the model's own [min_pixels, max_pixels] (from preprocessor_config.json), and when the two ranges do not overlap
 * the model's own limits stay (a model trained for 4-256 tokens keeps them). Fails with OMNI_ERR_USAGE if
 * min > max. */
omni_status vision_prep_prefer_token_limits(vision_prep_params *p, int min_tokens, int max_tokens);

/* smart_resize: target (h, w), multiples of factor = patch*merge, within [min_pixels, max_pixels].
 * OMNI_ERR_INPUT for an aspect ratio over 200 or a zero-sized image. */
omni_status vision_smart_resize(int height, int width, const vision_prep_params *p, int *out_h, int *out_w);

/* Bicubic antialiased resize of interleaved uint8 images [h, w, c] -> [oh, ow, c], bit-exact with torch
 * F.interpolate(mode="bicubic", antialias=True, align_corners=False) on uint8 (CPU): separable, horizontal pass
 * first into a uint8 buffer, Keys cubic a=-0.5 widened by the downscale factor, int16 weights. */
omni_status vision_resize_bicubic_aa(const uint8_t *src, int h, int w, int c, uint8_t *dst, int oh, int ow);

typedef struct {
    int grid_t, grid_h, grid_w; /* patch units (pre-merge) */
    int resized_h, resized_w;   /* pixels after smart_resize */
    int n_patches;              /* grid_t * grid_h * grid_w */
    int patch_dim;              /* 3 * temporal_patch_size * patch_size^2 */
    float *pixels;              /* [n_patches, patch_dim], owned */
} vision_patches;

/* Resize + normalize + patchify one image. Rows in merge-block order; each row (channel, time, y, x) with the
 * single frame repeated temporal_patch_size times. */
omni_status vision_preprocess(const vision_image *img, const vision_prep_params *p, vision_patches *out);
void vision_patches_free(vision_patches *pp); /* NULL is a no-op */

/* Number of merged visual tokens an image of height x width produces (0 and an error if refused). */
omni_status vision_image_token_count(int height, int width, const vision_prep_params *p, int *grid_h, int *grid_w,
                                     int *n_tokens);

/* ---- vision tower ------------------------------------------------------------------------------------------ */

#define VISION_MAX_DEEPSTACK 4

typedef struct {
    int depth, hidden, n_heads, head_dim, intermediate;
    int patch_size, temporal_patch_size, merge_size, in_channels;
    int out_hidden, num_position_embeddings;
    int n_deepstack, deepstack_index[VISION_MAX_DEEPSTACK];
    float rope_theta;        /* 10000 */
    int gelu_tanh;           /* block MLP activation: 1 gelu_pytorch_tanh, 0 exact gelu */
} vision_config;

/* Read the vision config from <model_dir>/config.json (vision_config, or thinker_config.vision_config) without
 * loading weights (what vision_tower_load uses; random-weight GPU towers start from it). */
omni_status vision_config_read(const char *model_dir, vision_config *c);

/* The 2D RoPE frequencies as transformers computes them in fp32: inv_freq[k] = 1 / theta^(2k / (hd/2)),
 * k < head_dim / 4. */
void vision_rope_inv_freq(const vision_config *c, float *inv_freq);

/* Full-resolution (row, col) of every patch in merge-block order (merge 2), frames repeated: [gt·gh·gw] each. */
void vision_patch_coords(int gt, int gh, int gw, int32_t *row, int32_t *col);

typedef struct vision_tower vision_tower;

/* The tower's tensors as bound in the checkpoint (views into the mmap; any float dtype), for device upload.
 * D = hidden, I = intermediate, M = 4·D, O = out_hidden. */
typedef struct {
    omni_tensor n1w, n1b, n2w, n2b;  /* LayerNorms [D] */
    omni_tensor qkv_w, qkv_b;        /* [3D, D], [3D] */
    omni_tensor proj_w, proj_b;      /* [D, D], [D] */
    omni_tensor fc1_w, fc1_b;        /* [I, D], [I] */
    omni_tensor fc2_w, fc2_b;        /* [D, I], [D] */
} vision_block_weights;

typedef struct {
    omni_tensor nw, nb;              /* [D] (main merger) or [M] (deepstack mergers) */
    omni_tensor fc1_w, fc1_b;        /* [M, M], [M] */
    omni_tensor fc2_w, fc2_b;        /* [O, M], [O] */
} vision_merger_weights;

typedef struct {
    omni_tensor patch_w, patch_b;    /* [D, 3, 2, P, P], [D] */
    omni_tensor pos_embed;           /* [num_position_embeddings, D] */
    const vision_block_weights *blocks;                 /* [depth] */
    vision_merger_weights merger, deepstack[VISION_MAX_DEEPSTACK];
} vision_weights;

/* Build the tower from <model_dir>/config.json (vision_config, or thinker_config.vision_config for Qwen3-Omni)
 * and the tensors of `ckpt` under `model.visual.` (Qwen3-VL) or `thinker.visual.` (Qwen3-Omni). The tower
 * borrows the weights: `ckpt` must outlive it. */
omni_status vision_tower_load(const char *model_dir, const omni_ckpt *ckpt, vision_tower **out);
/* The same from a config already read: llm_config's vision_json holds the section of the one config.json read. */
omni_status vision_tower_load_config(const vision_config *cfg, const omni_ckpt *ckpt, vision_tower **out);
/* Read and check a vision_config object (every value type- and range-checked; OMNI_ERR_MODEL naming the key,
 * e.g. "config.json: vision_config.deepstack_visual_indexes: expected an array of integers, got a string").
 * `where` is its key path for messages (NULL: "vision_config"). */
omni_status vision_config_from_json(const cJSON *vc, const char *where, vision_config *out);
void vision_tower_free(vision_tower *t); /* NULL is a no-op */
const vision_config *vision_tower_config(const vision_tower *t);
/* While *flag is non-zero (Ctrl+C), vision_tower_encode stops before its next block with OMNI_ERR_RUNTIME
 * "interrupted" and no output. NULL: never. */
void vision_tower_set_interrupt(vision_tower *t, volatile const int *flag);
/* The tower's weights (valid while the tower and its checkpoint live). */
void vision_tower_weights(const vision_tower *t, vision_weights *w);

typedef struct {
    int grid_t, grid_h, grid_w; /* patch units */
    int n_tokens;               /* grid_t * grid_h * grid_w / merge^2 */
    int out_hidden;
    int n_deepstack;
    float *embd;                                  /* [n_tokens, out_hidden], owned */
    float *deepstack[VISION_MAX_DEEPSTACK];       /* each [n_tokens, out_hidden], owned */
    double encode_ms;
} vision_output;

/* Encode one image (its own attention segment). */
omni_status vision_tower_encode(vision_tower *t, const vision_patches *pp, vision_output *out);
void vision_output_free(vision_output *o); /* NULL is a no-op */

/* What the app reports per image (stderr lines: size, resized size, visual tokens, times). */
typedef struct {
    int width, height;         /* as loaded */
    int resized_w, resized_h;  /* after smart_resize */
    int n_tokens;              /* merged visual tokens = <|image_pad|> count */
    double load_ms, preprocess_ms, encode_ms;
} vision_image_info;

/* Load + preprocess + encode one image file (max_image_pixels <= 0: default limit). info may be NULL. */
omni_status vision_encode_file(vision_tower *t, const vision_prep_params *p, const char *path, int64_t max_image_pixels,
                               vision_output *out, vision_image_info *info);

#ifdef __cplusplus
}
#endif
#endif
