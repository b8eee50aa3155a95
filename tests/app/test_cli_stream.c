/* test_cli_stream.c - `omni generate` streams: with stdout on a pipe, answer bytes arrive while the program is
 * still generating (read them, then interrupt it with SIGINT: it must stop, print "Interrupted by user" and exit
 * 130). A normal run ends with the llama.cpp-shaped perf block and the KV line on stderr, nothing else on stdout. */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"

static void interrupted_stream(void) {
    int out[2], err[2];
    if (pipe(out) || pipe(err)) return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        /* effectively endless: no EOS in this model's greedy path for this prompt, large -n and context */
        execl(OMNI_BIN, OMNI_BIN, "generate", "-m", MODEL, "-p", "Tell me everything.", "--raw", "-n", "200000",
              "-c", "200100", "--temp", "1.0", "--top-k", "0", "--top-p", "1", "-s", "7", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    char buf[256];
    ssize_t got = 0, r;
    while (got < 64 && (r = read(out[0], buf, sizeof buf)) > 0) got += r; /* tokens arrive while it runs */
    int still_running = waitpid(pid, NULL, WNOHANG) == 0;
    CHECK(got >= 64 && still_running, "streamed %zd bytes before exit (running: %d)", got, still_running);
    kill(pid, SIGINT);
    while (read(out[0], buf, sizeof buf) > 0) {}
    char ebuf[65536];
    ssize_t en = 0;
    while (en < (ssize_t)sizeof ebuf - 1 && (r = read(err[0], ebuf + en, sizeof ebuf - 1 - en)) > 0) en += r;
    ebuf[en] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130, "exit status %d after SIGINT", status);
    CHECK(strstr(ebuf, "Interrupted by user") != NULL, "no interruption message: %s", ebuf);
    close(out[0]);
    close(err[0]);
}

int main(void) {
    cli_result r = cli_run("generate -m %s -p 'Hello' -n 8 --temp 0", MODEL);
    CHECK(r.code == 0, "exit %d: %s", r.code, r.err);
    const char *lines[] = {"load time =", "prompt eval time =", "tokens per second)", "eval time =", "runs   (",
                           "total time =", "kv_cache: size =", "cells,", "layers,", "K (f32):", "V (f32):"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        CHECK(strstr(r.err, lines[i]) != NULL, "perf/KV block lacks '%s':\n%s", lines[i], r.err);
    CHECK(strstr(r.out, "omni_perf") == NULL && strstr(r.out, "kv_cache") == NULL, "logs on stdout: %s", r.out);
    cli_free(&r);
    r = cli_run("generate -m %s -p 'Hello' -n 8 --temp 0 --kv int2 --kv-window 0", MODEL);
    CHECK(r.code == 0 && strstr(r.err, "K (int2):") && strstr(r.err, "V (int2):"), "int2 KV line: %s", r.err);
    cli_free(&r);
    interrupted_stream();
    return check_exit();
}
