/* test_status.c - kernels/status.h: omni_fail and the thread-local last-error message, status names and exit
 * codes, the log level, the monotonic clock and the bounded whole-file reader (size caps, NUL bytes, devices,
 * FIFOs, directories, stdin). */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <threads.h>
#include <unistd.h>

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

static char g_dir[64];

static void write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n, "write %s", path);
    if (f) fclose(f);
}

/* Expect omni_read_file_ex to fail with `kind` and a message containing `needle`, quickly. */
static void expect_read_fail(const char *what, const char *path, const omni_read_params *p, const char *needle) {
    char *buf = (char *)1;
    size_t n = 7;
    double t0 = omni_time_ms();
    omni_status st = omni_read_file_ex(path, p, OMNI_ERR_MODEL, &buf, &n);
    CHECK(st == OMNI_ERR_MODEL && buf == NULL && n == 0, "%s: status %d", what, st);
    CHECK(strstr(omni_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, omni_last_error(), needle);
    CHECK(omni_time_ms() - t0 < 5000, "%s: took %.0f ms", what, omni_time_ms() - t0);
}

static void test_read_limits(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/omni_status_XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL, "mkdtemp");
    char path[128], fifo[128];
    snprintf(path, sizeof path, "%s/a.txt", g_dir);
    write_file(path, "hello world\n", 12);
    omni_read_params p = omni_read_default_params();
    CHECK(p.max_bytes == OMNI_READ_DEFAULT_MAX && !p.regular_only && !p.reject_nul && !p.allow_stdin, "defaults");
    char *buf = NULL;
    size_t n = 0;
    CHECK(omni_read_file_ex(path, &p, OMNI_ERR_INPUT, &buf, &n) == OMNI_OK && n == 12 && !strcmp(buf, "hello world\n"),
          "read a.txt: %s", omni_last_error());
    free(buf);
    p.max_bytes = 12;
    CHECK(omni_read_file_ex(path, &p, OMNI_ERR_INPUT, &buf, &n) == OMNI_OK && n == 12, "exactly at the limit");
    free(buf);
    p.max_bytes = 11;
    expect_read_fail("over the size limit", path, &p, "over the limit of 11 bytes");
    p = omni_read_default_params();
    expect_read_fail("directory", g_dir, &p, "is a directory");
    expect_read_fail("missing", "/nonexistent/x.json", &p, "No such file");
    expect_read_fail("stdin not allowed", "-", &p, "cannot read -");
    /* devices: /dev/zero would be read forever without a limit (issue 15 item 5) */
    p.max_bytes = 1 << 20;
    expect_read_fail("/dev/zero, size limit", "/dev/zero", &p, "over the limit of 1048576 bytes");
    p.reject_nul = 1;
    expect_read_fail("/dev/zero, NUL", "/dev/zero", &p, "NUL byte at offset 0");
    expect_read_fail("/dev/urandom, NUL", "/dev/urandom", &p, "NUL byte");
    p = omni_read_default_params();
    p.regular_only = 1;
    expect_read_fail("/dev/zero, regular only", "/dev/zero", &p, "not a regular file");
    /* a FIFO with no writer: opening it for reading would block forever (issue 15 item 14) */
    snprintf(fifo, sizeof fifo, "%s/config.json", g_dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    alarm(20); /* a hang fails the test instead of blocking ctest until its timeout */
    expect_read_fail("FIFO, regular only", fifo, &p, "not a regular file");
    alarm(0);
    /* legacy wrapper: errno */
    errno = 0;
    CHECK(omni_read_file(g_dir, NULL) == NULL && errno == EISDIR, "omni_read_file(dir): errno %d", errno);
    /* a NUL in the middle of a text file */
    write_file(path, "ab\0cd", 5);
    p = omni_read_default_params();
    p.reject_nul = 1;
    expect_read_fail("NUL in a file", path, &p, "NUL byte at offset 2");
    unlink(path);
    unlink(fifo);
    rmdir(g_dir);
}

/* "-" reads standard input when allowed (omni -f -). */
static void test_read_stdin(void) {
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    CHECK(write(fds[1], "from a pipe", 11) == 11, "write pipe");
    close(fds[1]);
    int saved = dup(0);
    dup2(fds[0], 0);
    close(fds[0]);
    omni_read_params p = omni_read_default_params();
    p.allow_stdin = 1;
    p.reject_nul = 1;
    char *buf = NULL;
    size_t n = 0;
    CHECK(omni_read_file_ex("-", &p, OMNI_ERR_INPUT, &buf, &n) == OMNI_OK && n == 11 && !strcmp(buf, "from a pipe"),
          "stdin: %s", omni_last_error());
    free(buf);
    dup2(saved, 0);
    close(saved);
}

int main(void) {
    test_read_limits();
    test_read_stdin();
    test_messages();
    test_codes();
    test_log_and_clock();
    return check_exit();
}
