/* kv_fp16.h - the number formats of the KV cache, written once for the host (C) and the device (nvcc): IEEE fp16
 * with the rounding rules of the packed blocks (nearest-even saturating, round down, round up), bf16 round-to-
 * nearest-even, and the exactly rounded f32/f64 operations the quantizer needs. On the device every operation
 * whose rounding matters is an explicit _rn intrinsic so that nvcc cannot contract it into an FMA; on the host
 * plain C operators are exact IEEE operations (C11 mode: no contraction). */
#ifndef OMNI_KV_FP16_H
#define OMNI_KV_FP16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kv_layout.h" /* KV_HD */

#ifdef __CUDA_ARCH__
#define KV_FADD(a, b) __fadd_rn(a, b)
#define KV_FSUB(a, b) __fsub_rn(a, b)
#define KV_FMUL(a, b) __fmul_rn(a, b)
#define KV_FDIV(a, b) __fdiv_rn(a, b)
#define KV_DADD(a, b) __dadd_rn(a, b)
#define KV_DMUL(a, b) __dmul_rn(a, b)
#else
#define KV_FADD(a, b) ((a) + (b))
#define KV_FSUB(a, b) ((a) - (b))
#define KV_FMUL(a, b) ((a) * (b))
#define KV_FDIV(a, b) ((a) / (b))
#define KV_DADD(a, b) ((a) + (b))
#define KV_DMUL(a, b) ((a) * (b))
#endif

KV_HD uint32_t kv_fbits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
KV_HD float kv_bitsf(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* fp16 bits -> f32 (exact). */
KV_HD float kv_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (ex == 0) return kv_bitsf(kv_fbits(KV_FMUL((float)man, 1.0f / 16777216.0f)) | sign); /* man * 2^-24 */
    if (ex == 31) return kv_bitsf(sign | 0x7f800000u | (man << 13));
    return kv_bitsf(sign | ((ex + 112u) << 23) | (man << 13));
}

/* f32 -> fp16 bits: round-to-nearest-even, saturating to +-65504 (no infinities); NaN -> 0x7e00. */
KV_HD uint16_t kv_f2h(float f) {
    uint32_t u = kv_fbits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7e00u;
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7bffu); /* >= 65520 would round to inf: saturate */
    if (a < 0x38800000u) /* below 2^-14: fp16 subnormal or zero; exact scaling, RNE; 1024 = min normal */
        return (uint16_t)(sign | (uint32_t)rintf(KV_FMUL(kv_bitsf(a), 16777216.0f)));
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* One fp16 step towards -inf / +inf (finite values only; saturates at +-65504). */
KV_HD uint16_t kv_h_step_down(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 0x8001u;
    if (h & 0x8000u) return h == 0xfbffu ? h : (uint16_t)(h + 1);
    return (uint16_t)(h - 1);
}
KV_HD uint16_t kv_h_step_up(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 0x0001u;
    if (h & 0x8000u) return (uint16_t)(h - 1);
    return h == 0x7bffu ? h : (uint16_t)(h + 1);
}
/* Largest fp16 <= x / smallest fp16 >= x (finite, saturating). */
KV_HD uint16_t kv_f2h_down(float x) {
    uint16_t h = kv_f2h(x);
    return kv_h2f(h) > x ? kv_h_step_down(h) : h;
}
KV_HD uint16_t kv_f2h_up(float x) {
    uint16_t h = kv_f2h(x);
    return kv_h2f(h) < x ? kv_h_step_up(h) : h;
}

/* bf16 */
KV_HD float kv_bf2f(uint16_t b) { return kv_bitsf((uint32_t)b << 16); }
/* f32 rounded to the nearest bf16 (ties to even), as f32; NaN unchanged. */
KV_HD float kv_bf16_round(float x) {
    uint32_t u = kv_fbits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    return kv_bitsf(u & 0xffff0000u);
}
/* f32 -> bf16 bits, ties to even, NaN kept quiet (omni_f32_to_bf16). */
KV_HD uint16_t kv_f2bf(float f) {
    uint32_t u = kv_fbits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The stored per-token norm of a key row x[0..D): sqrt of the sum of squares in double, in channel order, to fp16
 * (nearest-even); a zero norm is stored as 1. */
KV_HD uint16_t kv_key_norm(const float *x, int D) {
    double ss = 0.0;
    for (int c = 0; c < D; c++) {
        double xv = (double)x[c];
        ss = KV_DADD(ss, KV_DMUL(xv, xv));
    }
    uint16_t h = kv_f2h((float)sqrt(ss));
    return kv_h2f(h) == 0.0f ? (uint16_t)0x3c00u : h;
}

#endif
