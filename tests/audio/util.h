/* util.h - helpers shared by the audio tests: raw f32 fixture files, JSON files, array comparisons. */
#ifndef OMNI_TEST_AUDIO_UTIL_H
#define OMNI_TEST_AUDIO_UTIL_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Whole file as malloc'ed bytes (NUL-terminated); *n = size. NULL if unreadable. */
static inline char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    if (b) b[sz] = 0;
    fclose(f);
    if (n) *n = (size_t)sz;
    return b;
}

/* Raw little-endian f32 file; *n = element count. */
static inline float *read_f32(const char *path, int64_t *n) {
    size_t bytes = 0;
    float *x = (float *)read_all(path, &bytes);
    if (n) *n = x ? (int64_t)(bytes / 4) : 0;
    return x;
}

static inline cJSON *read_json(const char *path) {
    char *s = read_all(path, NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

static inline double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

static inline double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(a[i]) > m) m = fabs(a[i]);
    return m;
}

static inline double mean_abs_diff(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] - b[i]);
    return n ? s / n : 0;
}

#endif
