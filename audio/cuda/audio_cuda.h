/* audio_cuda.h - the Qwen3-Omni AuT audio tower on one CUDA GPU in bf16 (library omni_audio_cuda, built only with
 * CUDA). Same model, chunking, windows and outputs as audio_tower_encode (audio.h), computed as transformers does
 * in bf16 (DESIGN.md §4): bf16 activations between ops, fp32 accumulation in GEMMs, norms and softmax.
 *
 *     audio_tower_cuda *g;  audio_tower_cuda_init(cpu_tower, &params, &g);   (uploads the weights once)
 *     audio_tower_cuda_encode(g, mel, T, out);                               (host f32 in and out)
 *
 * The conv stem runs as im2col + cuBLAS GEMMs on batches of chunks (the third conv's rows in (chunk, time, freq)
 * order, so that conv_out reads them directly with its weight columns permuted at upload), positions are a
 * periodic add, the encoder layers attend within windows through kvcache/cuda's tower attention
 * (kvcache/kv_towers.h: any even head_dim <= 128). A clip runs in groups of whole attention windows of at most
 * params.max_frames mel frames (windows never interact, so the result does not depend on the grouping).
 * Weights: one device allocation (bf16; q/k/v fused into one [3d, d] matrix; conv weights with their K padded to a
 * multiple of 8). Workspace: one device allocation sized at init, plus a host staging buffer for the chunked mel;
 * a call allocates nothing. The tower holds its own omni_cuda_ctx on params.device; one thread at a time.
 * Errors: omni_status with omni_last_error(): OMNI_ERR_NOMEM with bytes needed vs free at init, OMNI_ERR_INPUT
 * for an empty clip, OMNI_ERR_RUNTIME for CUDA errors. *_free(NULL) is a no-op. */
#ifndef OMNI_AUDIO_CUDA_H
#define OMNI_AUDIO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "audio/audio.h"
#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int device;     /* CUDA device index */
    int max_frames; /* mel frames per group (rounded down to whole attention windows, at least one window) */
    int conv_batch; /* chunks per conv-stem GEMM pass (bounds the im2col buffer) */
} audio_cuda_params;

/* device 0, max_frames 24000 (4 minutes), conv_batch 16. */
audio_cuda_params audio_cuda_default_params(void);

typedef struct audio_tower_cuda audio_tower_cuda;

/* Upload the weights of a loaded CPU tower (the CPU tower and its checkpoint may be freed afterwards). */
omni_status audio_tower_cuda_init(const audio_tower *cpu, const audio_cuda_params *p, audio_tower_cuda **out);
/* Random bf16 weights of the config's shapes made on the device (speed work): matrices and biases uniform with
 * std 0.02, LayerNorm weights 1 and biases 0. Same seed, same weights. Says so on stderr. */
omni_status audio_tower_cuda_init_random(const audio_tower_config *cfg, uint64_t seed, const audio_cuda_params *p,
                                         audio_tower_cuda **out);
void audio_tower_cuda_free(audio_tower_cuda *t);
const audio_tower_config *audio_tower_cuda_config(const audio_tower_cuda *t);
size_t audio_tower_cuda_weight_bytes(const audio_tower_cuda *t);
size_t audio_tower_cuda_workspace_bytes(const audio_tower_cuda *t);
void *audio_tower_cuda_stream(const audio_tower_cuda *t);

/* Encode mel [n_mels, T] (row stride T, host f32) to out [audio_token_count(T), out_dim] (host f32), as
 * audio_tower_encode. Returns when out is filled. */
omni_status audio_tower_cuda_encode(audio_tower_cuda *t, const float *mel, int64_t T, float *out);

#ifdef __cplusplus
}
#endif
#endif
