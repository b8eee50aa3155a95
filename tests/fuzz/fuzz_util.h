/* fuzz_util.h - helpers shared by the libFuzzer targets of tests/fuzz (and their replay driver). */
#ifndef OMNI_FUZZ_UTIL_H
#define OMNI_FUZZ_UTIL_H

#define _DEFAULT_SOURCE
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* nftw */
#endif
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_fuzz_dir[512];

static inline int fuzz_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static inline void fuzz_dir_remove(void) { nftw(g_fuzz_dir, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A private directory for targets that need files (under $TMPDIR or /tmp; made once per process, removed with
 * everything in it when the process exits normally: replays and libFuzzer's jobs). */
static inline const char *fuzz_dir(void) {
    if (!g_fuzz_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(g_fuzz_dir, sizeof g_fuzz_dir, "%s/omni_fuzz_XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(g_fuzz_dir)) abort();
        atexit(fuzz_dir_remove);
    }
    return g_fuzz_dir;
}

/* Write n bytes to dir/name (replacing it); 0 on success. */
static inline int fuzz_write(const char *dir, const char *name, const uint8_t *d, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(d, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static inline void fuzz_unlink(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* A NUL-terminated copy (malloc'ed). */
static inline char *fuzz_str(const uint8_t *d, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, d, n);
    s[n] = 0;
    return s;
}

/* 1 when s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF), written
 * here independently of llm/tokenizer.c's scanner, so that the two check each other. */
static inline int fuzz_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        unsigned long cp = k == 1 ? c : c & (0xFFu >> (k + 1));
        for (size_t j = 1; j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (u[i + j] & 0x3F);
        }
        static const unsigned long min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k;
    }
    return 1;
}

/* An invariant the code promises: abort (a crash for libFuzzer) when it does not hold. "ERROR:" makes libFuzzer's
 * fork mode copy the line into its own log (it keeps only such lines of a crashed job). */
#define FUZZ_ASSERT(c)                                                                                             \
    do {                                                                                                           \
        if (!(c)) {                                                                                                \
            fprintf(stderr, "ERROR: fuzz invariant failed: %s (%s:%d)\n", #c, __FILE__, __LINE__);                     \
            abort();                                                                                               \
        }                                                                                                          \
    } while (0)

#endif
