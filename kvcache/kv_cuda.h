/* kv_cuda.h - the KV cache on the GPU (library omni_kvcache_cuda): block quantizer kernels that produce bytes
 * identical to the CPU reference (kvcache/kv_quant.c), and attention over the paged cache (bf16 and OScaR/KIVI
 * layers) in the page layout documented in kvcache/kvcache.h.
 *
 * No CUDA types here: device pointers are plain pointers (they must point to device memory), a stream is passed
 * as void * (a cudaStream_t, NULL = the default stream). Every call only enqueues work on the stream (no
 * synchronisation, no allocation); errors of the arguments are returned before anything is launched, launch
 * errors as OMNI_ERR_RUNTIME with the CUDA message.
 *
 * Quantizer: n_blk blocks of 32 token rows x D channels (one KV head each). Row r of block b starts at element
 * b * blk_stride + r * row_stride of src. Keys/values go through, in this order: FWHT (rotate, f32 sources only),
 * bf16 rounding (round_bf16, f32 sources only; this is what the raw window stores), then the quantizer of
 * kvcache.h. The packed block b is written at dst + b * dst_stride (bytes: kvq_key_bytes / kvq_value_bytes).
 * A bf16 source (src_bf16 = 1) is a raw page region as the cache stores it (already rotated and rounded).
 *
 * Attention: kvc_decode (one new token per sequence, split-K flash decoding over the paged history on tensor
 * cores, bf16 in and out, graph capturable); layer views describe where a layer's pages are. The full contract
 * of each call is at its declaration. Kernel sources: kvcache/cuda/kvc_attn.cu (design notes at its top).
 */
#ifndef OMNI_KV_CUDA_H
#define OMNI_KV_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"
#include "kvcache/kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int head_dim;       /* D: 64 or 128 */
    int bits;           /* 2 or 4 */
    int use_norm;       /* keys: per-token l2 norm stored (OScaR scale = 1); ignored for values */
    int rotate;         /* f32 source: FWHT each row first */
    int round_bf16;     /* f32 source: round each element to bf16 (after the rotation) */
    int src_bf16;       /* source rows are bf16 (uint16) instead of f32; rotate and round_bf16 must be 0 */
    int64_t row_stride; /* elements between token rows of one block (>= D) */
    int64_t blk_stride; /* elements between blocks */
    int64_t dst_stride; /* bytes between packed blocks in dst (multiple of 4, >= the block size) */
} kvc_quant_desc;

/* Keys: tokens < t0 of every block are excluded from the groups (codes 0, norm 0), as for sinks in block 0.
 * src, dst: device pointers; dst must be 4-byte aligned. */
omni_status kvc_quant_keys(const kvc_quant_desc *d, const void *src, int n_blk, int t0, uint8_t *dst, void *stream);
omni_status kvc_quant_values(const kvc_quant_desc *d, const void *src, int n_blk, uint8_t *dst, void *stream);

/* ---------------------------------------------------------------- attention
 * Pages are read through a layer view (kvcache/kv_layout.h, device pointers: kv_dev_layer_view) whose tables and
 * lengths are indexed by sequence slot; a call processes a batch of slots (slots[i], or i when slots is NULL).
 * Requirements: raw elements bf16 (k_esz = v_esz = 2), head_dim 64 or 128, quantized layers 2 or 4 bits each,
 * pools, page sizes and every offset / per-head stride multiples of 16 bytes. */
typedef struct kvc_attn kvc_attn;

#define KVC_MAX_SEQS 256 /* sequences per call */

/* Workspace for calls of up to max_seqs (1..256) sequences with n_q_heads / n_kv_heads heads of head_dim (64 or
 * 128): split partials (~(max(4 SMs, max_seqs * heads rows) + max_seqs * rows) * 8 * D * 4 bytes, rows = Hkv *
 * ceil(group / 8)), allocated once; kernel attributes are set here (nothing is set or allocated per call). */
omni_status kvc_attn_init(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim, kvc_attn **out);
void kvc_attn_free(kvc_attn *a); /* NULL is a no-op */

/* Decode attention (one query token per sequence): for each batch entry i (slot s = slots[i]) and query head h,
 *     out[i][h] = softmax_j(scale * q~[i][h] . k~_j) v~_j   over the L = len[s] tokens of slot s,
 * un-rotated (out = H o~) when the layer rotates; q~ = H q when rotating. GQA: head h reads KV head
 * h / (Hq / Hkv); the query heads of one KV head (up to 8 per pass) share every K/V load. The new token must
 * already be in the cache (append first, then attend over L including it); L = 0 gives zeros.
 * slots: device [n_seq] slot ids (distinct) or NULL (slot i); q: device [n_seq][Hq][D] bf16 (post-RoPE,
 * unrotated); out: device [n_seq][Hq][D] bf16.
 * Computes like FlashAttention in bf16 (bf16 / f16 operands, f32 accumulation and softmax): within 1e-2 of
 * max |out| (RMS 3e-3) of an f64 evaluation over the same stored history (performance.md section 4).
 * Two kernels on `stream` (the split pass and the merge, the second with programmatic dependent launch); the
 * launch shapes depend only on n_seq and the layer's format (never on lengths, which are read on the device),
 * so a decode step can be captured in a CUDA graph per batch size. Returns before launching on bad arguments. */
omni_status kvc_decode(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots, const uint16_t *q,
                       uint16_t *out, float scale, void *stream);

/* The same result from a plain SIMT kernel (f32 throughout, one CTA per (sequence, head)): the permanent oracle
 * of the tests and a fallback; slow (no K/V sharing across heads, no split of the history). */
omni_status kvc_decode_ref(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots, const uint16_t *q,
                           uint16_t *out, float scale, void *stream);

/* CTAs of the split pass of kvc_decode for n_seq sequences of the view's format (diagnostics, benchmarks). */
int kvc_decode_ctas(const kvc_attn *a, const kv_layer_view *v, int n_seq);

#ifdef __cplusplus
}
#endif
#endif
