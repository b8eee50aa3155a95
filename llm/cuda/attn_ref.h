/* attn_ref.h - internal to llm/cuda: a plain SIMT attention for the shapes the tensor-core kernels of
 * kvcache/kv_cuda.h do not take (head_dim other than 64/128 for the decoder, other than 64/72/80/128 for the
 * towers), e.g. the small fixture models. Correct, not tuned: fp32 scores, softmax and P·V from bf16 q, k, v;
 * split over the keys (flash-decoding) with a log-sum-exp merge; launch shape fixed by (rows, splits).
 *
 * Decoder (lca_attend_view): row r of a step (slot row_slot[r], absolute position row_pos[r]) attends causally to
 * positions 0 .. row_pos[r] of its slot as kv_forward computes it: the slot's committed history (len0 =
 * view.len[slot] tokens) from the device cache's pages through a layer view (kvcache/kv_layout.h: raw bf16 rows,
 * packed OScaR / KIVI blocks beyond the window dequantized, sinks), and the step's own tokens (positions >= len0)
 * in bf16 from the k / v rows of the step (the entry's rows are consecutive, position len0 at row
 * r - (row_pos[r] - len0)). Rotating layers work in the rotated space (q, the own rows: H x) and un-rotate the
 * output. Independent of kv_dev_append (reads committed history and the step rows only). GQA: q head h uses kv
 * head h / (Hq / Hkv).
 * Towers (lca_attend_segments): non-causal inside segments, q/k/v read in place from fused rows. */
#ifndef OMNI_LLM_CUDA_ATTN_REF_H
#define OMNI_LLM_CUDA_ATTN_REF_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/status.h"
#include "kvcache/kv_layout.h"

/* Once per process (per device) before the first call: raises the kernels' shared-memory limit. */
omni_status lca_init(void);

/* Floats of partial-result workspace for T rows of H heads of D and `splits` key splits. */
int64_t lca_workspace_floats(int T, int H, int D, int splits);

/* out[r, h·D ..] = softmax(scale · q_r,h · K[0..pos]) · V[0..pos] for r < T; q rows at q + r·ldq, out rows at
 * out + r·ldo, the step's k / v rows at k / v + r·ldk (head g at + g·D). split_len: keys per split (multiple of 32);
 * splits · split_len must cover every row_pos + 1. ws: lca_workspace_floats(T, Hq, D, splits) floats.
 * Hq / Hkv <= 8, D <= 256 and a multiple of 32 (a power of two when the layer rotates), raw elements bf16. */
omni_status lca_attend_view(const kv_layer_view *v, const uint16_t *q, int64_t ldq, const uint16_t *k,
                            const uint16_t *vv, int64_t ldk, uint16_t *out, int64_t ldo, const int32_t *row_slot,
                            const int32_t *row_pos, int T, int Hq, float scale, int splits, int split_len, float *ws,
                            cudaStream_t s);

/* Non-causal attention inside segments: rows [seg[i], seg[i + 1]) attend to each other only. q, k, v rows in
 * place (row strides ldq / ldk / ldv, head h at column h·D), H heads (no GQA). seg: device [n_seg + 1]; seg_of:
 * device [T] segment of each row; max_seg: the longest segment (sizes the splits). */
omni_status lca_attend_segments(const uint16_t *q, int64_t ldq, const uint16_t *k, int64_t ldk, const uint16_t *v,
                                int64_t ldv, uint16_t *out, int64_t ldo, const int32_t *seg, const int32_t *seg_of,
                                int T, int H, int D, int max_seg, float scale, float *ws, int64_t ws_floats,
                                cudaStream_t s);

#endif
