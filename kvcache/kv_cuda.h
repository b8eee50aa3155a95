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
 * cores, bf16 in and out, graph capturable), kvc_prefill (a chunk over the paged history plus itself, causal)
 * and kvc_attn_segments (non-causal segments, for the towers); layer views describe where a layer's pages are.
 * The full contract of each call is at its declaration. Kernel sources: kvcache/cuda/kvc_attn.cu and
 * kvc_prefill.cu (design notes at their tops).
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
 * pools, page sizes and every offset / per-head stride multiples of 16 bytes.
 *
 * In a runner step over the device cache (kvcache/kv_dev.h: view = kv_dev_layer_view, b = kv_dev_batch_view):
 *     kv_dev_step + kv_dev_upload; then per layer, after q/k norm + RoPE (q, k, v bf16 rows in batch order):
 *       steps with a chunk:  kvc_prefill(&view, n, b.slot, b.row0, max_chunk, q, k, v, out, Hq, scale, st);
 *                            kv_dev_append(d, l, k, v, t_cap, st)   (prefill reads only committed history)
 *       decode steps:        kv_dev_append(d, l, k, v, t_cap, st);
 *                            kvc_decode(attn, &view, n, b.slot, b.n_new, q, out, scale, st)
 *     then kv_dev_commit. Every pointer above is at a fixed device address and the launch shapes depend only on
 *     n (and max_chunk), so a decode step is captured once per batch size and replayed. */
typedef struct kvc_attn kvc_attn;

#define KVC_MAX_SEQS 256 /* sequences per call */

/* Workspace for calls of up to max_seqs (1..256) sequences with n_q_heads / n_kv_heads heads of head_dim (64 or
 * 128): split partials (up to max(resident CTAs, 4 * max_seqs * rows) * 8 * D * 4 bytes, rows = Hkv *
 * ceil(group / 8): 33 MB at 256 sequences, 8 rows, D 128) and those of the bf16-layer kernel ((resident CTAs +
 * max_seqs) * rows * 8 * D * 4 bytes: 13 MB at 132 CTAs, 256 sequences, 8 rows, D 128), allocated once; kernel
 * attributes are set here (nothing is set or allocated per call). */
omni_status kvc_attn_init(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim, kvc_attn **out);
void kvc_attn_free(kvc_attn *a); /* NULL is a no-op */

/* Kernel configuration of a workspace (for A/B timing of the decode kernel in one run; every configuration computes
 * the same function within the accuracy policy). kvc_attn_init uses the defaults, or OMNI_KVC_CONFIG (a string for
 * kvc_attn_parse_config) when set, and OMNI_KVC_MAGIC=1 sets magic. */
typedef struct {
    int variant;     /* compiled split-kernel variant (kvc_attn_variant_name; head_dim 128 only, else 0): ring stages
                        per warp and register cap */
    int waves;       /* split-K sizing: a call's CTAs fill this many waves of resident CTAs (1..4) */
    int ctas_per_sm; /* at most this many resident split CTAs per SM (shared memory padded; 0: as many as fit) */
    int magic;       /* codes as normal f16 (1024 + code) with an offset MMA instead of f16 subnormals (fallback) */
    int bf16;        /* bf16 layers: 0 = the split kernel above (variant, waves, cap), 1..4 = the dedicated bf16
                        kernel's variant bf16 - 1 (kvcache/cuda/kvc_attn_bf16.cu: warps per CTA x ring stages) */
} kvc_attn_params;
kvc_attn_params kvc_attn_default_params(void); /* variant "auto", 1 wave, no cap, subnormal codes, bf16 kernel 0 */
omni_status kvc_attn_init_ex(int max_seqs, int n_q_heads, int n_kv_heads, int head_dim, const kvc_attn_params *p,
                             kvc_attn **out);
/* Name of a variant (NULL past the last): "base", "q2r1", ... (qN: N quantized stages, rN: N raw stages; x2: two
 * quantized blocks per warp step; a: raw rows by cp.async), the last "auto" (the default: per layer kind the
 * variant measured best on the H200). */
const char *kvc_attn_variant_name(int variant);
/* "variant[:wN][:cN][:m][:bN]" (e.g. "base:w2", "q3r2:c3", "auto:b0") -> params (defaults for what is not given). */
omni_status kvc_attn_parse_config(const char *s, kvc_attn_params *p);

/* Decode attention (one query token per sequence): for each batch entry i (slot s = slots[i]) and query head h,
 *     out[i][h] = softmax_j(scale * q~[i][h] . k~_j) v~_j   over the L = len[s] + n_new[i] tokens of slot s,
 * un-rotated (out = H o~) when the layer rotates; q~ = H q when rotating. GQA: head h reads KV head
 * h / (Hq / Hkv); the query heads of one KV head (up to 8 per pass) share every K/V load. The new token must
 * already be in the pages (kv_dev_append first, then attend over L including it: n_new = the step's batch
 * n_new, len = committed before the step; or len already including it and n_new NULL); L = 0 gives zeros.
 * slots: device [n_seq] slot ids (distinct) or NULL (slot i); n_new: device [n_seq] or NULL (kv_dev_batch's
 * slot and n_new fit: fixed addresses, so the call can be captured); q: device [n_seq][Hq][D] bf16 (post-RoPE,
 * unrotated); out: device [n_seq][Hq][D] bf16.
 * Computes like FlashAttention in bf16 (bf16 / f16 operands, f32 accumulation and softmax): within 1e-2 of
 * max |out| (RMS 3e-3) of an f64 evaluation over the same stored history (performance.md section 4).
 * Two kernels on `stream` (the split pass and the merge, the second with programmatic dependent launch); the
 * launch shapes depend only on n_seq and the layer's format (never on lengths, which are read on the device),
 * so a decode step can be captured in a CUDA graph per batch size. Returns before launching on bad arguments. */
omni_status kvc_decode(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *n_new,
                       const uint16_t *q, uint16_t *out, float scale, void *stream);

/* Decode attention as kv_forward computes a decode step: entry i attends to the committed history of its slot
 * (len[slot] tokens, held as they were before this step: a block that this step's append flushes is still read
 * from its window page, which stays until the commit) plus, when n_new[i] > 0 (n_new NULL: every entry), its own
 * token from row i of k_new / v_new (device [n_seq][Hkv][D] bf16, post-RoPE, unrotated), scored and weighted in
 * f32 in the merge (q . k: the rotation cancels). kvc_decode instead reads the new token from the pages (bf16 after
 * the rotation: a second rounding) and a block flushed in the step as packed; the two agree on bf16 layers apart
 * from rounding. Independent of kv_dev_append's order (call it before or after); otherwise as kvc_decode. */
omni_status kvc_decode_step(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots,
                            const int32_t *n_new, const uint16_t *q, const uint16_t *k_new, const uint16_t *v_new,
                            uint16_t *out, float scale, void *stream);

/* The same result from a plain SIMT kernel (f32 throughout, one CTA per (sequence, head)): the permanent oracle
 * of the tests and a fallback; slow (no K/V sharing across heads, no split of the history). */
omni_status kvc_decode_ref(kvc_attn *a, const kv_layer_view *v, int n_seq, const int32_t *slots,
                           const int32_t *n_new, const uint16_t *q, uint16_t *out, float scale, void *stream);

/* CTAs of the split pass of kvc_decode for n_seq sequences of the view's format (diagnostics, benchmarks). */
int kvc_decode_ctas(const kvc_attn *a, const kv_layer_view *v, int n_seq);

/* Prefill attention, as kv_forward computes it: batch entry i (slot slots[i], or i when slots is NULL) has new
 * tokens at rows [cu_q[i], cu_q[i+1]) of q / k / v / out; each attends to the slot's stored history (L = len[slot]
 * tokens, bf16 or packed, window and sinks, through the view; the chunk is NOT in the cache yet: append after)
 * and causally to the chunk itself in full precision. GQA: head h uses KV head h / (n_q_heads / Hkv) (group <=
 * 64). Rotating layers: scores against the history use H q, the chunk uses q, k, v as given; out is un-rotated.
 * q, out: device [T][n_q_heads][D] bf16; k, v: device [T][Hkv][D] bf16 (post-RoPE, unrotated); cu_q: device
 * [n_seq + 1]; max_q >= every sequence's new tokens (sizes the grid: (ceil(max_q * group / 64), n_seq * Hkv) CTAs
 * of 128 threads, ~89 KB shared memory at D 128). No workspace; bf16 class like kvc_decode. D 64 or 128. */
omni_status kvc_prefill(const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *cu_q, int max_q,
                        const uint16_t *q, const uint16_t *k, const uint16_t *vv, uint16_t *out, int n_q_heads,
                        float scale, void *stream);

/* kvc_prefill with a dequantization scratch, for quantized layers (the same result, bit for bit; faster when
 * chunks are long): first one kernel dequantizes, once, the packed history blocks of every entry whose chunk spans
 * more than one tile of 64 query rows (more than 64 / group tokens: its history is read by every tile) into hist, as
 * f16 rows, entries in batch order while they fit in hist_tokens tokens (an entry takes 32 * its packed blocks);
 * the prefill kernel then reads those rows instead of dequantizing each block in every tile. Entries that do not
 * fit dequantize in the tiles as in kvc_prefill. A bf16 layer (or hist NULL / hist_tokens 0) is kvc_prefill.
 * hist: device, 16-byte aligned, kvc_prefill_hist_bytes(Hkv, D, hist_tokens) bytes (2 * Hkv * D f16 per token),
 * written by this call only (one scratch serves every layer of a step: calls on one stream run in order). */
omni_status kvc_prefill_hist(const kv_layer_view *v, int n_seq, const int32_t *slots, const int32_t *cu_q, int max_q,
                             const uint16_t *q, const uint16_t *k, const uint16_t *vv, uint16_t *out, int n_q_heads,
                             float scale, uint16_t *hist, int64_t hist_tokens, void *stream);
size_t kvc_prefill_hist_bytes(int n_kv_heads, int head_dim, int64_t tokens);

/* Non-causal attention within segments (vision / audio towers): tokens [cu_seg[i], cu_seg[i+1]) form segment i;
 * each query attends to all tokens of its segment, head by head (no GQA). q, k, v: device bf16 rows of
 * qkv_row elements per token, head h at + h * head_dim (a fused qkv buffer works: pass its three bases);
 * out: device [T][n_heads][head_dim] bf16. head_dim 64, 72, 80 or 128; max_seg >= every segment's length. */
omni_status kvc_attn_segments(int n_heads, int head_dim, const int32_t *cu_seg, int n_seg, int max_seg,
                              const uint16_t *q, const uint16_t *k, const uint16_t *v, int64_t qkv_row, uint16_t *out,
                              float scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
