/* attn_ref.h - internal to llm/cuda: a simple, correct attention for the CUDA step over a contiguous bf16 KV
 * store, used until the paged device KV cache (kvcache, branch kvpool) and the attention kernels (branch attn)
 * land; then the step calls those instead. Not tuned: SIMT fp32, split over the keys (flash-decoding) so that
 * decode spreads over the GPU, launch shape fixed by (rows, splits) so that it can be captured in a graph.
 *
 * Stores: a device table of lca_store, one per KV cache; element (layer l, slot s, position p, kv head h, dim d) of
 * K at k + l·layer_stride + s·slot_stride + (p·Hkv + h)·D + d, likewise V. Row r of a step belongs to store
 * row_store[r], slot row_slot[r] (a sequence), position row_pos[r]: it writes its k, v there (lca_append) and
 * attends to positions 0 .. row_pos[r] of its slot (lca_attend), causal with GQA (q head h uses kv head
 * h / (Hq / Hkv)). Since the stores are read through the table, rows of several caches share one launch and a
 * captured graph serves any cache. Numerics: scores q·k·scale, softmax and P·V in fp32 from bf16 q, k, v; the
 * output rounded once to bf16. */
#ifndef OMNI_LLM_CUDA_ATTN_REF_H
#define OMNI_LLM_CUDA_ATTN_REF_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/status.h"

typedef struct {
    uint16_t *k, *v;                  /* layer 0, slot 0, position 0 */
    int64_t layer_stride, slot_stride; /* elements */
} lca_store;

typedef struct {
    const lca_store *stores; /* device table */
    int layer, Hq, Hkv, D;
} lca_layer;

/* Once per process (per device) before the first lca_attend*: raises the kernels' shared-memory limit. */
omni_status lca_init(void);

/* k, v rows of the step: row r at k + r·ld (Hkv·D values), the same for v. */
omni_status lca_append(const lca_layer *L, const uint16_t *k, const uint16_t *v, int64_t ld, const int32_t *row_store,
                       const int32_t *row_slot, const int32_t *row_pos, int T, cudaStream_t s);

/* Floats of partial-result workspace lca_attend needs for T rows and `splits` key splits. */
int64_t lca_workspace_floats(int T, int Hq, int D, int splits);

/* out[r, h·D ..] = softmax(scale · q_r,h · K[0..pos]) · V[0..pos], r < T. q rows at q + r·ldq; out rows at
 * out + r·ldo. split_len: keys per split (a multiple of 32); splits · split_len must cover every row_pos + 1.
 * ws: lca_workspace_floats(T, Hq, D, splits) floats. */
omni_status lca_attend(const lca_layer *L, const uint16_t *q, int64_t ldq, uint16_t *out, int64_t ldo,
                       const int32_t *row_store, const int32_t *row_slot, const int32_t *row_pos, int T, float scale,
                       int splits, int split_len, float *ws, cudaStream_t s);

/* Non-causal attention inside segments (the towers): rows [seg[i], seg[i + 1]) attend to each other only.
 * q, k, v rows in place (row stride ldq / ldk / ldv, head h at column h·D), Hq == Hkv. seg: device [n_seg + 1];
 * seg_of: device [T] segment of each row; max_seg: the longest segment (sizes the splits). */
omni_status lca_attend_segments(const uint16_t *q, int64_t ldq, const uint16_t *k, int64_t ldk, const uint16_t *v,
                                int64_t ldv, uint16_t *out, int64_t ldo, const int32_t *seg, const int32_t *seg_of,
                                int T, int H, int D, int max_seg, float scale, float *ws, int64_t ws_floats,
                                cudaStream_t s);

#endif
