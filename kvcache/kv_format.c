/* kv_format.c - KV cache formats: default parameters, mode strings ("int2", "kivi-k4v2" ...), per-layer override
 * specs ("0-3:int4,27:bf16") and format names for the KV line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#define KV_MODES_HELP "f32 (fp32), bf16, int2, int4, kivi2, kivi4, k2v2, k2v4, k4v2, k4v4, kivi-k4v2, kivi-k2v4"

kv_params kv_default_params(void) {
    kv_params p;
    memset(&p, 0, sizeof p);
    p.fmt.k_type = p.fmt.v_type = KV_F32;
    p.fmt.window = 128;
    p.max_tokens = 4096;
    p.max_seqs = 1;
    p.max_chunk = 2048;
    return p;
}

const char *kv_type_name(kv_type t) {
    switch (t) {
    case KV_F32: return "f32";
    case KV_BF16: return "bf16";
    case KV_Q4: return "int4";
    case KV_Q2: return "int2";
    }
    return "?";
}

static int bits_type(char ch, kv_type *t) {
    if (ch == '2') *t = KV_Q2;
    else if (ch == '4') *t = KV_Q4;
    else return 0;
    return 1;
}

/* "k4v2" -> K/V types; returns 1 on success. */
static int parse_kv_bits(const char *s, kv_format *f) {
    return strlen(s) == 4 && s[0] == 'k' && s[2] == 'v' && bits_type(s[1], &f->k_type) && bits_type(s[3], &f->v_type);
}

omni_status kv_parse_mode(const char *mode, kv_format *fmt) {
    kv_format f;
    memset(&f, 0, sizeof f);
    f.window = 128;
    const char *m = mode ? mode : "";
    int ok = 1;
    if (!strcmp(m, "f32") || !strcmp(m, "fp32")) f.k_type = f.v_type = KV_F32;
    else if (!strcmp(m, "bf16")) f.k_type = f.v_type = KV_BF16;
    else if (!strcmp(m, "int2") || !strcmp(m, "int4") || !strcmp(m, "kivi2") || !strcmp(m, "kivi4")) {
        int kivi = m[0] == 'k';
        bits_type(m[strlen(m) - 1], &f.k_type);
        f.v_type = f.k_type;
        f.rotate = f.scale = !kivi;
    } else if (!strncmp(m, "kivi-", 5) && parse_kv_bits(m + 5, &f)) f.rotate = f.scale = 0;
    else if (parse_kv_bits(m, &f)) f.rotate = f.scale = 1;
    else ok = 0;
    if (!ok) return omni_fail(OMNI_ERR_USAGE, "unknown KV cache mode '%s' (valid: " KV_MODES_HELP ")", m);
    *fmt = f;
    return OMNI_OK;
}

/* Parse "a" or "a-b" into [lo, hi]; returns 1 on success. */
static int parse_range(const char *s, int len, int *lo, int *hi) {
    char buf[32];
    if (len <= 0 || len >= (int)sizeof buf) return 0;
    memcpy(buf, s, (size_t)len);
    buf[len] = 0;
    char *end;
    long a = strtol(buf, &end, 10), b = a;
    if (end == buf) return 0;
    if (*end == '-') {
        char *e2;
        b = strtol(end + 1, &e2, 10);
        if (e2 == end + 1 || *e2) return 0;
    } else if (*end) {
        return 0;
    }
    *lo = (int)a;
    *hi = (int)b;
    return a >= 0 && b >= a && b < 1000000;
}

#define KV_MAX_OVERRIDE_LAYERS 1024

omni_status kv_parse_layer_overrides(const char *spec, const kv_format *base, int n_layers, kv_format *out_layers) {
    for (int l = 0; l < n_layers; l++) out_layers[l] = *base;
    uint64_t set[KV_MAX_OVERRIDE_LAYERS / 64] = {0};
    if (n_layers > KV_MAX_OVERRIDE_LAYERS)
        return omni_fail(OMNI_ERR_USAGE, "KV layer overrides: %d layers (max %d)", n_layers, KV_MAX_OVERRIDE_LAYERS);
    const char *p = spec ? spec : "";
    while (*p) {
        const char *end = strchr(p, ','), *colon = strchr(p, ':');
        if (!end) end = p + strlen(p);
        int lo, hi;
        char mode[32];
        if (!colon || colon > end || end - colon - 1 <= 0 || end - colon - 1 >= (int)sizeof mode ||
            !parse_range(p, (int)(colon - p), &lo, &hi))
            return omni_fail(OMNI_ERR_USAGE, "bad KV layer override '%.*s' (expected LAYER[-LAYER]:MODE, e.g. 0-3:int4)",
                             (int)(end - p), p);
        if (hi >= n_layers)
            return omni_fail(OMNI_ERR_USAGE, "KV layer override '%.*s': layer %d out of range (model has %d layers)",
                             (int)(end - p), p, hi, n_layers);
        memcpy(mode, colon + 1, (size_t)(end - colon - 1));
        mode[end - colon - 1] = 0;
        kv_format f;
        omni_status st = kv_parse_mode(mode, &f);
        if (st) return st;
        f.window = base->window;
        f.n_sink = base->n_sink;
        for (int l = lo; l <= hi; l++) /* each layer once: "0:int2,0:int4" is a mistake, not "the last wins" */
            if (set[l / 64] >> (l % 64) & 1)
                return omni_fail(OMNI_ERR_USAGE, "KV layer override '%.*s': layer %d is already given", (int)(end - p),
                                 p, l);
            else set[l / 64] |= 1ull << (l % 64);
        for (int l = lo; l <= hi; l++) out_layers[l] = f;
        if (*end && !end[1]) return omni_fail(OMNI_ERR_USAGE, "bad KV layer override spec '%s' (trailing comma)", spec);
        p = *end ? end + 1 : end;
    }
    return OMNI_OK;
}

static int is_q(kv_type t) { return t == KV_Q2 || t == KV_Q4; }

const char *kv_format_name(const kv_format *fmt, char *buf, int cap) {
    if (cap <= 0) return buf;
    int kq = is_q(fmt->k_type), vq = is_q(fmt->v_type);
    char base[32];
    if (!kq && !vq && fmt->k_type == fmt->v_type) snprintf(base, sizeof base, "%s", kv_type_name(fmt->k_type));
    else if (!kq && !vq) snprintf(base, sizeof base, "k%s-v%s", kv_type_name(fmt->k_type), kv_type_name(fmt->v_type));
    else {
        int kb = fmt->k_type == KV_Q2 ? 2 : 4, vb = fmt->v_type == KV_Q2 ? 2 : 4;
        int kivi = !fmt->rotate && !fmt->scale;
        if (kb == vb) snprintf(base, sizeof base, "%s%d", kivi ? "kivi" : "int", kb);
        else snprintf(base, sizeof base, "%sk%dv%d", kivi ? "kivi-" : "", kb, vb);
        if (!kivi && !fmt->rotate) strcat(base, "-norot");
        if (!kivi && !fmt->scale) strcat(base, "-noscale");
    }
    if (!kq && !vq && (fmt->rotate || fmt->scale)) strcat(base, fmt->rotate ? "-rot" : "");
    snprintf(buf, (size_t)cap, "%s", base);
    return buf;
}
