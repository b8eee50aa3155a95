/* kv_quant.c - fp16 rounding, the fast Walsh-Hadamard transform and the packed key/value block quantizer
 * (format in kvcache.h). Everything here is deterministic so that a GPU port can match it byte for byte. */
#include "kv_quant.h"

#include <math.h>

void kvq_fwht(float *x, int d) {
    for (int h = 1; h < d; h <<= 1)
        for (int i = 0; i < d; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    float s = (float)(1.0 / sqrt((double)d));
    for (int i = 0; i < d; i++) x[i] *= s;
}

void kvq_group_params(float mn, float mx, int bits, uint16_t *sc_h, uint16_t *mn_h) {
    *mn_h = kvq_f2h_down(mn);
    float sc = (mx - kvq_h2f(*mn_h)) / (float)((1 << bits) - 1);
    *sc_h = sc > 0.0f ? kvq_f2h_up(sc) : kvq_f2h(1.0f);
}

void kvq_quant_keys(const float *k, int t0, int D, int bits, int use_norm, uint8_t *dst, float *tmp) {
    const int bpc = KVQ_G * bits / 8, per = 8 / bits;
    uint16_t *scale = (uint16_t *)(dst + (size_t)D * bpc), *mnv = scale + D, *norm = mnv + D;
    memset(dst, 0, (size_t)D * bpc);
    for (int j = 0; j < KVQ_G; j++) {
        const float *row = k + (size_t)j * D;
        float *t = tmp + (size_t)j * D;
        if (j < t0) {
            if (use_norm) norm[j] = 0;
            continue;
        }
        float s = 1.0f;
        if (use_norm) {
            norm[j] = kv_key_norm(row, D);
            s = kvq_h2f(norm[j]);
        }
        for (int c = 0; c < D; c++) t[c] = use_norm ? row[c] / s : row[c];
    }
    for (int c = 0; c < D; c++) {
        float mn = 0.0f, mx = 0.0f;
        for (int j = t0; j < KVQ_G; j++) {
            float x = tmp[(size_t)j * D + c];
            if (j == t0 || x < mn) mn = x;
            if (j == t0 || x > mx) mx = x;
        }
        kvq_group_params(mn, mx, bits, &scale[c], &mnv[c]);
        float sc = kvq_h2f(scale[c]), m = kvq_h2f(mnv[c]);
        uint8_t *cb = dst + (size_t)c * bpc;
        for (int j = t0; j < KVQ_G; j++) {
            int q = kvq_code(tmp[(size_t)j * D + c], m, sc, bits);
            cb[j / per] |= (uint8_t)(q << ((j % per) * bits));
        }
    }
}

void kvq_quant_values(const float *v, int D, int bits, uint8_t *dst) {
    const int bpt = D * bits / 8, per = 8 / bits, ng = D / KVQ_G;
    uint16_t *scale = (uint16_t *)(dst + (size_t)KVQ_G * bpt), *mnv = scale + KVQ_G * ng;
    memset(dst, 0, (size_t)KVQ_G * bpt);
    for (int j = 0; j < KVQ_G; j++) {
        const float *row = v + (size_t)j * D;
        uint8_t *tb = dst + (size_t)j * bpt;
        for (int g = 0; g < ng; g++) {
            const float *x = row + g * KVQ_G;
            float mn = x[0], mx = x[0];
            for (int c = 1; c < KVQ_G; c++) {
                if (x[c] < mn) mn = x[c];
                if (x[c] > mx) mx = x[c];
            }
            kvq_group_params(mn, mx, bits, &scale[j * ng + g], &mnv[j * ng + g]);
            float sc = kvq_h2f(scale[j * ng + g]), m = kvq_h2f(mnv[j * ng + g]);
            for (int c = 0; c < KVQ_G; c++) {
                int cc = g * KVQ_G + c, q = kvq_code(x[c], m, sc, bits);
                tb[cc / per] |= (uint8_t)(q << ((cc % per) * bits));
            }
        }
    }
}

/* The 32 codes of 32*bits/8 packed bytes (LSB first) as floats. */
static inline void unpack32(const uint8_t *p, int bits, float *codes) {
    if (bits == 2) {
        for (int i = 0; i < 8; i++) {
            unsigned b = p[i];
            codes[4 * i + 0] = (float)(b & 3u);
            codes[4 * i + 1] = (float)((b >> 2) & 3u);
            codes[4 * i + 2] = (float)((b >> 4) & 3u);
            codes[4 * i + 3] = (float)(b >> 6);
        }
    } else {
        for (int i = 0; i < 16; i++) {
            unsigned b = p[i];
            codes[2 * i + 0] = (float)(b & 15u);
            codes[2 * i + 1] = (float)(b >> 4);
        }
    }
}

void kvq_dequant_keys(const uint8_t *src, int D, int bits, int use_norm, float *out) {
    const int bpc = KVQ_G * bits / 8;
    const uint16_t *scale = (const uint16_t *)(src + (size_t)D * bpc), *mnv = scale + D, *norm = mnv + D;
    float nrm[KVQ_G], codes[KVQ_G];
    for (int j = 0; j < KVQ_G; j++) nrm[j] = use_norm ? kvq_h2f(norm[j]) : 1.0f;
    for (int c = 0; c < D; c++) {
        float sc = kvq_h2f(scale[c]), m = kvq_h2f(mnv[c]);
        unpack32(src + (size_t)c * bpc, bits, codes);
        for (int j = 0; j < KVQ_G; j++) out[(size_t)j * D + c] = nrm[j] * (codes[j] * sc + m);
    }
}

void kvq_dequant_values(const uint8_t *src, int D, int bits, float *out) {
    const int bpt = D * bits / 8, ng = D / KVQ_G, bpg = KVQ_G * bits / 8;
    const uint16_t *scale = (const uint16_t *)(src + (size_t)KVQ_G * bpt), *mnv = scale + KVQ_G * ng;
    float codes[KVQ_G];
    for (int j = 0; j < KVQ_G; j++)
        for (int g = 0; g < ng; g++) {
            float sc = kvq_h2f(scale[j * ng + g]), m = kvq_h2f(mnv[j * ng + g]), *o = out + (size_t)j * D + g * KVQ_G;
            unpack32(src + (size_t)j * bpt + g * bpg, bits, codes);
            for (int c = 0; c < KVQ_G; c++) o[c] = codes[c] * sc + m;
        }
}

/* acc[j] += qs * code_j for the 32 codes of one key channel. */
static inline void unpack_axpy32(const uint8_t *cb, int bits, float qs, float *acc) {
    if (bits == 2) {
        for (int i = 0; i < 8; i++) {
            unsigned b = cb[i];
            acc[4 * i + 0] += qs * (float)(b & 3u);
            acc[4 * i + 1] += qs * (float)((b >> 2) & 3u);
            acc[4 * i + 2] += qs * (float)((b >> 4) & 3u);
            acc[4 * i + 3] += qs * (float)(b >> 6);
        }
    } else {
        for (int i = 0; i < 16; i++) {
            unsigned b = cb[i];
            acc[2 * i + 0] += qs * (float)(b & 15u);
            acc[2 * i + 1] += qs * (float)(b >> 4);
        }
    }
}

void kvq_key_scores(const uint8_t *src, int D, int bits, int use_norm, const float *q, float *s) {
    const int bpc = KVQ_G * bits / 8;
    const uint16_t *scale = (const uint16_t *)(src + (size_t)D * bpc), *mnv = scale + D, *norm = mnv + D;
    float acc[KVQ_G] = {0};
    float bias = 0.0f;
    for (int c = 0; c < D; c++) {
        bias += q[c] * kvq_h2f(mnv[c]);
        unpack_axpy32(src + (size_t)c * bpc, bits, q[c] * kvq_h2f(scale[c]), acc);
    }
    for (int j = 0; j < KVQ_G; j++) s[j] = use_norm ? (acc[j] + bias) * kvq_h2f(norm[j]) : acc[j] + bias;
}

/* acc[c] += a * code_c + b for the 32 codes of one value group. */
static inline void unpack_group_acc(const uint8_t *gb, int bits, float a, float b, float *acc) {
    if (bits == 2) {
        for (int i = 0; i < 8; i++) {
            unsigned x = gb[i];
            acc[4 * i + 0] += a * (float)(x & 3u) + b;
            acc[4 * i + 1] += a * (float)((x >> 2) & 3u) + b;
            acc[4 * i + 2] += a * (float)((x >> 4) & 3u) + b;
            acc[4 * i + 3] += a * (float)(x >> 6) + b;
        }
    } else {
        for (int i = 0; i < 16; i++) {
            unsigned x = gb[i];
            acc[2 * i + 0] += a * (float)(x & 15u) + b;
            acc[2 * i + 1] += a * (float)(x >> 4) + b;
        }
    }
}

void kvq_value_accum(const uint8_t *src, int D, int bits, const float *w, float *acc) {
    const int bpt = D * bits / 8, ng = D / KVQ_G, bpg = KVQ_G * bits / 8;
    const uint16_t *scale = (const uint16_t *)(src + (size_t)KVQ_G * bpt), *mnv = scale + KVQ_G * ng;
    for (int j = 0; j < KVQ_G; j++) {
        if (w[j] == 0.0f) continue;
        const uint8_t *row = src + (size_t)j * bpt;
        for (int g = 0; g < ng; g++)
            unpack_group_acc(row + g * bpg, bits, w[j] * kvq_h2f(scale[j * ng + g]), w[j] * kvq_h2f(mnv[j * ng + g]),
                             acc + g * KVQ_G);
    }
}
