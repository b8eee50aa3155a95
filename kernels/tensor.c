/* tensor.c - dtype helpers and f16/bf16 <-> f32 conversion. */
#include "tensor.h"

size_t omni_dtype_size(omni_dtype dt) {
    switch (dt) {
    case OMNI_F32: case OMNI_I32: return 4;
    case OMNI_BF16: case OMNI_F16: return 2;
    case OMNI_I64: return 8;
    case OMNI_U8: return 1;
    default: return 0;
    }
}

const char *omni_dtype_name(omni_dtype dt) {
    static const char *names[] = {"f32", "bf16", "f16", "i32", "i64", "u8"};
    return dt < OMNI_DTYPE_COUNT ? names[dt] : "?";
}

int64_t omni_tensor_numel(const omni_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

omni_tensor omni_tensor_make(void *data, omni_dtype dt, int ndim, const int64_t *shape) {
    omni_tensor t = {0};
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = s;
        s *= shape[i];
    }
    return t;
}

float omni_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t omni_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff);
    uint32_t man = u & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1), rem = man & ((1u << shift) - 1);
        uint32_t r = man >> shift;
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = man >> 13, rem = man & 0x1fff;
    uint32_t out = sign | ((uint32_t)e << 10) | r;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) out++; /* may carry into exponent: correct */
    return (uint16_t)out;
}

void omni_to_f32(float *dst, const void *src, omni_dtype dt, int64_t n) {
    if (dt == OMNI_F32) {
        memcpy(dst, src, (size_t)n * 4);
    } else if (dt == OMNI_BF16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = omni_bf16_to_f32(s[i]);
    } else if (dt == OMNI_F16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = omni_f16_to_f32(s[i]);
    }
}

float omni_get_f32(const void *src, omni_dtype dt, int64_t i) {
    switch (dt) {
    case OMNI_F32: return ((const float *)src)[i];
    case OMNI_BF16: return omni_bf16_to_f32(((const uint16_t *)src)[i]);
    case OMNI_F16: return omni_f16_to_f32(((const uint16_t *)src)[i]);
    default: return 0.f;
    }
}
