/* kv_cuda.h - the OScaR / KIVI KV cache on the GPU (library omni_kvcache_cuda): block quantizer kernels that
 * produce bytes identical to the CPU reference (kvcache/kv_quant.c), and decode attention (one query token per
 * sequence) over a sequence's history stored in the page layout documented in kvcache/kvcache.h.
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
 * Decode attention: kvc_decode computes, for each sequence s and query head h, softmax(scale q~ . k~_j) over the
 * sequence's L committed tokens (quantized blocks b < nq = max(0, (L - R) / 32) from the quant pages, the rest
 * bf16 from the raw pages), plus optionally the new token itself in f32 (k_new / v_new, as kv_forward does for a
 * chunk of one token), and writes o = H o~ (un-rotated when the format rotates). Rotation of q, k_new, v_new
 * happens inside. GQA: q head h uses KV head h / (Hq / Hkv); all query heads of a KV head share one pass over its
 * bytes; the history is split across CTAs (flash-decoding) and the parts are merged with log-sum-exp.
 * Quantized blocks use tensor cores (bf16 MMA with an exact 3-term split of the f32 operands: f32-level accuracy)
 * for up to 4 query heads per pass; OMNI_KVC_SIMT=1 in the environment (read at kvc_attn_init) forces the
 * plain-FMA path. Not supported yet: n_sink > 0, non-quantized layers (f32/bf16 formats).
 */
#ifndef OMNI_KV_CUDA_H
#define OMNI_KV_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

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

/* One layer of a quantizing cache as stored on the device (mirror of the CPU pools; see kvcache.h). */
typedef struct {
    int n_kv_heads, head_dim; /* Hkv, D (64 or 128) */
    int kbits, vbits;         /* 2 or 4 */
    int rotate, scale;        /* OScaR 1/1, KIVI 0/0 */
    int window;               /* R (multiple of 32, 0..256): nq = max(0, (L - R) / 32) */
    const uint8_t *qpool;     /* quant pages: page p at qpool + p * qpage_bytes */
    int64_t qpage_bytes, q_k, q_v; /* this layer's K blocks at +q_k ([Hkv] key blocks), V blocks at +q_v */
    const uint8_t *rpool;     /* raw pages: page p at rpool + p * rpage_bytes */
    int64_t rpage_bytes, r_k, r_v; /* this layer's bf16 K [Hkv][32][D] at +r_k, V [Hkv][32][D] at +r_v */
    const int32_t *qtab, *rtab; /* device [n_seq][tab_stride]: block -> quant / raw page (any value when unused) */
    int tab_stride;
    const int32_t *len;       /* device [n_seq]: committed history length L of each sequence */
} kvc_layer_view;

typedef struct kvc_attn kvc_attn;

/* Workspace for up to max_seqs sequences of n_q_heads x head_dim (device memory, allocated once). */
omni_status kvc_attn_init(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim, kvc_attn **out);
void kvc_attn_free(kvc_attn *a); /* NULL is a no-op */

/* Splits of the history for max_len tokens (the split kernel's occupancy is measured at the first kvc_decode of a
 * format; diagnostics / benchmarks). */
int kvc_attn_splits(const kvc_attn *a, int n_seq, int64_t max_len);

/* q: device [n_seq][Hq][D] f32 (post-RoPE, unrotated); k_new, v_new: device [n_seq][Hkv][D] f32 or both NULL;
 * out: device [n_seq][Hq][D] f32. max_len >= every len[s] (sizes the split). scale: softmax scale. */
omni_status kvc_decode(kvc_attn *a, const kvc_layer_view *v, int n_seq, int64_t max_len, const float *q,
                       const float *k_new, const float *v_new, float *out, int n_q_heads, float scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
