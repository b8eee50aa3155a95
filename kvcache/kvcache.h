/* kvcache.h - the KV cache of the decoder: formats (f32, bf16, OScaR int2/int4, KIVI), a page pool with exact
 * byte accounting, per-sequence page tables, and attention over the cache (CPU reference).
 *
 * Three parts (DESIGN.md section 3): the device-agnostic page allocator (kv_pages.h: pools, free lists, tables,
 * accounting, budget), the storage of the page bytes (host memory here: kv_cache; device memory: kv_dev.h) and the
 * attention (CPU: kv_attn_cpu.c; CUDA: kv_cuda.h). kv_layout.h is the one description of the bytes that every
 * reader uses: kv_cache_layer_view exports it for a layer of this cache.
 *
 * Algorithm (spec/oscar.md): for rotating formats q, k and v are multiplied by the normalized Walsh-Hadamard
 * matrix H (d x d, Sylvester order, H = H^T = H^-1) inside the cache; keys beyond the recent window are divided
 * by their per-token per-KV-head l2 norm s (stored) and quantized per channel over groups of G = 32 tokens;
 * values are quantized per token over groups of 32 channels; the attention output is un-rotated (o = H o~).
 * The newest R tokens (the window, R in 0..256, multiple of 32) stay in BF16; whenever the window holds R + 32
 * tokens the oldest 32 are flushed (quantized), so it holds R..R+31 tokens. The first n_sink tokens may be kept
 * in BF16 for ever (default 0). A chunk of new tokens attends to the stored history plus itself (causal) in full
 * precision, then is appended.
 *
 * Usage per forward step of the decoder (one batch of sequences):
 *     for each layer l: kv_forward(c, l, n_seq, ids, n_new, q, k, v, out, Hq, 1/sqrt(D));
 *     kv_commit(c, n_seq, ids, n_new);
 * kv_forward of the first layer reserves the pages for the step (so a full cache fails there, before any
 * layer has written); kv_commit advances the lengths and returns flushed window pages to the pool.
 * Sequences of one batch are independent: results are bit-identical to running each alone. In the f32 format
 * the results are also bit-identical however the tokens are split into chunks (multi-turn == one prefill), and
 * equal exact attention (op_attention) to ~1e-6 relative.
 * Threading: kv_forward uses OpenMP inside (threads = omp_get_max_threads() at kv_init); one cache must not be
 * used from two threads at once. q/k/v/out are contiguous (row stride = heads * D). A prefill longer than
 * max_chunk tokens must be split into several steps.
 * Memory: kv_init reserves one pool (quant pages for max_tokens, window pages for max_seqs windows in flight;
 * untouched pages cost no RSS), chunk buffers [max_chunk][Hkv][D] x 2 and a small per-thread scratch (online
 * softmax: no buffer grows with the context). kv_get_usage reports the pages in use (what the KV line prints),
 * the free pages of each kind and pool_bytes.
 *
 * Budget (admission control): kv_budget_of / kv_seq_budget give the most raw and quant pages one sequence that
 * grows to N committed tokens can hold at any moment of its life, whatever its chunk sizes (<= max_chunk), window
 * pages of a step in flight included. An engine that admits a request of N tokens only while the sums of the
 * admitted requests' raw_pages / quant_pages stay within the pool's raw / quant pages (kv_usage: in use + free),
 * the sum of their N within max_tokens and their count within max_seqs never sees OMNI_ERR_NOMEM from the cache.
 * Tighter (llm/engine.c): promise each sequence only decode_raw_pages / quant_pages (what it holds while it grows
 * one token per step) and keep one shared reserve of kv_step_extra_of raw pages per prefill chunk a step may hold:
 * a step in flight holds at most that much more in all (kv_step_pages gives each chunk's excess exactly).
 * Tighter still in bytes (llm/engine.c): the raw and quant peaks of decode_pages need not coincide; promise_bytes is
 * the most bytes held at once while growing one token per step, the flushing steps excepted (they hold the flushed
 * block's raw page and its new quant page at once: flush_bytes more, one quant page), and kv_step_extra_bytes_of
 * gives the byte excess of any step over promise_bytes (a prefill chunk) and of a flushing one-token step.
 * Pool sizing: raw pages = min(ceil(max_tokens / 32) + max_seqs, max_seqs * budget(max_seq_len).raw_pages),
 * quant pages = min(nq(max_tokens), max_seqs * nq(max_seq_len)) with nq(L) = max(0, (L - R) / 32) (0 when no
 * layer quantizes); hence a cache made for n sequences of N tokens (max_seqs n, max_tokens n * N, max_seq_len N)
 * has pool_bytes <= n * kv_budget_of(N).bytes, and n such sequences always fit in B bytes when n * bytes <= B.
 *
 * ---- Storage layout (what a GPU kernel must mirror) ----
 * A sequence's tokens are split into blocks of G = 32 consecutive positions (block b = positions 32b..32b+31).
 * Every block lives in one page holding that block for ALL layers and KV heads; the sequence's page table maps
 * block -> page. Two page kinds, each of fixed size, carved from one pool allocation, each with a free list:
 *   raw page   (window, sinks, and every block of non-quantized caches), per layer l, in this order:
 *       K [Hkv][32][D] elements, then V [Hkv][32][D]; element = f32 for KV_F32, bf16 otherwise.
 *       Rotating formats store H k and H v (rotated), bf16 rounded (round-to-nearest-even).
 *   quant page (blocks beyond the window), per layer l: K [Hkv] key blocks, then V [Hkv] value blocks;
 *       a layer whose format is not quantized stores a raw layout there instead (same as the raw page).
 *   key block (one KV head, 32 tokens, b = K bits), bytes in this order:
 *       codes  [D][32*b/8]  channel c's 32 token codes; token j at byte j/(8/b), bits (j%(8/b))*b (LSB first)
 *       scale  [D] fp16     per-channel step (rounded up to fp16)
 *       min    [D] fp16     per-channel minimum (rounded down to fp16)
 *       norm   [32] fp16    per-token l2 norm s of the (rotated) key, RNE (only when fmt.scale; else absent)
 *       dequantized key j, channel c = norm[j] * (codes[c][j] * scale[c] + min[c])   (norm = 1 when absent)
 *   value block (one KV head, 32 tokens, b = V bits):
 *       codes  [32][D*b/8]  token j's codes; channel c at byte c/(8/b), bits (c%(8/b))*b (LSB first)
 *       scale  [32][D/32] fp16, min [32][D/32] fp16   (per token, per group of 32 channels)
 *   Sizes at D = 128: int2 key block 1024 + 256 + 256 + 64 = 1600 B, value block 1536 B, i.e. 98 B per token per
 *   KV head (bf16: 512 B). Quantizer, per group x_1..x_n (n = 32; sink tokens of block 0 excluded from keys):
 *       mn = fp16_round_down(min x); sc = fp16_round_up((max x - mn) / (2^b - 1)); sc == 0 -> 1;
 *       code = clamp(rintf((x - mn) / sc), 0, 2^b - 1)  (f32 IEEE division, round-half-to-even);
 *   hence |x - x^| <= sc/2 for every element; a constant group is exact when its value is an fp16 number (every
 *   bf16 value in fp16's range is; fp16 min/step can be coarse when |mean| >> range, the bound holds regardless).
 *   Key norm: s = sqrt(sum k~_c^2) in double, -> f32 -> fp16 RNE
 *   (saturating; 0 -> 1); unit key u = k~ / s_fp16 (f32 division). Norms are fp16, decided by measurement
 *   (test_kv_tni): fp16 rounding adds <= 4.9e-4 relative error to a key whose int2 reconstruction error is ~0.30
 *   (0.15%), attention error 0.0559 (fp16) vs 0.0553 (fp32 norms) = noise of the code rounding; saves 2 B/token/head.
 *   Quantized blocks are always built from the bf16-rounded window values, so the stored bytes do not depend on
 *   how the tokens were split into chunks.
 * Sinks (n_sink = S > 0, quantizing caches): block 0 keeps its raw page for S tokens; its key groups use tokens
 *   S..31 only (codes of tokens < S are 0, norms 0) and attention reads tokens < S from the raw page.
 */
#ifndef OMNI_KVCACHE_H
#define OMNI_KVCACHE_H

#include <stdint.h>

#include "kernels/status.h"
#include "kvcache/kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KV_GROUP 32       /* tokens per key group = channels per value group = tokens per block/page */
#define KV_MAX_WINDOW 256 /* largest recent window R */

typedef enum { KV_F32 = 0, KV_BF16, KV_Q4, KV_Q2 } kv_type; /* storage of history beyond the window */

typedef struct {
    kv_type k_type, v_type; /* KV_Q2/KV_Q4: quantized (OScaR or KIVI per rotate/scale); both quantized or neither */
    int rotate;             /* Hadamard rotation of q,k (and online v) - OScaR: 1, KIVI: 0 */
    int scale;              /* per-token per-KV-head l2 key normalisation - OScaR: 1, KIVI: 0 */
    int window;             /* recent window R in tokens, multiple of 32, 0..256; default 128 (same in all layers) */
    int n_sink;             /* first n_sink tokens kept in BF16, 0..32; default 0 (same in all layers) */
} kv_format;

typedef struct {
    kv_format fmt;              /* default for all layers */
    const kv_format *layer_fmt; /* optional [n_layers] per-layer overrides, NULL = none (copied by kv_init) */
    int n_layers, n_kv_heads, head_dim;
    int64_t max_tokens; /* capacity: total tokens over all sequences (pool sized from it) */
    int max_seqs;
    int max_chunk;      /* most new tokens (summed over the batch) per kv_forward; default 2048 */
    int64_t max_seq_len; /* most tokens of one sequence (sizes page tables and pools); 0 = max_tokens */
} kv_params;

typedef struct kv_cache kv_cache;

/* fmt = f32 everywhere, window 128, sink 0; n_layers etc. 0 (must be set), max_tokens 4096, max_seqs 1,
 * max_chunk 2048, max_seq_len 0 (= max_tokens). */
kv_params kv_default_params(void);

/* Modes: "f32" (alias "fp32"), "bf16", "int2", "int4" (OScaR), "kivi2", "kivi4" (no rotation, no scaling),
 * "k4v2", "k2v4", "k2v2", "k4v4" (OScaR bits for K and V), "kivi-k4v2" (and the other KIVI mixes).
 * Sets k_type, v_type, rotate, scale; window = 128 and n_sink = 0 (set them afterwards if needed).
 * Unknown -> OMNI_ERR_USAGE with a message listing the valid modes. */
omni_status kv_parse_mode(const char *mode, kv_format *fmt);

/* Per-layer override spec "0-3:int4,27:bf16" applied on top of a base format (for the CLI): out_layers[n_layers]
 * is filled with *base, then each listed layer range gets the mode (window and n_sink stay the base's). */
omni_status kv_parse_layer_overrides(const char *spec, const kv_format *base, int n_layers, kv_format *out_layers);

/* "f32", "bf16", "int2", "int4", "kivi2", "k4v2", "kivi-k4v2"; ablations get "-norot" / "-noscale" suffixes.
 * Returns buf. */
const char *kv_format_name(const kv_format *fmt, char *buf, int cap);

/* Short name of one storage type: "f32", "bf16", "int4", "int2". */
const char *kv_type_name(kv_type t);

/* Validates everything before any work (window multiple of 32 and <= 256, head_dim power of two when rotating,
 * head_dim multiple of 32 when quantizing, sizes > 0), then makes the pool (one allocation) and the scratch. */
omni_status kv_init(const kv_params *p, kv_cache **out);
void kv_free(kv_cache *c); /* NULL is a no-op */

omni_status kv_seq_add(kv_cache *c, int *seq_id); /* new empty sequence; OMNI_ERR_NOMEM when max_seqs are in use */
void kv_seq_remove(kv_cache *c, int seq_id);      /* frees its pages and the id */
void kv_seq_clear(kv_cache *c, int seq_id);       /* length 0, pages back to the pool */
int64_t kv_seq_len(const kv_cache *c, int seq_id); /* committed tokens (-1 for an invalid id) */

/* One layer of attention for a batch of sequences, then append this layer's new k/v.
 * q: [T, n_q_heads, D] post-RoPE (T = sum of n_new <= max_chunk), k, v: [T, n_kv_heads, D] post-RoPE,
 * out: [T, n_q_heads, D]. Token rows are ordered by sequence (seq 0's n_new[0] tokens first, ...).
 * Each new query of sequence s attends to s's stored history (kv_seq_len tokens) plus the new chunk causally,
 * the chunk itself in full precision. GQA: q head h uses kv head h / (n_q_heads / n_kv_heads).
 * Rotation/un-rotation happen inside. scale: softmax scale (usually 1/sqrt(D)).
 * Call for every layer with the same seq_ids/n_new, then kv_commit. No allocation (scratch made by kv_init).
 * Errors (bad ids/sizes, cache full): returned before anything is written. */
omni_status kv_forward(kv_cache *c, int layer, int n_seq, const int *seq_ids, const int *n_new, const float *q,
                       const float *k, const float *v, float *out, int n_q_heads, float scale);

/* After every layer ran kv_forward for this batch: lengths += n_new; flushed window pages go back to the pool. */
omni_status kv_commit(kv_cache *c, int n_seq, const int *seq_ids, const int *n_new);

/* For runners that keep the K/V data elsewhere (a GPU) and use this cache for the bookkeeping only: validate the
 * batch and reserve its pages exactly as the first kv_forward of a step does, computing nothing; kv_commit then
 * ends the step (or kv_seq_clear / kv_seq_remove drop it). Errors as kv_forward's, before anything changes. */
omni_status kv_reserve(kv_cache *c, int n_seq, const int *seq_ids, const int *n_new);
/* A cache of the page bookkeeping only (sequences, lengths, pages, budget, usage), without host storage and
 * without the CPU attention: what a device runner hands out while its pages live on the device (kv_dev.h).
 * kv_forward refuses it; kv_reserve / kv_commit drive it. */
omni_status kv_init_accounting(const kv_params *p, kv_cache **out);

typedef struct {
    int64_t k_bytes, v_bytes, total_bytes; /* true bytes of pages in use (codes, scales, norms, windows, sinks) */
    int64_t cells_used, cells_capacity;    /* committed tokens over all sequences; max_tokens */
    int n_layers;
    int n_seqs, max_seqs;                  /* sequences in use; capacity */
    int64_t pool_bytes;                    /* the one pool allocation (reserved, mostly untouched until used) */
    int64_t raw_pages, quant_pages;        /* pages in use */
    int64_t raw_pages_free, quant_pages_free; /* pages on the free lists (pool = in use + free) */
    int64_t raw_page_bytes, quant_page_bytes;
} kv_usage;
void kv_get_usage(const kv_cache *c, kv_usage *u);

/* "kv_cache: size = %7.2f MiB (%6lld cells, %3d layers, %2d/%d seqs), K (int2): %7.2f MiB, V (int2): %7.2f MiB"
 * (bytes and cells in use; K/V type of the default format, "mixed" when layers differ), no newline. */
void kv_format_line(const kv_cache *c, char *buf, int cap);

/* The most pages one sequence of n_tokens committed tokens holds at any moment of its life (see Budget above). */
typedef struct {
    int64_t raw_pages, quant_pages; /* peak of each kind over any growth 0 -> n_tokens in steps <= max_chunk tokens,
                                       pages reserved by a step in flight included (the two peaks may occur at
                                       different moments: reserve both) */
    int64_t bytes;                  /* raw_pages * raw_page_bytes + quant_pages * quant_page_bytes */
    int64_t committed_raw_pages, committed_quant_pages, committed_bytes; /* held with exactly n_tokens committed */
    int64_t decode_raw_pages, decode_bytes; /* the most held while growing to n_tokens one token per step (with
                                               quant_pages): an engine's per-sequence reservation when its prefill
                                               steps take their extra pages from a shared reserve (kv_step_extra_of) */
    int64_t promise_bytes, flush_bytes; /* the most bytes held at once while growing to n_tokens one token per
                                           step, the steps that flush a window block excepted (<= decode_bytes: the
                                           raw and quant peaks of decode_bytes need not coincide), and the most one
                                           of those flushing steps holds beyond it (the flushed block's raw page and
                                           its new quant page at once; 0 when nothing is flushed): what an engine
                                           promises a sequence when flushes and prefill chunks take their excess
                                           from shared reserves (kv_step_extra_bytes_of, llm/engine.c) */
    int64_t raw_page_bytes, quant_page_bytes;                           /* page sizes of this format */
} kv_budget;

/* Pure function of the parameters (the same layout and rules as kv_init/kv_forward, no cache needed):
 * validates p like kv_init; n_tokens in 0..max_seq_len (max_tokens when max_seq_len is 0), else OMNI_ERR_USAGE
 * with a message saying the sequence can never fit. */
omni_status kv_budget_of(const kv_params *p, int64_t n_tokens, kv_budget *b);
/* The same for a cache's parameters; n_tokens beyond max_seq_len -> OMNI_ERR_USAGE. */
omni_status kv_seq_budget(const kv_cache *c, int64_t n_tokens, kv_budget *b);

/* Steps in flight, for an engine that reserves decode_raw_pages / quant_pages per sequence plus one shared reserve
 * of kv_step_extra_of raw pages for its prefill steps: kv_step_pages gives the pages one sequence holds while a
 * step L0 -> L1 is in flight (L0 == L1: committed); such a step (L1 - L0 <= max_chunk) holds at most
 * kv_step_extra_of raw pages more than decode_raw_pages of any N >= L1 (0 when no layer quantizes: every new page
 * then stays; else about R / 32 + 1: the window of L0 waits for the commit while the window of L1 is written).
 * So a step whose prefill entries' excesses sum to at most the reserve never exceeds the promised pages. */
void kv_step_pages(const kv_cache *c, int64_t L0, int64_t L1, int64_t *raw_pages, int64_t *quant_pages);
omni_status kv_step_extra_of(const kv_params *p, int64_t *raw_pages);
/* The same in bytes against promise_bytes (kv_budget): the most any step L0 -> L1 (L1 - L0 <= max_chunk) holds
 * beyond promise_bytes of L1 (*chunk_bytes: the reserve one prefill chunk needs), and the most a one-token step
 * that flushes a window block holds beyond it (*flush_bytes: about one quant page; 0 when no layer quantizes). */
omni_status kv_step_extra_bytes_of(const kv_params *p, int64_t *chunk_bytes, int64_t *flush_bytes);

/* The layout of one layer as stored by this cache (host pointers into its pool, its page tables and committed
 * lengths; kv_layout.h): what tests and other attention implementations read. Valid for the cache's life; the
 * tables and lengths change with each step. */
omni_status kv_cache_layer_view(const kv_cache *c, int layer, kv_layer_view *v);

/* The format used by a layer (after overrides). */
const kv_format *kv_layer_format(const kv_cache *c, int layer);

#ifdef __cplusplus
}
#endif
#endif
