/* status.c - thread-local last-error message, status names, logging, a clock and the bounded whole-file reader. */
#define _POSIX_C_SOURCE 200809L
#include "status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

omni_read_params omni_read_default_params(void) {
    omni_read_params p = {OMNI_READ_DEFAULT_MAX, 0, 0, 0};
    return p;
}

/* Type and size checks from stat(), before open() (opening a FIFO for reading blocks until a writer comes). */
static omni_status check_path(const char *path, const omni_read_params *p, omni_status kind, struct stat *sb) {
    if (!path || !*path) return omni_fail(kind, "no file name given");
    if (stat(path, sb) != 0) return omni_fail(kind, "cannot read %s: %s", path, strerror(errno));
    if (S_ISDIR(sb->st_mode)) {
        errno = EISDIR;
        return omni_fail(kind, "cannot read %s: is a directory", path);
    }
    if (p->regular_only && !S_ISREG(sb->st_mode)) {
        errno = EINVAL;
        return omni_fail(kind, "cannot read %s: not a regular file (a device, pipe or socket)", path);
    }
    if (S_ISREG(sb->st_mode) && p->max_bytes && (uint64_t)sb->st_size > p->max_bytes) {
        errno = EFBIG;
        return omni_fail(kind, "%s is %lld bytes, over the limit of %zu bytes", path, (long long)sb->st_size,
                         p->max_bytes);
    }
    return OMNI_OK;
}

/* Read fd to EOF into a growing buffer, enforcing the size limit and the NUL rule as bytes arrive. */
static omni_status read_all(int fd, size_t hint, const char *name, const omni_read_params *p, omni_status kind,
                            char **out, size_t *len) {
    size_t cap = hint + 2 > 4096 ? hint + 2 : 4096, n = 0; /* +2: room for the read that sees EOF */
    char *buf = malloc(cap);
    if (!buf) return omni_fail(OMNI_ERR_NOMEM, "out of memory reading %s", name);
    for (;;) {
        if (n + 1 == cap) {
            size_t ncap = cap * 2;
            if (p->max_bytes && ncap > p->max_bytes + 2) ncap = p->max_bytes + 2; /* room to see one byte too many */
            char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                free(buf);
                return omni_fail(OMNI_ERR_NOMEM, "out of memory reading %s (%zu bytes so far)", name, n);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            errno = e == EISDIR ? EISDIR : EIO;
            return omni_fail(kind, "cannot read %s: %s", name, strerror(e));
        }
        if (r == 0) break;
        if (p->reject_nul && memchr(buf + n, 0, (size_t)r)) {
            size_t at = n + (size_t)((char *)memchr(buf + n, 0, (size_t)r) - (buf + n));
            free(buf);
            errno = EINVAL;
            return omni_fail(kind, "%s contains a NUL byte at offset %zu (binary data, not text)", name, at);
        }
        n += (size_t)r;
        if (p->max_bytes && n > p->max_bytes) {
            free(buf);
            errno = EFBIG;
            return omni_fail(kind, "%s is over the limit of %zu bytes", name, p->max_bytes);
        }
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return OMNI_OK;
}

omni_status omni_read_file_ex(const char *path, const omni_read_params *p, omni_status kind, char **out,
                              size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    omni_read_params def = omni_read_default_params();
    if (!p) p = &def;
    if (p->allow_stdin && path && !strcmp(path, "-")) return read_all(0, 0, "<stdin>", p, kind, out, len);
    struct stat sb;
    omni_status st = check_path(path, p, kind, &sb);
    if (st) return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | (p->regular_only ? O_NONBLOCK : 0));
    if (fd < 0) return omni_fail(kind, "cannot open %s: %s", path, strerror(errno));
    struct stat fsb; /* the file opened is the one checked (it may have been replaced in between) */
    if (fstat(fd, &fsb) != 0 || (p->regular_only && !S_ISREG(fsb.st_mode)) || S_ISDIR(fsb.st_mode)) {
        close(fd);
        errno = EINVAL;
        return omni_fail(kind, "cannot read %s: not a regular file", path);
    }
    size_t hint = S_ISREG(fsb.st_mode) ? (size_t)fsb.st_size : 0;
    st = read_all(fd, hint, path, p, kind, out, len);
    int e = errno;
    close(fd);
    errno = e;
    return st;
}

char *omni_read_file(const char *path, size_t *len) {
    char *out = NULL;
    omni_read_params p = omni_read_default_params();
    if (omni_read_file_ex(path, &p, OMNI_ERR_INPUT, &out, len) != OMNI_OK) return NULL;
    return out;
}
