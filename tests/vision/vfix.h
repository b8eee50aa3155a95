/* vfix.h - helpers shared by the vision tests: read raw fixture files and the fixture manifest (cJSON). */
#ifndef OMNI_TEST_VFIX_H
#define OMNI_TEST_VFIX_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#define VFIX_DIR OMNI_FIXTURES "/vision"

/* Whole file into a malloc'ed buffer (+1 NUL byte); NULL if missing. */
static inline void *vfix_read(const char *name, size_t *size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", VFIX_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = 0;
    fclose(f);
    if (size) *size = (size_t)n;
    return buf;
}

static inline cJSON *vfix_manifest(void) {
    char *text = vfix_read("manifest.json", NULL);
    if (!text) return NULL;
    cJSON *m = cJSON_Parse(text);
    free(text);
    return m;
}

static inline const char *vfix_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline int vfix_int(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static inline double vfix_num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

#endif
