/* test_status.c - kernels/status.h: omni_fail and the thread-local last-error message, status names and exit
 * codes, the log level and the monotonic clock. */
#include <string.h>
#include <threads.h>

#include "check.h"
#include "kernels/status.h"

/* A second thread sets its own message; the main thread's message must not change. */
static int other_thread(void *arg) {
    (void)arg;
    omni_status st = omni_fail(OMNI_ERR_RUNTIME, "from thread %d", 2);
    return st == OMNI_ERR_RUNTIME && !strcmp(omni_last_error(), "from thread 2");
}

static void test_messages(void) {
    omni_clear_error();
    CHECK(!strcmp(omni_last_error(), ""), "cleared message is empty");
    CHECK(omni_fail(OMNI_ERR_INPUT, "cannot read %s (%d)", "a.wav", 7) == OMNI_ERR_INPUT, "omni_fail returns st");
    CHECK(!strcmp(omni_last_error(), "cannot read a.wav (7)"), "message: '%s'", omni_last_error());
    thrd_t t;
    int ok = 0;
    CHECK(thrd_create(&t, other_thread, NULL) == thrd_success && thrd_join(t, &ok) == thrd_success && ok,
          "the other thread sees its own message");
    CHECK(!strcmp(omni_last_error(), "cannot read a.wav (7)"), "message changed by another thread: '%s'",
          omni_last_error());
    static char longmsg[5000];
    memset(longmsg, 'x', sizeof longmsg - 1);
    omni_fail(OMNI_ERR_MODEL, "%s", longmsg); /* truncated, never overflows (ASan) */
    size_t n = strlen(omni_last_error());
    CHECK(n > 100 && n < sizeof longmsg - 1, "long message truncated to %zu chars", n);
    omni_clear_error();
    CHECK(!strcmp(omni_last_error(), ""), "omni_clear_error");
}

/* Exit codes documented in status.h: 0 ok, 1 usage, 2 input, 3 model/unsupported, 4 runtime/nomem. */
static void test_codes(void) {
    static const int want[] = {0, 1, 2, 3, 3, 4, 4};
    const char *names[7];
    for (int s = OMNI_OK; s <= OMNI_ERR_RUNTIME; s++) {
        CHECK(omni_status_exit_code((omni_status)s) == want[s], "exit code of %d: %d", s,
              omni_status_exit_code((omni_status)s));
        names[s] = omni_status_name((omni_status)s);
        CHECK(names[s] && names[s][0], "status %d has a name", s);
        for (int j = 0; j < s; j++) CHECK(strcmp(names[j], names[s]), "statuses %d and %d share a name", j, s);
    }
    CHECK(!strcmp(omni_status_name(OMNI_ERR_MODEL), "model"), "model name");
}

static void test_log_and_clock(void) {
    int before = omni_log_level();
    omni_log_set_level(0);
    CHECK(omni_log_level() == 0, "log level 0");
    omni_log(1, "this info line must not appear\n");
    omni_log_set_level(before);
    double t0 = omni_time_ms(), t1 = t0;
    for (int i = 0; i < 1000 && t1 == t0; i++) t1 = omni_time_ms();
    CHECK(t0 > 0 && t1 >= t0, "omni_time_ms monotonic: %f -> %f", t0, t1);
}

int main(void) {
    test_messages();
    test_codes();
    test_log_and_clock();
    return check_exit();
}
