/* status.c - thread-local last-error message, status names, logging and a clock. */
#define _POSIX_C_SOURCE 200809L
#include "status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static _Thread_local char g_msg[1024];
static int g_log_level = 1;

omni_status omni_fail(omni_status st, const char *fmt, ...) {
    char tmp[sizeof g_msg]; /* format aside: the arguments may include omni_last_error() itself */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(g_msg, tmp, sizeof g_msg);
    return st;
}

const char *omni_last_error(void) { return g_msg; }

void omni_clear_error(void) { g_msg[0] = 0; }

const char *omni_status_name(omni_status st) {
    switch (st) {
    case OMNI_OK: return "ok";
    case OMNI_ERR_USAGE: return "usage";
    case OMNI_ERR_INPUT: return "input";
    case OMNI_ERR_MODEL: return "model";
    case OMNI_ERR_UNSUPPORTED: return "unsupported";
    case OMNI_ERR_NOMEM: return "out of memory";
    case OMNI_ERR_RUNTIME: return "runtime";
    }
    return "unknown";
}

int omni_status_exit_code(omni_status st) {
    switch (st) {
    case OMNI_OK: return 0;
    case OMNI_ERR_USAGE: return 1;
    case OMNI_ERR_INPUT: return 2;
    case OMNI_ERR_MODEL:
    case OMNI_ERR_UNSUPPORTED: return 3;
    default: return 4;
    }
}

void omni_log_set_level(int level) { g_log_level = level; }
int omni_log_level(void) { return g_log_level; }

void omni_log(int level, const char *fmt, ...) {
    if (level > g_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

double omni_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

char *omni_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    /* Regular files are read in one go; pipes and devices (e.g. /dev/stdin) until EOF. */
    size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1 || feof(f) || ferror(f)) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return NULL;
    if (err) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
