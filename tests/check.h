/* check.h - tiny always-on assertion helpers for tests (never compiled out, unlike assert()).
 *
 * CHECK(cond, fmt, ...) records a failure with file:line and the message and continues;
 * check_exit() returns the process exit code (0 if all passed, 1 otherwise) and prints "N passed, N failed". */
#ifndef OMNI_TEST_CHECK_H
#define OMNI_TEST_CHECK_H

#include <stdio.h>

static int check_pass_ = 0, check_fail_ = 0;

#define CHECK(cond, ...)                                                                                      \
    do {                                                                                                      \
        if (cond) {                                                                                           \
            check_pass_++;                                                                                    \
        } else {                                                                                              \
            check_fail_++;                                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                     \
            fputc('\n', stderr);                                                                              \
        }                                                                                                     \
    } while (0)

static inline int check_exit(void) {
    printf("%d passed, %d failed\n", check_pass_, check_fail_);
    return check_fail_ ? 1 : 0;
}

#endif
