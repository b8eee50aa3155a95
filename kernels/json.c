/* json.c - bounded JSON file reading and typed, range-checked value access (see json.h). */
#include "kernels/json.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cJSON gives NULL both for bad syntax and for a failed allocation. Its allocator hooks (process-wide, installed
 * once; plain malloc/free underneath) note a failed allocation for the calling thread, so running out of memory
 * is reported as such (OMNI_ERR_NOMEM), not as "invalid JSON". */
static __thread int t_json_nomem;
static pthread_once_t g_json_hooks = PTHREAD_ONCE_INIT;

static void *json_malloc(size_t n) {
    void *p = malloc(n);
    if (!p) t_json_nomem = 1;
    return p;
}

static void json_free(void *p) { free(p); }

static void json_install_hooks(void) {
    cJSON_Hooks h = {json_malloc, json_free};
    cJSON_InitHooks(&h);
}

void omni_json_watch_memory(void) {
    pthread_once(&g_json_hooks, json_install_hooks);
    t_json_nomem = 0;
}

int omni_json_out_of_memory(void) { return t_json_nomem; }

int64_t omni_json_count_values(const char *text, size_t len) {
    int64_t n = 1;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else n += c == ',' || c == '[' || c == '{';
    }
    return n;
}

omni_status omni_json_parse(const char *text, size_t len, const char *name, omni_status kind, cJSON **out) {
    *out = NULL;
    int64_t nv = omni_json_count_values(text, len);
    if (nv > OMNI_JSON_MAX_VALUES)
        return omni_fail(kind, "%s: about %lld JSON values, over the limit of %lld (not a model file?)", name,
                         (long long)nv, (long long)OMNI_JSON_MAX_VALUES);
    const char *end = NULL;
    omni_json_watch_memory();
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root && omni_json_out_of_memory())
        return omni_fail(OMNI_ERR_NOMEM, "%s: out of memory parsing %zu bytes of JSON", name, len);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        int line = 1;
        for (size_t i = 0; i < at; i++) line += text[i] == '\n';
        return omni_fail(kind, "%s: invalid JSON near byte %zu (line %d)", name, at, line);
    }
    int64_t extra = omni_json_trailing(text, len, end);
    if (extra >= 0) {
        cJSON_Delete(root);
        int line = 1;
        for (int64_t i = 0; i < extra; i++) line += text[i] == '\n';
        return omni_fail(kind, "%s: unexpected data after the JSON value at byte %lld (line %d)", name,
                         (long long)extra, line);
    }
    *out = root;
    return OMNI_OK;
}

int64_t omni_json_trailing(const char *text, size_t len, const char *end) {
    size_t i = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    return i < len ? (int64_t)i : -1;
}

omni_status omni_json_load(const char *path, omni_status kind, cJSON **out) {
    *out = NULL;
    omni_read_params p = omni_read_default_params();
    p.max_bytes = OMNI_JSON_MAX_BYTES;
    p.regular_only = 1;
    p.reject_nul = 1;
    char *text = NULL;
    size_t len = 0;
    omni_status st = omni_read_file_ex(path, &p, kind, &text, &len);
    if (st) return st;
    st = omni_json_parse(text, len, path, kind, out);
    free(text);
    return st;
}

/* "file: path.key" prefix of every message. */
static const char *where(const omni_json_ctx *c, const char *key, char *buf, size_t cap) {
    const char *p = c->path ? c->path : "";
    snprintf(buf, cap, "%s: %s%s%s", c->file ? c->file : "json", p, *p ? "." : "", key);
    return buf;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "something else";
}

/* The value of `key`, or NULL when absent or null (an error then if required). */
static omni_status lookup(const omni_json_ctx *c, const cJSON *o, const char *key, int required, const cJSON **v) {
    *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    if (*v && cJSON_IsNull(*v)) *v = NULL;
    if (!*v && required) {
        char w[256];
        return omni_fail(c->kind, "%s: missing", where(c, key, w, sizeof w));
    }
    return OMNI_OK;
}

static omni_status wrong_type(const omni_json_ctx *c, const char *key, const char *want, const cJSON *v) {
    char w[256];
    return omni_fail(c->kind, "%s: expected %s, got %s", where(c, key, w, sizeof w), want, type_name(v));
}

/* Check one number as an integer in [lo, hi]; `key` may carry an index suffix for arrays. */
static omni_status check_int(const omni_json_ctx *c, const char *key, const cJSON *v, int64_t lo, int64_t hi,
                             int64_t *out) {
    char w[256];
    if (!cJSON_IsNumber(v)) return wrong_type(c, key, "an integer", v);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 0x1p53)
        return omni_fail(c->kind, "%s: %.17g is not an integer", where(c, key, w, sizeof w), d);
    if (d < (double)lo || d > (double)hi)
        return omni_fail(c->kind, "%s: %.17g is outside [%lld, %lld]", where(c, key, w, sizeof w), d, (long long)lo,
                         (long long)hi);
    *out = (int64_t)d;
    return OMNI_OK;
}

static omni_status check_num(const omni_json_ctx *c, const char *key, const cJSON *v, double lo, double hi,
                             double *out) {
    char w[256];
    if (!cJSON_IsNumber(v)) return wrong_type(c, key, "a number", v);
    double d = v->valuedouble;
    if (!isfinite(d)) return omni_fail(c->kind, "%s: %g is not a finite number", where(c, key, w, sizeof w), d);
    if (d < lo || d > hi) return omni_fail(c->kind, "%s: %.9g is outside [%g, %g]", where(c, key, w, sizeof w), d, lo, hi);
    *out = d;
    return OMNI_OK;
}

omni_status omni_json_i64(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int64_t lo,
                          int64_t hi, int64_t *out) {
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    return check_int(c, key, v, lo, hi, out);
}

omni_status omni_json_int(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int64_t lo,
                          int64_t hi, int *out) {
    if (lo < INT32_MIN) lo = INT32_MIN;
    if (hi > INT32_MAX) hi = INT32_MAX;
    int64_t x;
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if ((st = check_int(c, key, v, lo, hi, &x))) return st;
    *out = (int)x;
    return OMNI_OK;
}

omni_status omni_json_double(const omni_json_ctx *c, const cJSON *o, const char *key, int required, double lo,
                             double hi, double *out) {
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    return check_num(c, key, v, lo, hi, out);
}

omni_status omni_json_float(const omni_json_ctx *c, const cJSON *o, const char *key, int required, double lo,
                            double hi, float *out) {
    double d;
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if ((st = check_num(c, key, v, lo, hi, &d))) return st;
    *out = (float)d;
    return OMNI_OK;
}

omni_status omni_json_bool(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int *out) {
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if (!cJSON_IsBool(v)) return wrong_type(c, key, "true or false", v);
    *out = cJSON_IsTrue(v);
    return OMNI_OK;
}

omni_status omni_json_string(const omni_json_ctx *c, const cJSON *o, const char *key, int required,
                             const char **out) {
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if (!cJSON_IsString(v) || !v->valuestring) return wrong_type(c, key, "a string", v);
    *out = v->valuestring;
    return OMNI_OK;
}

omni_status omni_json_object(const omni_json_ctx *c, const cJSON *o, const char *key, int required,
                             const cJSON **out) {
    const cJSON *v;
    *out = NULL;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if (!cJSON_IsObject(v)) return wrong_type(c, key, "an object", v);
    *out = v;
    return OMNI_OK;
}

/* Elements of an array value into out (count checked). */
static omni_status int_array(const omni_json_ctx *c, const char *key, const cJSON *v, int min_n, int max_n,
                             int64_t lo, int64_t hi, int *out, int *n) {
    char w[256], k[160];
    int cnt = cJSON_GetArraySize(v);
    if (cnt < min_n || cnt > max_n) {
        if (min_n == max_n)
            return omni_fail(c->kind, "%s: %d element%s, expected %d", where(c, key, w, sizeof w), cnt,
                             cnt == 1 ? "" : "s", min_n);
        return omni_fail(c->kind, "%s: %d elements, expected %d to %d", where(c, key, w, sizeof w), cnt, min_n, max_n);
    }
    if (lo < INT32_MIN) lo = INT32_MIN;
    if (hi > INT32_MAX) hi = INT32_MAX;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        int64_t x;
        snprintf(k, sizeof k, "%s[%d]", key, i);
        omni_status st = check_int(c, k, e, lo, hi, &x);
        if (st) return st;
        out[i++] = (int)x;
    }
    *n = i;
    return OMNI_OK;
}

omni_status omni_json_ints(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int min_n,
                           int max_n, int64_t lo, int64_t hi, int *out, int *n) {
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if (!cJSON_IsArray(v)) return wrong_type(c, key, "an array of integers", v);
    return int_array(c, key, v, min_n, max_n, lo, hi, out, n);
}

omni_status omni_json_int_or_ints(const omni_json_ctx *c, const cJSON *o, const char *key, int required,
                                  int min_n, int max_n, int64_t lo, int64_t hi, int *out, int *n) {
    const cJSON *v;
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    if (cJSON_IsArray(v)) return int_array(c, key, v, min_n, max_n, lo, hi, out, n);
    if (!cJSON_IsNumber(v)) return wrong_type(c, key, "an integer or an array of integers", v);
    int64_t x;
    if (hi > INT32_MAX) hi = INT32_MAX;
    if ((st = check_int(c, key, v, lo, hi, &x))) return st;
    out[0] = (int)x;
    *n = 1;
    return OMNI_OK;
}

omni_status omni_json_floats(const omni_json_ctx *c, const cJSON *o, const char *key, int required, int n,
                             double lo, double hi, float *out) {
    const cJSON *v;
    char w[256], k[160];
    omni_status st = lookup(c, o, key, required, &v);
    if (st || !v) return st;
    double d;
    if (cJSON_IsNumber(v)) {
        if ((st = check_num(c, key, v, lo, hi, &d))) return st;
        for (int i = 0; i < n; i++) out[i] = (float)d;
        return OMNI_OK;
    }
    if (!cJSON_IsArray(v)) return wrong_type(c, key, "an array of numbers", v);
    if (cJSON_GetArraySize(v) != n)
        return omni_fail(c->kind, "%s: %d elements, expected %d", where(c, key, w, sizeof w), cJSON_GetArraySize(v), n);
    float tmp[64];
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        snprintf(k, sizeof k, "%s[%d]", key, i);
        if ((st = check_num(c, k, e, lo, hi, &d))) return st;
        if (i < 64) tmp[i] = (float)d;
        i++;
    }
    for (i = 0; i < n && i < 64; i++) out[i] = tmp[i];
    return OMNI_OK;
}
