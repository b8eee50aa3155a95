/* kv_quant.h - internal to kvcache (and its tests): fp16 helpers, the fast Walsh-Hadamard transform, the
 * asymmetric group quantizer and the packed key/value block format described in kvcache.h.
 *
 * Shapes: a block is 32 tokens x D channels of one KV head, f32 row-major [32][D] when unpacked.
 * bits is 2 or 4. All functions are pure (no allocation, no globals) and thread-safe. */
#ifndef OMNI_KV_QUANT_H
#define OMNI_KV_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kv_fp16.h"
#include "kv_layout.h"

#define KVQ_G KV_BLOCK

_Static_assert(sizeof(uint16_t) == 2 && sizeof(float) == 4, "fp16/f32 storage sizes");

/* ---- fp16 (IEEE binary16) and bf16: kv_fp16.h (shared with the device code) ---- */
static inline float kvq_h2f(uint16_t h) { return kv_h2f(h); }
/* Round-to-nearest-even, saturating to +-65504 (no infinities); NaN -> 0x7e00. */
static inline uint16_t kvq_f2h(float f) { return kv_f2h(f); }
/* Largest fp16 <= x / smallest fp16 >= x (finite, saturating). */
static inline uint16_t kvq_f2h_down(float x) { return kv_f2h_down(x); }
static inline uint16_t kvq_f2h_up(float x) { return kv_f2h_up(x); }
static inline float kvq_bf16_round(float x) { return kv_bf16_round(x); }

/* ---- Hadamard ---- */
/* In place x <- H x, H the normalized Sylvester Walsh-Hadamard matrix of size d (a power of two). */
void kvq_fwht(float *x, int d);

/* ---- Quantizer ---- */
/* Group parameters for values in [mn, mx]: *sc_h, *mn_h fp16 per kvcache.h (mn rounded down, step rounded up,
 * step 0 -> 1). */
void kvq_group_params(float mn, float mx, int bits, uint16_t *sc_h, uint16_t *mn_h);
/* code = clamp(rintf((x - mn) / sc), 0, 2^bits - 1). */
static inline int kvq_code(float x, float mn, float sc, int bits) {
    float r = __builtin_rintf((x - mn) / sc);
    int qmax = (1 << bits) - 1;
    return r < 0.0f ? 0 : r > (float)qmax ? qmax : (int)r;
}

/* Byte sizes of one packed block (one KV head, 32 tokens): kv_layout.h. */
static inline size_t kvq_key_bytes(int D, int bits, int use_norm) { return (size_t)kv_key_block_bytes(D, bits, use_norm); }
static inline size_t kvq_value_bytes(int D, int bits) { return (size_t)kv_value_block_bytes(D, bits); }
_Static_assert(KVQ_G * 128 * 2 / 8 + 128 * 4 + KVQ_G * 2 == 1600, "int2 key block at D=128 is 1600 bytes");
_Static_assert(KVQ_G * 128 * 2 / 8 + KVQ_G * (128 / KVQ_G) * 4 == 1536, "int2 value block at D=128 is 1536 bytes");

/* Quantize keys k[32][D] (rotated or not, as stored) into dst (kvq_key_bytes). Tokens < t0 are excluded from
 * the groups (codes 0, norm 0). use_norm: divide each key by its fp16 l2 norm first and store the norms.
 * tmp: scratch of 32*D floats. */
void kvq_quant_keys(const float *k, int t0, int D, int bits, int use_norm, uint8_t *dst, float *tmp);
/* Quantize values v[32][D] into dst (kvq_value_bytes); per token, groups of 32 channels. */
void kvq_quant_values(const float *v, int D, int bits, uint8_t *dst);

/* Dequantize into out[32][D] (keys include the norm factor). For tests and reference paths. */
void kvq_dequant_keys(const uint8_t *src, int D, int bits, int use_norm, float *out);
void kvq_dequant_values(const uint8_t *src, int D, int bits, float *out);

/* Folded math of the GPU decode kernel (spec/oscar.md section 5), kept as its CPU reference and tested against
 * dequantize+dot; the CPU cache itself dequantizes each block once per KV head (shared by the GQA group).
 * s[j] = q . k^_j for the 32 keys of a packed block (scale/min folded into q, norm into the score). */
void kvq_key_scores(const uint8_t *src, int D, int bits, int use_norm, const float *q, float *s);
/* acc[c] += sum_j w[j] * v^_j[c] over the 32 values of a packed block (tokens with w[j] == 0 are skipped). */
void kvq_value_accum(const uint8_t *src, int D, int bits, const float *w, float *acc);

#endif
