/* util.h - helpers shared by the audio tests: raw f32 fixture files, JSON files, array comparisons. */
#ifndef OMNI_TEST_AUDIO_UTIL_H
#define OMNI_TEST_AUDIO_UTIL_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/status.h"

/* Raw little-endian f32 file; *n = element count. */
static inline float *read_f32(const char *path, int64_t *n) {
    size_t bytes = 0;
    float *x = (float *)omni_read_file(path, &bytes);
    if (n) *n = x ? (int64_t)(bytes / 4) : 0;
    return x;
}

static inline cJSON *read_json(const char *path) {
    char *s = omni_read_file(path, NULL);
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
