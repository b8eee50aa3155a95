/* status.h - error codes and the last-error message shared by every omni library module.
 *
 * Library code never exits: it returns an omni_status and leaves a one-line message (no trailing newline)
 * that the caller reads with omni_last_error(). The message buffer is thread-local.
 * app/ maps statuses to process exit codes (see omni_status_exit_code). */
#ifndef OMNI_STATUS_H
#define OMNI_STATUS_H

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

/* Read a whole file (or pipe/device until EOF) into a malloc'ed, NUL-terminated buffer (*len = bytes, may be
 * NULL). NULL on failure with errno set (EISDIR for a directory, EIO for a read error). */
#include <stddef.h>
char *omni_read_file(const char *path, size_t *len);

/* Monotonic clock in milliseconds (for timings). */
double omni_time_ms(void);

#ifdef __cplusplus
}
#endif
#endif
