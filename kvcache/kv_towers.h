/* kv_towers.h - the towers' attention on the GPU (kvcache/cuda/kvc_segments.cu, library omni_kvcache_cuda): the
 * non-causal segment attention of kvc_attn_segments (kv_cuda.h) computed as flash-attention does in bf16, for the
 * vision and audio towers (vision/cuda, audio/cuda). No CUDA types here. */
#ifndef OMNI_KV_TOWERS_H
#define OMNI_KV_TOWERS_H

#include <stdint.h>

#include "kernels/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens [cu_seg[i], cu_seg[i+1]) form segment i; each query attends to every token of its segment, head by head
 * (no GQA, no mask inside a segment). q, k, v: device bf16 rows of qkv_row elements per token, head h at
 * + h * head_dim (a fused qkv buffer works: pass its three bases); out: device rows of out_row elements (even),
 * head h at + h * head_dim; the elements of a row past n_heads * head_dim are not written.
 * Numerics: bf16 Q, K, V, f32 scores, exp2 softmax and accumulation, P rounded to bf16 for P·V (row sums before
 * that rounding), out rounded to bf16: within bf16 class of an f64 evaluation (each output within 2^-8 of
 * (|out| + max |v| of its segment and head)). head_dim: even, <= 128 (run at 32, 64, 80 or 128 channels, the
 * extra ones zero in shared memory). 16-byte aligned q/k/v with head_dim and qkv_row multiples of 8 take
 * asynchronous 16-byte copies, others element loads. max_seg >= every segment's length (sizes the grid:
 * (ceil(max_seg / 64), n_seg * n_heads) CTAs of 128 threads, 56 KB of shared memory at head_dim 72). No
 * workspace; one kernel on `stream`; returns before launching on bad arguments (OMNI_ERR_USAGE). */
omni_status kvc_tower_attn(int n_heads, int head_dim, const int32_t *cu_seg, int n_seg, int max_seg,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v, int64_t qkv_row, uint16_t *out,
                           int64_t out_row, float scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
