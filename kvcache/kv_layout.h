/* kv_layout.h - the one description of the KV cache's byte layout: a layer view (page tables, page sizes, byte
 * offsets of the K/V blocks inside a page, window / sink / format facts) and the offsets of the fields inside a
 * packed key or value block. The CPU attention (kv_attn_cpu.c), the CUDA kernels (kvcache/cuda) and the tests
 * read pages only through this header; kvcache.h documents the layout in words.
 *
 * A view is made by kv_cache_layer_view (host pointers) or kv_dev_layer_view (device pointers); the pointers stay
 * valid for the cache's life, the tables and lengths change with every step. Everything below is plain C that
 * compiles as host and device code (nvcc) alike; no CUDA types.
 *
 * Sequence slot s (the id of kv_seq_add), block b (positions 32b..32b+31), committed length L = len[s]:
 *   nq = kv_view_nq(v, L) blocks b < nq are packed in quant pages: page quant_tab[s * tab_stride + b];
 *   every other block b < ceil(L / 32), and block 0 when n_sink > 0, has a raw page raw_tab[s * tab_stride + b];
 *   unused table entries are -1.
 * Raw page p: bytes raw_pool + p * raw_page_bytes; this layer's K rows of KV head g, token j (0..31) at
 *   + raw_k + g * raw_kh + j * head_dim * k_esz (element: f32 when k_esz == 4, bf16 when 2; rotated by H when
 *   rotate), V likewise at raw_v / raw_vh / v_esz. Rows of tokens >= L hold garbage.
 * Quant page p: bytes quant_pool + p * quant_page_bytes; key block of head g at + q_k + g * q_kh, value block at
 *   + q_v + g * q_vh. When the layer does not quantize (quant == 0, a per-layer override in a quantizing cache),
 *   the quant page holds the raw layout instead: K rows at + q_k + g * q_kh + j * head_dim * k_esz.
 * Sinks (n_sink = S > 0): tokens < S of block 0 are read from block 0's raw page even when block 0 is quantized
 *   (its key groups exclude them: codes 0, norms 0). */
#ifndef OMNI_KV_LAYOUT_H
#define OMNI_KV_LAYOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define KV_HD __host__ __device__ __forceinline__
#else
#define KV_HD static inline
#endif

#define KV_BLOCK 32 /* tokens per block / page = tokens per key group = channels per value group */

typedef struct {
    int layer, n_layers;
    int n_kv_heads, head_dim;  /* Hkv, D */
    int quant;                 /* this layer packs blocks < nq: K with kbits, V with vbits (2 or 4) */
    int kbits, vbits;          /* 0 when !quant */
    int rotate, scale;         /* q, k, v multiplied by H (Walsh-Hadamard); key blocks store per-token norms */
    int window, n_sink;        /* R (multiple of 32, 0..256); S (0 unless the cache quantizes) */
    int cache_quant;           /* some layer of the cache quantizes: nq > 0 possible (raw layout in quant pages for
                                  a non-quantizing layer) */
    int k_esz, v_esz;          /* bytes per raw element: 4 (f32) or 2 (bf16) */
    int64_t raw_page_bytes, raw_k, raw_v, raw_kh, raw_vh;   /* raw page size; this layer's K/V offsets, per head */
    int64_t quant_page_bytes, q_k, q_v, q_kh, q_vh;         /* quant page size (0 if none); offsets, per head */
    uint8_t *raw_pool, *quant_pool;       /* page 0 of each pool (host or device memory) */
    const int32_t *raw_tab, *quant_tab;   /* [max_seqs][tab_stride]: block -> page, -1 = none */
    const int32_t *len;                   /* [max_seqs]: committed tokens of each slot (0 for unused slots) */
    int tab_stride, max_seqs;
} kv_layer_view;

/* ---- packed blocks (one KV head, 32 tokens, D channels, `bits` per code) */
/* key block: codes [D][32 * bits / 8], scale [D] fp16, min [D] fp16, norm [32] fp16 (only when use_norm) */
KV_HD int64_t kv_key_codes_bytes(int D, int bits) { return (int64_t)D * KV_BLOCK * bits / 8; }
KV_HD int64_t kv_key_scale_off(int D, int bits) { return kv_key_codes_bytes(D, bits); }
KV_HD int64_t kv_key_min_off(int D, int bits) { return kv_key_codes_bytes(D, bits) + (int64_t)D * 2; }
KV_HD int64_t kv_key_norm_off(int D, int bits) { return kv_key_codes_bytes(D, bits) + (int64_t)D * 4; }
KV_HD int64_t kv_key_block_bytes(int D, int bits, int use_norm) {
    return kv_key_norm_off(D, bits) + (use_norm ? KV_BLOCK * 2 : 0);
}
/* value block: codes [32][D * bits / 8], scale [32][D / 32] fp16, min [32][D / 32] fp16 */
KV_HD int64_t kv_value_codes_bytes(int D, int bits) { return (int64_t)KV_BLOCK * D * bits / 8; }
KV_HD int64_t kv_value_scale_off(int D, int bits) { return kv_value_codes_bytes(D, bits); }
KV_HD int64_t kv_value_min_off(int D, int bits) { return kv_value_codes_bytes(D, bits) + (int64_t)KV_BLOCK * (D / 32) * 2; }
KV_HD int64_t kv_value_block_bytes(int D, int bits) { return kv_value_min_off(D, bits) + (int64_t)KV_BLOCK * (D / 32) * 2; }

/* ---- sequences in a view */
/* Quantized blocks of a sequence of committed length L. */
KV_HD int kv_view_nq(const kv_layer_view *v, int64_t L) {
    return v->cache_quant && L >= v->window ? (int)((L - v->window) / KV_BLOCK) : 0;
}
KV_HD int32_t kv_view_raw_page(const kv_layer_view *v, int slot, int b) { return v->raw_tab[(int64_t)slot * v->tab_stride + b]; }
KV_HD int32_t kv_view_quant_page(const kv_layer_view *v, int slot, int b) {
    return v->quant_tab[(int64_t)slot * v->tab_stride + b];
}
/* Raw rows of head g (K if !is_v, else V) in raw page `page`: row j at the result + j * D * esz. */
KV_HD uint8_t *kv_view_raw_rows(const kv_layer_view *v, int32_t page, int g, int is_v) {
    return v->raw_pool + (int64_t)page * v->raw_page_bytes + (is_v ? v->raw_v + g * v->raw_vh : v->raw_k + g * v->raw_kh);
}
/* Packed key / value block of head g in quant page `page` (raw rows when !quant). */
KV_HD uint8_t *kv_view_quant_block(const kv_layer_view *v, int32_t page, int g, int is_v) {
    return v->quant_pool + (int64_t)page * v->quant_page_bytes + (is_v ? v->q_v + g * v->q_vh : v->q_k + g * v->q_kh);
}

#endif
