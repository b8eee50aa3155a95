/* weights.h - internal to llm/cuda: the decoder's weights on one GPU, in ONE device allocation, bf16, in the
 * layouts the CUDA step uses (fused at load):
 *   per layer: in_norm, post_norm [H]; q_norm, k_norm [D]; qkv [(Hq + 2·Hkv)·D, H] (q rows, k rows, v rows);
 *              o [H, Hq·D]; dense: gate_up [2I, H] (gate rows, then up rows), down [H, I];
 *              MoE: router [E, H], gate_up [E][2I, H], down [E][H, I];
 *   globals:   embed [V, H], norm [H], lm_head [V, H] (the embedding when tied);
 *   rope:      inv_freq [D/2] f32 (as transformers computes it), slot_stream [D/2] int32 (MRoPE stream per slot).
 * Loading copies from the mmap'd checkpoint through two pinned staging buffers (host conversion of f16/f32 to
 * bf16, copy of one buffer overlapping the fill of the other), with progress lines on stderr for large models.
 * Random weights are made on the device (uniform, std 0.02 as transformers' initializer_range; norms 1). */
#ifndef OMNI_LLM_CUDA_WEIGHTS_H
#define OMNI_LLM_CUDA_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/safetensors.h"
#include "llm/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint16_t *in_norm, *post_norm, *q_norm, *k_norm, *qkv, *o;
    uint16_t *gate_up, *down; /* dense [2I, H] / [H, I]; MoE [E][2I, H] / [E][H, I] */
    uint16_t *router;         /* MoE only: [E, H] */
} lcw_layer;

typedef struct {
    void *base;   /* the one device allocation */
    size_t bytes; /* its size */
    uint16_t *embed, *norm, *lm_head;
    float *inv_freq;
    int32_t *slot_stream;
    lcw_layer *layers; /* [n_layers], host array of device pointers */
} lcw_weights;

/* Device bytes the weights of `cfg` take (with 256-byte alignment of every tensor). */
size_t lcw_bytes(const llm_config *cfg);

/* Allocate and fill from the checkpoint (names and shapes as llm/model.c binds them; bf16, f16 or f32 stored).
 * progress: print "weights: x / y GiB" lines on stderr. Returns OMNI_ERR_MODEL for a missing/misshapen tensor,
 * OMNI_ERR_NOMEM when the allocation fails. On failure nothing stays allocated. */
omni_status lcw_load(lcw_weights *w, const llm_config *cfg, const omni_ckpt *ck, int progress, void *stream);

/* Allocate and fill with random values made on the device (seeded; same seed -> same weights). */
omni_status lcw_random(lcw_weights *w, const llm_config *cfg, uint64_t seed, void *stream);

void lcw_free(lcw_weights *w); /* frees the allocation and the layer array; zeroes *w; NULL-safe */

#ifdef __cplusplus
}
#endif
#endif
