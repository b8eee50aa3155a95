/* status.h - error codes and the last-error message shared by every omni library module.
 *
 * Library code never exits: it returns an omni_status and leaves a one-line message (no trailing newline)
 * that the caller reads with omni_last_error(). The message buffer is thread-local.
 * app/ maps statuses to process exit codes (see omni_status_exit_code). */
#ifndef OMNI_STATUS_H
#define OMNI_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    OMNI_OK = 0,
    OMNI_ERR_USAGE,       /* bad argument / option value                    -> exit 1 */
    OMNI_ERR_INPUT,       /* missing, unreadable or malformed input file     -> exit 2 */
    OMNI_ERR_MODEL,       /* model dir/config/checkpoint missing or invalid  -> exit 3 */
    OMNI_ERR_UNSUPPORTED, /* valid but unsupported (model type, dtype ...)   -> exit 3 */
    OMNI_ERR_NOMEM,       /* allocation failed                               -> exit 4 */
    OMNI_ERR_RUNTIME,     /* anything else at run time (device error ...)    -> exit 4 */
} omni_status;

/* Record a message (printf-style) for the current thread and return `st` (so: `return omni_fail(...)`). */
omni_status omni_fail(omni_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The message of the last omni_fail on this thread ("" if none). Valid until the next omni_fail. */
const char *omni_last_error(void);

/* Clear the message. */
void omni_clear_error(void);

/* Short name of a status ("input", "model", ...). */
const char *omni_status_name(omni_status st);

/* Documented process exit code for a status: 0 ok, 1 usage, 2 input, 3 model/unsupported, 4 runtime/nomem. */
int omni_status_exit_code(omni_status st);

/* Logging to stderr. Level: 0 errors only, 1 info (default), 2 debug. */
void omni_log_set_level(int level);
int omni_log_level(void);
void omni_log(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Rules for reading a whole file into memory (omni_read_file_ex). Every file omni reads whole goes through it:
 * prompt/text files (-f, --text, stdin), model-directory JSON files, images. */
typedef struct {
    size_t max_bytes;  /* refuse inputs larger than this (checked from the size of a regular file before reading,
                          and while reading pipes and devices); 0 = no limit */
    int regular_only;  /* refuse devices, FIFOs and sockets before opening them (no hang on a FIFO) */
    int reject_nul;    /* text: refuse the input at its first NUL byte (binary data, /dev/zero) */
    int allow_stdin;   /* the path "-" means standard input */
} omni_read_params;

/* max_bytes OMNI_READ_DEFAULT_MAX (1 GiB), regular_only 0, reject_nul 0, allow_stdin 0. */
#define OMNI_READ_DEFAULT_MAX ((size_t)1 << 30)
omni_read_params omni_read_default_params(void);

/* Read `path` whole into a malloc'ed, NUL-terminated buffer (*len = bytes, may be NULL). On failure *out is NULL
 * and the status is `kind` (OMNI_ERR_INPUT for user files, OMNI_ERR_MODEL for model files; OMNI_ERR_NOMEM when
 * memory runs out) with a one-line message naming the file: missing, a directory, not a regular file, over the
 * size limit, contains a NUL byte, read error. A read interrupted by a signal is retried. */
omni_status omni_read_file_ex(const char *path, const omni_read_params *p, omni_status kind, char **out, size_t *len);

/* omni_read_file_ex with the default params; NULL on failure with errno set (ENOENT..., EISDIR for a directory,
 * EFBIG over the limit, EIO for a read error). */
char *omni_read_file(const char *path, size_t *len);

/* Monotonic clock in milliseconds (for timings). */
double omni_time_ms(void);

#ifdef __cplusplus
}
#endif
#endif
