/* vision_cuda.h - the Qwen3-VL vision tower (also Qwen3-Omni's) on one CUDA GPU in bf16 (library omni_vision_cuda,
 * built only with CUDA). Same model and outputs as vision_tower_encode (vision.h), computed as transformers does
 * in bf16 (DESIGN.md §4): bf16 activations between ops, fp32 accumulation in GEMMs, norms, softmax; the 2D RoPE
 * and the position-embedding interpolation in fp32 as the reference code upcasts them.
 *
 *     vision_tower_cuda *g;  vision_tower_cuda_init(cpu_tower, &params, &g);   (uploads the weights once)
 *     vision_tower_cuda_encode(g, patches, n_images, outputs);                  (host f32 in, host f32 out)
 *     vision_tower_cuda_free(g);
 *
 * Weights: one device allocation (bf16, 256-byte aligned tensors). Workspace: one device allocation sized at init
 * for params.max_patches patches (all images of one call together) and max_images images; a call allocates
 * nothing. Per call: pixels f32 are copied to the device and rounded to bf16 there, the forward runs on the tower's
 * stream (cuBLAS GEMMs, kernels/cuda ops, kvcache/cuda's tower attention (kvcache/kv_towers.h): each image one
 * segment), outputs come back as f32. Each image of a call is its own attention segment, so one call with several
 * images gives each image what a call of its own gives (up to GEMM summation order).
 * The tower holds its own omni_cuda_ctx (stream + cuBLAS handle) on params.device; one thread at a time.
 * Errors: omni_status with omni_last_error(): OMNI_ERR_NOMEM with bytes needed vs free when the weights or the
 * workspace do not fit, OMNI_ERR_INPUT for a call over the sizes of the workspace or a bad grid, OMNI_ERR_RUNTIME
 * for CUDA errors (message names the call). *_free(NULL) is a no-op. */
#ifndef OMNI_VISION_CUDA_H
#define OMNI_VISION_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"
#include "vision/vision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int device;      /* CUDA device index */
    int max_patches; /* patches (pre-merge) of one call, all images together; a multiple of 4 */
    int max_images;  /* images (attention segments) of one call */
    int row_chunk;   /* rows per MLP GEMM pass (bounds the MLP and cuBLAS scratch buffers) */
} vision_cuda_params;

/* device 0, max_patches 16384 (a 4096-token image), max_images 64, row_chunk 8192. */
vision_cuda_params vision_cuda_default_params(void);

typedef struct vision_tower_cuda vision_tower_cuda;

/* Upload the weights of a loaded CPU tower (the CPU tower and its checkpoint may be freed afterwards). */
omni_status vision_tower_cuda_init(const vision_tower *cpu, const vision_cuda_params *p, vision_tower_cuda **out);
/* Random bf16 weights of the config's shapes made on the device (speed work): matrices uniform with std 0.02
 * (transformers' initializer_range), LayerNorm weights 1 and biases 0, biases uniform with std 0.02. Same seed,
 * same weights. Says so on stderr. */
omni_status vision_tower_cuda_init_random(const vision_config *cfg, uint64_t seed, const vision_cuda_params *p,
                                          vision_tower_cuda **out);
void vision_tower_cuda_free(vision_tower_cuda *t);
const vision_config *vision_tower_cuda_config(const vision_tower_cuda *t);
/* Device bytes of the weights and of the workspace. */
size_t vision_tower_cuda_weight_bytes(const vision_tower_cuda *t);
size_t vision_tower_cuda_workspace_bytes(const vision_tower_cuda *t);

/* Encode n images (pp[i] from vision_preprocess) in one pass: out[i] as vision_tower_encode gives it (host f32,
 * owned: vision_output_free); encode_ms of each output is the wall time of the whole call. */
omni_status vision_tower_cuda_encode(vision_tower_cuda *t, const vision_patches *pp, int n, vision_output *out);

/* The three steps of encode, for benchmarks: upload (pixels to the device as bf16, coordinates, segments; returns
 * after the copies), run (enqueues the forward on the tower's stream, returns at once; run may be repeated on the
 * same upload), download (waits for the stream, fills out[i] as encode does). */
omni_status vision_tower_cuda_upload(vision_tower_cuda *t, const vision_patches *pp, int n);
omni_status vision_tower_cuda_run(vision_tower_cuda *t);
omni_status vision_tower_cuda_download(vision_tower_cuda *t, vision_output *out);
/* The tower's stream (a cudaStream_t) for timing run() with events. */
void *vision_tower_cuda_stream(const vision_tower_cuda *t);

#ifdef __cplusplus
}
#endif
#endif
